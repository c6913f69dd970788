"""The sampling mechanism SM (spec/pwsm.md §2.1) and the dissimilarity of DC (§2.4).

Data reach a mechanism as *cells*: how many contributing users of each
cohort sit in each bin.  Users of one cohort share a budget, so including
each with probability ``p`` independently is, for the released counts, the
same as one binomial draw per cell; the draw is made with exact coins
(``noise.count_successes``), each realised probability rounded *down*,
which can only strengthen the amplification-by-subsampling guarantee.

Counts are never re-weighted by ``1/p`` (spec: the bias is accepted and is
part of the error model).  Noise is discrete Laplace with the exact scale
``Δ/θ``, so every release is an integer vector.

The dissimilarity is computed as the integer ``Σ_j |c̃_j - r_j|`` plus
discrete Laplace noise of scale ``Δ/θ``; this equals ``d·dis`` of the paper
(whose noise ``Lap(Δ/(dθ))`` is the same thing divided by ``d``) and keeps
the DC step free of floating-point noise as well.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.evidence import Statistic, every_member_certain
from transforms.mechanisms.noise import (
    Randomness,
    bernoulli_thresholds,
    count_successes,
    discrete_laplace,
    discrete_laplace_draw,
)
from transforms.mechanisms.obs import CACHED_ROWS


@dataclass(frozen=True)
class Cells:
    """Contributing users per (cohort, bin): three aligned int64 columns.

    *Pooled* cells (``cohort`` is ``None``) count users per bin over all
    cohorts, for mechanisms that treat every user alike and never sample.
    """

    cohort: np.ndarray | None
    bin: np.ndarray
    count: np.ndarray

    @classmethod
    def empty(cls) -> "Cells":
        z = np.zeros(0, np.int64)
        return cls(z, z, z)

    @classmethod
    def pooled(cls, histogram: np.ndarray) -> "Cells":
        """One cell per bin, every cohort together."""
        return cls(None, _bin_index(histogram.size), histogram)

    def histogram(self, bins: int) -> np.ndarray:
        """The true (unsampled) histogram ``c_t``."""
        if self.cohort is None:
            return self.count.copy()
        return np.bincount(self.bin, weights=self.count, minlength=bins).astype(np.int64)


def count_keys(keys: np.ndarray, size: int) -> np.ndarray:
    """``np.bincount(keys, minlength=size)`` for int64 keys in ``[0, size)``.

    With two to four distinct keys, counting each by comparison is several
    times faster than ``bincount``, whose increments then keep hitting the same
    few counters (the papers' binary streams).
    """
    if not 1 < size <= 4:
        return np.bincount(keys, minlength=size)
    if size == 2:
        ones = np.count_nonzero(keys)  # every key is 0 or 1
        return np.array((keys.size - ones, ones), np.int64)
    above_zero = [np.count_nonzero(keys == key) for key in range(1, size)]
    return np.array([keys.size - sum(above_zero), *above_zero], np.int64)


@functools.lru_cache(maxsize=64)
def _bin_index(bins: int) -> np.ndarray:
    index = np.arange(bins)
    index.flags.writeable = False
    return index


def inclusion_probabilities(units: np.ndarray, threshold_units: int) -> np.ndarray:
    """``p = (e^ε - 1)/(e^θ - 1)`` per budget, 1 at or above ``θ`` (stable for large θ)."""
    eps = np.asarray(units, np.float64) / UNITS_PER_EPSILON
    theta = threshold_units / UNITS_PER_EPSILON
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # e^{ε-θ} (1-e^{-ε}) / (1-e^{-θ}): no overflow whatever θ is.
        p = np.exp(eps - theta) * np.expm1(-eps) / np.expm1(-theta)
    p = np.where(units >= threshold_units, 1.0, np.where(units <= 0, 0.0, p))
    return np.clip(p, 0.0, 1.0)


def sampled_statistic(name: str, cohort_units: np.ndarray, threshold_units: int, sensitivity: int) -> Statistic:
    """SM at threshold ``θ`` over cohorts with budgets ``cohort_units``: exact coins, and noise of scale ``Δ/θ``."""
    units = np.asarray(cohort_units, np.int64)
    thresholds_of = _coin_thresholds if units.size <= CACHED_ROWS else _coin_thresholds.__wrapped__
    return Statistic(name, laplace_scale(threshold_units, sensitivity), sensitivity,
                     thresholds_of(units.tobytes(), threshold_units))


@functools.lru_cache(maxsize=1024)
def certain_statistic(name: str, rows: int, units: int, sensitivity: int) -> Statistic:
    """Every member of every cohort enters, noise of scale ``Δ/ε`` (the homogeneous baselines; cached: it repeats)."""
    return Statistic(name, laplace_scale(units, sensitivity), sensitivity, every_member_certain(rows))


def sample_histogram(cells: Cells, statistic: Statistic, bins: int, rng: Randomness) -> np.ndarray:
    """SM_s then Q: the histogram of the users the statistic's coins keep."""
    if cells.cohort is None:
        raise ValueError("sampling needs cells by cohort, not pooled cells")
    if cells.count.size == 0:
        return np.zeros(bins, np.int64)
    kept = count_successes(cells.count, statistic.thresholds[cells.cohort], rng)
    return np.bincount(cells.bin, weights=kept, minlength=bins).astype(np.int64)


@functools.lru_cache(maxsize=1024)
def _coin_thresholds(cohort_units: bytes, threshold_units: int) -> np.ndarray:
    """Each cohort's exact coin threshold, read-only; cached because a cohort's budgets repeat."""
    p = inclusion_probabilities(np.frombuffer(cohort_units, np.int64), threshold_units)
    thresholds = bernoulli_thresholds(p)
    thresholds.flags.writeable = False
    return thresholds


@functools.lru_cache(maxsize=4096)
def laplace_scale(threshold_units: int, sensitivity: int) -> Fraction:
    """The exact noise scale ``Δ/θ``."""
    return Fraction(sensitivity * UNITS_PER_EPSILON, threshold_units)


def disturb(counts: np.ndarray, statistic: Statistic, rng: Randomness) -> np.ndarray:
    """SM_d: add i.i.d. discrete Laplace noise of the statistic's scale to every bin."""
    return counts + discrete_laplace(statistic.noise_scale, counts.size, rng)


def noisy_total_deviation(counts: np.ndarray, last_release: np.ndarray, statistic: Statistic,
                          rng: Randomness) -> int:
    """``d · dis``: ``Σ_j |c_j - r_l[j]|`` plus discrete Laplace noise of the statistic's scale."""
    difference = counts - last_release
    if difference.size <= 64:  # python ints beat three numpy calls on a short histogram
        deviation = sum(map(abs, difference.tolist()))
    else:
        deviation = int(np.add.reduce(np.abs(difference)))
    return deviation + discrete_laplace_draw(statistic.noise_scale, rng)
