"""Checkpoints of the release stage: the file format's refusals, and Beam jobs resumed mid-stream."""

from __future__ import annotations

import glob
import json
import os
import pickle
import re
from decimal import Decimal

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_helpers import (FIXED_CHOICES, SLOT, batch_pipeline, make_events, reference_releases, streaming_pipeline,
                          streaming_source)
from transforms import checkpoint as ckpt
from transforms.ledger import check_windows, empty_tail
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.requirements import FixedRequirements
from transforms.declarations import RequirementPolicy
from transforms.private_histogram import PrivateStreamHistogram
from transforms.records import pack_contributions
from transforms.engine import ReleaseConfig, StreamEngine
from transforms.release import CHARGES, CHECKPOINTS, DEAD_LETTERS, EVALUATION, BoundedRelease
from transforms.sinks import WriteCheckpoints
from transforms.user_state import ACCOUNTING
from transforms.slotting import SlotClock

EVERY = 4


def private(seed: int | None = 7, **kwargs) -> PrivateStreamHistogram:
    kwargs.setdefault("policy", RequirementPolicy())  # every test event declares its own requirement
    return PrivateStreamHistogram("pbd", SLOT, 4, insecure_seed=seed, ledger_detail=True, **kwargs)


def summarize(release: dict) -> tuple:
    return release["slot"], release["kind"], tuple(release["histogram"])


def run_batch(events, directory=None, **kwargs) -> dict:
    """One bounded job; returns its releases, dead letters and ledger entries (and writes its checkpoints)."""
    found: dict = {"releases": [], "dead_letters": [], "ledger_entries": []}
    with batch_pipeline() as p:
        out = p | beam.Create(events) | private(**kwargs)
        for name in found:
            out[name] | f"Keep{name}" >> beam.Map(_keep, name)
        if directory:
            out["checkpoints"] | beam.ParDo(WriteCheckpoints(str(directory), keep=100))
    return {name: _KEPT.pop(name, []) for name in found}


_KEPT: dict = {}


def _keep(record, name):
    _KEPT.setdefault(name, []).append(record)


def whole_run_violations(entries: list, users: int) -> list:
    """The ledger over every charge of the run at once (a slot released twice is charged twice), each
    user's requirement from ``make_events``."""
    by_user: dict = {}
    for e in entries:
        charges = by_user.setdefault(e["user"], {})
        spent, least = charges.get(e["slot"], (0, 0))
        charges[e["slot"]] = (spent + to_units(Decimal(e["charge"])), least + to_units(Decimal(e["least"])))
    found = []
    for user, charges in by_user.items():
        window, epsilon = FIXED_CHOICES[int(user[4:]) % len(FIXED_CHOICES)]
        slots = np.array(sorted(charges), np.int64)
        spent, least = np.array([charges[s] for s in sorted(charges)], np.int64).T
        chunk = {"slots": slots, "charge": spent, "dc": np.zeros_like(spent), "least": least,
                 "kind": FixedRequirements, "final": True,
                 "requirements": np.tile([window, to_units(epsilon)], (slots.size, 1))}
        found += check_windows(empty_tail(), chunk, 1000)[2]
    assert len(by_user) == users
    return found


# ---------------------------------------------------------------- the file


