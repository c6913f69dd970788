"""Tests for transforms.mechanisms.noise.

False-failure budget
--------------------
Every statistical assertion states its false-failure probability (FFP):
the chance that a *correct* implementation fails it.  Tests driven by
``InsecureSeededRandomness`` use fixed seeds, so they are deterministic in CI;
their FFP is the probability over the choice of seed.  Tests driven by
``SecureRandomness`` are fresh every run.  Each GOF/variance/binomial test
uses ``ALPHA = 1e-9``; each power check ("must reject a scale 30% off") has a
miss probability that is computed in the test and asserted to be below
``POWER_MISS = 1e-9``.  There are fewer than 300 such assertions in this file
(most of them the GOF, power and variance checks of 12 scales x 3 sampling
paths), so the whole file's FFP is below 3e-7 (< 1e-6 as required); the
few other randomized assertions state FFPs below 1e-40.  Power checks
against the wrong scale are what make these tests able to fail at all.
"""

from __future__ import annotations

import ast
import functools
import math
import os
import pickle
from fractions import Fraction
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from transforms.mechanisms import noise
from transforms.mechanisms.noise import (
    InsecureSeededRandomness,
    Randomness,
    SecureRandomness,
    bernoulli_thresholds,
    continuous_laplace_variance,
    count_successes,
    discrete_laplace,
    discrete_laplace_variance,
    grid_laplace,
    insecure_seeded_randomness,
    secure_randomness,
)

ALPHA = 1e-9
"""Per-assertion false-failure probability of every statistical test."""
POWER_MISS = 1e-9
"""Largest allowed probability that a power check fails to reject."""
Z_ALPHA = stats.norm.isf(ALPHA / 2)  # two-sided normal critical value, ~6.11
TWO_32 = 2**32
N_GOF = 100_000  # samples per scale for the discrete Laplace tests


# --------------------------------------------------------------------------
# Exact discrete Laplace helpers (reference distribution, floats are fine here)
# --------------------------------------------------------------------------


def dlap_pmf(x, scale: float) -> np.ndarray:
    """P(x) = (1-q)/(1+q) q^|x| with q = e^{-1/s}."""
    q = math.exp(-1.0 / scale)
    return -math.expm1(-1.0 / scale) / (1.0 + q) * np.exp(-np.abs(np.asarray(x, dtype=float)) / scale)


def _tail(n: float, scale: float) -> float:
    """P(X >= n) for n >= 0 (n may be +inf)."""
    if n == math.inf:
        return 0.0
    return math.exp(-n / scale) / (1.0 + math.exp(-1.0 / scale))


def _mass(lo: float, hi: float, scale: float) -> float:
    """P(lo <= X <= hi) for integers (or infinities) lo <= hi."""
    if lo >= 0:
        if hi == math.inf:
            return _tail(lo, scale)
        return _tail(lo, scale) * -math.expm1(-(hi + 1 - lo) / scale)
    if hi <= 0:
        return _mass(-hi, -lo, scale)
    return 1.0 - _tail(hi + 1, scale) - _tail(1 - lo, scale)


def _quantile(p: float, scale: float) -> int:
    """Smallest integer x with P(X <= x) >= p (up to float rounding, which only moves bins)."""
    q = math.exp(-1.0 / scale)
    if p <= q / (1.0 + q):
        return min(-1, math.ceil(scale * math.log(p * (1.0 + q))))
    return max(0, math.ceil(-scale * math.log((1.0 - p) * (1.0 + q))) - 1)


def gof_bins(scale: float, n: int, target_bins: int = 40, min_expected: float = 20.0):
    """Right edges and probabilities of bins (-inf, e1], (e1, e2], ..., (ek, inf).

    Edges are quantiles of the hypothesised distribution; bins with fewer than
    ``min_expected`` expected counts (the tails) are pooled with neighbours.
    """
    edges = sorted({_quantile(j / target_bins, scale) for j in range(1, target_bins)})
    bounds = [-math.inf] + [float(e) for e in edges] + [math.inf]
    probs = [_mass(bounds[i] + 1, bounds[i + 1], scale) for i in range(len(bounds) - 1)]
    merged_edges, merged_probs, acc = [], [], 0.0
    for i, p in enumerate(probs):
        acc += p
        if acc * n >= min_expected and i < len(probs) - 1:
            merged_edges.append(edges[i])
            merged_probs.append(acc)
            acc = 0.0
    if acc * n < min_expected and merged_probs:  # pool the right tail into the last bin
        merged_edges.pop()
        merged_probs[-1] += acc
    else:
        merged_probs.append(acc)
    probs = np.array(merged_probs)
    assert len(probs) >= 2 and probs.min() * n >= min_expected
    return np.array(merged_edges, dtype=np.int64), probs / probs.sum()


