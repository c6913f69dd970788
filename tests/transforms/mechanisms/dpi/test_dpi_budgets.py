"""DPI's budget series, learning rate and RBA (spec §2.3-§2.5; vectors TV2, TV3, TV5, TV6; traps T-1 to T-5).

The series' lifetime bound is checked exactly: prefix sums of the integer slot units against
``epsilon_units``, and the whole infinite series in closed form ``2C(pi²/6 - Li2(m~))`` at 60 decimal
digits (independent of the module's float ``li2``).

Statistical tests use the secure generator (fresh draws every run).  Each has false-failure probability
``ALPHA = 1e-7`` and a power check: the same test applied to a deliberately wrong law must reject, with
a miss probability (noncentral chi-square) asserted below ``POWER_MISS = 1e-7``.  There are 3 statistical
assertions (two goodness-of-fit tests and one realised power rejection), so their joint false-failure
probability is below 3e-7.  The TV6 comparisons are loose (about 10 standard
deviations), their false-failure probability is negligible.
"""

from __future__ import annotations

import itertools
import math
import warnings
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.dpi import budgets
from transforms.mechanisms.dpi.budgets import (
    BudgetSeries,
    ExponentialRBA,
    RangesRBA,
    SequentialRBA,
    fixed_power_up,
    learning_rate,
    li2,
    li2_inverse,
    split_units,
)
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness

ALPHA = 1e-7
POWER_MISS = 1e-7
PI_60 = Decimal("3.141592653589793238462643383279502884197169399375105820974944")


def _li2_decimal(x: Decimal) -> Decimal:
    """Li2 at 60 digits: the power series up to 1/2, Euler's reflection above."""
    with localcontext() as context:
        context.prec = 60
        if x > Decimal("0.5"):
            if x == 1:
                return PI_60 * PI_60 / 6
            return PI_60 * PI_60 / 6 - x.ln() * (1 - x).ln() - _li2_decimal(1 - x)
        total, power, j = Decimal(0), x, 1
        while power > Decimal("1e-70"):
            total += power / (j * j)
            j += 1
            power *= x
        return total


def _series_total(series: BudgetSeries) -> Decimal:
    """The exact value of ``sum_i 2C(1 - m~^i)/i²`` (the bound of every prefix sum), at 60 digits."""
    with localcontext() as context:
        context.prec = 60
        m = Decimal(series.m_fixed) / Decimal(2**128)
        c = Decimal(series.c.numerator) / Decimal(series.c.denominator)
        return 2 * c * (PI_60 * PI_60 / 6 - _li2_decimal(m))


def _series(*args) -> BudgetSeries:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # infeasible corners warn; tested separately
        return BudgetSeries(*args)


# ---- Li2 (T-1) ----------------------------------------------------------------------------------------

def test_li2_known_values_and_agrees_with_scipy_spence_reflected():
    assert li2(0.5) == pytest.approx(0.5822405265, abs=1e-10)
    assert li2(1.0) == pytest.approx(math.pi**2 / 6, rel=1e-15)
    assert li2(0.0) == 0.0
    for x in np.linspace(0, 1, 101):
        assert li2(float(x)) == pytest.approx(float(special.spence(1 - x)), rel=1e-13, abs=1e-15)
        assert li2(float(x)) == pytest.approx(float(_li2_decimal(Decimal(float(x)))), rel=1e-14, abs=1e-16)


@given(st.floats(0, math.pi**2 / 6))
def test_li2_inverse_round_trip(v):
    assert li2(li2_inverse(v)) == pytest.approx(v, abs=1e-14)


# ---- The series (TV3, T-2, T-3) -----------------------------------------------------------------------

TV3 = [  # (eps, mu, zeta), m², per_pdf(1..5)
    ((2, 0.1, 0.2), 0.9986917381, (.130826, .065370, .043552, .032642, .026097)),
    ((2, 0.5, 1.0), 0.9349295822, (.260282, .125907, .081237, .058990, .045708)),
    ((0.1, 0.05, 0.1), 0.9999900113, (.003995, .001998, .001332, .000999, .000799)),
    ((10, 0.3, 0.5), 0.8881420658, (1.491439, .704012, .443610, .314834, .238612)),
    ((10, 0.5, 1.0), 0.3567500443, (2.573, .872729, .424265, .245951, .159075)),
]


