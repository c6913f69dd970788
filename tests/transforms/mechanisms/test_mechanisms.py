"""Behaviour every mechanism must have, through the real ``step``."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanism_helpers import run_with_ledger
from streams import DYNAMIC, HOMOGENEOUS, StreamSpec, stream_specs
from tests.pipelines.broken_mechanisms import ForgetfulBA, ForgetfulPBA
from transforms.mechanisms import (MECHANISMS, PUBLICATION, DynamicRequirements, Estimate, Family, FixedRequirement,
                                   FixedRequirements, ReleaseKind, SlotBatch, TrustModel, make_mechanism, names_of)
from transforms.mechanisms.ldp.extensions import default_cutoff
from transforms.mechanisms.ldp.oracles import MAX_LDP_EPSILON_UNITS
from transforms.mechanisms.noise import insecure_seeded_randomness

LIFETIME = sorted(names_of(Family.LIFETIME))
"""DPI's lifetime budgets: the tests below declare windowed requirements, which a lifetime mechanism refuses, and
expect noisy counts (DPI releases pool synopses); ``dpi/test_dpi_stream.py`` has their lifetime counterparts
(the ledger, a state round trip, empty slots, a bad batch)."""
ALL = sorted(set(MECHANISMS) - set(LIFETIME))
FIXED = [name for name in ALL if name not in DYNAMIC]
CENTRAL = [name for name in ALL if MECHANISMS[name].trust is TrustModel.CENTRAL]
LOCAL = [name for name in ALL if name not in CENTRAL]
NUMERIC = [name for name in ALL if MECHANISMS[name].estimates is Estimate.MEAN]
BINNED = [name for name in ALL if name not in NUMERIC]
"""The tests that feed bins and compare histograms directly run BINNED: see the first test below."""
LARGEST_REPORT_EPSILON = MAX_LDP_EPSILON_UNITS // 10**12

specs = stream_specs()


def domain_of(name: str) -> tuple[dict, object]:
    """``name``'s domain parameters and a value in it: two bins, or real values in [0, 1] for a mean."""
    return ({"bins": 1, "low": 0.0, "high": 1.0}, 0.5) if name in NUMERIC else ({"bins": 2}, 0)


@pytest.mark.parametrize("name", NUMERIC)
def test_numeric_methods_refuse_bins_and_are_run_on_real_values_elsewhere(name):
    """Why the tests that feed bins (empty slots, tiny budgets, bad batches, budgets at the edges) run BINNED only.

    A mean-estimating method takes real values in an interval and refuses bins; the tests driven by
    ``StreamSpec`` (the ledger, state round trips) run it on real values, and ``ldp/test_ldp_mean.py`` has
    the numeric counterparts of the others.
    """
    mechanism = make_mechanism(name, epsilon=1.0, window=2, low=0.0, high=3.0)
    with pytest.raises(ValueError, match="float64"):
        mechanism.step(SlotBatch.of([0], [2], FixedRequirements.of([2], [1.0])), insecure_seeded_randomness(0))
    assert mechanism.slot == 0


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, name=st.sampled_from(ALL))
def test_no_window_ever_exceeds_the_requirement(spec, name):
    """The ledger, fed every charge, finds no window over its requirement (fixed and dynamic)."""
    spec = spec.for_mechanism(name)
    mechanism = make_mechanism(name, **spec.mechanism_kwargs(name))
    dynamic = name in DYNAMIC
    if name in HOMOGENEOUS:  # homogeneous baselines do not take requirement changes stricter than (ε, w)
        spec = StreamSpec(**{**spec.__dict__, "change": spec.change})
    releases, ledger = run_with_ledger(mechanism, spec.batches(dynamic=dynamic), seed=spec.seed,
                                       max_window=max(spec.windows))
    assert ledger.violation_count == 0, [str(v) for v in ledger.violations[:3]]
    assert ledger.max_usage_ratio <= 1
    assert [r.slot for r in releases] == list(range(1, spec.slots + 1))