def chisquare_pvalue(samples: np.ndarray, scale: float) -> float:
    """p-value of Pearson's chi-square GOF of integer samples against DLap(scale)."""
    edges, probs = gof_bins(scale, len(samples))
    observed = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=len(probs))
    return stats.chisquare(observed, len(samples) * probs).pvalue


def chisquare_power_miss(true_scale: float, tested_scale: float, n: int) -> float:
    """Probability (noncentral chi-square approximation) that the GOF test
    against ``tested_scale`` does NOT reject at ALPHA when the truth is ``true_scale``."""
    edges, probs = gof_bins(tested_scale, n)
    bounds = [-math.inf] + [float(e) for e in edges] + [math.inf]
    true_probs = np.array([_mass(bounds[i] + 1, bounds[i + 1], true_scale) for i in range(len(probs))])
    df = len(probs) - 1
    noncentrality = n * np.sum((true_probs - probs) ** 2 / probs)
    return stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality)


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
POOL_PATTERN = (1, 1, 3, 100, 1, 2, 40, 1, 7, 250, 1, 1, 1, 17)
"""Request sizes the pooled path cycles through (1 = discrete_laplace_draw)."""


def pooled_samples(scale: Fraction, n: int, rng: Randomness) -> np.ndarray:
    """``n`` draws of ``scale`` through the public functions and the pool: single draws and releases
    of assorted sizes, every fifth request followed by one for another scale (discarded)."""
    other = scale * 3 + Fraction(1, 7)
    parts, have, i = [], 0, 0
    while have < n:
        size = min(POOL_PATTERN[i % len(POOL_PATTERN)], n - have)
        i += 1
        if size == 1:
            parts.append(np.array([noise.discrete_laplace_draw(scale, rng)], dtype=np.int64))
        else:
            parts.append(discrete_laplace(scale, size, rng))
        have += size
        if i % 5 == 0:
            discrete_laplace(other, 1 + i % 3, rng)
    return np.concatenate(parts)


def path_draws(path: str, scale: Fraction, n: int, rng: Randomness) -> np.ndarray:
    num, den = scale.numerator, scale.denominator
    if path == "scalar":
        return noise._scalar_draws(num, den, n, rng)
    if path == "vector":
        return noise._discrete_laplace_vector(num, den, n, rng)
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
    assert Fraction(2**50, 3**31).numerator == noise._VECTOR_MAX_NUM
    assert all(s.numerator <= noise._VECTOR_MAX_NUM for s in GOF_SCALES)  # every path applies


# --------------------------------------------------------------------------
# 1. Chi-square goodness of fit (+ power)
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
    monkeypatch.setattr(noise, "_VECTOR_MAX_FACTOR", factor)
    monkeypatch.setattr(noise, "_SCALAR_TAIL", 0)
    samples = noise._discrete_laplace_vector(scale.numerator, scale.denominator, N_GOF, InsecureSeededRandomness(31))
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
    pa, pb = (np.array([_mass(bounds[i] + 1, bounds[i + 1], s) for i in range(len(bounds) - 1)]) for s in (scale_a, scale_b))
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
    wrong_samples = noise._discrete_laplace_vector(wrong.numerator, wrong.denominator, N_GOF, InsecureSeededRandomness(32))
    assert two_sample_pvalue(wrong_samples, scalar, float(scale)) < ALPHA


def test_gof_helpers_are_consistent():
    # Deterministic sanity checks of the reference distribution used above.
    for scale in (0.5, 2.0, 1000.0):
        xs = np.arange(-int(60 * scale) - 10, int(60 * scale) + 11)
        assert dlap_pmf(xs, scale).sum() == pytest.approx(1.0, abs=1e-12)
        assert _mass(-3, 4, scale) == pytest.approx(dlap_pmf(np.arange(-3, 5), scale).sum(), rel=1e-12)
        edges, probs = gof_bins(scale, N_GOF)
        assert np.all(np.diff(edges) > 0) and probs.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("path", PATHS)
def test_discrete_laplace_tiny_scale_is_almost_always_zero(path):
    # P(X != 0) = 2q/(1+q) with q = e^{-100}: FFP = 2000 * 2e^{-100} < 1e-40 per path.
    samples = path_draws(path, Fraction(1, 100), 2000, InsecureSeededRandomness(7))
    assert samples.dtype == np.int64 and samples.shape == (2000,)
    assert np.all(samples == 0)


# --------------------------------------------------------------------------
# 1b. Vector sampler internals: uniform integers, Bernoulli(exp(-1)) table
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
    out = noise._uniform_below(m, size, noise._Words(rng, count))
    assert out.dtype == np.uint64 and out.tolist() == expected


