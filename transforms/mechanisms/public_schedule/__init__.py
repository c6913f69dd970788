"""Least charges from the public schedule: what a device or an observer sees, checked without the mechanism.

The central family's ledger derives least charges from what a release was computed from.  For the local
and DPI families the budget numbers of that evidence are the mechanism's own (an oracle's ``keep/other``, a
draw's units), so a mechanism bug would hide behind its own bookkeeping.  Here the ledger rebuilds each
report's or draw's least charge from **public facts only**:

* the method and its public parameters (a :class:`PublicSchedule` is built from them, by name, in
  :mod:`.registry`);
* the release's :class:`PublicRecord` (on ``Charges.public_record``): per request the part, the law's
  kind, the domain size, the budget named, the users asked and the users whose reports entered the
  estimate (:class:`ReportRecord`); per draw the units it was drawn at and how many
  (:class:`DrawRecord`) and the slot's public figures (DPI's epoch, series index, slot budget);
* the slot and the requirement each user declared (:class:`SlotFacts`);
* the randomizer's law rebuilt from those with certified arithmetic (:mod:`.laws`).

A schedule returns a :class:`SlotVerdict`: the least units of every user the slot touched, and
:class:`Finding`\\ s of what the public schedule rules out (a request off the schedule, a law the evidence
names other than the schedule's, a report from a user who was not asked, a user asked twice within ``w``,
a lifetime prefix overspent).  The ledger flags a charge below the least as ``undercharged`` and each
finding under its kind.  The schedule reads the mechanism's evidence only to compare the law it names
with the schedule's, never for a budget.  This package imports no mechanism module.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np

from transforms.mechanisms.evidence import Evidence

OFF_SCHEDULE = "off_schedule"
"""A request or draw the public schedule does not name (wrong budget, law, part, domain or slot)."""
LAW_MISMATCH = "law_mismatch"
"""The law the evidence says the reports were computed with is not the law the schedule names."""
UNASKED_REPORT = "unasked_report"
"""A report entered an estimate from a user the request did not ask."""
ASKED_TWICE = "asked_twice_in_window"
"""A population method asked a user again within ``w`` slots."""
LIFETIME_PREFIX = "lifetime_prefix"
"""The published draws of an epoch add up to more than the epoch's budget."""
MEMORY_WINDOW = "memory_window"
"""A change of one user's values within ``w`` slots moves reports (the span's and those whose memory reaches into
it, numeric family) whose least charges add up to more than ``E``."""
FINDING_KINDS = (OFF_SCHEDULE, LAW_MISMATCH, UNASKED_REPORT, ASKED_TWICE, LIFETIME_PREFIX, MEMORY_WINDOW)


def _users(values, name: str) -> np.ndarray:
    users = np.asarray(values)
    if users.ndim != 1 or (users.size and users.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a 1-D array of user indices")
    return users.astype(np.int64, copy=False)


class ReportRecord(NamedTuple):
    """One request of a slot as the devices saw it, and whose reports the estimate counted.

    ``law`` is the randomizer's kind ("grr", "oue", "sr", "hm", or a numeric law), ``domain`` its domain size
    (1 for a mean), ``epsilon_units`` the budget the request named; ``asked`` and ``entered`` are user
    indices (ascending).  A plain tuple: a slot makes a few.
    """

    part: str
    law: str
    domain: int
    epsilon_units: int
    asked: np.ndarray
    entered: np.ndarray


class DrawRecord(NamedTuple):
    """Draws of a selection every registered user entered (DPI): ``draws`` draws at ``units_per_draw`` each."""

    name: str
    units_per_draw: int
    draws: int


@dataclass(frozen=True, eq=False)
class PublicRecord:
    """What a release publicly did: the method, its public parameters, its requests and draws, its figures.

    ``params`` are the method's parameters as plain JSON values (``MechanismParams.to_json``);
    ``figures`` the public numbers a release states beside its estimate that the schedule needs (DPI:
    ``epoch``, ``series_index``, ``slot_units``).  Distinct from the evidence: it is what a device or an
    observer sees, built where the requests are sent, not from the mechanism's accounting.
    """

    method: str
    params: Mapping[str, Any]
    reports: tuple[ReportRecord, ...] = ()
    draws: tuple[DrawRecord, ...] = ()
    figures: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.method, str) or not self.method:
            raise ValueError("a public record names its method")
        reports = tuple(self.reports)
        for report in reports:
            if not isinstance(report, ReportRecord):
                raise ValueError("public reports must be ReportRecords")
            _users(report.asked, "asked"), _users(report.entered, "entered")
        draws = tuple(self.draws)
        if any(not isinstance(d, DrawRecord) or d.draws < 0 or d.units_per_draw < 0 for d in draws):
            raise ValueError("public draws must be DrawRecords with non-negative counts and units")
        object.__setattr__(self, "reports", reports)
        object.__setattr__(self, "draws", draws)


