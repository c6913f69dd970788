"""Helpers for the Beam tests: synthetic events, an independent in-process reference, runners."""

from __future__ import annotations

import os
import random

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue

from transforms.mechanisms import DynamicRequirements, FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.records import NO_VALUE, Event

SLOT = 60.0
FIXED_CHOICES = [(4, "2.0"), (6, "4.0"), (3, "6.0")]
DYNAMIC_CHOICES = [(1, "8.0", 4, "2.0"), (2, "9.0", 6, "4.0"), (1, "10.0", 3, "6.0")]


def make_events(seed: int, users: int, slots: int, bins: int, dynamic: bool = False, gaps: bool = False,
                stream: str = "s") -> list[Event]:
    """Clean events (no duplicates): each user reports in some slots, declaring a requirement now and then."""
    rnd = random.Random(seed)
    events = []
    active_slots = [s for s in range(slots) if not (gaps and s % 5 in (2, 3))]
    for u in range(users):
        choices = DYNAMIC_CHOICES if dynamic else FIXED_CHOICES
        declaration = ("dynamic" if dynamic else "fixed",) + choices[u % len(choices)]
        for s in active_slots:
            if rnd.random() < 0.7 or s == active_slots[0]:
                t = s * SLOT + rnd.uniform(0, SLOT - 1)
                declare = s == active_slots[0] or (dynamic and rnd.random() < 0.1)
                if declare and dynamic:
                    declaration = ("dynamic",) + rnd.choice(DYNAMIC_CHOICES)
                events.append(Event(stream, f"user{u:03d}", t, rnd.randrange(bins),
                                    declaration if declare else None, f"{stream}|{u}|{s}"))
    return events


def reference_releases(events: list[Event], mechanism: str, params: dict, seed: int) -> list[tuple]:
    """The core mechanism in a plain loop over the same events: (slot, kind, histogram) per slot."""
    engine = Engine(make_mechanism(mechanism, **params), insecure_seeded_randomness(seed))
    m = engine.mechanism
    per_slot: dict[int, dict[str, Event]] = {}
    for e in sorted(events, key=lambda e: (e.time, e.raw)):
        per_slot.setdefault(int(e.time // SLOT), {})[e.user] = e  # last by event time wins
    declared: dict[str, tuple] = {}
    index: dict[str, int] = {}
    out = []
    for slot in range(min(per_slot), max(per_slot) + 1):
        rows = per_slot.get(slot, {})
        users, values, reqs = [], [], []
        for user in sorted(rows):
            e = rows[user]
            if e.requirement is not None:
                declared[user] = e.requirement
            index.setdefault(user, len(index))
            users.append(index[user])
            values.append(e.value if e.value != NO_VALUE else NO_VALUE)
            reqs.append(declared[user])
        order = np.argsort(users, kind="stable")
        if m.requirement_kind is DynamicRequirements:
            columns = DynamicRequirements.of(*[[reqs[i][k] for i in order] for k in range(1, 5)]) if reqs else None
        else:
            columns = FixedRequirements.of([reqs[i][1] for i in order], [reqs[i][2] for i in order]) if reqs else None
        release = engine.step(SlotBatch.of(np.array(users)[order], np.array(values)[order], columns))
        out.append((slot, release.kind.value, tuple(int(x) for x in release.histogram)))
    return out


def batch_pipeline(workers: int = 1) -> beam.Pipeline:
    if workers == 1:
        return beam.Pipeline(runner=FnApiRunner())
    # worker processes unpickle functions defined in these test modules by reference
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [here, os.path.dirname(os.path.dirname(here)), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    options = PipelineOptions(direct_num_workers=workers, direct_running_mode="multi_processing")
    return beam.Pipeline(runner=FnApiRunner(), options=options)


def streaming_source(pipeline, events: list[Event], lateness: float, seed: int = 0):
    """A TestStream that delivers each slot's events out of order, some of them after the slot ended
    (within ``lateness``), and advances the watermark slot by slot."""
    rnd = random.Random(seed)
    by_slot: dict[int, list] = {}
    for e in events:
        by_slot.setdefault(int(e.time // SLOT), []).append(e)
    stream = TestStream()
    held: list = []
    last = max(by_slot)
    for slot in range(min(by_slot), last + 1):
        batch = by_slot.get(slot, [])
        rnd.shuffle(batch)
        now = [e for e in batch if rnd.random() > 0.2] if lateness > 0 else batch
        stream = stream.add_elements([TimestampedValue(e, e.time) for e in now + held])
        held = [e for e in batch if e not in now]
        stream = stream.advance_watermark_to((slot + 1) * SLOT)  # slot ended; held events arrive next
    if held:
        stream = stream.add_elements([TimestampedValue(e, e.time) for e in held])
    stream = stream.advance_watermark_to((last + 1) * SLOT + lateness + 10)  # past the last release
    stream = stream.advance_watermark_to_infinity()
    return pipeline | stream


def streaming_pipeline() -> beam.Pipeline:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    return beam.Pipeline(runner="BundleBasedDirectRunner", options=options)
