"""What a slot charged each registered user: the one form both ledgers read.

A release's charges say, for every registered user index, which **group**
the user was in at that slot and, per group, the budget units charged under
each **named part** (PWSM charges a ``"dissimilarity"`` and a
``"publication"`` part; a mechanism with one kind of charge names one part).
A user's charge is a function of their group at that slot, which is what the
class-based core ledger learns its classes from.  Four shapes exist:

* :class:`CohortCharges`: the cohort rows of the central histogram mechanisms
  (groups are cohort rows; users waiting for a changed requirement are
  registered and charged nothing);
* :class:`ReporterCharges`: one charge for every user who reported at the
  slot, 0 for the registered users who did not;
* :class:`SparseCharges`: individual charges for some users; users with equal
  charges share a group;
* :class:`GroupCharges`: groups given directly (the local-DP stream methods:
  one group per combination of reports a user sent at the slot, which covers
  both shapes above; those two are convenience forms no mechanism uses yet).

Each carries the slot's :class:`~transforms.mechanisms.evidence.Evidence`
(what the statistics were computed from: the ledgers derive least charges
from it), the slot's declarations (the ledgers keep what users declared
themselves) and the public default requirement of a new user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.declared import KINDS
from transforms.mechanisms.evidence import Evidence, of_groups
from transforms.mechanisms.population import UNREGISTERED
from transforms.mechanisms.public_schedule import PublicRecord
from transforms.mechanisms.requirements import FixedRequirements, Requirements

DISSIMILARITY = "dissimilarity"
"""PWSM's ε^(1) part: the dynamic rule projects a backward budget from it (spec §1.6)."""
PUBLICATION = "publication"
"""PWSM's ε^(2) part."""

def _units(values, name: str) -> np.ndarray:
    """``values`` as read-only int64 budget units, refused when fractional or negative."""
    raw = np.asarray(values)
    if raw.size and raw.dtype.kind not in "iu":
        raise ValueError(f"charge part {name!r} must hold integer budget units, got dtype {raw.dtype}")
    units = raw.astype(np.int64, copy=False)
    if units.size and units.min() < 0:
        raise ValueError(f"charge part {name!r} must be non-negative")
    return units


def _check_parts(parts: Mapping[str, np.ndarray]) -> None:
    if not parts:
        raise ValueError("charges need at least one named part")
    if any(not isinstance(name, str) or not name for name in parts):
        raise ValueError(f"charge parts must be named by non-empty strings, got {list(parts)!r}")


class Charges:
    """The charges protocol; implementations provide ``group_of``, ``group_parts`` and ``requirement_kind``.

    ``group_of[u]`` is user index ``u``'s group (>= 0), ``UNREGISTERED`` (not
    registered: not checked), or another negative value (registered, charged
    nothing this slot).  ``group_parts[name][g]`` is what a member of group
    ``g`` was charged under part ``name``, in budget units.
    """

    group_of: np.ndarray
    group_parts: Mapping[str, np.ndarray]
    requirement_kind: type
    evidence: Evidence
    declarations: SlotBatch
    default_requirement: Requirements | None
    public_record: PublicRecord | None = None
    """What the slot publicly asked or drew (local and DPI families): the ledgers derive least charges from it
    and the method's public schedule instead of from the evidence's budget numbers."""

    @property
    def parts(self) -> tuple[str, ...]:
        """The names of the parts charged."""
        return tuple(self.group_parts)

    @cached_property
    def group_units(self) -> np.ndarray:
        """Total units per group (the sum of the parts)."""
        parts = iter(self.group_parts.values())
        total = np.array(next(parts), np.int64)
        for part in parts:
            total += part
        return total

    def group_part(self, name: str) -> np.ndarray:
        """Part ``name`` per group; zeros when this slot charged no such part."""
        part = self.group_parts.get(name)
        return np.zeros(self.group_units.size, np.int64) if part is None else part

    @cached_property
    def users(self) -> np.ndarray:
        """Every registered user index, ascending."""
        return np.flatnonzero(self.group_of != UNREGISTERED)

    @cached_property
    def groups(self) -> np.ndarray:
        """The group of each of :attr:`users` (negative: registered, charged nothing)."""
        return self.group_of[self.users]

    @cached_property
    def _all_grouped(self) -> bool:
        return bool(self.groups.min(initial=0) >= 0)

    def _per_user(self, per_group: np.ndarray) -> np.ndarray:
        groups = self.groups
        if self._all_grouped:
            return per_group[groups].astype(np.int64, copy=False)
        return np.where(groups >= 0, per_group[np.maximum(groups, 0)] if per_group.size else 0, 0).astype(np.int64)

    @cached_property
    def units(self) -> np.ndarray:
        """Total budget charged to each of :attr:`users` at this slot."""
        return self._per_user(self.group_units)

    def part_units(self, name: str) -> np.ndarray:
        """Part ``name`` charged to each of :attr:`users` (zeros when no such part)."""
        return self._per_user(self.group_part(name))


