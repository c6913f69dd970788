"""Cell building: each slot's values per (cohort, bin), carry-forward, and what is kept between slots."""

from __future__ import annotations

import numpy as np

from conftest import admit
from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism
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
        assert np.all(release.charges.dc_units == to_units(1.0) // 8)
        data = admit(pbd, SlotBatch.empty(), 3)
        assert data.cells.histogram(3).tolist() == ([0, 2, 1] if carry else [0, 0, 0])
