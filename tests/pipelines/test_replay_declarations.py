"""A user's own declared requirement is never replaced by the operator's --levels assignment, and the ledger
checks the user against their own declaration (finding 7 of issue 12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from transforms.sinks import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def replay_with_levels(tmp_path, *args) -> tuple[dict, dict]:
    """Three users over six 60-s slots under ``--levels loose=fixed:4,10.0`` for all: "inline" declares (4, 0.2)
    in its first report, "filed" in a requirements file at time 0, "plain" never.  Returns each user's set of
    dissimilarity charges and report.json."""
    events, declarations, out = tmp_path / "events.jsonl", tmp_path / "declared.jsonl", tmp_path / "out"
    rows = []
    for k in range(6):
        rows.append({"user": "inline", "time": 60 * k + 1, "value": k % 2, **({"w": 4, "epsilon": 0.2} if k == 0
                                                                              else {})})
        rows.append({"user": "filed", "time": 60 * k + 2, "value": 1})
        rows.append({"user": "plain", "time": 60 * k + 3, "value": 0})
    events.write_text("".join(json.dumps(r) + "\n" for r in rows))
    declarations.write_text(json.dumps({"user": "filed", "time": 0, "w": 4, "epsilon": 0.2}) + "\n")
    command = [sys.executable, "-m", "pipelines.replay", "--input", str(events), "--requirements-file",
               str(declarations), "--binning", "int:2", "--slot-seconds", "60", "--levels", "loose=fixed:4,10.0",
               "--level-ratios", "loose=1.0", "--ledger-detail", "--insecure-seed", "1", "--quiet",
               "--output", str(out), *args]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    dc: dict = {}
    for entry in read_records(str(out / "ledger-*.jsonl"), "jsonl"):
        dc.setdefault(entry["user"], set()).add(entry["parts"]["dissimilarity"])
    with open(out / "report.json") as f:
        return dc, json.load(f)


def test_levels_never_replace_a_users_own_declaration(tmp_path):
    dc, report = replay_with_levels(tmp_path)
    # PBD's dissimilarity share is E / (2w): 0.2/8 under the declaration, 10/8 under the level
    assert dc["inline"] == {"0.025"} and dc["filed"] == {"0.025"}, dc  # the released code gave them 1.25
    assert dc["plain"] == {"1.25"}  # the power check: a user who declared nothing gets the level
    assert report["ledger_violations"] == 0 and report["reconciles"] and report["records_used"] == 19


def test_a_declaration_before_the_release_range_stays_in_force(tmp_path):
    """Slots 0 and 1 (with both declarations) are outside --start/--end: its records are dead letters, the declarations
    still hold from then on (the per-user stage carries them), never the operator's level."""
    dc, report = replay_with_levels(tmp_path, "--start", "120", "--end", "360")
    assert dc["inline"] == {"0.025"} and dc["filed"] == {"0.025"} and dc["plain"] == {"1.25"}, dc
    assert report["dead_letters"] == 7 and report["records_used"] == 12  # slots 0 and 1: 3 + 1 + 3 records and report["reconciles"]
