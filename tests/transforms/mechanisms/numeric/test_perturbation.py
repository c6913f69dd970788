"""SW-direct / IPP / APP / CAPP clients: spec §5.2, §5.4, §5.5 vectors, identity with the slow per-user
reference on generated streams, the exact window check (strict default private, the paper's readings caught),
state resumption and bad configurations.

False-failure budget: one statistical assertion (the de-biased SW-direct population mean), FFP ``1e-7``, with a
power check against the paper's raw average (miss probability computed, asserted below ``1e-7``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tests.transforms.mechanisms.numeric.numeric_reference import client_reference, grid_streams
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.numeric.perturbation import (METHODS, Client, PerturbationParams, capp_bounds, capp_delta,
                                                        perturb_queries, perturb_streams, worst_window_units)
from transforms.mechanisms.numeric.server import debiased, population_means
from transforms.mechanisms.numeric.square_wave import sw_variance

ALPHA = POWER_MISS = 1e-7

# spec §5.2: delta(eps/w), rows w = 10..60, columns eps = 0.5..3
DELTA_GRID = {
    10: [0.06070, 0.05065, 0.04116, 0.03221, 0.02376, 0.01577],
    20: [0.06596, 0.06070, 0.05560, 0.05065, 0.04584, 0.04116],
    30: [0.06774, 0.06419, 0.06070, 0.05729, 0.05393, 0.05065],
    40: [0.06864, 0.06596, 0.06331, 0.06070, 0.05813, 0.05560],
    50: [0.06919, 0.06703, 0.06490, 0.06279, 0.06070, 0.05865],
    60: [0.06955, 0.06774, 0.06596, 0.06419, 0.06244, 0.06070],
}
EPSILONS = [0.5, 1, 1.5, 2, 2.5, 3]


@pytest.mark.parametrize("window", sorted(DELTA_GRID))
def test_capp_delta_grid_of_spec_5_2(window):
    assert [capp_delta(e / window) for e in EPSILONS] == pytest.approx(DELTA_GRID[window], abs=1e-5)


def test_capp_delta_components_and_other_budgets_of_spec_5_2():
    assert capp_delta(0.05) == pytest.approx(0.628576 - 0.567871, abs=1e-6)
    for eps_s, delta in [(0.01, 0.069187), (0.1, 0.050648), (0.2, 0.032211), (0.5, -0.012054), (1, -0.060295),
                         (2, -0.107400), (3, -0.126024)]:
        assert capp_delta(eps_s) == pytest.approx(delta, abs=1e-6)
    assert abs(capp_delta(0.407882)) < 1e-5  # the sign change


def test_capp_transform_vectors_of_spec_5_2():
    """SW draw fixed at v = 0.9 in normalised space; x^I = 0.3."""
    delta = 0.060704
    low, high, low_in, high_in = capp_bounds(delta, "ref")
    assert (low_in, high_in) == (0.0, 1.0)  # input simply clipped to [0, 1]
    assert (0.3 - low_in) / (high_in - low_in) == pytest.approx(0.3)
    assert low + (high - low) * 0.9 == pytest.approx(0.851437, abs=1e-6)
    low, high, low_in, high_in = capp_bounds(delta, "consistent_shrink")
    assert (0.3 - low_in) / (high_in - low_in) == pytest.approx(0.272363, abs=1e-6)
    for mode in ("ref", "consistent_shrink"):
        low, high, low_in, high_in = capp_bounds(-0.1, mode)
        assert (0.3 - low_in) / (high_in - low_in) == pytest.approx(0.333333, abs=1e-6)
        assert low + (high - low) * 0.9 == pytest.approx(0.98)
    assert capp_bounds(delta, "paper_literal") == pytest.approx((-delta, 1 + delta, -delta, 1 + delta))
    with pytest.raises(ValueError, match="below 0.5"):
        capp_bounds(0.5, "ref")


class ScriptedWave:
    """A stand-in square wave whose reports are given (the paper's worked examples fix the SW outputs)."""

    steps = 1 << 16
    realised_units = 1

    def __init__(self, outputs):
        self.outputs, self.inputs = list(outputs), []

    def grid_index(self, values, domain=None, clip=False):
        return np.rint(np.asarray(values, np.float64) * self.steps).astype(np.int64)

    def perturb(self, values, rng=None, domain=None, clip=False):
        self.inputs.append(float(values[0]))
        return np.array([self.outputs.pop(0)])


FIG2_X = [0.01, 0.15, 0.16, 0.17, 0.18]
FIG2_RELEASED = [0, 0.19, 0.15, 0.15, 0.25]


def test_ipp_worked_example_of_spec_5_4():
    wave = ScriptedWave(FIG2_RELEASED)
    reports, state = Client(wave, memory=1).run([FIG2_X], rng=None)
    assert reports[0].tolist() == FIG2_RELEASED
    assert wave.inputs == pytest.approx([0.01, 0.16, 0.12, 0.18, 0.20], abs=1e-4)  # x^I
    assert state.deviations[0, 0] == pytest.approx(-0.07, abs=1e-4)  # d_5, implied by the figure


def test_app_bookkeeping_of_spec_5_5():
    wave = ScriptedWave(FIG2_RELEASED)
    client = Client(wave, memory=0, accumulate=True)
    state = client.initial_state(1)
    accumulated = []
    for value in FIG2_X:
        _, state = client.step(state, [value], rng=None)
        accumulated.append(float(state.accumulated[0]))
    assert wave.inputs == pytest.approx([0.01, 0.16, 0.13, 0.15, 0.18], abs=1e-4)
    assert accumulated == pytest.approx([0.01, -0.03, -0.02, 0.00, -0.07], abs=1e-4)
    # the exact identity of §3.3: mean(x') = mean(x) - D_n/n (x on the grid)
    grid = np.rint(np.array(FIG2_X) * wave.steps) / wave.steps
    assert np.mean(FIG2_RELEASED) == pytest.approx(grid.mean() - accumulated[-1] / 5, abs=1e-15)


CONFIGS = [
    dict(method="sw"), dict(method="ipp"), dict(method="app"), dict(method="app", memory=3),
    dict(method="capp"), dict(method="capp", memory=2, bound_mode="paper_literal"),
    dict(method="capp", bound_mode="consistent_shrink", delta=-0.1),
    dict(method="app", unbounded=True, reset=7), dict(method="ipp", reset=4),
    dict(method="capp", unbounded=True, reset=5, budget="paper"),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_vectorised_clients_equal_the_per_user_reference(config):
    params = PerturbationParams(1.0, 5, **config)
    x = grid_streams(7, 23, seed=len(str(config)))
    fast = perturb_streams(params, x, insecure_seeded_randomness(11)).reports
    client = params.client
    memory = None if client.accumulate else client.memory
    slow = client_reference(x, insecure_seeded_randomness(11), client.sw, params.method, memory, client.reset,
                            client.bounds)
    assert np.array_equal(fast, slow)
    assert np.array_equal(fast * (2 << 32), np.rint(fast * (2 << 32)))  # reports are exact dyadic rationals


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_every_window_costs_at_most_epsilon_and_the_realised_sw_budget_at_most_nominal(config):
    params = PerturbationParams(2.0, 6, **config)
    client = params.client
    assert 0 < client.sw.realised_units <= params.report_units
    x = grid_streams(3, 40, seed=1)
    if params.budget == "paper":
        result = perturb_queries(params, x[:, :params.reset][:, :params.window], secure_randomness())
    else:
        result = perturb_streams(params, x, secure_randomness())
    assert result.w_event_private
    worst = worst_window_units(result.charges, result.first_dependency, params.window)
    assert worst.max() <= params.epsilon_units
    assert (result.charges == client.sw.realised_units).all()


def test_the_window_check_catches_the_papers_readings_on_a_stream():
    """Trap T1: with eps/w and any memory, a change inside one window moves more than w reports."""
    x = grid_streams(2, 30, seed=2)
    for config in (dict(method="ipp"), dict(method="app", memory=4), dict(method="app", unbounded=True)):
        params = PerturbationParams(1.0, 5, budget="paper", not_w_event_private=True, **config)
        assert not params.w_event_private
        result = perturb_streams(params, x, secure_randomness())
        assert not result.w_event_private
        assert worst_window_units(result.charges, result.first_dependency, 5).max() > params.epsilon_units
    strict = PerturbationParams(1.0, 5, method="app", memory=4)
    assert strict.divisor == 9 and strict.w_event_private
    # per-query runs at eps/w (the reference protocol) are private: nothing else is reported
    reference = PerturbationParams(1.0, 5, method="app", unbounded=True, reset=5, budget="paper")
    assert perturb_queries(reference, x[:, :5], secure_randomness()).w_event_private


def test_a_run_resumed_from_saved_state_continues_identically():
    params = PerturbationParams(1.0, 4, method="capp", memory=3, reset=9)
    x = grid_streams(5, 20, seed=3)
    whole = perturb_streams(params, x, insecure_seeded_randomness(4))
    rng = insecure_seeded_randomness(4)
    first = perturb_streams(params, x[:, :7], rng)
    saved = {name: np.array(value) for name, value in first.state._asdict().items()}  # what a state cell holds
    second = perturb_streams(params, x[:, 7:], rng, type(first.state)(**saved))
    assert np.array_equal(np.hstack([first.reports, second.reports]), whole.reports)
    assert np.array_equal(np.hstack([first.first_dependency, second.first_dependency + 7]), whole.first_dependency)


def test_debiased_sw_direct_population_mean_is_unbiased_and_the_raw_average_is_not():
    """z-test at each of 3 slots jointly (Bonferroni) for 200,000 users; power: the raw average (trap T4)."""
    params = PerturbationParams(1.5, 3, method="sw")
    sw = params.client.sw
    users = 200_000
    x = np.rint(np.linspace(0, 1, users)[:, None] ** np.array([2.0, 3.0, 0.5]) * sw.steps) / sw.steps
    reports = perturb_streams(params, x, secure_randomness()).reports
    truth = x.mean(axis=0)
    b, p, q = float(sw.b), float(sw.p), float(sw.q)
    sd = np.sqrt([(sw_variance(x[:, t], b, p, q) - 1 / (12 * sw.steps ** 2)).sum() for t in range(3)]) / users
    sd_debiased = sd / float(sw.gain)
    z = stats.norm.isf(ALPHA / 6)
    assert (np.abs(debiased(population_means(reports), sw) - truth) <= z * sd_debiased).all()
    raw_bias = (1 - float(sw.gain)) * (0.5 - truth)  # what the raw average is off by
    # the same test applied to the raw average misses a slot with probability <= Phi((z·sd' - |bias|)/sd)
    assert stats.norm.cdf((z * sd_debiased - np.abs(raw_bias)) / sd).max() < POWER_MISS
    assert (np.abs(population_means(reports) - truth) > z * sd_debiased).all()


def test_values_must_lie_in_the_unit_interval():
    client = PerturbationParams(1.0, 4).client
    for bad in ([1.5], [float("nan")], [-0.1]):
        with pytest.raises(ValueError):
            client.step(client.initial_state(1), bad, secure_randomness())
    with pytest.raises(ValueError, match="one value per user"):
        client.step(client.initial_state(2), [0.5], secure_randomness())


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="app", unbounded=True), "trap T1"),
    (dict(method="app", budget="paper"), "trap T1"),
    (dict(method="ipp", budget="paper", reset=20), "trap T1"),
    (dict(method="ipp", memory=3), "remembers 1"),
    (dict(method="sw", unbounded=True), "remembers 0"),
    (dict(method="app", memory=2, unbounded=True), "not both"),
    (dict(method="capp", delta=0.5), "below 0.5"),
    (dict(method="app", delta=0.1), "CAPP"),
    (dict(method="lol"), "method"),
    (dict(budget="loose"), "budget"),
    (dict(bound_mode="x"), "bound_mode"),
    (dict(reset=0), "reset"),
    (dict(window=0), "window"),
    (dict(epsilon=1e-11), "too small"),
])
def test_bad_configurations_fail_with_one_clear_line(kwargs, match):
    arguments = dict(epsilon=1.0, window=10) | kwargs
    with pytest.raises(ValueError, match=match):
        PerturbationParams(**arguments)


def test_budgets_are_exact_integer_units():
    params = PerturbationParams(1.0, 10, method="capp")
    assert params.divisor == 20 and params.report_units == to_units(1.0) // 20
    assert PerturbationParams(1.0, 10, method="ipp").divisor == 11
    assert PerturbationParams(1.0, 10, method="sw", budget="paper").divisor == 10
    unbounded = PerturbationParams(1.0, 10, method="app", unbounded=True, reset=4)
    assert unbounded.effective_memory == 3 and unbounded.divisor == 13
    assert math.isclose(unbounded.client.sw.realised_units, unbounded.report_units, rel_tol=1e-6)
    assert set(METHODS) == {"sw", "ipp", "app", "capp"}
