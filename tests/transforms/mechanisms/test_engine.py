"""The core run loop (transforms/mechanisms/engine.py): each step is the mechanism's, checked by the ledger."""

from __future__ import annotations

import itertools

import numpy as np

from streams import StreamSpec
from transforms.mechanisms import PrivacyLedger, make_mechanism
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import insecure_seeded_randomness


def test_the_engine_releases_what_the_mechanism_does_and_the_ledger_sees_every_slot():
    spec = StreamSpec(seed=4, users=40, bins=3, slots=30, windows=(2, 5), epsilons=(0.5, 1.0), presence=0.6,
                      change=0.1, join_spread=5)
    plain, rng = make_mechanism("pba", **spec.mechanism_kwargs("pba")), insecure_seeded_randomness(9)
    expected = [plain.step(batch, rng) for batch in spec.batches()]
    ledger = PrivacyLedger(max_window=5)
    engine = Engine(make_mechanism("pba", **spec.mechanism_kwargs("pba")), insecure_seeded_randomness(9), ledger)
    got = list(engine.run(spec.batches()))
    engine.close()
    assert [r.histogram.tolist() for r in got] == [r.histogram.tolist() for r in expected]
    assert [r.kind for r in got] == [r.kind for r in expected]
    assert ledger.slot == spec.slots and ledger.ok


def test_the_engine_times_the_mechanism_and_the_ledger_apart_with_its_clock():
    ticks = itertools.count()
    spec = StreamSpec(seed=1, users=5, bins=2, slots=4, windows=(3,), epsilons=(1.0,))
    engine = Engine(make_mechanism("pbd", bins=2), insecure_seeded_randomness(0), PrivacyLedger(max_window=3),
                    clock=lambda: float(next(ticks)))
    for _ in engine.run(spec.batches()):
        pass
    # three clock readings per slot: before the step, between step and ledger, after the ledger
    assert engine.mechanism_seconds == 4.0 and engine.ledger_seconds == 4.0
    without = Engine(make_mechanism("pbd", bins=2), insecure_seeded_randomness(0), clock=lambda: float(next(ticks)))
    list(without.run(spec.batches()))
    assert without.ledger_seconds == 0.0 and without.mechanism_seconds == 4.0
    assert np.array_equal(without.exact_histogram_for_evaluation(), engine.exact_histogram_for_evaluation())
