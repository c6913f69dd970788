"""The streaming job with --domain: numeric events through a TestStream release what the replay releases."""

from __future__ import annotations

import json
import os

import pytest

from pipelines import replay, streaming
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
    (["--demo"], "not with --demo"),
    (["--pubsub-subscription", "projects/p/subscriptions/s", "--binning", "int:4"], "not both"),
    (["--pubsub-subscription", "projects/p/subscriptions/s", "--domain=3,1"], "LOW < HIGH"),
])
def test_a_bad_numeric_configuration_fails_before_the_job_with_one_line(tmp_path, capsys, extra, message):
    args = ["--mechanism", "capp", "--epsilon", "2", "--window", "3", "--output", str(tmp_path / "out"), *extra]
    if not any(a.startswith("--domain") for a in extra):
        args.append("--domain=0,1")
    assert streaming.run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
