"""The DPI evaluation (benchmarks/dpi_results.py) at a tiny size: the COVID-19 preprocessing on a fixture, the
baselines' metrics by hand, the paired test's direction, the long run's bookkeeping and the document's tables.
Deterministic (seeded generators, exact sign-flip enumeration): nothing here can fail by chance."""

from __future__ import annotations

import dataclasses
import json
import lzma
import math
import os

import numpy as np
import pytest

from benchmarks import dpi_audit, dpi_page, dpi_runs, dpi_streams
from pipelines.evaluation_data import DEFAULT_DATA_DIR
from transforms.mechanisms.dpi.stream import SoundDPI
from transforms.mechanisms.dpi.theory import KL_SMOOTHING

REAL_COVID = os.path.join(DEFAULT_DATA_DIR, dpi_streams.COVID_FILE)
TINY_SLOTS = {"covid19": 6, "synthetic_a": 6, "synthetic_b": 2, "zipf": 6}
FULL_SLOTS = {"covid19": 1000, "synthetic_a": 3000, "synthetic_b": 2700, "zipf": 1000}


def write_fixture(path, cumulative: dict[str, list[int]]) -> None:
    """A JHU-shaped time series (cumulative confirmed counts per country and day), xz-compressed."""
    series = {country: [{"date": f"2020-1-{22 + d}", "confirmed": c, "deaths": 0, "recovered": 0}
                        for d, c in enumerate(counts)] for country, counts in cumulative.items()}
    with lzma.open(path, "wt") as handle:
        json.dump(series, handle)


def test_covid_preprocessing_on_a_fixture(tmp_path):
    path = tmp_path / "series.json.xz"
    write_fixture(path, {"A": [0, 10, 10, 30], "B": [5, 5, 3, 3], "C": [0, 0, 0, 2], "D": [1, 1, 1, 1]})
    countries, daily = dpi_streams.load_covid_daily(str(path))
    assert countries == ["A", "B", "C", "D"]
    assert daily.tolist() == [[0, 5, 0, 1], [10, 0, 0, 0], [0, -2, 0, 0], [20, 0, 2, 0]]  # B's correction: -2
    counts = dpi_streams.covid_counts(daily, slots=8, records=500, bins=3, gen=np.random.default_rng(1))
    assert counts.shape == (8, 3) and counts.sum() == 500 and counts.min() >= 0
    # items: A (30 cases), B (5, the -2 counts 0), then "other" = C + D; 4 days over 8 slots: 2 slots a day
    assert counts[4:6].sum() == 0  # day 3 has no positive cases
    assert counts[0:2, 0].sum() == 0 and counts[2:4, 1:].sum() == 0 and counts[6:8, 1].sum() == 0
    per_item = counts.sum(axis=0) / 500
    assert per_item == pytest.approx([30 / 38, 5 / 38, 3 / 38], abs=0.06)  # multinomial: sd < 0.02
    assert dpi_streams.covid_counts(daily, 8, 50, 10, np.random.default_rng(1)).shape == (8, 4)  # all fit
    with pytest.raises(ValueError, match="no new cases"):
        dpi_streams.covid_counts(np.zeros((3, 2)), 4, 10, 2, np.random.default_rng(0))


@pytest.mark.skipif(not os.path.exists(REAL_COVID), reason=f"{REAL_COVID} is not on this machine (the JHU COVID-19 "
                    "series lives in ../shared/data, never in the repository)")
def test_the_real_covid_stream_has_the_papers_shape():
    streams, missing = dpi_streams.make_streams(FULL_SLOTS, DEFAULT_DATA_DIR)
    covid = streams[0]
    assert missing is None and covid.name == "covid19"
    counts = np.array(list(dpi_streams.stream_rows(covid, 0, DEFAULT_DATA_DIR)))
    assert counts.shape == (1000, 110) and counts.sum() == 48_925
    assert counts[:50].sum() < counts[-50:].sum()  # the pandemic grows over the period