@pytest.mark.parametrize("params, m2, per_pdf", TV3)
def test_tv3_series_values_and_total(params, m2, per_pdf):
    series = BudgetSeries(*params)
    assert series.feasible
    assert series.m == pytest.approx(m2, abs=2e-10)
    got = [series.slot_units(i) / (2 * UNITS_PER_EPSILON) for i in range(1, 6)]
    assert got == pytest.approx(per_pdf, rel=5e-4, abs=1e-6)
    total = _series_total(series)  # the whole infinite series
    eps = Decimal(series.epsilon_units) / UNITS_PER_EPSILON
    assert total <= eps
    assert total >= eps * (1 - Decimal("1e-6"))  # and it spends (almost) all of it: the factor 2 of I-4 is there
    assert series.prefix_units(10_000) <= series.epsilon_units


def test_tv3_infeasible_epsilon_warns_and_uses_m_zero():
    with pytest.warns(UserWarning, match="I-7"):
        series = BudgetSeries(20, 0.5, 1.0)
    assert not series.feasible and series.m_fixed == 0
    for i in (1, 2, 3, 7, 10**6):  # exactly floor(2·C/i²) with C = 4
        assert series.slot_units(i) == 8 * UNITS_PER_EPSILON // (i * i)
    assert _series_total(series) == pytest.approx(Decimal(4) * PI_60**2 / 3, rel=Decimal("1e-50"))
    assert float(_series_total(series)) == pytest.approx(13.1595, abs=1e-4)  # 2 × 6.5797 (TV3: per PDF)


def test_tv3_sequential_slot_totals_and_learning_rates():
    series = BudgetSeries(2, 0.5, 1.0)
    expected = {1: 0.5205633423, 2: 0.2518133526, 3: 0.162474928, 10: 0.03917943584, 100: 7.990428e-4, 10**4: 8.0e-8}
    for i, total in expected.items():
        assert series.slot_units(i) / UNITS_PER_EPSILON == pytest.approx(total, rel=1e-6, abs=1.01e-12)  # floors: 1 unit
    rba = SequentialRBA(series)
    picks = [rba.next() for _ in range(3)]
    assert [i for i, _ in picks] == [1, 2, 3]
    for (i, units), alpha, eta in zip(picks, (0.0162676, 0.00786917, 0.00507734), (0.00813308, 0.0039345, 0.00253865)):
        _, a, e = learning_rate(units / 2 / UNITS_PER_EPSILON, 0.5)
        assert a == pytest.approx(alpha, rel=1e-5) and e == pytest.approx(eta, rel=1e-4)
    assert rba.spent_units == sum(u for _, u in picks)


@settings(max_examples=30, deadline=None)
@given(eps=st.floats(0.01, 20), mu=st.floats(0.01, 1), zeta=st.floats(0.05, 2), n=st.integers(1, 300))
def test_prefix_sums_never_exceed_epsilon(eps, mu, zeta, n):
    series = _series(eps, mu, zeta)
    units = [series.slot_units(i) for i in range(1, n + 1)]
    assert all(a >= b >= 0 for a, b in itertools.pairwise(units))  # non-increasing
    assert sum(units) <= series.epsilon_units
    # "forever": the infinite series of (unfloored) terms, which bounds every prefix, is at most eps
    eps_exact = Decimal(series.epsilon_units) / UNITS_PER_EPSILON
    total = _series_total(series)
    assert total <= eps_exact
    if series.feasible:
        assert total >= eps_exact * (1 - Decimal("1e-4"))


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.01, 20), mu=st.floats(0.01, 1), zeta=st.floats(0.05, 2), i=st.integers(1, 150))
def test_slot_units_are_the_floor_of_the_exact_term_or_one_below(eps, mu, zeta, i):
    series = _series(eps, mu, zeta)
    m = Fraction(series.m_fixed, 2**128)
    exact = 2 * series.c * (1 - m**i) / (i * i) * UNITS_PER_EPSILON
    assert math.floor(exact) - 1 <= series.slot_units(i) <= exact


