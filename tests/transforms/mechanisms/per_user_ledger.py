"""The plain per-user ledger: every user's windows summed and checked one user at a time.

It is the specification the class-based :class:`~transforms.mechanisms.PrivacyLedger`
must match exactly (same verdicts, same kept violations in the same order, same
window sums); it reads the per-user expansion of the charges
(``UserCharges.users`` / ``units`` / ``dc_units``) and never groups users.  The
requirement it checks is kept user by user from the declarations in a plain
loop (the public rules of ``declared.py``, written again), and a dynamic
backward budget is projected from its own sums (spec §1.6).
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms import DynamicRequirements, FixedRequirements, UserCharges, Violation


class PerUserLedger:
    """Per-user exact sliding-window sums (running totals modulo 2^64)."""

    def __init__(self, max_window: int, max_violations_kept: int = 100):
        self.max_window = max_window
        self.slot = 0
        self._totals = np.zeros((max_window + 1, 0), np.uint64)  # totals[s % (W+1), user]
        self._dc = np.zeros((max_window + 1, 0), np.uint64)      # the same, dissimilarity part only
        self._in_force: dict[int, tuple] = {}                      # user -> requirement in force
        self._pending: dict[int, tuple[int, tuple]] = {}           # user -> (from slot, requirement)
        self._open_forward: dict[int, list[tuple[np.ndarray, int, np.ndarray]]] = {}  # end -> (users, start, bounds)
        self.max_usage_ratio = 0.0
        self.violation_count = 0
        self.violations: list[Violation] = []
        self._max_kept = max_violations_kept

    def record(self, slot: int, charges: UserCharges) -> None:
        assert slot == self.slot + 1
        dynamic = isinstance(charges.cohort_requirements, DynamicRequirements)
        self._declare(slot, charges, dynamic)
        users, units = charges.users, charges.units
        assert units.min(initial=0) >= 0
        width = int(users.max(initial=-1)) + 1
        if width > self._totals.shape[1]:
            extra = np.zeros((self._totals.shape[0], width - self._totals.shape[1]), np.uint64)
            self._totals = np.concatenate([self._totals, extra], axis=1)
            self._dc = np.concatenate([self._dc, extra], axis=1)
        ring = self._totals.shape[0]
        past, past_dc = {}, {}
        if dynamic:
            for u in users.tolist():
                first = slot - self._requirement(u, dynamic)[0] + 1
                past[u] = self._between(self._totals, u, first, slot - 1)
                past_dc[u] = self._between(self._dc, u, first, slot - 1)
        for totals, added in ((self._totals, units), (self._dc, charges.dc_units)):
            totals[slot % ring] = totals[(slot - 1) % ring]
            totals[slot % ring, users] += added.astype(np.uint64)
        self.slot = slot
        matrix = np.array([self._requirement(u, dynamic) for u in users.tolist()], np.int64).reshape(-1, 4 if dynamic else 2)
        reqs = (DynamicRequirements(*matrix.T) if dynamic else FixedRequirements(*matrix.T))
        if dynamic:
            bounds = np.array([max(int(e), 2 * past_dc[u], 2 * (past[u] - past_dc[u]))
                               for u, e in zip(users.tolist(), reqs.backward_units)], np.int64)
            self._check(users, self._since(users, slot - reqs.backward_window + 1), bounds, "backward")
            for window in np.unique(reqs.forward_window):
                pick = reqs.forward_window == window
                self._open_forward.setdefault(slot + int(window) - 1, []).append(
                    (users[pick], slot, reqs.forward_units[pick]))
            self._close_forward(self._open_forward.pop(slot, []))
        else:
            self._check(users, self._since(users, slot - reqs.window + 1), reqs.epsilon_units, "fixed")

    def _declare(self, slot: int, charges: UserCharges, dynamic: bool) -> None:
        """The public rules, one user at a time."""
        for user, (start, requirement) in list(self._pending.items()):
            if start <= slot:
                self._in_force[user] = requirement
                del self._pending[user]
        batch = charges.declarations
        if batch.requirements is not None:
            rows = batch.requirements.as_matrix() if dynamic else \
                np.stack([batch.requirements.window, batch.requirements.epsilon_units], axis=1)
            declared = [(int(u), tuple(int(x) for x in row)) for u, row in zip(batch.users, rows)]
        elif charges.default_requirement is not None:
            default = charges.default_requirement
            row = default.as_matrix()[0] if dynamic else (default.window[0], default.epsilon_units[0])
            declared = [(int(u), tuple(int(x) for x in row)) for u in batch.users if int(u) not in self._in_force]
        else:
            declared = []
        for user, requirement in declared:
            if user not in self._in_force or dynamic:
                self._in_force[user] = requirement
            elif requirement == self._in_force[user]:
                self._pending.pop(user, None)
            elif self._pending.get(user, (0, None))[1] != requirement:
                start = slot + requirement[0] - 1
                if start <= slot:
                    self._in_force[user] = requirement
                    self._pending.pop(user, None)
                else:
                    self._pending[user] = (start, requirement)

    def _requirement(self, user: int, dynamic: bool) -> tuple:
        """In force for ``user``; one that never declared may be charged nothing."""
        return self._in_force.get(user, (1, 0, 1, 0) if dynamic else (1, 0))

    def _between(self, totals, user: int, first: int, last: int) -> int:
        ring = totals.shape[0]
        return (int(totals[last % ring, user]) - int(totals[max(first - 1, 0) % ring, user])) % 2**64

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
        ratios = [s / b if b > 0 else (np.inf if s > 0 else 0.0) for s, b in zip(sums.tolist(), bounds.tolist())]
        self.max_usage_ratio = max(self.max_usage_ratio, max(ratios))
        over = np.flatnonzero(sums > bounds)
        self.violation_count += over.size
        for i in over[: max(self._max_kept - len(self.violations), 0)]:
            self.violations.append(Violation(int(users[i]), self.slot, kind, int(sums[i]), int(bounds[i])))
