"""The exact exponential-mechanism draw of DPI's sound variant (spec §2.10.1; TV7's distances).

Statistical tests use the secure generator (fresh draws every run).  Each has false-failure probability
``ALPHA = 1e-7``; every goodness-of-fit test has a power check: draws from a deliberately wrong law (the
mechanism at twice the budget, or a coin with 20% more exponent) must be rejected, and the miss probability
(noncentral chi-square) is asserted below ``POWER_MISS = 1e-7``.  There are 9 such assertions, so their joint
false-failure probability is below 1e-6.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.dpi.exponential import (
    LAZY_ROUNDS,
    SENSITIVITY,
    PoolDistances,
    exponential_draw,
    l1_numerators,
    l1_numerators_of_matrix,
    measures_lazily,
    select_synopses,
)
from transforms.mechanisms.dpi.pool import SynopsisPool
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.noise.coins import bernoulli_exp

ALPHA = 1e-7
POWER_MISS = 1e-7
DRAWS = 40_000


def _law(numerators, denominator, epsilon_units) -> np.ndarray:
    """The exponential mechanism's exact law exp(-eps·d_j/(2Δ))/Z (evaluated in floats from exact d_j)."""
    eps = epsilon_units / UNITS_PER_EPSILON
    d = np.array([Fraction(n, denominator) for n in numerators], dtype=float)
    logits = -eps * d / (2 * SENSITIVITY)
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def _gof(observed: np.ndarray, law: np.ndarray) -> float:
    return float(stats.chisquare(observed, law * observed.sum()).pvalue)


def _power_miss(law: np.ndarray, wrong: np.ndarray, n: int) -> float:
    df = law.size - 1
    noncentrality = n * float(((wrong - law) ** 2 / law).sum())
    return float(stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality))


# ---- exact distances ---------------------------------------------------------------------------------

def test_tv7_distances_are_exact():
    """TV7: y = (.45,.30,.15,.10) against A0..A3 on the grid 1/20 gives d = (0.5, 0.1, 0.9, 0.5)."""
    pool_counts = [[5, 5, 5, 5], [8, 6, 4, 2], [2, 4, 6, 8], [14, 2, 2, 2]]
    numerators, denominator = l1_numerators(np.array([9, 6, 3, 2]), pool_counts, 20)
    assert [Fraction(n, denominator) for n in numerators] == [Fraction(1, 2), Fraction(1, 10), Fraction(9, 10),
                                                                Fraction(1, 2)]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=8), st.integers(0, 2**31), st.booleans())
def test_distances_match_fractions_including_huge_counts(counts, seed, huge):
    h = np.array(counts, dtype=np.int64) * (10**12 if huge else 1)  # huge: past int64 products, python ints
    pool = SynopsisPool(k=h.size, size=5, seed=seed, n_units=97)
    numerators, denominator = l1_numerators(h, (pool.counts(j) for j in range(5)), pool.n_units)
    total = int(h.sum())
    y = [Fraction(int(v), total) for v in h] if total else [Fraction(1, h.size)] * h.size  # empty: uniform
    for j, n in enumerate(numerators):
        exact = sum(abs(a - Fraction(int(c), 97)) for a, c in zip(y, pool.counts(j)))
        assert Fraction(n, denominator) == exact


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=8), st.integers(0, 2**31), st.booleans(),
       st.integers(1, 40))
def test_the_matrix_form_gives_the_same_integers(counts, seed, huge, chunk):
    h = np.array(counts, dtype=np.int64) * (10**12 if huge else 1)
    pool = SynopsisPool(k=h.size, size=37, seed=seed, n_units=97)
    matrix = pool.counts_of(range(37)).astype(np.uint16)
    assert l1_numerators_of_matrix(h, matrix, 97, chunk) == l1_numerators(h, iter(matrix), 97)


