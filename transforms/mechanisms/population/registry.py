"""The user registry: each user index's cohort row and last reported value.

Memberships change only through :meth:`UserRegistry.assign`,
:meth:`~UserRegistry.renumber`, :meth:`~UserRegistry.grow` and loading, and
each of them moves ``version``; what is derived from memberships (the
read-only snapshot releases share, cohort sizes, cell keys) is kept per
version, so nothing is ever read from a stale copy.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.batch import BatchExtent
from transforms.mechanisms.population.table import UNREGISTERED, WAITING, read_only_copy


class UserRegistry:
    """Who is registered, in which cohort row (or WAITING), and each user's last value (carry-forward)."""

    def __init__(self) -> None:
        self._cohort_of = np.zeros(0, np.int64)
        self._value_of = np.zeros(0, np.int64)
        self.version = 0
        self._snapshot: tuple[int, np.ndarray] | None = None
        self._known_prefix = (-1, 0)  # (version, k): users 0..k-1 were all in cohorts at that version

    @property
    def capacity(self) -> int:
        """User indices below this have a slot (registered or not)."""
        return self._cohort_of.size

    def cohort_of(self) -> np.ndarray:
        """Cohort row per user index, read-only; one copy per version, shared by every release made from it."""
        snapshot = self._snapshot
        if snapshot is None or snapshot[0] != self.version:
            snapshot = self._snapshot = (self.version, read_only_copy(self._cohort_of))
        return snapshot[1]

    def rows_of(self, users: np.ndarray, extent: BatchExtent) -> np.ndarray:
        """Each of ``users``' cohort row (UNREGISTERED beyond the capacity), read-only."""
        cohort_of = self.cohort_of()
        if extent.max_user >= cohort_of.size:
            rows = np.full(users.size, UNREGISTERED, np.int64)
            known = users < cohort_of.size
            rows[known] = cohort_of[users[known]]
            return rows
        return cohort_of[:users.size] if extent.dense else cohort_of[users]

    def all_in_cohorts(self, rows: np.ndarray, dense: bool) -> bool:
        """Whether every one of ``rows`` (a batch's, from :meth:`rows_of`) is a cohort row.

        For users 0..n-1 the answer is remembered until memberships change.
        """
        version, known = self._known_prefix
        if dense and version == self.version and rows.size <= known:
            return True
        registered = rows.size == 0 or rows.min() >= 0
        if registered and dense:
            self._known_prefix = (self.version, max(rows.size, known if version == self.version else 0))
        return registered

    def grow(self, max_user: int) -> None:
        """Make room for user indices up to ``max_user`` (new ones unregistered)."""
        if max_user < self.capacity:
            return
        self.version += 1
        extra = max(max_user + 1, 2 * self.capacity, 16) - self.capacity
        self._cohort_of = np.concatenate([self._cohort_of, np.full(extra, UNREGISTERED, np.int64)])
        self._value_of = np.concatenate([self._value_of, np.full(extra, -1, np.int64)])

    def rows(self, users: np.ndarray) -> np.ndarray:
        """The current cohort row of each of ``users`` (a copy; indices below the capacity)."""
        return self._cohort_of[users]

    def assign(self, users: np.ndarray, rows) -> None:
        """Put ``users`` in cohort rows ``rows`` (or WAITING)."""
        self.version += 1
        self._cohort_of[users] = rows

    def renumber(self, remap: np.ndarray) -> None:
        """Cohort rows were renumbered: old row ``r`` is now ``remap[r]``."""
        self.version += 1
        active = self._cohort_of >= 0
        self._cohort_of[active] = remap[self._cohort_of[active]]

    def registered(self) -> np.ndarray:
        """Indices of every registered user (including those waiting for a change)."""
        return np.flatnonzero(self._cohort_of != UNREGISTERED)

    def waiting(self) -> np.ndarray:
        """Indices of the users waiting for a changed fixed requirement."""
        return np.flatnonzero(self._cohort_of == WAITING)

    # ------------------------------------------------------------------ values (carry-forward)
    def remember(self, users: np.ndarray, values: np.ndarray) -> None:
        """Record ``users``' reported values (kept in force until they report again)."""
        self._value_of[users] = values

    def last_values(self, count: int) -> np.ndarray:
        """The last value of users ``0..count-1`` (-1: none yet), read-only view."""
        values = self._value_of[:count]
        values.flags.writeable = False
        return values

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"cohort_of": self._cohort_of, "value_of": self._value_of}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.version += 1
        self._cohort_of = np.array(arrays["cohort_of"], np.int64)
        self._value_of = np.array(arrays["value_of"], np.int64)
