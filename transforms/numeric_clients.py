"""Seed 003's numeric methods with each user's client in the per-user stage: SW-direct, IPP, APP, CAPP, PP-S,
APP-S, CAPP-S, Sampling, BA-SW and ToPL(PM).

    outputs = events | PrivateNumericClients("capp", slot_seconds=60, domain=NumericDomain(0.0, 100.0),
                                             mechanism_params={"epsilon": 1.0, "window": 10},
                                             policy=RequirementPolicy(default=FixedRequirement(10, 1.0)))

Input: ``transforms.records.Event`` whose value is the grid index of a number in the domain
(``transforms.numeric_events.ValueToGrid`` makes it).  Outputs as ``PrivateStreamHistogram``'s: ``releases``,
``dead_letters``, ``usage``, ``violations``, ``ledger_entries``, ``accounting`` (and ``accounting_totals`` for
bounded input; with ``carry``, ``carry`` and ``estimates`` for a checkpoint).

**Where the state is.**  Each user's state lives in that user's state cell ``client``, typed per method
(versioned coders, no pickle): ``ClientRow`` (the deviation ring, ``D``, the age; ``ClientRowCoder``) for
SW-direct/IPP/APP/CAPP, ``SampledRow`` (the base client's row and the open segment's sum, count and requirement;
``SampledRowCoder``) for the sampling methods, ``AbsorptionRow`` (BA-SW's last publication; ``AbsorptionRowCoder``);
ToPL keeps none.  The cells sit beside those of the per-user stage (``transforms.user_state.UserSlotState``: same
names and coders, and its functions ``hold_event``, ``take_due`` and ``close_due``).  When a slot closes (the
event-time timer) the user's contribution goes through the core's own function for the method
(``transforms.numeric_user_methods``: ``Client.step``, ``absorption_step``, the Piecewise Mechanism) and only the
perturbed report (as its slot's partial sum, ``SlotSum``) and its charge leave the key.  The sampling methods
report a segment's mean at the segment's last slot (segments aligned on the slot numbers); the timer stays armed
at that slot while a segment is open, so a user without a value there still reports when it closes.  In bounded
input a segment reports when its last slot is within its stream's slots (the largest slot of the stream's
events, a side input); a segment still open at the end is carried in a checkpoint.  Bounded input takes
the GroupByKey path of the per-user stage: a key's events together, every slot closed at once, no state; the
keys of a bundle are stepped together (the k-th reports of all of them in one vectorised ``Client.step``) and
their reports summed per slot within the bundle.

**Release.**  The exact sum of a slot's reports (each a dyadic rational, summed as integers, so the order does
not matter; bounded input: a combine per ``(stream, slot)``, :class:`SlotSums`) and their count; the release is
the paper's raw average in the domain's units (§4; SW-direct's is biased toward the middle,
``server.debiased`` has the unbiased one).  The one central step is ToPL's de-biasing, ``(1 + (2m - 1)/g)/2`` of
the slot's average PM cell ``m`` (affine, so equal to the registered mechanism's average of de-biased reports up
to float rounding): the stage sends the PM cells.  BA-SW's value for a slot is what the user releases (a new
publication or the last one repeated).  Every slot of a stream is released, in order, as the central path
(``transforms.release``) releases it (:class:`SlotReleases`, ``schemas/release.avsc``): a slot without reports
is ``skipped`` (epsilon "0", no reporter, the stream's last estimate repeated; 0.0 before the first, as the
registered mechanisms).  Without a release range the series runs from the stream's first slot in which a record
arrived (the stage sends an empty partial sum for each slot a user's records touched, refused ones too) to its
last, a gap longer than ``max_empty_slots`` cut short as there; bounded input releases each stream's series at
once, streaming (:class:`ReleaseStreamSlots`, keyed by stream, the partial sums summed in its state, event-time
timers) each slot once the watermark has passed it and a report of it or of a later slot is due.  The sampling
methods report at segment ends, so a slot at which no segment ends (or whose segments hold no value) is a
skipped slot too.  With ``sma=K`` each release also carries ``figures["sma"]``, the paper's simple moving
average of the released series (§3.5; centred, or ``sma_mode="trailing"``).  Trust ``local_simulated``: the
clients run in the collector's pipeline on the users' values.

**Crowd distribution** (``crowd_window = q``, ``crowd_bins = B``, the core's, spec §3.8.3): each user's bin at
every slot whose last ``q`` slots hold a report of theirs (one without their report too) leaves the key
(``numeric_user_methods.crowd_bins``, the core's definition); the counts per slot are released as the fractions
of the users counted (statistic ``distribution``, as the central path), a skipped slot repeating the last ones.
Bounded input computes every slot of a key at once; streaming keeps the user's recent reports in a ``recent``
cell and the timer armed until the latest is ``q`` slots old; checkpoints carry the recent reports.  Not with
``sma``, nor for ToPL (one line).

**Release range.**  ``release_range=(start, end)`` (``transforms.release_range``, ``--start``/``--end``)
fixes the released slots: every slot meeting ``[start, end)``, empty ones included, and no other.  The central
path's rule is followed: a record outside the range is a dead letter with its reason and never reaches the
user's client (its state advances on in-range records only, so a run equals one on the in-range records
alone), while a requirement it declared stays in force for the user's later records; no report (and so no
charge) falls outside the range (a sampling method's segment ending after the range's last slot never reports).
A resumed run never releases a slot the checkpoint closed.  Streaming, a stream holding no report keeps its timer
at the range's last slot, as the central release stage does.

**Charges.**  Every report costs its sender its randomizer's realised epsilon (the strict ``ε/(w + h)`` split;
the sampling methods' ``ε/(n_w + h)``, BA-SW's dissimilarity and publication parts, ToPL's ``ε/w``).  The
sampling methods take ``accounting="paper"`` (the paper's intent ``n_w = ceil(w/L)``, no memory term) only with
``not_w_event_private=True`` when it is not w-event private on a stream (trap T3); their releases then carry
``figures["w_event_private"] = 0``; each user's charges go to the per-user ledger with the requirement the user
declared (or the operator's default), so every window is checked exactly.  A declaration the mechanism refuses
turns the user's records into dead letters with the reason, as in the histogram pipeline.

**Randomness.**  Secure by default.  With ``insecure_seed`` (tests and replays only, NOT private) each user's
report at each slot draws from its own generator, seeded from ``(seed, stream, user, slot)``
(:func:`report_randomness`): a keyed stage cannot reproduce one generator shared across users in user order,
so the seeded reports equal the core's ``Client.step`` run on each user with these generators.

Bounded runs carry each user's state out (``carry``: client row, next slot, declaration, ledger tail) into one
checkpoint file, with each stream's last released estimate (its skipped slots repeat it after the resume), and
resume from it (``resume``/``resume_from``; ``write_clients_checkpoint``).  Streaming jobs write the same file
after every ``checkpoint_every``-th slot and at the end (:class:`WriteClientCheckpoints`: a consistent cut of the
users' states and the releases) and resume from it: each carried user's cells restored (:data:`RESUMED`), each
stream continued at its next unreleased slot with its last estimate, the ledger from the carried tails
(:class:`ResumedStreamLedgerFn`).  The carried state travels inside the stage's DoFns (read once when the job is
built).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import typing
from dataclasses import dataclass, field
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.coders import BytesCoder, FloatCoder, TupleCoder, VarIntCoder
from apache_beam.transforms.window import GlobalWindow, TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from transforms import checkpoint
from transforms.coders import (
    AbsorptionRowCoder,
    ClientRowCoder,
    ReleaseRecordCoder,
    SampledRowCoder,
    SlotSumCoder,
    ValueCoder,
)
from transforms.declarations import DeclarationTranslator, RequirementPolicy
from transforms.encoding import decode_value, encode_value
from transforms.engine import ChargeChunk, CheckpointSaved, ReleaseConfig
from transforms.ledger import (
    ENTRIES,
    VIOLATIONS,
    CompleteChunkLedgerFn,
    UserLedgerFn,
    charge_chunk,
    check_windows,
    empty_tail,
)
from transforms.mechanisms import make_mechanism
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION
from transforms.mechanisms.declared import kind_name
from transforms.mechanisms.noise import (
    Randomness,
    insecure_seeded_randomness,
    secure_randomness,
)
from transforms.mechanisms.numeric import server
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS
from transforms.numeric_events import NumericDomain
from transforms.numeric_records import AbsorptionRow, SampledRow, SlotSum
from transforms.numeric_user_methods import Reporting, UserMethod, crowd_bins, user_method
from transforms.private_histogram import AccountingTotals
from transforms.release_range import ReleaseRange
from transforms.records import (
    KEY_SEPARATOR,
    NO_VALUE,
    DeadLetterRecord,
    Event,
    ReleaseRecord,
    dead_letter,
)
from transforms.slotting import SlotClock, close_user_slots
from transforms.user_state import (
    ACCOUNTING,
    LATE,
    NAMESPACE,
    Counted,
    GroupUserEvents,
    UserSlotState,
    close_due,
    hold_event,
    in_global_window,
    take_due,
)

_LOGGER = logging.getLogger(__name__)
CLIENT_METHODS = tuple(NUMERIC_STREAMS)
"""The registered numeric methods whose client runs in the per-user stage: all of them."""
ACCOUNTINGS = ("strict", "paper")
CHARGES = "charges"
DEAD_LETTERS = "dead_letters"
CARRY = "carry"
CROWD = "crowd"
USER_STATE, STREAM_ESTIMATE = "user", "estimate"  # what the streaming checkpoint writer receives
PARTS = (DISSIMILARITY, PUBLICATION)  # the parts the central numeric streams charge (publication only, here)
_SCALE = 1 << 64  # every report is a dyadic rational with a denominator below 2**64: exact as an integer
Summed = typing.Tuple[typing.Tuple[str, int], SlotSum]
"""``((stream, slot), SlotSum)``: how the reports leave the stage (summed within a bundle)."""
Crowd = typing.Tuple[typing.Tuple[str, int], typing.Tuple[int, ...]]
"""``((stream, slot), counts)``: how many users' means fall in each crowd bin (summed within a bundle)."""
OUTPUT_TYPES = {"reports": Summed, CHARGES: typing.Tuple[str, ChargeChunk], DEAD_LETTERS: DeadLetterRecord,
                LATE: DeadLetterRecord, ACCOUNTING: Counted}


