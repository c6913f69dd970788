"""Lifetime cohorts (transforms/mechanisms/population/lifetime_cohorts.py): one row per distinct budget."""

from __future__ import annotations

import numpy as np

from transforms.mechanisms import LifetimeRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.noise import insecure_seeded_randomness

U = UNITS_PER_EPSILON


def rows_and_budgets(mechanism) -> dict[int, int]:
    """Each registered user's budget in force, read through the cohort rows."""
    cohort_of = mechanism.population.cohort_of
    in_force = mechanism.in_force_requirements().epsilon_units
    return {int(u): int(in_force[cohort_of[u]]) for u in np.flatnonzero(cohort_of >= 0)}


def test_equal_budgets_share_a_row_and_a_new_declaration_moves_a_user():
    mechanism = make_mechanism("dpi-sound", bins=2, epsilon=1.0, pool_size=4, draws=2, rba="sequential")
    rng = insecure_seeded_randomness(0)
    mechanism.step(SlotBatch.of([0, 1, 2], [0, 1, 0], LifetimeRequirements.of([1.0, 2.0, 1.0])), rng)
    assert rows_and_budgets(mechanism) == {0: U, 1: 2 * U, 2: U}
    assert mechanism.population.table.rows == 2
    mechanism.step(SlotBatch.of([0], [1], LifetimeRequirements.of([2.0])), rng)  # user 0 joins user 1's row
    assert rows_and_budgets(mechanism) == {0: 2 * U, 1: 2 * U, 2: U}
    assert mechanism.population.table.size.tolist() == [1, 2]
    release = mechanism.step(SlotBatch.of([5], [1], LifetimeRequirements.of([3.0])), rng)  # a new budget: a row
    assert rows_and_budgets(mechanism)[5] == 3 * U and mechanism.population.table.rows == 3
    assert release.charges.users.tolist() == [0, 1, 2, 5]
    restored = type(mechanism).from_bytes(mechanism.params, mechanism.to_bytes())
    assert rows_and_budgets(restored) == rows_and_budgets(mechanism)


def test_a_slot_without_declarations_keeps_every_row():
    mechanism = make_mechanism("dpi", bins=2, epsilon=1.0, pool_size=4, draws=2, rba="sequential")
    rng = insecure_seeded_randomness(1)
    mechanism.step(SlotBatch.of([0, 1], [0, 1], LifetimeRequirements.of([1.0, 1.5])), rng)
    before = rows_and_budgets(mechanism)
    mechanism.step(SlotBatch.of([1], [0]), rng)
    mechanism.step(SlotBatch.empty(), rng)
    assert rows_and_budgets(mechanism) == before == {0: U, 1: 3 * U // 2}
