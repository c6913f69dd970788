"""The population policies: joining, absent and changing users, cohorts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from mechanism_helpers import admit, run_with_ledger
from streams import StreamSpec
from test_mechanisms import specs
from transforms.mechanisms import (DISSIMILARITY, PUBLICATION, DynamicRequirements, FixedRequirements, SlotBatch,
                                   make_mechanism)
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.population import WAITING


def fixed(windows, epsilons):
    return FixedRequirements.of(windows, epsilons)


def test_cohorts_are_distinct_requirements_and_obs_counts_registered_users():
    pbd = make_mechanism("pbd", bins=2)
    gen = np.random.default_rng(0)
    n = 3000
    reqs = fixed(gen.choice([10, 20], n), gen.choice([0.5, 1.0], n))
    pbd.step(SlotBatch.of(np.arange(n), gen.integers(0, 2, n), reqs), insecure_seeded_randomness(0))
    assert pbd.population.table.rows == 4
    # Only 10 users report next: the public cohort sizes (what OBS uses) still count everyone.
    data = admit(pbd, SlotBatch.of(np.arange(10), np.zeros(10, np.int64)), 2)
    assert data.sizes.sum() == n
    assert data.cells.count.sum() == 10


def test_absent_users_are_charged_and_carry_forward_keeps_their_bin():
    for carry in (False, True):
        pbd = make_mechanism("pbd", bins=3, carry_forward=carry)
        rng = insecure_seeded_randomness(1)
        pbd.step(SlotBatch.of([0, 1, 2], [0, 1, 2], fixed([4] * 3, [1.0] * 3)), rng)
        release = pbd.step(SlotBatch.of([0], [1]), rng)
        assert list(release.charges.users) == [0, 1, 2]
        assert np.all(release.charges.part_units(DISSIMILARITY) == to_units(1.0) // 8)
        data = admit(pbd, SlotBatch.empty(), 3)
        assert data.cells.histogram(3).tolist() == ([0, 2, 1] if carry else [0, 0, 0])


def test_a_joining_user_shares_the_cohort_trajectory_from_the_slot_they_join():
    pbd = make_mechanism("pbd", bins=2)
    batches = [SlotBatch.of([0], [t % 2], fixed([3], [1.0]) if t == 0 else None) for t in range(10)]
    batches[6] = SlotBatch.of([0, 5], [0, 1], fixed([3, 3], [1.0, 1.0]))
    releases, ledger = run_with_ledger(pbd, batches)
    assert ledger.ok
    assert 5 not in releases[5].charges.users
    joined = releases[6].charges
    assert list(joined.units[joined.users == 5]) == list(joined.units[joined.users == 0])


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


def test_dynamic_cohorts_split_exactly_and_move_whole_in_place():
    dpbd = make_mechanism("dpbd", bins=2, max_window=10)
    rng = insecure_seeded_randomness(4)
    n = 1000
    same = DynamicRequirements.of([1] * n, [5.0] * n, [4] * n, [1.0] * n)
    for _ in range(3):
        dpbd.step(SlotBatch.of(np.arange(n), np.zeros(n, np.int64), same), rng)
    assert dpbd.population.table.rows == 1
    # Half the users declare something new: they split off with a copy of the history.
    before = dpbd.population.table.data["publication_history"][0].copy()
    half = DynamicRequirements.of([1] * 500, [5.0] * 500, [6] * 500, [0.8] * 500)
    dpbd.step(SlotBatch.of(np.arange(500), np.zeros(500, np.int64), half), rng)
    table = dpbd.population.table
    assert table.rows == 2 and sorted(table.size) == [500, 500]
    # both rows have the same history, shifted by the slot just charged
    assert np.array_equal(table.data["publication_history"][0, 1:], before[:-1])
    assert np.array_equal(table.data["publication_history"][1], table.data["publication_history"][0])
    # the other half follows: the whole cohort changes in place, no new row
    dpbd.step(SlotBatch.of(np.arange(500, n), np.zeros(500, np.int64), half), rng)
    assert dpbd.population.table.rows == 2
    dpbd.step(SlotBatch.of(np.arange(n), np.zeros(n, np.int64),
                           DynamicRequirements.of([1] * n, [5.0] * n, [6] * n, [0.8] * n)), rng)
    assert dpbd.population.table.rows == 2  # identical declarations, but histories differ: no merge


def test_infeasible_backward_declarations_are_projected_and_reported():
    """A backward E_B below what the window already spent is raised to the minimal feasible value (§1.6)."""
    dpbd = make_mechanism("dpbd", bins=2, max_window=10)
    insecure_seeded_randomness(5)
    generous = DynamicRequirements.of([1], [10.0], [2], [4.0])
    batches = [SlotBatch.of([0], [t % 2], generous) for t in range(4)]
    strict = DynamicRequirements.of([4], [0.1], [2], [4.0])  # the last 3 slots spent far more than 0.1
    releases, ledger = run_with_ledger(dpbd, batches + [SlotBatch.of([0], [1], strict)])
    projected = releases[-1].charges.requirements
    assert int(projected.backward_units[0]) > to_units(0.1)
    assert int(releases[-1].charges.units[0]) == 0  # nothing left for this slot
    assert ledger.ok


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_declaring_per_cohort_equals_the_general_path(data):
    """The per-cohort shortcut for dynamic declarations (every member of every cohort declares, alike)
    leaves the same state and makes the same releases as the general per-user path."""
    users = data.draw(st.integers(1, 12), label="users")
    levels = [(1, 5.0, 4, 1.0), (2, 3.0, 3, 0.8), (1, 2.0, 2, 0.6)]
    shortcuts = []
    slots = []
    for _ in range(data.draw(st.integers(1, 8), label="slots")):
        reporting = data.draw(st.one_of(st.just([True] * users),
                                        st.lists(st.booleans(), min_size=users, max_size=users)), label="reporting")
        by_type = data.draw(st.booleans(), label="users of a type declare alike")
        types = data.draw(st.lists(st.integers(0, 2), min_size=3, max_size=3), label="type levels")
        chosen = [levels[types[u % 3]] if by_type else levels[data.draw(st.integers(0, 2))] for u in range(users)]
        who = [u for u in range(users) if reporting[u] or not slots]  # everybody declares at slot 1
        slots.append(SlotBatch.of(who, [u % 2 for u in who],
                                  DynamicRequirements.of(*map(list, zip(*(chosen[u] for u in who)))))
                     if who else SlotBatch.empty())

    def run(shortcut: bool):
        dpbd = make_mechanism("dpbd", bins=2, max_window=6)
        declare_per_cohort = dpbd.population._declare_per_cohort

        def counted(rows, declared):
            taken = shortcut and declare_per_cohort(rows, declared)
            shortcuts.append(taken)
            return taken

        dpbd.population._declare_per_cohort = counted
        rng = insecure_seeded_randomness(1)
        releases = [dpbd.step(batch, rng) for batch in slots]
        return releases, dpbd.state_arrays()

    fast, fast_state = run(True)
    slow, slow_state = run(False)
    for a, b in zip(fast, slow):
        assert a.kind == b.kind and np.array_equal(a.histogram, b.histogram)
        assert np.array_equal(a.charges.units, b.charges.units)
    assert fast_state.keys() == slow_state.keys()
    for name in fast_state:
        assert np.array_equal(fast_state[name], slow_state[name]), name
    event(f"per-cohort declarations: {sum(shortcuts)}")


def test_every_user_batches_are_recognized_only_when_exactly_0_to_n_minus_1():
    """``SlotBatch.of(range(n), ...)`` skips scanning the users; nothing else is taken for it."""
    from transforms.mechanisms.batch import every_user

    assert SlotBatch.of(range(4), [0, 1, 1, 0]).validate(2).dense
    assert SlotBatch.of(np.asarray(every_user(100)[:3]).reshape(-1), [0, 1, 1]).validate(2).dense
    users = every_user(6)
    with pytest.raises(ValueError):
        users[0] = 5  # bytes-backed: no view of it can be written to
    for lookalike in (users[1:], users[::2], users.copy()[::-1], np.arange(3)[::-1]):
        extent = SlotBatch.of(lookalike, np.zeros(lookalike.size, np.int64)).validate(2)
        assert not extent.dense
    with pytest.raises(ValueError, match="distinct"):
        SlotBatch.of([0, 1, 1], [0, 0, 0]).validate(2)


@settings(max_examples=30, deadline=None)
@given(spec=specs, name=st.sampled_from(["pbd", "pba", "bd", "dpba"]))
def test_releases_report_the_memberships_and_requirements_of_their_slot(spec, name):
    """Snapshots of memberships are shared between slots in which nobody joins or changes; each
    release must still report exactly the cohort rows, waiting users and requirements of its slot."""
    dynamic = name == "dpba"
    mechanism = make_mechanism(name, **StreamSpec.mechanism_kwargs(spec, name))
    rng = insecure_seeded_randomness(spec.seed)
    for batch in spec.batches(dynamic=dynamic):
        release = mechanism.step(batch, rng)
        population = mechanism.population
        charges = release.charges
        assert np.array_equal(charges.cohort_of, population.cohort_of)
        assert not charges.cohort_of.flags.writeable
        assert np.array_equal(charges.waiting_users, np.flatnonzero(population.cohort_of == WAITING))
        if not dynamic:
            table = population.table.data
            assert np.array_equal(charges.cohort_requirements.window, table["window"])
            assert np.array_equal(charges.cohort_requirements.epsilon_units, table["epsilon_units"])
            waiting = charges.waiting_users
            if waiting.size:
                assert np.array_equal(charges.waiting_requirements.window, population.window_of[waiting])


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
