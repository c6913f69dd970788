"""The public release range: which slots a job releases, fixed by the operator and not by the data.

Without a range the released slots run from the first slot with data to the
last one, and a long gap is cut short: one user's last report, or one report
far after the others, changes which slots are published, with certainty.  A
``ReleaseRange`` fixes them in advance: every slot that meets ``[start, end)``
is released, in order, empty ones included (the mechanism skips them cheaply),
and no other.  A contribution to a slot outside the range becomes a dead letter
with its reason, so every record is still accounted for.  A requirement
declared in such a record still holds from its slot on (the per-user stage
carries it into the user's later contributions): a user's declaration is
never lost to the range.

The range is public (it is configuration); it is what makes "which slots were
released" independent of any one user's data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from transforms.parsing import time_seconds
from transforms.slotting import SlotClock


@dataclass(frozen=True)
class ReleaseRange:
    """Slots ``first_slot..last_slot`` (inclusive): those meeting ``[start, end)`` seconds on ``clock``."""

    start: float
    end: float
    first_slot: int
    last_slot: int

    def __post_init__(self):
        if not (math.isfinite(self.start) and math.isfinite(self.end) and self.start < self.end):
            raise ValueError(f"the release range needs start < end, got start={self.start!r}, end={self.end!r}")
        if self.first_slot > self.last_slot:
            raise ValueError("the release range holds no slot")

    @classmethod
    def of(cls, clock: SlotClock, start: float, end: float) -> "ReleaseRange":
        """The range of slots that meet ``[start, end)``."""
        if not (math.isfinite(start) and math.isfinite(end)):
            raise ValueError(f"the release range needs finite times, got {start!r} and {end!r}")
        return cls(float(start), float(end), clock.slot_of(start),
                   math.ceil((end - clock.origin) / clock.slot_seconds) - 1)

    def outside(self, slot: int) -> str | None:
        """The dead-letter reason for a contribution to ``slot``, or None when the slot is released."""
        if slot < self.first_slot:
            return f"outside the release range: slot {slot} is before its first slot {self.first_slot} (--start)"
        if slot > self.last_slot:
            return f"outside the release range: slot {slot} is after its last slot {self.last_slot} (--end)"
        return None

    def last_due(self, clock: SlotClock, closed_micros: float) -> int:
        """The last slot of the range that every user has closed by ``closed_micros`` (``clock.close_micros`` at
        or before it; may be infinite), or ``first_slot - 1`` when none has."""
        if closed_micros >= clock.close_micros(self.last_slot):
            return self.last_slot
        # close_micros increases with the slot: estimate, then step to the exact boundary
        estimate = math.floor((closed_micros / 1e6 - clock.allowed_lateness - clock.origin) / clock.slot_seconds) - 1
        slot = min(max(estimate, self.first_slot - 1), self.last_slot)
        while slot + 1 <= self.last_slot and clock.close_micros(slot + 1) <= closed_micros:
            slot += 1
        while slot >= self.first_slot and clock.close_micros(slot) > closed_micros:
            slot -= 1
        return slot

    def split(self, contributions: list) -> tuple[list, list]:
        """``contributions`` (tuples, slot first) inside the range, and those outside it."""
        inside, outside = [], []
        for c in contributions:
            (inside if self.first_slot <= c[0] <= self.last_slot else outside).append(c)
        return inside, outside

    def as_report(self) -> dict:
        """What ``report.json`` says about the range."""
        return {"start": self.start, "end": self.end, "first_slot": self.first_slot, "last_slot": self.last_slot}


def parse_range(start: str | None, end: str | None) -> tuple[float, float] | None:
    """``--start`` and ``--end`` (epoch seconds or ISO 8601; naive times are UTC) -> ``(start, end)`` seconds,
    None without them.  Raises ValueError (one line) when only one is given, they do not parse, or end <= start."""
    if start is None and end is None:
        return None
    if start is None or end is None:
        raise ValueError("give both --start and --end (the public release range), or neither")
    bounds = time_seconds(start, "--start"), time_seconds(end, "--end")
    if bounds[0] >= bounds[1]:
        raise ValueError(f"--start ({start}) must be before --end ({end})")
    return bounds


RANGE_FROM_DATA_WARNING = ("no --start/--end: the released slots run from the first to the last slot with data, "
                           "so which slots are published depends on the data; give --start and --end to fix them")


def range_report(release_range: ReleaseRange | None) -> dict:
    """``report.json``'s keys about the range: ``range_from_data`` and, with a range, its bounds."""
    if release_range is None:
        return {"range_from_data": True}
    return {"range_from_data": False, "release_range": release_range.as_report()}
