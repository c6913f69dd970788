"""The plain per-user ledger: every user's windows summed and checked one user at a time.

It is the specification the class-based :class:`~transforms.mechanisms.PrivacyLedger`
must match exactly (same verdicts, same kept violations in the same order, same
window sums); it reads the per-user expansion of the charges
(``UserCharges.users`` / ``units`` / ``requirements``) and never groups users.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms import DynamicRequirements, UserCharges, Violation


class PerUserLedger:
    """Per-user exact sliding-window sums (running totals modulo 2^64)."""

    def __init__(self, max_window: int, max_violations_kept: int = 100):
        self.max_window = max_window
        self.slot = 0
        self._totals = np.zeros((max_window + 1, 0), np.uint64)  # totals[s % (W+1), user]
        self._open_forward: dict[int, list[tuple[np.ndarray, int, np.ndarray]]] = {}  # end -> (users, start, bounds)
        self.max_usage_ratio = 0.0
        self.violation_count = 0
        self.violations: list[Violation] = []
        self._max_kept = max_violations_kept

    def record(self, slot: int, charges: UserCharges) -> None:
        assert slot == self.slot + 1
        users, units = charges.users, charges.units
        assert units.min(initial=0) >= 0
        width = int(users.max(initial=-1)) + 1
        if width > self._totals.shape[1]:
            extra = np.zeros((self._totals.shape[0], width - self._totals.shape[1]), np.uint64)
            self._totals = np.concatenate([self._totals, extra], axis=1)
        ring = self._totals.shape[0]
        self._totals[slot % ring] = self._totals[(slot - 1) % ring]
        self._totals[slot % ring, users] += units.astype(np.uint64)
        self.slot = slot
        reqs = charges.requirements
        if isinstance(reqs, DynamicRequirements):
            self._check(users, self._since(users, slot - reqs.backward_window + 1), reqs.backward_units, "backward")
            for window in np.unique(reqs.forward_window):
                pick = reqs.forward_window == window
                self._open_forward.setdefault(slot + int(window) - 1, []).append(
                    (users[pick], slot, reqs.forward_units[pick]))
            self._close_forward(self._open_forward.pop(slot, []))
        else:
            self._check(users, self._since(users, slot - reqs.window + 1), reqs.epsilon_units, "fixed")

    def close(self) -> None:
        for end in sorted(self._open_forward):
            self._close_forward(self._open_forward[end])
        self._open_forward.clear()

    def window_sum(self, user: int, first_slot: int, last_slot: int) -> int:
        if user >= self._totals.shape[1]:
            return 0
        ring = self._totals.shape[0]
        difference = (int(self._totals[last_slot % ring, user]) - int(self._totals[(first_slot - 1) % ring, user]))
        return difference % 2**64

    def _since(self, users: np.ndarray, first_slots) -> np.ndarray:
        ring = self._totals.shape[0]
        older = np.maximum(np.asarray(first_slots) - 1, 0) % ring
        return (self._totals[self.slot % ring, users] - self._totals[older, users]).view(np.int64)

    def _close_forward(self, pending) -> None:
        for users, start, bounds in pending:
            self._check(users, self._since(users, start), bounds, "forward")

    def _check(self, users: np.ndarray, sums: np.ndarray, bounds: np.ndarray, kind: str) -> None:
        if users.size == 0:
            return
        self.max_usage_ratio = max(self.max_usage_ratio, float((sums / bounds).max()))
        over = np.flatnonzero(sums > bounds)
        self.violation_count += over.size
        for i in over[: max(self._max_kept - len(self.violations), 0)]:
            self.violations.append(Violation(int(users[i]), self.slot, kind, int(sums[i]), int(bounds[i])))
