"""Contributions of any number of slots as columns, for the release engine (no Beam here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np


def _no_rows() -> np.ndarray:
    return np.zeros(0, np.int64)


@dataclass
class SlotColumns:
    """Contributions of any number of slots as columns: one row per (slot, user), sorted by slot, then user id.

    The release stage builds it once per firing, so that each slot's rows are
    array slices and no Python loop runs per contribution.  Within a slot the
    rows are those of ``transforms.slot_batch.SlotBatchFn``.  User ids and declarations are
    dictionary-encoded: ``users`` indexes ``user_ids`` (sorted, so the codes
    order rows as the ids do) and ``requirements`` indexes ``declarations``
    (-1: none).
    """

    slots: np.ndarray         # int64, ascending
    users: np.ndarray         # int64 index into user_ids
    values: np.ndarray        # int64
    requirements: np.ndarray  # int64 index into declarations, -1 for None
    raw_counts: np.ndarray    # int64, how many input records each row uses
    raws: list                # per row, the texts of those records
    user_ids: list            # distinct, sorted
    declarations: list        # distinct declaration tuples
    duplicate_slots: np.ndarray = field(default_factory=_no_rows)    # slot of each contribution not kept
    duplicate_records: np.ndarray = field(default_factory=_no_rows)  # how many input records each of those has

    def duplicates(self) -> int:
        """Input records of the contributions not kept (a user's second one in a slot): duplicates."""
        return int(self.duplicate_records.sum())

    @classmethod
    def of(cls, contributions: list) -> "SlotColumns":
        rows = contributions
        n = len(rows)
        slots = np.fromiter(map(_SLOT, rows), np.int64, n)
        names = list(map(_USER, rows))
        user_ids = sorted(set(names))
        code = {user: i for i, user in enumerate(user_ids)}
        users = np.fromiter(map(code.__getitem__, names), np.int64, n)
        order = np.lexsort((users, slots))  # stable: a repeated (slot, user) keeps the input order
        repeated = (slots[order[1:]] == slots[order[:-1]]) & (users[order[1:]] == users[order[:-1]])
        duplicate_slots = duplicate_records = np.zeros(0, np.int64)
        if repeated.any():  # the per-user stage never sends a user twice per slot: rare
            order = _one_per_slot_and_user(rows, order)
            dropped = np.setdiff1d(np.arange(n), order)
            duplicate_slots = slots[dropped]
            duplicate_records = np.fromiter((len(rows[i][4]) for i in dropped.tolist()), np.int64, dropped.size)
        declarations: dict = {}
        requirements = np.fromiter((-1 if r is None else declarations.setdefault(tuple(r), len(declarations))
                                    for r in map(_REQUIREMENT, rows)), np.int64, n)
        raws = list(map(_RAWS, rows))
        picked = order.tolist()
        raws = [raws[i] for i in picked]
        return cls(slots=slots[order], users=users[order], values=np.fromiter(map(_VALUE, rows), np.int64, n)[order],
                   requirements=requirements[order], raw_counts=np.fromiter(map(len, raws), np.int64, len(raws)),
                   raws=raws, user_ids=user_ids, declarations=list(declarations),
                   duplicate_slots=duplicate_slots, duplicate_records=duplicate_records)

    def since(self, slot: int) -> "SlotColumns":
        """The rows of ``slot`` and later (and the contributions not kept there)."""
        start = int(np.searchsorted(self.slots, slot))
        later = self.duplicate_slots >= slot
        return SlotColumns(self.slots[start:], self.users[start:], self.values[start:], self.requirements[start:],
                           self.raw_counts[start:], self.raws[start:], self.user_ids, self.declarations,
                           self.duplicate_slots[later], self.duplicate_records[later])

    def slot_rows(self) -> list[tuple[int, int, int]]:
        """``(slot, start, end)`` for every slot with rows, ascending."""
        slots, starts = np.unique(self.slots, return_index=True)
        ends = np.r_[starts[1:], self.slots.size]
        return list(zip(slots.tolist(), starts.tolist(), ends.tolist()))


def _one_per_slot_and_user(rows: list, order: np.ndarray) -> np.ndarray:
    """``order`` keeping one row per (slot, user) by ``SlotBatchFn``'s rule: the larger raws, the first of equals."""
    kept: dict = {}
    for i in order.tolist():
        key = (rows[i][0], rows[i][1])
        j = kept.get(key)
        if j is None or rows[i][4] > rows[j][4]:
            kept[key] = i  # replacing keeps the key's place, so the rows stay sorted
    return np.fromiter(kept.values(), np.int64, len(kept))


_SLOT, _USER, _VALUE, _REQUIREMENT, _RAWS = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3), itemgetter(4)
