"""One slot's input: the columnar batch every mechanism consumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.requirements import DynamicRequirements, FixedRequirements, Requirements

NO_VALUE = -1
"""A batch value meaning "this row only declares a requirement, it reports no bin"."""


class BatchExtent(NamedTuple):
    """What validation learned about a batch, so later steps need not scan it again."""

    max_user: int   # largest user index (-1 for an empty batch)
    min_value: int  # smallest value (NO_VALUE when some row reports nothing; 0 for an empty batch)
    dense: bool     # the users are exactly 0, 1, ..., n-1 (everybody reports, as in the papers)


@dataclass(frozen=True)
class SlotBatch:
    """The users reporting in one slot.

    ``users`` are distinct non-negative user indices (the Beam layer maps
    user ids to dense indices per stream); ``values`` are their bins in
    ``[0, d)`` or :data:`NO_VALUE`; ``requirements``, when given, holds each
    row's requirement (a user's first row must carry one unless the
    mechanism has a default requirement).
    """

    users: np.ndarray
    values: np.ndarray
    requirements: Requirements | None = None

    @classmethod
    def of(cls, users, values, requirements: Requirements | None = None) -> "SlotBatch":
        """Build a batch from any integer sequences (no validation against a domain yet)."""
        return cls(np.asarray(users, dtype=np.int64).reshape(-1),
                   np.asarray(values, dtype=np.int64).reshape(-1), requirements)

    @classmethod
    def empty(cls) -> "SlotBatch":
        """A slot in which nobody reports (released like any other slot)."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return self.users.size

    def validate(self, bins: int, requirement_kind: type | None = None) -> BatchExtent:
        """Raise ``ValueError`` naming the problem; called before any state changes."""
        users, values = self.users, self.values
        if users.ndim != 1 or values.ndim != 1:
            raise ValueError("users and values must be one-dimensional")
        n = users.size
        if n != values.size:
            raise ValueError(f"users has {n} entries but values has {values.size}")
        if n == 0:
            extent = BatchExtent(-1, 0, True)
        else:
            first, last = int(users[0]), int(users[-1])
            ascending = n == 1 or np.count_nonzero(users[1:] > users[:-1]) == n - 1  # the usual batch
            if (first if ascending else users.min()) < 0:
                raise ValueError("users must be non-negative indices")
            if not ascending and not _distinct(users):
                raise ValueError("users must be distinct within a slot (one contribution per user per slot)")
            max_user = last if ascending else int(users.max())
            min_value = int(values.min())
            if min_value < NO_VALUE or values.max() >= bins:
                raise ValueError(f"values must be bins in [0, {bins}) or NO_VALUE (-1)")
            extent = BatchExtent(max_user, min_value, ascending and first == 0 and last == n - 1)
        if self.requirements is not None:
            if len(self.requirements) != users.size:
                raise ValueError(f"requirements has {len(self.requirements)} rows, expected {users.size}")
            if requirement_kind is not None and not isinstance(self.requirements, requirement_kind):
                raise ValueError(f"this mechanism takes {requirement_kind.__name__}, "
                                 f"got {type(self.requirements).__name__}")
        return extent


def _distinct(users: np.ndarray) -> bool:
    ordered = np.sort(users)
    return bool(np.all(ordered[1:] != ordered[:-1]))


__all__ = ["NO_VALUE", "BatchExtent", "SlotBatch", "FixedRequirements", "DynamicRequirements"]
