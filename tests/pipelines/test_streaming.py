"""The streaming job: the TestStream demo equals a batch replay; a watched directory picks up new files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from pipelines import replay, streaming
from transforms.sinks import read_records


def releases(directory) -> list[tuple]:
    found = read_records(os.path.join(directory, "releases-*"), "jsonl")
    return sorted((r["slot"], r["kind"], tuple(r["histogram"])) for r in found)


@pytest.mark.parametrize("mechanism", [
    ["--requirement", "fixed:6,2.0"],
    ["--requirement", "lifetime:2.0", "--mechanism", "dpi-sound", "--epsilon", "2.0", "--param", "pool_size=50",
     "--param", "draws=4", "--start", "2008-02-02T00:00:00Z", "--end", "2008-02-02T02:00:00Z"],
    # DPI by name, its parameters from --param, under a lifetime budget, on the public range of the demo's 12 slots
], ids=["pbd", "dpi-sound"])
def test_demo_releases_equal_a_batch_replay_of_the_same_records(tmp_path, monkeypatch, mechanism):
    generated = {}
    from transforms import loaders

    real = loaders.synthetic_taxi_stream

    def keep(path, **kwargs):  # the demo deletes its generated file: keep a copy
        written = real(path, **kwargs)
        generated["path"] = str(tmp_path / "generated.jsonl")
        shutil.copy(path, generated["path"])
        return written

    monkeypatch.setattr(loaders, "synthetic_taxi_stream", keep)
    common = ["--slot-seconds", "600", "--insecure-seed", "5", "--quiet", *mechanism]
    assert streaming.run(["--demo", "--demo-taxis", "15", "--max-slots", "12", "--allowed-lateness", "0",
                          "--output", str(tmp_path / "stream"), *common]) == 0
    streamed = releases(tmp_path / "stream")
    assert len(streamed) >= 10
    # the same records, in batch: only the slots the demo streamed
    with open(generated["path"]) as f:
        lines = f.read().splitlines()
    slots = sorted({int(json.loads(line)["time"] // 600) for line in lines})[:12]
    subset = tmp_path / "subset.jsonl"
    subset.write_text("\n".join(l for l in lines if int(json.loads(l)["time"] // 600) in slots) + "\n")
    assert replay.run(["--input", str(subset), "--binning", "tdrive", "--output", str(tmp_path / "batch"),
                       *common]) in (0, 1)
    assert releases(tmp_path / "batch") == streamed


@pytest.mark.slow
def test_watched_directory_picks_up_files_written_while_running(tmp_path):
    """The job runs as a person runs it (its own process); two files land while it polls."""
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    out = tmp_path / "live"
    command = [sys.executable, "-m", "pipelines.streaming", "--watch", str(incoming), "--binning", "int:3",
               "--slot-seconds", "2", "--max-slots", "8", "--poll-seconds", "0.5", "--allowed-lateness", "0",
               "--requirement", "fixed:3,4.0", "--settle-seconds", "0", "--output", str(out), "--quiet"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    job = subprocess.Popen(command, cwd=root, env={**os.environ, "PYTHONPATH": root},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for k in range(2):
        time.sleep(4)
        written = time.time()
        batch = [{"user": f"u{u}", "time": written + 0.1 * u, "value": (u + k) % 3} for u in range(5)]
        (incoming / f"part{k}.jsonl.part").write_text("".join(json.dumps(r) + "\n" for r in batch))
        (incoming / f"part{k}.jsonl.part").rename(incoming / f"part{k}.jsonl")  # the hand-over convention
    output, _ = job.communicate(timeout=120)
    assert job.returncode == 0, output.decode()[-2000:]
    got = [json.loads(line) for line in (out / "releases-live.jsonl").read_text().splitlines()]
    slots = sorted({r["slot"] for r in got})
    assert len(slots) >= 2 and slots == list(range(slots[0], slots[-1] + 1)), slots  # in order, gaps released
    report = json.loads((out / "report.json").read_text())
    assert report["records_read"] == 10 and report["records_used"] == 10 and report["ledger_violations"] == 0


def test_a_missing_damaged_or_foreign_checkpoint_stops_the_job_with_one_line(tmp_path, capsys):
    incoming = tmp_path / "in"
    incoming.mkdir()
    (incoming / "a.jsonl").write_text(json.dumps({"user": "u", "time": 10, "value": 1}) + "\n")
    path = tmp_path / "checkpoint.wevent"
    common = ["--watch", str(incoming), "--binning", "int:3", "--slot-seconds", "60", "--requirement", "fixed:3,1.0",
              "--insecure-seed", "1", "--max-slots", "0", "--settle-seconds", "0", "--quiet"]
    assert streaming.run([*common, "--output", str(tmp_path / "out"), "--checkpoint", str(path)]) == 0
    assert path.exists() and json.loads((tmp_path / "out" / "report.json").read_text())["slots"] == 1
    capsys.readouterr()
    damaged = tmp_path / "damaged.wevent"
    damaged.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 1]))
    for extra, message in [(["--checkpoint", str(path), "--mechanism", "pba"], "written by mechanism pbd, not pba"),
                           (["--checkpoint", str(path), "--slot-seconds", "30"], "slots of 60 s"),
                           (["--checkpoint", str(damaged)], "damaged (checksum mismatch)"),
                           (["--resume-from", str(path)], "give --checkpoint PATH")]:
        assert streaming.run([*common, "--output", str(tmp_path / "out2"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    demo = ["--demo", "--output", str(tmp_path / "demo"), "--requirement", "fixed:3,1.0", "--quiet"]
    for extra, message in [(["--checkpoint", str(path)], "--checkpoint is for --watch"),
                           (["--resume-from", str(tmp_path / "nowhere")], "does not exist"),
                           (["--resume-from", str(path), "--mechanism", "pba"], "not pba")]:
        assert streaming.run([*demo, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out2" / "releases-live.jsonl").exists()
