"""No presence leak through the published outputs (issue 26, items 6 and 7).

DPI's neighbours differ by all of one user's records, so nothing DPI publishes may depend on whether a user
exists beyond what its noise explains: its release records carry no count of registered users, and a DPI job
without a public release range (``--start``/``--end``) stops before running.  The windowed families publish what
their trust model makes public, each in its own field: ``registered_users`` (the central path's registered users
of the slot) and, under the local models, ``reporters``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines import replay, streaming
from transforms.sinks import read_records

USERS, SLOTS, BINS = 30, 8, 4
NOISY = ("estimate", "histogram")
"""The fields a DPI release computes from the data through its mechanism (the draws' synopses)."""


def write_events(path, with_target: bool) -> str:
    """``USERS`` users report every 10-second slot; with ``with_target`` one more user reports from slot 3 on."""
    gen = np.random.default_rng(0)
    lines = [json.dumps({"user": f"u{u}", "time": 10 * t + float(gen.random()), "value": int(gen.integers(BINS))})
             for t in range(SLOTS) for u in range(USERS)]
    if with_target:
        lines += [json.dumps({"user": "target", "time": 10 * t + 5.0, "value": 3}) for t in range(3, SLOTS)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def dpi_releases(tmp_path, name: str, with_target: bool) -> list[dict]:
    out = tmp_path / f"{name}-{int(with_target)}"
    code = replay.run(["--input", write_events(tmp_path / f"events-{int(with_target)}.jsonl", with_target),
                       "--binning", f"int:{BINS}", "--slot-seconds", "10", "--start", "0", "--end", str(10 * SLOTS),
                       "--requirement", "lifetime:2.0", "--mechanism", name, "--epsilon", "2.0", "--param",
                       "pool_size=50", "--param", "draws=4", "--output", str(out), "--quiet", "--insecure-seed", "1"])
    assert code == 0
    return sorted(read_records(str(out / "releases-*.jsonl"), "jsonl"), key=lambda r: r["slot"])


@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
def test_a_dpi_release_does_not_say_whether_a_user_exists(tmp_path, name):
    """The same seeded job with and without one user (who reports from slot 3 on): every published field but the
    mechanism's noisy estimate is identical, slot for slot.  Before, ``registered_users`` was 30 in one run and 31
    in the other from slot 3 on, whatever the seed."""
    without, with_target = dpi_releases(tmp_path, name, False), dpi_releases(tmp_path, name, True)
    assert [r["slot"] for r in without] == [r["slot"] for r in with_target] == list(range(SLOTS))
    for a, b in zip(without, with_target):
        assert {k: v for k, v in a.items() if k not in NOISY} == {k: v for k, v in b.items() if k not in NOISY}
        assert a["registered_users"] is None and a["reporters"] is None


@pytest.mark.parametrize("job", ["replay", "stream", "watch"])
@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
def test_a_dpi_job_without_a_release_range_stops_before_running(tmp_path, capsys, job, name):
    """Without --start/--end the released slots would follow the data (fails before: the jobs ran and warned)."""
    events = write_events(tmp_path / "events.jsonl", False)
    mechanism = ["--requirement", "lifetime:2.0", "--mechanism", name, "--epsilon", "2.0", "--param", "pool_size=50",
                 "--param", "draws=4", "--output", str(tmp_path / "out"), "--quiet"]
    if job == "replay":
        code = replay.run(["--input", events, "--binning", f"int:{BINS}", *mechanism])
    elif job == "stream":
        code = streaming.run(["--demo", "--demo-taxis", "3", "--max-slots", "2", *mechanism])
    else:
        (tmp_path / "incoming").mkdir()
        code = streaming.run(["--watch", str(tmp_path / "incoming"), "--binning", f"int:{BINS}", "--max-slots", "1",
                              "--poll-seconds", "0.01", *mechanism])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--start and --end" in err[0], err
    assert not (tmp_path / "out").exists()


def central_replay(tmp_path, mechanism: list[str]) -> list[dict]:
    out = tmp_path / "out"
    code = replay.run(["--input", write_events(tmp_path / "events.jsonl", True), "--binning", f"int:{BINS}",
                       "--slot-seconds", "10", "--start", "0", "--end", str(10 * SLOTS), "--output", str(out),
                       "--quiet", "--insecure-seed", "3", *mechanism])
    assert code == 0
    return sorted(read_records(str(out / "releases-*.jsonl"), "jsonl"), key=lambda r: r["slot"])


def test_the_central_path_writes_registered_users_and_no_reporters(tmp_path):
    """PWSM: the registered users of the slot (31 once the late user registers at slot 3), no reporter count."""
    releases = central_replay(tmp_path, ["--requirement", "fixed:4,2.0"])
    assert [r["registered_users"] for r in releases] == [USERS] * 3 + [USERS + 1] * (SLOTS - 3)
    assert {r["reporters"] for r in releases} == {None} and {r["trust"] for r in releases} == {"central"}


def test_a_local_method_publishes_its_reporters_in_their_own_field(tmp_path):
    """LBU simulated by the collector: everyone holding a value reports at every slot, so ``reporters`` counts the
    slot's reporters (30, then 31) beside the registered users (fails before: the field did not exist)."""
    releases = central_replay(tmp_path, ["--mechanism", "lbu", "--epsilon", "2.0", "--window", "4",
                                         "--requirement", "fixed:4,2.0"])
    assert {r["trust"] for r in releases} == {"local_simulated"}
    assert [r["reporters"] for r in releases] == [USERS] * 3 + [USERS + 1] * (SLOTS - 3)
    assert [r["registered_users"] for r in releases] == [USERS] * 3 + [USERS + 1] * (SLOTS - 3)
