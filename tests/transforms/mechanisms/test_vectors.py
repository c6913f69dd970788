"""The worked examples of spec/pwsm.md §4, recomputed (with the papers' misprints corrected as the spec says)."""

from __future__ import annotations

import numpy as np
import pytest

from mechanism_helpers import drive, units
from transforms.mechanisms import (DynamicRequirements, ErrorModel, FixedRequirements, SlotBatch,
                                   make_mechanism)
from transforms.mechanisms.budget import to_units_array
from transforms.mechanisms.obs import optimal_budget, sampling_errors

# Example users of S2 Ex. 3/4: windows (4, 2, 3); budgets chosen so every fraction is exact in units.
E = (0.96, 0.48, 1.92)
W = (4, 2, 3)
USERS = np.arange(3)
DATA = [[0, 1, 4], [0, 0, 3], [0, 2, 3], [1, 2, 2], [1, 3, 3]]  # one-hot rows behind c_1..c_5 (Fig. 4)


def fixed_batch(t: int) -> SlotBatch:
    return SlotBatch.of(USERS, DATA[t - 1], FixedRequirements.of(W, E) if t == 1 else None)


def times_e(fractions) -> np.ndarray:
    """Per-user budgets given as multiples of each user's own E_i."""
    return np.array([int(units(e) * f) for e, f in zip(E, fractions)])


class TestOBS:
    """§4.1: ε = (0.1, 0.4, 0.4, 0.1, 0.4, 0.4, 0.8, 0.8, 0.8, 0.4)."""

    budgets = to_units_array([0.1, 0.4, 0.4, 0.1, 0.4, 0.4, 0.8, 0.8, 0.8, 0.4])

    def test_selects_0_4_with_error_15_31(self):
        selection = optimal_budget(self.budgets, np.ones(10), model=ErrorModel.CONTINUOUS)
        assert selection.epsilon_units == units(0.4)
        assert selection.error == pytest.approx(15.308424, abs=1e-6)

    def test_error_of_every_candidate_including_the_misprinted_err3(self):
        distinct, holders = np.unique(self.budgets, return_counts=True)
        errors = sampling_errors(distinct, holders) + ErrorModel.CONTINUOUS.noise_variance(distinct / 1e12, 1)
        # err3 is 27.73, not the printed 89.74 (spec A12).
        assert errors == pytest.approx([200.0, 15.308424, 27.733024], abs=1e-6)

    def test_discrete_model_uses_the_variance_of_the_noise_drawn(self):
        selection = optimal_budget(self.budgets, np.ones(10), model=ErrorModel.DISCRETE)
        assert selection.epsilon_units == units(0.4)
        # 2.808424 (sampling) + 1/(2 sinh²(0.2)), slightly below the continuous 12.5.
        assert selection.error == pytest.approx(2.808424 + 0.5 / np.sinh(0.2) ** 2, abs=1e-6)