@settings(max_examples=60, deadline=None)
@given(base=st.integers(0, 2**128), exponent=st.integers(0, 60))
def test_fixed_point_power_is_an_upper_bound(base, exponent):
    exact = Fraction(base, 2**128) ** exponent
    bound = Fraction(fixed_power_up(base, exponent), 2**128)
    assert exact <= bound <= exact + Fraction(2 * exponent + 1, 2**128)


@pytest.mark.parametrize("kwargs, message", [
    ((0, 0.5, 1), "epsilon"), ((2, 0, 1), "mu"), ((2, 1.5, 1), "mu"), ((2, 0.5, 0), "zeta"),
    ((2, 0.5, -1), "zeta"), ((2, 0.5, 1, 0), "delta"), ((float("nan"), 0.5, 1), "epsilon"),
])
def test_bad_series_parameters_fail_with_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BudgetSeries(*kwargs)


def test_split_units_never_exceeds_the_slot():
    for units in (0, 1, 2, 7, 10**12 + 1):
        a, q = split_units(units)
        assert a == q and a + q <= units and units - (a + q) <= 1


# ---- Learning rate (TV2) ------------------------------------------------------------------------------

@pytest.mark.parametrize("e, mu, L, alpha, eta", [
    (0.01, 0.1, 2.5e-4, 1.25e-4, 6.25e-5), (0.5, 0.1, 0.0125, 0.00625, 0.00312496),
    (1.0, 0.5, 0.125, 0.0625, 0.0312094), (1e-8, 0.1, 2.5e-10, 1.25e-10, 6.25e-11),
])
def test_tv2_learning_rate(e, mu, L, alpha, eta):
    got = learning_rate(e, mu)
    assert got == pytest.approx((L, alpha, eta), rel=1e-5)
    assert (2 * 2 / mu) * math.log((1 + 2 * got[2]) / (1 - 2 * got[2])) == pytest.approx(e, rel=1e-9)


# ---- Exponential RBA (Algorithm 3; TV5, TV6, T-5) -----------------------------------------------------

def test_tv5_nearest_unused_with_injected_targets():
    """TV5 at the resolution of budget units (1e-12): near 1e-8 consecutive budgets differ by less than a
    unit, so the floors tie and the order can differ from the float vector; the set and the values agree."""
    rba = ExponentialRBA(BudgetSeries(2, 0.5, 1.0))
    first = [rba.next_for(1e-8 * UNITS_PER_EPSILON) for _ in range(3)]
    assert sorted(i for i, _ in first) == [28283, 28284, 28285]
    tv5 = {28284: 1.00001918e-8, 28285: 9.99948471e-9, 28283: 1.00008990e-8}
    for i, units in first:
        assert abs(units - tv5[i] * UNITS_PER_EPSILON) <= 1
    assert rba.next_for(0.3 * UNITS_PER_EPSILON) == (2, 251813352592)  # TV5: 0.2518133526
    assert rba.next_for(0.3 * UNITS_PER_EPSILON)[0] == 3
    pick, units = rba.next_for(5e-9 * UNITS_PER_EPSILON)
    assert abs(pick - 40000) <= 1 and abs(units - 5000) <= 1  # TV5: 40000, 5.0e-9
    for target in (0.0, 0.4, -1.0):  # below half a unit: the nearest budgets are the zero ones
        pick, units = rba.next_for(target)
        assert units == 0 and (rba.series.slot_units(pick - 1) > 0 or pick - 1 in rba._free)
    assert rba.spent_units <= rba.series.epsilon_units


class _ScriptedCoins:
    """``randbelow`` answers from a script (the only coin Algorithm 3 uses)."""

    def __init__(self, answers):
        self.answers = list(answers)

    def randbelow(self, n):
        return self.answers.pop(0)


