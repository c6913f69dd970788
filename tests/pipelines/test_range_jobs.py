"""The public release range through the jobs: replay (its command line, in a subprocess), streaming and the
watch loop.  Two neighbouring inputs (one extra report far after the others) release the same slots with
--start/--end, and different ones without (the power check)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from pipelines.live import LiveRelease
from transforms.declarations import RequirementPolicy
from transforms.mechanisms import FixedRequirement
from transforms.parse import ParseConfig
from transforms.private_histogram import PrivateStreamHistogram
from transforms.sinks import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLOT = 600
START, END = "2024-01-01T00:00:00Z", "2024-01-01T03:00:00Z"  # 18 slots of 10 minutes
T0 = 1704067200  # START in epoch seconds


def write_events(path, extra_far_report: bool) -> None:
    """Five users reporting in the second and third hour of the range; the neighbour adds one report two days on."""
    rows = [{"user": f"u{u}", "time": T0 + 3600 + 300 * k + u, "value": (u + k) % 3}
            for u in range(5) for k in range(12)]
    if extra_far_report:
        rows.append({"user": "u0", "time": T0 + 2 * 86400, "value": 1})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def replay(tmp_path, name: str, extra: bool, *args) -> tuple[subprocess.CompletedProcess, dict, list]:
    """``python -m pipelines.replay`` in its own process; returns it, report.json and the released slots."""
    events, out = tmp_path / f"{name}.jsonl", tmp_path / name
    write_events(events, extra)
    command = [sys.executable, "-m", "pipelines.replay", "--input", str(events), "--binning", "int:3",
               "--slot-seconds", str(SLOT), "--requirement", "fixed:6,1.0", "--insecure-seed", "1", "--quiet",
               "--output", str(out), *args]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    with open(out / "report.json") as f:
        report = json.load(f)
    slots = sorted(r["slot"] for r in read_records(str(out / "releases-*.jsonl"), "jsonl"))
    return done, report, slots


def test_neighbouring_inputs_release_the_same_slots_with_start_and_end(tmp_path):
    first = T0 // SLOT
    _, report, slots = replay(tmp_path, "d", False, "--start", START, "--end", END)
    done, neighbour_report, neighbour_slots = replay(tmp_path, "d2", True, "--start", str(T0), "--end", END)
    assert slots == neighbour_slots == list(range(first, first + 18))  # the empty first hour too
    assert report["range_from_data"] is False and report["warnings"] == []
    assert report["release_range"]["first_slot"] == first and report["release_range"]["last_slot"] == first + 17
    assert neighbour_report["dead_letters"] == 1 and neighbour_report["reconciles"]  # the far report, accounted
    dead = read_records(str(tmp_path / "d2" / "dead_letters-*.jsonl"), "jsonl")
    assert [d["reason"].split(":")[0] for d in dead] == ["outside the release range"]
    assert "no --start/--end" not in done.stderr


def test_without_a_range_the_released_slots_follow_the_data_and_the_job_says_so(tmp_path):
    done, report, slots = replay(tmp_path, "d", False)
    _, _, neighbour_slots = replay(tmp_path, "d2", True)
    assert slots != neighbour_slots  # the power check: one far report moves the released range
    assert slots[0] == T0 // SLOT + 6  # the first slot with data, not the hour before
    assert report["range_from_data"] is True and report["warnings"][0].startswith("no --start/--end")
    warning_lines = [line for line in done.stderr.splitlines() if "no --start/--end" in line]
    assert len(warning_lines) == 1, done.stderr


def test_a_half_given_or_reversed_range_stops_the_job_with_one_line(tmp_path):
    events = tmp_path / "e.jsonl"
    write_events(events, False)
    for module, extra in (("pipelines.replay", ["--input", str(events), "--binning", "int:3"]),
                          ("pipelines.streaming", ["--watch", str(tmp_path), "--binning", "int:3"])):
        for bounds, message in ((["--start", START], "give both --start and --end"),
                                (["--start", END, "--end", START], "must be before --end")):
            done = subprocess.run([sys.executable, "-m", module, *extra, "--requirement", "fixed:6,1.0",
                                   "--output", str(tmp_path / "out"), "--quiet", *bounds],
                                  cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                                  timeout=120)
            # Beam's own import-time notice about apitools is not the job's (issue #17 removes it)
            lines = [line for line in done.stderr.strip().splitlines() if "apitools not found" not in line]
            assert done.returncode == 2 and len(lines) == 1 and message in lines[0], (module, done.stderr)


def test_the_watch_loop_releases_every_slot_of_the_range_and_nothing_else(tmp_path):
    watch, out = tmp_path / "in", tmp_path / "out"
    watch.mkdir()
    transform = PrivateStreamHistogram("pbd", 60, 3, policy=RequirementPolicy(default=FixedRequirement(4, 1.0)),
                                       insecure_seed=1, release_range=(120, 720))  # slots 2..11
    live = LiveRelease(str(watch), str(out), ParseConfig(bins=3), transform)
    rows = [{"user": "a", "time": 200, "value": 1}, {"user": "b", "time": 250, "value": 2},
            {"user": "a", "time": 30, "value": 0},     # slot 0: before the range
            {"user": "b", "time": 5000, "value": 0}]   # slot 83: after it
    try:
        (watch / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        live.poll()
        live.release_due(400.0)  # slots 2..5 have closed; 3, 4, 5 without data
        assert sorted(r["slot"] for r in map(json.loads, live_lines(live))) == [2, 3, 4, 5]
        live.release_due(math.inf)
    finally:
        live.close()
    released = sorted(r["slot"] for r in read_records(str(out / "releases-*.jsonl"), "jsonl"))
    assert released == list(range(2, 12))
    counts = live.counts
    assert (counts["records_used"], counts["dead_letters"]) == (2, 2)
    assert counts["records_read"] == counts["records_used"] + counts["duplicates"] + counts["late"] \
        + counts["dead_letters"]


def live_lines(live: LiveRelease) -> list[str]:
    """The releases the loop has made so far (queued or written)."""
    live.commit()
    with open(live.paths["releases"]) as f:
        return f.read().splitlines()


def test_the_watch_report_names_the_range_and_warns_about_users_in_several_streams(tmp_path):
    from pipelines.job_report import watch_report
    from pipelines.live import watch

    incoming, out = tmp_path / "in", tmp_path / "out"
    incoming.mkdir()
    rows = [{"stream": s, "user": u, "time": 70, "value": 1} for s in ("north", "south") for u in ("both", s)]
    (incoming / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ticks = iter(range(0, 10_000, 100))
    for name, release_range in (("ranged", (0, 300)), ("from_data", None)):
        transform = PrivateStreamHistogram("pbd", 60, 3, policy=RequirementPolicy(default=FixedRequirement(4, 1.0)),
                                           insecure_seed=1, release_range=release_range)
        counts = watch(str(incoming), str(out / name), ParseConfig(bins=3), transform, 0, 1,
                       clock=lambda: next(ticks), sleep=lambda _: None)
        watch_report(str(out / name), "pbd", counts, 0.0, transform.config.release_range)  # cli.finish_watch's
        with open(out / name / "report.json") as f:
            report = json.load(f)
        assert counts["records_used"] == 4 and report["range_from_data"] is (release_range is None)
        several = [w for w in report["warnings"] if "more than one stream" in w]
        assert len(several) == 1 and several[0].startswith("1 user(s)")  # "both"; "north"/"south" are not
        released = read_records(str(out / name / "releases-*.jsonl"), "jsonl")
        assert sorted(r["slot"] for r in released if r["stream"] == "north") == ([0, 1, 2, 3, 4] if release_range
                                                                               else [1])


def test_the_streaming_demo_releases_every_slot_of_the_range(tmp_path):
    """``python -m pipelines.streaming --demo`` with a two-hour range over six slots of data: twelve slots."""
    first = 1201910400 // SLOT  # the demo's stream starts 2008-02-02T00:00Z (loaders.TDRIVE_START)
    command = [sys.executable, "-m", "pipelines.streaming", "--demo", "--demo-taxis", "10", "--max-slots", "6",
               "--slot-seconds", str(SLOT), "--allowed-lateness", "0", "--requirement", "fixed:6,2.0",
               "--insecure-seed", "5", "--quiet", "--start", "2008-02-02T00:00:00Z", "--end", "2008-02-02T02:00:00Z",
               "--output", str(tmp_path / "demo")]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    released = sorted(r["slot"] for r in read_records(str(tmp_path / "demo" / "releases-*.jsonl"), "jsonl"))
    assert released == list(range(first, first + 12))  # the last six without data
    assert "no --start/--end" not in done.stderr
