"""Dynamic requirements: one cohort per distinct declaration history.

When some members of a cohort declare something new they split off into a
copy of the cohort's state (their charge history *is* the cohort's), so the
split is exact; a whole cohort declaring the same new thing is updated in
place.  Every live forward declaration repeats at each slot unless replaced.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.population.cohorts import CohortPolicy
from transforms.mechanisms.population.table import Column
from transforms.mechanisms.requirements import DynamicRequirements

_DECLARATION = ("backward_window", "backward_units", "forward_window", "forward_units")


class DynamicCohorts(CohortPolicy):
    """Cohorts of dynamic declarations, regrouped per cohort as users declare."""

    columns = {"backward_window": Column(fill=1), "backward_units": Column(), "forward_window": Column(),
               "forward_units": Column(), "declared_forward_window": Column(history=True),
               "declared_forward_units": Column(history=True)}

    def steady(self, batch: SlotBatch) -> bool:
        return False  # live declarations move one slot back every slot

    def in_force(self) -> DynamicRequirements:
        t = self.table.data
        return DynamicRequirements(*(t[name].copy() for name in _DECLARATION))

    def declare(self, batch: SlotBatch, slot: int, rows: np.ndarray) -> None:
        table = self.table
        table.push("declared_forward_window", table.data["forward_window"])
        table.push("declared_forward_units", table.data["forward_units"])
        users, declaration = self.declarations(batch, rows)
        if declaration is None:
            return
        reqs = cast(DynamicRequirements, declaration)  # the batch was validated against the kind
        declared: tuple[np.ndarray, ...] = (reqs.backward_window, reqs.backward_units, reqs.forward_window, reqs.forward_units)
        table.widen(int(max(reqs.backward_window.max(), reqs.forward_window.max())))
        rows = self.registry.rows(users)
        if self._declare_per_cohort(rows, declared):
            return
        known = rows >= 0
        moving = ~known
        if table.rows:
            gather = rows if not moving.any() else np.where(known, rows, 0)
            for name, column in zip(_DECLARATION, declared):  # column by column: no n x 4 matrices
                moving |= table.data[name][gather] != column
        if not moving.any():
            return
        if moving.all():
            movers, source, decl = users, rows, declared
        else:
            movers, source, decl = users[moving], rows[moving], tuple(column[moving] for column in declared)
        groups, inverse = group_moves(source, decl, table.rows)
        group_sizes = np.bincount(inverse, minlength=groups.shape[0])
        source_rows = groups[:, 0]
        fresh = source_rows < 0
        source_sizes = np.zeros(source_rows.size, np.int64)
        source_sizes[~fresh] = table.size[source_rows[~fresh]]
        whole = ~fresh & (group_sizes == source_sizes)
        split = ~fresh & ~whole
        target = np.where(whole, source_rows, -1)
        if split.any():
            target[split] = table.copy_rows(groups[split, 0])
        if fresh.any():
            target[fresh] = table.add(int(fresh.sum()))
        self._store(target, [groups[:, 1 + k] for k in range(len(_DECLARATION))])
        self.leave(movers)
        self.join(movers, target[inverse])

    def _store(self, rows, per_row: list[np.ndarray]) -> None:
        """Declarations ``per_row`` (one array per declaration column) become rows ``rows``' own."""
        data = self.table.data
        for name, value in zip(_DECLARATION, per_row):
            data[name][rows] = value
        data["declared_forward_window"][rows, 0] = per_row[2]
        data["declared_forward_units"][rows, 0] = per_row[3]

    def _declare_per_cohort(self, rows: np.ndarray, declared: tuple[np.ndarray, ...]) -> bool:
        """The usual slot, done per cohort: every member of every cohort declares, and alike.

        Then each cohort's declaration is replaced in place, which is what the
        general path does for a cohort that moves as a whole (and nothing, for
        one that declares what it had).  Returns False, changing nothing, when
        some user joins, some cohort is not all present, or its members differ.
        """
        table = self.table
        # The users are distinct (the batch was validated) and each is counted in its cohort's size, so they
        # are every member of every cohort exactly when there are as many of them as members.
        if rows.size == 0 or rows.min() < 0 or rows.size != table.size.sum():
            return False
        changes = rows[1:] != rows[:-1]
        ends = np.flatnonzero(changes)  # where a run of one cohort's users ends (and the last user)
        member = np.zeros(table.rows, np.int64)  # one batch position per cohort
        member[rows.take(ends)] = ends
        member[rows[-1]] = rows.size - 1
        # each cohort in one run (users listed cohort by cohort, the usual batch): a column is alike within
        # every cohort iff it changes only where the cohort does
        one_run_each = ends.size + 1 == np.count_nonzero(table.size)
        per_cohort = []
        for column in declared:
            value = column.take(member)
            alike = ((column[1:] == column[:-1]) | changes).all() if one_run_each else \
                (value.take(rows) == column).all()
            if not alike:
                return False
            per_cohort.append(value)
        present = table.size > 0
        self._store(present, [value[present] for value in per_cohort])
        return True


def group_moves(source: np.ndarray, declared: tuple[np.ndarray, ...], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(source cohort, declaration)`` pairs and each mover's pair index.

    ``declared`` holds one array per declaration column.  Usually every mover
    from one cohort declares the same thing (a level or a user type
    changing); that case costs O(n).  Otherwise rows are grouped by a 64-bit
    hash, checked for collisions.
    """
    slot = source + 1  # source -1 (new users) becomes 0
    present = np.flatnonzero(np.bincount(slot, minlength=rows + 1))
    representatives = []
    for column in declared:
        representative = np.zeros(rows + 1, np.int64)
        representative[slot] = column
        if not np.array_equal(representative[slot], column):
            break
        representatives.append(representative[present])
    else:
        position = np.zeros(rows + 1, np.int64)
        position[present] = np.arange(present.size)
        return np.column_stack([present - 1, *representatives]), position[slot]
    pairs = np.column_stack([source, *declared])
    mixed = np.zeros(pairs.shape[0], np.uint64)
    for k in range(pairs.shape[1]):
        mixed = (mixed ^ pairs[:, k].astype(np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
    _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    groups = pairs[first]
    if not np.array_equal(groups[inverse], pairs):  # a hash collision: group exactly instead
        groups, inverse = np.unique(pairs, axis=0, return_inverse=True)
        return groups, inverse.reshape(-1)
    order = np.lexsort(groups.T[::-1])  # canonical (sorted) cohort order, whatever the hash
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return groups[order], rank[inverse]
