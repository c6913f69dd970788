"""The evaluation's statistics (pipelines/evaluation/stats.py): the paired sign-flip test and Holm."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipelines.evaluation import stats


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
