"""What a replay says about its run: report.json holds nothing computed from the true histograms; utility and
the true-count plot only with --evaluate, in OUTPUT/evaluation/ beside a README saying it is not private; no
true data in temporary files; users in several streams are warned about."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pipelines.job_report import users_in_several_streams
from transforms.mechanisms.metrics import utility_report
from transforms.sinks import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALLOWED = {"records_read", "records_used", "duplicates", "late", "dead_letters", "reconciles",  # records by fate
           "slots", "fresh", "skipped", "nullified",                                             # slots by kind
           "ledger_violations", "max_window_usage_ratio",                                        # the ledger
           "range_from_data", "release_range", "warnings", "mechanism", "wall_seconds", "evaluation",
           "job", "unanswered", "users_in_ledger", "clipped", "requests_sent", "trust", "stopped"}  # one schema
TRUE_DATA_KEYS = {"amre", "ajsd", "mre", "mae", "users", "released", "true"}


def write_events(path, streams=("s",)) -> list[dict]:
    """Eight users, one report per 60-s slot for 10 slots, in each of ``streams``."""
    rows = [{"stream": s, "user": f"u{u}", "time": 60 * k + u, "value": (u * k + len(s)) % 3}
            for s in streams for u in range(8) for k in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def replay(tmp_path, *args, streams=("s",), expect=0) -> tuple[subprocess.CompletedProcess, str, list]:
    """``python -m pipelines.replay`` in its own process with its own empty temporary directory."""
    events, out, scratch = tmp_path / "events.jsonl", tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    rows = write_events(events, streams)
    command = [sys.executable, "-m", "pipelines.replay", "--input", str(events), "--binning", "int:3",
               "--slot-seconds", "60", "--start", "0", "--end", "600", "--requirement", "fixed:4,2.0",
               "--insecure-seed", "3", "--quiet", "--output", str(out), *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(scratch)})
    assert done.returncode == expect, done.stderr
    return done, str(out), rows


def wevent_scratch_files(tmp_path) -> list[str]:
    return [name for name in os.listdir(tmp_path / "tmp") if name.startswith("wevent")]


def test_the_default_report_holds_only_fates_kinds_and_the_ledger(tmp_path):
    _, out, rows = replay(tmp_path)
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    assert set(report) <= ALLOWED and not set(report) & TRUE_DATA_KEYS, sorted(report)
    assert report["records_read"] == len(rows) and report["reconciles"] and report["slots"] == 10
    assert report["ledger_violations"] == 0 and 0 < report["max_window_usage_ratio"] <= 1
    assert not os.path.exists(os.path.join(out, "evaluation"))
    assert not any(name.endswith(".png") for name in os.listdir(out))
    assert wevent_scratch_files(tmp_path) == []  # the released code left wevent-utility-*.json here on failure


def test_evaluate_writes_the_true_utility_into_its_own_folder_marked_not_private(tmp_path):
    _, out, rows = replay(tmp_path, "--evaluate", "--plot")
    evaluation = os.path.join(out, "evaluation")
    with open(os.path.join(evaluation, "README.txt")) as f:
        assert f.read().startswith("NOT PRIVATE.")
    with open(os.path.join(evaluation, "utility.json")) as f:
        utility = json.load(f)
    # recompute: the true histogram of each slot from the input, the released one from the outputs
    true = np.zeros((10, 3))
    for r in rows:
        true[r["time"] // 60, r["value"]] += 1
    released = np.array([r["histogram"] for r in sorted(read_records(os.path.join(out, "releases-*.jsonl"), "jsonl"),
                                                        key=lambda r: r["slot"])], float)
    expected = utility_report(released, true)
    assert utility["not_private"] is True and utility["slots"] == 10
    assert utility["amre"] == pytest.approx(expected.amre) and utility["mae"] == pytest.approx(expected.mae)
    assert utility["ajsd"] == pytest.approx(expected.ajsd) and utility["mre"] == pytest.approx(expected.mre)
    with open(os.path.join(evaluation, "released_vs_true.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(out, "report.json")) as f:
        assert not set(json.load(f)) & TRUE_DATA_KEYS  # still nothing true in the report
    assert wevent_scratch_files(tmp_path) == []


def test_plot_without_evaluate_stops_with_one_line(tmp_path):
    done, out, _ = replay(tmp_path, "--plot", expect=2)
    errors = [line for line in done.stderr.splitlines() if "apitools not found" not in line]  # Beam's import notice
    assert len(errors) == 1 and "--plot draws the true counts: it needs --evaluate" in errors[0]
    assert not os.path.exists(out)


def test_a_user_in_several_streams_is_warned_about_in_the_report(tmp_path):
    _, out, _ = replay(tmp_path, streams=("north", "south"))
    with open(os.path.join(out, "report.json")) as f:
        warnings = json.load(f)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("8 user(s) appear in more than one stream")


def test_one_stream_per_user_gives_no_warning():
    """The power check of the count itself: distinct users in distinct streams are not counted."""
    pairs = [("a", "x"), ("b", "y"), ("a", "y"), ("c", "y"), ("c", "z"), ("c", "z")]
    assert users_in_several_streams(pairs) == 1
    assert users_in_several_streams(pairs[:2] + pairs[4:]) == 0


def test_a_failed_run_leaves_no_true_data_in_the_temporary_directory(tmp_path, monkeypatch):
    """The run fails after the pipeline, where the released code still held the true histograms in
    TMP/wevent-utility-*.json (and left them there); now nothing true ever goes through a temporary file."""
    import tempfile

    from pipelines import replay as replay_module

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def fail(*args, **kwargs):
        raise RuntimeError("disk full while writing the report")

    monkeypatch.setattr(replay_module, "write_report", fail)
    events = tmp_path / "events.jsonl"
    write_events(events)
    with pytest.raises(RuntimeError, match="disk full"):
        replay_module.run(["--input", str(events), "--binning", "int:3", "--slot-seconds", "60", "--start", "0",
                           "--end", "600", "--requirement", "fixed:4,2.0", "--insecure-seed", "3", "--quiet",
                           "--evaluate", "--output", str(tmp_path / "out")])
    assert [name for name in os.listdir(scratch) if name.startswith("wevent")] == []
    assert os.path.exists(tmp_path / "out" / "evaluation" / "utility.json")  # the run did get that far
