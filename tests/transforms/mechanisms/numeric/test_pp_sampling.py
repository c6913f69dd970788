"""PP-S / APP-S / CAPP-S / Sampling (spec §3.6, §5.6), BA-SW (§3.7.1, §5.9) and ToPL(PM) (§3.7.2, §5.7):
test vectors, identity with the slow per-user reference, the exact window check of every variant.

False-failure budget: one statistical assertion (ToPL's unbiasedness), FFP ``1e-7``, with a power check (a
mapping without de-biasing is rejected; miss probability computed and asserted below ``1e-7``).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tests.transforms.mechanisms.numeric.numeric_reference import (absorption_reference, grid_streams,
                                                                    sampling_reference)
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.numeric.baselines import (AbsorptionParams, AbsorptionState, ToplParams,
                                                     absorption_shares, ba_sw, topl)
from transforms.mechanisms.numeric.perturbation import worst_window_units
from transforms.mechanisms.numeric.sampling import (BASES, SamplingParams, choose_samples, pp_sampling,
                                                    sample_divisor, samples_per_window, sampling_objective)
from transforms.mechanisms.numeric.square_wave import sw_variance

ALPHA = POWER_MISS = 1e-7


def test_objective_and_choice_of_spec_5_6():
    """q = w = 10, per-sample budget eps/n_s."""
    assert [sampling_objective(s, 1 / s) for s in range(2, 11)] == pytest.approx(
        [0.172516, 0.133822, 0.119966, 0.112715, 0.108230, 0.105174, 0.102955, 0.101270, 0.099947], abs=1e-6)
    assert [sampling_objective(s, 3 / s) for s in range(2, 11)] == pytest.approx(
        [0.078630, 0.075298, 0.075496, 0.076255, 0.077101, 0.077911, 0.078652, 0.079320, 0.079917], abs=1e-6)
    for accounting in ("paper", "strict"):
        assert choose_samples(10, 10, 1.0, accounting) == 10
        assert choose_samples(10, 10, 3.0, accounting) == 3
    with pytest.raises(ValueError):
        sampling_objective(1, 1.0)


def test_samples_per_window_readings():
    """Fig 3 (w = L = 3): one report per window for the paper's intent, two for the strict reading."""
    assert samples_per_window(3, 3, 10, "paper") == 1
    assert samples_per_window(3, 3, 10, "strict") == 2
    assert samples_per_window(1, 10, 10, "paper") == samples_per_window(1, 10, 10, "strict") == 10
    assert samples_per_window(10, 20, 3, "paper") == 2 and samples_per_window(10, 20, 3, "strict") == 3
    assert sample_divisor(30, 3, 20, "strict", None) == 3  # memory of the whole query: every report
    assert sample_divisor(30, 3, 20, "paper", None) == 2
    with pytest.raises(ValueError, match="accounting"):
        samples_per_window(3, 3, 10, "reproduce_ref")
    with pytest.raises(ValueError, match="overspends"):
        SamplingParams(1.0, 10, accounting="ref")


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("accounting", ["paper", "strict"])
def test_sampling_variants_equal_the_per_user_reference(base, accounting):
    params = SamplingParams(2.0, 8, base=base, samples=3, accounting=accounting)
    x = grid_streams(6, 11, seed=5)  # 11 = 3·3 + 2: the last segment takes the leftover
    fast = pp_sampling(params, x, insecure_seeded_randomness(3))
    client = params.client(11, 3)
    memory = None if client.accumulate else client.memory
    method = {"none": "sw"}.get(base, base)
    slow = sampling_reference(x, insecure_seeded_randomness(3),
                              dict(sw=client.sw, method=method, memory=memory, reset=None, bounds=client.bounds), 3)
    assert np.array_equal(fast.expanded, slow)
    assert fast.samples.shape == (6, 3) and fast.segment_length == 3
    assert (fast.charges[:, [2, 5, 10]] == client.report_units).all() and fast.charges.sum() == 18 * client.report_units


@pytest.mark.parametrize("base", BASES)
def test_strict_sampling_is_private_and_the_paper_intent_is_caught_when_a_query_is_longer_than_w(base):
    """(w, q) = (20, 30): three 10-slot segments; a 20-slot change touches three of them (strict n_w = 3)."""
    x = grid_streams(2, 30, seed=6)
    strict = pp_sampling(SamplingParams(3.0, 20, base=base, samples=3), x, secure_randomness())
    assert strict.w_event_private
    assert worst_window_units(strict.charges, strict.first_dependency, 20).max() <= to_units(3.0)
    paper = pp_sampling(SamplingParams(3.0, 20, base=base, samples=3, accounting="paper"), x, secure_randomness())
    assert not paper.w_event_private
    assert worst_window_units(paper.charges, paper.first_dependency, 20).max() > to_units(3.0)


