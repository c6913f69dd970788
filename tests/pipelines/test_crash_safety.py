"""Fault injection: jobs killed at seeded random points and resumed publish exactly what an uninterrupted run does.

The batch replay, the Beam streaming job (``--demo``) and the watch loop run as subprocesses on small generated
inputs with ``--insecure-seed``.  Each is stopped with SIGINT, SIGTERM or SIGKILL at a point drawn from a seeded
generator (a delay after the job reached a stage: its output folder, its first checkpoint), then resumed from its
checkpoint until it completes.  The outputs must equal an uninterrupted run's: the same release record for every
slot, no slot missing, none twice, the same per-user usage (no window over budget, no violation).  A stop by
signal must exit 130 (SIGINT) or 143 (SIGTERM) with one line on stderr and no temporary files left.

On the code before the crash-safe checkpoints the replay cases fail (a stop by signal exited 1 with a traceback
and left ``beam-temp-*``; every release up to the checkpoint was in no output), and so do the SIGINT and SIGTERM
cases of the streaming job and the watch loop (exit 0 and -15).  Their SIGKILL cases guard against regressions:
the watch loop was already write-ahead (its SIGKILL case passed there), and the streaming job's race between its
checkpoint and slot-file branches was not seen on the direct runner.
"""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from transforms.checkpoint import load_for_resume
from transforms.sinks import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": ROOT}
SEED = 27  # the kill points: drawn from a generator seeded by SEED and the case, the same on every run


def draws(case: object) -> random.Random:
    return random.Random(f"{SEED}-{case}")


