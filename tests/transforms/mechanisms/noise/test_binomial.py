"""Tests for transforms.mechanisms.noise.binomial: exact Binomial and equal Multinomial draws.

False-failure budget (see ``noise_helpers``): every goodness-of-fit (GOF) or homogeneity assertion here has
false-failure probability ``ALPHA = 1e-9`` when the sampler is exact, and there are fewer than 60 of them
(joint FFP < 6e-8); the few other randomized assertions state their FFP (each below 1e-9).  Power: for
deliberately wrong samplers (p off by 1%, the law shifted by one so the mode is off by one, the j = 0 halving
of the rejection sampler forgotten, a multinomial of unequal thirds) the noncentral chi-square probability
that the same test misses them is computed and asserted below ``POWER_MISS = 1e-9``, and the test is run on
the wrong sampler's draws (p off, the shift, the multinomial) and must reject.  The reference laws are
scipy's binomial pmf and cdf (floats are fine for a reference).
"""

from __future__ import annotations

import decimal
import importlib
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from noise_helpers import ALPHA, POWER_MISS, CountingRandomness, ScriptedRandomness
from transforms.mechanisms.ldp.oracles import oracle_for
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import (
    binomial,
    count_successes,
    insecure_seeded_randomness,
    multinomial_equal,
    secure_randomness,
)

binomial_module = importlib.import_module("transforms.mechanisms.noise.binomial")  # the package exports the function
DRAWS = 20_000
OUE = oracle_for(to_units("1"), 100, "oue")  # q = Q/2**32
GRR = oracle_for(to_units("1"), 5, "grr")  # p = P/2**64