class Carried(NamedTuple):
    """One user's per-user stage at the end of a bounded run, what a resumed run continues from: the client row
    (None: never reported), the first slot not yet closed (the stream's slots before the largest of its users'
    are late for everyone in a resumed run), the declaration in force and the ledger's tail
    (``transforms.ledger.check_windows``: the recent charges a later window still reaches)."""

    row: tuple | None
    next_slot: int
    declared: tuple | None
    tail: dict
    recent: tuple = ()  # the crowd distribution: the user's reports ``(slot, value)`` a later slot's mean reads


@dataclass(frozen=True)
class ClientStageConfig:
    """What the client stage needs; validated (and the registered mechanism built once) at construction."""

    mechanism: str
    domain: NumericDomain
    params: dict
    clock: SlotClock
    policy: RequirementPolicy = field(default_factory=RequirementPolicy)
    insecure_seed: int | None = None
    accounting: str = "strict"
    not_w_event_private: bool = False
    release_range: ReleaseRange | None = None  # the public slots released and charged; None: the data's

    def __post_init__(self):
        if self.mechanism not in CLIENT_METHODS:
            raise ValueError(f"the per-user client stage runs {', '.join(CLIENT_METHODS)}, not {self.mechanism}")
        if not isinstance(self.domain, NumericDomain):
            raise ValueError(f"domain must be a NumericDomain, got {type(self.domain).__name__}")
        if self.insecure_seed is not None and (not isinstance(self.insecure_seed, int) or self.insecure_seed < 0):
            raise ValueError(f"insecure_seed must be a non-negative integer, got {self.insecure_seed!r}")
        if self.accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {self.accounting!r}")
        if self.release_range is not None and not isinstance(self.release_range, ReleaseRange):
            raise ValueError(f"release_range must be a ReleaseRange, got {self.release_range!r}")
        if self.crowd is not None and self.mechanism == "topl":
            raise ValueError("topl: the crowd distribution is not in the per-user stage (its reports are de-biased "
                             "centrally): run without --per-user-clients")
        method = self.method()
        if not method.w_event_private and not self.not_w_event_private:
            raise ValueError(f"{self.mechanism} with accounting={self.accounting!r} is not w-event private on a "
                             "stream (trap T3: a window touches ceil((w-1)/L) + 1 segments plus the memory): use "
                             "accounting='strict' or not_w_event_private=True")

    @property
    def crowd(self) -> tuple[int, int] | None:
        """``(crowd_window, crowd_bins)`` when the releases are the crowd distribution, else None."""
        window, bins = self.params.get("crowd_window"), self.params.get("crowd_bins")
        return None if window is None and bins is None else (window, bins)

    @property
    def label(self) -> str:
        """The mechanism's name as a checkpoint records it (the PP-S family's paper accounting named)."""
        return self.mechanism if self.accounting == "strict" else f"{self.mechanism} (accounting {self.accounting})"

    def build(self):
        """The registered mechanism (grid units): its client, requirement validation and parameters."""
        return make_mechanism(self.mechanism, bins=1, **self.params, **self.domain.mechanism_params())

    def method(self) -> UserMethod:
        """What the stage runs per user (``transforms.numeric_user_methods``)."""
        return user_method(self.build(), self.accounting)


CLIENTS_STREAM = "\x00per-user-clients"
"""The name a per-user client checkpoint is filed under (``checkpoint.file_name``): no stream is called so."""


class CarriedClients(dict):
    """``(stream, user) -> Carried`` as read from a checkpoint, with ``estimates``: each stream's last released
    estimate (``stream -> (slot, estimate)``), which its skipped slots repeat in the resumed run."""

    def __init__(self, carried=(), estimates: dict | None = None):
        super().__init__(carried)
        self.estimates = dict(estimates or {})


def clients_checkpoint(carried: dict, config: ClientStageConfig, estimates: dict) -> tuple[int, checkpoint.Checkpoint]:
    """Every user's :class:`Carried` state (``(stream, user) -> Carried``) and each stream's last estimate
    (``stream -> (slot, estimate)``) as one checkpoint (the project's format, ``transforms.checkpoint``), with the
    slot its file is named after (the largest next slot)."""
    crowd = config.crowd is not None  # with it, each row ends with the user's recent reports
    table = [(stream, user, None if c.row is None else tuple(c.row), c.next_slot, c.declared, c.tail,
              *((tuple(c.recent),) if crowd else ())) for (stream, user), c in sorted(carried.items())]
    saved = checkpoint.Checkpoint(config.label, config.build().params.to_json(), config.clock.slot_seconds,
                                  config.clock.origin, config.insecure_seed, live={"per_user_clients": len(table)},
                                  arrays={"clients": np.frombuffer(encode_value(table), np.uint8),
                                          "estimates": np.frombuffer(encode_value(sorted(
                                              (stream, *at) for stream, at in estimates.items())), np.uint8)})
    return max((c.next_slot for c in carried.values()), default=0), saved


def write_clients_checkpoint(carried: list, config: ClientStageConfig, directory: str, before: dict | None,
                             estimates: dict | None = None) -> str:
    """Every user's :class:`Carried` state (``before``'s users absent from this run kept as they were) and each
    stream's last estimate (``estimates``: the ``"estimates"`` output) as one checkpoint file in ``directory``
    (:func:`clients_checkpoint`); returns its path."""
    merged = dict(before or {})
    merged.update(carried)
    next_slot, saved = clients_checkpoint(merged, config, {**getattr(before, "estimates", {}), **(estimates or {})})
    path = os.path.join(directory, checkpoint.file_name(CLIENTS_STREAM, next_slot))
    os.makedirs(directory, exist_ok=True)
    checkpoint.save(path, saved)
    return path


def holds_clients_only(path: str) -> bool:
    """Whether the checkpoint at ``path`` holds per-user client state and no release stage's (so the central path
    must not resume from it: it would start afresh)."""
    try:
        saved = checkpoint.load_for_resume(path)
    except checkpoint.CheckpointError:
        return False  # the central path reports it
    return not saved.streams and saved.live is not None and "per_user_clients" in saved.live


def read_clients_checkpoint(path: str, config: ClientStageConfig) -> dict:
    """``(stream, user) -> Carried`` from :func:`write_clients_checkpoint`'s file (or the latest in a directory),
    checked against ``config``; one-line ``CheckpointError`` otherwise."""
    saved = checkpoint.load_for_resume(path)
    if not saved.live or "per_user_clients" not in saved.live or "clients" not in saved.arrays:
        raise checkpoint.CheckpointError(f"checkpoint {path} holds no per-user client state (written without "
                                         "--per-user-clients?)")
    saved.check(config.label, config.build().params, config.clock.slot_seconds, config.clock.origin,
                config.insecure_seed, path)
    carried, row_type = CarriedClients(), config.method().row_type
    if "estimates" in saved.arrays:
        carried.estimates = {stream: (slot, estimate)
                             for stream, slot, estimate in decode_value(saved.arrays["estimates"].tobytes())}
    for stream, user, row, next_slot, declared, tail, *recent in decode_value(saved.arrays["clients"].tobytes()):
        if row is not None and row_type is not None and len(row) == len(row_type._fields):
            row = row_type(*row)
        elif row is not None:
            raise checkpoint.CheckpointError(f"checkpoint {path}: a user's state row does not fit {config.mechanism}")
        carried[(stream, user)] = Carried(row, next_slot, None if declared is None else tuple(declared), tail,
                                          tuple(tuple(report) for report in recent[0]) if recent else ())
    return carried


def resumed_first_open(resume: dict) -> dict:
    """Each resumed stream's first slot the checkpoint did not close: after its users' next slots and its last
    released slot (``resume.estimates``)."""
    first_open: dict = {}
    for (stream, _), before in resume.items():
        first_open[stream] = max(first_open.get(stream, 0), before.next_slot)
    for stream, (slot, _) in getattr(resume, "estimates", {}).items():
        first_open[stream] = max(first_open.get(stream, 0), slot + 1)
    return first_open


def report_randomness(seed: int, stream: str, user: str, slot: int) -> Randomness:
    """The seeded generator of one user's report at one slot (tests and replays only: NOT private)."""
    text = KEY_SEPARATOR.join((str(seed), stream, user, str(slot))).encode("utf-8", "surrogatepass")
    return insecure_seeded_randomness(int.from_bytes(hashlib.sha256(text).digest()[:8], "little"))


