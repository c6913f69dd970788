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
from dataclasses import dataclass

from transforms.records import NO_VALUE, Contribution, Event


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
    """Apply the per-slot rule to one user's events of some closed slots.

    ``declared`` is the requirement in force before these slots; returns the
    outcome and the requirement in force after them.
    """
    by_slot: dict[int, list] = {}
    for event in events:
        by_slot.setdefault(clock.slot_of(event.time), []).append(event)
    contributions, duplicates = [], 0
    for slot in sorted(by_slot):
        slot_events = by_slot[slot]
        declarations = sorted((e for e in slot_events if e.requirement is not None), key=_order)
        if declarations:
            declared = declarations[-1].requirement
        reports = [e for e in slot_events if e.value != NO_VALUE]
        declaration_only = tuple(e.raw for e in sorted(slot_events, key=_order) if e.value == NO_VALUE)
        if reports:
            chosen = max(reports, key=_order)
            duplicates += len(reports) - 1
            contributions.append(Contribution(slot, chosen.user, chosen.value, declared,
                                              (chosen.raw,) + declaration_only))
        elif declarations:
            contributions.append(Contribution(slot, declarations[-1].user, NO_VALUE, declared, declaration_only))
    return SlotOutcome(contributions, duplicates), declared


def _order(event: Event):
    return event.time, event.raw

