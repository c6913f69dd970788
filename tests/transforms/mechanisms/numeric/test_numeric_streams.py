"""The registered numeric streams (transforms/mechanisms/numeric/streams.py): the protocol runs the same clients as
the evaluation functions, the ledger finds no violation under joins, gaps and carried values, values outside the
domain are refused or clipped and counted, and bad configurations fail in one line.  No statistical assertions."""

from __future__ import annotations

import numpy as np
import pytest

from mechanism_helpers import run_with_ledger
from streams import StreamSpec
from transforms.mechanisms import (MECHANISMS, Estimate, FixedRequirements, ReleaseKind, SlotBatch, TrustModel,
                                   make_mechanism)
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.numeric.baselines import AbsorptionParams, ba_sw
from transforms.mechanisms.numeric.perturbation import PerturbationParams, perturb_streams, worst_window_units
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS

NAMES = ["sw-direct", "ipp", "app", "capp", "pp-s", "app-s", "capp-s", "sampling", "ba-sw", "topl"]


def dense_batches(x: np.ndarray, low: float, high: float, window: int, epsilon: float) -> list[SlotBatch]:
    users = x.shape[0]
    reqs = FixedRequirements.of([window] * users, [epsilon] * users)
    return [SlotBatch.of(range(users), low + (high - low) * x[:, t], reqs if t == 0 else None)
            for t in range(x.shape[1])]


def test_every_name_is_registered_lower_case_as_a_local_mean():
    assert sorted(NUMERIC_STREAMS) == sorted(NAMES)
    for name in NAMES:
        assert MECHANISMS[name] is NUMERIC_STREAMS[name]
        cls = MECHANISMS[name]
        assert (cls.estimates, cls.trust) == (Estimate.MEAN, TrustModel.LOCAL_SIMULATED)


@pytest.mark.parametrize("method, name", [("sw", "sw-direct"), ("ipp", "ipp"), ("app", "app"), ("capp", "capp")])
def test_the_protocol_runs_the_same_client_as_the_evaluation_functions(method, name):
    """Every user reports every slot: each release is the average of the reports perturb_streams makes with the
    same seeded generator, mapped onto the domain."""
    x = np.rint(np.random.default_rng(1).random((40, 12)) * 65536) / 65536
    mechanism = make_mechanism(name, epsilon=1.0, window=4, low=-5.0, high=15.0, memory=None)
    releases, ledger = run_with_ledger(mechanism, dense_batches(x, -5.0, 15.0, 4, 1.0), seed=3, max_window=4)
    expected = perturb_streams(PerturbationParams(1.0, 4, method), x, insecure_seeded_randomness(3)).reports
    unit = np.array([mechanism.estimator.unit_estimate(m) for m in expected.mean(axis=0)])  # SW-direct: de-biased
    assert np.allclose([r.values[0] for r in releases], -5.0 + 20.0 * unit, rtol=0, atol=1e-12)
    assert ledger.ok and 0 < ledger.max_usage_ratio <= 1


def test_ba_sw_on_the_protocol_equals_the_evaluation_function():
    x = np.rint(np.random.default_rng(2).random((30, 25)) * 65536) / 65536
    releases, ledger = run_with_ledger(make_mechanism("ba-sw", epsilon=2.0, window=5, low=0.0, high=1.0),
                                       dense_batches(x, 0.0, 1.0, 5, 2.0), seed=4, max_window=5)
    expected = ba_sw(AbsorptionParams(2.0, 5), x, insecure_seeded_randomness(4)).reports
    assert np.allclose([r.values[0] for r in releases], expected.mean(axis=0), rtol=0, atol=1e-12)
    assert ledger.ok and ledger.max_usage_ratio <= 1


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed, presence, carry_forward", [(1, 1.0, False), (2, 0.6, False), (3, 0.6, True)])
def test_the_ledger_finds_no_violation(name, seed, presence, carry_forward):
    spec = StreamSpec(seed=seed, users=30, bins=3, slots=40, windows=(3, 6), epsilons=(0.5, 1.0, 4.0),
                      presence=presence, change=0.05, join_spread=8).for_mechanism(name)
    mechanism = make_mechanism(name, **spec.mechanism_kwargs(name, carry_forward=carry_forward))
    releases, ledger = run_with_ledger(mechanism, spec.batches(), seed=seed, max_window=max(spec.windows))
    assert ledger.violation_count == 0, [str(v) for v in ledger.violations[:3]]
    assert 0 < ledger.max_usage_ratio <= 1
    assert any(r.kind is ReleaseKind.FRESH for r in releases)
    assert all(r.values.shape == (1,) and np.isfinite(r.values).all() for r in releases)