class _ReportDraws:
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


def _scaled(report: float) -> int:
    """``report·2**64`` as an exact integer (every report is a dyadic rational with a denominator below it)."""
    scaled = report * _SCALE
    if not scaled.is_integer():
        raise ValueError(f"report {report!r} is not on the square wave's grid")
    return int(scaled)


class _UserClients:
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
        return self.secure if self.secure is not None else _ReportDraws(self.config.insecure_seed, keys(), words)

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
        ChargeChunk output (complete at the end of a bounded run, unless ``resumed[i]``: the ledger continues a
        carried tail)."""
        outputs = []
        for i, (user, made) in enumerate(zip(users, reports)):
            for slot in present[i] if present is not None else ():
                sums.setdefault((user.stream, slot), [0, 0, 0])
            if not made:
                continue
            charges = []
            for slot, value, dc, publication, requirement in made:
                held = sums.setdefault((user.stream, slot), [0, 0, 0])
                held[0] += 1
                held[1] += _scaled(value)
                held[2] = max(held[2], dc + publication)
                charges.append((slot, dc + publication, dc, publication, *requirement))  # least = charge: realised
            chunk = ChargeChunk(f"{user.stream}{KEY_SEPARATOR}{user.user}", np.array(charges, np.int64), self.kind,
                                PARTS, final, final and not (resumed and resumed[i]))
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


def _counted(outputs, counters: dict):
    """Pass ``outputs`` on, adding the accounting records to Beam counters too."""
    for output in outputs:
        if isinstance(output, beam.pvalue.TaggedOutput) and output.tag == ACCOUNTING:
            counters[output.value[0]].inc(output.value[1])
        yield output


def _counters() -> dict:
    return {name: Metrics.counter(NAMESPACE, name) for name in ("records_used", "dead_letters", "duplicates", "late")}


class CloseUserClients(beam.DoFn):
    """Bounded input: every slot of each complete key closed at once; the clients of a bundle's keys (up to
    ``MAX_HELD`` reports) run together, vectorised over users, from fresh states or, resuming, from the
    ``carried`` side input (events before a user's carried next slot are late).  With ``carry`` each user's
    :class:`Carried` state at the end is an output (``CARRY``), for a checkpoint."""

    MAX_HELD = 50_000

    def __init__(self, config: ClientStageConfig, carry: bool = False, max_window: int = 1,
                 first_open: dict | None = None):
        self.config, self.carry, self.max_window = config, carry, max_window
        self.first_open = first_open or {}  # stream -> its first slot a resumed checkpoint did not close

    def setup(self):
        self.users = _UserClients(self.config)
        self.counters = _counters()

    def start_bundle(self):
        self._held: list = []
        self._reports = 0

    def process(self, element, carried=None, horizons=None):
        (stream, user), lists = element
        events = [r for held in lists for r in held]
        before = carried.get((stream, user)) if carried else None
        outputs: list = []
        first_open = max(self.first_open.get(stream, 0), before.next_slot if before else 0)
        release_range = self.config.release_range
        if release_range is not None and (self.users.method.sampled or self.config.crowd):  # bounded: every slot
            # of the range is closed
            horizon = release_range.last_slot
        else:
            horizon = max(horizons.get(stream, -1), first_open - 1) if horizons is not None else None
        if first_open:  # the stream's slots the checkpoint closed, for every user (new ones too)
            slot_of = self.config.clock.slot_of
            late = [r for r in events if slot_of(r[0]) < first_open]
            events = [r for r in events if slot_of(r[0]) >= first_open]
            for report in late:
                outputs.append(beam.pvalue.TaggedOutput(ACCOUNTING, ("late", 1)))
                outputs.append(beam.pvalue.TaggedOutput(LATE, dead_letter(
                    f"late: slot {slot_of(report[0])} closed by the checkpoint resumed from", report[3],
                    "numeric_clients", stream, user)))
        rows, duplicates, declared = close_user_slots(user, events, self.config.clock,
                                                      before.declared if before else None)
        if duplicates:
            outputs.append(beam.pvalue.TaggedOutput(ACCOUNTING, ("duplicates", duplicates)))
        reporting, present = self.users.admit(stream, user, rows, outputs)
        next_slot = max(rows[-1][0] + 1 if rows else 0, first_open)
        self._held.append((reporting, before, _Ending(next_slot, declared, horizon, present, first_open)))
        self._reports += len(reporting.slots)
        if self._reports >= self.MAX_HELD:
            outputs += self._take()
        return _counted(outputs, self.counters)

    def finish_bundle(self):
        return map(in_global_window, self._take())

    def _take(self) -> list:
        held, self._held, self._reports = self._held, [], 0
        if not held:
            return []
        users = [reporting for reporting, _, _ in held]
        reports, rows = self.users.step(users, [before.row if before else None for _, before, _ in held],
                                        [ending.horizon for _, _, ending in held])
        sums: dict = {}
        outputs = self.users.emit(users, reports, sums, final=True, resumed=[before is not None for _, before, _ in
                                                                               held],
                                  present=[ending.present for _, _, ending in held])
        recent = [before.recent if before else () for _, before, _ in held]
        if self.config.crowd:
            outputs += self.users.crowd(users, reports, recent, held)
        if self.carry:
            for (reporting, before, ending), row, output, earlier, made in zip(held, rows, _charges_of(reports, outputs),
                                                                                recent, reports):
                tail = before.tail if before else empty_tail()
                if output is not None:
                    tail = check_windows(tail, charge_chunk(*output.ledger_input()), self.max_window)[0]
                kept = reporting.slots or (before is not None and before.row is not None)
                carried = Carried(row if kept else None, ending.next_slot, ending.declared, tail,
                                  self.users.recent(earlier, made, max(ending.horizon or -1, ending.next_slot - 1)))
                outputs.append(beam.pvalue.TaggedOutput(CARRY, ((reporting.stream, reporting.user), carried)))
        return self.users.slot_sums(sums) + outputs


class ResumedLedgerFn(CompleteChunkLedgerFn):
    """The bounded ledger of a resumed run: a resumed user's charges continue the tail carried in ``carried``."""

    def process(self, element, carried=None):
        key, charges = element
        if charges.complete:
            yield from super().process(element)
            return
        chunk = charge_chunk(*charges.ledger_input())
        before = carried[tuple(key.split(KEY_SEPARATOR, 1))]
        _, worst, violations = check_windows(before.tail, chunk, self.max_window)
        yield from self._outputs(key, chunk, (int(chunk["slots"].size), worst, len(violations)), violations)


class ResumedStreamLedgerFn(UserLedgerFn):
    """The streaming ledger of a resumed job: a carried user's first charges continue the tail of the checkpoint
    (``tails``: ledger key -> tail), so a window reaching across the restart is checked whole."""

    def __init__(self, max_window: int, detail: bool = False, tails: dict | None = None):
        super().__init__(max_window, detail)
        self.tails = dict(tails or {})

    def process(self, element, tail_state=beam.DoFn.StateParam(UserLedgerFn.TAIL),
                usage_state=beam.DoFn.StateParam(UserLedgerFn.USAGE)):
        if tail_state.read() is None and element[0] in self.tails:
            tail_state.write(self.tails[element[0]])
        return super().process(element, tail_state, usage_state)


class _Ending(NamedTuple):
    next_slot: int
    declared: tuple | None
    horizon: int | None  # the stream's slots closed by the end of the run (the sampling methods' segments)
    present: list  # the slots the user's records make present (``_UserClients.admit``)
    first_open: int = 0  # the stream's first slot a resumed checkpoint did not close


def _charges_of(reports: list, outputs: list) -> list:
    """Each user's ChargeChunk among ``emit``'s outputs (None for a user without reports), in ``reports``' order."""
    chunks = iter(output.value[1] for output in outputs)
    return [next(chunks) if made else None for made in reports]


RESUMED = -2
"""An ``Event`` value no record has (grid indices are >= 0, a declaration's ``NO_VALUE`` is -1): the element a
resumed streaming job sends to each carried user so that the user's cells are restored (:class:`_ClientCells`)."""


class _ClientCells(beam.DoFn):
    """Streaming: the per-user stage's cells (those of ``UserSlotState``, same names and coders) and the user's
    method state in the ``client`` cell, advanced when a slot closes (event-time timer).  Each subclass declares
    its ``client`` cell's coder (a timer spec serves one class, so each declares its own ``close`` too).

    Checkpoints: with ``carry`` each firing also sends the user's :class:`Carried` state (the ledger's tail kept in
    the ``tail`` cell) to the checkpoint writer (:class:`WriteClientCheckpoints`) as ``(CLIENTS_STREAM, bytes)``;
    resuming (``resume``: ``(stream, user) -> Carried``), a :data:`RESUMED` element restores a user's cells and
    an event of a slot before its stream's ``first_open`` is late (the checkpoint closed it)."""

    EVENTS, REQUIREMENT = UserSlotState.EVENTS, UserSlotState.REQUIREMENT
    LAST_CLOSED, NEXT_CLOSE = UserSlotState.LAST_CLOSED, UserSlotState.NEXT_CLOSE
    TAIL = ReadModifyWriteStateSpec("tail", ValueCoder())  # with carry: the ledger's tail (check_windows)
    RECENT = ReadModifyWriteStateSpec("recent", ValueCoder())  # the crowd distribution: (the last slot whose bin
    # was sent, the user's reports (slot, value) a later slot still reads)

    def __init__(self, config: ClientStageConfig, carry: bool = False, max_window: int = 1,
                 resume: dict | None = None, first_open: dict | None = None):
        self.config, self.clock = config, config.clock
        self.carry, self.max_window = carry, max_window
        self.resume, self.first_open = dict(resume or {}), dict(first_open or {})
        self.late = Metrics.counter(NAMESPACE, "late")
        self.duplicates = Metrics.counter(NAMESPACE, "duplicates")

    def setup(self):
        self.users = _UserClients(self.config)
        self.counters = _counters()

    def hold(self, element, events_state, requirement_state, last_closed_state, next_close_state, close,
             client_state, tail_state, recent_state):
        """One keyed event held until its slot closes (``hold_event``), a late one dead-lettered, or a
        :data:`RESUMED` element restoring the user's carried state."""
        (stream, user), event = element
        if event.value == RESUMED:
            self._restore((stream, user), requirement_state, last_closed_state, next_close_state, close,
                          client_state, tail_state, recent_state)
            return
        slot = self.clock.slot_of(event.time)
        if slot < self.first_open.get(stream, 0):
            self.late.inc()
            yield beam.pvalue.TaggedOutput(ACCOUNTING, ("late", 1))
            yield beam.pvalue.TaggedOutput(LATE, dead_letter(f"late: slot {slot} closed by the checkpoint resumed "
                                                             "from", event.raw, "numeric_clients", stream, user))
            return
        yield from hold_event(self, element, events_state, last_closed_state, next_close_state, close)

    def _restore(self, key, requirement_state, last_closed_state, next_close_state, close, client_state,
                 tail_state, recent_state) -> None:
        before = self.resume[key]
        if before.row is not None:
            client_state.write(before.row)
        if before.declared is not None:
            requirement_state.write(before.declared)
        next_slot = max(before.next_slot, self.first_open.get(key[0], 0))
        last_closed = last_closed_state.read()
        if next_slot > 0 and (last_closed is None or last_closed < next_slot - 1):
            last_closed_state.write(next_slot - 1)
        if self.carry:
            tail_state.write(before.tail)
        self._arm_segment(before.row, next_close_state, close)
        if before.recent:
            recent_state.write((next_slot - 1, tuple(before.recent)))
            self._arm_crowd(before.recent, next_slot, next_close_state, close)

    def _arm_crowd(self, recent, slot: int, next_close_state, close) -> None:
        """The crowd distribution: a user whose last ``crowd_window`` slots hold a report of theirs emits their bin
        at ``slot`` too, so the timer is armed at it (unless earlier) while a stored report still reaches it."""
        if self.config.crowd is not None and recent and recent[-1][0] + self.config.crowd[0] > slot:
            self._arm_at(slot, next_close_state, close)

    def _arm_segment(self, row, next_close_state, close) -> None:
        """The sampling methods: an open segment reports when its last slot closes (in the release range)."""
        if not self.users.method.sampled or row is None or not row.count:
            return
        self._arm_at(self.users.method.segment_end(row.segment * self.users.method.segment), next_close_state, close)

    def _arm_at(self, slot: int, next_close_state, close) -> None:
        """Arm the ``close`` timer at ``slot`` unless it is armed earlier or the slot is after the release range."""
        release_range = self.config.release_range
        pending = next_close_state.read()
        if (pending is None or slot < pending) and (release_range is None or slot <= release_range.last_slot):
            next_close_state.write(slot)
            close.set(Timestamp(micros=self.clock.close_micros(slot)))

    def fire(self, key, events_state, requirement_state, last_closed_state, next_close_state, close, client_state,
             tail_state, recent_state):
        """The slots closed by the timer: the due events through the user's method from the ``client`` cell.  For
        the sampling methods a firing may close a segment without due events (its last slot), and the timer is
        kept armed at the open segment's last slot."""
        sampled, crowd = self.users.method.sampled, self.config.crowd is not None
        armed = next_close_state.read()  # the slot whose close fired: every slot up to it is closed
        closed_before = last_closed_state.read()
        due = take_due(self, Timestamp(micros=self.clock.close_micros(armed)), events_state, next_close_state, close)
        if not due and not sampled and not crowd:
            return
        stream, user = key
        rows = (yield from close_due(self, user, due, requirement_state, last_closed_state)) if due else []
        outputs: list = []
        reporting, present = self.users.admit(stream, user, rows, outputs)
        row = client_state.read()
        release_range = self.config.release_range
        last = release_range.last_slot if release_range is not None else armed  # a segment ends in the range
        reports: list = [[]]
        if reporting.slots or (sampled and row is not None):
            reports, (row,) = self.users.step([reporting], [row], [min(armed, last)])
            if row is not None:
                client_state.write(row)
        sums: dict = {}
        outputs += self.users.emit([reporting], reports, sums, final=False, present=[present])
        outputs += self.users.slot_sums(sums)
        if sampled:
            last_closed_state.write(max(armed, last_closed_state.read() or 0))
            self._arm_segment(row, next_close_state, close)
        if crowd:  # (a firing for the crowd alone closes no slot: the user's later events are not late for it)
            through, earlier = recent_state.read() or (-1, ())
            first = max(through, -1 if closed_before is None else closed_before,
                        self.first_open.get(stream, 0) - 1) + 1
            outputs += self.users.crowd_outputs(self.users.count_bins({}, stream, earlier, reports[0], armed, first))
            recent = self.users.recent(earlier, reports[0], last_closed_state.read())  # (kept for the slots not
            # closed yet: a checkpoint's resumed job reads them)
            recent_state.write((max(through, armed), recent))
            self._arm_crowd(recent, armed + 1, next_close_state, close)
        if self.carry:
            outputs.append(self._carried(key, reports[0], outputs, row, requirement_state, last_closed_state,
                                         tail_state, recent_state))
        yield from _counted(outputs, self.counters)

    def _carried(self, key, made, outputs, row, requirement_state, last_closed_state, tail_state, recent_state):
        """The user's :class:`Carried` state after a firing (its charges added to the ledger tail in ``tail``), as
        the checkpoint writer's input."""
        tail = tail_state.read() or empty_tail()
        if made:
            chunk = next(output.value[1] for output in outputs
                         if isinstance(output, beam.pvalue.TaggedOutput) and output.tag == CHARGES)
            tail = check_windows(tail, charge_chunk(*chunk.ledger_input()), self.max_window)[0]
            tail_state.write(tail)
        carried = (USER_STATE, *key, None if row is None else tuple(row), last_closed_state.read() + 1,
                   requirement_state.read(), tail, tuple((recent_state.read() or (-1, ()))[1]))
        return beam.pvalue.TaggedOutput(CARRY, (CLIENTS_STREAM, encode_value(carried)))


def _client_cells(name: str, coder, doc: str) -> type:
    """A streaming per-user DoFn of :class:`_ClientCells` whose ``client`` cell has ``coder`` (a timer spec serves
    one class: each class gets its own ``close``).  Named as the module attribute it is bound to, so it pickles by
    reference."""
    client_spec = ReadModifyWriteStateSpec("client", coder)
    close_spec = TimerSpec("close", TimeDomain.WATERMARK)
    events, requirement = _ClientCells.EVENTS, _ClientCells.REQUIREMENT
    last_closed, next_close, tail = _ClientCells.LAST_CLOSED, _ClientCells.NEXT_CLOSE, _ClientCells.TAIL
    recent = _ClientCells.RECENT

    class Cells(_ClientCells):
        CLIENT, CLOSE = client_spec, close_spec

        def process(self, element, events_state=beam.DoFn.StateParam(events),
                    requirement_state=beam.DoFn.StateParam(requirement),
                    last_closed_state=beam.DoFn.StateParam(last_closed),
                    next_close_state=beam.DoFn.StateParam(next_close), close=beam.DoFn.TimerParam(close_spec),
                    client_state=beam.DoFn.StateParam(client_spec), tail_state=beam.DoFn.StateParam(tail),
                    recent_state=beam.DoFn.StateParam(recent)):
            return self.hold(element, events_state, requirement_state, last_closed_state, next_close_state, close,
                             client_state, tail_state, recent_state)

        @on_timer(close_spec)
        def on_close(self, key=beam.DoFn.KeyParam, events_state=beam.DoFn.StateParam(events),
                     requirement_state=beam.DoFn.StateParam(requirement),
                     last_closed_state=beam.DoFn.StateParam(last_closed),
                     next_close_state=beam.DoFn.StateParam(next_close), close=beam.DoFn.TimerParam(close_spec),
                     client_state=beam.DoFn.StateParam(client_spec), tail_state=beam.DoFn.StateParam(tail),
                     recent_state=beam.DoFn.StateParam(recent)):
            return self.fire(key, events_state, requirement_state, last_closed_state, next_close_state, close,
                             client_state, tail_state, recent_state)

    Cells.__name__ = Cells.__qualname__ = name
    Cells.__doc__ = doc
    return Cells


UserClientState = _client_cells("UserClientState", ClientRowCoder(), """Streaming, SW-direct / IPP / APP / CAPP (the
``client`` cell holds the ``ClientRow``, ``ClientRowCoder``) and ToPL (no state: the cell stays empty).""")
UserSampledState = _client_cells("UserSampledState", SampledRowCoder(), """Streaming, PP-S / APP-S / CAPP-S /
Sampling: the ``client`` cell holds the user's ``SampledRow`` (``SampledRowCoder``): the base client and the open
segment's sum.""")
UserAbsorptionState = _client_cells("UserAbsorptionState", AbsorptionRowCoder(), """Streaming, BA-SW: the
``client`` cell holds the user's ``AbsorptionRow`` (``AbsorptionRowCoder``).""")


def state_fn(config: ClientStageConfig, **checkpoints) -> UserClientState:
    """The streaming per-user DoFn whose ``client`` cell holds ``config``'s method's row (``checkpoints``: the
    :class:`_ClientCells` options ``carry``, ``max_window``, ``resume``, ``first_open``)."""
    row_type = config.method().row_type
    cells = {SampledRow: UserSampledState, AbsorptionRow: UserAbsorptionState}.get(row_type, UserClientState)
    return cells(config, **checkpoints)


class SlotSums(beam.CombineFn):
    """Partial sums ``(count, sum·2**64, units)`` of a slot's reports -> their total: exact integers, so the
    order of the combine changes nothing."""

    def create_accumulator(self):
        return SlotSum(0, 0, 0)

    def add_input(self, accumulator, partial):
        return SlotSum(accumulator[0] + partial[0], accumulator[1] + partial[1], max(accumulator[2], partial[2]))

    def merge_accumulators(self, accumulators):
        total = self.create_accumulator()
        for accumulator in accumulators:
            total = self.add_input(total, accumulator)
        return total

    def extract_output(self, accumulator):
        return accumulator

    def get_accumulator_coder(self):
        return SlotSumCoder()


def crowd_record(stream: str, slot: int, n: int, units: int, counts: tuple, config: ClientStageConfig
                 ) -> ReleaseRecord:
    """A slot's crowd distribution release (statistic ``distribution``, the central path's record): the fractions
    of the ``sum(counts)`` users counted whose mean falls in each bin (``n`` reports at this slot)."""
    Metrics.counter(NAMESPACE, "slots_fresh").inc()
    users, clock = sum(counts), config.clock
    if not users:
        raise ValueError(f"stream {stream} slot {slot}: reports but no user counted in the crowd distribution")
    return ReleaseRecord({
        "stream": stream, "slot": slot, "slot_start": clock.start(slot), "slot_end": clock.end(slot),
        "mechanism": config.mechanism, "mechanism_slot": slot, "histogram": list(counts),
        "kind": "fresh", "epsilon": units_to_decimal_string(units), "predicted_error": None,
        "registered_users": None, "reporters": n, "statistic": "distribution",
        "estimate": (np.array(counts, np.int64) / users).tolist(), "trust": "local_simulated", "figures": {}})


def release_record(element, config, method: UserMethod, variance: float, trust: str = "local_simulated"
                   ) -> ReleaseRecord:
    """A slot's release (``schemas/release.avsc``) from its reports' exact sum, in the domain's units (ToPL's
    average de-biased: ``method.unit_estimate``).  ``config`` has the mechanism's name, the domain and the slot
    clock (:class:`ClientStageConfig`, or the device reports' ``DeviceStreamConfig``)."""
    (stream, slot), (n, total, units) = element
    Metrics.counter(NAMESPACE, "slots_fresh").inc()
    domain, clock = config.domain, config.clock
    unit = method.unit_estimate(total / (n * _SCALE))  # int / int: correctly rounded
    estimate = float(domain.low) + domain.width * unit
    return ReleaseRecord({
        "stream": stream, "slot": slot, "slot_start": clock.start(slot), "slot_end": clock.end(slot),
        "mechanism": config.mechanism, "mechanism_slot": slot, "histogram": [round(estimate * n)],
        "kind": "fresh", "epsilon": units_to_decimal_string(units),
        "predicted_error": variance * domain.width ** 2 / n, "registered_users": None, "reporters": n,
        "statistic": "mean",
        "estimate": [estimate], "trust": trust,
        "figures": {} if method.w_event_private else {"w_event_private": 0.0}})


def skipped_record(stream: str, slot: int, estimate, config, method: UserMethod,
                   trust: str = "local_simulated", statistic: str = "mean") -> ReleaseRecord:
    """A slot without reports, as the central path releases it: kind ``skipped``, epsilon 0, the stream's last
    estimate repeated (0.0 before its first, the registered mechanisms' initial one; a crowd distribution's
    list of fractions, zeros before its first), no reporter."""
    Metrics.counter(NAMESPACE, "slots_skipped").inc()
    clock = config.clock
    return ReleaseRecord({
        "stream": stream, "slot": slot, "slot_start": clock.start(slot), "slot_end": clock.end(slot),
        "mechanism": config.mechanism, "mechanism_slot": slot, "histogram": [0], "kind": "skipped",
        "epsilon": "0", "predicted_error": None, "registered_users": None, "reporters": 0, "statistic": statistic,
        "estimate": list(estimate) if statistic == "distribution" else [estimate], "trust": trust,
        "figures": {} if method.w_event_private else {"w_event_private": 0.0}})


class SlotReleases:
    """A stream's slots released in order, every one from the first to the last (module doc, **Release**): a slot
    with reports fresh (:func:`release_record`), one without skipped (:func:`skipped_record`).  Without a release
    range the series runs from the stream's first present slot (a user's record made it present) and a gap longer
    than the central path's ``max_empty_slots`` is cut short as there (``transforms.engine``); with one it is
    the range's slots."""

    MAX_EMPTY = ReleaseConfig.max_empty_slots

    def __init__(self, config: ClientStageConfig, method: UserMethod, variance: float):
        self.config, self.method, self.variance = config, method, variance
        self.range = config.release_range

    def in_range(self, sums: dict) -> dict:
        """``sums`` without the slots outside the release range (only empty ones, marking records dead-lettered
        there)."""
        if self.range is None:
            return sums
        return {slot: total for slot, total in sums.items() if self.range.first_slot <= slot <= self.range.last_slot}

    def first(self, slots, first_open: int = 0) -> int:
        """The stream's first slot to release (never one a resumed checkpoint closed)."""
        return max(self.range.first_slot if self.range is not None else min(slots), first_open)

    def release(self, stream: str, sums: dict, next_slot: int, estimate, last: int, crowd: dict | None = None
                ) -> tuple[list, int, float]:
        """Slots ``next_slot .. last`` of ``stream`` from ``sums`` (slot -> SlotSum, all in that span): the
        records, the next slot and the last estimate (with ``crowd``, slot -> bin counts: the crowd
        distribution's releases, the estimate a list of fractions)."""
        statistic = "mean" if crowd is None else "distribution"
        if any(slot < next_slot or slot > last for slot in sums):
            raise ValueError(f"stream {stream}: reports outside slots {next_slot}..{last} (already released)")
        records, slot = [], next_slot
        for upcoming in [*sorted(sums), last + 1]:
            empty_until = upcoming
            if self.range is None and upcoming - slot > self.MAX_EMPTY:
                _LOGGER.warning("stream %s: %d empty slots after slot %d are not released", stream,
                                upcoming - slot - self.MAX_EMPTY, slot - 1)
                empty_until = slot + self.MAX_EMPTY
            records += [skipped_record(stream, empty, estimate, self.config, self.method, statistic=statistic)
                        for empty in range(slot, empty_until)]
            if upcoming <= last:
                if sums[upcoming][0] and crowd is not None:
                    n, _, units = sums[upcoming]
                    records.append(crowd_record(stream, upcoming, n, units, crowd.get(upcoming, ()), self.config))
                    estimate = records[-1]["estimate"]
                elif sums[upcoming][0]:
                    records.append(release_record(((stream, upcoming), sums[upcoming]), self.config, self.method,
                                                  self.variance))
                    estimate = records[-1]["estimate"][0]
                else:
                    records.append(skipped_record(stream, upcoming, estimate, self.config, self.method,
                                                  statistic=statistic))
            slot = upcoming + 1
        return records, max(next_slot, last + 1), estimate

    def bounded(self, element, first_open: dict, estimates: dict) -> list:
        """Bounded input: ``(stream, all its (slot, SlotSum))``, released up to its last present slot (or the
        range's last); a resumed stream from its first open slot, repeating its carried last estimate."""
        stream, slot_sums = element
        sums = self.in_range(dict(slot_sums))
        start = self.first(sums, first_open.get(stream, 0))
        last = self.range.last_slot if self.range is not None else max(sums)
        return self.release(stream, sums, start, estimates.get(stream, (0, 0.0))[1], last)[0]

    def bounded_crowd(self, element, first_open: dict, estimates: dict) -> list:
        """:meth:`bounded` for the crowd distribution: ``(stream, {"sums": (slot, SlotSum)s, "crowd": (slot,
        counts)s})``; a resumed stream repeats its carried last distribution."""
        stream, joined = element
        sums = self.in_range(dict(joined["sums"]))
        start = self.first(sums, first_open.get(stream, 0))
        last = self.range.last_slot if self.range is not None else max(sums)
        estimate = estimates.get(stream, (0, [0.0] * self.config.crowd[1]))[1]
        return self.release(stream, sums, start, list(estimate), last, dict(joined["crowd"]))[0]


class ReleaseStreamSlots(beam.DoFn):
    """Streaming release stage, keyed by stream: the partial sums wait in ``pending`` until the watermark passes
    their slot's release time (1 ms after every user closed it: ``SlotClock.release_micros``), then every slot up
    to the latest due one is released (:class:`SlotReleases`).  With a release range a firing releases every slot
    of the range the watermark has passed (``ReleaseRange.last_due``), data or not, and a stream holding no
    report keeps the timer armed at the range's last slot, as the central release stage does
    (``transforms.release``): an empty slot goes out with the next firing after the watermark passed it.  (Not a
    timer per empty slot: a runner that does not hold the per-user stage's output watermark at its pending
    timers, as the direct runner, could fire it before that slot's reports arrive.)  A report for a slot already
    released (its user's event reached the per-user stage after the watermark had passed the slot: lateness is
    per user there) is counted (``reports_after_release``) and logged, not released: it was charged to its
    sender, which costs no privacy."""

    PENDING = BagStateSpec("pending", TupleCoder((VarIntCoder(), SlotSumCoder())))  # (slot, partial sum)
    CROWD = BagStateSpec("crowd", TupleCoder((VarIntCoder(), VarIntCoder(), VarIntCoder())))  # (slot, bin, users)
    NEXT_SLOT = ReadModifyWriteStateSpec("next_slot", VarIntCoder())
    ESTIMATE = ReadModifyWriteStateSpec("estimate", FloatCoder())
    DISTRIBUTION = ReadModifyWriteStateSpec("distribution", ValueCoder())  # the crowd's last estimate (a list)
    ARMED = ReadModifyWriteStateSpec("armed", VarIntCoder())  # the µs the ``release`` timer is set for
    RELEASE = TimerSpec("release", TimeDomain.WATERMARK)

    def __init__(self, releases: SlotReleases, first_open: dict | None = None, estimates: dict | None = None):
        self.releases, self.clock = releases, releases.config.clock
        self.first_open, self.estimates = dict(first_open or {}), dict(estimates or {})  # resumed streams
        self.after_release = Metrics.counter(NAMESPACE, "reports_after_release")

    def process(self, element, timestamp=beam.DoFn.TimestampParam, pending=beam.DoFn.StateParam(PENDING),
                crowd=beam.DoFn.StateParam(CROWD), armed=beam.DoFn.StateParam(ARMED),
                release=beam.DoFn.TimerParam(RELEASE)):
        _, (slot, total) = element
        if total.count < 0:  # a crowd bin's users (crowd_slot_sums), released with the slot's sums: alone it makes
            crowd.add((slot, -1 - total.count, total.total))  # no slot present
            return
        pending.add((slot, total))
        _arm(armed, release, max(self.clock.release_micros(slot), timestamp.micros))

    @on_timer(RELEASE)
    def on_release(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                   pending=beam.DoFn.StateParam(PENDING), crowd_state=beam.DoFn.StateParam(CROWD),
                   next_slot_state=beam.DoFn.StateParam(NEXT_SLOT), estimate_state=beam.DoFn.StateParam(ESTIMATE),
                   distribution_state=beam.DoFn.StateParam(DISTRIBUTION), armed=beam.DoFn.StateParam(ARMED),
                   release=beam.DoFn.TimerParam(RELEASE)):
        held = list(pending.read())
        pending.clear()
        armed.clear()
        crowd = self.releases.config.crowd
        if crowd is not None:
            estimate_state = distribution_state
            counted, crowd_due = list(crowd_state.read()), {}
            crowd_state.clear()
            for slot, index, users in counted:
                if self.clock.release_micros(slot) <= fired.micros:  # due: used if the slot has reports
                    crowd_due.setdefault(slot, [0] * crowd[1])[index] += users
                else:
                    crowd_state.add((slot, index, users))
        due: dict = {}
        later = []
        for slot, total in held:
            if self.clock.release_micros(slot) <= fired.micros:
                before = due.get(slot, (0, 0, 0))
                due[slot] = SlotSum(before[0] + total[0], before[1] + total[1], max(before[2], total[2]))
            else:
                later.append((slot, total))
        for item in later:
            pending.add(item)
        release_range, records = self.releases.range, []
        next_slot = next_slot_state.read()
        estimate = estimate_state.read()
        if next_slot is None and key in self.first_open:  # a resumed stream continues where its checkpoint ended
            next_slot, estimate = self.first_open[key], self.estimates.get(key, (0, None))[1]
        due = self.releases.in_range(due)
        stale = [slot for slot in due if next_slot is not None and slot < next_slot]
        made = sum(due.pop(slot)[0] for slot in stale)
        if made:  # a user's event came after the watermark had passed its slot: its report was made and charged
            self.after_release.inc(made)
            _LOGGER.warning("stream %s: %d reports for slots %s arrived after their release (charged, not "
                            "released)", key, made, stale)
        if next_slot is None and (due or release_range is not None):
            next_slot = self.releases.first(due)
        last = max(due, default=None) if release_range is None else \
            release_range.last_due(self.clock, fired.micros - 1000)
        if next_slot is not None and last is not None and last >= next_slot:
            if crowd is None:
                records, next_slot, estimate = self.releases.release(key, due, next_slot, estimate or 0.0, last)
            else:
                records, next_slot, estimate = self.releases.release(
                    key, due, next_slot, list(estimate or [0.0] * crowd[1]), last, crowd_due)
            next_slot_state.write(next_slot)
            estimate_state.write(estimate)
        if later:
            _arm(armed, release, self.clock.release_micros(min(slot for slot, _ in later)))
        elif release_range is not None and next_slot <= release_range.last_slot:
            # no report is held, but the range's remaining slots are released when they close, data or not
            at = min(self.clock.release_micros(release_range.last_slot), GlobalWindow().max_timestamp().micros)
            if at > fired.micros:  # (a range ending past Beam's last timestamp is not re-armed for ever)
                _arm(armed, release, at)
        return records


def crowd_slot_sums(element) -> list:
    """Streaming: a crowd entry ``((stream, slot), counts)`` as the release stage's input ``(stream, (slot,
    SlotSum(-1 - bin, users, 0)))``, one per non-empty bin (a negative count marks it: no slot has fewer than 0
    reports)."""
    (stream, slot), counts = element
    return [(stream, (slot, SlotSum(-1 - index, users, 0))) for index, users in enumerate(counts) if users]


def _arm(armed, release, at: int) -> None:
    """Set the ``release`` timer for ``at`` µs unless it is already set earlier."""
    pending = armed.read()
    if pending is None or at < pending:
        armed.write(at)
        release.set(Timestamp(micros=at))


class WriteClientCheckpoints(beam.DoFn):
    """Streaming ``--per-user-clients`` checkpoints: every user's :class:`Carried` state and each stream's last
    estimate, as the batch replay writes them (:func:`clients_checkpoint`), after every ``every``-th slot and at
    the end of the input.  One key (``CLIENTS_STREAM``) gathers the users' states (sent by each firing of the
    per-user stage, stamped with the slot's close) and the releases' estimates (stamped with their release); a
    checkpoint after slot S takes what is stamped up to S's release time (``SlotClock.release_micros``) once the
    watermark has passed it, so it is one consistent cut (every report it charged is released in it) on a runner
    that holds the per-user stage's output watermark at its pending timers (Dataflow, Flink); the direct runner
    may fire a cut before the rest of its slots arrive, and then writes the same file again with them.  Each user's
    next slot is at least its stream's next unreleased slot (so that neither a streaming nor a batch resume
    releases a slot twice).  Outputs ``CheckpointSaved`` for ``transforms.sinks.WriteCheckpoints``."""

    HELD = BagStateSpec("held", TupleCoder((VarIntCoder(), BytesCoder())))  # (µs stamped, encoded state)
    SNAPSHOT = ReadModifyWriteStateSpec("snapshot", ValueCoder())  # (user rows, estimate rows) of the last cut
    ARMED = ReadModifyWriteStateSpec("armed", VarIntCoder())
    CUT = TimerSpec("cut", TimeDomain.WATERMARK)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, config: ClientStageConfig, every: int, before: dict | None = None):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint_every must be an integer >= 1, got {every!r}")
        self.config, self.every, self.clock = config, every, config.clock
        self.before = CarriedClients(before or {}, getattr(before, "estimates", {}))

    def cut_slot(self, stamped: int) -> int:
        """The first slot S released at or after ``stamped`` µs with S + 1 a multiple of ``every``: the checkpoint
        that takes what is stamped so."""
        slot = self.clock.slot_of(stamped / 1e6 - self.clock.allowed_lateness - self.clock.slot_seconds) - 1
        while self.clock.release_micros(slot) < stamped:
            slot += 1
        return slot + -(slot + 1) % self.every

    def process(self, element, timestamp=beam.DoFn.TimestampParam, held=beam.DoFn.StateParam(HELD),
                armed=beam.DoFn.StateParam(ARMED), cut=beam.DoFn.TimerParam(CUT), end=beam.DoFn.TimerParam(END)):
        held.add((timestamp.micros, element[1]))
        _arm(armed, cut, self.clock.release_micros(self.cut_slot(timestamp.micros)) + 1)
        end.set(GlobalWindow().max_timestamp())

    @on_timer(CUT)
    def on_cut(self, fired=beam.DoFn.TimestampParam, held=beam.DoFn.StateParam(HELD),
               snapshot=beam.DoFn.StateParam(SNAPSHOT), armed=beam.DoFn.StateParam(ARMED),
               cut=beam.DoFn.TimerParam(CUT)):
        items = list(held.read())
        held.clear()
        armed.clear()
        later = [item for item in items if item[0] >= fired.micros]
        for item in later:
            held.add(item)
        if later:
            _arm(armed, cut, self.clock.release_micros(self.cut_slot(min(at for at, _ in later))) + 1)
        now = [item for item in items if item[0] < fired.micros]
        return self._cut(snapshot, now, self.cut_slot(fired.micros - 1) + 1) if now else []

    @on_timer(END)
    def on_end(self, held=beam.DoFn.StateParam(HELD), snapshot=beam.DoFn.StateParam(SNAPSHOT)):
        items = list(held.read())
        held.clear()
        return self._cut(snapshot, items, None) if items else []

    def _cut(self, snapshot, items: list, name_slot: int | None) -> list:
        """Fold ``items`` into the last cut's state and encode it (named after ``name_slot``, the slot after the
        cut; None at the end: the largest next slot, as the batch replay names its file).  The fold does not
        depend on the order the items came in: a user's state with the larger next slot, a stream's latest
        estimate."""
        saved = snapshot.read()
        if saved is None:
            users, estimates = dict(self.before), dict(self.before.estimates)
        else:
            users = {(stream, user): Carried(row, *rest) for stream, user, row, *rest in saved[0]}
            estimates = {stream: (slot, estimate) for stream, slot, estimate in saved[1]}
        for _, payload in items:
            kind, stream, *state = decode_value(payload)
            if kind == USER_STATE:
                user, row, next_slot, declared, tail, recent = state
                if (stream, user) not in users or next_slot >= users[(stream, user)].next_slot:
                    users[(stream, user)] = Carried(row, next_slot, declared, tail, tuple(recent))
            else:
                estimates[stream] = max(estimates.get(stream, (-1, 0.0)), tuple(state))
        users = {key: c._replace(next_slot=max(c.next_slot, estimates.get(key[0], (-1,))[0] + 1))
                 for key, c in users.items()}
        snapshot.write(([(*key, None if c.row is None else tuple(c.row), *c[1:]) for key, c in users.items()],
                        [(stream, *at) for stream, at in estimates.items()]))
        next_slot, saved_checkpoint = clients_checkpoint(users, self.config, estimates)
        return [CheckpointSaved(CLIENTS_STREAM, next_slot if name_slot is None else name_slot,
                                checkpoint.encode(saved_checkpoint))]