# ---------------------------------------------------------------------------------------------- helpers
def as_from_a_terminal() -> None:
    """In the child: SIGINT handled as in a terminal, even when the tests run as a shell's background job
    (which starts with SIGINT ignored, and a job keeps an ignored SIGINT ignored, as Python itself does)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)


def run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def stop(process: subprocess.Popen, signum: int, reached: Callable[[], bool], delay: float) -> tuple[int, str]:
    """Send ``signum`` ``delay`` seconds after ``reached()`` first holds (or once the job ended: then nothing is
    sent); returns the exit code and stderr."""
    deadline = time.monotonic() + 120
    while not reached() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(delay)
    if process.poll() is None:
        process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def assert_stopped_cleanly(code: int, stderr: str, signum: int, job: str) -> bool:
    """A stop by SIGINT/SIGTERM: exit 128 + signal and exactly one line on stderr (the job runs with --quiet, so it
    prints nothing else but the warning about slots that follow the data, where it has no release range).
    Returns False when the job had finished before the signal."""
    if code == 0:
        return False
    if signum == signal.SIGKILL:
        assert code == -signal.SIGKILL
        return True
    assert code == 128 + signum, (code, stderr[-3000:])
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("warning: no --start/--end")]
    assert len(lines) == 1 and lines[0].startswith(f"{job}: stopped by {signal.Signals(signum).name}"), stderr[-3000:]
    return True


def exists(pattern: str) -> Callable[[], bool]:
    return lambda: bool(glob.glob(pattern))


def new_files(pattern: str) -> Callable[[], bool]:
    before = set(glob.glob(pattern))
    return lambda: bool(set(glob.glob(pattern)) - before)


def by_slot(records: list[dict]) -> dict:
    """Release records by (stream, slot); a slot released twice fails here."""
    keyed: dict = {}
    for record in records:
        key = (record["stream"], record["slot"])
        assert key not in keyed, f"slot {key} released twice"
        keyed[key] = record
    return keyed


def assert_same_usage(reference: list[dict], resumed: list[dict]) -> None:
    assert sorted(resumed, key=lambda u: (u["stream"], u["user"])) == \
        sorted(reference, key=lambda u: (u["stream"], u["user"]))
    assert resumed and all(u["max_window_usage_ratio"] <= 1 and u["violations"] == 0 for u in resumed)


# ---------------------------------------------------------------------------------------------- the replay
def replay_input(path: str, users: int = 30, slots: int = 2000) -> None:
    draw = random.Random(5)
    with open(path, "w") as f:
        for slot in range(slots):
            for user in range(users):
                if draw.random() < 0.5:
                    f.write(json.dumps({"user": f"u{user}", "time": slot * 60 + draw.uniform(0, 59),
                                        "value": draw.randrange(4)}) + "\n")


def replay_args(source: str, output: str, checkpoints: str) -> list[str]:
    return ["pipelines.replay", "--input", source, "--binning", "int:4", "--slot-seconds", "60",
            "--requirement", "fixed:10,1.0", "--insecure-seed", "7", "--start", "0", "--end", "120000",
            "--checkpoint-dir", checkpoints, "--checkpoint-every", "50", "--max-rejected-fraction", "1",
            "--quiet", "--output", output]


def replay_outputs(output: str) -> tuple[dict, list[dict]]:
    assert not glob.glob(os.path.join(output, "beam-temp-*"))
    assert os.path.getsize(glob.glob(os.path.join(output, "violations-*.jsonl"))[0]) == 0
    return (by_slot(read_records(os.path.join(output, "releases-*.jsonl"), "jsonl")),
            read_records(os.path.join(output, "usage-*.jsonl"), "jsonl"))


@pytest.fixture(scope="module")
def replay_reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("replay")
    source = str(work / "events.jsonl")
    replay_input(source)
    run(replay_args(source, str(work / "out"), str(work / "ckpt")))
    releases, usage = replay_outputs(str(work / "out"))
    assert len(releases) == 2000
    return source, releases, usage


# (signal, what the delay counts from, delay range) for each stop; a case stops the job, then its resumed run, ...
REPLAY_CASES = {
    "sigint-releasing": [(signal.SIGINT, "checkpoint", (0.0, 0.4))],
    "sigkill-releasing-then-sigkill-resumed": [(signal.SIGKILL, "checkpoint", (0.0, 0.4)),
                                               (signal.SIGKILL, "checkpoint", (0.0, 0.4))],
    "sigterm-anywhere-then-sigint-resumed-wevent": [(signal.SIGTERM, "output", (0.0, 2.0)),
                                                    (signal.SIGINT, "checkpoint", (0.0, 0.4))],
}


@pytest.mark.parametrize("case", sorted(REPLAY_CASES))
def test_a_replay_stopped_anywhere_and_resumed_publishes_what_an_uninterrupted_one_does(case, replay_reference,
                                                                                      tmp_path):
    source, reference, reference_usage = replay_reference
    output, checkpoints = str(tmp_path / "out"), str(tmp_path / "ckpt")
    draw = draws(case)
    args = replay_args(source, output, checkpoints)
    stopped = 0
    for i, (signum, stage, (low, high)) in enumerate(REPLAY_CASES[case]):
        command = args + (["--resume-from", checkpoints] if glob.glob(os.path.join(checkpoints, "*.wevent")) else [])
        command += ["--overwrite"] if i else []
        if case.endswith("wevent") and i:
            command = ["pipelines.main", "replay", *command[1:]]
        reached = exists(os.path.join(checkpoints, "*.wevent")) if stage == "checkpoint" \
            else (lambda: os.path.isdir(output))
        if stage == "checkpoint" and i:  # the resumed job's own checkpoints: newer than the ones it resumes
            reached = new_files(os.path.join(checkpoints, "*.wevent"))
        code, stderr = stop(start(command), signum, reached, draw.uniform(low, high))
        stopped += assert_stopped_cleanly(code, stderr, signum, "replay")
        if signum != signal.SIGKILL and code:
            assert not glob.glob(os.path.join(output, "beam-temp-*")) and not glob.glob(os.path.join(output, "*-0*"))
    resume = args + (["--resume-from", checkpoints, "--overwrite"] if glob.glob(os.path.join(checkpoints, "*"))
                     else ["--overwrite"])
    run(resume)
    releases, usage = replay_outputs(output)
    assert releases == reference  # every slot once, each the same record (no noise drawn again)
    assert_same_usage(reference_usage, usage)  # the ledger saw every charge across the restarts
    assert all(not s.unpublished for s in load_for_resume(checkpoints).streams.values())  # acknowledged at the end
    assert stopped >= 1, "no stop landed while the job ran: the machine is far slower than expected"


# ---------------------------------------------------------------------------------------------- the Beam streaming job
def stream_args(output: str, checkpoints: str) -> list[str]:
    return ["pipelines.streaming", "--demo", "--demo-taxis", "10", "--max-slots", "6", "--slot-seconds", "600",
            "--requirement", "fixed:10,1.0", "--insecure-seed", "3", "--start", "2008-02-02T00:00:00Z",
            "--end", "2008-02-02T01:00:00Z", "--checkpoint-dir", checkpoints, "--checkpoint-every", "2",
            "--max-rejected-fraction", "1", "--quiet", "--output", output]


def slot_files(output: str) -> dict:
    files = sorted(glob.glob(os.path.join(output, "releases-*.jsonl")))
    contents = {os.path.basename(path): read_records(glob.escape(path), "jsonl") for path in files}
    assert all(len(records) == 1 for records in contents.values()), "a slot file holds one release"
    by_slot([records[0] for records in contents.values()])
    return contents


@pytest.fixture(scope="module")
def stream_reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("stream")
    run(stream_args(str(work / "out"), str(work / "ckpt")))
    expected = slot_files(str(work / "out"))
    assert len(expected) == 6
    return expected


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_the_streaming_job_stopped_and_resumed_writes_every_slot_file_once_as_an_uninterrupted_run(
        signum, stream_reference, tmp_path):
    output, checkpoints = str(tmp_path / "out"), str(tmp_path / "ckpt")
    draw = draws(f"stream-{signum}")
    code, stderr = stop(start(stream_args(output, checkpoints)), signum, exists(os.path.join(checkpoints, "*")),
                        draw.uniform(0.0, 0.5))
    stopped = assert_stopped_cleanly(code, stderr, signum, "stream")  # False: it ended before the signal came
    if stopped and signum != signal.SIGKILL:
        assert not glob.glob(os.path.join(output, "*.part")) and not glob.glob(os.path.join(output, "beam-temp-*"))
    run(stream_args(output, checkpoints) + ["--resume-from", checkpoints])
    assert slot_files(output) == stream_reference


# ---------------------------------------------------------------------------------------------- the watch loop
WATCH_FILES = 6


def watch_file(directory: str, index: int) -> None:
    """File ``index`` holds three 2-second slots of five users (2008 timestamps: every slot is due at once)."""
    draw = random.Random(index)
    lines = [json.dumps({"user": f"u{user}", "time": 1_200_000_000 + (3 * index + slot) * 2 + draw.uniform(0, 1.9),
                         "value": draw.randrange(3)})
             for slot in range(3) for user in range(5) if draw.random() < 0.8]
    temporary = os.path.join(directory, f"part{index:02d}.jsonl.part")
    with open(temporary, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.rename(temporary, os.path.join(directory, f"part{index:02d}.jsonl"))


def watch_args(incoming: str, output: str, checkpoint: str | None, max_slots: int | None) -> list[str]:
    return ["pipelines.streaming", "--watch", incoming, "--binning", "int:3", "--slot-seconds", "2",
            "--allowed-lateness", "0", "--poll-seconds", "0.1", "--settle-seconds", "0", "--requirement",
            "fixed:4,1.0", "--insecure-seed", "11", "--max-rejected-fraction", "1", "--quiet", "--output", output,
            *(["--checkpoint", checkpoint] if checkpoint else []),
            *(["--max-slots", str(max_slots)] if max_slots else [])]


def watch_releases(output: str) -> dict:
    with open(os.path.join(output, "releases-live.jsonl")) as f:
        lines = f.read().splitlines()
    assert os.path.getsize(os.path.join(output, "violations-live.jsonl")) == 0
    return by_slot([json.loads(line) for line in lines])


@pytest.fixture(scope="module")
def watch_reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("watch")
    incoming = str(work / "in")
    os.mkdir(incoming)
    for index in range(WATCH_FILES):
        watch_file(incoming, index)
    run(watch_args(incoming, str(work / "out"), None, 1))
    releases = watch_releases(str(work / "out"))
    assert len(releases) == 3 * WATCH_FILES
    return releases


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=["sigint", "sigterm", "sigkill"])
def test_the_watch_loop_stopped_between_or_inside_rounds_and_resumed_releases_every_slot_once(signum,
                                                                                             watch_reference,
                                                                                             tmp_path):
    incoming, output, checkpoint = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "live.wevent")
    os.mkdir(incoming)
    draw = draws(f"watch-{signum}")
    process = start(watch_args(incoming, output, checkpoint, None))  # runs until stopped
    live = os.path.join(output, "releases-live.jsonl")
    deadline = time.monotonic() + 60
    while not os.path.exists(live) and time.monotonic() < deadline:
        time.sleep(0.02)
    written = 0
    stop_at = time.monotonic() + draw.uniform(0.1, 1.2)  # files land every 0.15 s: the stop falls among rounds
    while time.monotonic() < stop_at:
        if written < WATCH_FILES:
            watch_file(incoming, written)
            written += 1
        time.sleep(0.15)
    code, stderr = stop(process, signum, lambda: True, 0.0)
    assert assert_stopped_cleanly(code, stderr, signum, "stream")
    if signum != signal.SIGKILL:  # stopped by a signal, the loop still writes its report
        with open(os.path.join(output, "report.json")) as f:
            assert json.load(f)["records_read"] >= 0
    for index in range(written, WATCH_FILES):
        watch_file(incoming, index)
    run(watch_args(incoming, output, checkpoint, 1))
    assert watch_releases(output) == watch_reference


# ---------------------------------------------------------------------------------------------- format 1 still resumes
def test_a_checkpoint_written_before_format_2_still_resumes_to_the_same_releases(tmp_path):
    """The fixture is a replay's checkpoint after slot 19 written by format-1 code (the events and the releases
    that code made when resumed from it beside it); today's replay resumes it to the same releases."""
    from pipelines.replay import run as replay

    fixtures = os.path.join(os.path.dirname(__file__), "fixtures")
    output, checkpoints = str(tmp_path / "out"), str(tmp_path / "ckpt")
    code = replay(["--input", os.path.join(fixtures, "checkpoint-v1-events.jsonl"), "--binning", "int:3",
                   "--slot-seconds", "60", "--requirement", "fixed:5,1.0", "--insecure-seed", "4", "--start", "0",
                   "--end", "2400", "--resume-from", os.path.join(fixtures, "checkpoint-v1-slot20.wevent"),
                   "--checkpoint-dir", checkpoints, "--output", output, "--quiet", "--max-rejected-fraction", "1"])
    assert code == 0
    with open(os.path.join(fixtures, "checkpoint-v1-resumed-releases.json")) as f:
        expected = json.load(f)
    releases = sorted(by_slot(read_records(os.path.join(output, "releases-*.jsonl"), "jsonl")).values(),
                      key=lambda r: r["slot"])
    assert [[r["slot"], r["kind"], r["histogram"]] for r in releases] == expected
    (state,) = load_for_resume(checkpoints).streams.values()
    assert state.next_slot == 40 and state.unpublished == []
