"""The charges protocol (cohort, reporter and sparse charges) and the core ledger on every shape and requirement kind.

The class-based :class:`PrivacyLedger` must give exactly the verdicts of the
plain per-user reference (``per_user_ledger.py``) on generated streams of all
three charge shapes, under fixed, dynamic and lifetime requirements, across
restores from its checkpoint form; one unit too much is caught for every
shape, and so is one unit too little against the evidence.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from charge_streams import KINDS, SHAPES, ChargeStream, U
from mechanism_helpers import declaring
from per_user_ledger import PerUserLedger
from transforms.mechanisms import (DISSIMILARITY, PUBLICATION, CohortCharges, DynamicRequirements, FixedRequirements,
                                   LifetimeRequirement, LifetimeRequirements, PrivacyLedger, ReporterCharges,
                                   SparseCharges)
from transforms.mechanisms.charges import least_charges_of_registered
from transforms.mechanisms.evidence import CERTAIN, Evidence, Statistic, no_statistics
from transforms.mechanisms.population import UNREGISTERED, WAITING


# ---------------------------------------------------------------------------------------------- the protocol
def test_cohort_charges_expand_their_rows_and_parts_to_users():
    cohort_of = np.array([1, UNREGISTERED, 0, WAITING, 1])
    charges = CohortCharges(cohort_of=cohort_of, cohort_parts={DISSIMILARITY: np.array([1, 2]),
                                                               PUBLICATION: np.array([10, 20])},
                            cohort_requirements=FixedRequirements(np.array([2, 3]), np.array([5, 6])),
                            waiting_users=np.array([3]), waiting_requirements=FixedRequirements(np.array([4]),
                                                                                                np.array([7])),
                            evidence=no_statistics(cohort_of), declarations=declaring([], None))
    assert charges.parts == (DISSIMILARITY, PUBLICATION) and charges.requirement_kind is FixedRequirements
    assert charges.users.tolist() == [0, 2, 3, 4] and charges.groups.tolist() == [1, 0, WAITING, 1]
    assert charges.units.tolist() == [22, 11, 0, 22] and charges.group_units.tolist() == [11, 22]
    assert charges.part_units(DISSIMILARITY).tolist() == [2, 1, 0, 2]
    assert charges.part_units("absent").tolist() == [0, 0, 0, 0]
    assert charges.requirements.window.tolist() == [3, 2, 4, 3]  # the mechanism's view, waiting user's own


def test_reporter_charges_charge_every_reporter_and_no_one_else():
    charges = ReporterCharges(np.array([0, 2, 3, 7]), np.array([7, 2]), {"report": 5}, LifetimeRequirements,
                              no_statistics(np.zeros(0, np.int64)), declaring([], None))
    assert charges.users.tolist() == [0, 2, 3, 7] and charges.units.tolist() == [0, 5, 0, 5]
    assert charges.group_of.tolist() == [1, UNREGISTERED, 0, 1, UNREGISTERED, UNREGISTERED, UNREGISTERED, 0]
    assert charges.part_units(DISSIMILARITY).tolist() == [0, 0, 0, 0]


def test_sparse_charges_group_users_by_their_charge():
    charges = SparseCharges(np.arange(6), np.array([4, 1, 5]), {DISSIMILARITY: np.array([1, 1, 0]),
                                                               PUBLICATION: np.array([2, 2, 3])},
                            FixedRequirements, no_statistics(np.zeros(0, np.int64)), declaring([], None))
    assert charges.units.tolist() == [0, 3, 0, 0, 3, 3]
    assert charges.part_units(PUBLICATION).tolist() == [0, 2, 0, 0, 2, 3]
    groups = charges.group_of
    assert groups[1] == groups[4] != groups[5] and len(set(groups.tolist())) == 3  # two charges and the uncharged


@pytest.mark.parametrize("build, message", [
    (lambda: ReporterCharges(np.array([0, 1]), np.array([2]), {"report": 1}, FixedRequirements,
                             no_statistics(np.zeros(0)), declaring([], None)), "must be registered"),
    (lambda: ReporterCharges(np.array([0, 1]), np.array([1, 1]), {"report": 1}, FixedRequirements,
                             no_statistics(np.zeros(0)), declaring([], None)), "twice"),
    (lambda: ReporterCharges(np.array([1, 0]), np.array([1]), {"report": 1}, FixedRequirements,
                             no_statistics(np.zeros(0)), declaring([], None)), "ascending"),
    (lambda: ReporterCharges(np.array([0]), np.array([0]), {"report": -1}, FixedRequirements,
                             no_statistics(np.zeros(0)), declaring([], None)), "non-negative"),
    (lambda: ReporterCharges(np.array([0]), np.array([0]), {}, FixedRequirements,
                             no_statistics(np.zeros(0)), declaring([], None)), "at least one named part"),
    (lambda: ReporterCharges(np.array([0]), np.array([0]), {"report": 1}, int,
                             no_statistics(np.zeros(0)), declaring([], None)), "requirement_kind"),
    (lambda: SparseCharges(np.array([0, 1]), np.array([0, 1]), {"report": np.array([1])}, FixedRequirements,
                           no_statistics(np.zeros(0)), declaring([], None)), "one entry per charged user"),
    (lambda: SparseCharges(np.array([0]), np.array([0]), {"report": np.array([0.5])}, FixedRequirements,
                           no_statistics(np.zeros(0)), declaring([], None)), "integer budget units"),
])
def test_bad_charges_are_refused_when_built(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_a_ledger_refuses_charges_under_another_requirement_kind():
    ledger = PrivacyLedger(4)
    users = np.arange(2)
    ledger.record(1, ReporterCharges(users, users, {"report": 1}, FixedRequirements, no_statistics(np.zeros(0)),
                                     declaring(users, FixedRequirements.of([2, 2], [1.0, 1.0]))))
    with pytest.raises(ValueError, match="LifetimeRequirements reached a ledger of FixedRequirements"):
        ledger.record(2, ReporterCharges(users, users, {"report": 1}, LifetimeRequirements,
                                         no_statistics(np.zeros(0)), declaring([], None)))


# ---------------------------------------------------------------------------------------------- the reference
def assert_same(ledger: PrivacyLedger, reference: PerUserLedger, users: int, kind: type) -> None:
    assert (ledger.slot, ledger.max_usage_ratio, ledger.violation_count) == \
        (reference.slot, reference.max_usage_ratio, reference.violation_count)
    assert ledger.violations == reference.violations
    if kind is LifetimeRequirements:
        assert [ledger.window_sum(i, 1, ledger.slot) for i in range(users)] == \
            [reference.lifetime_sum(i) for i in range(users)]
        return
    for first in range(max(1, ledger.slot - ledger.max_window + 1), ledger.slot + 1):
        assert [ledger.window_sum(i, first, ledger.slot) for i in range(users)] == \
            [reference.window_sum(i, first, ledger.slot) for i in range(users)]


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**9), shape=st.sampled_from(SHAPES), kind=st.sampled_from(KINDS),
       slots=st.integers(1, 30), data=st.data())
def test_the_ledger_equals_the_per_user_check_for_every_shape_and_kind(seed, shape, kind, slots, data):
    """Joins, moves between groups (class splits), declarations, defaults and restores, user by user."""
    max_window = data.draw(st.integers(1, 6))
    kept = data.draw(st.integers(0, 20))
    restore_at = data.draw(st.integers(0, slots))
    stream = ChargeStream(seed, shape, kind, max_window)
    ledger, reference = PrivacyLedger(max_window, kept), PerUserLedger(max_window, kept)
    users = 0
    for slot in range(1, slots + 1):
        charges = stream.next()
        users = int(charges.group_of.size)
        ledger.record(slot, charges)
        reference.record(slot, charges)
        if slot == restore_at:
            ledger = PrivacyLedger.from_bytes(ledger.to_bytes())
        assert_same(ledger, reference, users + 2, kind)
    ledger.close()
    reference.close()
    assert_same(ledger, reference, users, kind)


def test_steady_reporters_are_checked_as_one_class():
    """A thousand users who all report every slot: one running total, verdicts still per user."""
    users = np.arange(1000)
    ledger = PrivacyLedger(3, max_violations_kept=3)
    for slot in range(1, 6):
        ledger.record(slot, ReporterCharges(users, users, {"report": U}, LifetimeRequirements,
                                            no_statistics(np.zeros(0)),
                                            declaring(users if slot == 1 else [],
                                                      LifetimeRequirements.of(np.full(1000, 3.0)) if slot == 1
                                                      else None)))
    assert ledger._totals.shape[1] <= 2  # the reporters' class (and the empty class new users start in)
    assert ledger.violation_count == 2 * 1000  # slots 4 and 5 exceed 3 ε
    assert [(v.user, v.slot, v.kind) for v in ledger.violations] == [(0, 4, "lifetime"), (1, 4, "lifetime"),
                                                                     (2, 4, "lifetime")]


# ---------------------------------------------------------------------------------------------- power
REQUIREMENTS = {
    FixedRequirements: FixedRequirements(np.array([3]), np.array([3 * U])),
    DynamicRequirements: DynamicRequirements(np.array([3]), np.array([3 * U]), np.array([3]), np.array([3 * U])),
    LifetimeRequirements: LifetimeRequirements(np.array([3 * U])),
}


def charges_of(shape: str, kind: type, units: int, slot: int, evidence: Evidence | None = None):
    """Slot ``slot``'s charges for users 0 and 1: user 0 charged ``units``, user 1 nothing."""
    users = np.arange(2)
    batch = declaring(users, REQUIREMENTS[kind].take(np.zeros(2, np.int64))) if slot == 1 else declaring([], None)
    if shape == "cohort":
        cohort_of = np.array([0, 1])
        return CohortCharges(cohort_of=cohort_of, cohort_parts={"report": np.array([units, 0])},
                             cohort_requirements=REQUIREMENTS[kind].take(np.zeros(2, np.int64)),
                             waiting_users=np.zeros(0, np.int64), waiting_requirements=None,
                             evidence=evidence or no_statistics(cohort_of), declarations=batch)
    if shape == "reporter":
        return ReporterCharges(users, np.array([0]), {"report": units}, kind, evidence or no_statistics(users),
                               batch)
    return SparseCharges(users, np.array([0]), {"report": np.array([units])}, kind, evidence or no_statistics(users),
                         batch)


