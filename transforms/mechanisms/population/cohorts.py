"""What a cohort policy shares: joining and leaving, compaction, and the snapshots releases read.

A policy (:class:`~.fixed_cohorts.FixedCohorts` or
:class:`~.dynamic_cohorts.DynamicCohorts`, chosen once by the requirement
kind) owns the cohort table's requirement columns and applies each slot's
declarations.  Everything it derives is kept per version: the registry's and the
table's counters, which every change of memberships or rows moves.
"""

from __future__ import annotations

import abc
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.population.registry import UserRegistry
from transforms.mechanisms.population.table import UNREGISTERED, CohortTable, Column, read_only_copy
from transforms.mechanisms.requirements import FixedRequirements, Requirements

_COMPACT_FROM_ROWS = 64


class Memberships(NamedTuple):
    """Read-only snapshot of who is in which cohort row, shared by every release until it changes."""

    cohort_of: np.ndarray                 # cohort row per user index (or UNREGISTERED / WAITING)
    waiting_users: np.ndarray             # users waiting for a changed fixed requirement
    waiting_requirements: FixedRequirements | None  # the requirement still in force for each of them


class CohortPolicy(abc.ABC):
    """How declarations move users between cohorts, for one requirement kind."""

    columns: dict[str, Column]  # the requirement columns this policy keeps in the table

    def __init__(self, registry: UserRegistry, table: CohortTable, default_requirement: Requirements | None):
        self.registry = registry
        self.table = table
        self.default_requirement = default_requirement
        self._kept: dict[str, tuple[int, object]] = {}

    # ------------------------------------------------------------------ per slot
    @abc.abstractmethod
    def steady(self, batch: SlotBatch) -> bool:
        """Whether ``batch`` (all of whose users are in cohorts) leaves memberships and the table as they are."""

    @abc.abstractmethod
    def declare(self, batch: SlotBatch, slot: int, rows: np.ndarray) -> None:
        """Apply slot ``slot``'s declarations; ``rows`` are the batch users' rows before any change."""

    @abc.abstractmethod
    def in_force(self) -> Requirements:
        """The requirement in force per cohort row."""

    def held_rows(self) -> np.ndarray:
        """Empty rows compaction must keep (their history is still someone's)."""
        return np.zeros(0, np.int64)

    def memberships(self) -> Memberships:
        """This slot's memberships; one snapshot serves every slot in which nobody joins or changes."""
        return self.kept("memberships", lambda: Memberships(self.registry.cohort_of(), np.zeros(0, np.int64), None))

    def sizes(self) -> np.ndarray:
        """Registered users per cohort row (public), read-only."""
        return self.kept("sizes", lambda: read_only_copy(self.table.size))

    # ------------------------------------------------------------------ derived state
    def version(self) -> int:
        """Moves whenever memberships or the table's rows change (a sum of counters that only grow)."""
        return self.registry.version + self.table.version

    def kept(self, name: str, compute):
        """``compute()``, kept until :meth:`version` moves (so never stale)."""
        version = self.version()
        entry = self._kept.get(name)
        if entry is None or entry[0] != version:
            entry = self._kept[name] = (version, compute())
        return entry[1]

    # ------------------------------------------------------------------ shared steps
    def declarations(self, batch: SlotBatch, rows: np.ndarray) -> tuple[np.ndarray, Requirements | None]:
        """``(users, requirements)`` declared this slot.

        Rows without requirement columns declare nothing, except that a new
        user is given the default requirement.
        """
        if batch.requirements is not None:
            return batch.users, (batch.requirements if batch.users.size else None)
        if self.default_requirement is None:
            return batch.users[:0], None
        users = batch.users[rows == UNREGISTERED]
        if users.size == 0:
            return users, None
        return users, self.default_requirement.take(np.zeros(users.size, np.int64))

    def join(self, users: np.ndarray, rows: np.ndarray) -> None:
        self.registry.assign(users, rows)
        self.table.size += np.bincount(rows, minlength=self.table.rows)

    def leave(self, users: np.ndarray) -> None:
        rows = self.registry.rows(users)
        self.table.size -= np.bincount(rows[rows >= 0], minlength=self.table.rows)

    def compact(self) -> None:
        """Drop cohort rows nobody is in once they are more than half the table (and 64 or more)."""
        table = self.table
        if table.rows < _COMPACT_FROM_ROWS:
            return
        dead = table.size == 0
        if dead.sum() * 2 <= table.rows:
            return
        dead[self.held_rows()] = False
        self.registry.renumber(table.keep(np.flatnonzero(~dead)))

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, np.ndarray]:
        """State beyond the table and the registry (none by default)."""
        return {}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`state_arrays`."""
