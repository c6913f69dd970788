"""Every public schedule by method name, kept in one place; the ledger builds a method's schedule here.

A family plugs in by adding its :class:`~transforms.mechanisms.public_schedule.PublicSchedule` subclass to
:data:`SCHEDULE_CLASSES` (its ``methods`` name the methods it serves).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from transforms.mechanisms.public_schedule import PublicSchedule
from transforms.mechanisms.public_schedule.dpi import DPISchedule
from transforms.mechanisms.public_schedule.ldp import LocalSchedule
from transforms.mechanisms.public_schedule.numeric import NumericSchedule

SCHEDULE_CLASSES: tuple[type[PublicSchedule], ...] = (LocalSchedule, DPISchedule, NumericSchedule)

SCHEDULES: dict[str, type[PublicSchedule]] = {name: cls for cls in SCHEDULE_CLASSES for name in cls.methods}
"""Method name -> the schedule class that serves it."""


def has_schedule(method: str) -> bool:
    """Whether ``method`` has a public schedule (the central mechanisms have none: their evidence is checked)."""
    return method in SCHEDULES


def schedule_for(method: str, params: Mapping[str, Any] | Any) -> PublicSchedule:
    """The public schedule of ``method`` with these public parameters (a mapping, or a ``MechanismParams``)."""
    if method not in SCHEDULES:
        raise ValueError(f"no public schedule for {method!r}")
    if not isinstance(params, Mapping):
        params = json.loads(params.to_json())
    return SCHEDULES[method](method, params)


def schedule_if_any(method: str, params: Mapping[str, Any] | Any) -> PublicSchedule | None:
    """:func:`schedule_for`, or None for a method without a public schedule (its ledger checks the evidence)."""
    return schedule_for(method, params) if method in SCHEDULES else None
