"""Utility metrics comparing released (noisy) histograms with the true ones.

Both inputs are ``(T, d)`` arrays: one row per slot, one column per bin.
The metrics are those of the papers' experiments, so that results can be
compared with the published figures:

* AMRE  -- despite the name, the papers' AMRE is a mean *squared* error:
  ``(1/T) sum_t (1/d) ||r_t - c_t||^2``.
* AJSD  -- average Jensen-Shannon divergence of the normalised histograms.
* MRE   -- mean relative error with the authors' sanity bound.
* MAE   -- mean absolute error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import rel_entr

SANITY_BOUND_FRACTION = 0.001
"""MRE divides by at least this fraction of the slot's true total (authors' code)."""


@dataclass(frozen=True)
class UtilityReport:
    """All four metrics of one released stream against the true stream."""

    amre: float
    ajsd: float
    mre: float
    mae: float


def amre(released: ArrayLike, true: ArrayLike) -> float:
    """Return the papers' "AMRE": ``(1/T) sum_t (1/d) ||r_t - c_t||^2``.

    Despite its name this is a mean *squared* error (the mean over all slots
    and bins of ``(r - c)^2``), not a relative error.
    """
    return _amre(*_validated(released, true))


def mae(released: ArrayLike, true: ArrayLike) -> float:
    """Return the mean over slots and bins of ``|r - c|``."""
    return _mae(*_validated(released, true))


def mre(released: ArrayLike, true: ArrayLike) -> float:
    """Return the mean over slots and bins of ``|r - c| / max(c, gamma_t)``.

    ``gamma_t = 0.001 * sum_j c_t[j]`` is the sanity bound of the authors'
    code; it keeps near-empty bins from dominating.  When both ``gamma_t`` and
    ``c`` are 0 the denominator is 1, i.e. the absolute error is used.
    """
    return _mre(*_validated(released, true))


def ajsd(released: ArrayLike, true: ArrayLike) -> float:
    """Return the average over slots of the Jensen-Shannon divergence (natural log).

    ``JSD(r, c) = 1/2 sum_j [r ln(r/v) + c ln(c/v)]`` with ``v = (r + c)/2``
    and ``0 ln 0 = 0``.  Negative released counts are clipped to 0, then each
    slot of ``r`` and ``c`` is normalised to sum to 1 (uniform when its sum is
    0).  Every slot's term therefore lies in ``[0, ln 2]``.
    """
    return _ajsd(*_validated(released, true))


def utility_report(released: ArrayLike, true: ArrayLike) -> UtilityReport:
    """Return all four metrics of ``released`` against ``true``."""
    released, true = _validated(released, true)
    return UtilityReport(
        amre=_amre(released, true),
        ajsd=_ajsd(released, true),
        mre=_mre(released, true),
        mae=_mae(released, true),
    )


def _amre(released: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.square(released - true)))


def _mae(released: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(released - true)))


def _mre(released: np.ndarray, true: np.ndarray) -> float:
    sanity_bound = SANITY_BOUND_FRACTION * true.sum(axis=1, keepdims=True)
    denominator = np.maximum(true, sanity_bound)
    denominator = np.where(denominator == 0.0, 1.0, denominator)
    # A denominator far below 1 (never a real count) can push a ratio past the
    # float range; it then saturates to inf instead of warning.
    with np.errstate(over="ignore"):
        return float(np.mean(np.abs(released - true) / denominator))


def _ajsd(released: np.ndarray, true: np.ndarray) -> float:
    released_distribution = _normalised_rows(np.clip(released, 0.0, None))
    true_distribution = _normalised_rows(true)
    midpoint = (released_distribution + true_distribution) / 2.0
    divergence = 0.5 * (
        rel_entr(released_distribution, midpoint).sum(axis=1)
        + rel_entr(true_distribution, midpoint).sum(axis=1)
    )
    # Clip rounding noise only; the exact value is always within [0, ln 2].
    return float(np.mean(np.clip(divergence, 0.0, math.log(2.0))))


def _normalised_rows(histograms: np.ndarray) -> np.ndarray:
    """Scale each non-negative row to sum to 1; all-zero rows become uniform."""
    # Dividing by the row maximum first keeps the row sum from overflowing.
    row_max = histograms.max(axis=1, keepdims=True)
    empty = row_max == 0.0
    scaled = histograms / np.where(empty, 1.0, row_max)
    totals = scaled.sum(axis=1, keepdims=True)
    uniform = np.full_like(histograms, 1.0 / histograms.shape[1])
    return np.where(empty, uniform, scaled / np.where(empty, 1.0, totals))


def _validated(released: ArrayLike, true: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    released_array = _as_histograms(released, "released")
    true_array = _as_histograms(true, "true")
    if released_array.shape != true_array.shape:
        raise ValueError(
            f"released and true must have the same shape, "
            f"got released {released_array.shape} and true {true_array.shape}"
        )
    if np.any(true_array < 0.0):
        raise ValueError("true must not contain negative counts")
    return released_array, true_array


def _as_histograms(values: ArrayLike, name: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric: {error}") from None
    if array.ndim != 2:
        raise ValueError(f"{name} must be two-dimensional (slots, bins), got shape {array.shape}")
    if array.shape[0] < 1:
        raise ValueError(f"{name} must contain at least one slot, got shape {array.shape}")
    if array.shape[1] < 1:
        raise ValueError(f"{name} must contain at least one bin, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return array