@settings(max_examples=25, deadline=None)
@given(spec=specs)
def test_dpbd_equals_pbd_under_constant_requirements(spec):
    """Constant forward (w, E) and a backward requirement that never binds: identical runs."""
    spec = StreamSpec(**{**spec.__dict__, "change": 0.0, "join_spread": 0, "presence": 1.0})
    fixed_batches = spec.batches(dynamic=False)
    dynamic_batches = [SlotBatch(b.users, b.values, DynamicRequirements.from_fixed(b.requirements, 10**16))
                       for b in fixed_batches]
    pbd, _ = run_with_ledger(make_mechanism("pbd", bins=spec.bins), fixed_batches, seed=spec.seed)
    dpbd, _ = run_with_ledger(make_mechanism("dpbd", bins=spec.bins, max_window=12), dynamic_batches,
                              seed=spec.seed)
    for a, b in zip(pbd, dpbd):
        assert a.kind == b.kind
        assert np.array_equal(a.histogram, b.histogram)
        assert np.array_equal(a.charges.units, b.charges.units)


def one_hot_stream(users: int, bins: int, slots: int, seed: int):
    gen = np.random.default_rng(seed)
    return [gen.integers(0, bins, users) for _ in range(slots)]


def shared_requirement(name: str, users: int, bins: int, window: int, epsilon: float):
    """Mechanism ``name`` and requirement rows for ``users`` who all ask for ``(window, epsilon)``."""
    reqs = FixedRequirements.of([window] * users, [epsilon] * users)
    kwargs = {"bins": bins}
    if name in HOMOGENEOUS:
        kwargs.update(epsilon=epsilon, window=window)
    if name in DYNAMIC:
        kwargs.update(max_window=window)
        reqs = DynamicRequirements.from_fixed(reqs)
    return make_mechanism(name, **kwargs), reqs


@pytest.mark.parametrize("name", CENTRAL)
def test_huge_epsilon_releases_the_truth(name):
    """With E = 1000 per user the noise is essentially zero: every release equals the true histogram.

    The noise scales are at most 2w/E = 0.024, so a draw is non-zero with probability
    below 2e^{-40}; over 30 slots x 4 bins the false-failure probability is < 1e-15.
    """
    users, bins = 50, 4
    mechanism, reqs = shared_requirement(name, users, bins, window=6, epsilon=1000.0)
    values = one_hot_stream(users, bins, 30, seed=3)
    releases, ledger = run_with_ledger(mechanism, [SlotBatch.of(np.arange(users), v, reqs) for v in values])
    assert ledger.ok
    for release, v in zip(releases, values):
        if name == "sample" or release.kind is ReleaseKind.NULLIFIED:
            continue  # sample and nullified slots repeat the last release by design
        assert np.array_equal(release.histogram, np.bincount(v, minlength=bins)), (name, release.slot)


@pytest.mark.parametrize("name", BINNED)
def test_tiny_epsilon_releases_are_visibly_noisy(name):
    """With E = 0.001, releases are far from the truth (noisy or stale).

    1000 users in 2 bins: a fresh release has noise of scale >= 2000 per bin, so its mean
    absolute error is below 50 with probability < 1e-3 per slot; a repeated one is off by
    the drift of the data (~500). Averaged over 20 slots, false failure < 1e-12.
    """
    users, bins = 1000, 2
    mechanism, reqs = shared_requirement(name, users, bins, window=2, epsilon=0.001)
    values = one_hot_stream(users, bins, 20, seed=4)
    releases, _ = run_with_ledger(mechanism, [SlotBatch.of(np.arange(users), v, reqs) for v in values])
    errors = [np.abs(r.histogram - np.bincount(v, minlength=bins)).mean() for r, v in zip(releases, values)]
    assert np.mean(errors) > 50


@pytest.mark.parametrize("name", BINNED)
def test_empty_slots_and_a_single_user(name):
    """Slots where nobody reports are released like any other; one user alone works."""
    mechanism, reqs = shared_requirement(name, users=1, bins=3, window=3, epsilon=1.0)
    batches = [SlotBatch.empty(), SlotBatch.of([7], [2], reqs), SlotBatch.empty(), SlotBatch.empty(),
               SlotBatch.of([7], [1]), SlotBatch.empty()]
    releases, ledger = run_with_ledger(mechanism, batches)
    assert [r.slot for r in releases] == [1, 2, 3, 4, 5, 6]
    assert all(r.histogram.shape == (3,) for r in releases)
    assert list(releases[0].charges.users) == []
    assert all(list(r.charges.users) == [7] for r in releases[1:])  # registered, so charged while absent
    assert ledger.ok


