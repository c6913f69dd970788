"""The adaptive mechanism (transforms/mechanisms/adaptive.py): its budget rule, its privacy, its registration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanism_helpers import drive, run_with_ledger, units
from streams import StreamSpec, stream_specs
from transforms.mechanisms import (MECHANISMS, DynamicRequirements, FixedRequirements, ReleaseKind, SlotBatch,
                                   make_mechanism)
from transforms.mechanisms.adaptive import (SCALE_STEPS, Adaptive, AdaptiveParams, DynamicAdaptive,
                                           DynamicAdaptiveParams)
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.obs import optimal_budget

specs = stream_specs(max_slots=60, max_join_spread=20, dynamic=st.booleans())


def build(spec: StreamSpec, margin: float, resolution: float = 0.5):
    if spec.dynamic:
        return DynamicAdaptive(DynamicAdaptiveParams(bins=spec.bins, max_window=max(spec.windows), margin=margin,
                                                     resolution=resolution))
    return Adaptive(AdaptiveParams(bins=spec.bins, margin=margin, resolution=resolution))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, margin=st.sampled_from([0.0, 1.0, 3.0]), resolution=st.sampled_from([0.0, 0.5, 4.0]))
def test_the_ledger_finds_no_violation_with_joins_and_requirement_changes(spec, margin, resolution):
    """Users join late, come and go, and change requirements (fixed ones wait for their window, dynamic ones
    declare new backward and forward requirements); every charge goes to the ledger, which finds no window of
    any user over its requirement."""
    mechanism = build(spec, margin, resolution)
    releases, ledger = run_with_ledger(mechanism, spec.batches(), seed=spec.seed, max_window=max(spec.windows))
    assert ledger.violation_count == 0, [str(v) for v in ledger.violations[:3]]
    assert ledger.max_usage_ratio <= 1
    assert [r.slot for r in releases] == list(range(1, spec.slots + 1))


def test_the_ledger_sees_a_window_spent_in_full():
    """A power check for the previous test: with a huge budget adaptive publishes whenever its windows allow and
    spends a window's whole requirement to the last unit, so an off-by-one in its cap would show."""
    # E = 600 keeps every budget below e^354, above which obs.sampling_errors overflows (a known limit)
    spec = StreamSpec(seed=5, users=20, bins=3, slots=80, windows=(4, 7), epsilons=(600.0,))
    # resolution 0: step 5 would spend less than the cap allows (it only lowers budgets), hiding the cap
    releases, ledger = run_with_ledger(Adaptive(AdaptiveParams(bins=3, resolution=0.0)), spec.batches(),
                                       max_window=7)
    assert ledger.violation_count == 0
    assert ledger.max_usage_ratio == pytest.approx(1.0, abs=1e-9)
    assert sum(r.kind is ReleaseKind.FRESH for r in releases) >= 16  # a fifth of the slots


def one_cohort(window: int, epsilon: float, users: int = 10) -> FixedRequirements:
    return FixedRequirements.of([window] * users, [epsilon] * users)


def test_budget_rule_distributes_after_a_publication_and_absorbs_after_skips():
    """Step 3-4 of the specification with the decisions fixed: w = 4, E = 0.8, share s = 0.1."""
    mechanism = Adaptive(AdaptiveParams(bins=2))
    reqs = one_cohort(4, 0.8)
    batch = SlotBatch.of(np.arange(10), np.zeros(10, np.int64), reqs)
    later = SlotBatch.of(np.arange(10), np.zeros(10, np.int64))
    s = units(0.1)
    # slot 1: cap R = 0.4, k = 1 share: distribute R/2 = 0.2 beats absorbing 0.1
    dc, publication = drive(mechanism, batch, publish=True)
    assert (dc == s).all() and (publication == units(0.2)).all()
    # slot 2 (skipped): R = 0.2, one share since the publication: R/2 = 0.1 = absorbing 0.1
    _, publication = drive(mechanism, later, publish=False)
    assert (publication == units(0.1)).all()
    # slot 3: R = 0.2, two shares absorbed = 0.2 beats R/2 = 0.1
    _, publication = drive(mechanism, later, publish=False)
    assert (publication == units(0.2)).all()
    # slot 4: slot 1 is still in the window, R = 0.2: absorbing three shares (0.3) is capped at 0.2
    _, publication = drive(mechanism, later, publish=False)
    assert (publication == units(0.2)).all()
    # slot 5: slot 1 left the window, R = 0.4: four shares absorbed = 0.4 beats R/2
    _, publication = drive(mechanism, later, publish=True)
    assert (publication == units(0.4)).all() and mechanism.last_publication == 5
    # slots 6-8: the window's whole publication half is spent: nothing to offer, nullified
    for _ in range(3):
        _, publication = drive(mechanism, later, publish=False)
        assert publication is None
    # slot 9: slot 5 left the window, R = 0.4, four shares since it: absorbing 0.4 again
    _, publication = drive(mechanism, later, publish=False)
    assert (publication == units(0.4)).all()


