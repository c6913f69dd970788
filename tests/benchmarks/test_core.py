"""The core benchmark at a tiny size: with ``--tricks`` each speed trick's number sits beside the normal run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.core import TRICKS, parse_args

ROOT = Path(__file__).resolve().parents[2]


def test_the_tricks_report_runs_each_mechanism_without_each_trick():
    command = [sys.executable, "-m", "benchmarks.core", "--users", "30", "--slots", "3", "--window", "10",
               "--mechanisms", "pbd", "--repeats", "1", "--tricks", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT, env=env).stdout
    pbd = json.loads(out)["mechanisms"]["pbd"]
    assert pbd["seconds_per_slot"] > 0 and pbd["without"].keys() == TRICKS.keys()
    assert all(run["seconds_per_slot"] > 0 and len(run["seconds_per_slot_runs"]) == 1 for run in pbd["without"].values())


def test_unknown_tricks_are_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--worker", "bd", "--without", "pool,nonsense"])
    assert "unknown tricks ['nonsense']" in capsys.readouterr().err


def test_the_issues_mechanism_names_resolve_through_the_registry():
    assert parse_args(["--mechanisms", "sw,ipp,app,capp"]).names == ["sw-direct", "ipp", "app", "capp"]
    with pytest.raises(SystemExit):
        parse_args(["--mechanisms", "sw,nonsense"])
