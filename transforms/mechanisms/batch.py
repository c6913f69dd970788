"""One slot's input: the columnar batch every mechanism consumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.domain import NO_VALUE, Domain, as_domain
from transforms.mechanisms.requirements import DynamicRequirements, FixedRequirements, Requirements



class BatchExtent(NamedTuple):
    """What validation learned about a batch, so later steps need not scan it again."""

    max_user: int     # largest user index (-1 for an empty batch)
    all_report: bool  # no row's value is NO_VALUE
    dense: bool       # the users are exactly 0, 1, ..., n-1 (everybody reports, as in the papers)


@dataclass(frozen=True)
class SlotBatch:
    """The users reporting in one slot.

    ``users`` are distinct non-negative user indices (the Beam layer maps
    user ids to dense indices per stream); ``values`` are their bins in
    ``[0, d)`` or :data:`NO_VALUE` (int64), or for an interval domain real
    values or NaN (float64); ``requirements``, when given, holds each
    row's requirement (a user's first row must carry one unless the
    mechanism has a default requirement).
    """

    users: np.ndarray
    values: np.ndarray
    requirements: Requirements | None = None

    @classmethod
    def of(cls, users, values, requirements: Requirements | None = None) -> "SlotBatch":
        """Build a batch from any integer sequences (no validation against a domain yet).

        ``users=range(n)`` says that users 0..n-1 all report (the papers'
        setting); validation then need not scan them.
        """
        if isinstance(users, range) and users.start == 0 and users.step == 1:
            users = every_user(len(users))
        values = np.asarray(values)
        numeric = np.float64 if values.dtype.kind == "f" and values.size else np.int64  # never truncate a real value
        return cls(np.asarray(users, dtype=np.int64).reshape(-1), values.astype(numeric, copy=False).reshape(-1),
                   requirements)

    @classmethod
    def empty(cls) -> "SlotBatch":
        """A slot in which nobody reports (released like any other slot)."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return self.users.size

    def validate(self, domain: Domain | int, requirement_kind: type | None = None) -> BatchExtent:
        """Raise ``ValueError`` naming the problem; called before any state changes.

        ``domain`` is the mechanism's (a number of bins means categorical bins).
        """
        domain = as_domain(domain)
        users, values = self.users, self.values
        if users.ndim != 1 or values.ndim != 1:
            raise ValueError("users and values must be one-dimensional")
        n = users.size
        if n != values.size:
            raise ValueError(f"users has {n} entries but values has {values.size}")
        if users.dtype != np.int64 or (values.dtype != domain.dtype and n):
            raise ValueError(f"users must be int64 and values {np.dtype(domain.dtype)} for this domain "
                             f"(SlotBatch.of converts), got {users.dtype} and {values.dtype}")
        if n == 0:
            extent = BatchExtent(-1, True, True)
        elif _EVERY_USER.owns(users):
            extent = BatchExtent(n - 1, domain.all_report(values), True)
        else:
            first, last = int(users[0]), int(users[-1])
            ascending = n == 1 or np.count_nonzero(users[1:] > users[:-1]) == n - 1  # the usual batch
            if (first if ascending else users.min()) < 0:
                raise ValueError("users must be non-negative indices")
            if not ascending and not _distinct(users):
                raise ValueError("users must be distinct within a slot (one contribution per user per slot)")
            max_user = last if ascending else int(users.max())
            extent = BatchExtent(max_user, domain.all_report(values), ascending and first == 0 and last == n - 1)
        if self.requirements is not None:
            if len(self.requirements) != users.size:
                raise ValueError(f"requirements has {len(self.requirements)} rows, expected {users.size}")
            if requirement_kind is not None and not isinstance(self.requirements, requirement_kind):
                raise ValueError(f"this mechanism takes {requirement_kind.__name__}, "
                                 f"got {type(self.requirements).__name__}")
        return extent


class _EveryUserIndex:
    """Read-only arrays 0, 1, 2, ... backed by bytes, so no view of them can ever be written to."""

    def __init__(self):
        self.largest = np.zeros(0, np.int64)
        self.made: dict[int, np.ndarray] = {}  # id -> array; every one made is kept, so ids stay unique

    def prefix(self, n: int) -> np.ndarray:
        if n > self.largest.size:
            size = max(n, 2 * self.largest.size)
            self.largest = np.frombuffer(np.arange(size, dtype=np.int64).tobytes(), np.int64)
            self.made[id(self.largest)] = self.largest
        return self.largest[:n]

    def owns(self, users: np.ndarray) -> bool:
        """A contiguous view starting at 0 of an array made here, so exactly 0..n-1."""
        return id(users.base) in self.made and users.strides == (8,) and users[0] == 0


_EVERY_USER = _EveryUserIndex()


def every_user(n: int) -> np.ndarray:
    """The users 0..n-1 as a read-only array that validation recognizes without scanning it."""
    return _EVERY_USER.prefix(n)


def _distinct(users: np.ndarray) -> bool:
    ordered = np.sort(users)
    return bool(np.all(ordered[1:] != ordered[:-1]))


__all__ = ["NO_VALUE", "BatchExtent", "SlotBatch", "every_user", "FixedRequirements", "DynamicRequirements"]
