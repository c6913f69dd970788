"""Who is protected: the user registry, cohorts, and each slot's data as cells.

**Cohorts.**  Users whose requirement history is identical are charged the
same budget at every slot, so a mechanism keeps one budget trajectory per
*cohort* instead of one per user (DESIGN §3).  Per-slot work is then
``O(cohorts · window)`` for budgets plus ``O(users)`` for the histogram.

* fixed requirements: one cohort per distinct ``(w, E)``;
* dynamic requirements: one cohort per distinct declaration history.  When
  some members of a cohort declare something new, they split off into a copy
  of the cohort's state (their charge history *is* the cohort's), so the
  split is exact, not conservative.

**Policies** (the papers assume a fixed population that reports every slot):

* *absent users* are still registered and still charged: the releases
  depend on whether they reported, so the guarantee must cover absence.
  With ``carry_forward`` a user's last bin stays in force until they report
  a new one (the papers' taxi preprocessing); without it an absent user
  contributes nothing that slot.
* *joining users* are registered at their first row.  Under fixed
  requirements they join the cohort of their ``(w, E)``; their history is
  all zeros, which is pointwise below the cohort's, so every window of theirs
  sums to at most the cohort's.  Under dynamic requirements joiners with the
  same declaration form a new cohort with an empty history.
* *a changed fixed requirement* ``(w, E) → (w', E')`` declared at slot ``t``
  takes effect at ``t + w' - 1``.  In between the user contributes nothing
  and is charged nothing, and the old requirement stays in force.  Every
  window of ``w'`` slots that ends once the new requirement is in force then
  holds only zeros and new-cohort charges, and every earlier window only old
  charges and zeros.  Declaring the old requirement again during the wait
  cancels the change.  (Dynamic requirements change at any slot; that is what
  DPBD/DPBA are for.)
* the number of registered users per cohort is public (the requirements are
  public mechanism parameters, spec §1.7), so OBS counts registered users,
  never only the ones present in a slot, which would leak presence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.batch import BatchExtent, SlotBatch
from transforms.mechanisms.requirements import FixedRequirements
from transforms.mechanisms.sampling import Cells, count_keys

UNREGISTERED = -1
WAITING = -2  # registered, waiting for a changed fixed requirement to take effect

_DENSE_CELL_LIMIT = 1 << 16


@dataclass(frozen=True)
class Column:
    """A per-cohort state column: ``history`` columns grow with the widest window."""

    dtype: type = np.int64
    fill: int = 0
    history: bool = False


class CohortTable:
    """Rows of per-cohort state, all columns indexed by cohort row."""

    def __init__(self, columns: dict[str, Column]):
        self.columns = dict(columns)
        self.width = 1
        self.rows = 0
        self.data = {name: self._blank(col, 0) for name, col in self.columns.items()}
        self.size = np.zeros(0, np.int64)

    def _blank(self, col: Column, rows: int) -> np.ndarray:
        shape = (rows, self.width) if col.history else (rows,)
        return np.full(shape, col.fill, dtype=col.dtype)

    def add(self, count: int) -> np.ndarray:
        """Append ``count`` rows filled with defaults; returns their indices."""
        new = np.arange(self.rows, self.rows + count)
        for name, col in self.columns.items():
            self.data[name] = np.concatenate([self.data[name], self._blank(col, count)])
        self.size = np.concatenate([self.size, np.zeros(count, np.int64)])
        self.rows += count
        return new

    def copy_rows(self, sources: np.ndarray) -> np.ndarray:
        """Append copies of rows ``sources`` (sizes start at 0); returns the new indices."""
        new = np.arange(self.rows, self.rows + sources.size)
        for name in self.columns:
            self.data[name] = np.concatenate([self.data[name], self.data[name][sources]])
        self.size = np.concatenate([self.size, np.zeros(sources.size, np.int64)])
        self.rows += sources.size
        return new

    def widen(self, width: int) -> None:
        """Make history columns at least ``width`` slots deep (older slots read as fill)."""
        if width <= self.width:
            return
        for name, col in self.columns.items():
            if col.history:
                pad = np.full((self.rows, width - self.width), col.fill, dtype=col.dtype)
                self.data[name] = np.concatenate([self.data[name], pad], axis=1)
        self.width = width

    def push(self, name: str, newest: np.ndarray) -> None:
        """Shift history column ``name`` one slot back and store ``newest`` as slot 0."""
        hist = self.data[name]
        hist[:, 1:] = hist[:, :-1].copy()
        hist[:, 0] = newest

    def keep(self, rows: np.ndarray) -> np.ndarray:
        """Drop every row not in ``rows`` (in order); returns old-row -> new-row map."""
        remap = np.full(self.rows + 1, UNREGISTERED, np.int64)
        remap[rows] = np.arange(rows.size)
        for name in self.columns:
            self.data[name] = self.data[name][rows]
        self.size = self.size[rows]
        self.rows = rows.size
        return remap


def read_only_copy(values: np.ndarray) -> np.ndarray:
    """A copy nobody can write to by accident (it is shared between releases)."""
    copy = values.copy()
    copy.flags.writeable = False
    return copy


def _group_moves(source: np.ndarray, declared: tuple[np.ndarray, ...], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(source cohort, declaration)`` pairs and each mover's pair index.

    ``declared`` holds one array per declaration column.  Usually every mover
    from one cohort declares the same thing (a level or a user type
    changing); that case costs O(n).  Otherwise rows are grouped by a 64-bit
    hash, checked for collisions.
    """
    slot = source + 1  # source -1 (new users) becomes 0
    present = np.flatnonzero(np.bincount(slot, minlength=rows + 1))
    representatives = []
    for column in declared:
        representative = np.zeros(rows + 1, np.int64)
        representative[slot] = column
        if not np.array_equal(representative[slot], column):
            break
        representatives.append(representative[present])
    else:
        position = np.zeros(rows + 1, np.int64)
        position[present] = np.arange(present.size)
        return np.column_stack([present - 1, *representatives]), position[slot]
    pairs = np.column_stack([source, *declared])
    mixed = np.zeros(pairs.shape[0], np.uint64)
    for k in range(pairs.shape[1]):
        mixed = (mixed ^ pairs[:, k].astype(np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
    _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    groups = pairs[first]
    if not np.array_equal(groups[inverse], pairs):  # a hash collision: group exactly instead
        groups, inverse = np.unique(pairs, axis=0, return_inverse=True)
        return groups, inverse.reshape(-1)
    order = np.lexsort(groups.T[::-1])  # canonical (sorted) cohort order, whatever the hash
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return groups[order], rank[inverse]


class Memberships(NamedTuple):
    """Read-only snapshot of who is in which cohort row, shared by every release until it changes."""

    cohort_of: np.ndarray                 # cohort row per user index (or UNREGISTERED / WAITING)
    waiting_users: np.ndarray             # users waiting for a changed fixed requirement
    waiting_requirements: FixedRequirements | None  # the requirement still in force for each of them


@dataclass
class SlotData:
    """What a mechanism sees of one slot after the population is updated."""

    cells: Cells
    sizes: np.ndarray        # registered, active users per cohort row (public)
    groups: np.ndarray       # the memberships snapshot the cells were counted from (cohort row per user)


@dataclass
class Population:
    """Registry of users, their cohorts, requirements and current values."""

    kind: type  # FixedRequirements or DynamicRequirements
    bins: int
    carry_forward: bool = False
    default_requirement: object = None  # FixedRequirements/DynamicRequirements.uniform(..., 1) row
    table: CohortTable = None
    cohort_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    value_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # fixed requirements only: the requirement in force per user, and a pending change
    window_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    units_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pending_from: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pending_window: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pending_units: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    waiting: int = 0  # how many users wait for a changed fixed requirement
    _derived: dict = field(default_factory=dict, repr=False, compare=False)  # see derived()

    @classmethod
    def create(cls, kind: type, bins: int, columns: dict[str, Column], carry_forward: bool = False,
               default_requirement=None) -> "Population":
        base = ({"window": Column(), "epsilon_units": Column()} if kind is FixedRequirements else
                {"backward_window": Column(fill=1), "backward_units": Column(), "forward_window": Column(),
                 "forward_units": Column(), "declared_forward_window": Column(history=True),
                 "declared_forward_units": Column(history=True)})
        overlap = base.keys() & columns.keys()
        if overlap:
            raise ValueError(f"column names reserved by the population: {sorted(overlap)}")
        return cls(kind=kind, bins=bins, carry_forward=carry_forward,
                   default_requirement=default_requirement, table=CohortTable({**base, **columns}))

    # ------------------------------------------------------------------ registry
    def changed(self) -> None:
        """Forget what was derived from memberships (called before anything may change them)."""
        self._derived = {}

    def derived(self, name: str, compute):
        """``compute()``, remembered until memberships or cohort requirements may have changed."""
        derived = self._derived
        if name not in derived:
            derived[name] = compute()
        return derived[name]

    def memberships(self) -> Memberships:
        """This slot's memberships; one snapshot serves every slot in which nobody joins or changes."""
        return self.derived("memberships", self._snapshot)

    def _snapshot(self) -> Memberships:
        cohort_of = read_only_copy(self.cohort_of)
        waiting = self.waiting_users()
        requirements = FixedRequirements(self.window_of[waiting], self.units_of[waiting]) if waiting.size else None
        return Memberships(cohort_of, waiting, requirements)

    def waiting_users(self) -> np.ndarray:
        """Users waiting for a changed fixed requirement to take effect."""
        if not self.waiting:
            return np.zeros(0, np.int64)
        return np.flatnonzero(self.cohort_of == WAITING)

    @property
    def capacity(self) -> int:
        return self.cohort_of.size

    def _grow(self, max_user: int) -> None:
        self.changed()
        new_cap = max(max_user + 1, 2 * self.capacity, 16)
        extra = new_cap - self.capacity
        self.cohort_of = np.concatenate([self.cohort_of, np.full(extra, UNREGISTERED, np.int64)])
        self.value_of = np.concatenate([self.value_of, np.full(extra, -1, np.int64)])
        for name in ("window_of", "units_of", "pending_from", "pending_window", "pending_units"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(extra, np.int64)]))

    def registered(self) -> np.ndarray:
        """Indices of every registered user (including those waiting for a change)."""
        return np.flatnonzero(self.cohort_of != UNREGISTERED)

    # ------------------------------------------------------------------ per slot
    def admit(self, batch: SlotBatch, slot: int, rows: np.ndarray, extent: BatchExtent, registered: bool,
              by_cohort: bool = True) -> SlotData:
        """Apply one slot's rows (registrations, changes, values); return the slot's cells.

        ``rows`` is :meth:`rows_of` the batch's users, ``extent`` what the batch's
        validation returned and ``registered`` what :meth:`validate` returned, all
        computed by the caller before any change.  With ``by_cohort=False`` the
        cells are pooled over cohorts (see :class:`Cells`).
        """
        if extent.max_user >= self.capacity:
            self._grow(extent.max_user)
        if (self.kind is FixedRequirements and batch.requirements is None and not self.waiting
                and registered):  # the steady state: nobody joins or changes
            groups = self.memberships().cohort_of
            rows = groups[:batch.users.size] if extent.dense else groups[batch.users]
            return SlotData(cells=self._cells(batch, groups, rows, extent.all_report, by_cohort, registered=True,
                                              dense=extent.dense),
                            sizes=self.derived("sizes", lambda: read_only_copy(self.table.size)), groups=groups)
        self.changed()
        if self.kind is FixedRequirements:
            self._activate_waiting(slot)
            self._declare_fixed(batch, slot, rows)
        else:
            self._declare_dynamic(batch, rows)
        self._compact()
        groups = self.memberships().cohort_of  # memberships may have changed: rows are read again from them
        return SlotData(cells=self._cells(batch, groups, groups[batch.users], extent.all_report, by_cohort),
                        sizes=self.table.size.copy(), groups=groups)

    def rows_of(self, users: np.ndarray, extent: BatchExtent) -> np.ndarray:
        """Each user's cohort row (or UNREGISTERED / WAITING), without changing anything.

        For a dense batch this is a view of ``cohort_of``: :meth:`admit` gathers
        the rows again whenever memberships may change, and reads them before
        that only to find unregistered users, whom no change registers early.
        """
        if extent.max_user >= self.capacity:
            rows = np.full(users.size, UNREGISTERED, np.int64)
            known = users < self.capacity
            rows[known] = self.cohort_of[users[known]]
            return rows
        if extent.dense:
            return self.cohort_of[:users.size]
        return self.cohort_of[users]

    def validate(self, batch: SlotBatch, rows: np.ndarray, extent: BatchExtent) -> bool:
        """Fail before any change when a new user comes without a requirement.

        Returns whether every row is already in a cohort.
        """
        derived = self._derived
        if extent.dense and rows.size <= derived.get("users_in_cohorts", -1):
            return True  # users 0..n-1 were all in cohorts at an earlier slot, and nothing changed since
        registered = rows.size == 0 or rows.min() >= 0
        if registered and extent.dense:
            derived["users_in_cohorts"] = max(rows.size, derived.get("users_in_cohorts", 0))
        if not registered and batch.requirements is None and self.default_requirement is None:
            new = rows == UNREGISTERED
            if new.any():
                raise ValueError(f"user {int(batch.users[np.argmax(new)])} has no requirement and the "
                                 "mechanism has no default_requirement")
        return registered

    def _declarations(self, batch: SlotBatch, rows: np.ndarray):
        """``(users, requirements)`` declared this slot.

        Rows without requirement columns declare nothing, except that a new
        user is given the default requirement.
        """
        if batch.requirements is not None:
            return batch.users, (batch.requirements if batch.users.size else None)
        if self.default_requirement is None:
            return batch.users[:0], None
        users = batch.users[rows == UNREGISTERED]
        if users.size == 0:
            return users, None
        return users, self.default_requirement.take(np.zeros(users.size, np.int64))

    # fixed -------------------------------------------------------------------
    def _fixed_key_rows(self) -> dict[tuple[int, int], int]:
        t = self.table.data
        return {(int(w), int(u)): row for row, (w, u) in
                enumerate(zip(t["window"], t["epsilon_units"]))}

    def _cohorts_for(self, windows: np.ndarray, units: np.ndarray) -> np.ndarray:
        """Cohort row of each fixed requirement, creating cohorts that do not exist."""
        keys = self._fixed_key_rows()
        pairs = np.stack([windows, units], axis=1)
        distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
        rows = np.empty(distinct.shape[0], np.int64)
        for i, (w, u) in enumerate(distinct):
            row = keys.get((int(w), int(u)))
            if row is None:
                row = int(self.table.add(1)[0])
                self.table.data["window"][row] = w
                self.table.data["epsilon_units"][row] = u
                self.table.widen(int(w))
            rows[i] = row
        return rows[inverse.reshape(-1)]

    def _join(self, users: np.ndarray, rows: np.ndarray) -> None:
        self.cohort_of[users] = rows
        self.table.size += np.bincount(rows, minlength=self.table.rows)

    def _leave(self, users: np.ndarray) -> None:
        rows = self.cohort_of[users]
        self.table.size -= np.bincount(rows[rows >= 0], minlength=self.table.rows)

    def _declare_fixed(self, batch: SlotBatch, slot: int, rows: np.ndarray) -> None:
        users, reqs = self._declarations(batch, rows)
        if reqs is None:
            return
        w, u = reqs.window, reqs.epsilon_units
        state = self.cohort_of[users]
        # joiners
        new = state == UNREGISTERED
        if new.any():
            self.window_of[users[new]] = w[new]
            self.units_of[users[new]] = u[new]
            self._join(users[new], self._cohorts_for(w[new], u[new]))
        known = ~new
        same_in_force = known & (self.window_of[users] == w) & (self.units_of[users] == u)
        # a waiting user who declares the old requirement again: cancel the change
        cancel = same_in_force & (state == WAITING)
        if cancel.any():
            self.pending_from[users[cancel]] = 0
            self.waiting -= int(cancel.sum())
            self._join(users[cancel], self._cohorts_for(w[cancel], u[cancel]))
        changed = known & ~same_in_force
        if not changed.any():
            return
        already = changed & (self.pending_from[users] > 0) & (self.pending_window[users] == w) & \
            (self.pending_units[users] == u)
        start = changed & ~already
        if start.any():
            who = users[start]
            self._leave(who)
            self.waiting += int(np.count_nonzero(self.cohort_of[who] != WAITING))
            self.cohort_of[who] = WAITING
            self.pending_from[who] = slot + w[start] - 1
            self.pending_window[who] = w[start]
            self.pending_units[who] = u[start]
            self._activate_waiting(slot)  # w' = 1 takes effect at once

    def _activate_waiting(self, slot: int) -> None:
        if not self.waiting:
            return
        due = np.flatnonzero((self.pending_from > 0) & (self.pending_from <= slot))
        if due.size == 0:
            return
        self.waiting -= due.size
        self.window_of[due] = self.pending_window[due]
        self.units_of[due] = self.pending_units[due]
        self.pending_from[due] = 0
        self._join(due, self._cohorts_for(self.window_of[due], self.units_of[due]))

    # dynamic -----------------------------------------------------------------
    _DECLARATION = ("backward_window", "backward_units", "forward_window", "forward_units")

    def _declare_dynamic(self, batch: SlotBatch, rows: np.ndarray) -> None:
        table = self.table
        # Every live declaration repeats at this slot unless replaced below.
        table.push("declared_forward_window", table.data["forward_window"])
        table.push("declared_forward_units", table.data["forward_units"])
        users, reqs = self._declarations(batch, rows)
        if reqs is None:
            return
        declared = (reqs.backward_window, reqs.backward_units, reqs.forward_window, reqs.forward_units)
        table.widen(int(max(reqs.backward_window.max(), reqs.forward_window.max())))
        rows = self.cohort_of[users]
        if self._declare_per_cohort(rows, declared):
            return
        known = rows >= 0
        moving = ~known
        if table.rows:
            gather = rows if not moving.any() else np.where(known, rows, 0)
            for name, column in zip(self._DECLARATION, declared):  # column by column: no n x 4 matrices
                moving |= table.data[name][gather] != column
        if not moving.any():
            return
        if moving.all():
            movers, source, decl = users, rows, declared
        else:
            movers, source, decl = users[moving], rows[moving], tuple(column[moving] for column in declared)
        groups, inverse = _group_moves(source, decl, table.rows)
        group_sizes = np.bincount(inverse, minlength=groups.shape[0])
        source_rows = groups[:, 0]
        fresh = source_rows < 0
        # A whole cohort declaring the same new thing is updated in place.
        source_sizes = np.zeros(source_rows.size, np.int64)
        source_sizes[~fresh] = table.size[source_rows[~fresh]]
        whole = ~fresh & (group_sizes == source_sizes)
        split = ~fresh & ~whole
        target = np.where(whole, source_rows, -1)
        if split.any():
            target[split] = table.copy_rows(groups[split, 0])
        if fresh.any():
            target[fresh] = table.add(int(fresh.sum()))
        for k, name in enumerate(self._DECLARATION):
            table.data[name][target] = groups[:, 1 + k]
        table.data["declared_forward_window"][target, 0] = groups[:, 3]
        table.data["declared_forward_units"][target, 0] = groups[:, 4]
        self._leave(movers)
        self._join(movers, target[inverse])

    def _declare_per_cohort(self, rows: np.ndarray, declared: tuple[np.ndarray, ...]) -> bool:
        """The usual slot, done per cohort: every member of every cohort declares, and alike.

        Then each cohort's declaration is replaced in place, which is what the
        general path does for a cohort that moves as a whole (and nothing, for
        one that declares what it had).  Returns False, changing nothing, when
        some user joins, some cohort is not all present, or its members differ.
        """
        table = self.table
        if rows.size == 0 or rows.min() < 0 or not np.array_equal(np.bincount(rows, minlength=table.rows),
                                                                  table.size):
            return False
        member = np.zeros(table.rows, np.int64)  # one batch position per cohort
        member[rows] = np.arange(rows.size)
        per_cohort = []
        for column in declared:
            value = column[member]
            if not (value[rows] == column).all():
                return False
            per_cohort.append(value)
        present = table.size > 0
        for name, value in zip(self._DECLARATION, per_cohort):
            table.data[name][present] = value[present]
        table.data["declared_forward_window"][present, 0] = per_cohort[2][present]
        table.data["declared_forward_units"][present, 0] = per_cohort[3][present]
        return True

    # cells -------------------------------------------------------------------
    def _compact(self) -> None:
        table = self.table
        if table.rows < 64:
            return
        dead = table.size == 0
        if dead.sum() * 2 <= table.rows:
            return
        if self.waiting:  # a waiting user who cancels rejoins their old cohort's history: keep it
            keys = self._fixed_key_rows()
            waiting = self.waiting_users()
            for w, u in set(zip(self.window_of[waiting].tolist(), self.units_of[waiting].tolist())):
                dead[keys[(w, u)]] = False
        remap = table.keep(np.flatnonzero(~dead))
        active = self.cohort_of >= 0
        self.cohort_of[active] = remap[self.cohort_of[active]]

    def _cells(self, batch: SlotBatch, groups: np.ndarray, rows: np.ndarray, all_report: bool, by_cohort: bool,
               registered: bool = False, dense: bool = False) -> Cells:
        """Counts per (cohort, bin), from the memberships snapshot ``groups`` alone (``rows`` are the batch users').

        ``registered`` says every row is already known to be in a cohort, ``dense`` that the batch's
        users are 0..n-1 (so ``rows`` are the first n memberships, unchanged this slot).
        """
        if self.carry_forward:
            reporting = batch.values >= 0
            self.value_of[batch.users[reporting]] = batch.values[reporting]
            users = np.flatnonzero((groups >= 0) & (self.value_of[:groups.size] >= 0))
            values, cohorts = self.value_of[users], groups[users]
        else:
            values, cohorts = batch.values, rows
            if values.size and (not all_report or (not registered and cohorts.min() < 0)):
                keep = (values >= 0) & (cohorts >= 0)
                values, cohorts = values[keep], cohorts[keep]
        if not by_cohort:
            return Cells.pooled(count_keys(values, self.bins))
        if cohorts.size == 0:
            return Cells.empty()
        cells = self.table.rows * self.bins
        if cells <= _DENSE_CELL_LIMIT:  # every (cohort, bin) pair, zero counts included
            if self.table.rows == 1:
                keys = values
            elif dense and registered and all_report and not self.carry_forward:  # row part repeats
                keys = self.derived(("row_keys", values.size), lambda: cohorts * self.bins) + values
            else:
                keys = cohorts * self.bins + values
            return Cells(*self._dense_index(), count_keys(keys, cells))
        keys, counts = np.unique(cohorts * self.bins + values, return_counts=True)
        return Cells(keys // self.bins, keys % self.bins, counts.astype(np.int64))

    def _dense_index(self) -> tuple[np.ndarray, np.ndarray]:
        key = (self.table.rows, self.bins)
        if getattr(self, "_dense_key", None) != key:
            self._dense_key = key
            self._dense = (np.repeat(np.arange(key[0]), key[1]), np.tile(np.arange(key[1]), key[0]))
        return self._dense