class Finding(NamedTuple):
    """What the public schedule rules out at a slot: its kind, the users concerned, the expected and seen value
    (budget units where the finding is about a budget, else a count or slot)."""

    kind: str
    users: np.ndarray
    expected: int
    seen: int


class SlotVerdict(NamedTuple):
    """Least units of each user a slot touched (``users`` ascending, distinct) and the findings."""

    users: np.ndarray
    least: np.ndarray
    findings: tuple[Finding, ...] = ()


class SlotFacts(NamedTuple):
    """What a schedule may read at a slot.

    ``registered`` are the registered user indices (ascending); ``declared(users)`` gives each user's declared
    requirement row (the ledger's :class:`~transforms.mechanisms.declared.DeclaredRequirements` matrix: (w, E)
    for fixed requirements, (w_B, E_B, w_F, E_F) for dynamic ones, (E,) for a lifetime budget); ``evidence``
    is read only to compare its laws with the schedule's.
    """

    slot: int
    record: PublicRecord
    registered: np.ndarray
    declared: Callable[[np.ndarray], np.ndarray]
    evidence: Evidence


class PublicSchedule(abc.ABC):
    """The public rules of one method: built from its name and public parameters, stateful across slots.

    Subclasses list the method names they serve in ``methods`` (the registry keys them there, in one place)
    and implement :meth:`verdict`.  Their state (e.g. who was asked when) round-trips through
    :meth:`state_arrays` so a ledger resumed from saved state checks on exactly where it stopped.
    """

    methods: ClassVar[tuple[str, ...]] = ()

    def __init__(self, method: str, params: Mapping[str, Any]):
        if method not in self.methods:
            raise ValueError(f"{type(self).__name__} has no schedule for {method!r}")
        self.method, self.params = method, dict(params)

    @abc.abstractmethod
    def verdict(self, facts: SlotFacts) -> SlotVerdict:
        """Least units and findings of one slot (slots arrive in order)."""

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The schedule's state as named arrays (none by default)."""
        return {}

    def load_state_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Inverse of :meth:`state_arrays`."""


LEAST_BITS = 56
"""A packed least charge (:func:`packed_least`) holds the units below bit 56 and one bit per finding kind above."""
FINDING_BITS = {kind: 1 << (LEAST_BITS + i) for i, kind in enumerate(FINDING_KINDS)}


def registered_verdict(schedule: PublicSchedule, slot: int, charges, declared: Callable[[np.ndarray], np.ndarray]
                       ) -> SlotVerdict:
    """``schedule``'s verdict on a release's ``charges`` (any ``Charges``: its ``public_record``, ``users`` and
    ``evidence``), with ``declared`` the caller's own register of what users declared."""
    record = charges.public_record
    if record is None:
        raise ValueError(f"a release without its public record reached {schedule.method}'s public schedule")
    if record.method != schedule.method:
        raise ValueError(f"a release of {record.method!r} reached {schedule.method!r}'s public schedule")
    group_of = charges.group_of
    registered = every_index(group_of.size) if group_of.min(initial=0) >= 0 else charges.users
    return schedule.verdict(SlotFacts(slot, record, registered, declared, charges.evidence))


@functools.lru_cache(maxsize=4)
def every_index(size: int) -> np.ndarray:
    """``0..size-1``, read-only: the registered users when every index is in a group (no scan needed)."""
    users = np.arange(size)
    users.flags.writeable = False
    return users