def multi_share_run(mechanism, slots=120):
    """A stream that sits still for a while, then jumps: absorption must use several shares."""
    users = 400
    reqs = FixedRequirements.of([8] * users, [2.0] * users)
    batches = []
    for t in range(slots):
        values = np.full(users, 0 if (t // 15) % 2 == 0 else 1)
        batches.append(SlotBatch.of(np.arange(users), values, reqs if t == 0 else None))
    return run_with_ledger(mechanism, batches, seed=11)


@pytest.mark.parametrize("name", ["ba", "pba"])
def test_absorption_nullifies_after_a_multi_share_publication(name):
    """After a publication with k shares, the next k-1 slots are nullified (the authors' code never does this)."""
    kwargs = {"bins": 2} if name == "pba" else {"bins": 2, "epsilon": 2.0, "window": 8}
    releases, ledger = multi_share_run(make_mechanism(name, **kwargs))
    share = 2 * 10**12 // 16
    multi = 0
    for i, release in enumerate(releases):
        if release.kind is ReleaseKind.FRESH:
            shares = int(release.charges.part_units(PUBLICATION).max()) // share
            following = [r.kind for r in releases[i + 1:i + shares]]
            assert following == [ReleaseKind.NULLIFIED] * len(following), (release.slot, shares)
            multi += shares > 1
    assert multi >= 2, "the stream must produce multi-share publications (power of this test)"
    assert ledger.ok


@pytest.mark.parametrize("broken", [ForgetfulBA, ForgetfulPBA])
def test_the_ledger_catches_the_reference_codes_absorption_bug(broken):
    from transforms.mechanisms.base import HomogeneousParams, MechanismParams

    params = HomogeneousParams(bins=2, epsilon=2.0, window=8) if broken is ForgetfulBA else MechanismParams(bins=2)
    _, ledger = multi_share_run(broken(params))
    assert not ledger.ok
    assert ledger.max_usage_ratio > 1.5


@pytest.mark.parametrize("name", ALL)
def test_state_round_trips_and_a_resumed_run_continues_identically(name):
    spec = StreamSpec(seed=5, users=30, bins=3, slots=60, windows=(3, 5), epsilons=(0.5, 1.0),
                      presence=0.8, change=0.05, join_spread=10).for_mechanism(name)
    kwargs = spec.mechanism_kwargs(name)
    batches = spec.batches(dynamic=name in DYNAMIC)
    full, _ = run_with_ledger(make_mechanism(name, **kwargs), batches, seed=9)

    first, rng = make_mechanism(name, **kwargs), insecure_seeded_randomness(9)
    head = [first.step(b, rng) for b in batches[:25]]
    by_bytes = type(first).from_bytes(first.params, first.to_bytes())
    by_pickle = pickle.loads(pickle.dumps(first))
    rng_bytes = pickle.dumps(rng)
    for resumed in (first, by_bytes, by_pickle):
        resumed_rng = pickle.loads(rng_bytes)
        tail = [resumed.step(b, resumed_rng) for b in batches[25:]]
        for a, b in zip(full, head + tail):
            assert (a.slot, a.kind) == (b.slot, b.kind)
            assert np.array_equal(a.histogram, b.histogram)
            assert np.array_equal(a.charges.units, b.charges.units)


def test_state_from_other_parameters_is_refused():
    pbd = make_mechanism("pbd", bins=3)
    with pytest.raises(ValueError, match="different parameters"):
        type(pbd).from_bytes(make_mechanism("pbd", bins=4).params, pbd.to_bytes())
    with pytest.raises(ValueError, match="saved by pbd"):
        MECHANISMS["pba"].from_bytes(pbd.params, pbd.to_bytes())


def test_state_saved_before_a_new_option_existed_resumes_while_the_option_holds_its_default():
    """A parameter added since a state was saved (its JSON lacks the field) matches only at the field's default."""
    capp = make_mechanism("capp", epsilon=2.0, window=3, low=0.0, high=1.0)
    older = json.loads(capp.params.to_json())
    del older["crowd_window"], older["crowd_bins"]
    assert capp.params.matches_json(json.dumps(older)) and capp.params.matches_json(capp.params.to_json())
    crowd = make_mechanism("capp", epsilon=2.0, window=3, low=0.0, high=1.0, crowd_window=3, crowd_bins=4)
    assert not crowd.params.matches_json(json.dumps(older))
    assert not capp.params.matches_json(json.dumps({**older, "removed_option": 1}))
    assert not capp.params.matches_json(json.dumps({**older, "window": 4}))


@pytest.mark.parametrize("kwargs, names", [
    ({"bins": 0}, "bins"), ({"bins": -2}, "bins"), ({"bins": 2.5}, "bins"), ({"bins": 2, "sensitivity": 0}, "sensitivity"),
    ({"bins": 2, "error_model": "gaussian"}, "error_model"),
])
@pytest.mark.parametrize("name", ALL + LIFETIME)
def test_bad_shared_parameters_are_named(name, kwargs, names):
    extra = {"epsilon": 1.0, "window": 2} if name in HOMOGENEOUS else {"epsilon": 1.0} if name in LIFETIME else {}
    if name in NUMERIC:
        extra.update(low=0.0, high=1.0)
    with pytest.raises(ValueError, match=names):
        make_mechanism(name, **{**extra, **kwargs})


@pytest.mark.parametrize("name", HOMOGENEOUS)
@pytest.mark.parametrize("epsilon, window, names", [
    (0.0, 2, "epsilon"), (-1.0, 2, "epsilon"), (float("nan"), 2, "epsilon"), (float("inf"), 2, "epsilon"),
    (1.0, 0, "window"), (1.0, -3, "window"), (1e-12, 5, "epsilon"),
])
def test_bad_homogeneous_parameters_are_named(name, epsilon, window, names):
    with pytest.raises(ValueError, match=names):
        make_mechanism(name, **domain_of(name)[0], epsilon=epsilon, window=window)


def test_unknown_mechanism_and_parameter():
    with pytest.raises(ValueError, match="unknown mechanism 'xyz'.*pbd"):
        make_mechanism("xyz", bins=2)
    with pytest.raises(ValueError, match="does not take window"):
        make_mechanism("pbd", bins=2, window=3)
    with pytest.raises(ValueError, match="max_window"):
        make_mechanism("dpbd", bins=2, max_window=0)


@pytest.mark.parametrize("window, epsilon, names", [
    ([0], [1.0], "window"), ([3], [0.0], "epsilon"), ([3], [-0.5], "epsilon"), ([3], [float("nan")], "epsilon"),
    ([2.5], [1.0], "window"), ([3, 4], [1.0], "epsilon"),
])
def test_bad_requirements_are_named(window, epsilon, names):
    with pytest.raises(ValueError, match=names):
        FixedRequirements.of(window, epsilon)
    with pytest.raises(ValueError, match=names):
        DynamicRequirements.of(window, epsilon, window, epsilon)


@pytest.mark.parametrize("name", BINNED)
def test_a_bad_batch_changes_nothing(name):
    """A rejected slot raises ValueError naming the problem and leaves the state as it was."""
    dynamic = name in DYNAMIC
    kwargs = {"bins": 3, **({"epsilon": 1.0, "window": 4} if name in HOMOGENEOUS else {}),
              **({"max_window": 4} if dynamic else {})}
    mechanism = make_mechanism(name, **kwargs)
    reqs = FixedRequirements.of([4, 4], [1.0, 1.0])
    reqs = DynamicRequirements.from_fixed(reqs) if dynamic else reqs
    rng = insecure_seeded_randomness(0)
    mechanism.step(SlotBatch.of([0, 1], [0, 2], reqs), rng)
    before = mechanism.to_bytes()
    bad_batches = {
        "values must be bins": SlotBatch.of([0, 1], [0, 3]),
        "values must be bins in": SlotBatch.of(range(2), [-2, 0]),  # every user: values still checked
        "must be int64": SlotBatch(np.array([0, 1]), np.array([0.0, 1.0])),
        "users has 2 entries but values has 1": SlotBatch.of([0, 1], [0]),
        "distinct": SlotBatch.of([0, 0], [0, 1]),
        "non-negative": SlotBatch.of([-1], [0]),
        "no requirement": SlotBatch.of([5], [0]),
        "requirements has 2 rows": SlotBatch.of([0], [0], reqs),
    }
    for message, batch in bad_batches.items():
        with pytest.raises(ValueError, match=message):
            mechanism.step(batch, rng)
        assert mechanism.to_bytes() == before
    if dynamic:
        too_long = DynamicRequirements.of([1], [1.0], [9], [1.0])
        with pytest.raises(ValueError, match="max_window"):
            mechanism.step(SlotBatch.of([0], [0], too_long), rng)
    else:
        wrong_kind = DynamicRequirements.from_fixed(FixedRequirements.of([4], [1.0]))
        with pytest.raises(ValueError, match="takes FixedRequirements"):
            mechanism.step(SlotBatch.of([0], [0], wrong_kind), rng)
    assert mechanism.to_bytes() == before


@pytest.mark.parametrize("name", HOMOGENEOUS)
def test_homogeneous_baselines_refuse_stricter_requirements(name):
    domain, value = domain_of(name)
    mechanism = make_mechanism(name, **domain, epsilon=0.5, window=10)
    with pytest.raises(ValueError, match=r"user 3 requires \(w=20, E=0.5\)"):
        mechanism.step(SlotBatch.of([3], [value], FixedRequirements.of([20], [0.5])), insecure_seeded_randomness(0))
    with pytest.raises(ValueError, match=r"E=0.4"):
        mechanism.step(SlotBatch.of([3], [value], FixedRequirements.of([5], [0.4])), insecure_seeded_randomness(0))


def test_default_requirement_registers_users_without_one():
    pbd = make_mechanism("pbd", bins=2, default_requirement=FixedRequirement(window=4, epsilon=1.0))
    release = pbd.step(SlotBatch.of([2, 9], [0, 1]), insecure_seeded_randomness(0))
    assert list(release.charges.users) == [2, 9]
    assert list(release.charges.requirements.window) == [4, 4]
    with pytest.raises(ValueError, match="default_requirement must be a DynamicRequirement"):
        make_mechanism("dpbd", bins=2, default_requirement=FixedRequirement(window=4, epsilon=1.0))


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [1e-6, 100.0])
@pytest.mark.parametrize("window", [1, 10_000])
@pytest.mark.parametrize("name", BINNED)
def test_budgets_at_the_edges_neither_overspend_nor_crash(name, epsilon, window):
    """E from 1e-6 to 100 and w from 1 to 10,000: the ledger finds no window over its requirement.

    A local-DP method refuses, in one line, a budget one report cannot spend (above 20), and the
    population methods of fewer than ``2w`` users never ask anyone (``floor(n/(2w)) = 0``: spec trap T18).
    """
    users, bins = 20, 3
    local = name in LOCAL
    shares = {"lbu": window, "plbu": window, "lb-dsatw": 2 * default_cutoff(window)}.get(name, 1)  # per report
    if local and epsilon / shares > LARGEST_REPORT_EPSILON:
        with pytest.raises(ValueError, match="per-report|per-slot budget"):
            mechanism, reqs = shared_requirement(name, users, bins, window=window, epsilon=epsilon)
            mechanism.step(SlotBatch.of(np.arange(users), np.zeros(users, np.int64), reqs), None)
        return
    mechanism, reqs = shared_requirement(name, users, bins, window=window, epsilon=epsilon)
    gen = np.random.default_rng(8)
    batches = [SlotBatch.of(np.arange(users), gen.integers(0, bins, users), reqs) for _ in range(40)]
    releases, ledger = run_with_ledger(mechanism, batches, max_window=window)
    assert ledger.ok, [str(v) for v in ledger.violations[:3]]
    if name in ("lpd", "lpa", "lp-dsatw") and users < 2 * window:
        assert ledger.max_usage_ratio == 0
    else:
        assert 0 < ledger.max_usage_ratio <= 1
    assert len(releases) == 40


def test_a_state_resumes_whatever_its_operational_fields_were():
    """DPI's pool cache changes memory, never a release: a state saved with one cache size resumes with another
    (and from before the default changed), while a semantic field still has to match."""
    lazy = make_mechanism("dpi-sound", bins=5, epsilon=1.0, pool_size=20, draws=2)
    cached = make_mechanism("dpi-sound", bins=5, epsilon=1.0, pool_size=20, draws=2, pool_cache_mb=256)
    assert lazy.params.pool_cache_mb == 0 and lazy.params.matches_json(cached.params.to_json())
    restored = type(lazy).from_bytes(lazy.params, cached.to_bytes())
    assert restored.params == lazy.params
    other_seed = make_mechanism("dpi-sound", bins=5, epsilon=1.0, pool_size=20, draws=2, pool_seed=1)
    assert not lazy.params.matches_json(other_seed.params.to_json())
