"""Tests for transforms.mechanisms.noise.samplers: the exact discrete Laplace, scalar and vectorized.

The distribution is checked on all three ways a draw is made (the scalar and
vector samplers, and the public functions through the pool).  False-failure
budget: see ``noise_helpers``.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from noise_helpers import (ALPHA, N_GOF, POWER_MISS, Z_ALPHA, integer_mass, chisquare_power_miss, chisquare_pvalue,
                           dlap_pmf, gof_bins, pooled_samples, ScriptedRandomness)
from transforms.mechanisms.noise import (InsecureSeededRandomness, Randomness, discrete_laplace,
                                         discrete_laplace_variance, secure_randomness)
from transforms.mechanisms.noise import samplers


def dlap_fourth_moment(scale: float) -> float:
    """E[X^4] = 2q(1+11q+11q^2+q^3) / ((1+q)(1-q)^4), q = e^{-1/s}."""
    q = math.exp(-1.0 / scale)
    one_minus_q = -math.expm1(-1.0 / scale)
    return 2.0 * q * (1 + 11 * q + 11 * q * q + q**3) / ((1 + q) * one_minus_q**4)


def variance_tolerance(scale: float, n: int) -> float:
    """Z_ALPHA standard deviations of mean(X^2) (the mean is known to be 0)."""
    var = discrete_laplace_variance(scale)
    return Z_ALPHA * math.sqrt((dlap_fourth_moment(scale) - var**2) / n)


# The three ways a draw is made: the scalar sampler (python ints, one draw at
# a time), the vector sampler (numpy uint64, a batch at once) and the public
# functions through the generator's pool (pre-drawn values, refills of
# doubling sizes, leftovers, several scales interleaved).
PATHS = ["scalar", "vector", "pooled"]


def path_draws(path: str, scale: Fraction, n: int, rng: Randomness) -> np.ndarray:
    num, den = scale.numerator, scale.denominator
    if path == "scalar":
        return samplers._scalar_draws(num, den, n, rng)
    if path == "vector":
        return samplers._discrete_laplace_vector(num, den, n, rng)
    return pooled_samples(scale, n, rng)


@functools.lru_cache(maxsize=None)
def seeded_samples(scale: Fraction, seed: int, path: str = "vector", n: int = N_GOF) -> np.ndarray:
    out = path_draws(path, scale, n, InsecureSeededRandomness(seed))
    assert out.dtype == np.int64 and out.shape == (n,)
    out.setflags(write=False)
    return out


# Scales exercising num=1 (1/2, 1/3), integers, non-trivial fractions, the
# reduced fraction a budget gives (10^12 / units), the mechanisms' typical
# repeated scale (2000/3), large scales, and numerators at the vector
# sampler's limit 2**50 (one small scale, one huge).
GOF_SCALES = [
    Fraction(1, 2),
    Fraction(2),
    Fraction(7, 3),
    Fraction(10**12, 123_456_789_012),
    Fraction(10),
    Fraction(1000),
    Fraction(10**6),
    Fraction(1, 3),
    Fraction(5, 2),
    Fraction(2000, 3),
    Fraction(2**50, 3**31),
    Fraction(2**50, 3),
]


def gof_seed(scale: Fraction, path: str) -> int:
    return 1000 + 10 * GOF_SCALES.index(scale) + PATHS.index(path)


def test_gof_scales_cover_the_vector_limit():
    assert Fraction(2**50, 3**31).numerator == samplers.VECTOR_MAX_NUM
    assert all(s.numerator <= samplers.VECTOR_MAX_NUM for s in GOF_SCALES)  # every path applies


# --------------------------------------------------------------------------
# Chi-square goodness of fit (+ power)
# --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("scale", GOF_SCALES, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_discrete_laplace_chisquare_fit(path, scale):
    # FFP: ALPHA = 1e-9 (over the seed) per scale and path.
    samples = seeded_samples(scale, gof_seed(scale, path), path)
    assert chisquare_pvalue(samples, float(scale)) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("factor", [1.3, 0.7])
@pytest.mark.parametrize("scale", GOF_SCALES, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_discrete_laplace_chisquare_rejects_wrong_scale(path, scale, factor):
    # Power check.  FFP = the miss probability computed (and bounded) here.
    n = N_GOF
    assert chisquare_power_miss(float(scale), factor * float(scale), n) < POWER_MISS
    samples = seeded_samples(scale, gof_seed(scale, path), path)
    assert chisquare_pvalue(samples, factor * float(scale)) < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("pooled", [False, True], ids=["one-request", "pooled"])
def test_discrete_laplace_chisquare_with_secure_randomness(pooled):
    # Fresh samples from the default source every run.  FFP: ALPHA = 1e-9 for
    # the fit; power miss < POWER_MISS each for the two wrong-scale checks.
    scale = Fraction(5, 3)
    rng = secure_randomness()
    samples = pooled_samples(scale, N_GOF, rng) if pooled else discrete_laplace(scale, N_GOF, rng)
    assert chisquare_pvalue(samples, float(scale)) > ALPHA
    for factor in (1.3, 0.7):
        assert chisquare_power_miss(float(scale), factor * float(scale), N_GOF) < POWER_MISS
        assert chisquare_pvalue(samples, factor * float(scale)) < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("factor", [0, 4])
@pytest.mark.parametrize("scale", [Fraction(2, 5), Fraction(5, 2), Fraction(2000, 3)], ids=str)
def test_vector_sampler_python_int_continuations_are_exact(monkeypatch, scale, factor):
    # The vector range cut to k, v <= factor, no scalar tail.  Factor 4:
    # Algorithm 1's counter passes the range in ~1/120 of the candidates, the
    # geometric in ~e^-3 (and v > 4, whose value is computed with python ints,
    # in ~e^-5).  Factor 0: every candidate continues with python ints from
    # k = 1 and v = 0 (at scale 2/5 a python-int v can still give y = 0, a
    # "-0" to reject).  Those continuations must keep the distribution exact.
    # FFP: ALPHA for the fit, power miss < POWER_MISS for each of the two
    # wrong-scale checks.
    monkeypatch.setattr(samplers, "_VECTOR_MAX_FACTOR", factor)
    monkeypatch.setattr(samplers, "_SCALAR_TAIL", 0)
    samples = samplers._discrete_laplace_vector(scale.numerator, scale.denominator, N_GOF, InsecureSeededRandomness(31))
    assert samples.dtype == np.int64 and samples.shape == (N_GOF,)
    assert chisquare_pvalue(samples, float(scale)) > ALPHA
    for factor in (1.3, 0.7):
        assert chisquare_power_miss(float(scale), factor * float(scale), N_GOF) < POWER_MISS
        assert chisquare_pvalue(samples, factor * float(scale)) < ALPHA


def two_sample_pvalue(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    """p-value of Pearson's chi-square test that ``a`` and ``b`` come from one distribution
    (bins: those of the GOF test against DLap(scale))."""
    edges, probs = gof_bins(scale, min(len(a), len(b)))
    table = [np.bincount(np.searchsorted(edges, x, side="left"), minlength=len(probs)) for x in (a, b)]
    return stats.chi2_contingency(np.array(table)).pvalue


def two_sample_power_miss(scale_a: float, scale_b: float, n: int) -> float:
    """Probability (noncentral chi-square approximation) that the two-sample test does NOT reject
    at ALPHA with n samples of DLap(scale_a) and n of DLap(scale_b)."""
    edges, _ = gof_bins(scale_a, n)
    bounds = [-math.inf] + [float(e) for e in edges] + [math.inf]
    pa, pb = (np.array([integer_mass(bounds[i] + 1, bounds[i + 1], s) for i in range(len(bounds) - 1)]) for s in (scale_a, scale_b))
    df = len(pa) - 1
    noncentrality = n * np.sum((pa - pb) ** 2 / (pa + pb))  # n * sum (pa - pb)^2 / (2 * pooled p)
    return stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality)


@pytest.mark.slow
@pytest.mark.parametrize("scale", [Fraction(7, 3), Fraction(2000, 3)], ids=str)
def test_paths_agree_two_sample(scale):
    # The vector and pooled paths against the scalar one.  FFP: ALPHA each
    # (2 comparisons); power: the vector path at 1.3x the scale must differ
    # from the scalar path, miss probability < POWER_MISS (computed).
    scalar = seeded_samples(scale, gof_seed(scale, "scalar"), "scalar")
    for path in ("vector", "pooled"):
        assert two_sample_pvalue(seeded_samples(scale, gof_seed(scale, path), path), scalar, float(scale)) > ALPHA
    wrong = scale * Fraction(13, 10)
    assert two_sample_power_miss(float(scale), float(wrong), N_GOF) < POWER_MISS
    wrong_samples = samplers._discrete_laplace_vector(wrong.numerator, wrong.denominator, N_GOF, InsecureSeededRandomness(32))
    assert two_sample_pvalue(wrong_samples, scalar, float(scale)) < ALPHA


def test_gof_helpers_are_consistent():
    # Deterministic sanity checks of the reference distribution used above.
    for scale in (0.5, 2.0, 1000.0):
        xs = np.arange(-int(60 * scale) - 10, int(60 * scale) + 11)
        assert dlap_pmf(xs, scale).sum() == pytest.approx(1.0, abs=1e-12)
        assert integer_mass(-3, 4, scale) == pytest.approx(dlap_pmf(np.arange(-3, 5), scale).sum(), rel=1e-12)
        edges, probs = gof_bins(scale, N_GOF)
        assert np.all(np.diff(edges) > 0) and probs.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("path", PATHS)
def test_discrete_laplace_tiny_scale_is_almost_always_zero(path):
    # P(X != 0) = 2q/(1+q) with q = e^{-100}: FFP = 2000 * 2e^{-100} < 1e-40 per path.
    samples = path_draws(path, Fraction(1, 100), 2000, InsecureSeededRandomness(7))
    assert samples.dtype == np.int64 and samples.shape == (2000,)
    assert np.all(samples == 0)



# --------------------------------------------------------------------------
# Vector sampler internals: uniform integers, Bernoulli(exp(-1)) table
# --------------------------------------------------------------------------


class WordRandomness(Randomness):
    """Serves the given 64-bit words (as little-endian uint32 pairs) for one exactly sized request,
    then defers to a seeded source; ``randbelow`` serves scripted values first, then seeded ones."""

    def __init__(self, words=(), randbelow_values=(), seed: int = 0):
        self.words = np.array(words, dtype=np.uint64)
        self.randbelow_values = list(randbelow_values)
        self.randbelow_args: list[int] = []
        self.inner = InsecureSeededRandomness(seed)

    def randbelow(self, n: int) -> int:
        self.randbelow_args.append(n)
        if self.randbelow_values:
            value = self.randbelow_values.pop(0)
            assert 0 <= value < n
            return value
        return self.inner.randbelow(n)

    def uint32(self, size: int) -> np.ndarray:
        if self.words.size:
            assert size == 2 * self.words.size
            out, self.words = self.words.astype("<u8").view(np.uint32).copy(), self.words[:0]
            return out
        return self.inner.uint32(size)


def random_words(n: int, seed: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64(seed)).integers(0, 2**64, n, dtype=np.uint64, endpoint=False)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 100, 2**32 + 1, 2**63, 2**64 - 1])
def test_uniform_below_scalar_m_takes_top_bits_and_rejects(m):
    # Exact semantics: each word's top bits(m-1) bits, values >= m skipped, the first `size` kept in order.
    size = 20
    bits = (m - 1).bit_length()
    count = ((size << bits) // m) + 3 * math.isqrt(size) + 4  # what one pass takes
    words = random_words(count, seed=m % 1000)
    expected = [w >> (64 - bits) for w in words.tolist() if w >> (64 - bits) < m][:size] if m > 1 else [0] * size
    assert len(expected) == size  # this seed's words suffice for one pass (deterministic)
    rng = WordRandomness(words if m > 1 else ())
    out = samplers.uniform_below(m, size, samplers.RandomWords(rng, count))
    assert out.dtype == np.uint64 and out.tolist() == expected


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 2**64 - 1), size=st.integers(0, 300), seed=st.integers(0, 2**32))
def test_uniform_below_scalar_m_stays_below_m(m, size, seed):
    out = samplers.uniform_below(m, size, samplers.RandomWords(InsecureSeededRandomness(seed), 16))
    assert out.dtype == np.uint64 and out.shape == (size,)
    assert all(value < m for value in out.tolist())


def multinomial_power_miss(p_true: np.ndarray, p_tested: np.ndarray, n: int) -> float:
    """Probability (noncentral chi-square approximation) that a GOF test of p_tested at ALPHA does
    NOT reject n draws of p_true."""
    df = len(p_true) - 1
    noncentrality = n * np.sum((p_true - p_tested) ** 2 / p_tested)
    return stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality)


@pytest.mark.parametrize("m", [3, 5, 7, 12, 100])
def test_uniform_below_frequencies(m):
    # Every value below m equally often.  FFP: ALPHA per case (5 cases).
    # Power: the modulo-biased sampler (top bits mod m, no rejection) must be
    # rejected; miss probability < POWER_MISS (computed), 5 more assertions.
    n = 200_000
    words = samplers.RandomWords(InsecureSeededRandomness(m), 1 << 16)
    counts = np.bincount(samplers.uniform_below(m, n, words).astype(np.int64), minlength=m)
    assert counts.size == m
    assert stats.chisquare(counts).pvalue > ALPHA
    span = 1 << (m - 1).bit_length()
    biased = np.bincount(np.arange(span) % m, minlength=m) / span
    assert multinomial_power_miss(np.full(m, 1 / m), biased, n) < POWER_MISS
    assert stats.chisquare(counts, n * biased).pvalue < ALPHA


def test_exp1_table_matches_the_scalar_decoding():
    # Entry r is what _bernoulli_exp1 returns when its draw below 8! is r (2: it needed k >= 9).
    table = samplers._EXP1_TABLE
    assert table.dtype == np.uint8 and table.shape == (math.factorial(8),)
    for r in range(math.factorial(8)):
        rng = ScriptedRandomness(randbelow_values=[r, 1])
        result = samplers._bernoulli_exp1(rng.randbelow)
        assert table[r] == (2 if len(rng.randbelow_args) == 2 else int(result))
    assert table[0] == 2 and np.count_nonzero(table == 2) == 1


def test_geometric_undecided_coin_continues_algorithm_1_at_k9():
    # A first word of 0 gives the first element the digits (0, 0, 0): its three
    # coins all need k >= 9, which randbelow then decides.  n = 9 > _SCALAR_TAIL
    # so that the first round is vectorized.
    n = 9
    assert n > samplers._SCALAR_TAIL
    count = ((n << 46) // samplers._EXP1_RADIX_CUBED) + 3 * math.isqrt(n) + 4
    words = random_words(count, seed=3)
    words[0] = 0
    # randbelow(9) = 1 stops at k = 9 (odd): success, three times: v >= 3.
    rng = WordRandomness(words, randbelow_values=[1, 1, 1], seed=4)
    v, large = samplers._geometric_exp1(n, samplers.RandomWords(rng, count), rng)
    assert rng.randbelow_args[:3] == [9, 9, 9] and v[0] >= 3 and large == {}
    # randbelow(9) = 0 continues, randbelow(10) = 4 stops at k = 10 (even): failure, v = 0.
    rng = WordRandomness(words, randbelow_values=[0, 4, 1, 1], seed=4)
    v, large = samplers._geometric_exp1(n, samplers.RandomWords(rng, count), rng)
    assert rng.randbelow_args[:4] == [9, 10, 9, 9] and v[0] == 0


def test_vector_sampler_refuses_scales_outside_its_range():
    rng = InsecureSeededRandomness(0)
    for num, den in ((2**50 + 1, 3), (1, 2**63), (0, 1)):
        with pytest.raises(ValueError, match="vector sampler"):
            samplers._discrete_laplace_vector(num, den, 5, rng)
    assert samplers._discrete_laplace_vector(3, 2, 0, rng).shape == (0,)



# --------------------------------------------------------------------------
# Variance of the draws
# --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("scale", GOF_SCALES, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_discrete_laplace_empirical_variance(path, scale):
    # mean(X^2) estimates the variance (mean is 0).  FFP: two-sided
    # Z_ALPHA-sigma normal bound, ~ALPHA = 1e-9 per scale and path (normal approximation
    # with n = 1e5).  Power: the design check below makes the gap between the
    # true and the wrong variance exceed 2x the sum of both tolerances, so a
    # miss needs a > 2 * Z_ALPHA-sigma deviation: FFP far below ALPHA.
    samples = seeded_samples(scale, gof_seed(scale, path), path).astype(np.float64)
    n = len(samples)
    s = float(scale)
    estimate = float(np.mean(samples**2))
    tolerance = variance_tolerance(s, n)
    assert abs(estimate - discrete_laplace_variance(s)) < tolerance
    for factor in (1.3, 0.7):
        wrong_tolerance = variance_tolerance(factor * s, n)
        gap = abs(discrete_laplace_variance(factor * s) - discrete_laplace_variance(s))
        assert gap > 2 * (tolerance + wrong_tolerance)  # design check
        assert abs(estimate - discrete_laplace_variance(factor * s)) > wrong_tolerance



# --------------------------------------------------------------------------
# Scalar sampler internals: Bernoulli(exp(-1))
# --------------------------------------------------------------------------


def test_bernoulli_exp1_radix_decoding_is_exact():
    # One draw below 8! encodes the coins Bernoulli(1/k), k = 2..8.  Count
    # the draws that return True without the fallback: exact rational check.
    radix = math.factorial(8)
    trues = fallbacks = 0
    for r in range(radix):
        rng = ScriptedRandomness(randbelow_values=[r, 1])  # fallback: randbelow(9) = 1 -> k = 9, odd
        trues += samplers._bernoulli_exp1(rng.randbelow)
        fallbacks += len(rng.randbelow_args) == 2
    early_true = sum(Fraction(1, math.factorial(k - 1)) - Fraction(1, math.factorial(k)) for k in (3, 5, 7))
    assert fallbacks == 1
    assert Fraction(trues - 1, radix) == early_true  # the fallback returned True once
    # P(True) = early_true + P(fallback) * P(odd | fallback) = e^-1 exactly in the limit.
    assert float(early_true) == pytest.approx(math.exp(-1), abs=1 / radix)


def test_bernoulli_exp1_fallback_path():
    # r = 0: coins k = 2..8 all succeed; randbelow(9) = 0 succeeds (k = 10);
    # randbelow(10) = 3 fails: k = 10 is even -> False.
    rng = ScriptedRandomness(randbelow_values=[0, 0, 3])
    assert samplers._bernoulli_exp1(rng.randbelow) is False
    assert rng.randbelow_args == [math.factorial(8), 9, 10]