def test_uniform_below_array_m_redraws_only_rejected_elements():
    m = np.array([1, 2, 3, 5, 6, 7, 2**40 + 3, 2**63 + 1, 2**64 - 1, 12], dtype=np.uint64)
    words = random_words(400, seed=5)
    expected, pending, stream = [None] * m.size, list(range(m.size)), iter(words.tolist())
    while pending:  # reference: one word per pending element per pass, in element order
        taken = [(i, next(stream)) for i in pending]
        shifts = {i: min(64 - (int(m[i]) - 1).bit_length(), 63) for i in pending}
        pending = []
        for i, w in taken:
            value = w >> shifts[i]
            if value < int(m[i]):
                expected[i] = value
            else:
                pending.append(i)
    rng = WordRandomness(words)
    out = noise._uniform_below(m, m.size, noise._Words(rng, words.size))
    assert out.dtype == np.uint64 and out.tolist() == expected
    with pytest.raises(ValueError, match="shape"):
        noise._uniform_below(m, 3, noise._Words(rng, 8))


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 2**64 - 1), size=st.integers(0, 300), seed=st.integers(0, 2**32))
def test_uniform_below_scalar_m_stays_below_m(m, size, seed):
    out = noise._uniform_below(m, size, noise._Words(InsecureSeededRandomness(seed), 16))
    assert out.dtype == np.uint64 and out.shape == (size,)
    assert all(value < m for value in out.tolist())


@settings(max_examples=200, deadline=None)
@given(ms=st.lists(st.integers(1, 2**64 - 1), max_size=40), seed=st.integers(0, 2**32))
def test_uniform_below_array_m_stays_below_m(ms, seed):
    out = noise._uniform_below(np.array(ms, dtype=np.uint64), len(ms), noise._Words(InsecureSeededRandomness(seed), 16))
    assert out.dtype == np.uint64 and out.shape == (len(ms),)
    assert all(value < m for value, m in zip(out.tolist(), ms))


def multinomial_power_miss(p_true: np.ndarray, p_tested: np.ndarray, n: int) -> float:
    """Probability (noncentral chi-square approximation) that a GOF test of p_tested at ALPHA does
    NOT reject n draws of p_true."""
    df = len(p_true) - 1
    noncentrality = n * np.sum((p_true - p_tested) ** 2 / p_tested)
    return stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality)


@pytest.mark.parametrize("m", [3, 5, 7, 12, 100])
@pytest.mark.parametrize("per_element", [False, True], ids=["scalar-m", "array-m"])
def test_uniform_below_frequencies(m, per_element):
    # Every value below m equally often.  FFP: ALPHA per case (10 cases).
    # Power: the modulo-biased sampler (top bits mod m, no rejection) must be
    # rejected; miss probability < POWER_MISS (computed), 10 more assertions.
    n = 200_000
    words = noise._Words(InsecureSeededRandomness(m + 100 * per_element), 1 << 16)
    bound = np.full(n, m, dtype=np.uint64) if per_element else m
    counts = np.bincount(noise._uniform_below(bound, n, words).astype(np.int64), minlength=m)
    assert counts.size == m
    assert stats.chisquare(counts).pvalue > ALPHA
    span = 1 << (m - 1).bit_length()
    biased = np.bincount(np.arange(span) % m, minlength=m) / span
    assert multinomial_power_miss(np.full(m, 1 / m), biased, n) < POWER_MISS
    assert stats.chisquare(counts, n * biased).pvalue < ALPHA


def test_exp1_table_matches_the_scalar_decoding():
    # Entry r is what _bernoulli_exp1 returns when its draw below 8! is r (2: it needed k >= 9).
    table = noise._EXP1_TABLE
    assert table.dtype == np.uint8 and table.shape == (math.factorial(8),)
    for r in range(math.factorial(8)):
        rng = ScriptedRandomness(randbelow_values=[r, 1])
        result = noise._bernoulli_exp1(rng.randbelow)
        assert table[r] == (2 if len(rng.randbelow_args) == 2 else int(result))
    assert table[0] == 2 and np.count_nonzero(table == 2) == 1


