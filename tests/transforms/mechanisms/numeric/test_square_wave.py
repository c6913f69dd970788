"""Square Wave: spec §5.1/§5.3 vectors, exact privacy of the discretised law on the evaluation grid, the
device module's identical integers, the sampler's law, the moments and the de-biased mean.

False-failure budget: each statistical assertion has false-failure probability (FFP) ``ALPHA = 1e-7`` when
the implementation is right; there are 13 of them (joint FFP below 1.3e-6).  Each has a power check: the same
test applied to draws at a wrong epsilon (or a wrong estimator) must reject, and its miss probability is
computed (noncentral chi-square or normal) and asserted below ``POWER_MISS = 1e-7``.  The generator is the
secure one, so the draws are fresh every run.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from device import wevent_client as client
from tests.transforms.mechanisms.ldp.ldp_grid import exp_taylor
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.domain import Interval
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.numeric import (
    SquareWave,
    deviation_mean,
    deviation_variance_at_one,
    moments_at_one,
    sw_mean,
    sw_moment,
    sw_parameters,
    sw_variance,
)
from transforms.mechanisms.numeric.square_wave import DENOMINATOR

ALPHA = POWER_MISS = 1e-7
HEADLINE = ("0.5", "1", "1.5", "2", "2.5", "3")
EVALUATION_UNITS = sorted({to_units(e) for e in HEADLINE} | {to_units(e) // w for e in HEADLINE
                                                              for w in (10, 20, 40)})

# spec §5.1: eps, b, p, q, g, E[SW(0)], E[SW(1)]
SPEC_5_1 = [
    (0.01, 0.496678, 0.504183, 0.499167, 0.004983, 0.497508, 0.502492),
    (0.05, 0.483608, 0.521255, 0.495834, 0.024588, 0.487706, 0.512294),
    (0.1, 0.467752, 0.543377, 0.491668, 0.048374, 0.475813, 0.524187),
    (0.3, 0.409338, 0.641233, 0.475037, 0.136061, 0.431970, 0.568030),
    (0.5, 0.358155, 0.755948, 0.458506, 0.213061, 0.393469, 0.606531),
    (1.0, 0.256083, 1.136305, 0.418023, 0.367879, 0.316060, 0.683940),
    (2.0, 0.129337, 2.538010, 0.343482, 0.567668, 0.216166, 0.783834),
]
# spec §5.3: eps, E[D_1], E[D_1^2] exact, Var(D_1) = sigma^2 of SW(1), mu4
SPEC_5_3 = [
    (0.05, 0.487706, 0.560335, 0.322478, 0.187283),
    (0.1, 0.475813, 0.538515, 0.312116, 0.175715),
    (0.5, 0.393469, 0.399020, 0.244202, 0.112882),
    (1.0, 0.316060, 0.286525, 0.186631, 0.075298),
]


@pytest.mark.parametrize("eps, b, p, q, g, mean0, mean1", SPEC_5_1)
def test_continuous_parameters_and_means_match_spec_5_1(eps, b, p, q, g, mean0, mean1):
    params = sw_parameters(eps)
    assert params == pytest.approx((b, p, q), abs=1e-6)
    assert 2 * params[0] * (params[1] - params[2]) == pytest.approx(g, abs=1e-6)
    assert (sw_mean(0, *params), sw_mean(1, *params)) == pytest.approx((mean0, mean1), abs=1e-6)
    assert 2 * params[0] * params[1] + params[2] == pytest.approx(1, abs=1e-12)  # the mass
    assert params[1] / params[2] == pytest.approx(math.exp(eps), rel=1e-12)


def test_spec_5_1_extras_and_the_stable_b():
    b, p, q = sw_parameters(0.05)
    assert 2 * b * p == pytest.approx(0.504166, abs=1e-6)
    assert [sw_variance(v, b, p, q) for v in (0, 1, 0.5)] == pytest.approx([0.322478, 0.322478, 0.316482], abs=1e-6)
    assert sw_parameters(1e-6)[0] == pytest.approx(0.4999997, abs=1e-7)  # the naive form gives 0.50008 (§2.1)
    assert sw_parameters(2e-4)[0] == pytest.approx(0.5 - 2e-4 / 3, abs=1e-8)  # expm1 form meets the series
    with pytest.raises(ValueError, match="positive finite"):
        sw_parameters(float("nan"))


@pytest.mark.parametrize("eps, deviation, second, variance, mu4", SPEC_5_3)
def test_moments_match_spec_5_3(eps, deviation, second, variance, mu4):
    b, p, q = sw_parameters(eps)
    assert deviation_mean(1, b, p, q) == pytest.approx(deviation, abs=1e-6)
    assert sw_moment(2, 1, b, p, q, centre=1) == pytest.approx(second, abs=1e-6)  # E[D_1^2]
    assert deviation_variance_at_one(b, p, q) == pytest.approx(variance, abs=1e-6)
    assert moments_at_one(b, p, q) == pytest.approx((1 - deviation, variance, mu4), abs=1e-6)
    for x in (0, 0.3):  # E[D_x] = x - E[SW(x)], the printed formula
        assert deviation_mean(x, b, p, q) == pytest.approx(x - sw_mean(x, b, p, q), abs=1e-12)


def test_moment_formulas_are_exact_for_rational_parameters():
    """With Fractions the closed forms agree exactly (Var(D_1) = the integration formula)."""
    sw = SquareWave.create(to_units("0.05"))
    b, p, q = sw.b, sw.p, sw.q
    assert 2 * b * p + q == 1
    assert deviation_variance_at_one(b, p, q) == sw_variance(1, b, p, q)
    assert sw_mean(Fraction(3, 7), b, p, q) == Fraction(1, 2) + sw.gain * (Fraction(3, 7) - Fraction(1, 2))
    assert deviation_mean(Fraction(1, 3), b, p, q) == Fraction(1, 3) - sw_mean(Fraction(1, 3), b, p, q)


@pytest.mark.parametrize("eps", [row[0] for row in SPEC_5_1])
def test_discretised_parameters_are_the_continuous_ones_up_to_the_grid(eps):
    sw = SquareWave.create(to_units(str(eps)))
    b, p, q = sw_parameters(eps)
    assert abs(sw.b - Fraction(b)) <= Fraction(1, 2 * sw.steps)
    assert float(sw.p) == pytest.approx(p, abs=2e-4) and float(sw.q) == pytest.approx(q, abs=2e-4)
    assert float(sw.gain) == pytest.approx(2 * b * (p - q), abs=2e-4)
    assert 0 <= to_units(str(eps)) - sw.realised_units <= 1000  # the residue step of Q costs < 1e-9 epsilon


def _draw_for(sw: SquareWave, u1: float, u2: float) -> int:
    """The 64-bit draw that the spec's two uniforms stand for: band cell floor(2B·u2) if u1 < 2bp, else low
    cell floor(m·u2) (each in the middle of its range of draws)."""
    if u1 < 2 * sw.b * sw.p:
        return math.floor(2 * sw.half_band * u2) * sw.keep + sw.keep // 2
    return 2 * sw.half_band * sw.keep + math.floor(sw.steps * u2) * sw.other + sw.other // 2


@pytest.mark.parametrize("v, u1, u2, expected", [
    (0.3, 0.2, 0.75, 0.541804), (0.3, 0.9, 0.2, -0.283608), (0.3, 0.9, 0.6, 1.083608),
    (1.2, 0.1, 0.0, 0.516392), (-0.5, 0.99, 0.999, 1.482608)])
def test_sampler_vectors_of_spec_5_1(v, u1, u2, expected):
    """The cell map reproduces the §2.2 sampler within the grid: input, b and u2 each move by <= 1/(2m)."""
    sw = SquareWave.create(to_units("0.05"))
    index = sw.grid_index([v], clip=True)
    cell = sw.cells_from_draws(index, np.array([_draw_for(sw, u1, u2)], dtype=np.uint64))
    assert sw.value_of(cell)[0] == pytest.approx(expected, abs=2.5 / sw.steps + 1e-6)
    device = client.SquareWave(sw.epsilon_units)
    assert device.cell_value(device.cell(device.grid_index(v, clip=True), _draw_for(sw, u1, u2))) \
        == sw.value_of(cell)[0]


def _check_exact_privacy(sw: SquareWave) -> None:
    assert 2 * sw.half_band * sw.keep + sw.steps * sw.other == DENOMINATOR
    assert sw.other < sw.keep
    lower, _ = exp_taylor(sw.epsilon_units)
    assert sw.ratio <= lower, sw.epsilon_units
    # realised units u: e^(u/10^12) >= P/Q > e^((u-1)/10^12), and never above the nominal units
    assert exp_taylor(sw.realised_units)[0] >= sw.ratio > exp_taylor(sw.realised_units - 1)[1]
    assert sw.realised_units <= sw.epsilon_units


def test_realised_ratio_never_exceeds_e_eps_on_the_evaluation_grid():
    """Exact comparisons against a rational lower bound of e^eps (a Taylor partial sum), every grid budget."""
    for units in EVALUATION_UNITS:
        _check_exact_privacy(SquareWave.create(units))
    for units, bits in [(to_units("0.05"), 4), (to_units("0.05"), 24), (to_units("20"), 4), (to_units("20"), 24),
                        (1_000_000, 4), (1_000_000, 16), (1, 16)]:  # coarse and fine grids, tiny and largest eps
        _check_exact_privacy(SquareWave.create(units, bits))


def test_full_law_has_largest_ratio_p_over_q():
    """On a small grid, every input's law sums to one and the largest ratio over all outputs and input pairs
    is P/Q (so the structural argument above covers every cell)."""
    sw = SquareWave.create(to_units("1"), grid_bits=5)
    laws = [[int(w) for w in sw.law(i)] for i in range(sw.steps + 1)]
    assert all(sum(law) == DENOMINATOR for law in laws)
    largest = max(Fraction(max(column), min(column)) for column in zip(*laws))
    assert largest == sw.ratio


def test_device_module_computes_identical_integers_and_cells():
    """Two methods (decimal brackets vs Taylor bounds) give the same B, P, Q and realised units on the grid;
    the device maps values and draws to the same cells."""
    for units in EVALUATION_UNITS:
        sw, device = SquareWave.create(units), client.SquareWave(units)
        assert (device.half_band, device.keep, device.other, device.realised_units) \
            == (sw.half_band, sw.keep, sw.other, sw.realised_units)
    rng = random.Random(5)
    domain = Interval(-3.5, 12.0)
    for units in (to_units("0.05"), to_units("2")):
        sw, device = SquareWave.create(units), client.SquareWave(units)
        values = [rng.uniform(-3.5, 12.0) for _ in range(500)] + [-3.5, 12.0, 4.25]
        draws = [rng.getrandbits(64) for _ in values]
        indices = sw.grid_index(values, domain)
        assert indices.tolist() == [device.grid_index(v, -3.5, 12.0) for v in values]
        cells = sw.cells_from_draws(indices, np.array(draws, dtype=np.uint64))
        assert cells.tolist() == [device.cell(int(i), d) for i, d in zip(indices, draws)]
        assert sw.value_of(cells).tolist() == [device.cell_value(int(c)) for c in cells]
    assert device.perturb(0.5, randbits=lambda k: 0) == device.grid_index(0.5) - device.half_band


def test_bad_input_is_refused_with_a_clear_error():
    sw = SquareWave.create(to_units("1"))
    for values, match in [([0.5, float("nan")], "finite"), ([1.5], r"\[0, 1\]"), ([-1e-9], r"\[0, 1\]")]:
        with pytest.raises(ValueError, match=match):
            sw.perturb(values)
    with pytest.raises(ValueError, match=r"\[0, 10\]"):
        sw.grid_index([11.0], Interval(0, 10))
    assert sw.grid_index([1.5, -2, 0.5], clip=True).tolist() == [sw.steps, 0, sw.steps // 2]
    assert sw.grid_index([0.5 / sw.steps, 1.5 / sw.steps]).tolist() == [0, 2]  # half-way to even
    for units, bits in [(0, 16), (to_units("21"), 16), (True, 16), (to_units("1"), 3), (to_units("1"), 25)]:
        with pytest.raises(ValueError):
            SquareWave.create(units, bits)
    with pytest.raises(ValueError, match="create"):
        SquareWave(sw.epsilon_units, sw.grid_bits, sw.half_band, sw.keep + 1, sw.other, sw.realised_units)
    with pytest.raises(ValueError, match="resolution"):
        SquareWave.create(1_000_000, 24)  # eps = 1e-6 is below the 24-bit grid's step of Q
    device = client.SquareWave(to_units("1"))
    for value in (float("nan"), float("inf"), "0.5", 1.5):
        with pytest.raises(ValueError):
            device.perturb(value)


def test_seeded_generator_replays_and_secure_is_the_default():
    sw = SquareWave.create(to_units("1"))
    values = np.linspace(0, 1, 1000)
    assert np.array_equal(sw.perturb(values, insecure_seeded_randomness(3)),
                          sw.perturb(values, insecure_seeded_randomness(3)))
    assert not np.array_equal(sw.perturb(values), sw.perturb(values))  # FFP < (P/2**64)^1000


# ------------------------------------------------------------------ statistical tests


def _pmf_on_cells(sw: SquareWave, index: int, first: int, count: int) -> np.ndarray:
    """The exact law at grid ``index`` on the cells ``first .. first+count-1`` (zero outside ``sw``'s cells)."""
    pmf = np.zeros(count)
    start = -sw.half_band - first
    pmf[start:start + sw.cells] = sw.law(index).astype(np.float64) / DENOMINATOR
    return pmf


def _binned(pmf: np.ndarray, width: int) -> np.ndarray:
    return np.add.reduceat(pmf, np.arange(0, pmf.size, width))


@pytest.mark.parametrize("bits, width", [(5, 1), (16, 512)])
def test_sampler_fits_the_exact_law_and_catches_a_wrong_epsilon(bits, width):
    """Chi-square fit of n draws per input to the exact law (cells grouped ``width`` at a time); the same
    test rejects draws at eps = 1.2, with a computed miss probability below 1e-7."""
    rng = secure_randomness()
    right, wrong = SquareWave.create(to_units("1"), bits), SquareWave.create(to_units("1.2"), bits)
    n = 200_000
    first = -right.half_band
    count = right.cells
    assert wrong.half_band < right.half_band  # the wrong law lives on the same cells
    for index in (0, right.steps // 3, right.steps):
        pmf = _binned(_pmf_on_cells(right, index, first, count), width)
        wrong_pmf = _binned(_pmf_on_cells(wrong, index, first, count), width)
        df = pmf.size - 1
        noncentrality = n * float(((wrong_pmf - pmf) ** 2 / pmf).sum())
        assert stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality) < POWER_MISS
        for sampler, should_fit in ((right, True), (wrong, False)):
            reports = sampler.perturb(np.full(n, index / right.steps), rng)
            cells = np.rint(reports * right.steps - 0.5).astype(np.int64) - first
            observed = np.bincount(cells // width, minlength=pmf.size)
            pvalue = stats.chisquare(observed, pmf * n).pvalue
            assert (pvalue > ALPHA) == should_fit, (bits, index, sampler.epsilon_units, pvalue)


def test_moments_match_monte_carlo():
    """Sample mean and variance of 10**6 reports per input against the exact discretised moments (z-tests,
    the sample variance's sd from the 4th central moment), and the exact moments against the continuous
    formulas at the nominal eps; power: the mean and the variance at eps = 1.2 are rejected."""
    rng = secure_randomness()
    sw, wrong = SquareWave.create(to_units("1")), SquareWave.create(to_units("1.2"))
    n = 1_000_000
    z = stats.norm.isf(ALPHA / 2)
    for v in (0.0, 0.3, 1.0):
        index = int(sw.grid_index([v])[0])
        mean, variance = float(sw.mean(index)), float(sw.variance(index))
        continuous = sw_parameters(1.0)
        assert mean == pytest.approx(sw_mean(v, *continuous), abs=2e-4)
        assert variance == pytest.approx(sw_variance(v, *continuous), abs=2e-4)
        reports = sw.perturb(np.full(n, v), rng)
        assert abs(reports.mean() - mean) < z * math.sqrt(variance / n)
        mu4 = float(sw_moment(4, Fraction(index, sw.steps), sw.b, sw.p, sw.q, centre=sw.mean(index)))
        variance_sd = math.sqrt((mu4 - variance**2) / n)
        assert abs(reports.var() - variance) < z * variance_sd + variance / n  # + the ddof=0 bias
        if v != 0.3:  # power: at v = 0 and 1 the mean moves by (g(1.2) - g(1))/2 ~ 0.02 = 70 sd
            wrong_reports = wrong.perturb(np.full(n, v), rng)
            wrong_variance = float(wrong.variance(index))
            wrong_mu4 = float(sw_moment(4, Fraction(index, sw.steps), wrong.b, wrong.p, wrong.q,
                                        centre=wrong.mean(index)))
            wrong_variance_sd = math.sqrt((wrong_mu4 - wrong_variance**2) / n)
            shift = abs(float(wrong.mean(index)) - mean) / math.sqrt(wrong_variance / n)  # in the wrong law's sd
            assert stats.norm.cdf(z * math.sqrt(variance / wrong_variance) - shift) < POWER_MISS
            assert abs(wrong_reports.mean() - mean) >= z * math.sqrt(variance / n)
            variance_shift = abs(wrong_variance - variance) - variance / n
            assert stats.norm.cdf((z * variance_sd - variance_shift) / wrong_variance_sd) < POWER_MISS
            assert abs(wrong_reports.var() - variance) >= z * variance_sd + variance / n


def test_debiased_mean_is_unbiased_and_the_raw_average_is_not():
    """z-test of the de-biased SW-direct mean of 10**6 users (uneven values in an interval) against the true
    mean of their grid values, with the exact variance; power: the paper's raw average (trap T4) and a
    de-biasing with the gain of eps = 1.2 are rejected."""
    rng = secure_randomness()
    domain = Interval(10.0, 30.0)
    sw = SquareWave.create(to_units("1"))
    n = 1_000_000
    values = 10.0 + 20.0 * np.linspace(0, 1, n) ** 3  # mean 15, most users near the low end
    indices = sw.grid_index(values, domain)
    grid = indices / sw.steps
    truth = float(Fraction(int(indices.sum()), n * sw.steps))  # the users' mean grid value, in [0, 1] units
    assert abs(10.0 + 20.0 * truth - values.mean()) <= 20 / (2 * sw.steps)  # grid rounding: <= 1/(2m)
    b, p, q = float(sw.b), float(sw.p), float(sw.q)
    report_variance = float((sw_variance(grid, b, p, q) - 1 / (12 * sw.steps**2)).sum()) / n**2  # of the mean
    gain = float(sw.gain)
    sd = 20.0 * math.sqrt(report_variance) / gain  # of the estimate, in domain units
    z = stats.norm.isf(ALPHA / 2)
    target = 10.0 + 20.0 * truth
    reports = sw.perturb(values, rng, domain)
    assert abs(sw.estimate_mean(reports, domain) - target) < z * sd
    # Power: biased estimators with (bias, sd) are accepted with probability <= Phi((z·sd - bias)/their sd).
    wrong_gain = float(SquareWave.create(to_units("1.2")).gain)
    for estimator_gain in (1.0, wrong_gain):  # the raw average of reports, and the gain of eps = 1.2
        estimate = 10.0 + 20.0 * (0.5 + (float(reports.mean()) - 0.5) / estimator_gain)
        bias = 20.0 * abs((truth - 0.5) * (gain / estimator_gain - 1))
        assert stats.norm.cdf((z * sd - bias) / (sd * gain / estimator_gain)) < POWER_MISS
        assert abs(estimate - target) >= z * sd
