"""The Beam-free work of the numeric per-user stage when a user's slots close (``transforms.numeric_clients``):
requirements, the method's per-user steps (vectorised over users), the slots' partial sums, charges and dead
letters, and the seeded per-report randomness of tests and replays.
"""

from __future__ import annotations

import hashlib

import apache_beam as beam
import numpy as np

from transforms.declarations import DeclarationTranslator
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION
from transforms.mechanisms.declared import kind_name
from transforms.mechanisms.noise import (
    Randomness,
    insecure_seeded_randomness,
    secure_randomness,
)
from transforms.numeric_records import REPORT_SCALE, NumericCharges, SlotSum
from transforms.numeric_user_methods import Reporting, crowd_bins
from transforms.records import KEY_SEPARATOR, NO_VALUE, dead_letter
from transforms.user_state import ACCOUNTING
from transforms.numeric_stage_config import ClientStageConfig

CHARGES = "charges"
DEAD_LETTERS = "dead_letters"
CROWD = "crowd"
TRUTH = "truth"
"""``((stream, slot), (1, grid index))`` of every admitted value (NOT private: only with ``evaluate``)."""
PARTS = (DISSIMILARITY, PUBLICATION)  # the parts the central numeric streams charge (publication only, here)


def report_randomness(seed: int, stream: str, user: str, slot: int) -> Randomness:
    """The seeded generator of one user's report at one slot (tests and replays only: NOT private)."""
    text = KEY_SEPARATOR.join((str(seed), stream, user, str(slot))).encode("utf-8", "surrogatepass")
    return insecure_seeded_randomness(int.from_bytes(hashlib.sha256(text).digest()[:8], "little"))


class ReportDraws:
    """Randomness for one vectorised step of seeded runs: each report's draws from its own generator
    (:func:`report_randomness` of its key), arranged as the core's function reads them: its first 64-bit draw of
    every report in the step's order, then its second, ..."""

    def __init__(self, seed: int, keys: list, words: int):
        self.seed, self.keys, self.words = seed, keys, words

    def uint32(self, size: int) -> np.ndarray:
        if size != self.words * len(self.keys):
            raise ValueError(f"{self.words} words per report: {len(self.keys)} reports, {size} words asked")
        if not self.keys:
            return np.zeros(0, np.uint32)
        words = np.stack([report_randomness(self.seed, *key).uint32(self.words) for key in self.keys])
        return words.reshape(len(self.keys), -1, 2).transpose(1, 0, 2).reshape(-1)


def scaled_report(report: float) -> int:
    """``report·2**64`` as an exact integer (every report is a dyadic rational with a denominator below it)."""
    scaled = report * REPORT_SCALE
    if not scaled.is_integer():
        raise ValueError(f"report {report!r} is not on the square wave's grid")
    return int(scaled)


