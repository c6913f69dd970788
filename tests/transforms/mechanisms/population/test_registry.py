"""The user registry: memberships, the read-only snapshot releases share, and what is kept per version."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.mechanisms.batch import BatchExtent
from transforms.mechanisms.population import UNREGISTERED, WAITING, UserRegistry

DENSE = BatchExtent(max_user=9, all_report=True, dense=True)


def registry_of(rows) -> UserRegistry:
    registry = UserRegistry()
    registry.grow(len(rows) - 1)
    registry.assign(np.arange(len(rows)), np.asarray(rows))
    return registry


def test_each_change_gives_a_new_snapshot_and_leaves_the_old_one_as_it_was():
    registry = registry_of([0] * 10)
    before = registry.cohort_of()
    assert registry.cohort_of() is before  # nothing changed: the same snapshot is shared
    registry.assign(np.array([3]), WAITING)
    after = registry.cohort_of()
    assert after[3] == WAITING and before[3] == 0
    registry.renumber(np.array([5, -1]))
    assert registry.cohort_of()[0] == 5 and registry.cohort_of()[3] == WAITING
    registry.grow(40)
    assert registry.capacity >= 41 and registry.cohort_of()[40] == UNREGISTERED
    for snapshot in (before, after, registry.cohort_of()):
        with pytest.raises(ValueError):
            snapshot[0] = 1


def test_rows_handed_out_cannot_be_written_and_do_not_follow_later_changes():
    """A batch's rows were a live, writable view of the memberships for users 0..n-1."""
    registry = registry_of([0] * 10)
    rows = registry.rows_of(np.arange(10), DENSE)
    with pytest.raises(ValueError):
        rows[0] = 7
    registry.assign(np.array([0]), 1)
    assert rows[0] == 0 and registry.rows_of(np.arange(10), DENSE)[0] == 1


def test_users_beyond_the_capacity_are_unregistered():
    registry = registry_of([0, 1])
    rows = registry.rows_of(np.array([1, 5]), BatchExtent(5, True, False))
    assert rows.tolist() == [1, UNREGISTERED]


def test_the_remembered_all_in_cohorts_prefix_is_forgotten_when_memberships_change():
    """Stale: users 0..9 were all in cohorts once; after user 3 starts waiting they are not."""
    registry = registry_of([0] * 10)
    assert registry.all_in_cohorts(registry.rows_of(np.arange(10), DENSE), dense=True)
    assert registry.all_in_cohorts(registry.rows_of(np.arange(5), DENSE), dense=True)
    registry.assign(np.array([3]), WAITING)
    assert not registry.all_in_cohorts(registry.rows_of(np.arange(10), DENSE), dense=True)
    assert registry.all_in_cohorts(registry.rows_of(np.arange(3), DENSE), dense=True)


def test_state_round_trips_and_loading_replaces_every_snapshot():
    registry = registry_of([0, 1, WAITING])
    registry.remember(np.array([0, 2]), np.array([4, 5]))
    stale = registry.cohort_of()
    copy = UserRegistry()
    copy.load_state_arrays(registry.state_arrays())
    assert np.array_equal(copy.cohort_of(), stale) and copy.last_values(3).tolist() == [4, -1, 5]
    registry.load_state_arrays({"cohort_of": np.array([1, 1, 1]), "value_of": np.array([-1, -1, -1])})
    assert registry.cohort_of().tolist() == [1, 1, 1] and registry.last_values(3).tolist() == [-1, -1, -1]
