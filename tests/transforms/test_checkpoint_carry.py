"""Checkpoint format 2: the releases (and charges) no output is known to hold travel with the state.

Each test fails on format 1, whose checkpoints recorded a slot as released whether or not any output held it.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from beam_helpers import SLOT, make_events
from transforms.checkpoint import (VERSION, Checkpoint, StreamState, acknowledge, decode, encode, file_name, load,
                                   load_for_resume, save)
from transforms.records import KEY_SEPARATOR
from transforms.engine import CheckpointSaved, ReleaseConfig, Released, StreamEngine
from transforms.slotting import SlotClock

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "pipelines", "fixtures",
                       "checkpoint-v1-slot20.wevent")


def rows(slots: int = 6):
    return [(int(e.time // SLOT), e.user, e.value, e.requirement, (e.raw,))
            for e in make_events(seed=2, users=6, slots=slots, bins=4)]


def test_unpublished_releases_and_pending_charges_round_trip_exactly():
    charges = [(np.array([0, 2], np.int64), np.arange(12, dtype=np.int64).reshape(2, 6)),
               (np.zeros(0, np.int64), np.zeros((0, 6), np.int64)),
               (np.array([1], np.int64), np.full((1, 6), 7, np.int64))]
    releases = [{"slot": 3, "histogram": [1, -2], "estimate": [float("nan"), np.float64(0.5)], "figures": {},
                 "predicted_error": None, "count": np.int64(4)}]
    state = StreamState(b"mechanism", ["a", "b", "c"], {"a": ("fixed", 4, 1)}, 4, None, b"req", releases, charges,
                        ("total",))
    payload = encode(Checkpoint("pbd", "{}", 60.0, 0.0, 7, {"s": state}))
    assert payload.startswith(f"WEVENT-CHECKPOINT {VERSION}\n".encode()) and VERSION == 2
    back = decode(payload, "test").streams["s"]
    (record,) = back.unpublished
    assert math.isnan(record["estimate"][0]) and record["estimate"][1] == 0.5 and record["count"] == 4
    assert [u.tolist() for u, _ in back.pending_charges] == [[0, 2], [], [1]]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(back.pending_charges, charges))
    assert back.charge_parts == ("total",)
    assert back.acknowledged().unpublished == [] and back.acknowledged().pending_charges == []


def test_a_format_1_checkpoint_is_still_read_with_nothing_carried():
    saved = load(FIXTURE)
    (state,) = saved.streams.values()
    assert state.next_slot == 20 and state.unpublished == [] and state.pending_charges == []


def test_a_bounded_run_carries_every_release_since_it_started_an_unbounded_one_hands_them_to_the_writer():
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7, checkpoint_every=2)
    bounded, unbounded = StreamEngine.load(config, "s", None, carry=True), StreamEngine.load(config, "s", None)
    carried = list(bounded.release_until(5, rows(), final=True))
    handed = list(unbounded.release_until(5, rows(), final=False))
    released = [o.record["slot"] for o in carried if isinstance(o, Released)]
    saved = [o for o in carried if isinstance(o, CheckpointSaved)]
    assert [s.next_slot for s in saved] == [2, 4, 6]
    for point in saved:  # each payload holds every release before its slot and the charges of those slots
        state = decode(point.payload, "test").streams["s"]
        assert [r["slot"] for r in state.unpublished] == released[:point.next_slot]
        assert len(state.pending_charges) == point.next_slot and point.releases == ()
    points = [o for o in handed if isinstance(o, CheckpointSaved)]
    assert [[r["slot"] for r in p.releases] for p in points] == [[0, 1], [2, 3], [4, 5]]
    assert all(decode(p.payload, "test").streams["s"].unpublished == [] for p in points)


def test_a_resumed_engine_keeps_carrying_what_the_old_job_left_unpublished():
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7, checkpoint_every=3)
    first = StreamEngine.load(config, "s", None, carry=True)
    outputs = list(first.release_until(5, [r for r in rows(9) if r[0] <= 5], final=True))
    state = decode([o for o in outputs if isinstance(o, CheckpointSaved)][-1].payload, "t").streams["s"]
    resumed = StreamEngine.load(config, "s", state, carry=True)
    later = list(resumed.release_until(8, [r for r in rows(9) if r[0] > 5], final=True))
    last = decode([o for o in later if isinstance(o, CheckpointSaved)][-1].payload, "t").streams["s"]
    assert [r["slot"] for r in last.unpublished] == list(range(9))
    assert len(last.pending_charges) == 9


def test_acknowledging_clears_what_the_finished_job_published_and_keeps_every_resumed_stream(tmp_path):
    directory = str(tmp_path / "ckpt")
    os.mkdir(directory)
    carrying = StreamState(b"m", ["a"], {}, 5, None, None, [{"slot": 4}], [(np.array([0]), np.ones((1, 3), int))],
                           ("total",))
    save(os.path.join(directory, file_name("s", 5)), Checkpoint("pbd", "{}", 60.0, 0.0, 7, {"s": carrying}))
    resumed = Checkpoint("pbd", "{}", 60.0, 0.0, 7, {"s": carrying, "quiet": carrying})  # "quiet" never fired
    assert acknowledge(directory, resumed) == 2
    streams = load_for_resume(directory).streams
    assert sorted(streams) == ["quiet", "s"]
    assert all(s.unpublished == [] and s.pending_charges == [] and s.next_slot == 5 for s in streams.values())
    assert acknowledge(directory, resumed) == 0  # nothing left to clear


def test_the_watch_loop_seeded_by_a_replays_checkpoint_publishes_the_releases_it_carries_once(tmp_path):
    from pipelines.live import LiveRelease
    from transforms.declarations import RequirementPolicy
    from transforms.parse import ParseConfig
    from transforms.private_histogram import PrivateStreamHistogram

    def loop():
        transform = PrivateStreamHistogram("pbd", SLOT, 4, insecure_seed=7, policy=RequirementPolicy())
        return LiveRelease(str(tmp_path / "in"), str(tmp_path / "out"), ParseConfig(bins=4), transform,
                           str(tmp_path / "live.wevent"))

    os.mkdir(tmp_path / "in")
    config = PrivateStreamHistogram("pbd", SLOT, 4, insecure_seed=7, checkpoint_every=3,
                                    policy=RequirementPolicy()).config
    run = StreamEngine.load(config, "default", None, carry=True)
    outputs = list(run.release_until(5, rows(), final=True))
    made = [o.record for o in outputs if isinstance(o, Released)]
    save(str(tmp_path / "live.wevent"), decode([o for o in outputs if isinstance(o, CheckpointSaved)][-1].payload,
                                                "t"))
    first = loop()
    first.close()
    assert set(first.tails) == {f"default{KEY_SEPARATOR}{user}" for user in run.user_ids}  # their charges checked
    assert first.counts["ledger_violations"] == 0
    loop().close()  # started again from its own checkpoint: nothing carried any more
    with open(tmp_path / "out" / "releases-live.jsonl") as f:
        written = [json.loads(line) for line in f]
    assert [r["slot"] for r in written] == [r["slot"] for r in made] == list(range(6))
    assert [r["histogram"] for r in written] == [r["histogram"] for r in made]