def test_the_streams_are_the_papers_set_ups_and_without_the_covid_file_it_is_skipped_saying_why(tmp_path):
    streams, missing = dpi_streams.make_streams(FULL_SLOTS, str(tmp_path))
    assert "COVID-19 skipped" in missing and str(tmp_path) in missing
    by_name = {s.name: s for s in streams}
    assert [s.name for s in streams[:2]] == ["synthetic_a", "zipf"]
    assert by_name["synthetic_a"].slots == 3000 and by_name["synthetic_a"].bins == 100
    b = [s for s in streams if s.kind == "synthetic_b"]
    assert [(s.bins, s.sigma) for s in b] == [(k, j) for k in (1000, 10_000) for j in range(1, 11)]  # App. E.2
    assert all(s.slots == 2700 and s.epsilons == (0.5, *range(1, 11)) and dpi_streams.WEVENT not in s.methods
               for s in b)
    assert dpi_streams.WEVENT in by_name["synthetic_a"].methods
    a = np.array(list(dpi_streams.stream_rows(dataclasses.replace(by_name["synthetic_a"], slots=6), 0, "unused")))
    assert a.shape == (6, 100) and abs(a.mean() - 100) < 2


def test_synthetic_b_is_drawn_slot_by_slot_with_its_law_and_afresh_per_repeat():
    """N(1000, σ²) per item: over 20 slots x 1,000 items the mean is within 6 standard errors (σ/141) of 1,000
    and the standard deviation within 5% of σ (about 10 of its standard errors): false failure below 1e-8."""
    stream = dpi_streams.make_streams({**FULL_SLOTS, "synthetic_b": 20}, "unused", b_sigmas=(7,), b10k_sigmas=())[0][-1]
    assert stream.name == "synthetic_b_k1000_s7"
    rows = dpi_streams.stream_rows(stream, 3, "unused")
    first = next(rows)
    assert first.shape == (1000,) and first.dtype == np.int64
    counts = np.array([first, *rows])
    assert counts.shape == (20, 1000)
    assert abs(counts.mean() - 1000) < 6 * 7 / math.sqrt(counts.size) and abs(counts.std() / 7 - 1) < 0.05
    assert np.array_equal(counts, np.array(list(dpi_streams.stream_rows(stream, 3, "unused"))))
    assert not np.array_equal(counts, np.array(list(dpi_streams.stream_rows(stream, 4, "unused"))))


def test_uniform_and_exact_metrics_by_hand():
    counts = np.array([[3, 1], [0, 0], [1, 3]])
    result = dpi_runs.run_methods(counts, 1.0, 0, methods=("uniform", "exact"))
    truths = [np.array([0.75, 0.25]), np.array([0.75, 0.25]), np.array([0.5, 0.5])]
    mse = np.mean([np.mean((t - 0.5) ** 2) for t in truths])
    kl = np.mean([np.sum(t * np.log(t / 0.5)) for t in truths])
    assert result["uniform"]["mse"] == pytest.approx(mse, rel=1e-12) and mse == pytest.approx(1 / 24)
    assert result["uniform"]["kl"] == pytest.approx(kl, rel=1e-6)
    assert result["exact"]["mse"] == 0 and abs(result["exact"]["kl"]) < 10 * KL_SMOOTHING


def test_to_pdf_clips_and_falls_back_to_uniform():
    assert dpi_streams.to_pdf(np.array([-3, 1, 3])).tolist() == [0, 0.25, 0.75]
    assert dpi_streams.to_pdf(np.array([-1, 0, 0, 0])).tolist() == [0.25] * 4


