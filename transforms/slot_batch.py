"""Slots' columnar batches from the users' contributions."""

from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam
import numpy as np


@dataclass
class ColumnarSlot:
    """One slot's contributions as columns (user ids stay strings until the release stage)."""

    users: list
    values: np.ndarray
    requirements: list
    raws: list  # per row, the texts of the input records it uses
    duplicate_records: int = 0  # records of the contributions not kept (a user's second one): duplicates


class SlotBatchFn(beam.CombineFn):
    """CombineFn: contributions (``Contribution`` or plain tuples) of one ``(stream, slot)`` -> a ``ColumnarSlot``.

    For pipelines that key by slot (``beam.CombinePerKey``); the release stage
    builds the same rows for all its slots at once with
    ``transforms.slot_columns.SlotColumns``.
    A user contributing twice to one slot (which the per-user stage never
    produces) keeps the later contribution by raw text, deterministically;
    the other's records are counted in ``duplicate_records``.
    """

    def create_accumulator(self):
        return {}, 0  # kept contribution per user, records of the ones not kept

    def add_input(self, accumulator, contribution):
        kept_per_user, duplicates = accumulator
        contribution = tuple(contribution)
        kept = kept_per_user.get(contribution[1])
        if kept is None:
            kept_per_user[contribution[1]] = contribution
            return kept_per_user, duplicates
        if contribution[4] > kept[4]:
            kept_per_user[contribution[1]], contribution = contribution, kept
        return kept_per_user, duplicates + len(contribution[4])  # the one not kept

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for kept_per_user, duplicates in accumulators:
            for contribution in kept_per_user.values():
                merged = self.add_input(merged, contribution)
            merged = merged[0], merged[1] + duplicates
        return merged

    def extract_output(self, accumulator) -> ColumnarSlot:
        kept_per_user, duplicates = accumulator
        rows = [kept_per_user[user] for user in sorted(kept_per_user)]
        return ColumnarSlot(users=[c[1] for c in rows], values=np.array([c[2] for c in rows], np.int64),
                            requirements=[c[3] for c in rows], raws=[c[4] for c in rows], duplicate_records=duplicates)
