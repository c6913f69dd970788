"""The evaluation harness: tiny end-to-end sweeps (synthetic, event files, real data when present), the
papers' claims recomputed, the generators and metrics against their formulas, argument errors."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os

import numpy as np
import pytest

from pipelines import evaluate
from pipelines.evaluation_data import DEFAULT_DATA_DIR
from transforms.mechanisms import metrics
from transforms.mechanisms.synthetic import log_probabilities, sin_probabilities, tlns_probabilities

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
                         "--datasets", "sin,log,tlns", "--mechanisms", "pbd,bd,pba", "--workers", "2",
                         "--output", str(out), "--quiet"])
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
    assert all(r["users"] == "300" and r["slots"] == "200" and r["seed"] == "0" and r["bins"] == "2" for r in rows)
    assert all(0 < float(r["max_window_usage_ratio"]) <= 1 for r in rows)
    assert all(r["w_event_guarantee_across_segments"] == "true" for r in rows)
    for r in rows:
        fractions = [float(r[k]) for k in ("fresh_fraction", "skipped_fraction", "nullified_fraction")]
        assert sum(fractions) == pytest.approx(1.0)
        assert float(r["amre"]) >= 0 and 0 <= float(r["ajsd"]) <= np.log(2)
        assert "evaluation only" in r["noise"]
    # the two repeats differ (fresh seeds); mechanisms of one repeat share the data and the noise seed
    pbd = {(r["dataset"], r["epsilon"], r["repeat"]): r["amre"] for r in rows if r["mechanism"] == "pbd"}
    assert pbd[("sin", "0.6", "0")] != pbd[("sin", "0.6", "1")]


def test_summary_has_the_papers_numbers_claims_and_plots(sweep):
    _, out = sweep
    summary = (out / "summary.md").read_text(encoding="utf-8")
    for dataset in ("Sin", "Log", "TLNS"):
        assert f"### {dataset}: E varies" in summary
    assert "*papers*" in summary
    assert "*796,008.09*" in summary         # PBD, Sin, E = 0.6 (Table 5)
    assert "*35,214,891.91*" in summary      # BD, TLNS, E = 0.2
    assert summary.count(evaluate.PAPER_NOTE) == 3
    assert "mean SQUARED error" in summary and "evaluation only" in summary
    # the claims whose two mechanisms ran are checked, with the papers' own percentage beside ours
    assert "### PBD below BD on every dataset: **" in summary
    assert "| Sin | E |" in summary and "+76.6%" in summary       # the papers' 1 - PBD/BD on Sin, Table 5
    assert "PBA better than PBD on the smooth synthetic streams" in summary
    assert "PBA below BA" not in summary                          # BA did not run
    assert "0 violations" in summary and "Extrapolated, not measured" not in summary
    if importlib.util.find_spec("matplotlib") is None:
        assert "pip install -e .[plot]" in summary
    else:
        for name in ("amre_vs_epsilon.png", "ajsd_vs_epsilon.png", "time_vs_epsilon.png"):
            assert (out / name).exists() and f"]({name})" in summary


def test_same_seed_same_results_for_any_worker_count(tmp_path):
    args = ["--users", "120", "--slots", "100", "--repeats", "2", "--sweep", "window,ratio,wratio",
            "--datasets", "tlns",
            "--mechanisms", "pba,dpba", "--seed", "7", "--no-plots", "--quiet"]
    assert evaluate.run(args + ["--workers", "1", "--output", str(tmp_path / "one")]) == 0
    assert evaluate.run(args + ["--workers", "2", "--output", str(tmp_path / "two")]) == 0
    one, two = read_rows(tmp_path / "one"), read_rows(tmp_path / "two")
    assert without_timing(one) == without_timing(two)
    # the ratio sweeps skip the dynamic mechanisms; the window sweep runs both, DPBA under every scenario
    assert {r["mechanism"] for r in one if r["sweep"] in ("ratio", "wratio")} == {"pba"}
    assert {r["mechanism"] for r in one if r["sweep"] == "window"} == {"pba", "dpba", "dpba:held", "dpba:drifting"}
    assert {r["scenario"] for r in one if r["mechanism"].startswith("dpba")} == {"redrawn", "held", "drifting"}
    for sweep in ("ratio", "wratio"):
        assert sorted({float(r["ratio"]) for r in one if r["sweep"] == sweep}) == list(evaluate.RATIOS)


def test_segment_reset_marks_rows(tmp_path):
    assert evaluate.run(["--users", "100", "--slots", "120", "--repeats", "1", "--sweep", "window",
                         "--datasets", "sin", "--mechanisms", "ba,dpbd", "--segment-reset", "50",
                         "--workers", "1", "--output", str(tmp_path), "--no-plots", "--quiet"]) == 0
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


def test_one_stream_and_one_noise_seed_for_every_ratio_mechanism_and_scenario():
    """Paired runs: every o of both ratio experiments, every mechanism and every requirement scenario of a repeat
    see the same data and get the same noise seed; the requirement mix is all that differs."""
    def task(mechanism, ratio=None, ratio_of="epsilon", repeat=0):
        return evaluate.Task("sin", mechanism, 0.6, 120, ratio, repeat, 150, 80, 0, return_arrays=True,
                             ratio_of=ratio_of)
    truth = evaluate.evaluate_point(task("pbd"))["truth"]
    for ratio, ratio_of in ((0.1, "epsilon"), (0.9, "epsilon"), (0.5, "window")):
        assert np.array_equal(evaluate.evaluate_point(task("pba", ratio, ratio_of))["truth"], truth)
    assert np.array_equal(evaluate.evaluate_point(task("dpbd:held"))["truth"], truth)
    seeds = {evaluate._seeds(task(m, o, of))[2] for m in ("pbd", "pba", "adaptive", "dpbd:drifting")
             for o, of in ((None, "epsilon"), (0.3, "epsilon"), (0.7, "window"))}
    assert len(seeds) == 1
    assert evaluate._seeds(task("pbd", repeat=1))[2] not in seeds       # a new repeat, new noise
    # the requirement mix differs: PBA at o = 0.1 and o = 0.9 on the same stream release different histograms
    low, high = (evaluate.evaluate_point(task("pba", o))["released"] for o in (0.1, 0.9))
    assert not np.array_equal(low, high)


def test_requirement_scenarios_reach_the_dynamic_mechanisms():
    rows = {label: evaluate.evaluate_point(evaluate.Task("sin", label, 0.4, 120, None, 0, 100, 150, 0,
                                                         drift_every=30))
            for label in ("dpbd", "dpbd:held", "dpbd:drifting")}
    assert [rows[label]["scenario"] for label in rows] == ["redrawn", "held", "drifting"]
    assert len({rows[label]["amre"] for label in rows}) == 3        # three different requirement streams
    assert all(row["ledger_violations"] == 0 for row in rows.values())
    assert evaluate.run_labels(["pbd", "dpba"], ["held", "redrawn"]) == ["pbd", "dpba:held", "dpba"]


def test_a_violation_is_loud_and_exits_1(tmp_path, monkeypatch, capsys):
    real = evaluate.evaluate_point
    monkeypatch.setattr(evaluate, "evaluate_point", lambda task: {**real(task), "max_window_usage_ratio": 1.5})
    code = evaluate.run(["--users", "50", "--slots", "20", "--repeats", "1", "--sweep", "epsilon", "--datasets", "sin",
                         "--mechanisms", "bd", "--workers", "1", "--output", str(tmp_path), "--no-plots", "--quiet"])
    assert code == 1
    assert "PRIVACY VIOLATION" in capsys.readouterr().err
    assert (tmp_path / "results.csv").exists()


@pytest.mark.parametrize("argv, fragment", [
    (["--mechanisms", "pbd,nope"], "unknown mechanism 'nope'"),
    (["--datasets", "paris"], "unknown dataset 'paris'"),
    (["--datasets", "events"], "dataset 'events' needs --input"),
    (["--input", "/nonexistent/*.jsonl", "--binning", "int:2"], "matches no readable file"),
    (["--input", __file__, "--binning", "hex:3"], "bad bin spec"),
    (["--datasets", "taxi", "--data-dir", "/nonexistent"], "nothing to run: taxi: /nonexistent"),
    (["--repeats", "epsilon=0"], "--repeats epsilon must be >= 1"),
    (["--repeats", "users=3"], "unknown sweep 'users'"),
    (["--report", "results.txt"], "--report must name a .md file"),
    (["--from-csv", "/nonexistent.csv"], "--from-csv '/nonexistent.csv' does not exist"),
    (["--sweep", "users"], "unknown sweep 'users'"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--users", "0"], "--users must be >= 1"),
    (["--slots", "-3"], "--slots must be >= 1"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--segment-reset", "0"], "--segment-reset must be >= 1"),
    (["--sweep", "ratio", "--mechanisms", "dpbd,dpba"], "fixed-requirement"),
    (["--sweep", "ratio,wratio", "--mechanisms", "dpbd"], "fixed-requirement"),
    (["--scenarios", "sometimes"], "unknown scenario 'sometimes'"),
    (["--drift-every", "0"], "--drift-every must be >= 1"),
    (["--repeats", "many"], "--repeats must be an integer >= 1, got 'many'"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_arguments_exit_2_with_one_line(argv, fragment, tmp_path, capsys):
    assert evaluate.run(argv + ["--output", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- claims
# The spec's recomputation of every percentage the papers state (spec/pwsm.md §5.4): (better, worse, dataset,
# Table 5 value, Table 6 value).  Matching them checks the transcribed tables and the formula.
STATED = [("pbd", "bd", "taxi", 72.6, 63.3), ("pbd", "bd", "foursquare", 72.0, 65.8),
          ("dpbd", "bd", "taxi", 73.5, 62.7), ("dpbd", "bd", "foursquare", 93.3, 85.8),
          ("pba", "ba", "tlns", 30.2, 22.9), ("pba", "ba", "sin", 24.6, 11.4), ("pba", "ba", "log", 21.1, 11.7),
          ("dpba", "ba", "tlns", 70.6, 66.6), ("dpba", "ba", "sin", 61.0, 54.6), ("dpba", "ba", "log", 63.6, 53.6)]


@pytest.mark.parametrize("better, worse, dataset, table5, table6", STATED)
def test_reduction_reproduces_the_papers_stated_percentages(better, worse, dataset, table5, table6):
    for sweep, stated in (("epsilon", table5), ("window", table6)):
        paper = evaluate.PAPER_AMRE[(dataset, sweep)]
        assert round(evaluate.reduction(paper[better], paper[worse]), 1) == stated


def test_reduction_is_the_mean_of_one_minus_the_ratios():
    assert evaluate.reduction([1, 3], [2, 2]) == pytest.approx(100 * ((1 - 0.5) + (1 - 1.5)) / 2)
    # the papers' Table 5 E = 0.6 column is their Table 6 w = 120 column (spec §5.2)
    for (dataset, sweep), table in evaluate.PAPER_AMRE.items():
        if sweep == "epsilon":
            other = evaluate.PAPER_AMRE[(dataset, "window")]
            assert all(table[m][2] == other[m][2] for m in table)


def rows_with(amre: dict[str, list[float]], dataset="sin", sweep="epsilon", repeats=3, jitter=0.0) -> list[dict]:
    """Result rows whose AMRE per point is given (repeat k multiplied by 1 + k * jitter)."""
    points = [p[("epsilon", "window", "ratio").index(evaluate.SWEEP_COLUMN[sweep])] for p in evaluate.SWEEPS[sweep]]
    return [{"dataset": dataset, "sweep": sweep, "mechanism": m, evaluate.SWEEP_COLUMN[sweep]: p, "repeat": k,
             "amre": v * (1 + k * jitter)}
            for m, values in amre.items() for p, v in zip(points, values) for k in range(repeats)]


def test_claims_are_decided_by_paired_tests():
    rows = rows_with({"pbd": [2, 2, 2, 2, 2], "bd": [4, 4, 4, 4, 4],          # PBD below BD in every pair
                      "pba": [1, 5, 1, 5, 1], "dpba": [9, 9, 9, 9, 9],         # DPBA above PBA in every pair
                      "dpbd": [2, 2, 2, 2, 2], "dpbd:held": [1, 1, 1, 1, 1]})  # redrawn equal, held below
    checks = {(c.better, c.claim.worse): c for c in evaluate.check_claims(rows, ["sin"])}
    pbd_bd = checks[("pbd", "bd")]
    # 15 pairs all with log(A/B) = log(1/2): the exact sign-flip p-value is 2^-15, Holm multiplies by at most 2 x 6
    assert pbd_bd.test.pairs == 15 and pbd_bd.test.wins == 15 and pbd_bd.test.ratio == pytest.approx(0.5)
    assert pbd_bd.test.p_value == pytest.approx(2.0 ** -15)
    assert pbd_bd.verdict == "holds" and pbd_bd.ours == pytest.approx(50.0)
    assert pbd_bd.papers == pytest.approx(evaluate.reduction(evaluate.PAPER_AMRE[("sin", "epsilon")]["pbd"],
                                                             evaluate.PAPER_AMRE[("sin", "epsilon")]["bd"]))
    assert checks[("dpba", "pba")].verdict == "reversed"
    assert checks[("dpbd", "pbd")].verdict == "not shown"            # equal is not below
    assert checks[("dpbd:held", "pbd")].verdict == "holds"           # the scenario is checked on its own
    assert checks[("pba", "pbd")].verdict == "not shown"             # wins at 3 points, loses at 2
    assert ("pba", "ba") not in checks                               # BA did not run
    assert ("dpbd", "bd") not in checks                              # a real-stream claim, Sin is synthetic
    found = list(checks.values())
    lines = "\n".join(evaluate._claims_section(found) + evaluate._scenario_section(found))
    assert "### PBD below BD on every dataset: **holds**" in lines
    assert "### DPBD below PBD: **shown on 1 of 2, reversed on 0**" in lines
    assert "| DPBD below PBD | held | 1 of 1 | 0 of 1 | 0.500 |" in lines
    assert "* **DPBD below PBD** needs requirements that stay put: it holds most often under `held` (redrawn 0 of 1, " \
           "held 1 of 1)." in lines
    assert "* **DPBA below PBA** holds under no scenario (redrawn 0 of 1)." in lines


def test_incomplete_sweeps_are_not_checked():
    rows = rows_with({"pbd": [1, 1, 1, 1, 1], "bd": [2, 2, 2, 2, 2]})
    rows = [r for r in rows if not (r["mechanism"] == "bd" and r["epsilon"] == 1.0)]
    assert evaluate.check_claims(rows, ["sin"]) == []


# ---------------------------------------------------------------------------------------------- generators
def test_log_stream_mean_lies_between_its_integrals():
    # p is increasing, so sum_{t=1}^{T} p(t) lies between the integrals of p over [0, T] and [1, T + 1];
    # the integral of A/(1 + e^(-bx)) is (A/b) ln(1 + e^(bx)).
    slots, amplitude, rate = 10_000, 0.25, 0.01
    integral = lambda x: amplitude / rate * math.log1p(math.exp(rate * x))  # noqa: E731
    lower = (integral(slots) - integral(0)) / slots
    upper = (integral(slots + 1) - integral(1)) / slots
    assert upper - lower < 2e-5
    assert lower <= log_probabilities(slots).mean() <= upper
    assert log_probabilities(slots).mean() == pytest.approx(0.24827, abs=1e-5)


def test_tlns_clipping_rate_matches_the_spec():
    # spec §5.1: with p_0 = 0.05 and no rounding, a median of 62 clipped slots over 200 seeds, 22% of seeds at
    # most 8 (the paper's own count), every clip below 0.  Seeds 0..199 are fixed, so this is deterministic; the
    # bounds leave about 4 standard errors of the seed sample either side.
    paths = [tlns_probabilities(10_000, np.random.default_rng(seed)) for seed in range(200)]
    counts = np.array([p.clipped_slots for p in paths])
    assert 40 <= np.median(counts) <= 90
    assert 0.13 <= np.mean(counts <= 8) <= 0.31
    assert all(np.count_nonzero(p.probabilities == 0.0) == p.clipped_slots for p in paths)   # never at 1


@pytest.mark.parametrize("dataset, probabilities", [("sin", sin_probabilities(400)), ("log", log_probabilities(400))])
def test_the_harness_streams_follow_the_formulas(dataset, probabilities):
    users = 2_000
    row = evaluate.evaluate_point(evaluate.Task(dataset, "bd", 0.6, 40, None, 0, users, 400, 0, return_arrays=True))
    ones = row["truth"][:, 1]
    assert np.all(row["truth"].sum(axis=1) == users)
    # each slot's count of ones is Binomial(N, p_t): the total is within 5 standard deviations of its mean
    expected, variance = users * probabilities.sum(), users * (probabilities * (1 - probabilities)).sum()
    assert abs(ones.sum() - expected) < 5 * math.sqrt(variance)
    # and follows the shape: the slots' counts correlate with p_t
    assert np.corrcoef(ones, probabilities)[0, 1] > 0.9


# ---------------------------------------------------------------------------------------------- metrics
def test_metrics_on_a_hand_computed_example():
    released = np.array([[3, 1], [-1, 4]])
    true = np.array([[2, 2], [1, 3]])
    report = metrics.utility_report(released, true)
    assert report.amre == pytest.approx((1 + 1 + 4 + 1) / 4)             # a mean SQUARED error
    assert report.mae == pytest.approx((1 + 1 + 2 + 1) / 4)
    assert report.mre == pytest.approx((1 / 2 + 1 / 2 + 2 / 1 + 1 / 3) / 4)
    # AJSD: r clipped at 0 and normalised: slot 1 r = (3/4, 1/4), c = (1/2, 1/2); slot 2 r = (0, 1), c = (1/4, 3/4)
    slot1 = 0.5 * (0.75 * math.log(0.75 / 0.625) + 0.25 * math.log(0.25 / 0.375)
                   + 0.5 * math.log(0.5 / 0.625) + 0.5 * math.log(0.5 / 0.375))
    slot2 = 0.5 * (1 * math.log(1 / 0.875) + 0.25 * math.log(0.25 / 0.125) + 0.75 * math.log(0.75 / 0.875))
    assert report.ajsd == pytest.approx((slot1 + slot2) / 2)


# ---------------------------------------------------------------------------------------------- real streams
def test_an_event_file_runs_end_to_end_with_repeats_per_sweep(tmp_path):
    events = tmp_path / "events.jsonl"
    with open(events, "w", encoding="utf-8") as handle:
        for user in range(40):
            for slot in range(0, 90, 1 + user % 7):                 # users report at different rates
                handle.write(json.dumps({"user": f"u{user}", "time": 60.0 * slot + user, "value": (user + slot) % 3})
                             + "\n")
    out = tmp_path / "out"
    code = evaluate.run(["--input", str(events), "--binning", "int:3", "--slot-seconds", "60", "--datasets", "events",
                         "--sweep", "epsilon,ratio", "--repeats", "1,epsilon=2", "--mechanisms", "pbd,dpbd",
                         "--workers", "1", "--output", str(out), "--report", str(tmp_path / "doc.md"), "--no-plots",
                         "--quiet"])
    assert code == 0
    rows = read_rows(out)
    assert {r["dataset"] for r in rows} == {"events"}
    assert all(r["users"] == "40" and r["slots"] == "90" and r["bins"] == "3" for r in rows)
    assert {r["repeat"] for r in rows if r["sweep"] == "epsilon"} == {"0", "1"}
    assert {r["repeat"] for r in rows if r["sweep"] == "ratio"} == {"0"}
    assert {r["mechanism"] for r in rows if r["sweep"] == "ratio"} == {"pbd"}
    assert all(float(r["max_window_usage_ratio"]) <= 1 for r in rows)
    document = (tmp_path / "doc.md").read_text(encoding="utf-8")
    assert document.startswith("# Evaluation results")
    assert "python -m pipelines.evaluate --input " in document and "--report " in document
    assert "| Events | 40 | 90 | 3 |" in document
    assert (tmp_path / "doc" / "results.csv").exists()
    assert "DPBD below PBD: **" in document
    # the same document again from the run's results.csv, without running anything
    again = tmp_path / "again.md"
    assert evaluate.run(["--input", str(events), "--binning", "int:3", "--slot-seconds", "60", "--datasets", "events",
                         "--sweep", "epsilon,ratio", "--repeats", "1,epsilon=2", "--mechanisms", "pbd,dpbd",
                         "--workers", "1", "--output", str(tmp_path / "out2"), "--report", str(again), "--no-plots",
                         "--quiet",
                         "--from-csv", str(tmp_path / "doc" / "results.csv")]) == 0
    rendered = again.read_text(encoding="utf-8")
    assert rendered.split("## Setup")[1] == document.split("## Setup")[1]
    assert "--from-csv" not in rendered.split("```")[1] and "from that command's results" in rendered
    # the run's own wall time and commit, kept in run.json beside its results, head the re-rendered copy
    run = json.loads((tmp_path / "doc" / "run.json").read_text(encoding="utf-8"))
    assert run["command"] == document.split("```")[1].strip() and run["wall_seconds"] > 0
    assert f"in **{run['wall_seconds'] / 60:.1f} minutes of wall time**" in rendered
    assert read_rows(tmp_path / "again") == read_rows(tmp_path / "doc")


REAL_DATA = [os.path.join(DEFAULT_DATA_DIR, "tdrive_sample600", "taxi_log_2008_by_id.tar.xz"),
             os.path.join(DEFAULT_DATA_DIR, "foursquare_us5k", "Foursquare_checkins.txt.xz")]


@pytest.mark.skipif(not all(map(os.path.exists, REAL_DATA)), reason=f"the real datasets ({', '.join(REAL_DATA)}) "
                    "are not on this machine; they stay outside the repository (licences)")
def test_a_tiny_real_data_run(tmp_path):
    code = evaluate.run(["--datasets", "taxi,foursquare", "--users", "12", "--slots", "150", "--repeats", "1",
                         "--sweep", "epsilon", "--mechanisms", "bd,pbd,dpbd", "--workers", "2",
                         "--output", str(tmp_path), "--no-plots", "--quiet"])
    assert code == 0
    rows = read_rows(tmp_path)
    assert {r["dataset"] for r in rows} == {"taxi", "foursquare"}
    assert all(r["bins"] == "100" and r["slots"] == "150" and int(r["users"]) <= 12 for r in rows)
    assert all(float(r["max_window_usage_ratio"]) <= 1 for r in rows)
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "*8,459.58*" in summary and "*13,725.14*" in summary        # the papers' BD at E = 0.2
    assert "| Taxi | E |" in summary and "+72.6%" in summary          # the papers' 1 - PBD/BD on Taxi
    assert "1-minute slots" in summary and "100-minute slots" in summary


def test_missing_real_data_is_skipped_saying_why(tmp_path, capsys):
    code = evaluate.run(["--datasets", "sin,taxi", "--data-dir", str(tmp_path / "none"), "--users", "30",
                         "--slots", "20", "--repeats", "1", "--sweep", "epsilon", "--mechanisms", "bd",
                         "--workers", "1", "--output", str(tmp_path / "out"), "--no-plots"])
    assert code == 0
    assert "skipping taxi: " in capsys.readouterr().err
    assert {r["dataset"] for r in read_rows(tmp_path / "out")} == {"sin"}
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "**Taxi skipped**: taxi: " in summary and "is not on this machine" in summary


def test_full_sweep_estimate_uses_cpu_time_and_old_results_their_wall_time():
    """A run's CPU time does not count waiting for a shared machine's cores; results written before
    cpu_seconds existed are estimated from their wall time, and the document says which."""
    rows = [{"dataset": "sin", "sweep": "epsilon", "mechanism": m, "epsilon": e, "users": 10, "slots": 20,
             "wall_seconds": 5.0, "cpu_seconds": 2.0, "seconds_per_slot": 0.001}
            for m in evaluate.FULL_SWEEP_MECHANISMS for e in (0.2, 0.4, 0.6, 0.8, 1.0)]
    runs = len(rows) * evaluate.EPSILON_REPEATS
    assert evaluate.full_sweep_estimate(rows, "sin", 2) == (runs * 2.0 / 2, 10, 20)
    args = evaluate.parse_args(["--datasets", "sin", "--mechanisms", ",".join(evaluate.FULL_SWEEP_MECHANISMS)])
    assert "CPU time per run" in "\n".join(evaluate._timing_section(rows, args, ["sin"]))
    old = [{k: v for k, v in row.items() if k != "cpu_seconds"} for row in rows]
    assert evaluate.full_sweep_estimate(old, "sin", 2) == (runs * 5.0 / 2, 10, 20)
    assert "wall time per run" in "\n".join(evaluate._timing_section(old, args, ["sin"]))