def test_geometric_undecided_coin_continues_algorithm_1_at_k9():
    # A first word of 0 gives the first element the digits (0, 0, 0): its three
    # coins all need k >= 9, which randbelow then decides.  n = 9 > _SCALAR_TAIL
    # so that the first round is vectorized.
    n = 9
    assert n > noise._SCALAR_TAIL
    count = ((n << 46) // noise._EXP1_RADIX_CUBED) + 3 * math.isqrt(n) + 4
    words = random_words(count, seed=3)
    words[0] = 0
    # randbelow(9) = 1 stops at k = 9 (odd): success, three times: v >= 3.
    rng = WordRandomness(words, randbelow_values=[1, 1, 1], seed=4)
    v, large = noise._geometric_exp1(n, noise._Words(rng, count), rng)
    assert rng.randbelow_args[:3] == [9, 9, 9] and v[0] >= 3 and large == {}
    # randbelow(9) = 0 continues, randbelow(10) = 4 stops at k = 10 (even): failure, v = 0.
    rng = WordRandomness(words, randbelow_values=[0, 4, 1, 1], seed=4)
    v, large = noise._geometric_exp1(n, noise._Words(rng, count), rng)
    assert rng.randbelow_args[:4] == [9, 10, 9, 9] and v[0] == 0


def test_vector_sampler_refuses_scales_outside_its_range():
    rng = InsecureSeededRandomness(0)
    for num, den in ((2**50 + 1, 3), (1, 2**63), (0, 1)):
        with pytest.raises(ValueError, match="vector sampler"):
            noise._discrete_laplace_vector(num, den, 5, rng)
    assert noise._discrete_laplace_vector(3, 2, 0, rng).shape == (0,)


# --------------------------------------------------------------------------
# 2. Variance
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


@pytest.mark.parametrize("scale", [1e-3, 0.01, 0.3, 0.5, 1.0, 2.0, 7.5, 100.0, 1e4])
def test_discrete_laplace_variance_closed_form(scale):
    q = math.exp(-1.0 / scale)
    closed = 2 * q / (1 - q) ** 2
    assert discrete_laplace_variance(scale) == pytest.approx(closed, rel=1e-9)
    if scale > 0.01:  # sinh^2 overflows below
        sinh_form = 1 / (2 * math.sinh(1 / (2 * scale)) ** 2)
        assert discrete_laplace_variance(scale) == pytest.approx(sinh_form, rel=1e-9)
    # Direct summation of the pmf.
    xs = np.arange(-int(80 * scale) - 10, int(80 * scale) + 11)
    assert discrete_laplace_variance(scale) == pytest.approx(float(np.sum(xs**2 * dlap_pmf(xs, scale))), rel=1e-9, abs=1e-300)


def test_discrete_laplace_variance_limits():
    for s in (1e3, 1e6, 1e9, 1e15, 1e100):
        # Exact expansion: 2s^2 - 1/6 + O(1/s^2).
        assert discrete_laplace_variance(s) == pytest.approx(2 * s * s, rel=1e-12 + 1 / (10 * s * s))
        assert discrete_laplace_variance(s) == pytest.approx(continuous_laplace_variance(s), rel=1e-6)
    assert discrete_laplace_variance(1e200) == math.inf  # true value exceeds the float range
    assert discrete_laplace_variance(1e-3) == pytest.approx(2 * math.exp(-1000), rel=1e-9)
    assert discrete_laplace_variance(1e-5) == 0.0
    assert discrete_laplace_variance(1e-300) == 0.0
    assert discrete_laplace_variance(Fraction(1, 2)) == discrete_laplace_variance(0.5)
    assert continuous_laplace_variance(3.0) == 18.0
    # Discrete noise never has more variance than the continuous one.
    for s in (0.1, 1.0, 10.0, 1e4):
        assert discrete_laplace_variance(s) < continuous_laplace_variance(s)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "2", None, True])
def test_variance_functions_reject_bad_scale(bad):
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace_variance(bad)
    with pytest.raises(ValueError, match="scale"):
        continuous_laplace_variance(bad)


# --------------------------------------------------------------------------
# 3. bernoulli_thresholds
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
# 4. count_successes
# --------------------------------------------------------------------------


class CountingRandomness(Randomness):
    """Wraps a seeded source and records every call."""

    def __init__(self, seed: int = 0):
        self.inner = InsecureSeededRandomness(seed)
        self.uint32_calls: list[int] = []
        self.randbelow_calls = 0

    def randbelow(self, n: int) -> int:
        self.randbelow_calls += 1
        return self.inner.randbelow(n)

    def uint32(self, size: int) -> np.ndarray:
        self.uint32_calls.append(size)
        return self.inner.uint32(size)


class ScriptedRandomness(Randomness):
    """Returns pre-set values, to check exact semantics."""

    def __init__(self, uint32_values=(), randbelow_values=()):
        self.uint32_values = np.array(uint32_values, dtype=np.uint32)
        self.randbelow_values = list(randbelow_values)
        self.randbelow_args: list[int] = []
        self.uint32_batches: list[np.ndarray] = []  # served, in order, before uint32_values

    def randbelow(self, n: int) -> int:
        self.randbelow_args.append(n)
        value = self.randbelow_values.pop(0)
        assert 0 <= value < n
        return value

    def uint32(self, size: int) -> np.ndarray:
        if self.uint32_batches:
            batch = self.uint32_batches.pop(0)
            assert size == batch.size
            return batch.copy()
        assert size == len(self.uint32_values)
        return self.uint32_values.copy()


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
# 5. InsecureSeededRandomness
# --------------------------------------------------------------------------


def test_seeded_randomness_is_reproducible():
    a = discrete_laplace(Fraction(3), 200, InsecureSeededRandomness(42))
    b = discrete_laplace(Fraction(3), 200, insecure_seeded_randomness(42))
    assert np.array_equal(a, b)
    assert np.array_equal(InsecureSeededRandomness(42).uint32(50), InsecureSeededRandomness(42).uint32(50))
    # Same seed and same requests (pooled draws, refills, several scales): same outputs.
    runs = [pooled_samples(Fraction(2000, 3), 3000, InsecureSeededRandomness(43)) for _ in range(2)]
    assert np.array_equal(*runs)