def test_every_epsilon_in_lock_step_gives_what_each_run_alone_gives():
    """The ε of a stream share the data, the seed, the pool and its distances: the same numbers as separate runs."""
    counts = dpi_streams.zipf_counts(12, 8, 40, 1.5, np.random.default_rng(2))
    together = dpi_runs.run_stream(iter(counts), [0.5, 4.0], 5)
    for epsilon in (0.5, 4.0):
        alone = dpi_runs.run_methods(counts, epsilon, 5)
        assert set(alone) == set(together[epsilon])
        for m, result in alone.items():
            assert {k: v for k, v in result.items() if k != "seconds"} \
                == {k: v for k, v in together[epsilon][m].items() if k != "seconds"}
            if m not in ("uniform", "exact"):
                assert result["ledger_slots"] == 12


def test_an_overspend_stops_the_evaluation(monkeypatch):
    """The privacy ledger checks every run: a mechanism charging beyond its lifetime budget raises."""
    original = SoundDPI._run

    def overcharging(self, data, truths, units, rng):
        outputs, charged, statistics = original(self, data, truths, units, rng)
        return outputs, charged + self.params.epsilon_units, statistics

    monkeypatch.setattr(SoundDPI, "_run", overcharging)
    counts = dpi_streams.zipf_counts(3, 8, 40, 1.5, np.random.default_rng(2))
    with pytest.raises(RuntimeError, match="privacy ledger found an overspend by dpi-sound"):
        dpi_runs.run_stream(iter(counts), [1.0], 0, ("dpi-sound",))


def test_every_method_runs_within_its_budget_and_dpi_reports_both_figures():
    counts = dpi_streams.zipf_counts(30, 8, 50, 1.5, np.random.default_rng(0))
    result = dpi_runs.run_methods(counts, 2.0, 3)
    assert set(result) == set(dpi_streams.METHODS)
    for m in dpi_streams.DPI_METHODS:
        assert 0 < result[m]["eps_charged"] <= 2.0 and result[m]["mse"] > 0
    assert result["dpi"]["eps_claimed"] < result["dpi"]["eps_charged"]  # the claim is below the sound figure
    assert result["dpi-sound"]["eps_claimed"] == result["dpi-sound"]["eps_charged"]
    assert result["bd"]["mse"] < result["uniform"]["mse"]  # 50 records a slot over 8 Zipf items: counts help
    again = dpi_runs.run_methods(counts, 2.0, 3)  # seeded: reproducible (all but the timings)
    assert all({k: v for k, v in again[m].items() if k != "seconds"}
               == {k: v for k, v in result[m].items() if k != "seconds"} for m in result)


def _runs(dpi_errors, uniform_errors):
    return [{"stream": "s", "epsilon": 1.0, "seed": i, "sweep": None,
             "results": {"dpi": {"mse": d, "kl": d}, "dpi-sound": {"mse": u, "kl": u}, "uniform": {"mse": u, "kl": u}}}
            for i, (d, u) in enumerate(zip(dpi_errors, uniform_errors))]


def test_the_paired_test_points_the_right_way():
    rows = dpi_runs.paired_rows(_runs([1, 2, 3, 4, 5], [2, 3, 4, 5, 6]))  # dpi lower in every pair
    dpi = [r for r in rows if r["variant"] == "dpi"]
    assert all(r["wins"] == 5 and r["p_better"] == pytest.approx(1 / 32) and r["p_worse"] == 1.0 for r in dpi)
    assert all(r["verdict"] == "better than uniform" and r["ratio"] < 1 for r in dpi)
    tied = [r for r in rows if r["variant"] == "dpi-sound"]  # equal errors: no evidence either way
    assert all(r["verdict"] == "no better than uniform" and r["p_better"] == 1.0 for r in tied)
    worse = dpi_runs.paired_rows(_runs([2, 3, 4, 5, 6], [1, 2, 3, 4, 5]))
    assert all(r["verdict"] == "no better than uniform" and r["p_worse"] == pytest.approx(1 / 32)
               for r in worse if r["variant"] == "dpi")


