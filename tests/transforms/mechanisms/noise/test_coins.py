"""Tests for transforms.mechanisms.noise.coins: Bernoulli thresholds and counted coins.

False-failure budget: see ``noise_helpers``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from noise_helpers import ALPHA, POWER_MISS, TWO_32, CountingRandomness, ScriptedRandomness
from transforms.mechanisms.noise import InsecureSeededRandomness, SecureRandomness, bernoulli_thresholds, count_successes


# --------------------------------------------------------------------------
# bernoulli_thresholds
# --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0, allow_nan=False))
def test_bernoulli_thresholds_never_exceed_p(p):
    (threshold,) = bernoulli_thresholds(np.array([p]))
    exact = Fraction(p) * TWO_32
    if p == 1.0:
        assert threshold == TWO_32
    else:
        assert Fraction(int(threshold)) <= exact
        assert int(threshold) >= math.floor(exact) - 1  # not needlessly conservative


def test_bernoulli_thresholds_edge_cases():
    probs = np.array([0.0, -0.0, -3.0, 1.0, np.nextafter(1.0, 2.0), 7.0, 0.5, 2.0**-32, 1e-300, np.nextafter(1.0, 0.0)])
    thresholds = bernoulli_thresholds(probs)
    assert thresholds.dtype == np.uint64
    assert thresholds.tolist() == [0, 0, 0, TWO_32, TWO_32, TWO_32, 2**31 - 1, 0, 0, TWO_32 - 1]
    # Shape is preserved, 0-d included.
    assert bernoulli_thresholds(np.float64(1.0)) == TWO_32
    assert bernoulli_thresholds(np.zeros((2, 3))).shape == (2, 3)
    assert bernoulli_thresholds([0.25]).tolist() == [2**30 - 1]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_bernoulli_thresholds_reject_non_finite(bad):
    with pytest.raises(ValueError, match="finite"):
        bernoulli_thresholds(np.array([0.5, bad]))


# --------------------------------------------------------------------------
# count_successes
# --------------------------------------------------------------------------



def halves_in_words(halves: list[int]) -> np.ndarray:
    """uint32 words whose 16-bit halves, in memory order, are ``halves`` (zero-padded to an even count)."""
    padded = np.array(list(halves) + [0] * (len(halves) % 2), dtype=np.uint16)
    return padded.view(np.uint32).copy()


def test_count_successes_certain_cells_draw_nothing():
    rng = CountingRandomness()
    trials = np.array([5, 0, 7, 3], dtype=np.int64)
    thresholds = np.array([0, TWO_32, TWO_32, 0], dtype=np.uint64)
    out = count_successes(trials, thresholds, rng)
    assert out.dtype == np.int64
    assert out.tolist() == [0, 0, 7, 0]
    assert rng.uint32_calls == []
    # Thresholds from bernoulli_thresholds for p = 0 and p = 1.
    out = count_successes(trials, bernoulli_thresholds([0.0, 1.0, 1.0, -1.0]), rng)
    assert out.tolist() == [0, 0, 7, 0] and rng.uint32_calls == []


def test_count_successes_compares_draw_strictly_below_threshold():
    # Thresholds 10, 0 (skipped) and 1 have high half 0: every coin's high half 0 ties
    # and its low half decides; a non-zero high half fails.
    rng = ScriptedRandomness()
    rng.uint32_batches = [halves_in_words([0, 0, 1, 0, 0, 0, 0]),
                          np.array([9, 10, 0, 1, 0, 2**16 - 1], dtype=np.uint32) << np.uint32(16)]
    out = count_successes(np.array([3, 2, 4]), np.array([10, 0, 1], dtype=np.uint64), rng)
    assert out.tolist() == [1, 0, 2]  # 9 < 10, not 10 < 10, high half 1 fails; 0 < 1 twice
    assert rng.uint32_batches == []


@given(threshold=st.integers(1, 2**32 - 1), high=st.integers(0, 2**16 - 1), low=st.integers(0, 2**16 - 1))
def test_count_successes_lazy_coin_is_the_full_32_bit_comparison(threshold, high, low):
    # One coin whose uniform 32-bit draw is X = high * 2**16 + low: it succeeds iff X < threshold,
    # and the low half is drawn only when the high half ties the threshold's.
    rng = ScriptedRandomness()
    ties = high == threshold >> 16
    rng.uint32_batches = [halves_in_words([high])] + ([np.array([low << 16], dtype=np.uint32)] if ties else [])
    out = count_successes(np.array([1]), np.array([threshold], dtype=np.uint64), rng)
    assert out.tolist() == [int((high << 16) + low < threshold)]
    assert rng.uint32_batches == []


def test_count_successes_draws_one_batch_of_high_halves_and_one_for_ties():
    rng = CountingRandomness(3)
    trials = np.array([10, 0, 20, 5, 7, 100_000], dtype=np.int64)
    thresholds = bernoulli_thresholds([0.5, 0.5, 1.0, 0.0, 0.25, 0.999])
    out = count_successes(trials, thresholds, rng)
    coins = 10 + 7 + 100_000
    assert rng.uint32_calls[0] == -(-coins // 2)  # two bytes per coin
    assert len(rng.uint32_calls) <= 2 and sum(rng.uint32_calls[1:]) < coins / 5000  # ties: 2**-16 of coins
    assert rng.randbelow_calls == 0
    assert out[1] == 0 and out[2] == 20 and out[3] == 0
    assert np.all((out >= 0) & (out <= trials))


def test_count_successes_validates_inputs():
    rng = CountingRandomness()
    with pytest.raises(ValueError):
        count_successes(np.array([1, 2]), np.array([1], dtype=np.uint64), rng)
    with pytest.raises(ValueError, match="non-negative"):
        count_successes(np.array([1, -2]), np.array([1, 1], dtype=np.uint64), rng)
    with pytest.raises(ValueError):
        count_successes(np.array([1.5]), np.array([1], dtype=np.uint64), rng)
    assert count_successes(np.array([], dtype=np.int64), np.array([], dtype=np.uint64), rng).tolist() == []
    assert rng.uint32_calls == []


def binomial_power_miss(n: int, p_true: float, p_tested: float) -> float:
    """Probability that a binomial test of p_tested at ALPHA does not reject when
    the truth is p_true (acceptance region approximated by the equal-tailed one)."""
    lo = stats.binom.ppf(ALPHA / 2, n, p_tested)
    hi = stats.binom.isf(ALPHA / 2, n, p_tested)
    return float(stats.binom.cdf(hi, n, p_true) - stats.binom.cdf(lo - 1, n, p_true))


@pytest.mark.slow
@pytest.mark.parametrize("rng_factory", [lambda: InsecureSeededRandomness(11), SecureRandomness], ids=["seeded", "secure"])
def test_count_successes_binomial_rate(rng_factory):
    # FFP: ALPHA = 1e-9 per cell (3 cells x 2 sources); power miss < POWER_MISS
    # per cell (computed).
    probabilities = np.array([0.3, 0.01, 0.5])
    n = 1_000_000
    thresholds = bernoulli_thresholds(probabilities)
    out = count_successes(np.full(3, n, dtype=np.int64), thresholds, rng_factory())
    for successes, p, threshold in zip(out.tolist(), probabilities, thresholds.tolist()):
        realised = threshold / TWO_32
        assert stats.binomtest(successes, n, realised).pvalue > ALPHA
        assert binomial_power_miss(n, realised, 1.3 * p) < POWER_MISS
        assert stats.binomtest(successes, n, 1.3 * p).pvalue < ALPHA



# --------------------------------------------------------------------------
# coins_below
# --------------------------------------------------------------------------


def test_coins_below_compares_the_full_32_bit_draw():
    """High halves decide; a tie draws the low half and compares it with the coin's low threshold."""
    from transforms.mechanisms.noise.coins import coins_below

    rng = ScriptedRandomness()
    # Four coins, high halves (little-endian uint16 pairs of two uint32 words): 2, 3, 3, 0x8000.
    rng.uint32_batches = [np.array([2 | 3 << 16, 3 | 0x8000 << 16], dtype=np.uint32),
                          np.array([9 << 16, 10 << 16], dtype=np.uint32)]  # low halves 9 and 10 for the ties
    seen = []

    def low_of(ties):
        seen.append(ties.tolist())
        return np.array([10, 10], dtype=np.uint32)[: ties.size]

    # Thresholds 3·2**16 + 10 for the first three coins and 0x7FFF·2**16 + (anything) for the last.
    result = coins_below(np.array([3, 3, 3, 0x8000 - 1], dtype=np.uint16), low_of, rng)
    assert seen == [[1, 2]]  # only the coins whose high half equals the threshold's draw a low half
    assert result.tolist() == [True, True, False, False]  # 2 < 3; 9 < 10; 10 < 10 is false; 0x8000 > 0x7FFF