def run(shape: str, kind: type, per_slot: list[int]) -> tuple[PrivacyLedger, PerUserLedger]:
    ledger, reference = PrivacyLedger(4), PerUserLedger(4)
    for slot, units in enumerate(per_slot, start=1):
        for check in (ledger, reference):
            check.record(slot, charges_of(shape, kind, units, slot))
    ledger.close()
    reference.close()
    assert ledger.violations == reference.violations and ledger.violation_count == reference.violation_count
    return ledger, reference


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_one_unit_too_much_is_caught_for_every_shape_and_kind(shape, kind):
    """Three slots of 1 ε spend exactly the 3 ε any window of 3 (or the lifetime) allows: no violation;
    one more unit at slot 2 and the window (or lifetime prefix) ending at slot 3 is over by exactly 1."""
    exact, _ = run(shape, kind, [U, U, U])
    assert exact.ok and exact.max_usage_ratio == 1.0
    over, _ = run(shape, kind, [U, U + 1, U])
    assert not over.ok
    first = over.violations[0]
    assert (first.user, first.slot, first.window_units, first.bound_units) == (0, 3, 3 * U + 1, 3 * U)
    expected_kind = {FixedRequirements: "fixed", DynamicRequirements: "forward",
                     LifetimeRequirements: "lifetime"}[kind]
    assert first.kind == expected_kind