class UserClients:
    """The Beam-free work of closed slots: requirements, the method's per-user steps (vectorised over users,
    ``transforms.numeric_user_methods``), the slots' partial sums, charges and dead letters."""

    def __init__(self, config: ClientStageConfig):
        mechanism = config.build()
        self.config, self.method = config, config.method()
        self.steps = config.domain.steps
        self.translator = DeclarationTranslator(mechanism, config.policy)
        self.kind = kind_name(mechanism.requirement_kind)
        self.secure = secure_randomness() if config.insecure_seed is None else None

    def draws(self, keys, words: int) -> Randomness:
        """The randomness of one vectorised step: the secure generator, or each report's seeded one."""
        return self.secure if self.secure is not None else ReportDraws(self.config.insecure_seed, keys(), words)

    def admit(self, stream: str, user: str, contributions: list, outputs: list) -> tuple[Reporting, list]:
        """The reporting part of ``contributions`` (``Contribution`` tuples of one user, ascending slots) and the
        slots the user's records make present that may get no report from them (released even so:
        :class:`SlotReleases`; those outside the release range only start the stream's series, as in the central
        path; the sampling methods' slots all, the others' report at every reporting slot); dead letters and
        accounting appended to ``outputs``.  A record outside the release range is a dead letter (its declaration
        stays in force: the rows carry the requirement in force) and never reaches the user's client."""
        steps, release_range, sampled = self.steps, self.config.release_range, self.method.sampled
        reporting = Reporting(stream, user, [], [], [])
        present: list = []
        used = 0
        for slot, _, value, declared, raws in contributions:
            reason = release_range.outside(slot) if release_range is not None else None
            requirement = None
            if reason is None:
                requirement, reason = self.translator.row(declared or self.config.policy.assigned(user))
            if requirement is None:
                outputs += [beam.pvalue.TaggedOutput(DEAD_LETTERS, dead_letter(reason, raw, "numeric_clients", stream,
                                                                               user)) for raw in raws]
                outputs.append(beam.pvalue.TaggedOutput(ACCOUNTING, ("dead_letters", len(raws))))
                present.append(slot)
                continue
            used += len(raws)
            if value != NO_VALUE:  # a declaration only reports nothing
                if self.config.evaluate:  # the truth the evaluation compares with (NOT private)
                    outputs.append(beam.pvalue.TaggedOutput(TRUTH, ((stream, slot), (1, int(value)))))
                reporting.slots.append(slot)
                reporting.x.append(value / steps)
                reporting.requirements.append(requirement)
            if sampled or value == NO_VALUE:
                present.append(slot)
        if used:
            outputs.append(beam.pvalue.TaggedOutput(ACCOUNTING, ("records_used", used)))
        return reporting, present

    def step(self, users: list, rows: list, horizons: list | None = None) -> tuple[list, list]:
        """Every report of ``users`` (``Reporting``), each from its row (None: fresh), slots up to ``horizons``
        closed (the sampling methods' segments): per user the reports that leave, and the new rows."""
        return self.method.run(users, rows, horizons or [None] * len(users), self.draws)

    def emit(self, users: list, reports: list, sums: dict, final: bool, resumed: list | None = None,
             present: list | None = None) -> list:
        """Add the reports to the slots' partial sums ``sums`` (``[count, sum·2**64, largest charge]``), and an
        empty one for each of the user's ``present[i]`` slots without a report; each user's charges as a
        NumericCharges output (complete at the end of a bounded run, unless ``resumed[i]``: the ledger continues a
        carried tail)."""
        outputs = []
        for i, (user, made) in enumerate(zip(users, reports)):
            for slot in present[i] if present is not None else ():
                sums.setdefault((user.stream, slot), [0, 0, 0])
            if not made:
                continue
            charges = []
            for slot, value, dc, publication, requirement, dc_made_at, made_at in made:
                held = sums.setdefault((user.stream, slot), [0, 0, 0])
                held[0] += 1
                held[1] += scaled_report(value)
                held[2] = max(held[2], dc + publication)
                charges.append((slot, dc, publication, dc_made_at, made_at, *requirement))  # no least: the ledger's
            chunk = NumericCharges(f"{user.stream}{KEY_SEPARATOR}{user.user}", np.array(charges, np.int64),
                                   self.kind, final, final and not (resumed and resumed[i]))
            outputs.append(beam.pvalue.TaggedOutput(CHARGES, (chunk.key, chunk)))
        return outputs

    def crowd(self, users: list, reports: list, recent: list, held: list) -> list:
        """The crowd distribution's counts (``CROWD`` outputs ``((stream, slot), counts)``): each user's bin at
        every slot from their stream's first open one to their horizon whose last ``crowd_window`` slots hold a
        report of theirs (``recent[i]``, carried, then this run's; :func:`~transforms.numeric_user_methods.
        crowd_bins`), counted per slot."""
        counts: dict = {}
        for user, made, earlier, (_, _, ending) in zip(users, reports, recent, held):
            self.count_bins(counts, user.stream, earlier, made, ending.horizon, ending.first_open)
        return self.crowd_outputs(counts)

    def count_bins(self, counts: dict, stream: str, earlier, made: list, last: int, first: int) -> dict:
        """Add one user's bins at slots ``first .. last`` to ``counts`` (``(stream, slot) -> B counts``), from
        their reports ``earlier`` (carried or stored) and ``made``."""
        window, bins = self.config.crowd
        for slot, index in crowd_bins([*earlier, *made], window, bins, last):
            if slot >= first:
                counts.setdefault((stream, slot), [0] * bins)[index] += 1
        return counts

    @staticmethod
    def crowd_outputs(counts: dict) -> list:
        """The ``CROWD`` outputs ``((stream, slot), counts)`` of :meth:`count_bins`' counts."""
        return [beam.pvalue.TaggedOutput(CROWD, (key, tuple(held))) for key, held in counts.items()]

    def recent(self, earlier: tuple, made: list, end: int) -> tuple:
        """A user's reports ``(slot, value)`` a slot after ``end`` still reads (the crowd distribution's; none
        without it)."""
        if self.config.crowd is None:
            return ()
        return tuple((slot, value) for slot, value, *_ in [*earlier, *made] if slot > end - self.config.crowd[0])

    @staticmethod
    def slot_sums(sums: dict) -> list:
        """The partial sums as the stage's main outputs ``((stream, slot), (count, sum·2**64, units))``."""
        return [(key, SlotSum(n, total, units)) for key, (n, total, units) in sums.items()]