def _sma_reach(size: int, mode: str) -> tuple[int, int]:
    """How many released values before and after a release its SMA window takes (``server.sma``'s)."""
    server.sma([0.0], size, mode)  # refuses a bad size or mode
    return ((size - 1) // 2, (size - 1) // 2) if mode == "centered" else (size - 1, 0)


def _with_sma(record: dict, values: list, position: int, before: int, after: int, last: int) -> ReleaseRecord:
    """``record`` with ``figures["sma"]``: the mean of ``values[position - before .. position + after]`` clipped to
    ``[0, last]`` (the windows shrink at the ends, as ``server.sma``), summed with ``math.fsum`` so that the bounded
    and the streaming SMA give the same bits."""
    window = values[max(position - before, 0):min(position + after, last) + 1]
    return ReleaseRecord({**record, "figures": {**record["figures"], "sma": math.fsum(window) / len(window)}})


def smoothed(element, size: int, mode: str) -> list:
    """A stream's releases in slot order, each with ``figures["sma"]``: the SMA (spec §3.5, ``server.sma``) of
    the released estimates over the released slots (post-processing: it costs nothing)."""
    _, records = element
    ordered = sorted(records, key=lambda r: r["slot"])
    values = [r["estimate"][0] for r in ordered]
    before, after = _sma_reach(size, mode)
    return [_with_sma(r, values, p, before, after, len(values) - 1) for p, r in enumerate(ordered)]


class SmoothStreamReleases(beam.DoFn):
    """Streaming SMA (spec §3.5) of each stream's released series, keyed by stream: releases wait in ``pending``
    until the watermark passes their time, then join the series in slot order; a release leaves with its
    ``figures["sma"]`` once the ``after`` releases its window takes have arrived (trailing: at once), and the end
    of the stream (the watermark at infinity) lets the last ones go with windows shrinking at the end.  ``series``
    keeps ``(count so far, the values a waiting or later window still reads, the waiting releases)``."""

    PENDING = BagStateSpec("pending", ValueCoder())  # (time in µs, slot, release record as Avro bytes)
    SERIES = ReadModifyWriteStateSpec("series", ValueCoder())
    ARMED = ReadModifyWriteStateSpec("armed", VarIntCoder())  # the µs the ``due`` timer is set for
    DUE = TimerSpec("due", TimeDomain.WATERMARK)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, size: int, mode: str):
        self.before, self.after = _sma_reach(size, mode)

    def setup(self):
        self.coder = ReleaseRecordCoder()

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                pending=beam.DoFn.StateParam(PENDING), armed=beam.DoFn.StateParam(ARMED),
                due=beam.DoFn.TimerParam(DUE), end=beam.DoFn.TimerParam(END)):
        _, record = element
        pending.add((timestamp.micros, record["slot"], self.coder.encode(record)))
        at = armed.read()
        if at is None or timestamp.micros < at:
            armed.write(timestamp.micros)
            due.set(timestamp)
        end.set(GlobalWindow().max_timestamp())

    @on_timer(DUE)
    def on_due(self, fired=beam.DoFn.TimestampParam, pending=beam.DoFn.StateParam(PENDING),
               series=beam.DoFn.StateParam(SERIES), armed=beam.DoFn.StateParam(ARMED), due=beam.DoFn.TimerParam(DUE)):
        held = list(pending.read())
        pending.clear()
        ready = sorted((item for item in held if item[0] <= fired.micros), key=lambda item: item[1])
        later = [item for item in held if item[0] > fired.micros]
        for item in later:
            pending.add(item)
        armed.clear()
        if later:
            at = min(item[0] for item in later)
            armed.write(at)
            due.set(Timestamp(micros=at))
        return self._extend(series, [self.coder.decode(item[2]) for item in ready], final=False)

    @on_timer(END)
    def on_end(self, pending=beam.DoFn.StateParam(PENDING), series=beam.DoFn.StateParam(SERIES)):
        held = sorted(pending.read(), key=lambda item: item[1])
        pending.clear()
        return self._extend(series, [self.coder.decode(item[2]) for item in held], final=True)

    def _extend(self, series, records: list, final: bool) -> list:
        count, values, waiting = series.read() or (0, [], [])
        first = count - len(values)  # the series index of values[0]
        waiting = [self.coder.decode(item) for item in waiting]
        for record in records:
            values.append(record["estimate"][0])
            waiting.append(record)
            count += 1
        out = []
        while waiting:
            position = count - len(waiting)
            if position + self.after > count - 1 and not final:
                break
            out.append(_with_sma(waiting.pop(0), values, position - first, self.before, self.after,
                                 count - 1 - first))
        keep_from = max(count - len(waiting) - self.before, first)  # the oldest value a later window reads
        values = values[keep_from - first:]
        series.write((count, values, [self.coder.encode(r) for r in waiting]))
        return out