def _evidence_certain(shape: str, noise_scale: Fraction) -> Evidence:
    """User 0 enters a statistic of scale ``noise_scale`` and sensitivity 1 for certain; user 1 enters nothing."""
    groups = np.array([0, -1])
    return Evidence(groups, (Statistic("report", noise_scale, 1, np.array([CERTAIN], np.uint64)),))


@pytest.mark.parametrize("shape", SHAPES)
def test_one_unit_too_little_against_the_evidence_is_caught(shape):
    """A statistic with noise scale 1 and sensitivity 1 costs exactly 1 ε: a charge of 1 ε passes, 1 ε - 1 unit
    is undercharged (in the core ledger and in the least charge the Beam ledger is sent)."""
    evidence = _evidence_certain(shape, Fraction(1))
    for units, ok in ((U, True), (U - 1, False)):
        ledger = PrivacyLedger(4)
        charges = charges_of(shape, FixedRequirements, units, 1, evidence)
        ledger.record(1, charges)
        assert ledger.ok is ok
        assert least_charges_of_registered(charges).tolist() == [U, 0]
        if not ok:
            assert [(v.user, v.kind, v.window_units, v.bound_units) for v in ledger.violations] == \
                [(0, "undercharged", U, U - 1)]


# ---------------------------------------------------------------------------------------------- lifetime
def lifetime_run(per_slot: list[int], restore_at: int | None = None, budget: int = 3 * U) -> PrivacyLedger:
    users = np.arange(2)
    ledger = PrivacyLedger(2)  # a window depth far below the stream's length: the lifetime needs none
    for slot, units in enumerate(per_slot, start=1):
        batch = declaring(users, LifetimeRequirements(np.full(2, budget))) if slot == 1 else declaring([], None)
        ledger.record(slot, ReporterCharges(users, np.array([0]), {"report": units}, LifetimeRequirements,
                                            no_statistics(users), batch))
        if slot == restore_at:
            ledger = PrivacyLedger.from_bytes(ledger.to_bytes())
    return ledger


