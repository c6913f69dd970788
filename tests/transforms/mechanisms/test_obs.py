"""OBS's error model stays finite for any budgets a user may declare."""

from __future__ import annotations

import warnings

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.obs import optimal_budget, sampling_errors


def test_a_huge_budget_beside_a_small_one_does_not_overflow_the_error_model():
    """(e^ε − 1)² overflowed float64 for ε above about 354 (a budget a user may declare)."""
    units = np.array([UNITS_PER_EPSILON // 10, 400 * UNITS_PER_EPSILON, 1000 * UNITS_PER_EPSILON])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        errors = sampling_errors(units, np.array([5, 3, 2]))
        choice = optimal_budget(units, np.array([5, 3, 2]))
    assert np.all(np.isfinite(errors)) and errors[0] == 0.0
    assert choice.exists and np.isfinite(choice.error)
