"""Fixed requirements: cohorts per (w, E) and the change policy (delay w' - 1, waiting, cancel)."""

from __future__ import annotations

import numpy as np
import pytest

from mechanism_helpers import run_with_ledger
from transforms.mechanisms import DISSIMILARITY, PUBLICATION, FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.population import WAITING, CohortTable, FixedCohorts, UserRegistry


def fixed(windows, epsilons):
    return FixedRequirements.of(windows, epsilons)


def test_a_changed_fixed_requirement_waits_w_new_minus_1_slots_uncharged():
    pba = make_mechanism("pba", bins=2)
    rng = insecure_seeded_randomness(2)
    users = np.arange(4)
    pba.step(SlotBatch.of(users, [0, 1, 0, 1], fixed([2] * 4, [1.0] * 4)), rng)
    # user 3 asks for (w=5, E=0.5) at slot 2: in force from slot 2 + 5 - 1 = 6
    new = fixed([2, 2, 2, 5], [1.0, 1.0, 1.0, 0.5])
    seen = []
    for t in range(2, 9):
        release = pba.step(SlotBatch.of(users, [t % 2] * 4, new), rng)
        charges = release.charges
        at = int(np.flatnonzero(charges.users == 3)[0])
        seen.append((release.slot, int(charges.units[at]), int(charges.requirements.window[at])))
    for slot, charged, window in seen:
        if slot < 6:
            assert (charged, window) == (0, 2), slot          # waiting: uncharged, old requirement in force
        else:
            assert window == 5 and charged > 0, slot          # switched: the new cohort's trajectory
    assert pba.population.table.rows == 2


def test_declaring_the_old_requirement_again_cancels_a_pending_change():
    pbd = make_mechanism("pbd", bins=2)
    rng = insecure_seeded_randomness(3)
    pbd.step(SlotBatch.of([0], [0], fixed([2], [1.0])), rng)
    pbd.step(SlotBatch.of([0], [0], fixed([50], [1.0])), rng)    # change: waits 49 slots
    assert pbd.population.cohort_of[0] < 0
    release = pbd.step(SlotBatch.of([0], [0], fixed([2], [1.0])), rng)
    assert pbd.population.cohort_of[0] >= 0 and release.charges.units[0] > 0


def test_a_window_of_one_takes_effect_at_once():
    pbd = make_mechanism("pbd", bins=2)
    rng = insecure_seeded_randomness(3)
    pbd.step(SlotBatch.of([0], [0], fixed([6], [1.0])), rng)
    release = pbd.step(SlotBatch.of([0], [0], fixed([1], [0.2])), rng)
    assert int(release.charges.requirements.window[0]) == 1
    assert int(release.charges.part_units(DISSIMILARITY)[0]) == to_units(0.2) // 2


@pytest.mark.parametrize("name", ["pbd", "pba"])
def test_a_user_who_starts_waiting_while_another_activates_contributes_nothing(name):
    """Finding 1 of issue #12: the memberships' totals net to zero in one slot.

    At slot 3 user 0 starts waiting (A -> B) while user 3 activates B (declared at slot 2, w' = 2):
    cohort rows, total cohort size and the number waiting are all unchanged, and user 2 is
    absent, so the batch's rows are a copy.  The old code kept user 0's stale row, sampled
    them in cohort A and charged them 0.
    """
    a, b = (2, 2.0), (2, 4.0)
    mechanism = make_mechanism(name, bins=2)
    rng = insecure_seeded_randomness(5)
    mechanism.step(SlotBatch.of([0, 1, 2, 3, 4], [0, 0, 0, 0, 0], fixed(*zip(a, a, a, a, b))), rng)
    mechanism.step(SlotBatch.of([0, 1, 2, 3, 4], [0, 0, 0, 0, 0], fixed(*zip(a, a, a, b, b))), rng)
    assert mechanism.population.cohort_of[3] == WAITING
    release = mechanism.step(SlotBatch.of([0, 1, 3, 4], [1, 0, 0, 0], fixed(*zip(b, a, b, b))), rng)
    assert mechanism.population.cohort_of[0] == WAITING
    assert mechanism.exact_histogram_for_evaluation().tolist() == [3, 0]  # user 0's bin 1 is not used
    charged = dict(zip(release.charges.users.tolist(), release.charges.units.tolist()))
    assert charged[0] == 0 and charged[3] > 0


def test_pba_cohort_empty_at_a_publication_keeps_its_own_nullification(monkeypatch):
    """Finding 2 of issue #12: a cohort without members when another cohort publishes.

    B (w = 3) absorbs 3 shares at slot 3, so slots 4 and 5 are nullified for B.  At slot 4 B's
    only user starts waiting, so B is empty and A (w = 1) publishes; at slot 5 the user cancels
    and rejoins B.  The old code recorded B's 0 shares at slot 4 (t_N = -1) and let B absorb two
    shares at slot 5: 7/6·E in B's 3-slot window.  B must stay nullified instead.
    """
    import transforms.mechanisms.pwsm as pwsm

    monkeypatch.setattr(pwsm, "is_fresh_publication", lambda *args: pba.slot >= 3)  # skip 1-2, then publish
    pba = make_mechanism("pba", bins=2)
    a, b, waiting_for = (1, 1.0), (3, 1.2), (5, 1.2)
    reqs = [(a, b), None, None, (a, waiting_for), (a, b), None]
    batches = [SlotBatch.of([0, 1], [t % 2, t % 2], None if r is None else fixed(*zip(*r))) for t, r in enumerate(reqs)]
    releases, ledger = run_with_ledger(pba, batches)
    assert [r.kind.value for r in releases[:4]] == ["skipped", "skipped", "fresh", "fresh"]
    assert ledger.ok, ledger.violations
    charged = [dict(zip(r.charges.users.tolist(), r.charges.part_units(PUBLICATION).tolist()))[1] for r in releases]
    assert charged[2] == 3 * to_units(1.2) // 6  # three shares at slot 3
    assert charged[3] == 0 and charged[4] == 0   # waiting, then still nullified for B


