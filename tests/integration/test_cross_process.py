"""The seeded central replay (releases, usage, dead letters, ledger charges, checkpoints, report) is the same
when its SDK workers run in other processes: on the FnApiRunner with two worker processes, and on the
PortableRunner with workers started by a separate worker pool over the Fn API, as a cluster's runner uses it.
Beam's gRPC servers listen on every interface, so the whole comparison runs in a network namespace that has only
loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from integration.compare_runners import loopback_namespace_prefix
from transforms.loaders import synthetic_taxi_stream

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_central_replay_on_worker_processes_and_the_portable_runner_equals_the_in_process_run(tmp_path):
    if loopback_namespace_prefix() is None:
        pytest.skip("no loopback-only network namespace here (unshare -n and unshare -rn refused): Beam's servers "
                    "would listen on every interface")
    stream = tmp_path / "taxis.jsonl"
    synthetic_taxi_stream(str(stream), taxis=300, hours=3, report_seconds=300)
    work = tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-m", "integration.compare_runners", "--target", "multiprocess,portable",
                           "--jobs", "central", "--input", str(stream), "--work", str(work), "--loopback-namespace"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    compared = re.findall(r"^central on (\w+): (\d+) files identical", done.stdout, re.MULTILINE)
    assert [target for target, _ in compared] == ["multiprocess", "portable"], done.stdout
    assert all(int(files) >= 9 for _, files in compared), compared  # releases, usage, ledger, checkpoints, ...
    # not a vacuous comparison: fresh releases, charges in the ledger and checkpoints were written and compared
    baseline = work / "central" / "in_process"
    report = json.loads((baseline / "report.json").read_text())
    assert report["fresh"] > 0 and report["records_used"] > 0 and report["dead_letters"] > 0
    assert any(line.strip() for line in (baseline / "ledger-00000-of-00001.jsonl").read_text().splitlines())
    assert len(list((baseline / "checkpoints").iterdir())) >= 1
    assert len(list((work / "central" / "portable" / "checkpoints").iterdir())) == \
        len(list((baseline / "checkpoints").iterdir()))


def test_the_comparison_reports_a_difference_and_exits_1(tmp_path, monkeypatch):
    """A target whose outputs differ (here: another seed) is named with the differing files."""
    from integration import compare_runners

    stream = tmp_path / "taxis.jsonl"
    synthetic_taxi_stream(str(stream), taxis=200, hours=2, report_seconds=300)
    monkeypatch.setattr(compare_runners, "runner_flags", lambda *_: ["--insecure-seed", "8"])  # the last one wins
    monkeypatch.setenv("PYTHONPATH", ROOT)
    code = compare_runners.main(["--target", "multiprocess", "--jobs", "ldp", "--input", str(stream),
                                 "--work", str(tmp_path / "work")])
    assert code == 1


def test_the_batch_replay_runs_on_the_bundle_based_direct_runner_with_the_in_process_outputs(tmp_path):
    """Beam's BundleBasedDirectRunner holds no watermark for a timer's outputs: a batch release stage driven by an
    end-of-input timer fed GroupByKeys that had already completed (an AssertionError in the runner)."""
    stream = tmp_path / "taxis.jsonl"
    synthetic_taxi_stream(str(stream), taxis=200, hours=2, report_seconds=300)
    done = subprocess.run([sys.executable, "-m", "integration.compare_runners", "--target", "bundle-direct",
                           "--jobs", "central,numeric", "--input", str(stream), "--work", str(tmp_path / "work")],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert re.search(r"^central on bundle-direct: \d+ files identical", done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"^numeric on bundle-direct: \d+ files identical", done.stdout, re.MULTILINE), done.stdout
