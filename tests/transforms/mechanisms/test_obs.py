"""OBS's error model stays finite for any budgets a user may declare."""

from __future__ import annotations

import warnings

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.obs import ErrorModel, optimal_budget, sampling_errors


def test_a_huge_budget_beside_a_small_one_does_not_overflow_the_error_model():
    """(e^ε − 1)² overflowed float64 for ε above about 354 (a budget a user may declare)."""
    units = np.array([UNITS_PER_EPSILON // 10, 400 * UNITS_PER_EPSILON, 1000 * UNITS_PER_EPSILON])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        errors = sampling_errors(units, np.array([5, 3, 2]))
        choice = optimal_budget(units, np.array([5, 3, 2]))
    assert np.all(np.isfinite(errors)) and errors[0] == 0.0
    assert choice.exists and np.isfinite(choice.error)


def test_the_noise_variance_of_units_is_the_checked_one_bit_for_bit():
    """OBS reads the noise variance of integer budgets without checking them again: the same floats as the
    checked :meth:`ErrorModel.noise_variance` (inf at zero), for both models and sensitivities."""
    rng = np.random.default_rng(5)
    units = np.concatenate([[0, 1, UNITS_PER_EPSILON, 10**4 * UNITS_PER_EPSILON],
                            rng.integers(1, 3 * UNITS_PER_EPSILON, 200)]).astype(np.int64)
    for model in ErrorModel:
        for sensitivity in (1, 2):
            expected = model.noise_variance(units / UNITS_PER_EPSILON, sensitivity)
            assert np.array_equal(model.variance_of_units(units, sensitivity), expected)
    assert np.isinf(ErrorModel.DISCRETE.variance_of_units(units, 1)[0])