def _bins(n: int, p: float, draws: int, target: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Right edges and probabilities of bins (-inf, e1], (e1, e2], ..., (ek, n] of Binomial(n, p): quantile
    edges (every value its own bin when the support is small), merged until each expects >= 20 draws."""
    if n <= 400:
        edges = np.arange(n)
    else:
        edges = np.unique(stats.binom.ppf(np.linspace(0, 1, target + 1)[1:-1], n, p)).astype(np.int64)
    cdf = np.append(stats.binom.cdf(edges, n, p), 1.0)
    probs = np.diff(cdf, prepend=0.0)
    keep, acc = [], 0.0
    for k, mass in enumerate(probs):  # merge left to right until a bin expects >= 20
        acc += mass
        if acc * draws >= 20 and k < edges.size:
            keep.append(k)
            acc = 0.0
    if acc * draws < 20 and keep:
        keep.pop()  # the right tail joins the last kept bin
    merged_edges = edges[keep]
    merged = np.diff(np.append(stats.binom.cdf(merged_edges, n, p), 1.0), prepend=0.0)
    return merged_edges, merged


def _gof_pvalue(samples: np.ndarray, n: int, p: float) -> float:
    edges, probs = _bins(n, p, samples.size)
    observed = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=probs.size)
    return stats.chisquare(observed, samples.size * probs / probs.sum()).pvalue


def _power_miss(n: int, p: float, wrong_p: float, shift: int, draws: int) -> float:
    """Probability that the GOF against Binomial(n, p) accepts ``draws`` draws of Binomial(n, wrong_p) + shift."""
    edges, probs = _bins(n, p, draws)
    wrong = np.diff(np.append(stats.binom.cdf(edges - shift, n, wrong_p), 1.0), prepend=0.0)
    df = probs.size - 1
    noncentrality = draws * float(((wrong - probs) ** 2 / probs).sum())
    return float(stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality))


# (trials, numerator, denominator): every path of the sampler
CASES = [
    (37, 1, 2),  # explicit coins
    (5000, 1, 2),  # rejection around the mode
    (5001, 1, 2),  # odd
    (3000, 7, 10),  # a non-dyadic rational, rejection (and 1000 explicit coins below)
    (1500, 1, 3),  # a mode side just above DIRECT_MIN
    (100_000, 1, 3),  # 1/j
    (1_000_000, 1, 10_000),  # mode 100: bit-level splits (each a Binomial(T, 1/2) by rejection), then coins
    (1_000_000, OUE.other, OUE.denominator),  # OUE's q = Q/2**32
    (20_000, GRR.keep, GRR.denominator),  # GRR's p = P/2**64 (denominator past uint64)
    (2**40, 1, 2),  # huge n
    (2**40 + 12345, 2**64 - 3, 2**64 - 1),  # p within 2^-63 of 1: about 64 levels
]


@pytest.mark.parametrize("trials, numerator, denominator", CASES)
def test_draws_fit_the_exact_binomial_law(trials, numerator, denominator):
    rng = secure_randomness()
    p = numerator / denominator
    draws = DRAWS if p < 1 - 1e-12 else 2000  # ~64 levels of splits: fewer draws
    samples = binomial(np.full(draws, trials), numerator, denominator, rng)  # one vectorised call
    assert samples.dtype == np.int64 and samples.shape == (draws,)
    assert samples.min() >= 0 and samples.max() <= trials
    if p < 1 - 1e-12:
        assert _gof_pvalue(samples, trials, p) > ALPHA
    else:  # the float reference cannot tell p from 1: failures are Binomial(n, 1-p) mean 2.4e-3 in all
        assert (trials - samples).sum() <= 3  # P(Poisson(0.0024) > 3) < 2e-12


@pytest.mark.parametrize("trials, numerator, denominator", [(5000, 1, 2), (100_000, 1, 3), (3000, 7, 10)])
def test_a_probability_one_percent_off_is_detected(trials, numerator, denominator):
    """Power: draws at p·1.01 fail the GOF against p, and the miss probability is negligible."""
    rng = secure_randomness()
    p = numerator / denominator
    assert _power_miss(trials, p, 1.01 * p, 0, DRAWS) < POWER_MISS
    wrong = binomial(np.full(DRAWS, trials), 101 * numerator, 100 * denominator, rng)
    assert _gof_pvalue(wrong, trials, p) <= ALPHA


@pytest.mark.slow
def test_a_mode_off_by_one_is_detected():
    """Exact per-value bins just above the explicit-coin range (the rejection sampler's smallest h): the
    right law passes, the law shifted by one (the mode off by one) fails."""
    rng = secure_randomness()
    trials, draws = binomial_module.SMALL_TRIALS + 76, 200_000
    samples = binomial(np.full(draws, trials), 1, 2, rng)
    edges, probs = _exact_bins(trials, draws)
    assert _exact_pvalue(samples, edges, probs) > ALPHA
    assert _power_miss(trials, 0.5, 0.5, 1, draws) < POWER_MISS
    assert _exact_pvalue(samples + 1, edges, probs) <= ALPHA


def _exact_bins(trials: int, draws: int, p: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    values = np.arange(trials + 1)
    pmf = stats.binom.pmf(values, trials, p)
    inner = values[pmf * draws >= 20]
    edges = np.arange(inner[0], inner[-1])  # one bin per value between the pooled tails
    return edges, np.diff(np.append(stats.binom.cdf(edges, trials, p), 1.0), prepend=0.0)


def _exact_pvalue(samples: np.ndarray, edges: np.ndarray, probs: np.ndarray) -> float:
    observed = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=probs.size)
    return stats.chisquare(observed, samples.size * probs / probs.sum()).pvalue


@pytest.mark.slow
@pytest.mark.parametrize("trials, numerator, denominator", [(1024, 1, 2), (2000, 7, 10)])
def test_the_exact_fallback_alone_samples_the_right_law(monkeypatch, trials, numerator, denominator):
    """With a float bracket that never decides (lo = 0, hi = 1), every proposal goes through the exact
    rational test: it alone must give the right law.  Power: forgetting the halving of j = 0 (which both
    signs propose) would double the mode's mass, and that law must fail the same test."""

    def undecided(cell, *_):
        return np.zeros(cell.size), np.ones(cell.size)

    monkeypatch.setattr(binomial_module, "_acceptance_bracket", undecided)
    monkeypatch.setattr(binomial_module, "CANDIDATES", 1)  # no proposal tested for nothing
    monkeypatch.setattr(binomial_module, "_CANDIDATES_MANY", 1)
    rng = secure_randomness()
    p = numerator / denominator
    samples = binomial(np.full(DRAWS, trials), numerator, denominator, rng)
    edges, probs = _exact_bins(trials, DRAWS, p)
    assert _exact_pvalue(samples, edges, probs) > ALPHA
    pmf = stats.binom.pmf(np.arange(trials + 1), trials, p)
    pmf[(trials + 1) * numerator // denominator] *= 2
    wrong = np.diff(np.append(np.cumsum(pmf / pmf.sum())[edges], 1.0), prepend=0.0)
    noncentrality = DRAWS * float(((wrong - probs) ** 2 / probs).sum())
    df = probs.size - 1
    assert stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality) < POWER_MISS


def test_the_exact_decision_is_deterministic_where_the_value_is_clear():
    """``_accept_exactly`` on known cases: A(0) = e^-Phi/2, so U < 2^-53 accepts and U >= 1 - 2^-53 rejects;
    a far proposal (A < e^-50) with U's first 53 bits 0 is rejected after drawing more bits (FFP < e^-50)."""
    rng = secure_randomness()
    accept = binomial_module._accept_exactly  # (c, y, j, i, Phi, v, a, b, rng)
    assert accept(512, 512, 0, 0, 0.5, 0, 1, 2, rng) is True
    assert accept(512, 512, 0, 0, 0.5, 2**53 - 1, 1, 2, rng) is False
    assert accept(10**12, 2 * 10**12, 3, 0, 0.25, 0, 1, 3, rng) is True  # three huge factors, exactly
    assert accept(10**12, 2 * 10**12, -3, 0, 0.25, 0, 1, 3, rng) is True
    assert accept(512, 512, 400, 12, 0.5, 0, 1, 2, rng) is False
    assert accept(600, 5000, -400, 12, 0.5, 0, 1, 10, rng) is False


@pytest.mark.parametrize("trials, numerator, denominator", [
    (1100, 1, 2), (3001, 7, 10), (20_000, OUE.other, OUE.denominator), (100_000, 1, 3), (5000, GRR.keep, 2**64)])
def test_the_float_bracket_contains_the_exact_acceptance_and_phi_bounds_it(trials, numerator, denominator):
    """Deterministic: at proposals across the whole float-decided range ``|j| <= min(c, y)/2`` the float bracket
    holds the exact ``A(j) = f(j)·2^i·e^-Phi`` (halved at 0; exact rationals, 60-digit decimal), ``A <= 1``, and
    the bracket is narrower than 1e-9; and ``Phi`` bounds ``ln f(j) + floor(|j|/w)·ln 2`` over the support."""
    n = np.array([trials])
    a, b_minus_1 = np.array([numerator], np.uint64), np.array([denominator - 1], np.uint64)
    c, delta = binomial_module._modes(n, a, b_minus_1)
    cells = binomial_module._Cells.of(n, c, delta, a, b_minus_1)
    c0, y0, w, phi = int(c[0]), int(cells.y[0]), int(cells.w[0]), float(cells.phi[0])
    assert min(c0, y0) >= binomial_module.DIRECT_MIN and c0 == (trials + 1) * numerator // denominator
    half = min(c0, y0) // 2
    js = np.unique(np.concatenate([np.arange(-80, 81), np.linspace(-half, half, 41).astype(np.int64)]))
    i = np.abs(js) // w
    lo, hi = binomial_module._acceptance_bracket(np.zeros(js.size, np.int64), np.full(js.size, c0),
                                                  np.full(js.size, y0), js, i, cells)
    p_over_q = Fraction(numerator, denominator - numerator)
    with decimal.localcontext() as context:
        context.prec = 60
        e_minus_phi = (-decimal.Decimal(phi)).exp()
        for j, i_j, low, high in zip(js.tolist(), i.tolist(), lo.tolist(), hi.tolist()):
            k = abs(j)
            if j >= 0:
                f = Fraction(math.perm(y0, k), math.perm(c0 + k, k)) * p_over_q**k
            else:
                f = Fraction(math.perm(c0, k), math.perm(y0 + k, k)) / p_over_q**k
            exact = decimal.Decimal(f.numerator) / decimal.Decimal(f.denominator) * 2**i_j * e_minus_phi
            exact = exact / 2 if j == 0 else exact
            assert decimal.Decimal(low) <= exact <= decimal.Decimal(high) and exact <= 1
            assert high - low <= 1e-9  # the exact fallback runs with probability about this width
    # Phi over the whole support [-c, y], with ln f(j) summed from its exact ratios (float error < 1e-9).
    up = np.cumsum([math.log(Fraction(y0 - k + 1, c0 + k) * p_over_q) for k in range(1, y0 + 1)])
    down = np.cumsum([math.log(Fraction(c0 - k, y0 + k + 1) / p_over_q) for k in range(c0)])
    support = np.concatenate([down[::-1], [0.0], up])
    steps = np.abs(np.arange(-c0, y0 + 1)) // w
    assert (support + steps * math.log(2)).max() <= phi + 1e-9


@pytest.mark.parametrize("numerator, denominator", [(3, 7), (OUE.other, OUE.denominator)])
def test_small_trials_match_explicit_coins(numerator, denominator):
    """Below the rejection range the law is that of counting explicit coins: each trial count fits the
    exact pmf, and for a 2**32 denominator the draws are homogeneous with ``count_successes``' coins."""
    rng = secure_randomness()
    p = numerator / denominator
    for trials in (1, 7, 64, 65, 300):
        samples = binomial(np.full(DRAWS, trials), numerator, denominator, rng)
        assert _gof_pvalue(samples, trials, p) > ALPHA
        if denominator == 2**32:
            coins = count_successes(np.full(DRAWS, trials), np.full(DRAWS, numerator, np.uint64), rng)
            table = np.array([np.bincount(samples, minlength=trials + 1), np.bincount(coins, minlength=trials + 1)])
            table = table[:, table.sum(axis=0) >= 20]
            assert stats.chi2_contingency(table).pvalue > ALPHA


def test_an_explicit_coin_compares_32_bits_and_breaks_ties_exactly():
    """p = 1/3: a coin succeeds iff its uint32 is below floor(2^32/3); on equality the rest of U is compared with
    the rest of p, (2^32 mod 3)/3 = 1/3, by ``randbelow(3) < 1``."""
    high = 2**32 // 3
    rng = ScriptedRandomness(uint32_values=[high, high, high - 1, high + 1, 0], randbelow_values=[0, 2])
    assert binomial(5, 1, 3, rng) == 3  # tie won, tie lost, below, above, below
    assert rng.randbelow_args == [3, 3]
    half = ScriptedRandomness(uint32_values=[2**31, 2**31 - 1])  # p = 1/2: a tie is a failure, no more bits
    assert binomial(2, 1, 2, half) == 1 and half.randbelow_args == []


def test_edge_cases_and_shapes():
    class NoDraws(CountingRandomness):
        def uint32(self, size):
            raise AssertionError("a certain outcome must not draw")

        def randbelow(self, n):
            raise AssertionError("a certain outcome must not draw")

    quiet = NoDraws()
    assert binomial(0, 1, 2, quiet) == 0
    assert np.array_equal(binomial([5, 0, 2**62], [0, 3, 7], [9, 3, 7], quiet), [0, 0, 2**62])  # p = 0, p = 1
    assert binomial(10, 2**64, 2**64, quiet) == 10
    rng = insecure_seeded_randomness(11)
    grid = binomial(np.arange(12).reshape(3, 4) * 1000, np.array([1, 1, 2, 3]), np.array([2, 3, 5, 4]), rng)
    assert grid.shape == (3, 4) and grid.dtype == np.int64
    assert (grid >= 0).all() and (grid <= np.arange(12).reshape(3, 4) * 1000).all()
    assert binomial(7, 1, 2, rng).shape == ()
    # 2**63 - 1 trials at 1/2: within 12 standard deviations (2**30.5 each) of the mean (FFP < 1e-30).
    top = binomial(2**63 - 1, 1, 2, rng)
    assert abs(int(top) - (2**63 - 1) / 2) < 12 * 2**30.5
    huge = binomial(np.full(50, 2**40), 1, 3, rng)  # sd ~ 2**19.5: each within 12 sd (FFP < 1e-30 each)
    assert (np.abs(huge - 2**40 / 3) < 12 * 2**19.5).all()


def test_multinomial_equal_law_and_shapes():
    rng = secure_randomness()
    counts = multinomial_equal(np.full(DRAWS, 300), 5, rng)
    assert counts.shape == (DRAWS, 5) and (counts.sum(axis=1) == 300).all()
    for k in range(5):  # every cell is Binomial(300, 1/5)
        assert _gof_pvalue(counts[:, k], 300, 0.2) > ALPHA
    # The joint law of Multinomial(4; 1/3, 1/3, 1/3) over its 15 outcomes (p = 1/3: non-dyadic splits).
    joint = multinomial_equal(np.full(DRAWS, 4), 3, rng)
    outcomes = [(a, b, 4 - a - b) for a in range(5) for b in range(5 - a)]
    pmf = np.array([stats.multinomial.pmf(o, 4, [1 / 3] * 3) for o in outcomes])
    index = {o: k for k, o in enumerate(outcomes)}
    observed = np.bincount([index[tuple(row)] for row in joint.tolist()], minlength=len(outcomes))
    assert stats.chisquare(observed, DRAWS * pmf).pvalue > ALPHA
    wrong_pmf = np.array([stats.multinomial.pmf(o, 4, [0.36, 0.32, 0.32]) for o in outcomes])
    noncentrality = DRAWS * float(((wrong_pmf - pmf) ** 2 / pmf).sum())
    assert stats.ncx2.cdf(stats.chi2.isf(ALPHA, 14), 14, noncentrality) < POWER_MISS
    wrong = multinomial_equal(np.full(DRAWS, 4), 2, rng)  # a wrong sampler: thirds built from halves
    wrong = np.column_stack([wrong[:, 0], binomial(wrong[:, 1], 1, 2, rng), wrong[:, 1]])
    wrong[:, 2] -= wrong[:, 1]
    observed = np.bincount([index[tuple(row)] for row in wrong.tolist()], minlength=len(outcomes))
    assert stats.chisquare(observed, DRAWS * pmf).pvalue <= ALPHA  # (1/2, 1/4, 1/4): noncentrality ~ 2000
    # Shapes, one cell, large trials.
    assert np.array_equal(multinomial_equal([[3, 4]], 1, rng), [[[3], [4]]])
    big = multinomial_equal(np.array([10**12, 0]), 7, rng)
    assert big.shape == (2, 7) and big[0].sum() == 10**12 and not big[1].any()
    assert (np.abs(big[0] - 10**12 / 7) < 12 * 10**6).all()  # sd ~ 3.5e5: FFP < 1e-30


def test_seeded_draws_replay_and_use_only_the_given_generator():
    trials = np.array([0, 5, 2000, 10**6, 2**40])
    numerators = np.array([1, 1, 7, OUE.other, 1])
    denominators = np.array([2, 3, 10, OUE.denominator, 2])
    np_state, py_state = np.random.get_state(), random.getstate()
    first = binomial(trials, numerators, denominators, insecure_seeded_randomness(5))
    assert np.array_equal(first, binomial(trials, numerators, denominators, insecure_seeded_randomness(5)))
    assert np.array_equal(multinomial_equal([100, 10**6], 6, insecure_seeded_randomness(2)),
                          multinomial_equal([100, 10**6], 6, insecure_seeded_randomness(2)))
    counting = CountingRandomness(5)
    binomial(trials, numerators, denominators, counting)
    assert counting.uint32_calls  # the draws came from the generator passed
    assert np.random.get_state()[1].tolist() == np_state[1].tolist() and random.getstate() == py_state
    # Default: the secure generator, fresh each call (two equal draws of 20 cells of 10**6: FFP < 1e-60).
    assert not np.array_equal(binomial(np.full(20, 10**6), 1, 2), binomial(np.full(20, 10**6), 1, 2))
    assert multinomial_equal(10, 3).sum() == 10


@pytest.mark.parametrize("call, message", [
    (lambda: binomial(-1, 1, 2), "trials must lie in"),
    (lambda: binomial(2**63, 1, 2), "trials must lie in"),
    (lambda: binomial(1.5, 1, 2), "trials must be integers"),
    (lambda: binomial(3, 0.5, 1), "numerators must be integers"),
    (lambda: binomial(3, 3, 2), "must not exceed their denominators"),
    (lambda: binomial(3, 1, 0), "denominators must lie in"),
    (lambda: binomial(3, 1, 2**64 + 1), "denominators must lie in"),
    (lambda: binomial(3, [True], 2), "numerators must be integers"),
    (lambda: binomial([1, 2], [1, 1, 1], 2), "must broadcast"),
    (lambda: multinomial_equal(5, 0), "cells must be a positive int"),
    (lambda: multinomial_equal(5, 2.0), "cells must be a positive int"),
    (lambda: multinomial_equal(-5, 2), "trials must lie in"),
])
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()