class SmoothReleases(beam.PTransform):
    """``figures["sma"]`` on every release of a stream's series (spec §3.5): bounded input groups each stream's
    releases (:func:`smoothed`); unbounded input smooths as the releases come (:class:`SmoothStreamReleases`).  The
    same arithmetic in both, so they give the same bits.  Post-processing of releases: no budget."""

    def __init__(self, size: int, mode: str = "centered", bounded: bool | None = None):
        super().__init__()
        _sma_reach(size, mode)
        self.size, self.mode, self.bounded = size, mode, bounded

    def expand(self, releases):
        bounded = self.bounded
        if bounded is None:
            bounded = not releases.pipeline.options.view_as(StandardOptions).streaming
        keyed = releases | "ByStream" >> beam.Map(lambda r: (r["stream"], r)).with_output_types(
            typing.Tuple[str, ReleaseRecord])
        if bounded:
            return (keyed | "Series" >> beam.GroupByKey()
                    | "Smoothed" >> beam.FlatMap(smoothed, self.size, self.mode).with_output_types(ReleaseRecord))
        return keyed | "Smoothed" >> beam.ParDo(SmoothStreamReleases(self.size, self.mode)).with_output_types(
            ReleaseRecord)


class PrivateNumericClients(beam.PTransform):
    """Per-slot private means of numeric events, each user's client in the per-user stage (module doc)."""

    def __init__(self, mechanism: str, slot_seconds: float, domain: NumericDomain, *,
                 mechanism_params: dict | None = None, origin: float = 0.0, allowed_lateness: float = 0.0,
                 policy: RequirementPolicy | None = None, insecure_seed: int | None = None,
                 ledger_detail: bool = False, ledger_max_window: int = 1000, bounded: bool | None = None,
                 sma: int | None = None, sma_mode: str = "centered", resume: dict | None = None,
                 resume_from: str | None = None, carry: bool = False, accounting: str = "strict",
                 not_w_event_private: bool = False, release_range: tuple[float, float] | None = None,
                 checkpoint_every: int | None = None):
        super().__init__()
        if sma is not None:
            _sma_reach(sma, sma_mode)  # refuses a bad size or mode now
        self.sma = (sma, sma_mode) if sma is not None else None
        if not isinstance(policy, RequirementPolicy):
            raise ValueError("PrivateNumericClients needs policy=RequirementPolicy(...) (RequirementPolicy() when "
                             "every event declares its own)")
        clock = SlotClock(slot_seconds, origin, allowed_lateness)
        self.config = ClientStageConfig(mechanism.lower(), domain, dict(mechanism_params or {}), clock, policy,
                                        insecure_seed, accounting, not_w_event_private,
                                        None if release_range is None else ReleaseRange.of(clock, *release_range))
        if self.config.crowd is not None and sma is not None:
            raise ValueError("sma: the crowd distribution is a list of fractions per slot; its SMA is not defined")
        mechanism_built = self.config.build()
        self.method = self.config.method()
        self.variance = self.method.variance()
        self.ledger_max_window = max(ledger_max_window, mechanism_built.params.window)
        self.ledger_detail, self.bounded = ledger_detail, bounded
        if carry and bounded is not True:
            raise ValueError("carry is for bounded input (streaming: checkpoint_every)")
        if checkpoint_every is not None and bounded is not False:
            raise ValueError("checkpoint_every is for unbounded input (bounded: carry)")
        if resume_from is not None:
            resume = read_clients_checkpoint(resume_from, self.config)
        self.resume, self.carry = resume, carry  # resume: (stream, user) -> Carried, from a checkpoint
        self.checkpoint_every = checkpoint_every
        self.writer = None if checkpoint_every is None else WriteClientCheckpoints(self.config, checkpoint_every,
                                                                                   resume)

    def expand(self, events):
        bounded = self.bounded
        if bounded is None:
            bounded = not events.pipeline.options.view_as(StandardOptions).streaming
        clock = self.config.clock
        types = dict(OUTPUT_TYPES)
        tags = (CHARGES, DEAD_LETTERS, LATE, ACCOUNTING)
        carried = None
        first_open = resumed_first_open(self.resume or {})
        estimates = getattr(self.resume, "estimates", {})
        if bounded:
            side = {}
            if self.resume is not None:
                carried = beam.pvalue.AsDict(events.pipeline | "Carried" >> beam.Create(sorted(self.resume.items()))
                                             .with_output_types(typing.Tuple[typing.Tuple[str, str], typing.Any]))
                side["carried"] = carried
            if (self.method.sampled or self.config.crowd) and self.config.release_range is None:  # a segment
                # reports once its last slot is within its stream's slots (with a range: within the range); a crowd
                # entry up to the stream's last slot
                side["horizons"] = beam.pvalue.AsDict(
                    events
                    | "StreamSlots" >> beam.Map(lambda e, slot_of: (e.stream, slot_of(e.time)), clock.slot_of)
                    .with_output_types(typing.Tuple[str, int])
                    | "LastSlots" >> beam.CombinePerKey(max))
            stage = beam.ParDo(CloseUserClients(self.config, self.carry, self.ledger_max_window, first_open), **side)
            if self.config.crowd:
                types[CROWD], tags = Crowd, tags + (CROWD,)
            if self.carry:
                types[CARRY], tags = typing.Any, tags + (CARRY,)
        else:
            events = events | "AtEventTime" >> beam.Map(lambda e: TimestampedValue(e, e.time)).with_output_types(Event)
            stage = beam.ParDo(state_fn(self.config, carry=self.checkpoint_every is not None,
                                        max_window=self.ledger_max_window, resume=self.resume, first_open=first_open))
            if self.config.crowd:
                types[CROWD], tags = Crowd, tags + (CROWD,)
            if self.checkpoint_every is not None:
                types[CARRY], tags = typing.Tuple[str, bytes], tags + (CARRY,)
        grouped = events | "GroupUserEvents" >> GroupUserEvents(bounded)
        if self.resume and not bounded:  # each carried user's cells restored before its slots close
            grouped = ((grouped, events.pipeline | "RestoreUsers" >> beam.Create(
                [((stream, user), Event(stream, user, 0.0, RESUMED, None, "")) for stream, user in sorted(self.resume)])
                .with_output_types(typing.Tuple[typing.Tuple[str, str], Event])) | "WithRestored" >> beam.Flatten())
        open_segments = sorted(key for key, before in (self.resume or {}).items()
                               if bounded and ((self.method.sampled and before.row is not None and before.row.count)
                                               or before.recent))  # (a crowd's recent reports: their users' bins)
        if open_segments:  # a carried open segment reports once its last slot closes, new events or not
            grouped = ((grouped, events.pipeline | "OpenSegments" >> beam.Create([(key, []) for key in open_segments]))
                       | "WithOpenSegments" >> beam.Flatten()
                       | "RegroupUsers" >> beam.GroupByKey()
                       | "Joined" >> beam.MapTuple(lambda key, parts: (key, [held for part in parts for held in part])))
        closed = (grouped
                  | "UserClients" >> stage.with_output_types(types.pop("reports"), **types)
                  .with_outputs(*tags, main="reports"))
        releaser = SlotReleases(self.config, self.method, self.variance)
        reports = closed.reports
        if bounded:
            reports = reports | "SlotSums" >> beam.CombinePerKey(SlotSums()).with_output_types(Summed)
        by_stream = reports | "ByStream" >> beam.MapTuple(lambda key, total: (key[0], (key[1], total))) \
            .with_output_types(typing.Tuple[str, typing.Tuple[int, SlotSum]])
        if bounded and self.config.crowd:  # each stream's slot sums and crowd counts together
            crowd = (closed[CROWD] | "CrowdCounts" >> beam.CombinePerKey(
                lambda counts: tuple(map(sum, zip(*counts)))).with_output_types(Crowd)
                | "CrowdByStream" >> beam.MapTuple(lambda key, counts: (key[0], (key[1], counts))))
            releases = ({"sums": by_stream, "crowd": crowd} | "SlotsOfStream" >> beam.CoGroupByKey()
                        | "Release" >> beam.FlatMap(releaser.bounded_crowd, first_open, estimates)
                        .with_output_types(ReleaseRecord))
        elif bounded:
            releases = (by_stream | "SlotsOfStream" >> beam.GroupByKey()
                        | "Release" >> beam.FlatMap(releaser.bounded, first_open, estimates)
                        .with_output_types(ReleaseRecord))
        else:
            if self.config.crowd:  # each bin's users as a marked partial sum beside the slots' (crowd_slot_sums)
                by_stream = (by_stream, closed[CROWD] | "CrowdSums" >> beam.FlatMap(crowd_slot_sums).with_output_types(
                    typing.Tuple[str, typing.Tuple[int, SlotSum]])) | "WithCrowd" >> beam.Flatten()
            releases = by_stream | "Release" >> beam.ParDo(ReleaseStreamSlots(releaser, first_open, estimates)) \
                .with_output_types(ReleaseRecord)
        checkpoints = None
        if self.checkpoint_every is not None:
            crowd = self.config.crowd is not None
            stamped = releases | "StampedEstimates" >> beam.Map(lambda r: (CLIENTS_STREAM, encode_value(
                (STREAM_ESTIMATE, r["stream"], r["slot"], r["estimate"] if crowd else r["estimate"][0])))) \
                .with_output_types(typing.Tuple[str, bytes])
            checkpoints = ((closed[CARRY], stamped) | "CheckpointInput" >> beam.Flatten()
                           | "Checkpoints" >> beam.ParDo(self.writer).with_output_types(CheckpointSaved))
        if self.sma is not None:
            releases = releases | "SMA" >> SmoothReleases(*self.sma, bounded=bounded)
        if bounded:
            ledger_fn = (CompleteChunkLedgerFn if carried is None else ResumedLedgerFn)(self.ledger_max_window,
                                                                                       self.ledger_detail)
        elif self.resume:
            ledger_fn = ResumedStreamLedgerFn(self.ledger_max_window, self.ledger_detail, {
                f"{stream}{KEY_SEPARATOR}{user}": before.tail for (stream, user), before in self.resume.items()})
        else:
            ledger_fn = UserLedgerFn(self.ledger_max_window, self.ledger_detail)
        ledger = (closed[CHARGES]
                  | "PrivacyLedger" >> beam.ParDo(ledger_fn, **({} if carried is None else {"carried": carried}))
                  .with_outputs(VIOLATIONS, ENTRIES, main="usage"))
        dead_letters = (closed[LATE], closed[DEAD_LETTERS]) | "DeadLetters" >> beam.Flatten()
        accounting = closed[ACCOUNTING]
        outputs = {"releases": releases, "dead_letters": dead_letters, "usage": ledger.usage,
                   "violations": ledger[VIOLATIONS], "ledger_entries": ledger[ENTRIES], "accounting": accounting}
        if self.carry:
            outputs["carry"] = closed[CARRY]
            crowd = self.config.crowd is not None
            outputs["estimates"] = (releases | "StreamEstimates" >> beam.Map(
                lambda r: (r["stream"], (r["slot"], r["estimate"] if crowd else r["estimate"][0])))
                | "LastEstimates" >> beam.CombinePerKey(max))
        if checkpoints is not None:
            outputs["checkpoints"] = checkpoints
        if bounded:
            outputs["accounting_totals"] = accounting | "AccountingTotals" >> beam.CombineGlobally(
                AccountingTotals()).with_output_types(typing.Dict[str, int])
        return outputs