@dataclass(frozen=True, eq=False)
class CohortCharges(Charges):
    """Charges by cohort row, expanded to users only when read (a million users cost nothing unless asked)."""

    cohort_of: np.ndarray               # snapshot: cohort row per user index (or UNREGISTERED/WAITING)
    cohort_parts: Mapping[str, np.ndarray]  # per part name, the units per cohort row
    cohort_requirements: Requirements   # requirement in force per cohort row (the mechanism's view)
    waiting_users: np.ndarray           # users waiting for a changed fixed requirement (charged 0)
    waiting_requirements: FixedRequirements | None
    evidence: Evidence                  # what the slot's statistics were computed from: the ledger's check
    declarations: SlotBatch             # the slot's input rows: the ledger keeps what users declared itself
    default_requirement: Requirements | None = None  # the public default a new user without a declaration gets
    public_record: PublicRecord | None = None        # what the slot publicly drew (DPI), else None

    def __post_init__(self):
        _check_parts(self.cohort_parts)
        parts = {name: _units(units, name) for name, units in self.cohort_parts.items()}
        object.__setattr__(self, "cohort_parts", parts)

    @property
    def group_of(self) -> np.ndarray:
        return self.cohort_of

    @property
    def group_parts(self) -> Mapping[str, np.ndarray]:
        return self.cohort_parts

    @property
    def requirement_kind(self) -> type:
        return type(self.cohort_requirements)

    @property
    def rows(self) -> np.ndarray:
        """The cohort row of each of :attr:`users` (WAITING for a user waiting for a changed requirement)."""
        return self.groups

    @cached_property
    def requirements(self) -> Requirements:
        """The requirement in force for each user of :attr:`users` (the mechanism's view)."""
        rows = self.rows
        per_user = self.cohort_requirements.take(rows if self._all_grouped else np.maximum(rows, 0))
        if self.waiting_users.size:
            at = np.searchsorted(self.users, self.waiting_users)
            for name in ("window", "epsilon_units"):
                getattr(per_user, name)[at] = getattr(self.waiting_requirements, name)
        return per_user


def _registered(users, name: str = "users") -> np.ndarray:
    users = np.asarray(users)
    if users.size and users.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold user indices, got dtype {users.dtype}")
    users = users.astype(np.int64, copy=False)
    if users.size and (users.min() < 0 or np.any(np.diff(users) <= 0)):
        raise ValueError(f"{name} must be distinct non-negative user indices in ascending order")
    return users


def _check_kind(kind: type) -> None:
    if kind not in KINDS.values():
        raise ValueError(f"requirement_kind must be one of {[k.__name__ for k in KINDS.values()]}, got {kind!r}")


def _group_of(users: np.ndarray, charged: np.ndarray, charged_groups: np.ndarray | int, rest: int,
              what: str) -> np.ndarray:
    """Group per user index: ``rest`` for every registered user, ``charged_groups`` for ``charged`` among them."""
    group_of = np.full(int(users.max(initial=-1)) + 1, UNREGISTERED, np.int64)
    group_of[users] = rest
    if charged.size:
        if charged.min() < 0 or charged.max() >= group_of.size or (group_of[charged] != rest).any():
            raise ValueError(f"every {what} user must be registered")
        group_of[charged] = charged_groups
        if np.count_nonzero(group_of[users] != rest) != charged.size:
            raise ValueError(f"a user is {what} twice")
    group_of.flags.writeable = False
    return group_of


