"""The cohort table: rows of per-cohort state, its version and its saved state."""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.population import CohortTable, Column


def test_the_version_moves_with_every_change_of_rows_and_only_then():
    table = CohortTable({"level": Column(), "history": Column(history=True)})
    versions = [table.version]
    table.add(3)
    versions.append(table.version)
    table.copy_rows(np.array([0]))
    versions.append(table.version)
    table.widen(4)
    versions.append(table.version)
    table.keep(np.array([1, 3]))
    versions.append(table.version)
    table.load_state_arrays(table.state_arrays())
    versions.append(table.version)
    assert len(set(versions)) == len(versions)
    table.push("history", np.array([7, 8]))
    table.widen(2)  # no deeper than it is: nothing changes
    table.data["level"][0] = 5
    assert table.version == versions[-1]


def test_state_round_trips():
    table = CohortTable({"level": Column(fill=2), "history": Column(history=True)})
    table.add(2)
    table.widen(3)
    table.push("history", np.array([1, 2]))
    table.size += np.array([4, 5])
    copy = CohortTable(table.columns)
    copy.load_state_arrays(table.state_arrays())
    assert (copy.rows, copy.width) == (2, 3) and copy.size.tolist() == [4, 5]
    for name in table.columns:
        assert np.array_equal(copy.data[name], table.data[name])
