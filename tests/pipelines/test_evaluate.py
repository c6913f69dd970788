"""The evaluation harness: tiny end-to-end sweeps, reproducibility, segment resets, argument errors."""

from __future__ import annotations

import csv
import importlib.util

import numpy as np
import pytest

from pipelines import evaluate
from transforms.mechanisms import metrics

REQUIRED = ["dataset", "mechanism", "epsilon", "window", "ratio", "repeat", "amre", "ajsd", "mre", "mae",
            "seconds_per_slot", "max_window_usage_ratio", "fresh_fraction", "skipped_fraction",
            "nullified_fraction", "users", "slots", "seed"]


def read_rows(directory) -> list[dict]:
    with open(directory / "results.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in evaluate.TIMING_COLUMNS} for row in rows]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    code = evaluate.run(["--users", "300", "--slots", "200", "--repeats", "2", "--sweep", "epsilon",
                         "--mechanisms", "pbd,bd,pba", "--workers", "2", "--output", str(out), "--quiet"])
    return code, out


def test_end_to_end_sweep_writes_one_row_per_run(sweep):
    code, out = sweep
    assert code == 0
    rows = read_rows(out)
    assert set(REQUIRED) <= set(rows[0])
    keys = [(r["dataset"], r["mechanism"], float(r["epsilon"]), r["repeat"]) for r in rows]
    expected = {(d, m, e, str(k)) for d in ("sin", "log", "tlns") for m in ("pbd", "bd", "pba")
                for e in (0.2, 0.4, 0.6, 0.8, 1.0) for k in range(2)}
    assert len(keys) == len(set(keys)) == len(expected) and set(keys) == expected
    assert all(r["window"] == "120" and r["ratio"] == "" and r["sweep"] == "epsilon" for r in rows)
    assert all(r["users"] == "300" and r["slots"] == "200" and r["seed"] == "0" for r in rows)
    assert all(0 < float(r["max_window_usage_ratio"]) <= 1 for r in rows)
    assert all(r["w_event_guarantee_across_segments"] == "true" for r in rows)
    for r in rows:
        fractions = [float(r[k]) for k in ("fresh_fraction", "skipped_fraction", "nullified_fraction")]
        assert sum(fractions) == pytest.approx(1.0)
        assert float(r["amre"]) >= 0 and 0 <= float(r["ajsd"]) <= np.log(2)
        assert "evaluation only" in r["noise"]
    # the two repeats differ (fresh seeds), mechanisms of one repeat share the data but not the noise
    pbd = {(r["dataset"], r["epsilon"], r["repeat"]): r["amre"] for r in rows if r["mechanism"] == "pbd"}
    assert pbd[("sin", "0.6", "0")] != pbd[("sin", "0.6", "1")]


def test_summary_has_the_papers_numbers_and_notes(sweep):
    _, out = sweep
    summary = (out / "summary.md").read_text(encoding="utf-8")
    for dataset in ("sin", "log", "tlns"):
        assert f"## {dataset}, epsilon sweep" in summary
    assert "AMRE (papers)" in summary
    assert "796,008.09" in summary           # PBD, Sin, E = 0.6 (Table 5)
    assert "35,214,891.91" in summary        # BD, TLNS, E = 0.2
    assert summary.count("reference_impl §4.4") == 3
    assert "mean SQUARED error" in summary and "evaluation only" in summary
    if importlib.util.find_spec("matplotlib") is None:
        assert "pip install -e .[plot]" in summary
    else:
        assert (out / "sin_epsilon_amre.png").exists() and (out / "time_per_slot.png").exists()


def test_same_seed_same_results_for_any_worker_count(tmp_path):
    args = ["--users", "120", "--slots", "100", "--repeats", "2", "--sweep", "window,ratio", "--datasets", "tlns",
            "--mechanisms", "pba,dpba", "--seed", "7", "--quiet"]
    assert evaluate.run(args + ["--workers", "1", "--output", str(tmp_path / "one")]) == 0
    assert evaluate.run(args + ["--workers", "2", "--output", str(tmp_path / "two")]) == 0
    one, two = read_rows(tmp_path / "one"), read_rows(tmp_path / "two")
    assert without_timing(one) == without_timing(two)
    # the ratio sweep skips the dynamic mechanisms; the window sweep runs both
    assert {r["mechanism"] for r in one if r["sweep"] == "ratio"} == {"pba"}
    assert {r["mechanism"] for r in one if r["sweep"] == "window"} == {"pba", "dpba"}
    assert sorted({float(r["ratio"]) for r in one if r["sweep"] == "ratio"}) == list(evaluate.RATIOS)


