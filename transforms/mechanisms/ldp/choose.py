"""Choosing users uniformly at random, exactly, from the project's generator.

The population-division methods of LDP-IDS sample their reporters from the
available users (spec ``ldp_ids.md`` §4.4) and LPU splits the users into
``w`` groups (§5.5).  Both must be exactly uniform: which users report is
public, but a biased choice would bias the estimate.  Every draw is an exact
uniform integer (top bits of a 64-bit word with rejection, no modulo, no
float), so the sampling costs ``O(k)`` words for ``k`` chosen users, plus one
pass over a mask of the candidates.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.noise.samplers import uniform_below, RandomWords


def uniform_subset(candidates: np.ndarray, k: int, rng: Randomness) -> np.ndarray:
    """A uniformly random ``k``-subset of ``candidates`` (distinct ints), ascending; all of them when ``k`` is larger.

    Draw i.i.d. exact uniform indices, keep the distinct ones, and draw again for what is missing until ``k``
    are chosen.  Each step depends on the chosen set only through its size and the draws are uniform, so the
    law of the result is invariant under any permutation of the candidates: it is the uniform law on
    ``k``-subsets.  Above half the candidates the complement is drawn instead, so each step keeps more than
    half its draws.
    """
    return np.sort(uniform_split(candidates, k, rng)[0])


def uniform_split(candidates: np.ndarray, k: int, rng: Randomness) -> tuple[np.ndarray, np.ndarray]:
    """``(chosen, rest)``: a uniformly random ``k``-subset of ``candidates`` (as :func:`uniform_subset`) and the
    others, each in the candidates' order (ascending candidates give ascending parts, with no sort)."""
    candidates = np.asarray(candidates, np.int64)
    size = candidates.size
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k >= size:
        return candidates, candidates[:0]
    mask = uniform_mask(size, k, rng)
    return candidates[mask], candidates[~mask]


def uniform_mask(size: int, k: int, rng: Randomness) -> np.ndarray:
    """A boolean mask of a uniformly random ``k``-subset of ``range(size)`` (``0 <= k <= size``)."""
    if not 0 <= k <= size:
        raise ValueError(f"need 0 <= k <= size, got k={k}, size={size}")
    return ~_chosen_mask(size, size - k, rng) if 2 * k > size else _chosen_mask(size, k, rng)


def _chosen_mask(size: int, k: int, rng: Randomness) -> np.ndarray:
    """A uniformly random ``k``-subset of ``range(size)`` as a boolean mask (``k <= size/2``)."""
    chosen = np.zeros(size, bool)
    words = RandomWords(rng, k + 64)
    missing = k
    while missing:  # `missing` draws add at most `missing` new members: never more than k
        chosen[uniform_below(size, missing, words).astype(np.intp)] = True
        missing = k - int(np.count_nonzero(chosen))
    return chosen


def uniform_permutation(count: int, rng: Randomness) -> np.ndarray:
    """A uniformly random permutation of ``0..count-1``: the order of i.i.d. 64-bit keys, redrawn on any tie."""
    while True:
        keys = rng.uint32(2 * count).view(np.uint64)
        order = np.argsort(keys, kind="stable")
        if count < 2 or (np.diff(keys[order]) != 0).all():  # distinct keys: every order equally likely
            return order.astype(np.int64)
