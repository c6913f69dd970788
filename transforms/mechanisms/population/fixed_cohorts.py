"""Fixed requirements: one cohort per distinct ``(w, E)``, and the change policy.

A changed requirement ``(w, E) → (w', E')`` declared at slot ``t`` takes
effect at ``t + w' - 1``; in between the user waits (WAITING: contributes
nothing, charged nothing) and the old requirement stays in force.
Declaring the old requirement again during the wait cancels the change
(the package docstring states why this is private).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.population.cohorts import CohortPolicy, Memberships
from transforms.mechanisms.population.registry import UserRegistry
from transforms.mechanisms.population.table import UNREGISTERED, WAITING, CohortTable, Column, read_only_copy
from transforms.mechanisms.requirements import FixedRequirements, Requirements

_PER_USER = ("window_of", "units_of", "pending_from", "pending_window", "pending_units")


class FixedCohorts(CohortPolicy):
    """Cohorts of fixed requirements; per user the requirement in force and a pending change."""

    columns = {"window": Column(), "epsilon_units": Column()}

    def __init__(self, registry: UserRegistry, table: CohortTable, default_requirement: Requirements | None):
        super().__init__(registry, table, default_requirement)
        self._per_user = {name: np.zeros(0, np.int64) for name in _PER_USER}
        self.waiting = 0  # how many users wait for a changed requirement
        self.changes = 0  # moves with every change of the per-user arrays

    def _user_array(self, name: str) -> np.ndarray:
        """Per-user array ``name``, as long as the registry's capacity (new users read 0)."""
        values = self._per_user[name]
        if values.size < self.registry.capacity:
            values = self._per_user[name] = np.concatenate(
                [values, np.zeros(self.registry.capacity - values.size, np.int64)])
        return values

    def _write(self, name: str, users: np.ndarray, values) -> None:
        self.changes += 1
        self._user_array(name)[users] = values

    def version(self) -> int:
        return self.registry.version + self.table.version + self.changes

    # ------------------------------------------------------------------ reading
    def steady(self, batch: SlotBatch) -> bool:
        return batch.requirements is None and not self.waiting

    def in_force(self) -> FixedRequirements:
        """Per cohort row, read-only; it changes only with the rows."""
        t = self.table.data
        return self.kept("in_force", lambda: FixedRequirements(read_only_copy(t["window"]),
                                                                read_only_copy(t["epsilon_units"])))

    def requirement_of(self, users: np.ndarray) -> FixedRequirements:
        """The requirement in force for each of ``users`` (registered ones)."""
        return FixedRequirements(self._user_array("window_of")[users], self._user_array("units_of")[users])

    def memberships(self) -> Memberships:
        return self.kept("memberships", self._snapshot)

    def _snapshot(self) -> Memberships:
        waiting = self.registry.waiting() if self.waiting else np.zeros(0, np.int64)
        return Memberships(self.registry.cohort_of(), waiting, self.requirement_of(waiting) if waiting.size else None)

    def held_rows(self) -> np.ndarray:
        """The cohorts waiting users may cancel back into (rejoining their history)."""
        if not self.waiting:
            return np.zeros(0, np.int64)
        keys = self._key_rows()
        held = self.requirement_of(self.registry.waiting())
        return np.array([keys[key] for key in set(zip(held.window.tolist(), held.epsilon_units.tolist()))],
                        np.int64)

    def _key_rows(self) -> dict[tuple[int, int], int]:
        t = self.table.data
        return {(int(w), int(u)): row for row, (w, u) in enumerate(zip(t["window"], t["epsilon_units"]))}

    # ------------------------------------------------------------------ changing
    def declare(self, batch: SlotBatch, slot: int, rows: np.ndarray) -> None:
        self._activate_due(slot)
        self._declare(batch, slot, rows)

    def _cohorts_for(self, windows: np.ndarray, units: np.ndarray) -> np.ndarray:
        """Cohort row of each fixed requirement, creating cohorts that do not exist."""
        keys = self._key_rows()
        pairs = np.stack([windows, units], axis=1)
        distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
        rows = np.empty(distinct.shape[0], np.int64)
        for i, (w, u) in enumerate(distinct):
            row = keys.get((int(w), int(u)))
            if row is None:
                row = int(self.table.add(1)[0])
                self.table.data["window"][row] = w
                self.table.data["epsilon_units"][row] = u
                self.table.widen(int(w))
            rows[i] = row
        return rows[inverse.reshape(-1)]

    def _declare(self, batch: SlotBatch, slot: int, rows: np.ndarray) -> None:
        users, declared = self.declarations(batch, rows)
        if declared is None:
            return
        reqs = cast(FixedRequirements, declared)  # the batch was validated against the kind
        w, u = reqs.window, reqs.epsilon_units
        state = self.registry.rows(users)
        window_of, units_of = self._user_array("window_of"), self._user_array("units_of")
        new = state == UNREGISTERED
        if new.any():
            self._write("window_of", users[new], w[new])
            self._write("units_of", users[new], u[new])
            self.join(users[new], self._cohorts_for(w[new], u[new]))
        known = ~new
        same_in_force = known & (window_of[users] == w) & (units_of[users] == u)
        # a waiting user who declares the old requirement again: cancel the change
        cancel = same_in_force & (state == WAITING)
        if cancel.any():
            self._write("pending_from", users[cancel], 0)
            self.waiting -= int(cancel.sum())
            self.join(users[cancel], self._cohorts_for(w[cancel], u[cancel]))
        changed = known & ~same_in_force
        if not changed.any():
            return
        pending_from = self._user_array("pending_from")
        already = changed & (pending_from[users] > 0) & (self._user_array("pending_window")[users] == w) & \
            (self._user_array("pending_units")[users] == u)
        start = changed & ~already
        if start.any():
            who = users[start]
            self.leave(who)
            self.waiting += int(np.count_nonzero(self.registry.rows(who) != WAITING))
            self.registry.assign(who, WAITING)
            self._write("pending_from", who, slot + w[start] - 1)
            self._write("pending_window", who, w[start])
            self._write("pending_units", who, u[start])
            self._activate_due(slot)  # w' = 1 takes effect at once

    def _activate_due(self, slot: int) -> None:
        if not self.waiting:
            return
        pending_from = self._user_array("pending_from")
        due = np.flatnonzero((pending_from > 0) & (pending_from <= slot))
        if due.size == 0:
            return
        self.waiting -= due.size
        self._write("window_of", due, self._user_array("pending_window")[due])
        self._write("units_of", due, self._user_array("pending_units")[due])
        self._write("pending_from", due, 0)
        self.join(due, self._cohorts_for(self._user_array("window_of")[due], self._user_array("units_of")[due]))

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, np.ndarray]:
        arrays = {name: self._user_array(name) for name in _PER_USER}
        arrays["waiting"] = np.array(self.waiting)
        return arrays

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.changes += 1
        self.waiting = int(arrays["waiting"])
        for name in _PER_USER:
            self._per_user[name] = np.array(arrays[name], np.int64)
