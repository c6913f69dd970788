"""LP-/LB-DSATw and LP-/LB-RescueDP (transforms/mechanisms/ldp/extensions.py; spec ldp_ids.md §5.10-§5.11)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanism_helpers import run_with_ledger
from streams import stream_specs
from transforms.mechanisms import FixedRequirements, ReleaseKind, SlotBatch, make_mechanism
from transforms.mechanisms.ldp.extensions import EXTENSIONS
from transforms.mechanisms.noise import insecure_seeded_randomness

NAMES = sorted(EXTENSIONS)
POPULATION = [name for name in NAMES if name.startswith("lp-")]
DSATW = ["lb-dsatw", "lp-dsatw"]
RESCUEDP = ["lb-rescuedp", "lp-rescuedp"]
OPTIONS = {  # non-default readings each method offers, exercised beside the defaults
    "lp-dsatw": {"dissimilarity_sizing": "cutoff", "cutoff": 1}, "lb-dsatw": {"dissimilarity_sizing": "cutoff"},
    "lp-rescuedp": {"max_users": 7, "max_portion": 1.0}, "lb-rescuedp": {"max_report_epsilon": 0.2, "scale": 1.0},
}


def charged_slots(releases) -> dict[int, list[int]]:
    """Per user, the slots at which they were charged (sent a report)."""
    slots: dict[int, list[int]] = {}
    for release in releases:
        for user in release.charges.users[release.charges.units > 0]:
            slots.setdefault(int(user), []).append(release.slot)
    return slots


def batches_of(fractions, users: int, window: int, epsilon: float = 1.0, bins: int = 2) -> list[SlotBatch]:
    """Every user reports at every slot; the first ``fraction·users`` hold bin 1 (the rest bin 0)."""
    reqs = FixedRequirements.of([window] * users, [epsilon] * users)
    return [SlotBatch.of(range(users), (np.arange(users) < round(f * users)).astype(np.int64) * (bins - 1),
                         reqs if t == 0 else None) for t, f in enumerate(fractions)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=stream_specs(max_slots=30), name=st.sampled_from(NAMES), optioned=st.booleans())
def test_the_ledger_finds_no_violation_and_population_versions_ask_nobody_twice_in_a_window(spec, name, optioned):
    """Joins, absences and requirement changes: no window over its requirement; LP-: every user's reports are at
    least ``w`` slots apart (the shared pool)."""
    spec = spec.for_mechanism(name)
    kwargs = spec.mechanism_kwargs(name, **(OPTIONS[name] if optioned else {}))
    if optioned and name == "lp-dsatw" and kwargs["window"] == 1:
        kwargs["cutoff"] = None  # C = 1 is the default there; C < w has no other value
    mechanism = make_mechanism(name, **kwargs)
    releases, ledger = run_with_ledger(mechanism, spec.batches(dynamic=False), seed=spec.seed,
                                       max_window=max(spec.windows))
    assert ledger.violation_count == 0, [str(v) for v in ledger.violations[:3]]
    assert ledger.max_usage_ratio <= 1
    if name in POPULATION:
        for user, slots in charged_slots(releases).items():
            assert np.all(np.diff(slots) >= kwargs["window"]), (user, slots)


@pytest.mark.parametrize("name", POPULATION)
def test_population_versions_ask_nobody_twice_in_a_window_on_a_busy_stream(name):
    """A jumpy stream that publishes often: still every user's reports are at least ``w`` slots apart."""
    window = 4
    releases, ledger = run_with_ledger(make_mechanism(name, bins=2, epsilon=1.0, window=window),
                                       batches_of([0.1, 0.9] * 40, users=400, window=window), seed=2)
    slots = charged_slots(releases)
    assert sum(len(s) for s in slots.values()) > 400, "the stream must make users report several times (power)"
    assert all(np.all(np.diff(s) >= window) for s in slots.values())
    assert ledger.ok


