"""The stream engine (transforms/engine.py): records in, typed outputs out, outside Beam."""

from __future__ import annotations

import json
import math

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_helpers import FIXED_CHOICES, SLOT, batch_pipeline, make_events
from pipelines.evaluation.experiment import Task, run_task_stream
from pipelines.live import LiveRelease
from transforms.declarations import RequirementPolicy
from transforms.engine import (ChargeChunk, DeadLetter, Duplicates, LateRecord, RecordsUsed, Released, ReleaseConfig,
                               StreamEngine, group_by_user)
from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.scenarios import PaperSetup
from transforms.parsing import ParseConfig
from transforms.private_histogram import PrivateStreamHistogram
from transforms.records import Event
from transforms.ledger import charge_chunk, check_windows, empty_tail
from transforms.mechanisms.budget import to_units
from transforms.slotting import SlotClock


def test_a_run_released_in_two_calls_equals_one_call_and_remembers_declarations():
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7)
    rows = [(int(e.time // SLOT), e.user, e.value, e.requirement, (e.raw,))  # declared once, then None
            for e in make_events(seed=2, users=6, slots=6, bins=4)]
    whole, split = StreamEngine.load(config, "s", None), StreamEngine.load(config, "s", None)
    once = list(whole.release_until(5, rows, final=False))
    twice = (list(split.release_until(2, [r for r in rows if r[0] <= 2], final=False))
             + list(split.release_until(5, [r for r in rows if r[0] > 2], final=False)))
    assert [o for o in once if not isinstance(o, ChargeChunk)] == [o for o in twice if not isinstance(o, ChargeChunk)]
    assert not [o for o in once if isinstance(o, DeadLetter)]
    assert whole.state().declared == split.state().declared and whole.state().user_ids == split.state().user_ids



def test_a_second_contribution_for_a_user_and_slot_is_counted_as_duplicates_not_lost():
    """A pipeline of one's own may send the release stage two contributions for one (user, slot): one is
    used, the other's records are counted as duplicates (late ones stay late, counted once)."""
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7)
    run = StreamEngine.load(config, "s", None)
    declared = ("fixed", 3, "1.0")
    list(run.release_until(1, [(0, "a", 1, declared, ("a0",)), (1, "a", 2, None, ("a1",))], final=False))
    rows = [(1, "a", 3, None, ("late1", "late2")),             # slot 1 is released: late
            (2, "a", 0, None, ("x",)), (2, "a", 1, None, ("y", "z")),  # two for (a, 2): ("y", "z") is kept
            (3, "a", 2, None, ("w",))]
    outputs = list(run.release_until(3, rows, final=False))
    counts = {kind: 0 for kind in (RecordsUsed, Duplicates, LateRecord)}
    for output in outputs:
        if type(output) in counts:
            counts[type(output)] += 1 if isinstance(output, LateRecord) else output.records
    assert counts == {RecordsUsed: 3, Duplicates: 1, LateRecord: 2}
    assert sum(counts.values()) == sum(len(row[4]) for row in rows)



@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.lists(st.integers(0, 30), unique=True), min_size=1, max_size=8))
def test_the_charges_counting_sort_groups_rows_by_user_in_slot_order(runs):
    users = np.array([u for run in runs for u in run], np.int64)
    rows = np.stack([np.arange(users.size), users], axis=1)  # (entry number, user)
    pending, at = [], 0
    for run in runs:
        pending.append((np.array(run, np.int64), rows[at:at + len(run)]))
        at += len(run)
    if not users.size:
        return
    grouped, first, counts = group_by_user(pending)
    assert grouped.tolist() == rows[np.argsort(users, kind="stable")].tolist()
    assert counts.tolist() == np.bincount(users).tolist() and first.tolist() == (np.cumsum(counts) - counts).tolist()



@pytest.mark.parametrize("broken", [False, True])
def test_the_release_stage_ships_what_users_declared_not_what_the_mechanism_applied(broken, monkeypatch):
    """Power, in the Beam path: a mechanism that ignores a change to a stricter requirement is caught.

    Users declare (w=2, E=1) at slot 0 and (w=2, E=0.2) at slot 2 (in force from slot 3); every slot
    publishes.  The per-user ledger (``check_windows`` on the stage's charge rows) must see the overspend
    only when the mechanism kept the old cohort.
    """
    import transforms.mechanisms.pwsm as pwsm
    from transforms.mechanisms.population import FixedCohorts

    monkeypatch.setattr(pwsm, "is_fresh_publication", lambda *args: True)
    if broken:
        declare = FixedCohorts._declare
        monkeypatch.setattr(FixedCohorts, "_declare",
                            lambda self, batch, slot, rows: declare(self, batch, slot, rows) if rows.min() < 0 else None)
    config = ReleaseConfig("pbd", {"bins": 2}, SlotClock(SLOT), insecure_seed=7)
    run = StreamEngine.load(config, "s", None)
    rows = [(slot, f"u{i}", i % 2, {0: ("fixed", 2, "1.0"), 2: ("fixed", 2, "0.2")}.get(slot), (f"{slot}{i}",))
            for slot in range(6) for i in range(10)]
    outputs = list(run.release_until(5, rows, final=True))
    violations = [v for chunk in outputs if isinstance(chunk, ChargeChunk)
                  for v in check_windows(empty_tail(), charge_chunk(*chunk[1:]), 10)[2]]
    if broken:
        assert violations and {v["kind"] for v in violations} == {"fixed"}
        assert {v["bound_units"] for v in violations} == {to_units("0.2")}
    else:
        assert violations == []