def test_a_cancelled_change_rejoins_the_old_history_even_after_compaction(monkeypatch):
    """Cohorts left empty are compacted away; the cohort a waiting user may cancel back into is not.

    64 users with distinct requirements publish at every slot; at slot 4, 40 of them start waiting,
    so more than half the cohorts are empty and the table is compacted.  At slot 5 they cancel: a
    fresh cohort (empty history) would let them spend a second E/2 inside one window.
    """
    import transforms.mechanisms.pwsm as pwsm

    monkeypatch.setattr(pwsm, "is_fresh_publication", lambda *args: True)
    pbd = make_mechanism("pbd", bins=2)
    n = 64
    users = np.arange(n)
    own = fixed([10] * n, [1.0 + k / 100 for k in range(n)])
    moved = fixed([10] * n, [1.0 + k / 100 if k >= 40 else 5.0 for k in range(n)])
    batches = [SlotBatch.of(users, users % 2, reqs) for reqs in (own, None, None, moved, own)]
    batches += [SlotBatch.of(users, users % 2) for _ in range(6)]
    releases, ledger = run_with_ledger(pbd, batches)
    assert pbd.population.table.rows == n  # the held cohorts survived compaction
    assert ledger.ok, ledger.violations[:3]


# ---------------------------------------------------------------- the policy on its own


def fixed_cohorts() -> FixedCohorts:
    return FixedCohorts(UserRegistry(), CohortTable(FixedCohorts.columns), None)


def declare(policy: FixedCohorts, slot: int, users, requirements: FixedRequirements | None = None) -> None:
    """What the population does with a slot's declarations: rows first, then the policy."""
    batch = SlotBatch.of(users, [0] * len(users), requirements)
    policy.registry.grow(int(batch.users.max(initial=-1)))
    policy.declare(batch, slot, policy.registry.rows(batch.users))
    policy.compact()


def test_requirements_in_force_follow_the_cohorts_as_they_are_created():
    policy = fixed_cohorts()
    declare(policy, 1, [0, 1], fixed([2, 2], [1.0, 1.0]))
    first = policy.in_force()
    assert first.window.tolist() == [2] and policy.in_force() is first  # kept while nothing changes
    declare(policy, 2, [2], fixed([5], [1.0]))
    assert policy.in_force().window.tolist() == [2, 5] and first.window.tolist() == [2]
    assert policy.sizes().tolist() == [2, 1]


def test_memberships_follow_a_change_from_waiting_to_in_force():
    policy = fixed_cohorts()
    declare(policy, 1, [0, 1], fixed([2, 2], [1.0, 1.0]))
    declare(policy, 2, [0], fixed([3], [0.5]))  # in force from slot 2 + 3 - 1 = 4
    waiting = policy.memberships()
    assert waiting.waiting_users.tolist() == [0] and waiting.waiting_requirements.window.tolist() == [2]
    assert waiting.cohort_of[0] == WAITING and policy.sizes().tolist() == [1]
    declare(policy, 3, [])
    assert policy.memberships().waiting_users.tolist() == [0]
    declare(policy, 4, [])
    active = policy.memberships()
    assert active.waiting_users.size == 0 and active.waiting_requirements is None
    assert policy.in_force().window[active.cohort_of[0]] == 3 and policy.sizes().tolist() == [1, 1]
    assert waiting.cohort_of[0] == WAITING  # the snapshot a release of slot 2 holds did not change


def test_a_waiting_user_who_declares_a_third_requirement_waits_for_that_one():
    policy = fixed_cohorts()
    declare(policy, 1, [0], fixed([2], [1.0]))
    declare(policy, 2, [0], fixed([5], [1.0]))   # would take effect at 6
    declare(policy, 3, [0], fixed([2], [2.0]))   # replaces it: takes effect at 4
    assert policy.memberships().waiting_users.tolist() == [0] and policy.waiting == 1
    declare(policy, 4, [])
    assert policy.waiting == 0 and policy.requirement_of(np.array([0])).epsilon_units.tolist() == [to_units(2.0)]


def test_state_round_trips_with_users_waiting():
    policy = fixed_cohorts()
    declare(policy, 1, [0, 1, 2], fixed([2, 2, 3], [1.0, 1.0, 1.0]))
    declare(policy, 2, [1], fixed([4], [1.0]))
    copy = FixedCohorts(policy.registry, policy.table, None)
    copy.load_state_arrays(policy.state_arrays())
    assert copy.waiting == 1 and copy.memberships().waiting_users.tolist() == [1]
    assert copy.memberships().waiting_requirements.window.tolist() == [2]
    declare(copy, 5, [])
    assert copy.requirement_of(np.array([1])).window.tolist() == [4]
