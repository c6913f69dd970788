"""Choosing users uniformly at random, exactly, from the project's generator.

The population-division methods of LDP-IDS sample their reporters from the
available users (spec ``ldp_ids.md`` §4.4) and LPU splits the users into
``w`` groups (§5.5).  Both must be exactly uniform: which users report is
public, but a biased choice would bias the estimate.  Every draw is an exact
uniform integer (top bits of a 64-bit word with rejection, no modulo, no
float), so the sampling costs ``O(k)`` words for ``k`` chosen users whatever
the population.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.noise.samplers import _uniform_below, _Words


def uniform_subset(candidates: np.ndarray, k: int, rng: Randomness) -> np.ndarray:
    """A uniformly random ``k``-subset of ``candidates`` (distinct ints), ascending; all of them when ``k`` is larger.

    The first ``k`` distinct values of an i.i.d. uniform sequence of indices
    form a uniform ``k``-subset (the sequence's law is invariant under
    permuting the indices); above half the candidates, the complement is
    drawn instead, so the expected number of draws stays below ``2k``.
    """
    candidates = np.asarray(candidates, np.int64)
    size = candidates.size
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k >= size:
        return np.sort(candidates)
    if 2 * k > size:
        return np.sort(np.delete(candidates, _distinct_indices(size, size - k, rng)))
    return np.sort(candidates[_distinct_indices(size, k, rng)])


def _distinct_indices(size: int, k: int, rng: Randomness) -> np.ndarray:
    """The first ``k`` distinct values of i.i.d. uniform draws below ``size`` (``k <= size/2``)."""
    if k == 0:
        return np.zeros(0, np.int64)
    words = _Words(rng, 2 * k + 64)
    drawn = np.zeros(0, np.uint64)
    while True:
        missing = k if drawn.size == 0 else k - np.unique(drawn).size
        drawn = np.concatenate([drawn, _uniform_below(size, missing + missing // 2 + 8, words)])
        values, first = np.unique(drawn, return_index=True)
        if values.size >= k:
            return values[np.argsort(first)[:k]].astype(np.int64)


def uniform_permutation(count: int, rng: Randomness) -> np.ndarray:
    """A uniformly random permutation of ``0..count-1``: the order of i.i.d. 64-bit keys, redrawn on any tie."""
    while True:
        keys = rng.uint32(2 * count).view(np.uint64)
        order = np.argsort(keys, kind="stable")
        if count < 2 or (np.diff(keys[order]) != 0).all():  # distinct keys: every order equally likely
            return order.astype(np.int64)