def packed_least(verdict: SlotVerdict, registered: np.ndarray) -> np.ndarray:
    """Per registered user (ascending), the least units with the kinds of the findings about them in the bits
    from :data:`LEAST_BITS` up: one int64 column carries both to the per-user ledger.

    Raises when a user who is not registered entered a report (no requirement, no charge: unaccountable).
    """
    least = verdict.least
    if least.size and int(least.max()) >= 1 << LEAST_BITS:
        raise ValueError("a least charge at or above 2**56 units cannot be packed")
    packed = np.zeros(registered.size, np.int64)
    at, inside = _positions(verdict.users, registered)
    if inside.all():
        packed[at] = least
    elif (least[~inside] > 0).any():
        raise ValueError(f"users {verdict.users[~inside][:5].tolist()} entered a report without being registered")
    else:
        packed[at[inside]] = least[inside]
    for finding in verdict.findings:  # a finding about an unregistered user has no row here (the core ledger has)
        at, inside = _positions(finding.users, registered)
        packed[at[inside]] |= FINDING_BITS[finding.kind]
    return packed


def _positions(users: np.ndarray, registered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``users`` sits in ``registered`` (ascending), and whether it is there."""
    if registered.size == 0:
        return np.zeros(users.size, np.int64), np.zeros(users.size, bool)
    if registered[0] == 0 and registered[-1] == registered.size - 1:  # distinct and ascending: 0..n-1, no search
        if not users.size or (users[0] >= 0 and users[-1] < registered.size):  # users ascending: all inside
            return users, np.ones(users.size, bool)
        inside = (users >= 0) & (users < registered.size)
        return np.where(inside, users, 0), inside
    at = np.minimum(np.searchsorted(registered, users), registered.size - 1)
    return at, registered[at] == users


def unpack_least(packed: np.ndarray) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Inverse of :func:`packed_least` for one column: the least units and ``(row, kind)`` of every finding."""
    packed = np.asarray(packed, np.int64)
    least = packed & ((1 << LEAST_BITS) - 1)
    findings = [(int(row), kind) for kind, bit in FINDING_BITS.items() for row in np.flatnonzero(packed & bit)]
    return least, sorted(findings)


def least_of_reports(reports, units_of: Callable[[Any], int]) -> tuple[np.ndarray, np.ndarray]:
    """Each user who entered any of ``reports`` (ascending) and the sum of ``units_of(report)`` over those they
    entered: array work, one pass per report."""
    entered = [r.entered for r in reports if r.entered.size]
    if not entered:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(entered) == 1:  # one report (LBU, LSP): one value for all, broadcast rather than written out
        report = next(r for r in reports if r.entered.size)
        users = entered[0]
        return users, np.broadcast_to(np.int64(units_of(report)), users.shape)
    capacity = max(int(users.max()) for users in entered) + 1
    least = np.zeros(capacity, np.int64)
    touched = np.zeros(capacity, bool)
    for report in reports:
        if report.entered.size:
            least[report.entered] += units_of(report)
            touched[report.entered] = True
    users = np.flatnonzero(touched)
    return users, least[users]


def outside(users: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The users of ``users`` not in ``allowed`` (both ascending user indices); linear, no sort."""
    if users is allowed or users.size == 0:
        return np.zeros(0, np.int64)
    capacity = max(int(users.max()), int(allowed.max(initial=-1))) + 1
    mark = np.zeros(capacity, bool)
    mark[allowed] = True
    return users[~mark[users]]


__all__ = ["ASKED_TWICE", "DrawRecord", "FINDING_BITS", "FINDING_KINDS", "Finding", "LEAST_BITS", "LAW_MISMATCH",
           "LIFETIME_PREFIX", "MEMORY_WINDOW",
           "OFF_SCHEDULE", "PublicRecord", "PublicSchedule", "ReportRecord", "SlotFacts", "SlotVerdict",
           "UNASKED_REPORT", "least_of_reports", "outside", "packed_least", "registered_verdict", "unpack_least"]