@dataclass(frozen=True, eq=False)
class ReporterCharges(Charges):
    """One charge (per part) for every user who reported at the slot; registered non-reporters are charged 0.

    Group 0 holds the reporters, group 1 the registered users who did not report.
    """

    users_registered: np.ndarray        # every registered user index, ascending
    reporters: np.ndarray               # the users who reported (a subset)
    charge: Mapping[str, int]           # each reporter's charge per part, in budget units
    requirement_kind: type
    evidence: Evidence
    declarations: SlotBatch
    default_requirement: Requirements | None = None
    group_of: np.ndarray = field(init=False, repr=False)
    group_parts: Mapping[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self):
        _check_parts(self.charge)
        _check_kind(self.requirement_kind)
        registered = _registered(self.users_registered)
        reporters = np.asarray(self.reporters, np.int64)
        parts = {name: _units([units, 0], name) for name, units in self.charge.items()}
        object.__setattr__(self, "users_registered", registered)
        object.__setattr__(self, "group_of", _group_of(registered, reporters, 0, 1, "reporting"))
        object.__setattr__(self, "group_parts", parts)


@dataclass(frozen=True, eq=False)
class SparseCharges(Charges):
    """Individual charges for some registered users (the ones a population-division method sampled).

    Users charged the same units under every part share a group; the registered users not charged share
    the last group, charged 0.
    """

    users_registered: np.ndarray        # every registered user index, ascending
    charged: np.ndarray                 # the users charged (distinct)
    charged_parts: Mapping[str, np.ndarray]  # per part name, the units of each of ``charged``
    requirement_kind: type
    evidence: Evidence
    declarations: SlotBatch
    default_requirement: Requirements | None = None
    group_of: np.ndarray = field(init=False, repr=False)
    group_parts: Mapping[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self):
        _check_parts(self.charged_parts)
        _check_kind(self.requirement_kind)
        registered = _registered(self.users_registered)
        charged = np.asarray(self.charged, np.int64).reshape(-1)
        columns = [_units(values, name).reshape(-1) for name, values in self.charged_parts.items()]
        if any(column.size != charged.size for column in columns):
            raise ValueError(f"every charge part needs one entry per charged user ({charged.size})")
        distinct, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
        rest = distinct.shape[0]
        parts = {name: np.append(distinct[:, i], 0) for i, name in enumerate(self.charged_parts)}
        object.__setattr__(self, "users_registered", registered)
        object.__setattr__(self, "group_of", _group_of(registered, charged, inverse.reshape(-1), rest, "charged"))
        object.__setattr__(self, "group_parts", parts)


@dataclass(frozen=True, eq=False)
class GroupCharges(Charges):
    """Groups given directly: ``group_of`` per user index and, per part, each group's units.

    For charges whose groups a caller has already formed (the local-DP stream methods group users by the
    reports they sent, and their evidence names the same array).  ``group_of`` is validated like every
    charges' (``UNREGISTERED``, another negative value for a registered user charged nothing, or a group).
    """

    group_of: np.ndarray
    group_parts: Mapping[str, np.ndarray]
    requirement_kind: type
    evidence: Evidence
    declarations: SlotBatch
    default_requirement: Requirements | None = None
    public_record: PublicRecord | None = None  # what the slot publicly asked (the local methods)

    def __post_init__(self):
        _check_parts(self.group_parts)
        _check_kind(self.requirement_kind)
        parts = {name: _units(units, name).reshape(-1) for name, units in self.group_parts.items()}
        sizes = {part.size for part in parts.values()}
        group_of = np.asarray(self.group_of)
        if len(sizes) != 1 or group_of.ndim != 1 or group_of.dtype.kind not in "iu" \
                or (group_of.size and group_of.max() >= sizes.pop()):
            raise ValueError("group_of must be a 1-D integer array whose groups each part covers")
        object.__setattr__(self, "group_parts", parts)


def least_charges_of_registered(charges: Charges) -> np.ndarray:
    """The least charge of each of ``charges.users`` (the registered users), from ``charges.evidence``.

    Raises when the evidence lets a user who is not registered enter a statistic: such a user has
    no requirement and no charge, so the release could not be accounted for.
    """
    evidence, users = charges.evidence, charges.users
    if evidence.groups is charges.group_of:  # the usual release: by the groups the charges name
        return of_groups(evidence.least_units_per_group(), charges.groups)
    entered = np.flatnonzero(evidence.groups >= 0)
    outside = np.setdiff1d(entered[evidence.least_units(entered) > 0], users)
    if outside.size:
        raise ValueError(f"users {outside[:5].tolist()} entered a statistic without being registered")
    return evidence.least_units(users)