def test_a_checkpoint_without_the_declarations_register_rebuilds_it_from_the_declarations():
    """Checkpoints written before the release stage kept its own register still resume with every user's
    requirement in force (their last declaration, or the default)."""
    import dataclasses

    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=7)
    run = StreamEngine.load(config, "s", None)
    rows = [(int(e.time // SLOT), e.user, e.value, e.requirement, (e.raw,))
            for e in make_events(seed=3, users=6, slots=4, bins=4)]
    list(run.release_until(3, rows, final=False))
    state = run.state()
    assert state.requirements is not None
    old = StreamEngine.load(config, "s", dataclasses.replace(state, requirements=None))
    users = np.arange(len(state.user_ids))
    assert old.requirements.matrix_of(users).tolist() == run.requirements.matrix_of(users).tolist()
    assert old.requirements.knows(users).all()


# ---------------------------------------------------------------- one stream through every path
PATH_USERS, PATH_SLOTS, PATH_BINS, PATH_SEED = 12, 8, 4, 5
PATH_PARAMS = {"pbd": {}, "pba": {}, "bd": {"epsilon": 2.0, "window": 6}}


def path_stream():
    """Every user reports at every slot (the evaluation's loop takes such streams); each declares
    ``FIXED_CHOICES[u % 3]`` with their first record."""
    rnd = np.random.default_rng(11)
    values = rnd.integers(0, PATH_BINS, (PATH_SLOTS, PATH_USERS))
    choices = [FIXED_CHOICES[u % len(FIXED_CHOICES)] for u in range(PATH_USERS)]
    events = [Event("s", f"u{u:02d}", t * SLOT + 1 + u, int(values[t, u]),
                    ("fixed", *choices[u]) if t == 0 else None, f"s|{u}|{t}")
              for t in range(PATH_SLOTS) for u in range(PATH_USERS)]
    requirements = FixedRequirements.of([w for w, _ in choices], [float(e) for _, e in choices])
    return values, requirements, events


def record_bytes(records) -> list[bytes]:
    return [json.dumps(r, sort_keys=True).encode() for r in records]


@pytest.mark.parametrize("name", list(PATH_PARAMS))
def test_every_path_releases_the_same_stream_byte_for_byte(name, tmp_path):
    """The core engine, the stream engine, the Beam pipeline, the watch loop and the evaluation's loop
    release identical histograms for one stream and seed (the release records byte for byte)."""
    values, requirements, events = path_stream()
    params = {"bins": PATH_BINS, **PATH_PARAMS[name]}
    batches = [SlotBatch.of(np.arange(PATH_USERS), values[t], requirements if t == 0 else None)
               for t in range(PATH_SLOTS)]
    core = [r.histogram.tobytes() for r in
            Engine(make_mechanism(name, **params), insecure_seeded_randomness(PATH_SEED)).run(batches)]

    config = ReleaseConfig(name, params, SlotClock(SLOT), insecure_seed=PATH_SEED)
    rows = [(int(e.time // SLOT), e.user, e.value, e.requirement, (e.raw,)) for e in events]
    stream = [o.record for o in StreamEngine.load(config, "s", None).release_until(PATH_SLOTS - 1, rows, True)
              if isinstance(o, Released)]
    assert [np.array(r["histogram"], np.int64).tobytes() for r in stream] == core

    transform = dict(mechanism_params=PATH_PARAMS[name], insecure_seed=PATH_SEED, policy=RequirementPolicy())
    with batch_pipeline() as p:
        out = p | beam.Create(events) | PrivateStreamHistogram(name, SLOT, PATH_BINS, bounded=True, **transform)
        assert_that(out["releases"] | beam.Map(lambda r: json.dumps(r, sort_keys=True).encode()),
                    equal_to(record_bytes(stream)))

    watch = tmp_path / "in"
    watch.mkdir()
    (watch / "all.jsonl").write_text("".join(json.dumps(
        {"stream": e.stream, "user": e.user, "time": e.time, "value": e.value,
         **({"w": e.requirement[1], "epsilon": float(e.requirement[2])} if e.requirement else {})}) + "\n"
        for e in events))
    live = LiveRelease(str(watch), str(tmp_path / "out"), ParseConfig(bins=PATH_BINS),
                       PrivateStreamHistogram(name, SLOT, PATH_BINS, **transform))
    live.poll(settled=True)
    live.release_due(math.inf)
    live.close()
    assert (tmp_path / "out" / "releases-live.jsonl").read_bytes().splitlines() == record_bytes(stream)

    task = Task("paths", name, 2.0, 6, None, 0, PATH_USERS, PATH_SLOTS, 0)
    setup = PaperSetup(users=PATH_USERS, epsilon=2.0, window=6, epsilon_grid=(2.0,), window_grid=(6,))
    slots = ((values[t], np.bincount(values[t], minlength=PATH_BINS)) for t in range(PATH_SLOTS))
    evaluated = run_task_stream(task, setup, PATH_BINS, slots, None, requirements,
                                insecure_seeded_randomness(PATH_SEED))
    assert [row.tobytes() for row in evaluated.released] == core