@pytest.mark.parametrize("restore_at", [None, 1, 5, 9])
def test_a_lifetime_is_exceeded_exactly_when_the_prefix_first_passes_its_budget(restore_at):
    """0.3 ε a slot for ten slots spends exactly 3 ε: no violation, however far back slot 1 is (depth 2), across
    a checkpoint; one unit more anywhere and slot 10 is the first over."""
    exact = lifetime_run([3 * U // 10] * 10, restore_at)
    assert exact.ok and exact.window_sum(0, 1, 10) == 3 * U and exact.window_sum(1, 1, 10) == 0
    for extra_at in (1, 4, 10):
        charges = [3 * U // 10] * 10 + [0, 0]
        charges[extra_at - 1] += 1
        over = lifetime_run(charges, restore_at)
        assert [(v.user, v.slot, v.window_units) for v in over.violations] == \
            [(0, 10, 3 * U + 1), (0, 11, 3 * U + 1), (0, 12, 3 * U + 1)]  # and at every slot after


def test_a_lifetime_declaration_is_in_force_from_its_slot():
    """A user who raises their lifetime budget at slot 3 is checked against the new one from slot 3 on."""
    users = np.array([0])
    ledger = PrivacyLedger(1)
    for slot in range(1, 5):
        declared = {1: 1.0, 3: 3.0}.get(slot)
        batch = declaring(users, LifetimeRequirements.of([declared])) if declared else declaring([], None)
        ledger.record(slot, ReporterCharges(users, users, {"report": U // 2 + 1}, LifetimeRequirements,
                                            no_statistics(users), batch))
    assert [(v.slot, v.bound_units) for v in ledger.violations] == [(2, U)]


def test_a_lifetime_survives_a_class_split_and_a_restore():
    """Users charged alike share a class; when one stops reporting the class splits, and each part keeps the
    whole history (a split or a restore that restarted at 0 would let the stopped user's old spend vanish)."""
    users = np.arange(3)
    ledger = PrivacyLedger(1)
    for slot in range(1, 9):
        reporters = users if slot <= 4 else np.array([0, 1])  # user 2 stops after slot 4 ...
        if slot >= 7:
            reporters = np.array([2])                            # ... and comes back at slot 7
        batch = declaring(users, LifetimeRequirements.of([4.0, 4.0, 2.5])) if slot == 1 else declaring([], None)
        ledger.record(slot, ReporterCharges(users, reporters, {"report": U // 2}, LifetimeRequirements,
                                            no_statistics(users), batch))
        if slot == 5:
            ledger = PrivacyLedger.from_bytes(ledger.to_bytes())
    assert [ledger.window_sum(u, 1, 8) for u in users] == [3 * U, 3 * U, 3 * U]
    assert [(v.user, v.slot) for v in ledger.violations] == [(2, 8)]  # 2 ε after slot 4, 2.5 at 7, 3 at 8


def test_a_lifetime_requirement_validates_its_budget():
    assert LifetimeRequirement(2.5).epsilon_units == 5 * U // 2
    with pytest.raises(ValueError, match="epsilon"):
        LifetimeRequirement(0.0)
    with pytest.raises(ValueError, match="epsilon"):
        LifetimeRequirements.of([1.0, float("nan")])


def test_a_lifetime_is_exact_when_running_totals_wrap():
    """Running totals that start just below 2^64 (as the soak makes them) wrap during the run: every lifetime
    sum and verdict equals a ledger's whose totals start at 0, across a restore and a class split."""
    from benchmarks.soak import ledger_starting_below_wrap

    users = np.arange(4)
    wrapping, plain = ledger_starting_below_wrap(2, np.array([1, U, 3 * U, 7])), PrivacyLedger(2)
    for slot in range(1, 13):
        reporters = users if slot < 6 else users[slot % 2::2]  # from slot 6 on the class splits in two
        batch = declaring(users, LifetimeRequirements.of([2.0, 3.0, 4.0, 5.0])) if slot == 1 else declaring([], None)
        charges = ReporterCharges(users, reporters, {"report": U // 2}, LifetimeRequirements, no_statistics(users),
                                  batch)
        wrapping.record(slot, charges)
        plain.record(slot, charges)
        if slot == 7:
            wrapping = PrivacyLedger.from_bytes(wrapping.to_bytes())
        assert [wrapping.window_sum(u, 1, slot) for u in users] == [plain.window_sum(u, 1, slot) for u in users]
        assert wrapping.violations == plain.violations
    assert plain.violation_count > 0 and wrapping.violation_count == plain.violation_count


@pytest.mark.parametrize("part, message", [(np.array([0.5, 1.0]), "integer budget units"),
                                           (np.array([1, -1]), "non-negative")])
def test_cohort_charges_refuse_fractional_or_negative_units(part, message):
    with pytest.raises(ValueError, match=message):
        CohortCharges(cohort_of=np.array([0, 1]), cohort_parts={"report": part},
                      cohort_requirements=FixedRequirements(np.array([2, 2]), np.array([5, 5])),
                      waiting_users=np.zeros(0, np.int64), waiting_requirements=None,
                      evidence=no_statistics(np.arange(2)), declarations=declaring([], None))
