"""The ledger checks windows exactly, for fixed and dynamic requirements."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from per_user_ledger import PerUserLedger
from streams import StreamSpec
from transforms.mechanisms.engine import Engine
from transforms.mechanisms import (DISSIMILARITY, PUBLICATION, CohortCharges, DynamicRequirements, Family,
                                   FixedRequirements, PrivacyLedger, SlotBatch, make_mechanism)
from transforms.mechanisms.budget import MAX_EPSILON, UNITS_PER_EPSILON
from transforms.mechanisms.evidence import no_statistics
from mechanism_helpers import declaring
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.population import UNREGISTERED, WAITING


def charges(units, requirements, dissimilarity=None) -> CohortCharges:
    """Charges for users 0..n-1, each in their own cohort (``units`` of publication, plus ``dissimilarity``)."""
    n = len(units)
    dc = np.zeros(n, np.int64) if dissimilarity is None else np.asarray(dissimilarity, np.int64)
    return CohortCharges(cohort_of=np.arange(n),
                         cohort_parts={DISSIMILARITY: dc, PUBLICATION: np.asarray(units, np.int64)},
                         cohort_requirements=requirements, waiting_users=np.zeros(0, np.int64),
                         waiting_requirements=None, evidence=no_statistics(np.arange(n)),
                         declarations=declaring(np.arange(n), requirements))


def brute_force_max_ratio(history: np.ndarray, windows: np.ndarray, bounds: np.ndarray) -> float:
    worst = 0.0
    for t in range(history.shape[0]):
        for u in range(history.shape[1]):
            worst = max(worst, history[max(0, t - windows[u] + 1):t + 1, u].sum() / bounds[u])
    return worst


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), users=st.integers(1, 6), slots=st.integers(1, 40))
def test_fixed_windows_match_brute_force(seed, users, slots):
    gen = np.random.default_rng(seed)
    windows = gen.integers(1, 8, users)
    bounds = gen.integers(1, 10**6, users)
    history = gen.integers(0, 3 * 10**5, (slots, users))
    ledger = PrivacyLedger(max_window=8)
    reqs = FixedRequirements(windows, bounds)
    for t in range(slots):
        ledger.record(t + 1, charges(history[t], reqs))
    expected = brute_force_max_ratio(history, windows, bounds)
    assert ledger.max_usage_ratio == pytest.approx(expected, rel=1e-12)
    assert (ledger.violation_count > 0) == (expected > 1)


def test_dynamic_backward_and_forward_windows():
    ledger = PrivacyLedger(max_window=5)
    u = UNITS_PER_EPSILON
    # one user declares at slot 1 a forward window of 3 with E_F = 1; later declarations are loose
    declarations = [DynamicRequirements(np.array([1]), np.array([10 * u]), np.array([3]), np.array([1 * u]))] + \
        [DynamicRequirements(np.array([1]), np.array([10 * u]), np.array([1]), np.array([10 * u]))] * 3
    spend = [u // 2, u // 2, u // 10, 0]  # slots 1..3 spend 1.1 > 1: the forward window of slot 1 is violated
    for t, (reqs, units) in enumerate(zip(declarations, spend), start=1):
        ledger.record(t, charges([units], reqs))
    assert ledger.violation_count == 1
    violation = ledger.violations[0]
    assert (violation.kind, violation.slot, violation.window_units) == ("forward", 3, 11 * u // 10)
    assert "spent 1.1 > 1" in str(violation)


def test_open_forward_windows_are_checked_at_close():
    ledger = PrivacyLedger(max_window=10)
    u = UNITS_PER_EPSILON
    reqs = DynamicRequirements(np.array([1]), np.array([10 * u]), np.array([10]), np.array([u]))
    for t in range(1, 4):
        ledger.record(t, charges([u // 2], reqs))
    assert ledger.ok  # no forward window has closed yet
    ledger.close()
    assert not ledger.ok


def test_backward_window_violation():
    ledger = PrivacyLedger(max_window=4)
    u = UNITS_PER_EPSILON
    reqs = DynamicRequirements(np.array([3]), np.array([u]), np.array([1]), np.array([10 * u]))
    for t, units in enumerate([u // 2, u // 2, 2], start=1):  # half to each part, like PWSM
        ledger.record(t, charges([units // 2], reqs, [units // 2]))
    assert ledger.violation_count == 1 and ledger.violations[0].kind == "backward"


def test_a_backward_budget_the_window_already_passed_is_projected_from_the_ledgers_own_sums():
    """Spec §1.6: with every charge in the publication part, 2·Σε^(2) = 2 > E_B = 1 is the bound in force."""
    u = UNITS_PER_EPSILON
    reqs = DynamicRequirements(np.array([3]), np.array([u]), np.array([1]), np.array([10 * u]))
    for extra, violations in ((u - 1, 0), (u + 1, 1)):
        ledger = PrivacyLedger(max_window=4)
        for t, units in enumerate([u // 2, u // 2, extra], start=1):
            ledger.record(t, charges([units], reqs))
        assert ledger.violation_count == violations


def test_window_sums_stay_exact_after_the_running_totals_wrap():
    """Charges of the largest budget for 6000 slots push totals past 2^64; windows stay exact."""
    ledger = PrivacyLedger(max_window=3)
    big = MAX_EPSILON * UNITS_PER_EPSILON // 3
    reqs = FixedRequirements(np.array([3]), np.array([MAX_EPSILON * UNITS_PER_EPSILON]))
    for t in range(1, 6001):
        ledger.record(t, charges([big - (t % 2)], reqs))
    assert 6000 * big > 2**64
    assert ledger.window_sum(0, 5998, 6000) == 3 * big - 1
    assert ledger.ok and ledger.max_usage_ratio < 1


def test_slots_must_arrive_in_order():
    ledger = PrivacyLedger(max_window=2)
    reqs = FixedRequirements(np.array([1]), np.array([5]))
    ledger.record(1, charges([1], reqs))
    with pytest.raises(ValueError, match="expected slot 2, got 3"):
        ledger.record(3, charges([1], reqs))
    with pytest.raises(ValueError, match="max_window"):
        ledger.record(2, charges([1], FixedRequirements(np.array([3]), np.array([5]))))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), users=st.integers(1, 6), slots=st.integers(2, 30), data=st.data())
def test_a_ledger_restored_mid_stream_continues_exactly(seed, users, slots, data):
    """Save after any slot, restore, go on: same verdicts and window sums as an uninterrupted ledger."""
    gen = np.random.default_rng(seed)
    u = UNITS_PER_EPSILON
    stop = data.draw(st.integers(1, slots - 1))
    history = gen.integers(0, u // 3, (slots, users))
    declarations = [DynamicRequirements(gen.integers(1, 4, users), np.full(users, u),
                                        gen.integers(1, 6, users), gen.integers(u // 2, u, users))
                    for _ in range(slots)]
    whole, first = PrivacyLedger(max_window=6, max_violations_kept=3), PrivacyLedger(6, max_violations_kept=3)
    for t in range(slots):
        whole.record(t + 1, charges(history[t], declarations[t]))
        if t < stop:
            first.record(t + 1, charges(history[t], declarations[t]))
    resumed = PrivacyLedger.from_bytes(first.to_bytes())
    for t in range(stop, slots):
        resumed.record(t + 1, charges(history[t], declarations[t]))
    whole.close()
    resumed.close()
    assert (resumed.slot, resumed.max_usage_ratio, resumed.violation_count) == \
        (whole.slot, whole.max_usage_ratio, whole.violation_count)
    assert resumed.violations == whole.violations
    first_slot = max(1, slots - 5)
    assert [resumed.window_sum(i, first_slot, slots) for i in range(users)] == \
        [whole.window_sum(i, first_slot, slots) for i in range(users)]


# ------------------------------------------------------------------ the class-based ledger equals the per-user one
def random_charges(gen: np.random.Generator, previous: np.ndarray, users: int, dynamic: bool,
                   max_window: int) -> CohortCharges:
    """One slot's charges: users mostly stay in their cohort row, some move, join, leave or wait."""
    rows = gen.integers(1, 5)
    cohort_of = np.full(users, UNREGISTERED)
    cohort_of[:previous.size] = previous
    moving = gen.random(users) < gen.choice([0.0, 0.05, 0.5])
    choices = [UNREGISTERED] if dynamic else [UNREGISTERED, WAITING]
    cohort_of[moving] = gen.choice(np.concatenate([choices, np.arange(rows)]), int(moving.sum()))
    cohort_of[cohort_of >= rows] = gen.integers(0, rows, int((cohort_of >= rows).sum()))  # rows renumbered
    u = UNITS_PER_EPSILON
    windows = gen.integers(1, max_window + 1, rows)
    if dynamic:
        requirements = DynamicRequirements(gen.integers(1, max_window + 1, rows), gen.integers(u // 2, 2 * u, rows),
                                           windows, gen.integers(u // 2, 2 * u, rows))
    else:
        requirements = FixedRequirements(windows, gen.integers(u // 2, 2 * u, rows))
    waiting = np.flatnonzero(cohort_of == WAITING)
    # what users declare: the row's requirement for most, anything for a few, nothing at some slots
    declare = np.flatnonzero(gen.random(users) < gen.choice([0.0, 0.3, 1.0]))
    take = np.where(cohort_of[declare] >= 0, cohort_of[declare], gen.integers(0, rows, declare.size))
    odd = gen.random(declare.size) < 0.2
    take[odd] = gen.integers(0, rows, int(odd.sum()))
    declared = requirements.take(take)
    return CohortCharges(cohort_of=cohort_of, cohort_parts={
                           DISSIMILARITY: gen.integers(0, u // 4, rows),
                           PUBLICATION: gen.integers(0, u // 8, rows) * (gen.random(rows) < 0.5)},
                         cohort_requirements=requirements, waiting_users=waiting,
                         waiting_requirements=FixedRequirements(gen.integers(1, min(3, max_window + 1), waiting.size),
                                                                np.full(waiting.size, u)) if waiting.size else None,
                         evidence=no_statistics(cohort_of), declarations=declaring(declare, declared),
                         default_requirement=requirements.take(np.zeros(1, np.int64)))


def assert_same(ledger: PrivacyLedger, reference: PerUserLedger, users: int) -> None:
    assert (ledger.slot, ledger.max_usage_ratio, ledger.violation_count) == \
        (reference.slot, reference.max_usage_ratio, reference.violation_count)
    assert ledger.violations == reference.violations
    for first in range(max(1, ledger.slot - ledger.max_window + 1), ledger.slot + 1):
        assert [ledger.window_sum(i, first, ledger.slot) for i in range(users)] == \
            [reference.window_sum(i, first, ledger.slot) for i in range(users)]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9), dynamic=st.booleans(), slots=st.integers(1, 40), data=st.data())
def test_the_ledger_equals_the_per_user_check(seed, dynamic, slots, data):
    """Cohort moves, joins, renumbered rows, waiting users, growth, restores: verdicts user by user."""
    gen = np.random.default_rng(seed)
    max_window = data.draw(st.integers(1, 6))
    kept = data.draw(st.integers(0, 20))
    restore_at = data.draw(st.integers(0, slots))
    ledger, reference = PrivacyLedger(max_window, kept), PerUserLedger(max_window, kept)
    cohort_of = np.zeros(0, np.int64)
    for slot in range(1, slots + 1):
        users = cohort_of.size + int(gen.integers(0, 3)) * int(gen.random() < 0.3) + (slot == 1)
        charges = random_charges(gen, cohort_of, users, dynamic, max_window)
        cohort_of = charges.cohort_of
        ledger.record(slot, charges)
        reference.record(slot, charges)
        if slot == restore_at:
            ledger = PrivacyLedger.from_bytes(ledger.to_bytes())
        assert_same(ledger, reference, users + 2)
    ledger.close()
    reference.close()
    assert_same(ledger, reference, cohort_of.size)


def test_a_steady_population_is_checked_as_a_few_classes():
    """Ten cohorts of a thousand users: ten running totals, violations still counted (and named) per user."""
    ledger = PrivacyLedger(max_window=3, max_violations_kept=5)
    cohort_of = np.repeat(np.arange(10), 1000)
    reqs = FixedRequirements(np.full(10, 3), np.full(10, 10))
    for slot in range(1, 6):
        ledger.record(slot, CohortCharges(cohort_of=cohort_of, cohort_parts={
                                            DISSIMILARITY: np.arange(10), PUBLICATION: np.zeros(10, np.int64)},
                                          cohort_requirements=reqs,
                                          waiting_users=np.zeros(0, np.int64), waiting_requirements=None,
                                          evidence=no_statistics(cohort_of),
                                          declarations=declaring(np.arange(10000) if slot == 1 else [],
                                                                 reqs.take(cohort_of) if slot == 1 else None)))
    assert ledger._totals.shape[1] == 10  # one running total per cohort
    # cohort k spends k per slot: cohorts 6..9 exceed 10 from slot 2 on, cohorts 4 and 5 from slot 3 on
    assert ledger.violation_count == 4 * 4000 + 2 * 3000
    assert [(v.user, v.slot, v.window_units) for v in ledger.violations] == [(6000 + i, 2, 12) for i in range(5)]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), name=st.sampled_from(["ba", "pbd", "pba", "dpbd", "dpba"]),
       change=st.sampled_from([0.0, 0.1, 0.4]), join_spread=st.integers(0, 8))
def test_the_ledger_equals_the_per_user_check_on_mechanisms(seed, name, change, join_spread):
    """The charges real mechanisms make (joins, requirement changes, waiting users): verdicts user by user."""
    spec = StreamSpec(seed=seed, users=30, bins=3, slots=40, windows=(2, 3, 5), epsilons=(0.4, 1.0),
                      presence=0.7, change=change, join_spread=join_spread)
    mechanism = make_mechanism(name, **spec.mechanism_kwargs(name))
    dynamic = Family.of(name) is Family.DYNAMIC
    engine = Engine(mechanism, insecure_seeded_randomness(seed), PrivacyLedger(max_window=5))
    ledger, reference = engine.ledger, PerUserLedger(max_window=5)
    for release in engine.run(spec.batches(dynamic=dynamic)):
        reference.record(release.slot, release.charges)
    engine.close()
    reference.close()
    assert_same(ledger, reference, spec.users)


@pytest.mark.parametrize("broken", [False, True])
def test_the_ledger_checks_what_users_declared_not_what_the_mechanism_applied(broken, monkeypatch):
    """Power: a mechanism that ignores a change to a stricter requirement reports the old one in force.

    Users declare (w=2, E=1) and, at slot 3, (w=2, E=0.2): by the public rule the new requirement is
    in force from slot 4.  A ledger reading the mechanism's cohorts would check E=1 and pass.
    """
    import transforms.mechanisms.pwsm as pwsm
    from transforms.mechanisms.population import FixedCohorts

    monkeypatch.setattr(pwsm, "is_fresh_publication", lambda *args: True)
    if broken:
        declare = FixedCohorts._declare

        def only_joiners(self, batch, slot, rows):
            if rows.min(initial=0) < 0:
                declare(self, batch, slot, rows)

        monkeypatch.setattr(FixedCohorts, "_declare", only_joiners)
    pbd = make_mechanism("pbd", bins=2)
    users = np.arange(20)
    loose, strict = FixedRequirements.of([2] * 20, [1.0] * 20), FixedRequirements.of([2] * 20, [0.2] * 20)
    batches = [SlotBatch.of(users, users % 2, reqs) for reqs in (loose, None, strict, None, None, None)]
    engine = Engine(pbd, insecure_seeded_randomness(0), PrivacyLedger(max_window=4))
    for _ in engine.run(batches):
        pass
    ledger = engine.ledger
    if broken:
        assert ledger.violation_count > 0 and {v.kind for v in ledger.violations} == {"fixed"}
        assert all(v.bound_units == UNITS_PER_EPSILON // 5 for v in ledger.violations)
    else:
        assert ledger.ok