@pytest.mark.parametrize("name", NAMES)
def test_state_round_trip_mid_stream_continues_identically(name):
    kwargs = {"bins": 3, "epsilon": 1.0, "window": 5, "simulation": "aggregate", **OPTIONS[name]}
    gen = np.random.default_rng(4)
    reqs = FixedRequirements.of([5] * 300, [1.0] * 300)
    batches = [SlotBatch.of(range(300), gen.integers(0, 3, 300), reqs if t == 0 else None) for t in range(50)]
    full, _ = run_with_ledger(make_mechanism(name, **kwargs), batches, seed=6)
    first, rng = make_mechanism(name, **kwargs), insecure_seeded_randomness(6)
    for batch in batches[:23]:
        first.step(batch, rng)
    resumed = type(first).from_bytes(first.params, first.to_bytes())
    resumed_rng = pickle.loads(pickle.dumps(rng))
    tail = [resumed.step(b, resumed_rng) for b in batches[23:]]
    assert {r.kind for r in full} >= {ReleaseKind.FRESH, ReleaseKind.SKIPPED}, "the run must decide both ways"
    for a, b in zip(full[23:], tail):
        assert (a.slot, a.kind) == (b.slot, b.kind)
        assert np.array_equal(a.estimate, b.estimate)
        assert np.array_equal(a.charges.units, b.charges.units)


def dsatw_rate(name: str, cutoff: int, slots: int = 400, window: int = 10):
    """Releases of a DSATw method started with the highest threshold on a stream that moves every slot.

    All 20,000 users hold bin ``t mod 50``: a release of the last 49 slots is off by 1 in two of the 50 bins, so
    ``dis* = 0.04``; M1 estimates it with standard deviation below 0.004 (LP: 1,000 users, OUE at ε = 1; LB: all
    users at ``ε/(2w) = 0.2``, so ε = 4).
    """
    epsilon = 1.0 if name.startswith("lp-") else 4.0
    mechanism = make_mechanism(name, bins=50, epsilon=epsilon, window=window, cutoff=cutoff, prior_threshold=2.0,
                               proportional_gain=0.03, integral_gain=0.0, simulation="aggregate")
    users = 20_000
    reqs = FixedRequirements.of([window] * users, [epsilon] * users)
    rng = insecure_seeded_randomness(cutoff)
    releases, thresholds = [], []
    for t in range(slots):
        releases.append(mechanism.step(SlotBatch.of(range(users), np.full(users, t % 50), reqs if t == 0 else None),
                                       rng))
        thresholds.append(mechanism.threshold)
    return [r.kind is ReleaseKind.FRESH for r in releases], thresholds


@pytest.mark.parametrize("name", DSATW)
def test_the_pid_threshold_moves_the_sampling_rate_to_c_over_w(name):
    """From ``T = 2`` (nothing passes) the controller lowers the threshold while the rate is below ``C/w``,
    until the publications settle at ``C`` per window of ``w``.

    The threshold settles below 0.02 (``e_t = |E_t - σ|/σ`` vanishes at ``E_t = σ``, so it may stop above 0),
    and every publishable slot after the warm-up has ``dis`` about 0.04, more than 7 standard deviations above
    it: with the Gaussian tail a missed publication has probability < 1e-12 per slot, so the false-failure
    probability of the exact rate over 300 slots is < 1e-9.  Power: a cutoff of 2 instead of 5
    gives the rate 0.2 instead of 0.5, and the first 10 slots (threshold still above 0.5) publish nothing.
    """
    rates = {}
    for cutoff in (2, 5):
        fresh, thresholds = dsatw_rate(name, cutoff)
        assert not any(fresh[:10]) and thresholds[0] > 1.5, "the prior threshold must hold publications back"
        assert thresholds[-1] < 0.02
        tail = fresh[100:]
        rates[cutoff] = sum(tail) / len(tail)
        for start in range(len(fresh) - 10):
            assert sum(fresh[start:start + 10]) <= cutoff  # never more than C in a window
    assert rates == {2: 0.2, 5: 0.5}


