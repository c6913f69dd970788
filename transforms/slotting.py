"""Slots in event time, and the per-slot rule that turns a user's events into one contribution.

Slot ``s`` covers ``[origin + s·L, origin + (s+1)·L)`` for slot length ``L``.
A user's slot closes ``allowed_lateness`` after its end; events for a closed
slot are late.  Within a slot a user contributes once: the event with the
latest event time wins, ties broken by the larger raw record text, so the
choice never depends on arrival order; the others are duplicates.  A
requirement declared at time ``τ`` is in force from the slot containing
``τ`` on.
"""

from __future__ import annotations

import math
from operator import itemgetter
from dataclasses import dataclass

from transforms.records import NO_VALUE, Contribution


@dataclass(frozen=True)
class SlotClock:
    """Maps event time to slots (seconds since the Unix epoch)."""

    slot_seconds: float
    origin: float = 0.0
    allowed_lateness: float = 0.0

    def __post_init__(self):
        if not (isinstance(self.slot_seconds, (int, float)) and math.isfinite(self.slot_seconds)
                and self.slot_seconds > 0):
            raise ValueError(f"slot_seconds must be a positive number, got {self.slot_seconds!r}")
        if not (isinstance(self.origin, (int, float)) and math.isfinite(self.origin)):
            raise ValueError(f"origin must be a finite number of seconds, got {self.origin!r}")
        if not (isinstance(self.allowed_lateness, (int, float)) and math.isfinite(self.allowed_lateness)
                and self.allowed_lateness >= 0):
            raise ValueError(f"allowed_lateness must be >= 0 seconds, got {self.allowed_lateness!r}")

    def slot_of(self, time: float) -> int:
        return math.floor((time - self.origin) / self.slot_seconds)

    def start(self, slot: int) -> float:
        return self.origin + slot * self.slot_seconds

    def end(self, slot: int) -> float:
        return self.origin + (slot + 1) * self.slot_seconds

    def close_time(self, slot: int) -> float:
        """When a user's slot closes (its end plus the allowed lateness)."""
        return self.end(slot) + self.allowed_lateness

    def close_micros(self, slot: int) -> int:
        """:meth:`close_time` in whole microseconds, the unit of Beam timers."""
        return round(self.close_time(slot) * 1_000_000)

    def release_micros(self, slot: int) -> int:
        """When the release stage publishes a slot: 1 ms after every user's slot has closed."""
        return self.close_micros(slot) + 1000


@dataclass(frozen=True)
class SlotOutcome:
    """What one user's closed slots produced."""

    contributions: list
    duplicates: int


def close_slots(events: list, clock: SlotClock, declared: tuple | None) -> tuple[SlotOutcome, tuple | None]:
    """Apply the per-slot rule to one user's events (``Event`` s) of some closed slots.

    ``declared`` is the requirement in force before these slots; returns the
    outcome and the requirement in force after them.
    """
    if not events:
        return SlotOutcome([], 0), declared
    reports = [(e.time, e.value, e.requirement, e.raw) for e in events]
    rows, duplicates, declared = close_user_slots(events[0].user, reports, clock, declared)
    return SlotOutcome(list(map(Contribution._make, rows)), duplicates), declared


def close_user_slots(user: str, reports: list, clock: SlotClock,
                     declared: tuple | None) -> tuple[list, int, tuple | None]:
    """:func:`close_slots` on compact ``(time, value, requirement, raw)`` tuples of one user.

    Returns the contributions as plain tuples (``Contribution`` field order), the
    number of duplicates and the requirement in force after these slots.  One
    sort and one pass: the per-user stage runs this for every record.
    """
    origin, length, floor = clock.origin, clock.slot_seconds, math.floor
    contributions, duplicates = [], 0
    slot = chosen = chosen_time = last_declaration = None
    declaration_only, reported = [], 0
    # Sorted by (time, raw), the order of the rule; slots never decrease along it. Stable: exact ties keep
    # their input order.
    for time, value, requirement, raw in sorted(reports, key=_TIME_RAW) + [_END]:
        at = floor((time - origin) / length) if time is not None else None
        if at != slot:
            if chosen is not None:
                duplicates += reported - 1
                contributions.append((slot, user, chosen[0], declared, (chosen[1], *declaration_only)))
            elif last_declaration is not None:
                contributions.append((slot, user, NO_VALUE, declared, tuple(declaration_only)))
            slot, chosen, last_declaration, declaration_only, reported = at, None, None, [], 0
        if requirement is not None:
            last_declaration = declared = requirement
        if value == NO_VALUE:
            if raw is not None:
                declaration_only.append(raw)
        else:
            reported += 1
            if chosen is None or time != chosen_time or raw != chosen[1]:  # the latest (time, raw); first of ties
                chosen, chosen_time = (value, raw), time
    return contributions, duplicates, declared


_TIME_RAW = itemgetter(0, 3)
_END = (None, NO_VALUE, None, None)  # closes the last slot
