"""Subsampling coins: exact Bernoulli coins from uniform ``uint32`` draws.

:func:`bernoulli_thresholds` turns probabilities into integer thresholds
rounded down, so a realised success probability never exceeds the requested
one; :func:`count_successes` counts the successes of many coins per cell;
:func:`coins_below` draws individual coins with integer thresholds.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.noise.generators import Randomness

_TWO_32 = 1 << 32
_U64_ONE = np.uint64(1)
_U64_16 = np.uint64(16)
_U64_TWO_32 = np.uint64(_TWO_32)
_U64_TWO_32_MINUS_1 = np.uint64(_TWO_32 - 1)
_THRESHOLD_SHRINK = 1.0 - 2.0**-40


def bernoulli_thresholds(probabilities: np.ndarray) -> np.ndarray:
    """Per-coin thresholds for exact Bernoulli coins from uint32 draws.

    A coin succeeds when ``draw < threshold``.  The threshold is
    ``floor(p * 2**32 * (1 - 2**-40))`` as ``np.uint64``: it always rounds
    DOWN, so the realised probability ``threshold / 2**32`` never exceeds
    ``p`` (conservative for privacy amplification by subsampling).  ``p >= 1``
    gives ``2**32`` (always succeeds) and ``p <= 0`` gives 0 (never).
    Probabilities must be finite, ``ValueError`` otherwise.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if not np.all(np.isfinite(p)):
        raise ValueError("probabilities must be finite (no NaN or infinity)")
    clipped = np.clip(p, 0.0, 1.0)
    # clipped * 2**32 is exact; the shrink factor keeps the product below it.
    thresholds = np.floor(clipped * float(_TWO_32) * _THRESHOLD_SHRINK).astype(np.uint64)
    return np.where(p >= 1.0, np.uint64(_TWO_32), thresholds)


def count_successes(trials: np.ndarray, thresholds: np.ndarray, rng: Randomness) -> np.ndarray:
    """Number of successes among ``trials[i]`` exact coins of probability ``thresholds[i]/2**32``.

    A Binomial draw per cell, realised with explicit coins: ``trials`` is a
    non-negative int64 array and ``thresholds`` a uint64 array of the same
    length (from :func:`bernoulli_thresholds`).  Cells with threshold
    ``>= 2**32`` return ``trials[i]`` and cells with threshold 0 return 0
    without drawing.  Each other coin compares a uniform 32-bit
    ``X = H·2**16 + L`` with its threshold ``t`` lazily: the high half ``H``
    decides unless it equals ``t``'s (probability 2**-16), and only then is
    ``L`` drawn.  That is exactly ``X < t`` with half the random bytes, and
    a slot of ten thousand coins almost never needs the second draw.  Memory
    is O(total coins).  Returns int64.
    """
    n = np.asarray(trials)
    t = np.asarray(thresholds)
    if n.ndim != 1 or t.shape != n.shape:
        raise ValueError(f"trials and thresholds must be 1-D of equal length, got {n.shape} and {t.shape}")
    if n.size == 0:
        return np.zeros(0, np.int64)
    if n.dtype.kind not in "iu" or t.dtype.kind not in "iu":
        raise ValueError(f"trials and thresholds must be integers, got dtypes {n.dtype} and {t.dtype}")
    if (n.dtype.kind == "i" and n.min() < 0) or (t.dtype.kind == "i" and t.min() < 0):
        raise ValueError("trials and thresholds must be non-negative")
    n = n.astype(np.int64, copy=False)
    t = t.astype(np.uint64, copy=False)

    random_cells = np.flatnonzero((t - _U64_ONE < _U64_TWO_32_MINUS_1) & (n > 0))  # 0 < t < 2**32
    if random_cells.size == n.size:  # the usual call: every cell draws
        return _count_random_coins(n, t, rng)
    result = np.where(t >= _U64_TWO_32, n, 0)
    if random_cells.size:
        result[random_cells] = _count_random_coins(n[random_cells], t[random_cells], rng)
    return result


def coins_below(high_thresholds: np.ndarray, low_thresholds_of, rng: Randomness) -> np.ndarray:
    """Exact coins: coin ``i`` succeeds iff a uniform 32-bit ``X_i < T_i``, with ``T_i < 2**32``.

    ``T_i = high_thresholds[i]·2**16 + L_i`` (``high_thresholds`` is uint16); ``low_thresholds_of(ties)``
    returns the ``L_i`` (< 2**16) of the coins at the flat indices ``ties`` only.  Each ``X_i`` is drawn
    lazily as ``H·2**16 + L``: the high half decides unless it equals the threshold's (probability
    2**-16), and only then is ``L`` drawn; half the random bytes of a full draw.  Returns a bool array
    shaped like ``high_thresholds``.
    """
    coin_high = np.asarray(high_thresholds, dtype=np.uint16)
    total = coin_high.size
    high = rng.uint32(-(-total // 2)).view(np.uint16)[:total].reshape(coin_high.shape)
    successes = high < coin_high
    ties = np.flatnonzero(high == coin_high)
    if ties.size:
        low = rng.uint32(ties.size) >> np.uint32(16)
        successes.flat[ties] = low < low_thresholds_of(ties)
    return successes


def _count_random_coins(trials: np.ndarray, thresholds: np.ndarray, rng: Randomness) -> np.ndarray:
    """:func:`count_successes` for cells with at least one coin and ``0 < threshold < 2**32``."""
    starts = np.cumsum(trials) - trials

    def low_thresholds_of(ties: np.ndarray) -> np.ndarray:
        return thresholds[np.searchsorted(starts, ties, side="right") - 1] & np.uint64(0xFFFF)

    successes = coins_below(np.repeat((thresholds >> _U64_16).astype(np.uint16), trials), low_thresholds_of, rng)
    return np.add.reduceat(successes.view(np.uint8), starts, dtype=np.int64)
