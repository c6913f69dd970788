"""The privacy ledger: an exact, independent check of every user's windows.

The ledger knows nothing about mechanisms or cohorts.  It takes, slot after
slot, what each user was charged and the requirement in force
(:class:`~transforms.mechanisms.base.UserCharges`), and checks

* fixed ``(w, E)``: the last ``w`` charges sum to at most ``E``, at every slot;
* dynamic ``(w_B, E_B, w_F, E_F)`` declared at ``τ``: the charges of
  ``[τ-w_B+1, τ]`` sum to at most ``E_B``, and those of ``[τ, τ+w_F-1]`` to
  at most ``E_F`` (checked when the window closes, and for windows still
  open by :meth:`PrivacyLedger.close`).

Charges are integer budget units.  Each user's running total is kept modulo
2^64 (``uint64`` wraps), and a window sum is the difference of two totals,
which is exact for any stream length because every true window sum is far
below 2^63.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.base import UserCharges
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.requirements import DynamicRequirements


@dataclass(frozen=True)
class Violation:
    """A window whose charges exceed the requirement."""

    user: int
    slot: int           # the slot the window ends at (or the last slot seen, for open windows)
    kind: str           # "fixed", "backward" or "forward"
    window_units: int
    bound_units: int

    def __str__(self) -> str:
        return (f"user {self.user}, {self.kind} window ending at slot {self.slot}: spent "
                f"{units_to_decimal_string(self.window_units)} > {units_to_decimal_string(self.bound_units)}")


class PrivacyLedger:
    """Per-user exact sliding-window sums over an unbounded stream."""

    def __init__(self, max_window: int, max_violations_kept: int = 100):
        if max_window < 1:
            raise ValueError(f"max_window must be >= 1, got {max_window}")
        self.max_window = max_window
        self.slot = 0
        # totals[s % (W+1), u]: user u's running total after slot s; slot-major so one slot is contiguous
        self._totals = np.zeros((max_window + 1, 0), np.uint64)
        self._open_forward: dict[int, list[tuple[np.ndarray, int, np.ndarray]]] = {}  # end -> (users, start, bounds)
        self.max_usage_ratio = 0.0
        self.violation_count = 0
        self.violations: list[Violation] = []
        self._max_kept = max_violations_kept

    # ------------------------------------------------------------------ input
    def record(self, slot: int, charges: UserCharges) -> None:
        """Add one slot's charges (slots must arrive in order, without gaps)."""
        if slot != self.slot + 1:
            raise ValueError(f"ledger expected slot {self.slot + 1}, got {slot}")
        users, units = charges.users, charges.units
        if units.size and units.min() < 0:
            raise ValueError("charges must be non-negative")
        self._grow(int(users.max(initial=-1)) + 1)
        ring = self._totals.shape[0]
        current = self._totals[slot % ring]
        current[:] = self._totals[(slot - 1) % ring]
        current[users] += units.astype(np.uint64)
        self.slot = slot
        reqs = charges.requirements
        if isinstance(reqs, DynamicRequirements):
            self._check(users, self._window_sum(users, reqs.backward_window), reqs.backward_units, "backward")
            windows = reqs.forward_window
            for window in np.flatnonzero(np.bincount(windows)):  # a few distinct windows, each < max_window
                pick = windows == window
                self._open_forward.setdefault(slot + int(window) - 1, []).append(
                    (users[pick], slot, reqs.forward_units[pick]))
            self._close_forward(self._open_forward.pop(slot, []))
        else:
            self._check(users, self._window_sum(users, reqs.window), reqs.epsilon_units, "fixed")

    def close(self) -> None:
        """Check the forward windows still open at the end of the stream."""
        for end in sorted(self._open_forward):
            self._close_forward(self._open_forward[end])
        self._open_forward.clear()

    # ------------------------------------------------------------------ queries
    @property
    def ok(self) -> bool:
        return self.violation_count == 0

    def window_sum(self, user: int, first_slot: int, last_slot: int) -> int:
        """Exact sum of ``user``'s charges over ``[first_slot, last_slot]`` (within the kept depth)."""
        if not (0 < first_slot <= last_slot <= self.slot and self.slot - first_slot < self.max_window):
            raise ValueError("window outside the ledger's kept history")
        if user >= self._totals.shape[1]:
            return 0
        ring = self._totals.shape[0]
        end, start = self._totals[last_slot % ring, user], self._totals[(first_slot - 1) % ring, user]
        difference = (int(end) - int(start)) % 2**64  # Python ints: no numpy overflow warning when totals wrap
        return difference - 2**64 if difference >= 2**63 else difference

    # ------------------------------------------------------------------ state
    def to_bytes(self) -> bytes:
        """The whole ledger (running totals, open forward windows, verdicts) as an ``.npz`` payload."""
        ends = sorted(self._open_forward)
        pending = [(end, *item) for end in ends for item in self._open_forward[end]]
        kept = self.violations
        arrays = {
            "scalars": np.array([self.max_window, self.slot, self.violation_count, self._max_kept], np.int64),
            "max_usage_ratio": np.array(self.max_usage_ratio), "totals": self._totals,
            "forward_head": np.array([(end, start, users.size) for end, users, start, _ in pending],
                                     np.int64).reshape(-1, 3),
            "forward_users": np.concatenate([users for _, users, _, _ in pending] or [np.zeros(0, np.int64)]),
            "forward_bounds": np.concatenate([b for _, _, _, b in pending] or [np.zeros(0, np.int64)]),
            "violations": np.array([(v.user, v.slot, v.window_units, v.bound_units) for v in kept],
                                   np.int64).reshape(-1, 4),
            "violation_kinds": np.array([v.kind for v in kept], dtype="U8"),
        }
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, payload: bytes) -> "PrivacyLedger":
        """Rebuild a ledger saved by :meth:`to_bytes`; it continues exactly where the saved one stopped."""
        with np.load(io.BytesIO(payload), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        max_window, slot, violation_count, max_kept = (int(v) for v in arrays["scalars"])
        ledger = cls(max_window, max_violations_kept=max_kept)
        ledger.slot, ledger.violation_count = slot, violation_count
        ledger.max_usage_ratio = float(arrays["max_usage_ratio"])
        ledger._totals = np.array(arrays["totals"], np.uint64)
        at = 0
        for end, start, size in arrays["forward_head"]:
            ledger._open_forward.setdefault(int(end), []).append(
                (arrays["forward_users"][at:at + size], int(start), arrays["forward_bounds"][at:at + size]))
            at += size
        ledger.violations = [Violation(int(u), int(s), str(kind), int(w), int(b))
                             for (u, s, w, b), kind in zip(arrays["violations"], arrays["violation_kinds"])]
        return ledger

    # ------------------------------------------------------------------ internals
    def _grow(self, users: int) -> None:
        if users > self._totals.shape[1]:
            extra = max(users, 2 * self._totals.shape[1]) - self._totals.shape[1]
            self._totals = np.concatenate([self._totals, np.zeros((self._totals.shape[0], extra), np.uint64)], axis=1)

    def _window_sum(self, users: np.ndarray, lengths: np.ndarray, end: int | None = None) -> np.ndarray:
        end = self.slot if end is None else end
        if lengths.size and lengths.max() > self.max_window:
            raise ValueError(f"a window of {int(lengths.max())} slots exceeds the ledger's max_window="
                             f"{self.max_window}")
        ring = self._totals.shape[0]
        newer = self._totals[end % ring][users]
        if lengths.size and lengths.min() == lengths.max():  # one window length: one contiguous row
            older = self._totals[max(end - int(lengths[0]), 0) % ring][users]
        else:
            older = self._totals[np.maximum(end - lengths, 0) % ring, users]  # slot 0 holds total 0 for everyone
        return (newer - older).view(np.int64)

    def _close_forward(self, pending) -> None:
        ring = self._totals.shape[0]
        for users, start, bounds in pending:
            if self.slot - start + 1 > self.max_window:
                raise ValueError("a forward window outlived the ledger's max_window")
            sums = (self._totals[self.slot % ring][users] - self._totals[(start - 1) % ring][users]).view(np.int64)
            self._check(users, sums, bounds, "forward")

    def _check(self, users: np.ndarray, sums: np.ndarray, bounds: np.ndarray, kind: str) -> None:
        if users.size == 0:
            return
        ratios = sums / bounds
        self.max_usage_ratio = max(self.max_usage_ratio, float(ratios.max()))
        over = np.flatnonzero(sums > bounds)
        self.violation_count += over.size
        for i in over[: max(self._max_kept - len(self.violations), 0)]:
            self.violations.append(Violation(int(users[i]), self.slot, kind, int(sums[i]), int(bounds[i])))
