"""Optimal Budget Selection (OBS, spec/pwsm.md §2.2-2.3, Alg. 1) and its error model.

For a threshold ``θ`` the sampling mechanism includes a user with budget
``ε_k < θ`` with probability ``p_k = (e^{ε_k}-1)/(e^θ-1)`` and adds noise of
scale ``Δ/θ`` to every bin.  Its per-bin error is

    err(θ) = Σ_{ε_k<θ} n_k p_k (1-p_k) + (Σ_{ε_k<θ} n_k (1-p_k))² + Var(noise(Δ/θ))

(variance plus squared bias of one count, spec trap 1: not multiplied by d).
OBS evaluates it at every distinct budget, in ascending order, and keeps the
first minimum, so ties go to the smaller budget.  Prefix sums make the scan
``O(m)`` after an ``O(m log m)`` grouping.

The noise term is the variance of the noise actually drawn (discrete Laplace)
unless the papers' continuous model ``2Δ²/θ²`` is asked for; the papers' test
vectors use the latter.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.noise import continuous_laplace_variance, discrete_laplace_variance
from transforms.mechanisms.noise.variance import continuous_laplace_variance_of, discrete_laplace_variance_of

_EXP_CAP = 300.0  # budgets above this are equal for the error model: (e^300)², times a billion users, stays finite


class ErrorModel(str, Enum):
    """Which noise variance the error model (OBS, thresholds) uses."""

    DISCRETE = "discrete"      # variance of the discrete Laplace actually drawn (default)
    CONTINUOUS = "continuous"  # the papers' 2Δ²/ε²

    def noise_variance(self, epsilon, sensitivity: int):
        """Per-bin variance of noise calibrated to ``epsilon`` (scalar or array; inf where ε <= 0)."""
        if type(epsilon) is float:  # the homogeneous mechanisms' one budget per slot
            if not epsilon > 0:
                return math.inf
            scale = sensitivity / epsilon
            return (continuous_laplace_variance(scale) if self is ErrorModel.CONTINUOUS
                    else discrete_laplace_variance(scale))
        eps = np.asarray(epsilon, dtype=np.float64)
        positive = eps > 0
        scale = sensitivity / np.where(positive, eps, 1.0)
        variance = (continuous_laplace_variance(scale) if self is ErrorModel.CONTINUOUS
                    else discrete_laplace_variance(scale))
        variance = np.where(positive, variance, np.inf)
        return float(variance) if variance.ndim == 0 else variance

    def variance_of_units(self, units: np.ndarray, sensitivity: int) -> np.ndarray:
        """:meth:`noise_variance` at ``units / UNITS_PER_EPSILON`` for int64 budget units, without the checks
        (an integer budget below 2^63 units is a finite epsilon; inf where ``units <= 0``)."""
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, (int, np.integer)) or sensitivity <= 0:
            return self.noise_variance(units / UNITS_PER_EPSILON, sensitivity)
        eps = units / UNITS_PER_EPSILON
        positive = units > 0
        scale = sensitivity / np.where(positive, eps, 1.0)
        variance = (continuous_laplace_variance_of(scale) if self is ErrorModel.CONTINUOUS
                    else discrete_laplace_variance_of(scale))
        return np.where(positive, variance, np.inf)


@dataclass(frozen=True)
class Selection:
    """OBS output: the threshold budget (units; 0 when none exists) and its error."""

    epsilon_units: int
    error: float

    @property
    def exists(self) -> bool:
        return self.epsilon_units > 0


NO_SELECTION = Selection(0, math.inf)


def group_budgets(units: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct budgets (ascending, exact integers) and how many users hold each."""
    keep = counts > 0
    distinct, inverse = np.unique(units[keep], return_inverse=True)
    return distinct, np.bincount(inverse, weights=counts[keep], minlength=distinct.size)


def sampling_errors(distinct_units: np.ndarray, holders: np.ndarray) -> np.ndarray:
    """``err_s(θ)`` for every candidate ``θ = distinct_units[k]`` (variance + bias²)."""
    eps = np.minimum(distinct_units / UNITS_PER_EPSILON, _EXP_CAP)
    a = np.expm1(eps)
    # Exclusive prefix sums over the users strictly below each candidate (rows: n_k, n_k a_k, n_k a_k²).
    below = np.zeros((3, a.size))
    weighted = holders * a
    for row, terms in enumerate((holders, weighted, weighted * a)):
        np.cumsum(terms[:-1], out=below[row, 1:])
    below_users, below_a, below_a2 = below
    counted = a > 0
    mean_p = np.divide(below_a, a, out=np.zeros_like(a), where=counted)               # Σ n_k p_k
    mean_p2 = np.divide(below_a2, a * a, out=np.zeros_like(a), where=counted)         # Σ n_k p_k²
    variance = np.maximum(mean_p - mean_p2, 0.0)
    bias = np.maximum(below_users - mean_p, 0.0)
    return variance + bias * bias


CACHED_ROWS = 1024
"""Per-cohort inputs up to this many rows are answered from a cache keyed by their bytes (1024
entries, so at most 16 MiB of keys); longer ones, such as thousands of dynamic cohorts whose
budgets rarely repeat, are recomputed."""


def optimal_budget(units: np.ndarray, counts: np.ndarray, sensitivity: int = 1,
                   model: ErrorModel = ErrorModel.DISCRETE) -> Selection:
    """OBS over budgets ``units`` held by ``counts`` users each (zero budgets never win)."""
    units, counts = np.asarray(units, np.int64), np.asarray(counts, np.int64)
    # A cohort's budgets repeat from slot to slot (PBD/PBA shares every slot), so recent
    # answers are kept; the key is the exact input, so a hit returns what a recomputation would.
    select = _cached_selection if units.size <= CACHED_ROWS else _cached_selection.__wrapped__
    return select(units.tobytes(), counts.tobytes(), sensitivity, model)


@functools.lru_cache(maxsize=1024)
def _cached_selection(units: bytes, counts: bytes, sensitivity: int, model: ErrorModel) -> Selection:
    distinct, holders = group_budgets(np.frombuffer(units, np.int64), np.frombuffer(counts, np.int64))
    if distinct.size == 0 or distinct[-1] <= 0:
        return NO_SELECTION
    errors = sampling_errors(distinct, holders)
    noise = model.variance_of_units(distinct, sensitivity)
    total = np.where(distinct > 0, errors + noise, np.inf)
    best = int(np.argmin(total))  # first minimum: ties go to the smaller budget
    return Selection(int(distinct[best]), float(total[best]))