def test_different_seeds_differ():
    # Deterministic for these seeds (FFP over seeds: P(200 draws of scale 3 agree) < 1e-50).
    a = discrete_laplace(Fraction(3), 200, InsecureSeededRandomness(1))
    b = discrete_laplace(Fraction(3), 200, InsecureSeededRandomness(2))
    assert not np.array_equal(a, b)
    assert not np.array_equal(InsecureSeededRandomness(1).uint32(8), InsecureSeededRandomness(2).uint32(8))


def advance_with_pooled_draws(rng: Randomness) -> None:
    """Advance both streams mid-way and leave pooled draws of two scales behind."""
    discrete_laplace(Fraction(5, 2), 37, rng)
    for _ in range(40):
        noise.discrete_laplace_draw(Fraction(5, 2), rng)
        noise.discrete_laplace_draw(Fraction(2000, 3), rng)
    discrete_laplace(Fraction(2000, 3), 50, rng)
    rng.uint32(13)
    assert rng._noise_pool[(5, 2)][0] and rng._noise_pool[(2000, 3)][0]  # draws are waiting in the pool


def same_continuation(rng: Randomness, clone: Randomness) -> None:
    for scale in (Fraction(5, 2), Fraction(2000, 3)):  # first the pooled draws, then refills
        assert [noise.discrete_laplace_draw(scale, rng) for _ in range(300)] == \
            [noise.discrete_laplace_draw(scale, clone) for _ in range(300)]
        assert np.array_equal(discrete_laplace(scale, 100, rng), discrete_laplace(scale, 100, clone))
    assert np.array_equal(discrete_laplace(Fraction(7, 5), 100, rng), discrete_laplace(Fraction(7, 5), 100, clone))
    assert np.array_equal(rng.uint32(100), clone.uint32(100))
    assert [rng.randbelow(2**200) for _ in range(5)] == [clone.randbelow(2**200) for _ in range(5)]


def test_seeded_randomness_pickle_continues_sequence():
    rng = InsecureSeededRandomness(123)
    advance_with_pooled_draws(rng)
    clone = pickle.loads(pickle.dumps(rng))
    assert clone.is_secure is False
    assert clone._noise_pool == rng._noise_pool
    same_continuation(rng, clone)


def test_seeded_randomness_with_pooled_draws_goes_through_a_checkpoint():
    # The checkpoint loader accepts only the generator's own classes: the pool
    # must be plain containers.
    from transforms.checkpoint import dump_randomness, load_randomness

    rng = InsecureSeededRandomness(321)
    advance_with_pooled_draws(rng)
    clone = load_randomness(dump_randomness(rng))
    assert isinstance(clone, InsecureSeededRandomness)
    same_continuation(rng, clone)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None, True, 2.0])
def test_seeded_randomness_rejects_bad_seed(bad):
    with pytest.raises(ValueError, match="seed"):
        InsecureSeededRandomness(bad)


def test_seeded_randomness_values():
    rng = InsecureSeededRandomness(0)
    big = 2**300 + 17
    assert all(0 <= rng.randbelow(big) < big for _ in range(100))
    assert rng.randbelow(1) == 0
    values = rng.uint32(1000)
    assert values.dtype == np.uint32 and values.shape == (1000,)
    assert InsecureSeededRandomness(np.int64(5)).uint32(3).tolist() == InsecureSeededRandomness(5).uint32(3).tolist()


# --------------------------------------------------------------------------
# 5b. The pool of pre-drawn noise
# --------------------------------------------------------------------------


@pytest.fixture
def draw_sizes(monkeypatch):
    """Sizes of the fresh batches drawn (by the pool's refills or directly)."""
    sizes: list[int] = []
    real = noise._draws
    monkeypatch.setattr(noise, "_draws", lambda num, den, size, rng: sizes.append(size) or real(num, den, size, rng))
    return sizes


def test_pool_first_request_draws_exactly_what_it_needs(draw_sizes):
    rng = InsecureSeededRandomness(0)
    assert discrete_laplace(Fraction(2000, 3), 100, rng).shape == (100,)
    assert type(noise.discrete_laplace_draw(Fraction(7, 2), rng)) is int
    assert draw_sizes == [100, 1]
    assert rng._noise_pool == {(2000, 3): [[], 2], (7, 2): [[], 2]}  # no waste, next refills of 2


