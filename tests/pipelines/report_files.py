"""``assert_matches_files``: a job's report.json is valid and its counts are those of the files beside it."""

from __future__ import annotations

import glob
import json
import os

from pipelines.job_report import check_report


def lines_of(pattern: str) -> list[dict]:
    found = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            found += [json.loads(line) for line in f if line.strip()]
    return found


def assert_matches_files(out, job: str) -> dict:
    """report.json of ``job`` in ``out``: valid, and its counts are the files' (counted here independently)."""
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    check_report(report)
    assert report["job"] == job
    releases = lines_of(os.path.join(out, "releases*.jsonl"))
    letters = lines_of(os.path.join(out, "dead_letters*.jsonl"))
    late = [letter for letter in letters if letter["reason"].startswith("late")]
    assert report["slots"] == len(releases)
    assert [report[kind] for kind in ("fresh", "skipped", "nullified")] == [
        sum(r["kind"] == kind for r in releases) for kind in ("fresh", "skipped", "nullified")]
    assert (report["dead_letters"], report["late"]) == (len(letters) - len(late), len(late))
    assert report["reconciles"] and report["records_read"] == report["records_used"] + report["duplicates"] + \
        report["late"] + report["dead_letters"] + report["unanswered"]
    return report
