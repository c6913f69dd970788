"""Dynamic requirements: cohorts per declaration history, split exactly and regrouped per cohort."""

from __future__ import annotations

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from mechanism_helpers import run_with_ledger
from transforms.mechanisms import DynamicRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.population import CohortTable, DynamicCohorts, UserRegistry


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
        declare_per_cohort = dpbd.population.cohorts._declare_per_cohort

        def counted(rows, declared):
            taken = shortcut and declare_per_cohort(rows, declared)
            shortcuts.append(taken)
            return taken

        dpbd.population.cohorts._declare_per_cohort = counted
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


def test_memberships_are_shared_while_cohorts_declare_in_place_and_renewed_when_one_splits():
    policy = DynamicCohorts(UserRegistry(), CohortTable(DynamicCohorts.columns), None)

    def declare(slot, users, levels):
        batch = SlotBatch.of(users, [0] * len(users), DynamicRequirements.of(*zip(*levels)))
        policy.registry.grow(int(batch.users.max()))
        policy.declare(batch, slot, policy.registry.rows(batch.users))
        policy.compact()

    a, b = (1, 5.0, 4, 1.0), (2, 3.0, 3, 0.8)
    declare(1, range(4), [a] * 4)
    first = policy.memberships()
    declare(2, range(4), [b] * 4)  # the whole cohort declares anew: in place
    assert policy.memberships() is first and policy.in_force().forward_window.tolist() == [3]
    declare(3, range(4), [a, a, b, b])  # half of it splits off
    split = policy.memberships()
    assert split.cohort_of[:4].tolist() == [1, 1, 0, 0] and first.cohort_of[:4].tolist() == [0, 0, 0, 0]
    assert policy.sizes().tolist() == [2, 2] and policy.in_force().forward_window.tolist() == [3, 4]