def test_a_target_below_one_unit_is_redrawn_not_the_end_of_the_series():
    """Regression: a uniform near 1 gives a target below one unit (about once in 10,000 slots at rate 1e8);
    its pick floors to 0 units, which the mechanisms read as an exhausted epoch with nearly all of epsilon
    left.  ``next`` draws a new target instead; only a run of zero picks returns 0."""
    top, half = (1 << 53) - 1, 1 << 52
    rba = ExponentialRBA(BudgetSeries(2, 0.1, 0.2), rate=1e8, rng=_ScriptedCoins([top, top, half]))
    pick, units = rba.next()
    assert units > 0 and units == rba.series.slot_units(pick) and rba.spent_units == units
    assert abs(units - math.log(2) / 1e8 * UNITS_PER_EPSILON) / units < 1e-3  # the third target's pick
    hopeless = ExponentialRBA(BudgetSeries(2, 0.1, 0.2), rate=1e8,
                              rng=_ScriptedCoins([top] * budgets.ZERO_PICK_RETRIES))
    assert hopeless.next()[1] == 0


@settings(max_examples=25, deadline=None)
@given(targets=st.lists(st.floats(1e-4, 0.6), min_size=1, max_size=40))
def test_exponential_rba_picks_the_nearest_unused_index_by_value(targets):
    """Against a brute-force scan (the series is convex: a symmetric walk would be wrong, T-5)."""
    series = BudgetSeries(2, 0.5, 1.0)
    rba = ExponentialRBA(series)
    limit = 3000
    values = {i: series.slot_units(i) for i in range(1, limit + 1)}
    used = set()
    for target in targets:
        s = target * UNITS_PER_EPSILON
        pick, units = rba.next_for(s)
        free = [i for i in values if i not in used]
        best = min(abs(values[i] - s) for i in free)
        assert pick <= limit and pick not in used and units == values[pick]
        assert abs(units - s) == best
        assert pick == max(i for i in free if abs(values[i] - s) == best)  # ties: the smaller budget
        used.add(pick)


def test_tv6_exponential_rba_spends_about_1e_minus_5_whatever_epsilon():
    for eps in (2, 10):
        rba = ExponentialRBA(BudgetSeries(eps, 0.5, 1.0), rate=1e8, rng=secure_randomness())
        picks = [rba.next() for _ in range(1000)]
        assert len({i for i, _ in picks}) == 1000  # without replacement
        spent = rba.spent_units / UNITS_PER_EPSILON
        assert 0.8e-5 < spent < 1.2e-5  # sum of 1000 Exp(1e8) is 1e-5 ± 3e-7
        assert 5e-9 < np.median([u for _, u in picks]) / UNITS_PER_EPSILON < 1e-8  # TV6: 7.43e-9