def test_bad_inputs_fail_clearly():
    pool = SynopsisPool(k=3, size=4, seed=0)
    with pytest.raises(ValueError, match="histogram"):
        select_synopses(np.array([1, 2]), pool, 10)
    with pytest.raises(ValueError, match="non-negative"):
        select_synopses(np.array([1, -2, 3]), pool, 10)
    with pytest.raises(ValueError, match="integer"):
        select_synopses(np.array([1.0, 2.0, 3.0]), pool, 10)
    with pytest.raises(ValueError, match="draws"):
        select_synopses(np.array([1, 2, 3]), pool, 10, draws=0)
    with pytest.raises(ValueError, match="epsilon_units"):
        select_synopses(np.array([1, 2, 3]), pool, -1)
    with pytest.raises(ValueError, match="candidate"):
        l1_numerators(np.array([1, 2]), [np.array([1, 1, 1])], 3)
    with pytest.raises(IndexError):
        select_synopses(np.array([1, 2, 3]), pool, 10, candidates=[7])


# ---- exact coins -------------------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(3, 10), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_law_with_power(gamma):
    rng = secure_randomness()
    n = DRAWS
    successes = sum(bernoulli_exp(gamma.numerator, gamma.denominator, rng.randbelow) for _ in range(n))
    p = math.exp(-gamma)
    if gamma == 0:
        assert successes == n  # exp(0) = 1: certain
        return
    assert stats.binomtest(successes, n, p).pvalue > ALPHA
    wrong = math.exp(-1.2 * gamma)  # power: 20% more exponent
    law, other = np.array([p, 1 - p]), np.array([wrong, 1 - wrong])
    assert _power_miss(law, other, n) < POWER_MISS


# ---- the mechanism's law -----------------------------------------------------------------------------

CASE_POOL = SynopsisPool(k=5, size=8, seed=404, n_units=5)
CASE_HISTOGRAM = np.array([7, 3, 0, 0, 1])


def _case():
    return l1_numerators(CASE_HISTOGRAM, (CASE_POOL.counts(j) for j in range(8)), CASE_POOL.n_units)


@pytest.mark.parametrize("epsilon", [0, 2, 6])  # 0 and 2 subtract the floor 0, 6 the least distance
def test_draws_follow_the_exact_law_and_twice_the_budget_is_caught(epsilon):
    numerators, denominator = _case()
    units = epsilon * UNITS_PER_EPSILON
    law = _law(numerators, denominator, units)
    rng = secure_randomness()
    observed = np.bincount([exponential_draw(numerators, denominator, units, rng) for _ in range(DRAWS)],
                           minlength=8)
    assert _gof(observed, law) > ALPHA
    if epsilon:
        wrong = _law(numerators, denominator, 2 * units)
        assert _power_miss(law, wrong, DRAWS) < POWER_MISS
        doubled = np.bincount([exponential_draw(numerators, denominator, 2 * units, rng) for _ in range(DRAWS)],
                              minlength=8)
        assert _gof(doubled, law) <= ALPHA  # the power check realised (miss probability < 1e-7)