def test_sampling_with_queries_within_the_window_is_private_in_both_readings():
    x = grid_streams(3, 10, seed=7)
    for accounting in ("paper", "strict"):
        for base in BASES:
            result = pp_sampling(SamplingParams(1.0, 20, base=base, accounting=accounting), x, secure_randomness())
            assert result.w_event_private
            assert worst_window_units(result.charges, result.first_dependency, 20).max() <= to_units(1.0)


def test_ba_sw_bookkeeping_of_spec_5_9():
    """eps = 1, w = 10: e1 = 0.05; after a publication at e2 = 3·e1 the next 2 slots are nullified, the 3rd
    absorbs 1 share, the 5th 3; shares are capped at w."""
    params = AbsorptionParams(1.0, 10)
    assert params.share_units == to_units("0.05")
    last = 4
    for offset, nullified, shares in [(1, True, None), (2, True, None), (3, False, 1), (5, False, 3),
                                      (40, False, 10)]:
        state = AbsorptionState(np.zeros(1), np.array([last]), np.array([3]), np.array([last + offset]))
        is_nullified, absorbed = absorption_shares(state, params.window)
        assert bool(is_nullified[0]) is nullified
        if shares is not None:
            assert absorbed[0] == shares
    first = absorption_shares(params.initial_state(2), params.window)
    assert not first[0].any() and (first[1] == 1).all()


def test_ba_sw_equals_the_per_user_reference_and_every_window_is_within_budget():
    params = AbsorptionParams(2.0, 4)
    x = grid_streams(8, 40, seed=8)
    fast = ba_sw(params, x, insecure_seeded_randomness(9))
    released, charges = absorption_reference(x, insecure_seeded_randomness(9), params)
    assert np.array_equal(fast.reports, released) and np.array_equal(fast.charges, charges)
    assert (charges > params.wave(1).realised_units).sum() > 8  # publications happen beyond the first slot
    assert worst_window_units(fast.charges, fast.first_dependency, 4).max() <= params.epsilon_units
    assert fast.w_event_private


def test_topl_constants_of_spec_5_7():
    """eps_s = 0.05: C = 80.0042, P(inside) = 0.50625, Var(PM(0)) = 2093.72 in [-1, 1] (523.43 in [0, 1])."""
    pm = ToplParams(1.0, 20).piecewise
    # PM's [-C, C] is the square wave's [-b, 1+b] stretched by 2C/(1+2b), so C = (1 + 2b)/g
    assert float((1 + 2 * pm.b) / pm.gain) == pytest.approx(80.0042, rel=1e-4)
    assert 2 * pm.half_band * pm.keep / 2**64 == pytest.approx(0.506250, abs=1e-4)
    centre = pm.steps // 2
    assert float(pm.variance(centre) / pm.gain**2) == pytest.approx(523.43, rel=1e-3)


def test_topl_is_unbiased_and_the_undebiased_map_is_not():
    """z-test per slot (Bonferroni over 2 slots), 200,000 users, exact variance; power: ``(2w - 1 + 1)/2``."""
    params = ToplParams(2.0, 2)
    pm = params.piecewise
    users = 200_000
    x = np.rint(np.linspace(0, 1, users)[:, None] ** np.array([2.0, 0.5]) * pm.steps) / pm.steps
    reports = topl(params, x, secure_randomness()).reports
    gain = float(pm.gain)
    b, p, q = float(pm.b), float(pm.p), float(pm.q)  # the exact law's variance at a grid value (cell midpoints)
    variance = (sw_variance(x, b, p, q) - 1 / (12 * pm.steps ** 2)).sum(axis=0)
    sd = np.sqrt(variance) / gain / users
    z = stats.norm.isf(ALPHA / 4)
    assert (np.abs(reports.mean(axis=0) - x.mean(axis=0)) <= z * sd).all()
    undebiased_bias = np.abs((1 - gain) * (x.mean(axis=0) - 0.5))  # E[w] = 1/2 + g(x - 1/2)
    assert stats.norm.cdf((z * sd - undebiased_bias) / (sd * gain)).max() < POWER_MISS
    undebiased = 0.5 + (reports - 0.5) * gain
    assert (np.abs(undebiased.mean(axis=0) - x.mean(axis=0)) > z * sd).all()
    assert worst_window_units(*topl(params, x[:3], secure_randomness())[1:3], 2).max() <= to_units(2.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(base="pm"), "base"), (dict(samples=0), "samples"), (dict(base="ipp", memory=2), "APP and CAPP"),
    (dict(base="app", delta=0.1), "CAPP"), (dict(bound_mode="q"), "bound_mode"),
])
def test_bad_sampling_configurations_fail(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**(dict(epsilon=1.0, window=10) | kwargs))
    with pytest.raises(ValueError, match="do not fit"):
        pp_sampling(SamplingParams(1.0, 10, samples=5), np.zeros((1, 4)))
    with pytest.raises(ValueError, match="too small"):
        AbsorptionParams(1e-11, 10)
