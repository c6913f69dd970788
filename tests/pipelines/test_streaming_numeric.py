"""The streaming job with --domain: numeric events through a TestStream release what the replay releases."""

from __future__ import annotations

import json
import os

import pytest

from pipelines import replay, streaming
from transforms import checkpoint
from transforms.numeric_clients import CLIENTS_STREAM
from transforms.sinks import read_records

SLOT = 60.0


def _events(users: int = 12, slots: int = 6) -> list[str]:
    """A numeric stream over [-5, 15]: every user every slot (one value out of range, one not a number)."""
    lines = [json.dumps({"user": f"u{u}", "time": slot * SLOT + 1 + u, "value": -5 + (u * 7 + slot * 3) % 21})
             for slot in range(slots) for u in range(users)]
    lines += [json.dumps({"user": "u0", "time": 2 * SLOT + 30, "value": 99.0}),
              json.dumps({"user": "u1", "time": 3 * SLOT + 30, "value": "high"})]
    return lines


def _releases(directory) -> list[tuple]:
    return sorted((r["slot"], r["kind"], tuple(r["estimate"]), r["epsilon"])
                  for r in read_records(os.path.join(directory, "releases-*"), "jsonl"))


@pytest.mark.parametrize("mechanism, out_of_range", [("capp", "dead-letter"), ("ipp", "clip")])
def test_streamed_numeric_releases_equal_the_replays(tmp_path, monkeypatch, mechanism, out_of_range):
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    lines = _events()

    def source(pipeline, args):  # the events slot by slot, the watermark past each slot
        stream = TestStream()
        for slot in range(6):
            mine = [line for line in lines if int(json.loads(line)["time"] // SLOT) == slot]
            stream = stream.add_elements([TimestampedValue(line, slot * SLOT) for line in mine])
            stream = stream.advance_watermark_to((slot + 1) * SLOT + 1)
        return pipeline | stream.advance_watermark_to_infinity()

    monkeypatch.setattr(streaming, "runner_source", source)
    common = ["--mechanism", mechanism, "--epsilon", "2", "--window", "3", "--domain=-5,15", "--out-of-range",
              out_of_range, "--slot-seconds", str(SLOT), "--allowed-lateness", "0", "--requirement", "fixed:3,2",
              "--insecure-seed", "11", "--quiet"]
    assert streaming.run(["--pubsub-subscription", "projects/p/subscriptions/s", "--output", str(tmp_path / "stream"),
                          "--runner", "BundleBasedDirectRunner", *common]) == 0
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    assert replay.run(["--input", str(tmp_path / "events.jsonl"), "--output", str(tmp_path / "batch"), *common]) == 0
    streamed = _releases(tmp_path / "stream")
    assert len(streamed) == 6 and all(kind == "fresh" for _, kind, _, _ in streamed)
    assert streamed == _releases(tmp_path / "batch")
    dead = [d["reason"] for d in read_records(os.path.join(tmp_path / "stream", "dead_letters-*"), "jsonl")]
    assert len(dead) == (2 if out_of_range == "dead-letter" else 1)


@pytest.mark.parametrize("extra, message", [
    (["--clients", "--reports-subscription", "projects/p/subscriptions/s"], "needs --reports-subscription and --users"),
    (["--demo", "--sma", "2"], "--sma: a centred window has an odd size"),
    (["--demo", "--per-user-clients", "--resume-from", "nowhere"], "checkpoint nowhere does not exist"),
    (["--demo", "--per-user-clients", "--checkpoint-dir", "cp", "--checkpoint-every", "0"],
     "checkpoint_every must be an integer >= 1"),
    (["--watch", ".", "--sma", "3"], "the --watch loop releases each slot"),
    (["--pubsub-subscription", "projects/p/subscriptions/s", "--binning", "int:4"], "not both"),
    (["--pubsub-subscription", "projects/p/subscriptions/s", "--domain=3,1"], "LOW < HIGH"),
])
def test_a_bad_numeric_configuration_fails_before_the_job_with_one_line(tmp_path, capsys, extra, message):
    args = ["--mechanism", "capp", "--epsilon", "2", "--window", "3", "--output", str(tmp_path / "out"), *extra,
            "--requirement", "fixed:3,2"]
    if not any(a.startswith("--domain") for a in extra):
        args.append("--domain=0,1")
    assert streaming.run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_sma_and_per_user_clients_without_a_domain_are_refused(tmp_path, capsys):
    args = ["--demo", "--epsilon", "2", "--window", "3", "--output", str(tmp_path / "out")]
    for extra, message in ((["--sma", "3"], "--sma smooths numeric releases: it needs --domain"),
                           (["--per-user-clients"], "is for the numeric mechanisms (--domain)")):
        assert streaming.run(args + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]


def _demo_lines_file(tmp_path, slots: int, slot_seconds: float) -> str:
    """The demo's numeric lines of its first ``slots`` slots, as a file the replay reads."""
    lines = streaming.numeric_demo_lines(streaming.NumericDomain(-5.0, 15.0), 6)
    first = int(json.loads(lines[0])["time"] // slot_seconds)
    mine = [line for line in lines if int(json.loads(line)["time"] // slot_seconds) < first + slots]
    path = tmp_path / "demo.jsonl"
    path.write_text("\n".join(mine) + "\n")
    return str(path)


def _full_releases(directory) -> dict:
    return {r["slot"]: (r["kind"], r["estimate"], r["figures"]) for r in
            read_records(os.path.join(directory, "releases-*"), "jsonl")}


@pytest.mark.parametrize("stage", [["--mechanism", "app"],
                                   ["--mechanism", "pp-s", "--param", "segment=2", "--per-user-clients",
                                    "--sma", "3"],
                                   ["--mechanism", "ba-sw", "--sma", "3", "--sma-mode", "trailing"]])
def test_the_numeric_demo_streams_what_the_replay_releases(tmp_path, stage):
    """--demo --domain: the generated numeric stream through a TestStream (BundleBasedDirectRunner), the central
    path or the per-user stage, with the streaming SMA: equal to a replay of the same lines (bounded SMA)."""
    common = ["--epsilon", "2", "--window", "3", "--domain=-5,15", "--out-of-range", "clip", "--slot-seconds",
              str(SLOT * 10), "--allowed-lateness", "0", "--requirement", "fixed:3,2", "--insecure-seed", "5",
              "--quiet", *stage]
    assert streaming.run(["--demo", "--demo-taxis", "6", "--max-slots", "6", "--output", str(tmp_path / "demo"),
                          *common]) == 0
    source = _demo_lines_file(tmp_path, 6, SLOT * 10)  # the demo's first 6 slots
    assert replay.run(["--input", source, "--output", str(tmp_path / "batch"), *common]) == 0
    streamed = _full_releases(tmp_path / "demo")
    assert streamed == _full_releases(tmp_path / "batch") and len(streamed) >= 3
    assert all(("sma" in figures) == ("--sma" in stage) for _, _, figures in streamed.values())
    assert all(-5 <= estimate[0] <= 15 or kind == "skipped" for kind, estimate, _ in streamed.values())


def test_a_watched_directory_of_numeric_events_releases_what_the_replay_releases(tmp_path):
    """--watch --domain: the loop's central numeric path, its releases in the interval's units, as the replay's."""
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    lines = [json.dumps({"user": f"u{u}", "time": slot + 0.1 * u, "value": -5 + (u * 7 + slot * 3) % 21})
             for slot in range(6) for u in range(8)] + [json.dumps({"user": "u0", "time": 2.5, "value": 99.0})]
    (incoming / "events.jsonl").write_text("\n".join(lines) + "\n")  # slots of 1 s, long closed on the wall clock
    common = ["--mechanism", "capp", "--epsilon", "2", "--window", "3", "--domain=-5,15", "--out-of-range", "clip",
              "--slot-seconds", "1", "--allowed-lateness", "0", "--requirement", "fixed:3,2",
              "--insecure-seed", "11", "--quiet"]
    assert streaming.run(["--watch", str(incoming), "--settle-seconds", "0", "--poll-seconds", "0.2",
                          "--max-slots", "1", "--output", str(tmp_path / "live"), *common]) == 0
    assert replay.run(["--input", str(incoming / "events.jsonl"), "--output", str(tmp_path / "batch"),
                       *common]) == 0
    live = sorted((r["slot"], r["kind"], tuple(r["estimate"]), r["epsilon"]) for r in
                  map(json.loads, (tmp_path / "live" / "releases-live.jsonl").read_text().splitlines()))
    assert live == _releases(tmp_path / "batch") and len(live) == 6
    assert all(-5 <= estimate[0] <= 15 for _, _, estimate, _ in live)


@pytest.mark.parametrize("method, segment", [("capp", None), ("pp-s", 3), ("ba-sw", None)])
def test_streamed_numeric_device_reports_release_what_the_client_replay_releases(tmp_path, monkeypatch, capsys,
                                                                                  method, segment):
    """--clients --domain: the devices' reports (device.numeric_client.NumericClient) through a TestStream, each slot
    released once the watermark passes its close: the same estimates as pipelines.client_replay on the same
    reports; a report for a closed slot is late, a forged one a dead letter; nothing is asked of the devices."""
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from pipelines import client_replay
    from tests.pipelines.test_client_replay_numeric import BUDGET, HIGH, LOW, WINDOW, method_devices

    lines, values = method_devices(tmp_path, method, users=12, slots=9, segment=segment)
    forged = json.dumps({**json.loads(lines[0]), "epsilon": BUDGET, "slot": 8})  # not the schedule's budget
    late = json.dumps({**json.loads(lines[0]), "slot": 0})  # sent after slot 0 closed

    def source(pipeline, args):  # each slot's reports sent during the slot, the watermark past its close
        stream = TestStream()
        for slot in range(9):
            mine = [line for line in lines + [forged] if json.loads(line)["slot"] == slot]
            stream = stream.add_elements([TimestampedValue(line, slot * SLOT + 1) for line in mine])
            stream = stream.advance_watermark_to((slot + 1) * SLOT + 1)
        stream = stream.add_elements([TimestampedValue(late, 9 * SLOT + 1)])
        return pipeline | stream.advance_watermark_to_infinity()

    monkeypatch.setattr(streaming, "numeric_report_source", source)
    common = ["--mechanism", method, "--epsilon", BUDGET, "--window", str(WINDOW), f"--domain={LOW},{HIGH}",
              "--users", str(tmp_path / "users.txt"), "--requirement", f"fixed:{WINDOW},{BUDGET}", "--quiet",
              *(["--param", f"segment={segment}"] if segment else [])]
    assert streaming.run(["--clients", "--reports-subscription", "projects/p/subscriptions/s", "--slot-seconds",
                          str(SLOT), "--allowed-lateness", "0", "--output", str(tmp_path / "stream"),
                          "--runner", "BundleBasedDirectRunner", *common]) == 0
    streamed = {r["slot"]: r for r in read_records(os.path.join(tmp_path / "stream", "releases-*"), "jsonl")}
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    assert client_replay.run(["--input", str(tmp_path / "reports.jsonl"), "--output", str(tmp_path / "batch"),
                              "--slot-seconds", str(SLOT), *(a for a in common if a != "--quiet")]) == 0
    batch = {r["slot"]: r for path in (tmp_path / "batch").glob("releases*")
             for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "fresh"}
    assert sorted(streamed) == sorted(batch) == sorted(values)
    assert all(streamed[s]["trust"] == "local_client" for s in batch)
    for s in batch:  # the same release records
        assert streamed[s] == batch[s]
    dead = [d["reason"] for d in read_records(os.path.join(tmp_path / "stream", "dead_letters-*"), "jsonl")]
    assert len(dead) == 2
    assert sum(r.startswith("late: slot 0 closed") for r in dead) == 1
    if method != "ba-sw":  # BA-SW reads the duplicate or the parts the rule allows before the budget
        assert sum("not the schedule's" in r for r in dead) == 1
    usage = list(read_records(os.path.join(tmp_path / "stream", "usage-*"), "jsonl"))
    assert usage and all(u["violations"] == 0 for u in usage)
    assert streaming.run(["--clients", "--reports-subscription", "projects/p/subscriptions/s", "--requests-topic",
                          "projects/p/topics/t", "--output", str(tmp_path / "x"), *common]) == 2
    assert "numeric devices are asked nothing" in capsys.readouterr().err


@pytest.mark.parametrize("bounds", [[], ["--start", "60", "--end", "600"]])
def test_streamed_per_user_clients_release_every_slot_as_the_replay_and_the_central_path(tmp_path, monkeypatch,
                                                                                         bounds):
    """--per-user-clients on a TestStream with gaps in the data (slots 2, 3 and 5 empty; with --start/--end the
    range's slots 1-9, slot 0's records dead letters, the slots after the data released too): the same releases as
    the per-user replay of the same lines, and slot for slot the kinds of the central streaming path."""
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    lines = [json.dumps({"user": f"u{u}", "time": slot * SLOT + 1 + u, "value": -5 + (u * 7 + slot * 3) % 21})
             for slot in (0, 1, 4, 6) for u in range(8)]

    def source(pipeline, args):  # the events slot by slot, the watermark past each slot, empty ones too
        stream = TestStream()
        for slot in range(7):
            mine = [line for line in lines if int(json.loads(line)["time"] // SLOT) == slot]
            if mine:
                stream = stream.add_elements([TimestampedValue(line, slot * SLOT) for line in mine])
            stream = stream.advance_watermark_to((slot + 1) * SLOT + 1)
        return pipeline | stream.advance_watermark_to_infinity()

    monkeypatch.setattr(streaming, "runner_source", source)
    common = ["--mechanism", "sw-direct", "--epsilon", "2", "--window", "3", "--domain=-5,15", "--slot-seconds",
              str(SLOT), "--allowed-lateness", "0", "--requirement", "fixed:3,2", "--insecure-seed", "11", "--quiet",
              *bounds]
    for name, stage in (("stream", ["--per-user-clients"]), ("central", [])):
        assert streaming.run(["--pubsub-subscription", "projects/p/subscriptions/s", "--output",
                              str(tmp_path / name), "--runner", "BundleBasedDirectRunner", *common, *stage]) == 0
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    assert replay.run(["--input", str(tmp_path / "events.jsonl"), "--output", str(tmp_path / "batch"), *common,
                       "--per-user-clients"]) == 0
    streamed = _full_releases(tmp_path / "stream")
    assert streamed == _full_releases(tmp_path / "batch")
    slots = range(1, 10) if bounds else range(7)
    assert {slot: kind for slot, (kind, _, _) in streamed.items()} == \
        {slot: "fresh" if slot in (0, 1, 4, 6) else "skipped" for slot in slots}
    assert {slot: kind for slot, (kind, _, _) in _full_releases(tmp_path / "central").items()} == \
        {slot: kind for slot, (kind, _, _) in streamed.items()}
    if bounds:  # slot 0's records (no dead letter file without a range: there is no dead letter)
        dead = list(read_records(os.path.join(tmp_path / "stream", "dead_letters-*"), "jsonl"))
        assert len(dead) == 8 and all(d["reason"].startswith("outside the release") for d in dead)


def _slot_source(lines: list, slots: range):
    """A ``runner_source`` replacement: the lines of ``slots`` slot by slot, the watermark past each slot."""
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    def source(pipeline, args):
        stream = TestStream()
        for slot in slots:
            mine = [line for line in lines if int(json.loads(line)["time"] // SLOT) == slot]
            stream = stream.add_elements([TimestampedValue(line, slot * SLOT) for line in mine])
            stream = stream.advance_watermark_to((slot + 1) * SLOT + 1)
        return pipeline | stream.advance_watermark_to_infinity()

    return source


def _usage(directory) -> list:
    return list(read_records(os.path.join(directory, "usage-*"), "jsonl"))


@pytest.mark.parametrize("stage", [["--mechanism", "ipp"], ["--mechanism", "pp-s", "--param", "segment=3"],
                                   ["--mechanism", "ipp", "--param", "crowd_window=3", "--param", "crowd_bins=4"]])
def test_a_per_user_stream_split_in_two_jobs_releases_what_one_job_releases(tmp_path, monkeypatch, stage):
    """--per-user-clients --checkpoint-dir / --resume-from on a TestStream (BundleBasedDirectRunner): 10 slots in
    one job, or slots 0-5 then 6-9 in a job resumed from the first's final checkpoint: the same releases, no
    violation in either job, and the resumed job's ledger continues the carried windows (IPP: a user's window at
    its first slot there is as full as the uninterrupted job's worst, not a third of it).  A job resumed from the
    uninterrupted job's periodic checkpoint after slot 3 (--checkpoint-every 4; PP-S: the segment of slots 3-5
    open in it) releases that job's later slots, and the batch replay resumes the streaming checkpoint as the
    streaming job does.  (A job that ends closes its users' open segments, as the end of the stream does: hence
    the split at a segment's start.)"""
    lines = _events(users=8, slots=10)
    common = ["--epsilon", "2", "--window", "3", "--domain=-5,15", "--out-of-range", "clip", "--slot-seconds",
              str(SLOT), "--allowed-lateness", "0", "--requirement", "fixed:3,2", "--insecure-seed", "11", "--quiet",
              "--per-user-clients", *stage]

    def job(name: str, slots: range, *extra: str):
        monkeypatch.setattr(streaming, "runner_source", _slot_source(lines, slots))
        assert streaming.run(["--pubsub-subscription", "projects/p/subscriptions/s", "--output", str(tmp_path / name),
                              "--runner", "BundleBasedDirectRunner", *common, *extra]) == 0
        return _full_releases(tmp_path / name)

    whole = job("whole", range(10), "--checkpoint-dir", str(tmp_path / "periodic"), "--checkpoint-every", "4")
    first = job("first", range(6), "--checkpoint-dir", str(tmp_path / "split"))
    second = job("second", range(6, 10), "--resume-from", str(tmp_path / "split"))
    released = range(12) if stage[1] == "pp-s" else range(10)  # PP-S: the last segment, 9-11, reports at the end
    assert sorted(whole) == list(released) and sorted(first) == list(range(6))
    assert {**first, **second} == whole
    usage = {name: _usage(tmp_path / name) for name in ("whole", "first", "second")}
    assert all(u["violations"] == 0 for records in usage.values() for u in records)
    if stage[1] == "ipp":  # a report every slot: the resumed job's first window holds two carried slots' charges
        worst = max(u["max_window_usage_ratio"] for u in usage["whole"])
        firsts = [u["max_window_usage_ratio"] for u in usage["second"] if u["slots"] == 1]
        assert len(firsts) == 8 and worst > 0.5 and all(ratio == pytest.approx(worst) for ratio in firsts)
    central = [a for a in common if a != "--per-user-clients"]  # the central path refuses the per-user state
    assert streaming.run(["--pubsub-subscription", "projects/p/subscriptions/s", "--output", str(tmp_path / "c"),
                          *central, "--resume-from", str(tmp_path / "split")]) == 2
    after_slot_3 = tmp_path / "periodic" / checkpoint.file_name(CLIENTS_STREAM, 4)
    assert after_slot_3.exists(), sorted(os.listdir(tmp_path / "periodic"))
    resumed = job("resumed", range(4, 10), "--resume-from", str(after_slot_3))
    assert resumed == {slot: release for slot, release in whole.items() if slot >= 4}
    (tmp_path / "last.jsonl").write_text("\n".join(line for line in lines
                                                   if int(json.loads(line)["time"] // SLOT) >= 6) + "\n")
    assert replay.run(["--input", str(tmp_path / "last.jsonl"), "--output", str(tmp_path / "batch"), *common,
                       "--resume-from", str(tmp_path / "split")]) == 0
    # (bounded input carries a segment still open at its last slot, PP-S's 9-11, instead of closing it)
    assert _full_releases(tmp_path / "batch") == {slot: release for slot, release in second.items() if slot <= 9}
    if "crowd_window=3" in stage:  # the crowd distribution: each user's recent reports carried (the resumed job's
        # first slots read the first job's), fractions released
        assert {release[1] and len(release[1]) for release in whole.values()} == {4}


def test_streaming_per_user_clients_refuse_the_crowd_distribution_with_sma_in_one_line(capsys):
    """The crowd distribution is a list of fractions per slot: with --sma the per-user streaming job refuses it
    before starting."""
    from pipelines import streaming
    code = streaming.run(["--demo", "--domain", "0,1", "--mechanism", "capp", "--epsilon", "1", "--window", "3",
                          "--per-user-clients", "--requirement", "fixed:3,1", "--param", "crowd_window=3",
                          "--param", "crowd_bins=4", "--sma", "3",
                          "--output", "unused"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "the crowd distribution" in err[0] and "SMA" in err[0]
