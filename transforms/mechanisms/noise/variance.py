"""Variances of the noise, for error models (OBS, thresholds) that use the noise actually drawn."""

from __future__ import annotations

import math

import numpy as np


def discrete_laplace_variance(scale):
    """Variance of the discrete Laplace with this scale (a float or an array of them).

    Equals ``1/(2 sinh^2(1/(2 scale)))`` ``= 2e^{-1/s}/(1-e^{-1/s})^2``:
    tends to ``2 s^2`` for huge scales and to 0 for tiny ones.
    """
    if type(scale) is float and 0 < scale < math.inf:  # scalar path: no array round trip
        x = 1.0 / scale
        denominator = math.expm1(-x) ** 2
        return 2.0 * math.exp(-x) / denominator if denominator else math.inf
    return discrete_laplace_variance_of(_positive_scales(scale))


def discrete_laplace_variance_of(scales: np.ndarray):
    """:func:`discrete_laplace_variance` of scales the caller knows are positive and finite (not checked again:
    the error model asks for thousands of small arrays per run)."""
    x = 1.0 / scales
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        variance = 2.0 * np.exp(-x) / np.expm1(-x) ** 2  # inf (not an error) past the float range
    return float(variance) if variance.ndim == 0 else variance


def continuous_laplace_variance(scale):
    """Variance ``2 scale^2`` of the continuous Laplace distribution (float or array)."""
    return continuous_laplace_variance_of(_positive_scales(scale))


def continuous_laplace_variance_of(scales: np.ndarray):
    """:func:`continuous_laplace_variance` of scales known to be positive and finite (not checked again)."""
    with np.errstate(over="ignore"):
        variance = 2.0 * scales * scales
    return float(variance) if variance.ndim == 0 else variance


def _positive_scales(scale) -> np.ndarray:
    if scale is None or isinstance(scale, (bool, np.bool_, str, bytes)) or np.asarray(scale).dtype.kind in "bUSV":
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    values = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    return values
