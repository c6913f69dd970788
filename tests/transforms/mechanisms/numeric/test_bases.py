"""Other base mechanisms (Laplace, SR, PM; spec §3.8.1): each one's output law, its exact privacy and the charge
a ledger derives from its evidence, and the clients running on them (charges, the exact window check, identity
with a per-user reference written from the spec's pseudo-code).

False-failure budget: each statistical assertion is a two-sided z-test at ``ALPHA = 1e-7`` (|z| <= 5.33, the
normal approximation of a mean of 200,000 i.i.d. reports with finite fourth moments; the Laplace variance test's
skewed squares make its own below 1e-6); there are 12 of them, and 9 power assertions each missing with
probability below 1e-7 (joint false-failure probability below 5e-6).  Each has a power check: the miss probability of the same test against
the named wrong law (the biased raw PM, a Laplace at twice the budget, SR at another input) is computed from the
normal approximation and asserted below ``POWER_MISS = 1e-7``, and the test is applied to it.  The generator is
the secure one, so the draws are fresh every run.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from tests.transforms.mechanisms.ldp.ldp_grid import exp_taylor
from tests.transforms.mechanisms.numeric.numeric_reference import draws_for_slot, grid_streams, sw_report
from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_units
from transforms.mechanisms.evidence import CERTAIN, LocalReport, Statistic
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.numeric.bases import LaplaceBase, PiecewiseBase, StochasticRounding, randomizer
from transforms.mechanisms.numeric.perturbation import PerturbationParams, perturb_queries, perturb_streams, \
    worst_window_units

ALPHA = POWER_MISS = 1e-7
Z = stats.norm.isf(ALPHA / 2)
DRAWS = 200_000
UNITS = to_units("1")


def z_score(sample: np.ndarray, mean: float, variance: float) -> float:
    return float((sample.mean() - mean) / math.sqrt(variance / sample.size))


def miss_probability(shift: float, variance: float, n: int) -> float:
    """Probability that the two-sided test at ``Z`` accepts when the true mean is ``shift`` away."""
    se = math.sqrt(variance / n)
    return float(stats.norm.cdf(Z - abs(shift) / se) - stats.norm.cdf(-Z - abs(shift) / se))


@pytest.mark.parametrize("index", [0, 9830, 52429])  # v = 0, 0.15, 0.8 on the 16-bit grid
def test_laplace_is_unbiased_with_the_discrete_laplace_variance(index):
    base = LaplaceBase(UNITS)
    v = index / base.steps
    reports = base.perturb(np.full(DRAWS, v), secure_randomness())
    assert np.array_equal(reports * base.steps, np.rint(reports * base.steps))  # (i + Z)/m: exact dyadic
    variance = base.variance(index)
    assert base.mean(index) == Fraction(index, base.steps)
    assert abs(variance - 2 / 1.0 ** 2) < 1e-6  # 2 s²/m² with s = m/ε: Lap(2/ε) in t is Lap(1/ε) in [0, 1] units
    assert abs(z_score(reports, v, variance)) <= Z
    # variance: the centred squares' mean against Var, its spread from the 4th moment of Laplace (24 b^4 for a
    # continuous Laplace of scale b: the discrete one's is within 1e-9 relative at this scale).  The squares are
    # skewed (skewness ~6.6), which moves a 5.33-sigma tail of their mean by ~0.07 sigma at 200,000 draws: this
    # assertion's false-failure probability is below 1e-6, not 1e-7.
    squares = (reports - v) ** 2
    fourth = 24 * (base.scale / base.steps) ** 4
    assert abs(z_score(squares, variance, fourth - variance ** 2)) <= Z
    # power: a Laplace at twice the budget (a quarter of the variance) fails the variance test
    wrong = LaplaceBase(2 * UNITS).perturb(np.full(DRAWS, v), secure_randomness())
    assert miss_probability(variance * 0.75, fourth - variance ** 2, DRAWS) < POWER_MISS
    assert abs(z_score((wrong - v) ** 2, variance, fourth - variance ** 2)) > Z


@pytest.mark.parametrize("index", [0, 52429])
def test_pm_reports_are_unbiased_and_the_raw_cells_are_not(index):
    base = PiecewiseBase(UNITS)
    v = index / base.steps
    assert base.mean(index) == Fraction(index, base.steps)  # exact, with the exact gain
    variance = float(base.variance(index))
    reports = base.perturb(np.full(DRAWS, v), secure_randomness())
    assert abs(z_score(reports, v, variance)) <= Z
    # power: the band law's raw cell midpoints (what PM reports before the de-biasing) are biased toward 1/2
    raw = 0.5 + (reports - 0.5) * float(base.mechanism.gain)
    raw_mean = float(base.mechanism.mean(index))
    assert miss_probability(raw_mean - v, float(base.mechanism.variance(index)), DRAWS) < POWER_MISS
    assert abs(z_score(raw, v, float(base.mechanism.variance(index)))) > Z
    # continuous PM's variance (spec §2.4) in [0, 1] units, up to the grid's rounding
    s = math.exp(0.5)
    t = 2 * v - 1
    assert variance == pytest.approx((t * t / (s - 1) + (s + 3) / (3 * (s - 1) ** 2)) / 4, rel=1e-3)


@pytest.mark.parametrize("index", [0, 32768, 65536])
def test_sr_reports_ones_with_probability_half_plus_a_t(index):
    base = StochasticRounding(UNITS)
    v = index / base.steps
    p = float(base.mean(index))
    assert base.mean(index) == Fraction(1, 2) + base.a * (2 * Fraction(index, base.steps) - 1) / 2
    assert float(base.a) == pytest.approx(math.tanh(0.5), abs=1e-12)
    reports = base.perturb(np.full(DRAWS, v), secure_randomness())
    assert set(np.unique(reports)) <= {0.0, 1.0}
    assert abs(z_score(reports, p, p * (1 - p))) <= Z
    # power: the same test for the input at the other end of the interval
    other = float(base.mean(base.steps - index)) if index != 32768 else float(base.mean(0))
    assert miss_probability(other - p, p * (1 - p), DRAWS) < POWER_MISS
    assert abs(z_score(reports, other, other * (1 - other))) > Z


@pytest.mark.parametrize("epsilon", ["0.05", "0.025", "0.1", "0.3", "1", "0.0454545"])
def test_each_base_is_exactly_private_and_the_ledger_derives_its_charge(epsilon):
    units = to_units(epsilon)
    upper = exp_taylor(units)[0]  # a rational lower bound of e^eps
    sr = StochasticRounding(units)
    keep, other = sr.keep, sr.other
    assert Fraction(keep, other) <= upper
    assert exp_taylor(sr.realised_units)[0] >= Fraction(keep, other) > exp_taylor(sr.realised_units - 1)[1]
    laplace = LaplaceBase(units)
    assert Fraction(laplace.steps, laplace.scale) * UNITS_PER_EPSILON <= units  # e^{m/s} <= e^eps
    assert laplace.realised_units == math.ceil(Fraction(laplace.steps * UNITS_PER_EPSILON, laplace.scale))
    pm = PiecewiseBase(units)
    assert Fraction(pm.mechanism.keep, pm.mechanism.other) <= upper
    # what a ledger derives from the evidence of such a report is the charge the base states
    everyone = np.full(1, CERTAIN, np.uint64)
    assert LocalReport("sr", sr.keep, sr.other, everyone).least_units()[0] == sr.realised_units
    assert LocalReport("pm", pm.keep, pm.other, everyone).least_units()[0] == pm.realised_units
    assert Statistic("laplace", Fraction(laplace.scale), laplace.steps, everyone).least_units()[0] \
        == laplace.realised_units
    for base in (sr, laplace, pm):
        assert 0 < base.realised_units <= units
        assert base.realised_units >= units * (1 - 1.6e-5)  # the rounding costs < ε/m relative (Laplace's s)


@pytest.mark.parametrize("base", ["laplace", "sr", "pm"])
@pytest.mark.parametrize("method", ["sw", "ipp", "app"])
def test_clients_on_each_base_charge_its_realised_budget_within_every_window(base, method):
    params = PerturbationParams(1.0, 5, method, base=base)
    assert params.divisor == {"sw": 5, "ipp": 6, "app": 10}[method]
    x = grid_streams(4, 40, seed=5)
    result = perturb_streams(params, x, secure_randomness())
    assert result.w_event_private
    assert (result.charges == params.client.sw.realised_units).all()
    assert 0 < params.client.sw.realised_units <= params.report_units
    assert worst_window_units(result.charges, result.first_dependency, 5).max() <= params.epsilon_units
    # the reference protocol (per-query runs at eps/w) is private too, and the paper's memory on a stream is not
    reference = PerturbationParams(1.0, 5, method, base=base, reset=5, budget="paper",
                                   **({"unbounded": True} if method == "app" else {}))
    assert perturb_queries(reference, x[:, :5], secure_randomness()).w_event_private
    if method != "sw":
        paper = PerturbationParams(1.0, 5, method, base=base, budget="paper", not_w_event_private=True)
        run = perturb_streams(paper, x, secure_randomness())
        assert worst_window_units(run.charges, run.first_dependency, 5).max() > params.epsilon_units


def test_the_default_base_is_the_square_wave_and_capp_refuses_the_others():
    x = grid_streams(3, 12, seed=6)
    default = perturb_streams(PerturbationParams(1.0, 4, "app"), x, insecure_seeded_randomness(3)).reports
    explicit = perturb_streams(PerturbationParams(1.0, 4, "app", base="sw"), x, insecure_seeded_randomness(3))
    assert np.array_equal(default, explicit.reports)
    assert type(randomizer("sw", UNITS)).__name__ == "SquareWave"
    with pytest.raises(ValueError, match="CAPP's bounds are derived for the square wave"):
        PerturbationParams(1.0, 4, "capp", base="pm")
    with pytest.raises(ValueError, match="base must be one of"):
        PerturbationParams(1.0, 4, "app", base="gauss")


def test_ipp_feeds_the_base_reports_back_as_deviations():
    """IPP on SR: the second input is x_2 + (x_1 - x'_1), clipped to [0, 1], so a 1 reported for x_1 = 0 pushes
    x_2 = 0.5 to 0 (SR then reports 1 with probability (1 - a)/2), a 0 pushes it to 1 (probability (1 + a)/2)."""
    params = PerturbationParams(1.0, 4, "ipp", base="sr")
    sr = params.client.sw
    x = np.tile([0.0, 0.5], (DRAWS, 1))
    reports = perturb_streams(params, x, secure_randomness()).reports
    after_one = reports[reports[:, 0] == 1, 1]
    p = float(sr.mean(0))
    assert abs(z_score(after_one, p, p * (1 - p))) <= Z
    # power: without the feedback the second report would be 1 with probability 1/2
    assert miss_probability(0.5 - p, p * (1 - p), after_one.size) < POWER_MISS
    assert abs(z_score(after_one, 0.5, 0.25)) > Z


def _slow(x, rng, report_of, method: str, memory: int) -> np.ndarray:
    """IPP / APP (``memory`` deviations) / direct per user and slot, from the spec's pseudo-code (§3.2-3.3)."""
    users, slots = x.shape
    remembered: list[list[float]] = [[] for _ in range(users)]
    out = np.empty_like(x)
    for t in range(slots):
        draws = draws_for_slot(rng, users)
        for u in range(users):
            kept = {"sw": [], "ipp": remembered[u][-1:]}.get(method, remembered[u][-memory:])
            out[u, t] = report_of(min(max(x[u, t] + sum(kept), 0.0), 1.0), draws[u])
            remembered[u].append(x[u, t] - out[u, t])  # original minus released (T9)
    return out


@pytest.mark.parametrize("method", ["sw", "ipp", "app"])
def test_vectorised_clients_on_sr_and_pm_equal_the_per_user_reference(method):
    x = grid_streams(5, 17, seed=8)
    sr = PerturbationParams(1.0, 4, method, base="sr")
    m, gain = sr.client.sw.steps, sr.client.sw.gain

    def sr_report(z, draw):
        return float(draw < (1 << 63) + gain * (int(np.rint(z * m)) - m // 2))

    fast = perturb_streams(sr, x, insecure_seeded_randomness(2)).reports
    assert np.array_equal(fast, _slow(x, insecure_seeded_randomness(2), sr_report, method, 4))
    pm = PerturbationParams(1.0, 4, method, base="pm")
    base = pm.client.sw

    def pm_report(z, draw):
        return 0.5 + (sw_report(base.mechanism, z, draw) - 0.5) * base.inverse_gain

    fast = perturb_streams(pm, x, insecure_seeded_randomness(3)).reports
    # PM's reports are not dyadic: the running memory sum and the reference's sum may differ in the last bits
    np.testing.assert_allclose(fast, _slow(x, insecure_seeded_randomness(3), pm_report, method, 4), rtol=0,
                               atol=1e-9)