def test_pool_refills_double_up_to_the_cap(draw_sizes):
    rng = InsecureSeededRandomness(1)
    scale = Fraction(7, 2)
    longest = 0
    for _ in range(5000):
        assert type(noise.discrete_laplace_draw(scale, rng)) is int
        longest = max(longest, len(rng._noise_pool[(7, 2)][0]))
    cap = noise._POOL_MAX_REFILL
    assert cap == 1024 and draw_sizes == [min(2**i, cap) for i in range(len(draw_sizes))]
    assert draw_sizes[-3:] == [cap] * 3 and longest == cap - 1


def test_pool_sizes_stay_bounded_under_mixed_requests():
    rng = InsecureSeededRandomness(2)
    choice = np.random.Generator(np.random.PCG64(2))
    scales = [Fraction(1, 3), Fraction(5, 2), Fraction(2000, 3)]
    for size in choice.integers(0, 300, 400).tolist() + [5000, 1, 3000, 2]:
        scale = scales[size % 3]
        out = discrete_laplace(scale, size, rng) if size != 1 else [noise.discrete_laplace_draw(scale, rng)]
        assert len(out) == size
        for pooled, refill in rng._noise_pool.values():
            assert len(pooled) <= noise._POOL_MAX_REFILL and refill <= noise._POOL_MAX_REFILL
            assert all(type(value) is int for value in pooled[-3:])


def test_pool_keeps_the_64_most_recently_used_scales():
    rng = InsecureSeededRandomness(3)
    keys = [(i, 1_000_003) for i in range(1, 101)]  # distinct reduced fractions
    for num, den in keys:
        for _ in range(2):  # the second request leaves one pooled draw
            noise.discrete_laplace_draw(Fraction(num, den), rng)
    pool = rng._noise_pool
    assert noise._POOL_MAX_KEYS == 64 and list(pool) == keys[-64:]
    assert all(len(entry[0]) == 1 for entry in pool.values())
    noise.discrete_laplace_draw(Fraction(*keys[36]), rng)  # used again: most recent, keeps its draws
    discrete_laplace(Fraction(1, 7), 3, rng)  # a new scale evicts the least recently used one
    assert list(pool)[-2:] == [keys[36], (1, 7)] and keys[37] not in pool and len(pool) == 64
    assert pool[keys[36]][0] == []  # its pooled draw was used


def test_pool_hands_out_each_draw_once():
    # Every pooled value is returned exactly once: replaying the same seed with
    # one big request of each refill's size gives the same multiset.
    rng = InsecureSeededRandomness(4)
    scale = Fraction(5, 2)
    singles = [noise.discrete_laplace_draw(scale, rng) for _ in range(127)]  # refills 1, 2, ..., 64
    assert rng._noise_pool[(5, 2)][0] == []
    replay = InsecureSeededRandomness(4)
    batches = [noise._draws(5, 2, 2**i, replay) for i in range(7)]
    assert sorted(singles) == sorted(np.concatenate(batches).tolist())


def test_pooled_release_is_not_a_view_of_the_pool():
    # A release must not be a view of a batch whose other values wait in the
    # pool: whoever holds the release could read the noise still to come.
    rng = InsecureSeededRandomness(5)
    scale = Fraction(2000, 3)
    checked = 0
    for size in [1, 1, 1, 3, 2, 5, 40, 33, 100, 7, 1, 300] * 3:
        out = discrete_laplace(scale, size, rng)
        if rng._noise_pool[(2000, 3)][0]:  # draws wait in the pool
            assert out.base is None
            checked += 1
    assert checked > 10


# --------------------------------------------------------------------------
# 6. SecureRandomness and argument validation
# --------------------------------------------------------------------------


def test_secure_randomness_works():
    rng = secure_randomness()
    assert isinstance(rng, SecureRandomness) and rng.is_secure is True
    assert InsecureSeededRandomness.is_secure is False
    big = 2**300 + 17
    assert all(0 <= rng.randbelow(big) < big for _ in range(100))
    assert rng.randbelow(1) == 0
    values = rng.uint32(8)
    assert values.dtype == np.uint32 and values.shape == (8,)
    values[0] = 1  # writable
    # FFP: two independent 256-bit draws coincide with probability 2^-256.
    assert not np.array_equal(rng.uint32(8), rng.uint32(8))
    assert rng.uint32(0).shape == (0,)
    clone = pickle.loads(pickle.dumps(rng))
    assert isinstance(clone, SecureRandomness)
    draws = discrete_laplace(Fraction(2), 100, clone)
    assert draws.dtype == np.int64 and draws.shape == (100,)
    # Pooled draws are never pickled (nor is anything else of the state).
    for _ in range(70):
        noise.discrete_laplace_draw(Fraction(2000, 3), rng)
    assert len(rng._noise_pool[(2000, 3)][0]) > 50
    payload = pickle.dumps(rng)
    assert pickle.loads(payload)._noise_pool == {} and len(payload) < 100


