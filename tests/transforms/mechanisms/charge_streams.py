"""Random streams of charges of every shape (cohort, reporter, sparse) under every requirement kind.

The ledgers are tested on these directly, without a mechanism: no mechanism
charges by reporters, sparsely or under lifetime budgets yet, and a ledger must
not depend on how a mechanism happens to behave.  Users join over time, move
between groups, declare new requirements (or get the public default), and
are charged enough that some windows and lifetime budgets are exceeded.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms import (DISSIMILARITY, PUBLICATION, CohortCharges, DynamicRequirements, FixedRequirements,
                                   LifetimeRequirements, ReporterCharges, SlotBatch, SparseCharges)
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.evidence import no_statistics
from transforms.mechanisms.population import UNREGISTERED, WAITING

U = UNITS_PER_EPSILON
SHAPES = ("cohort", "reporter", "sparse")
KINDS = (FixedRequirements, DynamicRequirements, LifetimeRequirements)


def random_requirements(gen: np.random.Generator, kind: type, count: int, max_window: int):
    """``count`` requirements of ``kind`` (budgets between 0.5 and 2 ε; lifetime budgets between 1 and 4 ε)."""
    if kind is FixedRequirements:
        return FixedRequirements(gen.integers(1, max_window + 1, count), gen.integers(U // 2, 2 * U, count))
    if kind is DynamicRequirements:
        return DynamicRequirements(gen.integers(1, max_window + 1, count), gen.integers(U // 2, 2 * U, count),
                                   gen.integers(1, max_window + 1, count), gen.integers(U // 2, 2 * U, count))
    return LifetimeRequirements(gen.integers(U, 4 * U, count))


def _parts(gen: np.random.Generator, count: int) -> dict:
    """Charges of ``count`` groups: PWSM's two parts, or one part of another name."""
    if gen.random() < 0.5:
        return {"report": gen.choice([0, U // 10, U // 7, U // 4], count)}
    return {DISSIMILARITY: gen.choice([0, U // 16, U // 8], count),
            PUBLICATION: gen.choice([0, U // 10, U // 5], count)}


class ChargeStream:
    """Slot after slot, the charges of one shape under one requirement kind (users 0..n-1, n growing)."""

    def __init__(self, seed: int, shape: str, kind: type, max_window: int):
        self.gen = np.random.default_rng(seed)
        self.shape, self.kind, self.max_window = shape, kind, max_window
        self.groups = np.zeros(0, np.int64)  # cohort shape: each user's row at the last slot
        self.default = random_requirements(self.gen, kind, 1, max_window) if self.gen.random() < 0.5 else None

    def next(self):
        """The next slot's charges."""
        gen = self.gen
        before = self.groups.size
        users = before + int(gen.integers(0, 4)) * int(gen.random() < 0.4) + (before == 0)
        declare = np.flatnonzero(gen.random(users) < gen.choice([0.0, 0.2, 1.0]))
        new = np.arange(before, users)
        if self.default is None:  # a new user without a default must declare
            declare = np.union1d(declare, new)
        declarations = SlotBatch.of(declare, np.full(declare.size, -1),
                                    random_requirements(gen, self.kind, declare.size, self.max_window))
        common = dict(requirement_kind=self.kind, declarations=declarations, default_requirement=self.default)
        registered = np.arange(users)
        if self.shape == "cohort":
            return self._cohort(users, declarations)
        if self.shape == "reporter":
            self.groups = np.zeros(users, np.int64)
            reporters = np.flatnonzero(gen.random(users) < gen.choice([0.3, 0.9, 1.0]))
            parts = {name: int(units[0]) for name, units in _parts(gen, 1).items()}
            charges = ReporterCharges(registered, reporters, parts, evidence=no_statistics(np.zeros(0, np.int64)),
                                      **common)
        else:
            self.groups = np.zeros(users, np.int64)
            charged = np.flatnonzero(gen.random(users) < gen.choice([0.1, 0.5, 1.0]))
            charges = SparseCharges(registered, charged, _parts(gen, charged.size),
                                    evidence=no_statistics(np.zeros(0, np.int64)), **common)
        return charges

    def _cohort(self, users: int, declarations: SlotBatch) -> CohortCharges:
        gen, kind = self.gen, self.kind
        rows = int(gen.integers(1, 5))
        cohort_of = np.full(users, UNREGISTERED, np.int64)
        cohort_of[:self.groups.size] = self.groups
        cohort_of[self.groups.size:] = gen.integers(0, rows, users - self.groups.size)
        moving = gen.random(users) < gen.choice([0.0, 0.05, 0.5])
        choices = np.arange(rows) if kind is not FixedRequirements else np.concatenate([[WAITING], np.arange(rows)])
        cohort_of[moving] = gen.choice(choices, int(moving.sum()))
        cohort_of[cohort_of >= rows] = gen.integers(0, rows, int((cohort_of >= rows).sum()))  # rows renumbered
        self.groups = cohort_of
        waiting = np.flatnonzero(cohort_of == WAITING)
        return CohortCharges(
            cohort_of=cohort_of, cohort_parts=_parts(gen, rows),
            cohort_requirements=random_requirements(gen, kind, rows, self.max_window), waiting_users=waiting,
            waiting_requirements=random_requirements(gen, FixedRequirements, waiting.size, self.max_window)
            if waiting.size else None,
            evidence=no_statistics(cohort_of), declarations=declarations, default_requirement=self.default)
