"""Lifetime budgets: one cohort per distinct budget ``E``.

A lifetime requirement has no window and no history to keep per cohort, so
users who declare the same ``E`` share a row; a user declaring another ``E``
moves to that budget's row (added when no row holds it yet).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.population.cohorts import CohortPolicy
from transforms.mechanisms.population.table import Column
from transforms.mechanisms.requirements import LifetimeRequirements


class LifetimeCohorts(CohortPolicy):
    """Cohorts of users with equal lifetime budgets."""

    columns = {"epsilon_units": Column()}

    def steady(self, batch: SlotBatch) -> bool:
        return batch.requirements is None  # nothing declared (and, as the caller checked, nobody new)

    def in_force(self) -> LifetimeRequirements:
        return LifetimeRequirements(self.table.data["epsilon_units"].copy())

    def declare(self, batch: SlotBatch, slot: int, rows: np.ndarray) -> None:
        users, declaration = self.declarations(batch, rows)
        if declaration is None:
            return
        units = cast(LifetimeRequirements, declaration).epsilon_units
        current = self.registry.rows(users)
        held = self.table.data["epsilon_units"]
        moving = (current < 0) | (held[np.maximum(current, 0)] != units) if held.size else np.ones(users.size, bool)
        if not moving.any():
            return
        movers, units = users[moving], units[moving]
        budgets, inverse = np.unique(units, return_inverse=True)
        targets = np.empty(budgets.size, np.int64)
        for i, budget in enumerate(budgets.tolist()):
            match = np.flatnonzero(self.table.data["epsilon_units"] == budget)
            targets[i] = match[0] if match.size else self.table.add(1)[0]
            self.table.data["epsilon_units"][targets[i]] = budget
        self.leave(movers)
        self.join(movers, targets[inverse.reshape(-1)])