def _exp_bins(rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Ten equiprobable bins of Exp(rate) (edges in units) and their probabilities."""
    quantiles = np.linspace(0, 1, 11)[1:-1]
    return -np.log1p(-quantiles) / rate * UNITS_PER_EPSILON, np.full(10, 0.1)


def test_exponential_rba_target_follows_exp_rate_with_power():
    n, rate = 20_000, 1e8
    rba = ExponentialRBA(BudgetSeries(2, 0.5, 1.0), rate=rate, rng=secure_randomness())
    edges, probabilities = _exp_bins(rate)
    observed = np.bincount(np.searchsorted(edges, [rba.draw_target() for _ in range(n)]), minlength=10)
    assert stats.chisquare(observed, probabilities * n).pvalue > ALPHA
    # power: draws from Exp(1.1·rate) fall into these bins with these probabilities
    wrong = np.diff(np.concatenate(([0.0], 1 - np.exp(-1.1 * edges / UNITS_PER_EPSILON * rate), [1.0])))
    noncentrality = n * float(((wrong - probabilities) ** 2 / probabilities).sum())
    assert stats.ncx2.cdf(stats.chi2.isf(ALPHA, 9), 9, noncentrality) < POWER_MISS
    wrong_rba = ExponentialRBA(rba.series, rate=1.1 * rate, rng=secure_randomness())
    observed = np.bincount(np.searchsorted(edges, [wrong_rba.draw_target() for _ in range(n)]), minlength=10)
    assert stats.chisquare(observed, probabilities * n).pvalue <= ALPHA


# ---- Ranges RBA (Algorithm 4; TV6) --------------------------------------------------------------------

def test_ranges_rba_chooses_queues_uniformly_with_power():
    n = 6000
    rba = RangesRBA(BudgetSeries(2, 0.5, 1.0), rng=secure_randomness())
    starts = np.array([a for a, _ in rba.ranges])
    queues = np.searchsorted(starts, [rba.next()[0] for _ in range(n)], side="right") - 1
    observed = np.bincount(queues, minlength=3)
    assert stats.chisquare(observed, np.full(3, n / 3)).pvalue > ALPHA
    wrong = np.array([0.4, 0.3, 0.3])  # power against a chooser biased by 0.067 towards one queue
    noncentrality = n * float(((wrong - 1 / 3) ** 2 / (1 / 3)).sum())
    assert stats.ncx2.cdf(stats.chi2.isf(ALPHA, 2), 2, noncentrality) < POWER_MISS


@pytest.mark.parametrize("params, at_500, at_1000", [((2, 0.5, 1.0), 1.954, 1.977), ((10, 0.5, 1.0), 9.954, 9.977)])
def test_tv6_ranges_rba_front_loads(params, at_500, at_1000):
    rba = RangesRBA(BudgetSeries(*params), rng=insecure_seeded_randomness(6))
    spent = []
    for t in range(1, 1001):
        rba.next()
        if t in (500, 1000):
            spent.append(rba.spent_units / UNITS_PER_EPSILON)
    assert spent == pytest.approx([at_500, at_1000], abs=0.01)
    assert rba.spent_units <= rba.series.epsilon_units


def test_ranges_rba_is_fifo_and_returns_zero_once_exhausted():
    series = BudgetSeries(2, 0.5, 1.0)
    rba = RangesRBA(series, ranges=((1, 4), (10, 12)), rng=secure_randomness())
    picks = [rba.next() for _ in range(5)]
    indices = [i for i, _ in picks]
    assert sorted(indices) == [1, 2, 3, 10, 11]
    assert [i for i in indices if i < 10] == [1, 2, 3] and [i for i in indices if i >= 10] == [10, 11]
    assert all(units == series.slot_units(i) for i, units in picks)
    assert [rba.next() for _ in range(3)] == [(0, 0)] * 3  # exhausted: no budget, no endless loop
    assert rba.spent_units == sum(u for _, u in picks) <= series.epsilon_units


def test_rba_bad_parameters_and_secure_default():
    series = BudgetSeries(2, 0.5, 1.0)
    with pytest.raises(ValueError, match="disjoint"):
        RangesRBA(series, ranges=((1, 10), (5, 20)))
    with pytest.raises(ValueError, match="start"):
        RangesRBA(series, ranges=((0, 10),))
    with pytest.raises(ValueError, match="rate"):
        ExponentialRBA(series, rate=0)
    assert ExponentialRBA(series).rng.is_secure and RangesRBA(series).rng.is_secure


@given(st.lists(st.tuples(st.integers(0, 60), st.sampled_from([1, -1])), max_size=200))
def test_the_run_record_finds_the_nearest_free_index_as_a_set_would(steps):
    """Algorithm 3's record of used indices (maximal runs) answers like the plain set it replaces, and its state
    round-trips."""
    record, used = budgets._FreeIndices(), set()
    for i, step in steps:
        expected = i
        while expected in used:
            expected += step
        assert record.nearest(i, step) == max(expected, 0)
        if expected > 0:
            record.take(expected)
            used.add(expected)
    assert len(record) == len(used) and all((i in record) == (i in used) for i in range(0, 70))
    assert (np.diff(record.runs(), axis=0)[:, 0] > 1).all() if len(record.starts) > 1 else True
    again = budgets._FreeIndices.from_runs(record.runs())
    assert (again.starts, again.ends) == (record.starts, record.ends)