def small_checkpoint(seed: int | None = 7) -> tuple[ReleaseConfig, bytes]:
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=seed)
    run = StreamEngine.load(config, "s", None)
    events = make_events(seed=1, users=5, slots=3, bins=4)
    rows = [(int(e.time // SLOT), e.user, e.value, e.requirement, (e.raw,)) for e in events]
    list(run.release_until(max(r[0] for r in rows), rows, final=False))
    return config, ckpt.encode(config.new_checkpoint({"s": run.state()}))


def test_a_checkpoint_round_trips_and_a_secure_generator_is_never_saved():
    config, payload = small_checkpoint()
    loaded = ckpt.decode(payload, "mem")
    state = loaded.streams["s"]
    assert state.next_slot == 3 and state.user_ids == [f"user{u:03d}" for u in range(5)]
    assert state.declared["user001"] == ("fixed", *FIXED_CHOICES[1])
    assert ckpt.encode(loaded) == payload
    resumed = StreamEngine.load(config, "s", state)
    assert resumed.state().mechanism == state.mechanism and resumed.randomness.uint32(3).size == 3
    secure_config, secure_payload = small_checkpoint(seed=None)
    assert ckpt.decode(secure_payload, "mem").streams["s"].randomness is None
    with pytest.raises(ValueError, match="never saved"):
        ckpt.dump_randomness(StreamEngine.load(secure_config, "s", None).randomness)
    # a seeded checkpoint resumed without the seed draws secure noise
    assert StreamEngine.load(secure_config, "s", state).randomness.is_secure


def one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_a_damaged_foreign_or_mismatched_checkpoint_is_refused_with_one_line(tmp_path):
    config, payload = small_checkpoint()
    path = tmp_path / "c.wevent"
    flipped = bytearray(payload)
    flipped[len(payload) // 2] ^= 1
    for content, message in [(bytes(flipped), "damaged"), (payload[:-10], "damaged"), (b"PK\x03\x04junk", "not a"),
                             (payload.replace(f"CHECKPOINT {ckpt.VERSION}\n".encode(), b"CHECKPOINT 9\n", 1),
                                  "version '9'")]:
        path.write_bytes(content)
        with pytest.raises(ckpt.CheckpointError) as error:
            ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7, resume_from=str(path))
        assert message in one_line(error)
    path.write_bytes(payload)
    ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7, resume_from=str(path))  # fits
    for kwargs, message in [({"mechanism": "pba"}, "written by mechanism pbd, not pba"),
                            ({"params": {"bins": 5}}, "bins saved 4 now 5"),
                            ({"params": {"bins": 4, "carry_forward": True}}, "carry_forward saved False now True"),
                            ({"clock": SlotClock(30.0)}, "slots of 60 s"),
                            ({"insecure_seed": 8}, "insecure seed 7, not 8")]:
        fields = {"mechanism": "pbd", "params": {"bins": 4}, "clock": SlotClock(SLOT), "insecure_seed": 7, **kwargs}
        with pytest.raises(ValueError) as error:
            ReleaseConfig(**fields, resume_from=str(path))
        assert message in one_line(error)
    older = ckpt.decode(payload, "mem")  # written before an option existed: its JSON lacks the field
    params = json.loads(older.params)
    del params["carry_forward"]
    older.params = json.dumps(params, sort_keys=True)
    path.write_bytes(ckpt.encode(older))
    ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7, resume_from=str(path))  # at its default
    with pytest.raises(ValueError, match="carry_forward saved None now True"):
        ReleaseConfig("pbd", {"bins": 4, "carry_forward": True}, SlotClock(SLOT), insecure_seed=7,
                      resume_from=str(path))
    with pytest.raises(ckpt.CheckpointError, match="does not exist"):
        ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), resume_from=str(tmp_path / "missing.wevent"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ckpt.CheckpointError, match="holds no checkpoint"):
        ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), resume_from=str(tmp_path / "empty"))


class _Exploit:
    def __reduce__(self):
        return os.system, ("echo pwned",)


def test_a_checkpoint_cannot_make_the_loader_run_code():
    config, payload = small_checkpoint()
    loaded = ckpt.decode(payload, "mem")
    loaded.streams["s"].randomness = pickle.dumps(_Exploit())
    forged = ckpt.decode(ckpt.encode(loaded), "forged")  # a valid checksum: anyone can compute one
    with pytest.raises(ckpt.CheckpointError, match=r"refers to (posix|os)\.system"):
        StreamEngine.load(config, "s", forged.streams["s"])


# ---------------------------------------------------------------- Beam jobs resumed


