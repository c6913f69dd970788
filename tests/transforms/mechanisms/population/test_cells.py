"""Cell building: each slot's values per (cohort, bin), carry-forward, and what is kept between slots."""

from __future__ import annotations

import numpy as np

from mechanism_helpers import admit
from transforms.mechanisms import DISSIMILARITY, FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness


def fixed(windows, epsilons):
    return FixedRequirements.of(windows, epsilons)


def test_absent_users_are_charged_and_carry_forward_keeps_their_bin():
    for carry in (False, True):
        pbd = make_mechanism("pbd", bins=3, carry_forward=carry)
        rng = insecure_seeded_randomness(1)
        pbd.step(SlotBatch.of([0, 1, 2], [0, 1, 2], fixed([4] * 3, [1.0] * 3)), rng)
        release = pbd.step(SlotBatch.of([0], [1]), rng)
        assert list(release.charges.users) == [0, 1, 2]
        assert np.all(release.charges.part_units(DISSIMILARITY) == to_units(1.0) // 8)
        data = admit(pbd, SlotBatch.empty(), 3)
        assert data.cells.histogram(3).tolist() == ([0, 2, 1] if carry else [0, 0, 0])


def from_scratch(mechanism, batch: SlotBatch) -> np.ndarray:
    """Counts per (cohort, bin) of ``batch`` by the memberships now, without anything kept between slots."""
    rows = mechanism.population.cohort_of[batch.users]
    keep = (rows >= 0) & (batch.values >= 0)
    bins = mechanism.params.bins
    return np.bincount(rows[keep] * bins + batch.values[keep], minlength=mechanism.population.table.rows * bins)


def counted(cells, bins: int, rows: int) -> np.ndarray:
    return np.bincount(cells.cohort * bins + cells.bin, weights=cells.count, minlength=rows * bins).astype(np.int64)


def test_cells_follow_a_user_who_moves_between_steady_slots():
    """Cell keys of users 0..n-1 are kept between steady slots; a move in between must renew them."""
    pbd = make_mechanism("pbd", bins=2)
    n = 8
    values = np.arange(n) % 2
    first = fixed([2] * 4 + [3] * 4, [1.0] * n)
    moved = fixed([1] + [2] * 3 + [3] * 4, [1.0] * n)  # user 0: w' = 1 takes effect at once, a new cohort
    slots = [first, None, moved, None, None]
    for slot, reqs in enumerate(slots, start=1):
        batch = SlotBatch.of(range(n), values, reqs)
        data = admit(pbd, batch, slot)
        rows = pbd.population.table.rows
        assert np.array_equal(counted(data.cells, 2, rows), from_scratch(pbd, batch)), slot
    assert pbd.population.table.rows == 3 and pbd.population.cohort_of[0] == 2


def test_carry_forward_never_counts_a_user_who_waits_for_a_change():
    pbd = make_mechanism("pbd", bins=3, carry_forward=True)
    admit(pbd, SlotBatch.of([0, 1], [1, 2], fixed([2, 2], [1.0, 1.0])), 1)
    admit(pbd, SlotBatch.of([0], [-1], fixed([5], [1.0])), 2)  # user 0 waits until slot 6
    assert admit(pbd, SlotBatch.empty(), 3).cells.histogram(3).tolist() == [0, 0, 1]
    for slot in (4, 5):
        admit(pbd, SlotBatch.empty(), slot)
    assert admit(pbd, SlotBatch.empty(), 6).cells.histogram(3).tolist() == [0, 1, 1]  # in force: back, same bin