def test_secure_randomness_forked_child_never_repeats_the_parents_stream():
    """A child process must not hand out the keystream, buffer or pooled noise it inherited.

    FFP: 2^-256 for the stream; the 50 pooled draws of scale 2000/3 coincide
    with probability below (max pmf)^50 < 1333^-50.
    """
    rng = secure_randomness()
    rng.randbelow(10)  # key and buffer exist before the fork
    scale = Fraction(2000, 3)
    for _ in range(64):  # refills of 1, 2, ..., 64: 63 draws wait in the pool
        noise.discrete_laplace_draw(scale, rng)
    assert len(rng._noise_pool[(2000, 3)][0]) >= 50

    def report() -> bytes:
        pool_size = sum(len(entry[0]) for entry in rng._noise_pool.values())
        draws = np.array([noise.discrete_laplace_draw(scale, rng) for _ in range(50)], dtype=np.int64)
        return (rng.uint32(8).tobytes() + rng.randbelow(2**256).to_bytes(32, "little")
                + pool_size.to_bytes(8, "little") + draws.tobytes())

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next draws, then leave without running pytest's atexit
        try:
            os.write(write, report())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 4096):
        chunks.append(chunk)
    child = b"".join(chunks)
    os.close(read)
    os.waitpid(pid, 0)
    parent = report()
    assert len(child) == len(parent) == 64 + 8 + 400
    assert child[:64] != parent[:64]
    assert int.from_bytes(child[64:72], "little") == 0  # the child's pool starts empty
    assert int.from_bytes(parent[64:72], "little") >= 50
    assert child[72:] != parent[72:]


def test_secure_randomness_takes_a_fresh_key_after_rekey_bytes(monkeypatch):
    keys = []
    real = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: keys.append(n) or real(n))
    monkeypatch.setattr(SecureRandomness, "REKEY_BYTES", 4096)
    rng = SecureRandomness()
    rng.uint32(1000)   # 4000 bytes: first key (32-byte key + 12-byte nonce)
    rng.uint32(1000)   # would pass 4096: a new key
    assert keys == [32, 12, 32, 12]