def test_the_margin_asks_for_evidence_beyond_the_dissimilarity_noise():
    """Same data, same noise: a larger margin never publishes more often, and margin 0 is PBD's test."""
    spec = StreamSpec(seed=11, users=400, bins=2, slots=300, windows=(20,), epsilons=(0.6,))
    fresh = []
    for margin in (0.0, 1.0, 4.0):
        releases, _ = run_with_ledger(Adaptive(AdaptiveParams(bins=2, margin=margin)), spec.batches(), seed=3)
        fresh.append(sum(r.kind is ReleaseKind.FRESH for r in releases))
    assert fresh[0] > fresh[1] >= fresh[2]


def test_a_publication_buys_no_finer_error_than_the_dissimilarity_resolves():
    """Step 5 at large E on a 2-bin stream (TLNS-like: 10,000 users, w = 120, E = 1.0): distribution offers
    E/4 = 0.25, whose predicted error is far below the dissimilarity's noise; adaptive spends the smallest
    k/64 of it whose error is below (σ_1/2)², which the next step down (k-1)/64 is not; resolution 0 spends
    the whole candidate."""
    users = 10_000
    batch = SlotBatch.of(np.arange(users), np.zeros(users, np.int64), one_cohort(120, 1.0, users))
    _, whole = drive(Adaptive(AdaptiveParams(bins=2, resolution=0.0)), batch, publish=True)
    assert (whole == units(0.25)).all()
    mechanism = Adaptive(AdaptiveParams(bins=2))
    data = mechanism.admit(batch)
    spent = mechanism.publication_budgets(data)
    first = optimal_budget(mechanism.dc_budgets(data), data.sizes)
    target = (0.5 * mechanism._dc_std(first)) ** 2
    k = int(spent[0]) * SCALE_STEPS // units(0.25)
    assert 1 < k < SCALE_STEPS // 4 and spent[0] == units(0.25) * k // SCALE_STEPS
    assert optimal_budget(spent, data.sizes).error < target
    assert optimal_budget(spent * (k - 1) // k, data.sizes).error >= target


def test_the_resolution_never_raises_a_budget_where_publications_are_coarse():
    """Few users on many bins (a publication's error exceeds σ_1/2 even at the full candidate): step 5 keeps
    the candidate, so the worked example of the budget rule is unchanged."""
    batch = SlotBatch.of(np.arange(10), np.zeros(10, np.int64), one_cohort(4, 0.8))
    _, default = drive(Adaptive(AdaptiveParams(bins=2)), batch, publish=True)
    _, off = drive(Adaptive(AdaptiveParams(bins=2, resolution=0.0)), batch, publish=True)
    assert (default == off).all() and (default == units(0.2)).all()


@pytest.mark.parametrize("name", ["margin", "resolution"])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), True, "1"])
def test_a_bad_margin_or_resolution_is_named(name, value):
    with pytest.raises(ValueError, match=name):
        AdaptiveParams(bins=2, **{name: value})
    with pytest.raises(ValueError, match=name):
        DynamicAdaptiveParams(bins=2, **{name: value})


def test_registered_as_adaptive_and_built_by_name():
    assert MECHANISMS["adaptive"] is Adaptive
    mechanism = make_mechanism("adaptive", bins=3, margin=0.5)
    assert isinstance(mechanism, Adaptive) and mechanism.params.margin == 0.5


def test_dynamic_state_round_trips_and_a_resumed_run_continues_identically():
    spec = StreamSpec(seed=2, users=15, bins=3, slots=40, windows=(3, 6), epsilons=(0.6, 1.0), change=0.2,
                      join_spread=10, dynamic=True)
    params = DynamicAdaptiveParams(bins=3, max_window=6)
    batches = spec.batches()
    whole, _ = run_with_ledger(DynamicAdaptive(params), batches, seed=4, max_window=6)
    first = DynamicAdaptive(params)
    run_with_ledger(first, batches[:20], seed=4, max_window=6)
    resumed = DynamicAdaptive.from_bytes(params, first.to_bytes())
    assert resumed.last_publication == first.last_publication
    # the rest with the same noise as the whole run had from slot 21 on
    rng = insecure_seeded_randomness(4)
    replay = DynamicAdaptive(params)
    for batch in batches[:20]:
        replay.step(batch, rng)
    for batch, expected in zip(batches[20:], whole[20:]):
        got = resumed.step(batch, rng)
        assert got.kind == expected.kind and np.array_equal(got.histogram, expected.histogram)


def test_dynamic_variant_honours_a_tighter_forward_declaration():
    """A forward declaration stays live for its window: the cap is the smallest remainder over live ones."""
    mechanism = DynamicAdaptive(DynamicAdaptiveParams(bins=2, max_window=10))
    users = np.arange(4)
    loose = DynamicRequirements.of([1] * 4, [10.0] * 4, [10] * 4, [2.0] * 4)
    tight = DynamicRequirements.of([1] * 4, [10.0] * 4, [2] * 4, [0.4] * 4)
    drive(mechanism, SlotBatch.of(users, np.zeros(4, np.int64), loose), publish=True)
    mechanism.last_publication = mechanism.slot
    dc, publication = drive(mechanism, SlotBatch.of(users, np.zeros(4, np.int64), tight), publish=False)
    # tight: share 0.4/4 = 0.1, its remainder 0.2 (nothing spent since it was declared): cap 0.2, one share absorbed
    assert (dc == units(0.1)).all()
    assert (publication == units(0.1)).all()