@pytest.mark.parametrize("name", RESCUEDP)
def test_the_rescuedp_interval_grows_on_a_flat_stream_and_shrinks_on_a_jumpy_one(name):
    """150 flat slots (30% in bin 1) let the interval grow; 60 slots alternating between 10% and 90% shrink it.

    On the flat part the filtered release moves by a fraction of the estimate's standard deviation, so a sample
    adds up to ``θ = 2``; a jump moves it by far more than that deviation (ε = 1, >= 1,000 reporters or every
    holder: sd < 0.04 against a jump of 0.8), which sends the interval back towards 1.  Compared: the mean
    interval over slots 51-150 (flat, after the first growth) and 171-210 (jumpy).  Empirically, over 40 seeds,
    the flat means were 5.1-14.3 (LP) and 6.8-16.7 (LB), the jumpy ones 1.0 (LP) and 2.4-3.4 (LB, whose
    budget left in the window shrinks as it samples more often): a seeded check with wide margins, not a bound.
    """
    mechanism = make_mechanism(name, bins=2, epsilon=1.0, window=10, simulation="aggregate")
    rng = insecure_seeded_randomness(12)
    intervals = []
    for batch in batches_of([0.3] * 150 + [0.1, 0.9] * 30, users=20_000, window=10):
        mechanism.step(batch, rng)
        intervals.append(mechanism.interval)
    assert intervals[0] == 1 and max(intervals[:150]) >= 8
    assert np.mean(intervals[170:]) < 4.5 < np.mean(intervals[50:150])


@pytest.mark.parametrize("name, kwargs, message", [
    ("lp-dsatw", {"cutoff": 10}, r"cutoff \(C\) must be an integer with 1 <= C < window=10"),
    ("lb-dsatw", {"cutoff": 0}, "cutoff"),
    ("lp-dsatw", {"cutoff": 2.5}, "cutoff"),
    ("lp-dsatw", {"sigma": 0.0}, r"sigma must be a finite number in \(0.0"),
    ("lb-dsatw", {"prior_threshold": 2.5}, r"prior_threshold must be a finite number in \[0.0, 2.0\]"),
    ("lp-dsatw", {"dissimilarity_sizing": "slot"}, "dissimilarity_sizing must be one of"),
    ("lp-dsatw", {"proportional_gain": -0.1}, "proportional_gain"),
    ("lb-rescuedp", {"integral_gain": float("nan")}, "integral_gain"),
    ("lp-rescuedp", {"integral_span": 0}, "integral_span must be an integer >= 1"),
    ("lp-rescuedp", {"max_portion": 1.5}, r"max_portion \(p_max\) must be a finite number in \(0.0, 1.0\]"),
    ("lb-rescuedp", {"max_portion": 0.0}, "max_portion"),
    ("lp-rescuedp", {"scale": -1.0}, r"scale \(phi\)"),
    ("lb-rescuedp", {"process_noise": float("inf")}, r"process_noise \(Q\)"),
    ("lp-rescuedp", {"interval_gain": 0}, r"interval_gain \(theta\)"),
    ("lp-rescuedp", {"max_users": 0}, r"max_users \(n_max\) must be an integer >= 1"),
    ("lb-rescuedp", {"max_report_epsilon": -1.0}, "max_report_epsilon"),
    ("lb-rescuedp", {"max_users": 5}, "does not take max_users"),
    ("lp-rescuedp", {"max_report_epsilon": 1.0}, "does not take max_report_epsilon"),
])
def test_bad_parameters_are_refused_in_one_line(name, kwargs, message):
    with pytest.raises(ValueError, match=message) as raised:
        make_mechanism(name, bins=2, epsilon=1.0, window=10, **kwargs)
    assert "\n" not in str(raised.value)


def test_a_cutoff_of_one_is_the_only_one_for_a_window_of_one():
    assert make_mechanism("lp-dsatw", bins=2, epsilon=1.0, window=1, cutoff=1).params.c == 1
    assert make_mechanism("lb-dsatw", bins=2, epsilon=1.0, window=20).params.c == 10  # default max(1, w // 2)
    with pytest.raises(ValueError, match="cutoff"):
        make_mechanism("lp-dsatw", bins=2, epsilon=1.0, window=1, cutoff=2)
