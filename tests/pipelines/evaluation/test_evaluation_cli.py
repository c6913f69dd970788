"""The command line end to end (pipelines/evaluation/cli.py): tiny sweeps on synthetic streams, event files and
real data (when present), --report and --from-csv, a violation's exit code, argument errors, and the three ways
to start it (``python -m pipelines.evaluation``, ``python -m pipelines.evaluate``, ``wevent evaluate``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines import main as wevent
from pipelines.evaluation import cli, experiment
from pipelines.evaluation_data import DEFAULT_DATA_DIR
from tests.pipelines.evaluation.helpers import read_rows, without_timing

ROOT = Path(__file__).resolve().parents[3]
"""The repository: the child processes import its ``pipelines``."""

REQUIRED = ["dataset", "mechanism", "epsilon", "window", "ratio", "repeat", "amre", "ajsd", "mre", "mae",
            "seconds_per_slot", "max_window_usage_ratio", "fresh_fraction", "skipped_fraction",
            "nullified_fraction", "users", "slots", "seed"]


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


def test_a_violation_is_loud_and_exits_1(tmp_path, monkeypatch, capsys):
    real = experiment.evaluate_point
    monkeypatch.setattr(experiment, "evaluate_point", lambda task: {**real(task), "max_window_usage_ratio": 1.5})
    code = cli.main(["--users", "50", "--slots", "20", "--repeats", "1", "--sweep", "epsilon", "--datasets", "sin",
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
    (["--bogus"], "unknown flag --bogus"),
])
def test_bad_arguments_exit_2_with_one_line(argv, fragment, tmp_path, capsys):
    assert cli.main(argv + ["--output", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


def test_an_event_file_runs_end_to_end_with_repeats_per_sweep(tmp_path):
    events = tmp_path / "events.jsonl"
    with open(events, "w", encoding="utf-8") as handle:
        for user in range(40):
            for slot in range(0, 90, 1 + user % 7):                 # users report at different rates
                handle.write(json.dumps({"user": f"u{user}", "time": 60.0 * slot + user, "value": (user + slot) % 3})
                             + "\n")
    out = tmp_path / "out"
    code = cli.main(["--input", str(events), "--binning", "int:3", "--slot-seconds", "60", "--datasets", "events",
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
    assert cli.main(["--input", str(events), "--binning", "int:3", "--slot-seconds", "60", "--datasets", "events",
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
    code = cli.main(["--datasets", "taxi,foursquare", "--users", "12", "--slots", "150", "--repeats", "1",
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
    code = cli.main(["--datasets", "sin,taxi", "--data-dir", str(tmp_path / "none"), "--users", "30",
                     "--slots", "20", "--repeats", "1", "--sweep", "epsilon", "--mechanisms", "bd",
                     "--workers", "1", "--output", str(tmp_path / "out"), "--no-plots"])
    assert code == 0
    assert "skipping taxi: " in capsys.readouterr().err
    assert {r["dataset"] for r in read_rows(tmp_path / "out")} == {"sin"}
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "**Taxi skipped**: taxi: " in summary and "is not on this machine" in summary


def test_every_entry_point_runs_the_same_evaluation(tmp_path):
    """The package, the documented ``python -m pipelines.evaluate`` and ``wevent evaluate`` are one command."""
    args = ["--users", "40", "--slots", "30", "--repeats", "1", "--sweep", "epsilon", "--datasets", "sin",
            "--mechanisms", "bd,pbd", "--workers", "1", "--no-plots", "--quiet"]
    for module in ("pipelines.evaluation", "pipelines.evaluate"):
        done = subprocess.run([sys.executable, "-m", module, *args, "--output", str(tmp_path / module)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    assert wevent.main(["evaluate", *args, "--output", str(tmp_path / "wevent")]) == 0
    rows = without_timing(read_rows(tmp_path / "wevent"))
    assert len(rows) == 2 * 5
    assert without_timing(read_rows(tmp_path / "pipelines.evaluation")) == rows
    assert without_timing(read_rows(tmp_path / "pipelines.evaluate")) == rows
