"""Shared helpers for the mechanism-core tests."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from transforms.mechanisms import PrivacyLedger, SlotBatch
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.noise import insecure_seeded_randomness


def units(epsilon) -> int:
    """Exact units of a decimal epsilon (test vectors are chosen to be exact)."""
    exact = Fraction(str(epsilon)) * UNITS_PER_EPSILON
    assert exact.denominator == 1, f"{epsilon} is not exact in units"
    return int(exact)


def declaring(users, requirements) -> SlotBatch:
    """A slot's rows that only declare: ``users`` with ``requirements`` (None: nobody declares)."""
    users = np.asarray(users, np.int64)
    return SlotBatch.of(users, np.full(users.size, -1), requirements)


def admit(mechanism, batch: SlotBatch, slot: int):
    """``mechanism.admit(batch)``, checking that ``slot`` is the mechanism's next one."""
    assert slot == mechanism.slot + 1, f"the mechanism's next slot is {mechanism.slot + 1}, not {slot}"
    return mechanism.admit(batch)


def drive(mechanism, batch: SlotBatch, publish: bool):
    """Run one slot's budget allocation with a *given* publish decision.

    The worked examples of the papers fix the decisions (e.g. "publish at 1,
    skip at 2"); this runs the mechanism's own allocation steps around that
    decision and returns ``(dc, publication)`` per batch user, or
    ``(dc, None)`` when the mechanism nullifies the slot itself.
    """
    data = mechanism.admit(batch)
    dc = mechanism.dc_budgets(data)
    publication = mechanism.publication_budgets(data)
    rows = mechanism.population.cohort_of[batch.users]
    if publication is None:
        mechanism.record(dc, np.zeros_like(dc), published=False)
        return dc[rows], None
    mechanism.record(dc, publication if publish else np.zeros_like(publication), published=publish)
    return dc[rows], publication[rows]


def run_with_ledger(mechanism, batches, seed: int = 0, max_window: int = 200):
    """Step through ``batches`` with a seeded generator, checking every charge in a ledger."""
    engine = Engine(mechanism, insecure_seeded_randomness(seed), PrivacyLedger(max_window=max_window))
    releases = list(engine.run(batches))
    engine.close()
    return releases, engine.ledger