def test_example_1_uniform_error():
    """§4.2: Uniform's per-slot error 2(w/ε)² is 128 for w = 8 and 32 for w = 4 (ε = 1)."""
    for window, expected in ((8, 128.0), (4, 32.0)):
        mechanism = make_mechanism("uniform", bins=5, epsilon=1.0, window=window, error_model="continuous")
        assert mechanism.variance(units(1.0) // window) == pytest.approx(expected)


def test_pbd_example():
    """§4.3: publish at 1, skip at 2, publish at 3-5 (the decisions the spec assumes)."""
    pbd = make_mechanism("pbd", bins=5)
    expected = [((1 / 4, 1 / 4, 1 / 4), True), ((1 / 8, 1 / 8, 1 / 8), False), ((1 / 8, 1 / 4, 1 / 8), True),
                ((1 / 16, 1 / 8, 3 / 16), True), ((5 / 32, 3 / 16, 3 / 32), True)]
    for t, (candidate, publish) in enumerate(expected, start=1):
        dc, publication = drive(pbd, fixed_batch(t), publish)
        assert list(dc) == [units(e) // (2 * w) for e, w in zip(E, W)]  # E1/8, E2/4, E3/6
        assert list(publication) == list(times_e(candidate)), f"slot {t}"
    # Total charged at slot 1: (3/8, 1/2, 5/12)·E as in the paper.
    assert [units(e) // (2 * w) + units(e) // 4 for e, w in zip(E, W)] == list(times_e((3 / 8, 1 / 2, 5 / 12)))


def test_pba_example():
    """§4.4: publish 1, skip 2, publish 3 (two shares), 4 nullified, 5 one share."""
    pba = make_mechanism("pba", bins=5)
    share = np.array([units(e) // (2 * w) for e, w in zip(E, W)])
    _, first = drive(pba, fixed_batch(1), publish=True)
    assert list(first) == list(share)                          # one share (virtual l = 0)
    _, second = drive(pba, fixed_batch(2), publish=False)
    assert list(second) == list(share)                         # candidate one share, not spent
    _, third = drive(pba, fixed_batch(3), publish=True)
    assert list(third) == list(2 * share)                      # (E1/4, E2/2, E3/3)
    _, fourth = drive(pba, fixed_batch(4), publish=True)
    assert fourth is None                                      # nullified: t - l = 1 <= t_N = 1
    _, fifth = drive(pba, fixed_batch(5), publish=True)
    assert list(fifth) == list(share)


def test_pba_figure_3_three_shares_nullify_two_slots():
    """E = 4, w = 4, share = 1: a publication with 3 shares nullifies the next 2 slots."""
    pba = make_mechanism("pba", bins=2)
    batch = lambda t: SlotBatch.of([0], [0], FixedRequirements.of([4], [4]) if t == 1 else None)
    drive(pba, batch(1), publish=True)
    drive(pba, batch(2), publish=False)
    drive(pba, batch(3), publish=False)
    _, used = drive(pba, batch(4), publish=True)
    assert used[0] == 3 * units(0.5)
    assert drive(pba, batch(5), publish=True)[1] is None
    assert drive(pba, batch(6), publish=True)[1] is None
    assert drive(pba, batch(7), publish=True)[1][0] == units(0.5)


def test_pba_lower_bound_table_figure_19():
    """§4.5: after a one-share publication, k slots later the budget is min(k, w_i)·E_i/(2w_i)."""
    windows = [4, 2, 8, 6]
    budgets = [0.96] * 4
    table = {4: [1 / 8, 1 / 4, 3 / 8, 1 / 2, 1 / 2, 1 / 2], 2: [1 / 4, 1 / 2, 1 / 2, 1 / 2, 1 / 2, 1 / 2],
             8: [1 / 16, 1 / 8, 3 / 16, 1 / 4, 5 / 16, 3 / 8], 6: [1 / 12, 1 / 6, 1 / 4, 1 / 3, 5 / 12, 1 / 2]}
    for k in range(1, 7):
        pba = make_mechanism("pba", bins=2)
        users = np.arange(4)
        batch = lambda t: SlotBatch.of(users, [0] * 4, FixedRequirements.of(windows, budgets) if t == 1 else None)
        drive(pba, batch(1), publish=True)                  # one share at l = 1
        for t in range(2, k + 1):
            drive(pba, batch(t), publish=False)
        _, budget = drive(pba, batch(k + 1), publish=False)
        share = [units(0.96) // (2 * w) for w in windows]
        assert list(budget) == [s * min(k, w) for s, w in zip(share, windows)]
        assert list(budget) == [int(units(0.96) * table[w][k - 1]) for w in windows], f"k={k}"


# S2 Table 3: B:(w_B, E_B) F:(w_F, E_F) per user (rows) and slot (columns).
TABLE_3 = [
    [(1, 1.0, 4, 2.4), (2, 2.4, 4, 3.2), (2, 2.8, 3, 4.2), (2, 2.4, 3, 2.4), (5, 3.0, 2, 0.8)],
    [(1, 0.6, 2, 1.6), (2, 1.6, 2, 2.4), (2, 3.2, 2, 2.8), (3, 4.2, 2, 2.8), (3, 3.6, 2, 2.0)],
    [(1, 2.0, 3, 1.2), (2, 1.2, 3, 3.0), (3, 1.8, 2, 1.2), (2, 3.2, 3, 0.6), (4, 2.4, 3, 1.8)],
]


def dynamic_batch(t: int) -> SlotBatch:
    rows = [TABLE_3[u][t - 1] for u in range(3)]
    return SlotBatch.of(USERS, [0, 1, 2], DynamicRequirements.of(*zip(*rows)))


def test_dpbd_example_6():
    """§4.6: publish at 1 and 3; ε^(1) and the ε^(2) candidates per user and slot."""
    dpbd = make_mechanism("dpbd", bins=3, max_window=10)
    expected = [  # (ε1 per user, ε2 candidate per user, published)
        ((0.3, 0.3, 0.2), (0.5, 0.3, 0.3), True),
        ((0.3, 0.4, 0.2), (0.35, 0.25, 0.15), False),
        ((0.3, 0.6, 0.2), (0.35, 0.6, 0.15), True),
        ((0.3, 0.7, 0.1), (0.175, 0.4, 0.15), False),
        ((0.2, 0.5, 0.1), (0.2, 0.5, 0.15), False),
    ]
    for t, (dc_expected, publication_expected, publish) in enumerate(expected, start=1):
        dc, publication = drive(dpbd, dynamic_batch(t), publish)
        assert list(dc) == [units(x) for x in dc_expected], f"ε1 at slot {t}"
        assert list(publication) == [units(x) for x in publication_expected], f"ε2 at slot {t}"


@pytest.mark.parametrize("ceil_borders", [False, True])
def test_dpba_example_7(ceil_borders):
    """§4.7 with the spec's corrected u3 at slot 3 (0.4, not 0.6).

    Fractional borders: slot 4 is *not* nullified (R̃ = 3.71 < 4) and is
    forced to skip; the ``ceil`` variant of the authors' code nullifies it.
    Either way slot 5 gets (0.4, 0.6, 0.3).
    """
    dpba = make_mechanism("dpba", bins=3, max_window=10, ceil_borders=ceil_borders)
    assert list(drive(dpba, dynamic_batch(1), True)[1]) == [units(x) for x in (0.3, 0.3, 0.2)]
    assert list(drive(dpba, dynamic_batch(2), False)[1]) == [units(x) for x in (0.4, 0.5, 0.4)]
    assert list(drive(dpba, dynamic_batch(3), True)[1]) == [units(x) for x in (0.8, 1.2, 0.4)]
    fourth = drive(dpba, dynamic_batch(4), False)[1]
    if ceil_borders:
        assert fourth is None
    else:
        assert list(fourth) == [units(x) for x in (0.1, 0.2, 0.2)]
    assert list(drive(dpba, dynamic_batch(5), True)[1]) == [units(x) for x in (0.4, 0.6, 0.3)]
