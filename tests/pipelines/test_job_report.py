"""Every job's ``report.json`` follows the one schema (``schemas/job_report.avsc``) and agrees with the files the
job wrote: release records by kind, dead letters and the late ones among them, and records read = used +
duplicates + late + dead letters, on every runner (the counts are read back from the outputs, not from Beam
metrics: the bundle-based runner of the streaming demo delivers none)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines import replay, streaming
from pipelines.job_report import check_report, job_report, output_counts
from report_files import assert_matches_files, lines_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def events(path, rows) -> str:
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows))
    return str(path)


def test_the_schema_is_strict():
    counts = {"slots": 1, "fresh": 1, "skipped": 0, "nullified": 0, "late": 0, "dead_letters": 0,
              "users_in_ledger": 1, "ledger_violations": 0, "max_window_usage_ratio": 0.5}
    report = job_report("replay", "pbd", counts, 3, 2, 1, 1.0)
    check_report(report)
    assert report["reconciles"]
    with pytest.raises(ValueError, match="job_report.avsc"):
        check_report({**report, "slots_fresh": 1})  # a key of the old streaming report
    with pytest.raises(ValueError, match="job_report.avsc"):
        check_report({k: v for k, v in report.items() if k != "records_used"})
    with pytest.raises(ValueError, match="not one of"):
        check_report({**report, "job": "watcher"})
    with pytest.raises(ValueError, match="no key"):
        job_report("replay", "pbd", counts, 3, 2, 1, 1.0, releases=1)


def test_replay_report_is_its_files(tmp_path):
    rows = [{"user": f"u{i % 7}", "time": 30 * i, "value": i % 3} for i in range(120)]
    rows += [{"user": "u0", "time": 10, "value": 99}, "not json"]  # two dead letters
    rows += [{"user": "u1", "time": 31, "value": 1}]  # a second report of u1 in slot 0: a duplicate
    out = tmp_path / "out"
    code = replay.run(["--input", events(tmp_path / "e.jsonl", rows), "--binning", "int:3", "--slot-seconds", "60",
                       "--start", "0", "--end", "3600", "--requirement", "fixed:4,2.0", "--insecure-seed", "3",
                       "--output", str(out), "--quiet"])
    assert code == 0
    report = assert_matches_files(out, "replay")
    assert report["records_read"] == len(rows) and report["dead_letters"] == 2 and report["duplicates"] >= 1
    assert report["slots"] == 60 and report["users_in_ledger"] == 7
    assert lines_of(str(out / "accounting-*.jsonl"))  # the records read, used, duplicated: the job's own output


def test_streaming_demo_report_is_its_files(tmp_path, capsys):
    """Failed before: '98 records read ... 0 slots released' and slots 0 in report.json, while the slot files and
    dead letters were on disk (the bundle-based DirectRunner delivers no metrics)."""
    out = tmp_path / "demo"
    code = streaming.run(["--demo", "--demo-taxis", "10", "--max-slots", "6", "--requirement", "fixed:6,2.0",
                          "--insecure-seed", "3", "--output", str(out)])
    assert code == 0
    report = assert_matches_files(out, "stream")
    assert report["slots"] >= 6 and report["records_read"] > 6 * 10 and report["users_in_ledger"] == 10
    summary = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stream done in")]
    assert len(summary) == 1 and f"{report['records_read']:,} records read" in summary[0]
    assert f"{report['slots']:,} slots released" in summary[0] and str(out) in summary[0]


def test_watch_loop_report_is_its_files(tmp_path):
    incoming, out = tmp_path / "in", tmp_path / "out"
    incoming.mkdir()
    rows = [{"user": f"u{u}", "time": 60 * t + u, "value": (u + t) % 3} for t in range(4) for u in range(5)]
    events(incoming / "a.jsonl", rows + ["{broken", {"user": "u0", "time": 5, "value": 7}])
    code = streaming.run(["--watch", str(incoming), "--binning", "int:3", "--slot-seconds", "60", "--requirement",
                          "fixed:3,1.0", "--insecure-seed", "1", "--max-slots", "0", "--settle-seconds", "0",
                          "--output", str(out), "--quiet"])
    assert code == 0
    report = assert_matches_files(out, "watch")
    assert report["records_read"] == len(rows) + 2 and report["dead_letters"] == 2 and report["slots"] == 4
    assert report["users_in_ledger"] == 5 and 0 < report["max_window_usage_ratio"] <= 1


@pytest.mark.slow
def test_watch_loop_stopped_by_a_signal_still_reports(tmp_path):
    """The stop path writes the summary and report.json (pipelines.cli.finish_watch), stopped: interrupted."""
    incoming, out = tmp_path / "in", tmp_path / "out"
    incoming.mkdir()
    events(incoming / "a.jsonl", [{"user": f"u{u}", "time": time.time() - 120 + u, "value": u % 3}
                                  for u in range(5)])
    job = subprocess.Popen([sys.executable, "-m", "pipelines.main", "stream", "--watch", str(incoming), "--binning",
                            "int:3", "--slot-seconds", "30", "--requirement", "fixed:3,1.0", "--poll-seconds", "0.2",
                            "--settle-seconds", "0", "--output", str(out)], cwd=tmp_path, stderr=subprocess.PIPE,
                           text=True, start_new_session=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        deadline = time.monotonic() + 60
        while not (out / "releases-live.jsonl").exists() or not (out / "releases-live.jsonl").read_text():
            assert time.monotonic() < deadline and job.poll() is None, job.stderr.read() if job.poll() else "slow"
            time.sleep(0.2)
        job.send_signal(signal.SIGINT)
        stderr = job.communicate(timeout=60)[1]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    report = assert_matches_files(out, "watch")
    assert report["stopped"] == "interrupted" and report["records_read"] == 5 and report["slots"] >= 1
    assert any(line.startswith("watch done in") and "stopped early" in line for line in stderr.splitlines()), stderr


def test_output_counts_reads_every_job_naming(tmp_path):
    """Shards, per-slot files and the live files alike; a file being written (.part) is not read."""
    (tmp_path / "releases-00000-of-00001.jsonl").write_text(json.dumps({"kind": "fresh"}) + "\n")
    (tmp_path / "releases-2008-02-02T00:00:00Z.jsonl").write_text(json.dumps({"kind": "skipped"}) + "\n")
    (tmp_path / "releases-live.jsonl").write_text(json.dumps({"kind": "nullified"}) + "\n")
    (tmp_path / "releases-x.jsonl.part").write_text(json.dumps({"kind": "fresh"}) + "\n")
    (tmp_path / "dead_letters.jsonl").write_text(json.dumps({"reason": "late: slot 3 closed"}) + "\n"
                                                 + json.dumps({"reason": "bad value"}) + "\n")
    counts = output_counts(str(tmp_path))
    assert (counts["slots"], counts["fresh"], counts["skipped"], counts["nullified"]) == (3, 1, 1, 1)
    assert (counts["late"], counts["dead_letters"]) == (1, 1)
