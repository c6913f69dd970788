"""The evaluation's statistics (paired sign-flip test, Holm) and the ratio experiments' OBS switch points."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipelines.evaluation import ratio, stats
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.obs import optimal_budget


def brute_force_p(differences) -> float:
    """The exact one-sided sign-flip p-value by listing every sign vector (a second, independent computation)."""
    d = np.asarray(differences, float)
    means = [np.dot(signs, d) / d.size for signs in itertools.product((1, -1), repeat=d.size)]
    return float(np.mean([m <= d.mean() + 1e-12 for m in means]))


@pytest.mark.parametrize("differences", [[-1.0] * 5, [-1, -2, 0.5, -0.1, -3], [1, -1, 2, -2], [0.3, 0.2, 0.1]])
def test_exact_p_values(differences):
    assert stats.sign_flip_p_value(differences) == pytest.approx(brute_force_p(differences))


def test_all_pairs_lower_gives_the_smallest_exact_p_value_and_reversal_gives_one():
    result = stats.paired_lower([1, 2, 3, 4], [2, 4, 6, 8])
    assert (result.pairs, result.wins, result.ratio, result.p_value) == (4, 4, pytest.approx(0.5), 1 / 16)
    assert stats.paired_lower([2, 4, 6, 8], [1, 2, 3, 4]).p_value == 1.0
    with pytest.raises(ValueError, match="align"):
        stats.paired_lower([1, 2], [1])


def test_monte_carlo_p_value_for_many_pairs():
    """Above EXACT_PAIRS the p-value comes from DRAWS random sign vectors (fixed seed, so deterministic).

    Null case: 40 symmetric differences; the exact p is 0.5 + P(mean = observed)/2, near 0.5; the Monte-Carlo
    estimate has standard error below 0.004, so |p - 0.5| > 0.05 would be a 12-sigma event.  Power: 40 pairs
    all negative have exact p = 2^-40; the estimate is then its floor 1/(DRAWS + 1)."""
    symmetric = np.array([1.0, -1.0] * 20) * np.arange(1, 41)
    assert abs(stats.sign_flip_p_value(symmetric) - 0.5) < 0.05
    assert stats.sign_flip_p_value(-np.arange(1, 41.0)) == pytest.approx(1 / (stats.DRAWS + 1))
    assert stats.sign_flip_p_value(-np.arange(1, 41.0)) == stats.sign_flip_p_value(-np.arange(1, 41.0))


def test_holm_adjustment():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert stats.holm([0.9, 0.9]) == [1.0, 1.0]                      # capped at 1


@pytest.mark.parametrize("obs", ratio.OBSES)
def test_the_switch_point_is_where_obs_first_prefers_the_larger_budget(obs):
    users, first, second = 2_000, (120, 1.0), (120, 0.6)
    o = ratio.switch_point(users, first, second, obs)
    budgets = np.array([ratio.type_budgets(obs, *first), ratio.type_budgets(obs, *second)])
    assert budgets[0] > budgets[1]

    def chosen(fraction):
        split = int(round(users * fraction))
        return optimal_budget(budgets, np.array([split, users - split])).epsilon_units
    if o is None:
        assert all(chosen(f) == budgets[1] for f in ratio.FRACTIONS)
    else:
        assert chosen(o) == budgets[0]
        assert all(chosen(f) == budgets[1] for f in ratio.FRACTIONS if f < o)


def test_the_switch_point_moves_with_the_number_of_users_and_ties_never_switch():
    points = [ratio.switch_point(n, (120, 1.0), (120, 0.6), "dc") for n in (500, 2_000, 10_000)]
    assert len(set(points)) > 1
    # the w-ratio experiment: PBD's first publication is E/4 whatever the window, so nothing to switch to
    assert ratio.switch_point(2_000, (40, 0.6), (120, 0.6), "pbd") is None
    assert ratio.type_budgets("dc", 40, 0.6) == to_units(0.6) // 80


def test_the_dissimilarity_sample_misses_low_budget_users_only_after_the_switch():
    """The issue's explanation of the ratio experiment, in numbers: below the switch nobody is left out; at
    o = 0.9 with N = 10,000 the 1,000 users at E = 0.6 are kept with p = (e^0.0025 - 1)/(e^(1/240) - 1), about
    0.6, so about 400 are missed, more than the dissimilarity's noise scale 240 = 1/θ."""
    first, second = (120, 1.0), (120, 0.6)
    assert ratio.switch_point(10_000, first, second, "dc") == 0.89
    assert ratio.dc_sample_shortfall(10_000, first, second, 0.7) == (0.0, pytest.approx(400.0))
    missed, scale = ratio.dc_sample_shortfall(10_000, first, second, 0.9)
    p = np.expm1(0.0025) / np.expm1(1 / 240)
    assert missed == pytest.approx(1_000 * (1 - p), rel=1e-3) and scale == pytest.approx(240.0)
    assert missed > scale
