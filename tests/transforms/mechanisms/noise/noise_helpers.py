"""Shared helpers of the tests of transforms.mechanisms.noise (imported as ``noise_helpers``).

False-failure budget
--------------------
Every statistical assertion states its false-failure probability (FFP):
the chance that a *correct* implementation fails it.  Tests driven by
``InsecureSeededRandomness`` use fixed seeds, so they are deterministic in CI;
their FFP is the probability over the choice of seed.  Tests driven by
``SecureRandomness`` are fresh every run.  Each GOF/variance/binomial test
uses ``ALPHA = 1e-9``; each power check ("must reject a scale 30% off") has a
miss probability that is computed in the test and asserted to be below
``POWER_MISS = 1e-9``.  There are fewer than 300 such assertions in the noise
tests (this directory; most of them the GOF, power and variance checks of 12
scales x 3 sampling paths in ``test_samplers.py``), so their joint FFP is
below 3e-7 (< 1e-6 as required); the few other randomized assertions state
FFPs below 1e-40.  Power checks against the wrong scale are what make these
tests able to fail at all.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy import stats

from transforms.mechanisms.noise import InsecureSeededRandomness, Randomness, discrete_laplace, discrete_laplace_draw


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


def integer_mass(lo: float, hi: float, scale: float) -> float:
    """P(lo <= X <= hi) for integers (or infinities) lo <= hi."""
    if lo >= 0:
        if hi == math.inf:
            return _tail(lo, scale)
        return _tail(lo, scale) * -math.expm1(-(hi + 1 - lo) / scale)
    if hi <= 0:
        return integer_mass(-hi, -lo, scale)
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
    probs = [integer_mass(bounds[i] + 1, bounds[i + 1], scale) for i in range(len(bounds) - 1)]
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
    true_probs = np.array([integer_mass(bounds[i] + 1, bounds[i + 1], true_scale) for i in range(len(probs))])
    df = len(probs) - 1
    noncentrality = n * np.sum((true_probs - probs) ** 2 / probs)
    return stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality)



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
            parts.append(np.array([discrete_laplace_draw(scale, rng)], dtype=np.int64))
        else:
            parts.append(discrete_laplace(scale, size, rng))
        have += size
        if i % 5 == 0:
            discrete_laplace(other, 1 + i % 3, rng)
    return np.concatenate(parts)


class CountingRandomness(Randomness):
    """Wraps a seeded source and records every call."""

    def __init__(self, seed: int = 0):
        self.inner = InsecureSeededRandomness(seed)
        self.uint32_calls: list[int] = []
        self.randbelow_calls = 0
        self._noise_pool = {}  # pools as the project's generators do

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