def test_the_long_run_stays_fresh_and_reports_memory():
    result = dpi_runs.long_run(slots=40, bins=20, epsilon=2.0, seed=0, marks=4)
    assert result["fresh"] == 40 and 0 < result["eps_charged"] <= 2.0
    assert result["rba_indices"] >= 40 and result["rba_mb"] > 0  # one series index at least per fresh slot
    assert [c["slot"] for c in result["checkpoints"]] == [10, 20, 30, 40]
    assert all(c["rss_mb"] > 0 and c["median_kl"] > 0 for c in result["checkpoints"])
    assert result["peak_rss_mb"] >= result["checkpoints"][-1]["rss_mb"] * 0.99


def tiny_streams():
    """Small streams of ``make_streams``'s kinds (the real synthetic B is 10^6 records a slot over 2,700 slots)."""
    streams, _ = dpi_streams.make_streams(TINY_SLOTS, "unused", b_sigmas=(1, 10), b10k_sigmas=(),
                                          epsilons=(1.0,), b_epsilons=(1.0, 2.0))
    return [s if s.kind != "synthetic_b" else dataclasses.replace(s, bins=20, name=s.name.replace("k1000", "k20"))
            for s in streams]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_document_has_every_method_and_the_labels(workers):
    streams = tiny_streams()  # no COVID: sweeps on synthetic A
    results = dpi_runs.evaluate(2, 0, streams, "unused", workers=workers)
    results["missing"] = "COVID-19 skipped: not in this test"
    results["paired"] = dpi_runs.paired_rows(results["runs"])
    results["long_run"] = dpi_runs.long_run(20, 10, 2.0, 0, marks=2)
    results["audit"] = {"slots": 20, "variants": {n: dpi_audit.audit(n, 20, 50)
                                                  for n in dpi_streams.DPI_METHODS}}
    results["config"] = {"command": "test", "repeats": 2, "b_repeats": 2, "seed": 0, "slots": TINY_SLOTS,
                         "long_slots": 20, "sweep_stream": results.pop("sweep_stream"), "wall_seconds": 1.0}
    document = dpi_page.render(results)
    for stream in ("synthetic_a", "zipf"):
        section = document.split(f"## {stream}\n")[1].split("\n## ")[0]
        header = section.strip().splitlines()[0]
        for method in dpi_streams.METHODS:
            assert method in header
        assert dpi_streams.WEVENT_LABEL in header and "w-event, not lifetime" in header
        assert section.count("| 1 | MSE |") == 1 and section.count("| 1 | KL |") == 1
    assert "COVID-19 skipped" in document and "## Hyper-parameter sweeps (Fig. 3) on synthetic_a" in document
    assert document.count("better than uniform |") == 8  # 2 streams x 2 variants x 2 metrics (B's: in the JSON)
    assert len(results["paired"]) == 8 + 2 * 2 * 2 * 2  # B: 2 datasets x 2 ε x 2 variants x 2 metrics
    section = document.split("## Synthetic B, k = 20 (App. E.2)\n")[1].split("\n## ")[0]
    assert section.count("\n| 1 | ") == 1 and section.count("\n| 10 | ") == 1 and " of 4 |" in section
    assert "| synthetic B, k = 1,000 (App. E.2) | 10 datasets" in document
    assert "none was over its budget" in document
    assert [r["seed"] for r in results["runs"] if r["stream"] == "zipf"] == [0, 1]  # the repeats, in order
    assert "Scaled down from the paper's 200,000 slots" in document and "| `dpi` | " in document
    assert "| `dpi-sound` | " in document and "(unaffected)" in document  # λ does not enter dpi-sound
    for stream in ("synthetic_a", "zipf"):
        for variant in dpi_streams.DPI_METHODS:
            assert document.count(f"| {stream} | `{variant}` | ") == 1  # the plain summary's row
    assert f"closer than L1 {results['sweep_min_distance']:.3f}" in document
    assert not any(math.isnan(r["results"]["dpi"]["mse"]) for r in results["runs"])