def test_secure_randomness_block_counter_starts_at_zero(monkeypatch):
    """The 16 bytes cryptography calls the nonce begin with a 4-byte block counter.

    Random bytes there start the counter anywhere, and a counter that reaches 2**32 raises
    instead of wrapping: all-ones bytes from the OS must not leave one block before a crash.
    """
    monkeypatch.setattr(os, "urandom", lambda n: b"\xff" * n)
    rng = SecureRandomness()
    words = rng.uint32(3 * SecureRandomness._BUFFER_BYTES // 4)  # far more than one 64-byte block
    assert words.size == 3 * SecureRandomness._BUFFER_BYTES // 4
    reference = Cipher(algorithms.ChaCha20(b"\xff" * 32, bytes(4) + b"\xff" * 12), mode=None).encryptor()
    assert words[:16].tobytes() == reference.update(bytes(64))  # counter 0, key and nonce from the OS


@pytest.mark.parametrize(
    "bad", [0, -1, Fraction(-1, 2), Fraction(0), math.nan, 2.0, "1", None, True, 2**54]
)
def test_discrete_laplace_rejects_bad_scale(bad):
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace(bad, 3, InsecureSeededRandomness(0))


@pytest.mark.parametrize("bad", [-1, 1.5, None])
def test_discrete_laplace_rejects_bad_size(bad):
    with pytest.raises(ValueError, match="size"):
        discrete_laplace(Fraction(1), bad, InsecureSeededRandomness(0))


def test_discrete_laplace_accepts_ints_and_empty_size():
    assert discrete_laplace(3, 5, InsecureSeededRandomness(0)).shape == (5,)
    assert discrete_laplace(np.int64(3), 5, InsecureSeededRandomness(0)).shape == (5,)
    empty = discrete_laplace(Fraction(1), 0, InsecureSeededRandomness(0))
    assert empty.dtype == np.int64 and empty.shape == (0,)
    assert discrete_laplace(2**53, 3, InsecureSeededRandomness(0)).dtype == np.int64


@pytest.mark.parametrize(
    "scale", [2**53, Fraction(2**53 * 3 - 1, 3), Fraction(10**40 + 1, 10**30), Fraction(2**50 + 1, 3), Fraction(3, 2**63)],
    ids=str,
)
def test_scales_past_the_vector_range_use_the_scalar_sampler(scale):
    # Numerators above 2**50 (huge scales, bignum fractions) or denominators of
    # 2**63 and more: python ints, no uint32 words, no pool.
    rng = CountingRandomness(1)
    out = discrete_laplace(scale, 40, rng)
    assert out.dtype == np.int64 and out.shape == (40,)
    draw = noise.discrete_laplace_draw(scale, rng)
    assert type(draw) is int
    assert rng.uint32_calls == [] and rng.randbelow_calls > 40
    assert not getattr(rng, "_noise_pool", None)
    if scale >= 10**9:  # FFP: P(|X| < 10**6) < 2e6 / 10**9 per draw, so < 1e-80 for 40 draws
        assert np.any(np.abs(out) > 10**6)


def test_the_vector_range_ends_at_num_2_pow_50():
    rng = CountingRandomness(2)
    out = discrete_laplace(Fraction(2**50, 3), 40, rng)
    assert out.dtype == np.int64 and out.shape == (40,) and rng.uint32_calls
    assert (2**50, 3) in rng._noise_pool


def test_bernoulli_exp1_radix_decoding_is_exact():
    # One draw below 8! encodes the coins Bernoulli(1/k), k = 2..8.  Count
    # the draws that return True without the fallback: exact rational check.
    radix = math.factorial(8)
    trues = fallbacks = 0
    for r in range(radix):
        rng = ScriptedRandomness(randbelow_values=[r, 1])  # fallback: randbelow(9) = 1 -> k = 9, odd
        trues += noise._bernoulli_exp1(rng.randbelow)
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
    assert noise._bernoulli_exp1(rng.randbelow) is False
    assert rng.randbelow_args == [math.factorial(8), 9, 10]


def test_noise_module_does_not_import_apache_beam():
    tree = ast.parse(Path(noise.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert "apache_beam" not in imported
    assert imported <= {"__future__", "abc", "cryptography", "fractions", "math", "numbers", "numpy", "os", "random", "secrets", "weakref"}


# --------------------------------------------------------------------------
# 7. grid_laplace
# --------------------------------------------------------------------------


def test_grid_laplace_output_lies_on_grid():
    values = np.array([0.1, 1 / 3, -2.7182818, 0.0, 123456.789, 1e12, -1e-12])
    rng = InsecureSeededRandomness(5)
    for _ in range(20):
        out = grid_laplace(values, Fraction(1), rng)
        scaled = out * 2.0**30  # exact: multiplying by a power of two
        assert np.all(scaled == np.round(scaled))
    coarse = grid_laplace(values, Fraction(3, 7), rng, granularity_exponent=-10)
    assert np.all(coarse * 2.0**10 == np.round(coarse * 2.0**10))
    fine_grid = grid_laplace(values, Fraction(3, 7), rng, granularity_exponent=4)
    assert np.all(fine_grid / 16.0 == np.round(fine_grid / 16.0))


def test_grid_laplace_tiny_scale_only_rounds_to_grid():
    # scale / g = 2^-10: P(noise != 0) = 2q/(1+q), q = e^{-1024}: FFP < 1e-400.
    values = np.array([[0.1, 1 / 3], [-2.5, 7.0]])
    out = grid_laplace(values, Fraction(1, 2**40), InsecureSeededRandomness(0))
    assert out.shape == values.shape and out.dtype == np.float64
    assert np.array_equal(out, np.round(values * 2.0**30) / 2.0**30)


@pytest.mark.slow
def test_grid_laplace_variance():
    # FFP: ALPHA = 1e-9 (normal approximation, n = 20000).  Power: as in
    # test_discrete_laplace_empirical_variance, the gap to a wrong scale's
    # variance exceeds 2x the tolerances (design check): FFP far below ALPHA.
    n = 20_000
    scale = Fraction(3, 2)
    g = 2.0**-30
    center = 0.37  # not on the grid: output - round(center) is pure noise
    out = grid_laplace(np.full(n, center), scale, InsecureSeededRandomness(17))
    noise_values = out - round(center / g) * g
    estimate = float(np.mean(noise_values**2))
    discrete_scale = float(scale) / g

    def expected(s):
        return g * g * discrete_laplace_variance(s / g)

    def tolerance(s):
        return g * g * variance_tolerance(s / g, n)

    assert expected(float(scale)) == pytest.approx(continuous_laplace_variance(float(scale)), rel=1e-12)
    assert tolerance(float(scale)) < 0.12 * expected(float(scale)) and discrete_scale > 1e9
    assert abs(estimate - expected(float(scale))) < tolerance(float(scale))
    for factor in (1.3, 0.7):
        wrong = factor * float(scale)
        assert abs(expected(wrong) - expected(float(scale))) > 2 * (tolerance(wrong) + tolerance(float(scale)))
        assert abs(estimate - expected(wrong)) > tolerance(wrong)


def test_grid_laplace_rejects_bad_arguments():
    rng = InsecureSeededRandomness(0)
    with pytest.raises(ValueError, match="values"):
        grid_laplace(np.array([0.0, math.nan]), Fraction(1), rng)
    with pytest.raises(ValueError, match="values"):
        grid_laplace(np.array([math.inf]), Fraction(1), rng)
    for bad in (0, -1, math.nan, 1.0):
        with pytest.raises(ValueError, match="scale"):
            grid_laplace(np.array([0.0]), bad, rng)
    with pytest.raises(ValueError, match="granularity_exponent"):
        grid_laplace(np.array([0.0]), Fraction(1), rng, granularity_exponent=0.5)