def test_segment_reset_marks_rows(tmp_path):
    assert evaluate.run(["--users", "100", "--slots", "120", "--repeats", "1", "--sweep", "window",
                         "--datasets", "sin", "--mechanisms", "ba,dpbd", "--segment-reset", "50",
                         "--workers", "1", "--output", str(tmp_path), "--quiet"]) == 0
    rows = read_rows(tmp_path)
    assert rows and all(r["w_event_guarantee_across_segments"] == "false" and r["segment_reset"] == "50"
                        for r in rows)
    assert all(float(r["max_window_usage_ratio"]) <= 1 for r in rows)
    assert all(float(r["cross_segment_max_window_usage_ratio"]) >= float(r["max_window_usage_ratio"]) for r in rows)
    assert "NO w-event guarantee across segments" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_evaluate_point_matches_the_metrics_and_replays():
    task = evaluate.Task("log", "pbd", 0.4, 80, None, 0, 200, 60, 3, return_arrays=True)
    row = evaluate.evaluate_point(task)
    released, truth = row["released"], row["truth"]
    assert released.shape == truth.shape == (60, 2)
    assert np.all(truth.sum(axis=1) == 200)
    assert row["amre"] == pytest.approx(metrics.amre(released, truth), rel=1e-12)
    assert row["amre"] == pytest.approx(np.mean((released - truth) ** 2.0), rel=1e-12)
    assert row["ajsd"] == pytest.approx(metrics.ajsd(released, truth), rel=1e-12)
    again = evaluate.evaluate_point(task)
    assert np.array_equal(again["released"], released) and np.array_equal(again["truth"], truth)
    other = evaluate.evaluate_point(evaluate.Task("log", "dpbd", 0.4, 80, None, 0, 200, 60, 3, return_arrays=True))
    assert np.array_equal(other["truth"], truth)  # same data for every mechanism of a point and repeat
    reseeded = evaluate.evaluate_point(evaluate.Task("log", "pbd", 0.4, 80, None, 0, 200, 60, 4, return_arrays=True))
    assert not np.array_equal(reseeded["truth"], truth)  # --seed changes the data


def test_a_violation_is_loud_and_exits_1(tmp_path, monkeypatch, capsys):
    real = evaluate.evaluate_point
    monkeypatch.setattr(evaluate, "evaluate_point", lambda task: {**real(task), "max_window_usage_ratio": 1.5})
    code = evaluate.run(["--users", "50", "--slots", "20", "--repeats", "1", "--sweep", "epsilon", "--datasets", "sin",
                         "--mechanisms", "bd", "--workers", "1", "--output", str(tmp_path), "--quiet"])
    assert code == 1
    assert "PRIVACY VIOLATION" in capsys.readouterr().err
    assert (tmp_path / "results.csv").exists()


@pytest.mark.parametrize("argv, fragment", [
    (["--mechanisms", "pbd,nope"], "unknown mechanism 'nope'"),
    (["--datasets", "taxi"], "unknown dataset 'taxi'"),
    (["--sweep", "users"], "unknown sweep 'users'"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--users", "0"], "--users must be >= 1"),
    (["--slots", "-3"], "--slots must be >= 1"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--segment-reset", "0"], "--segment-reset must be >= 1"),
    (["--sweep", "ratio", "--mechanisms", "dpbd,dpba"], "fixed-requirement"),
    (["--repeats", "many"], "invalid int value"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_arguments_exit_2_with_one_line(argv, fragment, tmp_path, capsys):
    assert evaluate.run(argv + ["--output", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert captured.out == ""
    assert not (tmp_path / "out").exists()
