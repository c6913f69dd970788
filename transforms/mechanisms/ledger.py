"""The privacy ledger: an exact, independent check of every user's windows.

The ledger knows nothing about mechanisms.  It takes, slot after slot, what
each user was charged (:class:`~transforms.mechanisms.charges.Charges`: cohort,
reporter or sparse charges), keeps what each user declared, and checks

* fixed ``(w, E)``: the last ``w`` charges sum to at most ``E``, at every slot;
* dynamic ``(w_B, E_B, w_F, E_F)`` declared at ``τ``: the charges of
  ``[τ-w_B+1, τ]`` sum to at most ``E_B``, and those of ``[τ, τ+w_F-1]`` to
  at most ``E_F`` (checked when the window closes, and for windows still
  open by :meth:`PrivacyLedger.close`);
* lifetime ``E``: every charge since the user's first slot sums to at most
  ``E``, at every slot, forever.

Charges are integer budget units.  Running totals are cumulative from the
user's first slot (a new class starts at 0, a split copies its parent's) and
kept modulo 2^64 (``uint64`` wraps); a window sum is the difference of two
totals and a lifetime sum the total itself, exact for any stream length as
long as every true sum is below 2^63 units (9.2 million ε).

**Classes.**  Users whose charges and requirements have been identical at
every slot so far have identical window sums, hence identical verdicts.  The
ledger keeps one running total per such *class* and checks each class once;
a violation still counts once per member, and kept violations name the
members, so verdicts are exactly those of checking user by user.  Classes
are learnt from the charges alone: at one slot a user's charge and
requirement are functions of their group (the charges' cohort row, reporter
group or distinct sparse charge; their own declared requirement), so when the
members of a class sit in different rows the class splits, each part starting from a copy of
the class's totals and open forward windows.  When nobody changes row (the
steady state) a slot costs a few operations on arrays of classes, whatever
the number of users.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.charges import DISSIMILARITY, Charges
from transforms.mechanisms.declared import DeclaredRequirements, kind_name, kind_of_arrays, rows_differ
from transforms.mechanisms.population import UNREGISTERED
from transforms.mechanisms.public_schedule import PublicRecord, PublicSchedule, registered_verdict
from transforms.mechanisms.public_schedule.registry import schedule_for
from transforms.mechanisms.requirements import (DynamicRequirements, FixedRequirements, LifetimeRequirements,
                                                Requirements)
from transforms.mechanisms.windows import closing_windows, forward_end, usage_ratios

_UNKNOWN_ROW = -3
"""The row of a restored class until its first slot: differs from every real row, so the class is split if need be."""


@dataclass(frozen=True)
class Violation:
    """A window whose charges exceed the requirement."""

    user: int
    slot: int           # the slot the window ends at (or the last slot seen, for open windows)
    kind: str           # "fixed", "backward", "forward", "lifetime", "undercharged" (below the least charge), or
    #                     a public schedule's finding (public_schedule.FINDING_KINDS)
    window_units: int   # undercharged: the least charge the evidence or public schedule implies; a finding: expected
    bound_units: int    # undercharged: what the mechanism charged; a finding: what was seen

    def __str__(self) -> str:
        if self.kind == "undercharged":
            return (f"user {self.user} at slot {self.slot}: the statistics they could enter cost at least "
                    f"{units_to_decimal_string(self.window_units)}, charged {units_to_decimal_string(self.bound_units)}")
        if self.kind not in ("fixed", "backward", "forward", "lifetime"):
            return (f"user {self.user} at slot {self.slot}: {self.kind.replace('_', ' ')} "
                    f"(the public schedule expected {self.window_units}, saw {self.bound_units})")
        return (f"user {self.user}, {self.kind} window ending at slot {self.slot}: spent "
                f"{units_to_decimal_string(self.window_units)} > {units_to_decimal_string(self.bound_units)}")


class PrivacyLedger:
    """Exact sliding-window sums over an unbounded stream, per class of identically charged users."""

    def __init__(self, max_window: int, max_violations_kept: int = 100, schedule: PublicSchedule | None = None):
        """``schedule``: the public schedule of the mechanism whose charges this ledger checks (a local or DPI
        method, :func:`~transforms.mechanisms.public_schedule.registry.schedule_for`); releases then must carry
        their public record.  Without one, the first release that carries a public record builds it from the
        record's method and public parameters; releases without one (the central family) are checked from
        their evidence."""
        if max_window < 1:
            raise ValueError(f"max_window must be >= 1, got {max_window}")
        self.max_window = max_window
        self.schedule = schedule
        self.slot = 0
        self._class_of = np.zeros(0, np.int64)   # class of each user index
        self._class_row = np.zeros(0, np.int64)  # each class's row at the last slot (negative: not checked)
        self._class_size = np.zeros(0, np.int64)
        self._checked = self._checked_rows = np.zeros(0, np.int64)  # the classes with a row, and their rows
        # totals[s % (W+1), c]: class c's running total (since its first slot) after slot s; slot-major so one
        # slot is contiguous
        self._totals = np.zeros((max_window + 1, 0), np.uint64)
        self._open_forward: dict[int, list[tuple[np.ndarray, int, np.ndarray]]] = {}  # end -> (classes, start, bounds)
        self._dc_totals = np.zeros((max_window + 1, 0), np.uint64)  # the same for the dissimilarity part (dynamic)
        self._origins = np.zeros((2, 0), np.uint64)  # per class, both running totals before its first slot
        self._declared: DeclaredRequirements | None = None  # what users declared: the requirements checked
        self._rows_seen: np.ndarray | None = None  # the last slot's group_of, while nothing was declared
        self._seen_version = -1
        self._row_requirements: Requirements | None = None
        self._kept_requirements: tuple | None = None  # (declared, version, users, their matrix_of): see _requirements_of
        self.max_usage_ratio = 0.0
        self.violation_count = 0
        self.violations: list[Violation] = []
        self._max_kept = max_violations_kept

    # ------------------------------------------------------------------ input
    def record(self, slot: int, charges: Charges) -> None:
        """Add one slot's charges (slots must arrive in order, without gaps)."""
        if slot != self.slot + 1:
            raise ValueError(f"ledger expected slot {self.slot + 1}, got {slot}")
        public = getattr(charges, "public_record", None)
        if public is None:
            if self.schedule is not None:
                raise ValueError(f"a release without its public record reached the ledger of {self.schedule.method}'s "
                                 f"public schedule")
            self._check_evidence(slot, charges)
        row_units, row_dc, reqs = self._rows(slot, charges)
        if public is not None:
            self._check_public(slot, charges, public)
        checked, rows = self._checked, self._checked_rows
        units = row_units[rows]
        if units.size and units.min() < 0:
            raise ValueError("charges must be non-negative")
        self.slot = slot
        kind = type(reqs)
        dynamic = kind is DynamicRequirements
        matrix = reqs.as_matrix()[rows]
        if kind is not LifetimeRequirements:  # every window in force (defaults too) must fit the kept depth
            self._require_within(matrix[:, 0::2].max(axis=1) if dynamic else matrix[:, 0])
        self._add(slot, checked, units, row_dc[rows] if dynamic else None)
        self._judge(*closing_windows(kind, slot, matrix,
                                     lambda first, last: self._sums_between(self._totals, checked, first, last),
                                     lambda first, last: self._sums_between(self._dc_totals, checked, first, last),
                                     lambda last: self._spent(checked, last)),
                    classes=checked)
        if dynamic:
            ends, bounds = forward_end(slot, matrix[:, 2]), matrix[:, 3]
            for end in np.unique(ends):  # a few distinct windows
                pick = ends == end
                self._open_forward.setdefault(int(end), []).append((checked[pick], slot, bounds[pick]))
            self._close_forward(self._open_forward.pop(slot, []))

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
        """Exact sum of ``user``'s charges over ``[first_slot, last_slot]`` (within the kept depth, except that
        ``first_slot=1`` reaches back to the start however long ago: the user's lifetime spend)."""
        if not (0 < first_slot <= last_slot <= self.slot and self.slot - last_slot < self.max_window
                and (first_slot == 1 or self.slot - first_slot < self.max_window)):
            raise ValueError("window outside the ledger's kept history")
        if user >= self._class_of.size:
            return 0
        ring, kind = self._totals.shape[0], self._class_of[user]
        end = self._totals[last_slot % ring, kind]
        start = self._origins[0, kind] if first_slot == 1 else self._totals[(first_slot - 1) % ring, kind]
        difference = (int(end) - int(start)) % 2**64  # Python ints: no numpy overflow warning when totals wrap
        return difference - 2**64 if difference >= 2**63 else difference

    # ------------------------------------------------------------------ state
    def to_bytes(self) -> bytes:
        """The whole ledger as an ``.npz`` payload, per user (running totals, open forward windows, verdicts)."""
        pending = []
        for end in sorted(self._open_forward):
            starts = sorted({start for _, start, _ in self._open_forward[end]})
            for start in starts:
                parts = [(classes, bounds) for classes, s, bounds in self._open_forward[end] if s == start]
                users, bounds = self._members(np.concatenate([c for c, _ in parts]),
                                              np.concatenate([b for _, b in parts]))
                pending.append((end, users, start, bounds))
        kept = self.violations
        arrays = {
            "scalars": np.array([self.max_window, self.slot, self.violation_count, self._max_kept], np.int64),
            "max_usage_ratio": np.array(self.max_usage_ratio), "totals": self._totals[:, self._class_of],
            "forward_head": np.array([(end, start, users.size) for end, users, start, _ in pending],
                                     np.int64).reshape(-1, 3),
            "forward_users": np.concatenate([users for _, users, _, _ in pending] or [np.zeros(0, np.int64)]),
            "forward_bounds": np.concatenate([b for _, _, _, b in pending] or [np.zeros(0, np.int64)]),
            "violations": np.array([(v.user, v.slot, v.window_units, v.bound_units) for v in kept],
                                   np.int64).reshape(-1, 4),
            "violation_kinds": np.array([v.kind for v in kept], dtype="U32"),
            "dc_totals": self._dc_totals[:, self._class_of], "origins": self._origins[:, self._class_of],
        }
        if self.schedule is not None:
            arrays["schedule.method"] = np.array(self.schedule.method)
            arrays["schedule.params"] = np.array(json.dumps(self.schedule.params, sort_keys=True))
            arrays.update({f"schedule.state.{k}": v for k, v in self.schedule.state_arrays().items()})
        if self._declared is not None:
            arrays["declared.kind"] = np.array(kind_name(self._declared.kind))
            arrays.update({f"declared.{k}": v for k, v in self._declared.state_arrays().items()})
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, payload: bytes) -> "PrivacyLedger":
        """Rebuild a ledger saved by :meth:`to_bytes`; it continues exactly where the saved one stopped.

        Users with equal totals over the kept depth and equal open forward windows are one class again.
        """
        with np.load(io.BytesIO(payload), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        max_window, slot, violation_count, max_kept = (int(v) for v in arrays["scalars"])
        schedule = None
        if "schedule.method" in arrays:
            schedule = schedule_for(str(arrays["schedule.method"]), json.loads(str(arrays["schedule.params"])))
            schedule.load_state_arrays({k[15:]: v for k, v in arrays.items() if k.startswith("schedule.state.")})
        ledger = cls(max_window, max_violations_kept=max_kept, schedule=schedule)
        ledger.slot, ledger.violation_count = slot, violation_count
        ledger.max_usage_ratio = float(arrays["max_usage_ratio"])
        totals = np.array(arrays["totals"], np.uint64)
        dc_totals = np.array(arrays["dc_totals"], np.uint64) if "dc_totals" in arrays else np.zeros_like(totals)
        origins = np.array(arrays["origins"], np.uint64) if "origins" in arrays else \
            np.zeros((2, totals.shape[1]), np.uint64)  # written before lifetime budgets: totals started at 0
        if "declared.kind" in arrays or "declared.dynamic" in arrays:
            ledger._declared = DeclaredRequirements(kind_of_arrays(arrays, "declared."))
            ledger._declared.load_state_arrays({k[9:]: v for k, v in arrays.items() if k.startswith("declared.")})
        pending, at = [], 0
        for end, start, size in arrays["forward_head"]:
            pending.append((int(end), int(start), arrays["forward_users"][at:at + size],
                            arrays["forward_bounds"][at:at + size]))
            at += size
        class_of = _distinct(np.concatenate([totals, dc_totals, origins]).T)
        for _, _, users, bounds in pending:
            member, bound = np.zeros(class_of.size, np.int64), np.zeros(class_of.size, np.int64)
            member[users], bound[users] = 1, bounds
            class_of = _distinct(np.stack([class_of, member, bound], axis=1))
        _, representative = np.unique(class_of, return_index=True)
        ledger._class_of, ledger._totals = class_of, totals[:, representative]
        ledger._dc_totals, ledger._origins = dc_totals[:, representative], origins[:, representative]
        ledger._class_row = np.full(representative.size, _UNKNOWN_ROW, np.int64)
        ledger._class_size = np.bincount(class_of, minlength=representative.size)
        for end, start, users, bounds in pending:
            classes, first = np.unique(class_of[users], return_index=True)
            ledger._open_forward.setdefault(end, []).append((classes, start, bounds[first]))
        ledger.violations = [Violation(int(u), int(s), str(kind), int(w), int(b))
                             for (u, s, w, b), kind in zip(arrays["violations"], arrays["violation_kinds"])]
        return ledger

    # ------------------------------------------------------------------ classes
    def _rows(self, slot: int, charges: Charges) -> tuple[np.ndarray, np.ndarray, Requirements]:
        """Bring the classes up to this slot; return each row's charge, dissimilarity charge and requirement.

        The requirement checked is what each user declared (:class:`DeclaredRequirements`), never the
        mechanism's: a group whose members declared different things is split into one row per
        requirement, and registered users in no group (waiting for a changed fixed requirement) share rows
        charged nothing.
        """
        if self._declared is None:
            self._declared = DeclaredRequirements(charges.requirement_kind)
        declared, batch = self._declared, charges.declarations
        if charges.requirement_kind is not declared.kind:
            raise ValueError(f"charges under {charges.requirement_kind.__name__} reached a ledger of "
                             f"{declared.kind.__name__}")
        reqs = batch.requirements
        if reqs is not None:
            if not isinstance(reqs, declared.kind):
                raise ValueError(f"{type(reqs).__name__} declared to a ledger of {declared.kind.__name__}")
            if isinstance(reqs, FixedRequirements):  # a window this ledger cannot hold is refused when declared
                self._require_within(reqs.window)
            elif isinstance(reqs, DynamicRequirements):
                self._require_within(np.maximum(reqs.backward_window, reqs.forward_window))
        declared.declare(slot, batch.users, reqs, charges.default_requirement)
        group_of, units, dc = charges.group_of, charges.group_units, charges.group_part(DISSIMILARITY)
        if not (declared.version == self._seen_version and self._rows_seen is not None
                and units.size == self._row_source.size - self._split_rows
                and np.array_equal(group_of, self._rows_seen)):
            self._regroup(group_of, units.size)
        source = self._row_source  # each row's charge row (-1: charged nothing, the 0 appended below)
        return np.append(units, 0)[source], np.append(dc, 0)[source], self._row_requirements

    def _regroup(self, group_of: np.ndarray, rows: int) -> None:
        """Rows of (charge group, declared requirement): the charges' groups, split where members disagree."""
        declared = self._declared
        users = np.flatnonzero(group_of != UNREGISTERED)
        everyone = users.size == group_of.size
        requirement = self._requirements_of(declared, users)
        groups = group_of if everyone else group_of[users]
        row_of = np.where(groups >= 0, groups, rows)  # in no group: row `rows`, charged 0
        representative = np.full(rows + 1, -1)
        representative[row_of] = np.arange(users.size)
        source = np.concatenate([np.arange(rows), [-1]])
        table = np.tile(declared.nothing_allowed, (rows + 1, 1))
        members = representative >= 0
        table[members] = requirement[representative[members]]
        odd = np.flatnonzero(rows_differ(requirement, table.take(row_of, axis=0)))
        if odd.size:
            pairs = np.column_stack([row_of[odd], requirement[odd]])
            distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
            row_of[odd] = rows + 1 + inverse.reshape(-1)
            source = np.concatenate([source, np.where(distinct[:, 0] < rows, distinct[:, 0], -1)])
            table = np.concatenate([table, distinct[:, 1:]])
        if everyone:
            per_user = row_of
        else:
            per_user = np.full(group_of.size, UNREGISTERED, np.int64)
            per_user[users] = row_of
        self._follow(per_user)
        self._row_source = source
        self._row_requirements = declared.kind(*table.T)
        self._rows_seen, self._seen_version = group_of.copy(), declared.version
        self._split_rows = source.size - rows  # rows added for waiting users and disagreeing members

    def _requirements_of(self, declared: DeclaredRequirements, users: np.ndarray) -> np.ndarray:
        """``declared.matrix_of(users)``, kept while the same users' declarations are unchanged (a population
        method regroups every slot: who reported changes, what they declared does not)."""
        kept = self._kept_requirements
        if kept is not None and kept[0] is declared and kept[1] == declared.version and np.array_equal(kept[2], users):
            return kept[3]
        requirement = declared.matrix_of(users)
        requirement.flags.writeable = False
        self._kept_requirements = (declared, declared.version, users, requirement)
        return requirement

    def _follow(self, rows: np.ndarray) -> None:
        """Split every class whose members are in different ``rows`` (users past its end: unregistered)."""
        known = self._class_of.size
        grown = rows.size > known
        if grown:  # new user indices: one new class with no history
            fresh = self._add_classes(np.zeros((self._totals.shape[0], 1), np.uint64), np.array([UNREGISTERED]))
            self._class_of = np.concatenate([self._class_of, np.full(rows.size - known, fresh[0])])
            self._class_size = np.concatenate([self._class_size, [rows.size - known]])
        elif rows.size < known:
            rows = np.concatenate([rows, np.full(known - rows.size, UNREGISTERED)])
        moved = np.flatnonzero(rows != self._class_row.take(self._class_of))
        if not (moved.size or grown):
            return  # the same classes in the same rows: sizes and checked rows stand
        if moved.size:
            source, target_row = self._class_of[moved], rows[moved]
            _, first, inverse, counts = np.unique(source * (int(target_row.max()) + 3) + target_row + 2,
                                                  return_index=True, return_inverse=True, return_counts=True)
            group_class, group_row = source[first], target_row[first]  # sorted by class, then row
            leaving = np.bincount(group_class, weights=counts, minlength=self._class_row.size)
            # a class all of whose members moved keeps its id for its first group
            keeps = (leaving[group_class] == self._class_size[group_class]) & \
                np.concatenate([[True], group_class[1:] != group_class[:-1]])
            target = group_class.copy()
            parents = group_class[~keeps]
            if parents.size:
                target[~keeps] = self._add_classes(self._totals[:, parents], group_row[~keeps],
                                                   self._dc_totals[:, parents], self._origins[:, parents])
                self._inherit_forward(parents, target[~keeps])
            self._class_row[target] = group_row
            self._class_of[moved] = target[inverse.reshape(-1)]
        self._class_size = np.bincount(self._class_of, minlength=self._class_row.size)
        self._checked = np.flatnonzero(self._class_row >= 0)
        self._checked_rows = self._class_row[self._checked]

    def _add_classes(self, totals: np.ndarray, rows: np.ndarray, dc_totals: np.ndarray | None = None,
                     origins: np.ndarray | None = None) -> np.ndarray:
        """Append classes with these totals columns and rows (zero dissimilarity totals and origins unless given:
        a split copies its parent's, a new class starts from nothing)."""
        first = self._class_row.size
        self._totals = np.concatenate([self._totals, totals], axis=1)
        self._dc_totals = np.concatenate([self._dc_totals, np.zeros_like(totals) if dc_totals is None else dc_totals],
                                         axis=1)
        self._origins = np.concatenate([self._origins, np.zeros((2, totals.shape[1]), np.uint64)
                                        if origins is None else origins], axis=1)
        self._class_row = np.concatenate([self._class_row, rows])
        return np.arange(first, self._class_row.size)

    def _inherit_forward(self, parents: np.ndarray, children: np.ndarray) -> None:
        """Give each child class copies of its parent's open forward windows."""
        order = np.argsort(parents, kind="stable")
        parents, children = parents[order], children[order]
        for entries in self._open_forward.values():
            for classes, start, bounds in list(entries):
                low, high = np.searchsorted(parents, classes, "left"), np.searchsorted(parents, classes, "right")
                count = high - low
                if count.any():
                    which = np.repeat(np.arange(classes.size), count)
                    offset = np.arange(which.size) - np.repeat(np.cumsum(count) - count, count)
                    entries.append((children[np.repeat(low, count) + offset], start, bounds[which]))

    def _members(self, classes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The users of ``classes`` (distinct), ascending, each with their class's entry of ``values``."""
        position = np.full(self._class_row.size, -1)
        position[classes] = np.arange(classes.size)
        users = np.flatnonzero(position[self._class_of] >= 0)
        return users, values[position[self._class_of[users]]]

    # ------------------------------------------------------------------ checks
    def _check_evidence(self, slot: int, charges: Charges) -> None:
        """Every user's charge must cover the least charge their part in the slot's statistics implies."""
        evidence = charges.evidence
        least = evidence.least_units_per_group()
        if not least.any():
            return
        claimed = charges.group_units
        if evidence.groups is charges.group_of and least.size == claimed.size:
            if not (least > claimed).any():  # one comparison per group: evidence and charges share the groups
                return
        users = np.flatnonzero(evidence.groups >= 0)
        owed = evidence.least_units(users)
        rows = np.full(users.size, UNREGISTERED, np.int64)
        known = users < charges.group_of.size
        rows[known] = charges.group_of[users[known]]
        paid = np.where(rows >= 0, claimed[np.maximum(rows, 0)], 0)
        short = np.flatnonzero(owed > paid)
        self.violation_count += int(short.size)
        room = max(self._max_kept - len(self.violations), 0)
        self.violations += [Violation(int(users[i]), slot, "undercharged", int(owed[i]), int(paid[i]))
                            for i in short[:room]]

    def _check_public(self, slot: int, charges: Charges, record: PublicRecord) -> None:
        """Least charges and structural checks from the public schedule (never from the mechanism's evidence)."""
        if self.schedule is None:
            self.schedule = schedule_for(record.method, record.params)
        declared = self._declared
        assert declared is not None, "declarations are read (_rows) before the public check"
        verdict = registered_verdict(self.schedule, slot, charges, declared.matrix_of)
        for finding in verdict.findings:
            self._flag(slot, finding.kind, finding.users, np.full(finding.users.size, finding.expected),
                       np.full(finding.users.size, finding.seen))
        users, least = verdict.users, verdict.least
        if users.size == 0:
            return
        group_of, claimed = charges.group_of, charges.group_units
        if users.size == group_of.size and users[-1] == users.size - 1 and group_of.min(initial=0) >= 0:
            if claimed.size and claimed.min() >= least.max():  # every group covers the largest least: done
                return
            paid = claimed[group_of]  # every user index entered (the usual LBU/PLBU slot): one gather
        else:
            rows = np.full(users.size, UNREGISTERED, np.int64)
            known = users < group_of.size
            rows[known] = group_of[users[known]]
            paid = np.where(rows >= 0, claimed[np.maximum(rows, 0)] if claimed.size else 0, 0)
        short = np.flatnonzero(least > paid)
        if short.size:
            self._flag(slot, "undercharged", users[short], least[short], paid[short])

    def _flag(self, slot: int, kind: str, users: np.ndarray, expected: np.ndarray, seen: np.ndarray) -> None:
        """Count one violation per user; keep the first ones."""
        self.violation_count += int(users.size)
        room = max(self._max_kept - len(self.violations), 0)
        self.violations += [Violation(int(u), slot, kind, int(e), int(s))
                            for u, e, s in zip(users[:room], expected[:room], seen[:room])]

    def _require_within(self, lengths: np.ndarray) -> None:
        if lengths.size and lengths.max() > self.max_window:
            raise ValueError(f"a window of {int(lengths.max())} slots exceeds the ledger's max_window="
                             f"{self.max_window}")

    def _add(self, slot: int, classes: np.ndarray, units: np.ndarray, dc: np.ndarray | None = None) -> None:
        """Running totals after ``slot``: the previous slot's plus this slot's charges (and dissimilarity part)."""
        ring = self._totals.shape[0]
        for totals, added in ((self._totals, units), (self._dc_totals, dc)):
            if added is not None:
                current = totals[slot % ring]
                current[:] = totals[(slot - 1) % ring]
                current[classes] += added.astype(np.uint64)

    def _sums_between(self, totals: np.ndarray, classes: np.ndarray, first_slots: np.ndarray,
                      last_slot: int) -> np.ndarray:
        """Each class's sum over ``[first_slot, last_slot]`` of a running-totals ring (0 when empty)."""
        ring = totals.shape[0]
        older = np.maximum(first_slots - 1, 0) % ring
        return (totals[last_slot % ring, classes] - totals[older, classes]).view(np.int64)

    def _spent(self, classes: np.ndarray, last_slot: int) -> np.ndarray:
        """Each class's every charge up to ``last_slot`` since its first slot: its running total less its origin."""
        return (self._totals[last_slot % self._totals.shape[0], classes] - self._origins[0, classes]).view(np.int64)

    def _close_forward(self, pending) -> None:
        if len(pending) == 1:
            classes, start, bounds = pending[0]
            starts = np.full(classes.size, start)
        elif pending:
            classes, bounds = np.concatenate([c for c, _, _ in pending]), np.concatenate([b for _, _, b in pending])
            starts = np.concatenate([np.full(c.size, start) for c, start, _ in pending])
        else:
            return
        self._judge("forward", self._sums_between(self._totals, classes, starts, self.slot), bounds, classes, starts)

    def _judge(self, kind: str, sums: np.ndarray, bounds: np.ndarray, classes: np.ndarray,
               starts: np.ndarray | None = None) -> None:
        """Count every member of an over-spent class; keep the first violations in user order (per start)."""
        if classes.size == 0:
            return
        self.max_usage_ratio = max(self.max_usage_ratio, float(usage_ratios(sums, bounds).max()))
        over = np.flatnonzero(sums > bounds)
        if over.size == 0:
            return
        self.violation_count += int(self._class_size[classes[over]].sum())
        if starts is not None:
            over = over[np.argsort(starts[over], kind="stable")]
        groups = [over] if starts is None else np.split(over, np.flatnonzero(np.diff(starts[over])) + 1)
        for group in groups:
            room = self._max_kept - len(self.violations)
            if room <= 0:
                return
            users, at = self._members(classes[group], group)
            self.violations += [Violation(int(u), self.slot, kind, int(sums[i]), int(bounds[i]))
                                for u, i in zip(users[:room], at[:room])]


def _distinct(rows: np.ndarray) -> np.ndarray:
    """Index of each row among the distinct rows of a 2-d array."""
    if rows.shape[0] == 0:
        return np.zeros(0, np.int64)
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)
