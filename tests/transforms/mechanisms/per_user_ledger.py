"""The plain per-user ledger: every user's windows summed and checked one user at a time.

It is the specification the class-based :class:`~transforms.mechanisms.PrivacyLedger`
must match exactly (same verdicts, same kept violations in the same order, same
window sums); it reads the per-user expansion of the charges
(``Charges.users`` / ``units`` / ``part_units("dissimilarity")``, whatever their
shape) and never groups users.  The requirement it checks is kept user by user
from the declarations in a plain loop (the public rules of ``declared.py``,
written again), a dynamic backward budget is projected from its own sums
(spec §1.6), and a lifetime budget is checked against each user's total spend
kept as a Python integer (no ring, no wrap).
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms import (DISSIMILARITY, Charges, DynamicRequirements, FixedRequirements,
                                   LifetimeRequirements, Violation)


class PerUserLedger:
    """Per-user exact sliding-window sums (running totals modulo 2^64)."""

    def __init__(self, max_window: int, max_violations_kept: int = 100):
        self.max_window = max_window
        self.slot = 0
        self._totals = np.zeros((max_window + 1, 0), np.uint64)  # totals[s % (W+1), user]
        self._dc = np.zeros((max_window + 1, 0), np.uint64)      # the same, dissimilarity part only
        self._lifetime: dict[int, int] = {}                        # user -> every charge so far (exact)
        self._in_force: dict[int, tuple] = {}                      # user -> requirement in force
        self._pending: dict[int, tuple[int, tuple]] = {}           # user -> (from slot, requirement)
        self._open_forward: dict[int, list[tuple[np.ndarray, int, np.ndarray]]] = {}  # end -> (users, start, bounds)
        self.max_usage_ratio = 0.0
        self.violation_count = 0
        self.violations: list[Violation] = []
        self._max_kept = max_violations_kept

    def record(self, slot: int, charges: Charges) -> None:
        assert slot == self.slot + 1
        kind = charges.requirement_kind
        if kind is LifetimeRequirements:
            self._record_lifetime(slot, charges)
            return
        dynamic = kind is DynamicRequirements
        self._declare(slot, charges, kind)
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
                first = slot - self._requirement(u, kind)[0] + 1
                past[u] = self._between(self._totals, u, first, slot - 1)
                past_dc[u] = self._between(self._dc, u, first, slot - 1)
        for totals, added in ((self._totals, units), (self._dc, charges.part_units(DISSIMILARITY))):
            totals[slot % ring] = totals[(slot - 1) % ring]
            totals[slot % ring, users] += added.astype(np.uint64)
        self.slot = slot
        matrix = np.array([self._requirement(u, kind) for u in users.tolist()], np.int64).reshape(-1, kind.width)
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

    def _record_lifetime(self, slot: int, charges: Charges) -> None:
        """Every charge since the user's first slot, against the lifetime budget in force, at every slot."""
        self._declare(slot, charges, LifetimeRequirements)
        self.slot = slot
        users = charges.users
        for user, units in zip(users.tolist(), charges.units.tolist()):
            assert units >= 0
            self._lifetime[user] = self._lifetime.get(user, 0) + units
        spent = np.array([self._lifetime[u] for u in users.tolist()], np.int64)
        bounds = np.array([self._requirement(u, LifetimeRequirements)[0] for u in users.tolist()], np.int64)
        self._check(users, spent, bounds, "lifetime")

    def lifetime_sum(self, user: int) -> int:
        """Every charge ``user`` has had (lifetime requirements only)."""
        return self._lifetime.get(user, 0)

    def _declare(self, slot: int, charges: Charges, kind: type) -> None:
        """The public rules, one user at a time."""
        dynamic = kind is not FixedRequirements  # dynamic and lifetime declarations are in force at once
        for user, (start, requirement) in list(self._pending.items()):
            if start <= slot:
                self._in_force[user] = requirement
                del self._pending[user]
        batch = charges.declarations
        if batch.requirements is not None:
            rows = batch.requirements.as_matrix()
            declared = [(int(u), tuple(int(x) for x in row)) for u, row in zip(batch.users, rows)]
        elif charges.default_requirement is not None:
            default = charges.default_requirement
            row = default.as_matrix()[0]
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

    def _requirement(self, user: int, kind: type) -> tuple:
        """In force for ``user``; one that never declared may be charged nothing."""
        nothing = {FixedRequirements: (1, 0), DynamicRequirements: (1, 0, 1, 0), LifetimeRequirements: (0,)}[kind]
        return self._in_force.get(user, nothing)

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
