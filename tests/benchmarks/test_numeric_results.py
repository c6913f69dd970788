"""The numeric evaluation (``benchmarks.numeric_results``): its exact window check, query starts, T-Drive matrix,
claim decisions and a tiny end-to-end page.  Deterministic (seeded) unless said otherwise."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from benchmarks import numeric_data, numeric_results as nr
from benchmarks import numeric_experiments as experiments
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.numeric.perturbation import (
    PerturbationParams,
    perturb_streams,
    worst_window_units,
)


@pytest.mark.parametrize("window", [1, 3, 10])
def test_chunked_window_check_equals_the_exact_check(window):
    rng = np.random.default_rng(window)
    slots = 700  # several chunks
    charges = rng.integers(0, 50, (3, slots))
    lags = rng.integers(0, 25, (3, slots))
    first = np.maximum(np.arange(slots) - lags, 0)
    np.testing.assert_array_equal(experiments.windowed_worst_units(charges, first, window),
                                  worst_window_units(charges, first, window))


def test_ledger_counts_a_stream_that_overspends_and_passes_the_strict_one():
    x = np.random.default_rng(0).random((4, 120))
    rng = experiments.generator(7, "test")
    loose = PerturbationParams(1.0, 10, "app", unbounded=True, budget="paper", not_w_event_private=True)
    strict = PerturbationParams(1.0, 10, "app")
    ledger = experiments.Ledger()
    run = perturb_streams(strict, x, rng)
    ledger.check("strict", run.charges, run.first_dependency, 10, 1.0)
    assert ledger.violations == 0 and ledger.worst_fraction <= 1
    run = perturb_streams(loose, x, rng)
    ledger.check("paper", run.charges, run.first_dependency, 10, 1.0)
    assert ledger.violations == 4 and ledger.worst_fraction > 5  # every report depends on all earlier slots
    assert ledger.runs == 2 and ledger.failures == ["paper: 4 rows over ε"]


def test_query_starts_are_the_reference_codes():
    starts = experiments.query_starts(48204, 10)
    np.testing.assert_array_equal(starts, np.arange(40) * 1205)  # h = floor(len/40)
    strict = experiments.query_starts(48204, 10, first=40)
    assert strict[0] == 40 and (strict[1:] == starts[1:]).all()
    assert (experiments.query_starts(50, 10) <= 40).all()


def test_seeded_generators_repeat_for_a_key_and_differ_across_keys():
    draw = lambda *key: experiments.generator(3, *key).uint32(4).tolist()
    assert draw("Volume", "strict", 0, 1) == draw("Volume", "strict", 0, 1)
    assert draw("Volume", "strict", 0, 1) != draw("Volume", "strict", 0, 2)
    assert experiments.generator(None, "x").is_secure


def _tdrive_archive(path):
    lines = {  # taxi 1: two fixes (slot 0 and slot 3), one outside the box; taxi 2: one fix only
        "1": ["1,2008-02-02 00:01:00,116.4,39.9", "1,2008-02-02 00:35:00,116.4,40.1",
              "1,2008-02-02 00:36:00,117.5,40.0"],
        "2": ["2,2008-02-02 00:05:00,116.4,39.95"]}
    with tarfile.open(path, "w:xz") as archive:
        for taxi, rows in lines.items():
            data = ("\n".join(rows) + "\n").encode()
            info = tarfile.TarInfo(f"taxi_log_2008_by_id/{taxi}.txt")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_taxi_matrix_carries_fixes_forward_and_normalises(tmp_path):
    archive = tmp_path / "t.tar.xz"
    _tdrive_archive(archive)
    matrix, _ = numeric_data.taxi_latitudes(archive, slot_seconds=600, min_observed=0.0)
    assert matrix.shape == (2, 1008)
    np.testing.assert_allclose(matrix[0, :3], 0.0)  # 39.9 is the minimum; carried to slots 1, 2
    np.testing.assert_allclose(matrix[0, 3:], 1.0)  # 40.1 the maximum (the fix at 117.5 is outside the box)
    np.testing.assert_allclose(matrix[1], 0.25)     # one fix, carried both ways
    with pytest.raises(ValueError, match="no taxi has fixes"):
        numeric_data.taxi_latitudes(archive, slot_seconds=600, min_observed=0.5)


def _results(a_scale: float, noise: float = 0.01):
    rng = np.random.default_rng(1)
    out = {"mse": {}, "cos": {}}
    for e in (1.0, 2.0):
        for method in experiments.METHODS:
            base = {"capp": a_scale}.get(method, 1.0)
            for metric in ("mse", "cos"):
                out[metric][("strict", method, e)] = base * (1 + noise * rng.standard_normal(6))
                out[metric][("reference", method, e)] = 1 + noise * rng.standard_normal(6)
    return out


def test_claims_hold_only_when_the_pairs_say_so():
    # CAPP 20% lower than everything else under strict: "CAPP < APP" holds there (12 pairs, p = 1/4096), while
    # claims between methods of equal level do not; under reference every method is equal.
    claims = experiments.adjust(experiments.decide("D", "strict", _results(0.8), (1.0, 2.0))
                       + experiments.decide("D", "reference", _results(0.8), (1.0, 2.0)))
    by = {(c.accounting, c.metric, c.a, c.b): c for c in claims}
    assert by[("strict", "mse", "capp", "app")].holds and by[("strict", "mse", "capp", "app")].wins == 12
    assert by[("strict", "cos", "capp", "app")].holds
    assert not by[("strict", "mse", "app", "ipp")].holds
    assert by[("strict", "mse", "ipp", "sw")].holds  # equal levels: "≈" within 10%
    assert not any(c.holds for c in claims if c.accounting == "reference" and c.kind == "<")
    assert all(c.pairs == 12 for c in claims)


def test_page_end_to_end_on_a_tiny_data_dir(tmp_path, capsys):
    folder = tmp_path / "uci_numeric_streams"
    folder.mkdir()
    t = np.arange(600)
    np.savetxt(folder / "volume.csv", 100 + 50 * np.sin(t / 4), header="volume", comments="")
    np.savetxt(folder / "air.csv", 5 + (t % 7), header="air_c6h6", comments="")
    out = tmp_path / "page.md"
    summary = nr.main(["--data-dir", str(tmp_path), "--output", str(out), "--repeats", "2", "--reps", "1",
                       "--insecure-seed", "5", "--skip", "sampling,table1", "--synthetic-length", "200",
                       "--epsilons", "0.5,2", "--no-plots", "--windows", "10,30", "--wide-reps", "2"])
    page = out.read_text()
    assert summary["violations"] == 0 and "**0 violations**" in page
    assert "T-Drive absent" in page  # absent data is said, not hidden
    for name in ("## Volume", "## C6H6", "## Constant", "## Pulse", "## Sinusoidal", "## The paper's ordering",
                 "## δ sweep"):
        assert name in page
    assert "Sampling (Figs 6, 7)" in page and "Not run" in page
    assert summary["claims"] == {10: len(experiments.CLAIMS) * 5, 30: len(experiments.CLAIMS) * 5}
    # the second window: its own section, tables per dataset and accounting, its own claims and counts
    assert "## Figs 4, 5 at w = 30" in page and "### The ordering claims at w = 30 (reference / strict)" in page
    assert "### Sinusoidal, w = 30" in page and "**cosine distance (Fig 5), strict, w = 30**" in page
    assert "2 repetitions of every query on one-user series" in page  # --wide-reps is stated
    holding = summary["claims_holding"][30]
    assert f"* w = 30: {holding['reference']} of 45 claims hold under the reference, {holding['strict']} of 45 " \
           "under the strict accounting ([per dataset](#figs-4-5-at-w--30))." in page
    assert "| 30 | Volume | strict | mse | CAPP < APP | 4 |" in page  # 2 ε × 2 repeats
    assert "Figs 4/5 at w = 50: not run" in page and "w = 30" not in page.split("## Not done")[1]
    assert "## Other base mechanisms (Fig 9)" in page and "PM-APP < PM-direct" in page
    assert summary["fig9_claims"] == len(experiments.FIG9_CLAIMS) * 2  # C6H6 and Volume
    assert "**d = 5, mse, strict**" in page  # Fig 10 under both accountings


@pytest.mark.parametrize("slots", [300, 3000])  # whole streams, and queries with a burn-in
def test_query_slices_line_up_with_the_truth_in_both_accountings(monkeypatch, slots):
    # an identity "release" must give MSE 0: the queries read out of streams are the queries scored
    from transforms.mechanisms.numeric.perturbation import Perturbed

    def identity(method, epsilon, window, accounting, x, rng, base="sw"):
        return Perturbed(x.copy(), np.zeros(x.shape, np.int64), np.broadcast_to(np.arange(x.shape[1]), x.shape),
                         None, True)

    monkeypatch.setattr(experiments, "release", identity)
    values = np.random.default_rng(2).random((3, slots))
    result = experiments.nonsampling(numeric_data.Series("S", values, ""), experiments.Config(repeats=2, reps=2, epsilons=(1.0,)), experiments.Ledger())
    assert all(v.max() == 0 for v in result["mse"].values())
    assert all(v.max() == 0 for v in result["w1"].values())
    assert result["cos"][("strict", "sw", 1.0)].max() < 1e-12  # SW-direct is published raw


def test_acceptance_ranges_follow_the_spec_table():
    (mse_low, mse_high), (cos_low, cos_high) = experiments.acceptance_range(0.5, "capp")
    assert mse_low == pytest.approx(5.27e-2 / 1.12) and mse_high == pytest.approx(5.335e-2 * 1.12)
    assert cos_low == pytest.approx(0.201) and cos_high == pytest.approx(0.249)
    assert experiments.acceptance_range(2.0, "ba-sw") is None  # the stored BA-SW ran at window 1205 (T18)


def test_ss_holds_each_dimensions_last_report_and_fills_the_start_with_the_first():
    values = np.array([[0.0, 0.7, 0.0, 0.0, 0.2, 0.0]])
    reported = np.array([False, True, False, False, True, False])
    np.testing.assert_array_equal(experiments.held(values, reported), [[0.7, 0.7, 0.7, 0.7, 0.2, 0.2]])
    data = experiments.sin_data(3, 100)
    assert data.shape == (3, 100) and data.min() >= 0 and data.max() <= 1
    assert len({tuple(np.round(row[:30], 6)) for row in data}) == 3  # distinct frequencies


@pytest.mark.parametrize("scheme", ["BS", "SS"])
@pytest.mark.parametrize("d", [3, 5])
def test_fig10_strict_runs_stay_within_the_window_and_the_reference_split_would_not(scheme, d):
    w, units = 6, to_units(1.0, "epsilon")
    streams = np.repeat(experiments.sin_data(d, 90)[:, None, :], 2, axis=1)
    released, reports, spent, first = experiments._high_strict(streams, d, w, units, "capp", scheme, experiments.generator(3, "t"))
    assert released.shape == streams.shape and not np.isnan(released).any()
    assert worst_window_units(spent, first, w).max() <= units
    if scheme == "SS":  # one dimension a slot, round robin; the others NaN
        assert (~np.isnan(reports)).sum(axis=0).max() == 1 and (~np.isnan(reports[1][:, 1::d])).all()
    # power: the reference's per-report budget (ε/(d·w) or ε/w) with the same memory overspends a window
    per_report = units // (d * w) if scheme == "BS" else units // w
    loose = np.where(spent > 0, per_report * (d if scheme == "BS" else 1), 0)
    assert worst_window_units(loose, first, w).max() > units


def test_long_query_sampling_is_private_under_strict_and_the_paper_readings_are_measured_apart():
    series = numeric_data.Series("S", np.random.default_rng(4).random((1, 200)), "")
    config = experiments.Config(repeats=2, reps=4, seed=2, epsilons=(1.0, 3.0))
    ledger = experiments.Ledger()
    strict = experiments.sampling_run(series, config, ledger, experiments.LONG_QUERY_SHAPES, "strict", queries=5)
    assert ledger.violations == 0 and ledger.unclaimed_runs == 0
    assert max(strict["worst"].values()) <= 1
    paper = experiments.sampling_run(series, config, ledger, experiments.LONG_QUERY_SHAPES, "paper", queries=5)
    assert ledger.violations == 0 and ledger.unclaimed_runs == len(paper["worst"]) * 2
    # APP with every deviation of a q > w query at ε/w: the first window's change moves all q reports
    assert paper["worst"][(30, 40, "app", 1.0)] == pytest.approx(40 / 30, rel=1e-6)
    assert ledger.unclaimed_over > 0


def test_fig9_reuses_fig4s_sw_runs_and_runs_every_other_base():
    series = numeric_data.Series("S", np.random.default_rng(5).random((1, 400)), "")
    config = experiments.Config(repeats=2, reps=2, seed=1, epsilons=(1.0,))
    fig4 = experiments.nonsampling(series, config, experiments.Ledger())
    ledger = experiments.Ledger()
    bases = experiments.other_bases(series, config, ledger, fig4)
    assert ledger.violations == 0 and ledger.runs == 2 * 9 * 2  # accountings × other-base methods × repeats
    assert set(k for _, k, _ in bases["mse"]) == set(experiments.FIG9_METHODS)
    np.testing.assert_array_equal(bases["mse"][("strict", "sw:capp", 1.0)], fig4["mse"][("strict", "capp", 1.0)])
    claims = experiments.decide("S", "strict", bases, (1.0,), experiments.FIG9_CLAIMS)
    assert [c.text for c in claims][:2] == ["SW-APP < SW-direct", "SW-APP < SW-direct"]
    assert all(c.pairs == 2 for c in claims)


@pytest.mark.parametrize("windows", ["30,50", "10,x", "10,60", "0,10"])
def test_bad_windows_fail_before_any_run(windows, tmp_path, capsys):
    with pytest.raises(SystemExit):
        nr.main(["--data-dir", str(tmp_path), "--output", str(tmp_path / "p.md"), "--windows", windows])
    assert "--windows must" in capsys.readouterr().err and not (tmp_path / "p.md").exists()