def test_a_resumed_batch_job_continues_exactly_and_never_overspends(tmp_path):
    """Checkpoints every 4 slots of one job; a new job resumed from each continues the same releases, the
    records of released slots are late, and the whole-run ledger finds no window over a requirement.
    A batch job's checkpoint carries the releases it made (its sink publishes only at the end), so the
    resumed job publishes those first, the same records, and its ledger sees their charges.
    Started on the same input without the checkpoint (the power check), the job releases those slots
    again with a mechanism that forgot their budgets, and the same ledger finds overspent windows."""
    users = 12
    events = make_events(seed=11, users=users, slots=20, bins=4)
    expected = reference_releases(events, "pbd", {"bins": 4}, seed=7)
    whole = run_batch(events, tmp_path / "checkpoints", checkpoint_every=EVERY)
    assert sorted(map(summarize, whole["releases"])) == expected
    files = sorted(glob.glob(str(tmp_path / "checkpoints" / "*.wevent")))
    assert [int(re.search(r"-(\d+)\.wevent$", f).group(1)) for f in files] == [4, 8, 12, 16, 20]
    for path, restart in [(files[1], 8), (files[2], 12)]:
        resumed = run_batch(events, resume_from=path)
        assert sorted(map(summarize, resumed["releases"])) == expected  # carried (slots < restart), then new
        late = [e for e in events if e.time // SLOT < restart]
        assert sorted(d["record"] for d in resumed["dead_letters"]) == sorted(e.raw for e in late)
        assert {d["reason"].split(":")[0] for d in resumed["dead_letters"]} == {"late"}
        assert sorted(resumed["ledger_entries"], key=str) == sorted(whole["ledger_entries"], key=str)
        assert whole_run_violations(resumed["ledger_entries"], users) == []
    fresh = run_batch(events)  # the same input as the resumed jobs, without the checkpoint
    before = [e for e in whole["ledger_entries"] if e["slot"] < 8]
    assert whole_run_violations(before + fresh["ledger_entries"], users), "a fresh mechanism must overspend"


def test_a_resumed_streaming_job_continues_from_the_checkpoint_directory(tmp_path):
    """TestStream, slot by slot: the first job stops after slot 5, the second resumes from the directory
    the first wrote (its latest file) and gets records of slots 4 and 5 again: they are late."""
    events = make_events(seed=12, users=6, slots=10, bins=4)
    expected = reference_releases(events, "pbd", {"bins": 4}, seed=7)
    directory = tmp_path / "checkpoints"
    with streaming_pipeline() as p:
        out = streaming_source(p, [e for e in events if e.time // SLOT < 6], 0.0) | private(checkpoint_every=100)
        out["checkpoints"] | beam.ParDo(WriteCheckpoints(str(directory)))
    assert len(os.listdir(directory)) == 3  # one per firing, the latest three kept
    again = [e for e in events if e.time // SLOT >= 4]
    with streaming_pipeline() as p:
        out = streaming_source(p, again, 0.0) | private(resume_from=str(directory))
        assert_that(out["releases"] | beam.Map(summarize), equal_to([r for r in expected if r[0] >= 6]))
        assert_that(out["dead_letters"] | beam.Map(lambda d: (d["record"], d["reason"].split(":")[0])),
                    equal_to([(e.raw, "late") for e in again if e.time // SLOT < 6]), label="late")


def test_the_release_controller_counts_a_second_contribution_in_its_accounting():
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7)
    declared = ("fixed", 3, "1.0")
    rows = [(0, "a", 1, declared, ("x",)), (0, "a", 2, declared, ("y", "z")), (0, "b", 0, declared, ("b",))]
    with batch_pipeline() as p:
        out = (p | beam.Create([("s", [pack_contributions(rows)])])
               | beam.ParDo(BoundedRelease(config)).with_outputs(
                   CHARGES, DEAD_LETTERS, ACCOUNTING, EVALUATION, CHECKPOINTS, main="releases"))
        assert_that(out[ACCOUNTING] | beam.CombinePerKey(sum), equal_to([("records_used", 3), ("duplicates", 1)]))
