"""Building one slot's columnar batch from the users' contributions."""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import apache_beam as beam
import numpy as np


@dataclass
class ColumnarSlot:
    """One slot's contributions as columns (user ids stay strings until the release stage)."""

    users: list
    values: np.ndarray
    requirements: list
    raws: list  # per row, the texts of the input records it uses


class SlotBatchFn(beam.CombineFn):
    """CombineFn: contributions (``Contribution`` or plain tuples) of one ``(stream, slot)`` -> a ``ColumnarSlot``.

    The release stage applies it to the contributions it holds for a slot; it
    also works under ``beam.CombinePerKey`` for pipelines that key by slot.
    A user contributing twice to one slot (which the per-user stage never
    produces) keeps the later contribution by raw text, deterministically.
    """

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, contribution):
        kept = accumulator.get(contribution[1])
        if kept is None or contribution[4] > kept[4]:
            accumulator[contribution[1]] = tuple(contribution)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = {}
        for accumulator in accumulators:
            for contribution in accumulator.values():
                self.add_input(merged, contribution)
        return merged

    def extract_output(self, accumulator) -> ColumnarSlot:
        rows = [accumulator[user] for user in sorted(accumulator)]
        return ColumnarSlot(users=[c[1] for c in rows], values=np.array([c[2] for c in rows], np.int64),
                            requirements=[c[3] for c in rows], raws=[c[4] for c in rows])

    def build(self, contributions) -> ColumnarSlot:
        """Combine a list in one go (what the release stage does, for every slot)."""
        rows = contributions if type(contributions) is list else list(contributions)
        if not rows:
            return ColumnarSlot([], np.zeros(0, np.int64), [], [])
        if len(set(map(_USER, rows))) != len(rows):  # the per-user stage never sends a user twice: rare
            kept = self.create_accumulator()
            for contribution in rows:
                self.add_input(kept, contribution)
            rows = list(kept.values())
        rows = sorted(rows, key=_USER)
        return ColumnarSlot(users=list(map(_USER, rows)), values=np.array(list(map(_VALUE, rows)), np.int64),
                            requirements=list(map(_REQUIREMENT, rows)), raws=list(map(_RAWS, rows)))


_USER, _VALUE, _REQUIREMENT, _RAWS = itemgetter(1), itemgetter(2), itemgetter(3), itemgetter(4)
