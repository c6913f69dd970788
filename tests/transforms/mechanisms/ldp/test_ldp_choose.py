"""The users a population method asks are exactly uniform: subsets and permutations, with power checks."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from transforms.mechanisms.ldp.choose import uniform_permutation, uniform_split, uniform_subset
from transforms.mechanisms.noise import insecure_seeded_randomness

FALSE_FAILURE = 1e-6
"""Each chi-square test below fails a correct sampler with this probability."""


def _chi_square_p(outcomes, support) -> float:
    counts = np.array([outcomes.count(s) for s in support])
    return stats.chisquare(counts).pvalue


def _linear_probing_subset(candidates, k, rng):
    """A classic biased sampler: k i.i.d. indices, a duplicate moved to the next free index (not uniform)."""
    taken = []
    for draw in rng.uint32(k) % len(candidates):
        index = int(draw)
        while index in taken:
            index = (index + 1) % len(candidates)
        taken.append(index)
    return np.sort(np.asarray(candidates)[taken])


@pytest.mark.parametrize("size, k", [(6, 2), (6, 4), (7, 3)])
def test_every_subset_is_equally_likely(size, k):
    rng = insecure_seeded_randomness(size * 10 + k)
    candidates = np.arange(100, 100 + 2 * size, 2)  # any distinct ints, not only 0..size-1
    support = list(itertools.combinations(candidates.tolist(), k))
    outcomes = [tuple(uniform_subset(candidates, k, rng).tolist()) for _ in range(200 * len(support))]
    assert _chi_square_p(outcomes, support) > FALSE_FAILURE


def test_the_chi_square_test_catches_a_biased_sampler():
    """Power: linear probing on duplicates over-weights runs of neighbours; 200 draws per subset catch it."""
    rng = insecure_seeded_randomness(3)
    candidates = np.arange(6)
    support = list(itertools.combinations(range(6), 3))
    outcomes = [tuple(_linear_probing_subset(candidates, 3, rng).tolist()) for _ in range(200 * len(support))]
    assert _chi_square_p(outcomes, support) < FALSE_FAILURE


def test_every_permutation_is_equally_likely():
    rng = insecure_seeded_randomness(11)
    support = list(itertools.permutations(range(4)))
    outcomes = [tuple(uniform_permutation(4, rng).tolist()) for _ in range(200 * math.factorial(4))]
    assert _chi_square_p(outcomes, support) > FALSE_FAILURE


def test_edges_and_bad_input():
    rng = insecure_seeded_randomness(1)
    assert uniform_subset(np.array([5, 3, 9]), 7, rng).tolist() == [3, 5, 9]  # more asked than there are: all
    assert uniform_subset(np.array([5, 3, 9]), 0, rng).size == 0
    chosen = uniform_subset(np.arange(1_000_000), 250_000, rng)
    assert chosen.size == 250_000 and np.all(np.diff(chosen) > 0)
    assert sorted(uniform_permutation(1000, rng).tolist()) == list(range(1000))
    with pytest.raises(ValueError, match="k must be"):
        uniform_subset(np.arange(3), -1, rng)


@pytest.mark.parametrize("k", [0, 3, 6, 7, 12, 20])
def test_a_split_is_the_subset_and_its_complement_in_the_candidates_order(k):
    candidates = np.array([2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377])
    chosen, rest = uniform_split(candidates, k, insecure_seeded_randomness(k))
    assert chosen.tolist() == uniform_subset(candidates, k, insecure_seeded_randomness(k)).tolist()
    assert sorted(chosen.tolist() + rest.tolist()) == candidates.tolist() and chosen.size == min(k, 12)
    assert (np.diff(chosen) > 0).all() and (np.diff(rest) > 0).all()  # ascending, with no sort