def test_sampled_streams_report_once_per_segment():
    x = np.full((10, 12), 0.5)
    mechanism = make_mechanism("capp-s", epsilon=1.0, window=6, low=0.0, high=1.0, segment=3)
    releases, ledger = run_with_ledger(mechanism, dense_batches(x, 0.0, 1.0, 6, 1.0), max_window=6)
    assert [r.kind is ReleaseKind.FRESH for r in releases] == [t % 3 == 2 for t in range(12)]
    # strict n_w = ceil(5/3) + 1 = 3 segments, memory ceil(6/3) = 2 samples: 1/5 of the budget per report
    assert mechanism.client.sw.epsilon_units == 200_000_000_000
    assert ledger.ok


def test_values_outside_the_domain_are_refused_or_clipped_and_counted():
    reqs = FixedRequirements.of([4, 4], [1.0, 1.0])
    strict = make_mechanism("capp", epsilon=1.0, window=4, low=0.0, high=10.0)
    with pytest.raises(ValueError, match=r"\[0.0, 10.0\]"):
        strict.step(SlotBatch.of([0, 1], [11.0, 5.0], reqs), insecure_seeded_randomness(0))
    clipping = make_mechanism("capp", epsilon=1.0, window=4, low=0.0, high=10.0, out_of_range="clip")
    clipping.step(SlotBatch.of([0, 1], [11.0, -3.0], reqs), insecure_seeded_randomness(0))
    assert clipping.last_clipped == 2 and clipping.exact_mean_for_evaluation() == 5.0
    with pytest.raises(ValueError, match="finite"):
        clipping.step(SlotBatch.of([0, 1], [np.inf, 1.0]), insecure_seeded_randomness(0))


def test_state_saved_by_bytes_continues_identically():
    x = np.random.default_rng(5).random((8, 10))
    batches = dense_batches(x, 0.0, 1.0, 3, 1.0)
    whole, _ = run_with_ledger(make_mechanism("app", epsilon=1.0, window=3, low=0.0, high=1.0), batches, seed=6)
    first, rng = make_mechanism("app", epsilon=1.0, window=3, low=0.0, high=1.0), insecure_seeded_randomness(6)
    head = [first.step(b, rng) for b in batches[:4]]
    resumed = type(first).from_bytes(first.params, first.to_bytes())
    tail = [resumed.step(b, rng) for b in batches[4:]]
    assert [r.values[0] for r in head + tail] == [r.values[0] for r in whole]


