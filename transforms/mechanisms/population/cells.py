"""Each slot's data as cells: contributing users per (cohort, bin).

Cells are counted from a memberships snapshot alone (so the evidence a
release carries names exactly the rows the data were grouped by).  With
``carry_forward`` a user's last bin stays in force until they report again;
without it an absent user contributes nothing that slot.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.population.registry import UserRegistry
from transforms.mechanisms.sampling import Cells, count_keys

_DENSE_CELL_LIMIT = 1 << 16


class CellBuilder:
    """Counts a slot's values per (cohort, bin); what it keeps between slots is keyed by what it came from."""

    def __init__(self, bins: int, carry_forward: bool, registry: UserRegistry):
        self.bins = bins
        self.carry_forward = carry_forward
        self.registry = registry
        self._row_keys: tuple[int, np.ndarray] | None = None
        self._dense_index: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None

    def cells(self, batch: SlotBatch, groups: np.ndarray, rows: np.ndarray, all_report: bool, by_cohort: bool,
              cohorts: int, registered: bool = False, dense: bool = False) -> Cells:
        """Counts per (cohort, bin) of ``batch``, grouped by the memberships snapshot ``groups``.

        ``rows`` are the batch users' rows in ``groups``, ``cohorts`` the number of cohort rows.
        ``registered`` says every row is already known to be in a cohort, ``dense`` that the batch's
        users are 0..n-1.  With ``by_cohort=False`` the cells are pooled over cohorts.
        """
        if self.carry_forward:
            reporting = batch.values >= 0
            self.registry.remember(batch.users[reporting], batch.values[reporting])
            last = self.registry.last_values(groups.size)
            users = np.flatnonzero((groups >= 0) & (last >= 0))
            values, members = last[users], groups[users]
        else:
            values, members = batch.values, rows
            if values.size and (not all_report or (not registered and members.min() < 0)):
                keep = (values >= 0) & (members >= 0)
                values, members = values[keep], members[keep]
        if not by_cohort:
            return Cells.pooled(count_keys(values, self.bins))
        if members.size == 0:
            return Cells.empty()
        size = cohorts * self.bins
        if size <= _DENSE_CELL_LIMIT:  # every (cohort, bin) pair, zero counts included
            if cohorts == 1:
                keys = values
            elif dense and registered and all_report and not self.carry_forward:  # row part repeats
                keys = self._keys_of_rows(members) + values
            else:
                keys = members * self.bins + values
            return Cells(*self._index(cohorts), count_keys(keys, size))
        keys, counts = np.unique(members * self.bins + values, return_counts=True)
        return Cells(keys // self.bins, keys % self.bins, counts.astype(np.int64))

    def _keys_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """``rows * bins`` for the rows of users 0..n-1, kept while memberships are unchanged."""
        kept = self._row_keys
        if kept is None or kept[0] != self.registry.version or kept[1].size != rows.size:
            kept = self._row_keys = (self.registry.version, rows * self.bins)
        return kept[1]

    def _index(self, cohorts: int) -> tuple[np.ndarray, np.ndarray]:
        """The (cohort, bin) of every dense cell."""
        kept = self._dense_index
        if kept is None or kept[0] != cohorts:
            kept = self._dense_index = (cohorts, (np.repeat(np.arange(cohorts), self.bins),
                                                  np.tile(np.arange(self.bins), cohorts)))
        return kept[1]