def test_select_synopses_splits_the_budget_and_maps_candidates():
    numerators, denominator = _case()
    candidates = [6, 2, 5]  # a public subset, in any order
    law = _law([numerators[j] for j in candidates], denominator, 4 * UNITS_PER_EPSILON)
    draw = select_synopses(CASE_HISTOGRAM, CASE_POOL, 8 * UNITS_PER_EPSILON + 1, draws=2, candidates=candidates,
                           rng=secure_randomness())
    assert draw.per_draw_units == 4 * UNITS_PER_EPSILON and draw.realised_units == 8 * UNITS_PER_EPSILON
    assert len(draw.indices) == 2 and set(draw.indices) <= set(candidates)
    rng = secure_randomness()
    picks = [select_synopses(CASE_HISTOGRAM, CASE_POOL, 8 * UNITS_PER_EPSILON, draws=2, candidates=candidates,
                             rng=rng).indices for _ in range(DRAWS // 8)]
    flat = np.array([candidates.index(j) for pair in picks for j in pair])
    observed = np.bincount(flat, minlength=3)
    assert _gof(observed, law) > ALPHA
    wrong = _law([numerators[j] for j in candidates], denominator, 8 * UNITS_PER_EPSILON)  # undivided budget
    assert _power_miss(law, wrong, flat.size) < POWER_MISS


def test_seeded_replay_is_reproducible_and_default_is_secure():
    a = select_synopses(CASE_HISTOGRAM, CASE_POOL, 10**12, draws=6, rng=insecure_seeded_randomness(8))
    b = select_synopses(CASE_HISTOGRAM, CASE_POOL, 10**12, draws=6, rng=insecure_seeded_randomness(8))
    assert a == b
    c = select_synopses(CASE_HISTOGRAM, CASE_POOL, 10**12, draws=6)  # the secure generator
    assert len(c.indices) == 6 and all(0 <= j < 8 for j in c.indices)


# ---- the privacy ratio -------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=4, max_size=4), st.lists(st.integers(0, 50), min_size=4, max_size=4),
       st.integers(1, 10 * UNITS_PER_EPSILON), st.integers(0, 2**20))
def test_law_ratio_of_neighbouring_streams_is_at_most_e_to_the_epsilon(others, user, units, seed):
    """Neighbours: one user's records (any number, any items) present or absent; every candidate's
    probability changes by a factor of at most e^eps (the empty stream is uniform, I-14)."""
    pool = SynopsisPool(k=4, size=6, seed=seed, n_units=6)
    without = np.array(others, dtype=np.int64)
    with_user = without + np.array(user, dtype=np.int64)
    laws = [_law(*l1_numerators(h, (pool.counts(j) for j in range(6)), 6), units) for h in (without, with_user)]
    ratio = np.abs(np.log(laws[0]) - np.log(laws[1])).max()
    assert ratio <= units / UNITS_PER_EPSILON * (1 + 1e-9) + 1e-12


# ---- measuring only what is proposed -----------------------------------------------------------------

def test_pool_distances_are_the_exact_numerators_measured_block_by_block():
    pool = SynopsisPool(k=7, size=37, seed=5, n_units=9)  # three blocks, the last one cut
    histogram = np.array([4, 0, 1, 9, 2, 0, 3])
    distances = PoolDistances(histogram, pool)
    assert len(distances) == 37 and distances.measured_blocks == 0
    assert distances[20] == l1_numerators(histogram, [pool.counts(20)], 9)[0][0] and distances.measured_blocks == 1
    assert list(distances) == l1_numerators(histogram, (pool.counts(j) for j in range(37)), 9)[0]
    assert distances.measured_blocks == 3 and distances.denominator == 19 * 9
    assert PoolDistances(np.zeros(7, np.int64), pool).denominator == 7 * 9  # empty: uniform (I-14)


def test_a_small_budget_measures_what_it_proposes_and_a_large_one_the_whole_pool():
    """The floor is public: at eps = 0 every round accepts, so a draw measures exactly one block; above
    ln(LAZY_ROUNDS)·Delta the floor is D_min and every block is measured."""
    pool = SynopsisPool(k=50, size=2000, seed=1)
    histogram = np.arange(50)
    threshold = math.floor(math.log(LAZY_ROUNDS) * SENSITIVITY * UNITS_PER_EPSILON)
    assert measures_lazily(threshold) and not measures_lazily(threshold + 1)
    distances = PoolDistances(histogram, pool)
    exponential_draw(distances, distances.denominator, 0, secure_randomness())
    assert distances.measured_blocks == 1
    distances = PoolDistances(histogram, pool)
    exponential_draw(distances, distances.denominator, threshold + 1, secure_randomness())
    assert distances.measured_blocks == 2000 // 16