@pytest.mark.parametrize("name, kwargs, match", [
    ("sw-direct", dict(memory=3), "remembers 0"),
    ("pp-s", dict(memory=3), "APP-S and CAPP-S"),
    ("app", dict(delta=0.1), "CAPP"),
    ("capp", dict(delta=0.6), "below 0.5"),
    ("capp", dict(low=1.0, high=1.0), "LOW below HIGH"),
    ("app", dict(low=None), "low and high"),
    ("app", dict(bins=4), "one bin"),
    ("app-s", dict(segment=0), "segment"),
    ("app", dict(out_of_range="wrap"), "out_of_range"),
    ("app", dict(segment=3), "does not take segment"),
    ("ba-sw", dict(memory=2, reset=4), "does not take memory, reset"),
    ("topl", dict(bound_mode="paper_literal"), "does not take bound_mode"),
])
def test_bad_configurations_fail_in_one_line(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_mechanism(name, **(dict(epsilon=1.0, window=4, low=0.0, high=1.0) | kwargs))


def test_the_collector_runs_no_rounds_for_the_numeric_clients():
    """Devices report on the public schedule (transforms.numeric_report_release); there are no rounds to run."""
    mechanism = make_mechanism("ipp", epsilon=1.0, window=4, low=0.0, high=1.0)
    with pytest.raises(ValueError, match="runs no rounds for the numeric clients"):
        mechanism.start_slot(SlotBatch.of([0], [np.nan], FixedRequirements.of([4], [1.0])),
                             insecure_seeded_randomness(0), clients=True)


@pytest.mark.parametrize("name, memory_slots", [
    ("sw-direct", lambda m: 0), ("ipp", lambda m: 1), ("app", lambda m: m.client.memory),
    ("capp", lambda m: m.client.memory), ("pp-s", lambda m: m.segment), ("sampling", lambda m: 0),
    ("app-s", lambda m: m.client.memory * m.segment), ("capp-s", lambda m: m.client.memory * m.segment),
    ("ba-sw", lambda m: 0), ("topl", lambda m: 0)])
def test_every_window_of_the_charges_covers_the_memory(name, memory_slots):
    """The ledger checks w-slot sums of the charges; a report also depends on the values its memory carries
    (``h`` slots back, or ``h`` segments of ``L`` slots).  With the strict budgets even the longer spans stay
    within epsilon: the exact check of ``worst_window_units`` on the charges the releases carry."""
    x = np.random.default_rng(3).random((6, 48))
    window, epsilon = 6, 1.0
    segment = 4 if name.endswith("-s") or name == "sampling" else None  # L = 4 does not divide w = 6
    mechanism = make_mechanism(name, epsilon=epsilon, window=window, low=0.0, high=1.0, segment=segment)
    releases, ledger = run_with_ledger(mechanism, dense_batches(x, 0.0, 1.0, window, epsilon), max_window=window)
    charges = np.stack([r.charges.units for r in releases], axis=1)  # (users, slots)
    segment = getattr(mechanism, "segment", 1)
    slot = np.arange(x.shape[1])
    first = np.where(charges > 0, slot - (segment - 1) - memory_slots(mechanism), slot)  # segment start - memory
    worst = worst_window_units(charges, np.broadcast_to(np.maximum(first, 0), charges.shape), window)
    assert ledger.ok and (charges > 0).any()
    assert worst.max() <= to_units(epsilon)
    # power: were every report to depend on every earlier value (trap T1), the same check fails
    assert worst_window_units(charges, np.zeros_like(charges), window).max() > to_units(epsilon)


@pytest.mark.parametrize("name", ["pp-s", "app-s", "capp-s", "sampling"])
def test_sampled_streams_run_their_client_on_the_segment_means(name):
    """Dense users, segments of 3 slots: each fresh release is the average of the client's reports of the users'
    segment means (values on the grid, so the means are what the client sees), from the same seeded draws."""
    x = np.rint(np.random.default_rng(6).random((20, 12)) * 65536) / 65536
    mechanism = make_mechanism(name, epsilon=2.0, window=6, low=0.0, high=1.0, segment=3)
    releases, ledger = run_with_ledger(mechanism, dense_batches(x, 0.0, 1.0, 6, 2.0), seed=8, max_window=6)
    means = x.reshape(20, 4, 3).mean(axis=2)
    reports, _ = mechanism.client.run(means, insecure_seeded_randomness(8))
    fresh = [r.values[0] for r in releases if r.kind is ReleaseKind.FRESH]
    unit = [mechanism.estimator.unit_estimate(m) for m in reports.mean(axis=0)]  # Sampling: de-biased
    assert np.allclose(fresh, unit, rtol=0, atol=1e-12) and ledger.ok
