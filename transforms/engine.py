"""The stream engine: one stream's records released slot by slot, outside Beam.

It turns what the per-user stage sends (``Contribution`` rows with user ids,
declarations and the input records they use) into the mechanism's
:class:`~transforms.mechanisms.SlotBatch` of each slot, steps the mechanism
through the core :class:`~transforms.mechanisms.engine.Engine` and says what
became of every record.  Its outputs are typed (:class:`Released`,
:class:`RecordsUsed`, :class:`DeadLetter`, :class:`LateRecord`,
:class:`Duplicates`, :class:`EvaluationRow`, :class:`CheckpointSaved`,
:class:`ChargeChunk`) and reach their destination through one routing: each
output calls its own method of a :class:`StreamOutputs`, which the Beam
release stage (``transforms.release``) and the watch loop (``pipelines.live``)
implement.

Releasing slot by slot in one place is what the feedback loop of the
mechanisms needs (DESIGN §3): at slot t every user's budget depends on which
earlier slots were published, and the decision depends on all users' data at
t.  The engine also keeps, apart from the mechanism, what every user declared
(``DeclaredRequirements``): the per-user ledger checks charges against that,
never against the mechanism's own view.
"""

from __future__ import annotations

import abc
import logging
import time
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from transforms.checkpoint import Checkpoint, StreamState, dump_randomness, encode, load_for_resume, load_randomness
from transforms.declarations import DeclarationTranslator, RequirementPolicy
from transforms.mechanisms import Mechanism, SlotBatch, make_mechanism, mechanism_class
from transforms.mechanisms.declared import DeclaredRequirements, kind_name
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.charges import least_charges_of_registered
from transforms.mechanisms.public_schedule import packed_least, registered_verdict
from transforms.mechanisms.public_schedule.registry import has_schedule, schedule_for
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.numeric.streams import NumericStream
from transforms.records import KEY_SEPARATOR, NO_VALUE, Contribution, ReleaseRecord, dead_letter
from transforms.release_range import ReleaseRange
from transforms.slot_columns import SlotColumns
from transforms.slotting import SlotClock

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReleaseConfig:
    """Everything the release stage needs; validated (and the mechanism built once) at construction."""

    mechanism: str
    params: dict
    clock: SlotClock
    policy: RequirementPolicy = field(default_factory=RequirementPolicy)
    insecure_seed: int | None = None  # reproducible, NOT private noise: tests and replays only
    ledger_flush_slots: int = 100
    evaluate: bool = False  # also emit (slot, released, TRUE histogram): NOT private, for measuring utility
    max_empty_slots: int = 10_000  # longest run of empty slots released one by one (see release_until)
    resume_from: str | None = None  # checkpoint file, or directory of them, that the streams continue from
    checkpoint_every: int | None = None  # emit each stream's state every this many slots and after each firing
    release_range: ReleaseRange | None = None  # the public slots to release; None: the data's (see release_until)

    def __post_init__(self):
        mechanism_class(self.mechanism)
        self.build()  # fails now, with the parameter named, rather than inside the pipeline
        if self.insecure_seed is not None and (not isinstance(self.insecure_seed, int) or self.insecure_seed < 0):
            raise ValueError(f"insecure_seed must be a non-negative integer, got {self.insecure_seed!r}")
        if not isinstance(self.max_empty_slots, int) or self.max_empty_slots < 0:
            raise ValueError(f"max_empty_slots must be an integer >= 0, got {self.max_empty_slots!r}")
        if not isinstance(self.ledger_flush_slots, int) or self.ledger_flush_slots < 1:
            raise ValueError(f"ledger_flush_slots must be an integer >= 1, got {self.ledger_flush_slots!r}")
        if self.checkpoint_every is not None and (isinstance(self.checkpoint_every, bool) or not isinstance(
                self.checkpoint_every, int) or self.checkpoint_every < 1):
            raise ValueError(f"checkpoint_every must be an integer >= 1, got {self.checkpoint_every!r}")
        if self.release_range is not None and not isinstance(self.release_range, ReleaseRange):
            raise ValueError(f"release_range must be a ReleaseRange, got {self.release_range!r}")
        if self.resume_from is not None:
            self.resume_state()  # a missing, damaged or mismatched checkpoint fails now

    def build(self) -> Mechanism:
        return make_mechanism(self.mechanism, **self.params)

    def new_checkpoint(self, streams: dict, **live) -> Checkpoint:
        """A checkpoint of ``streams`` (stream -> StreamState) stamped with this configuration."""
        return Checkpoint(self.mechanism, self.build().params.to_json(), self.clock.slot_seconds, self.clock.origin,
                          self.insecure_seed, streams, **live)

    def check_checkpoint(self, checkpoint: Checkpoint, source: str) -> None:
        """Raise a one-line CheckpointError unless ``checkpoint`` was written for this configuration."""
        checkpoint.check(self.mechanism, self.build().params, self.clock.slot_seconds, self.clock.origin,
                         self.insecure_seed, source)

    def resume_state(self) -> dict:
        """stream -> StreamState saved in ``resume_from`` (checked against this configuration)."""
        if self.resume_from is None:
            return {}
        checkpoint = load_for_resume(self.resume_from)
        self.check_checkpoint(checkpoint, self.resume_from)
        return checkpoint.streams




# ---------------------------------------------------------------------------------------------- outputs
class StreamOutputs(abc.ABC):
    """Where a stream engine's outputs go: one method per output type (see :meth:`StreamOutput.deliver`)."""

    @abc.abstractmethod
    def released(self, output: "Released") -> None: ...

    @abc.abstractmethod
    def records_used(self, output: "RecordsUsed") -> None: ...

    @abc.abstractmethod
    def dead_letter(self, output: "DeadLetter") -> None: ...

    @abc.abstractmethod
    def late(self, output: "LateRecord") -> None: ...

    @abc.abstractmethod
    def duplicates(self, output: "Duplicates") -> None: ...

    @abc.abstractmethod
    def evaluation(self, output: "EvaluationRow") -> None: ...

    @abc.abstractmethod
    def checkpoint(self, output: "CheckpointSaved") -> None: ...

    @abc.abstractmethod
    def charges(self, output: "ChargeChunk") -> None: ...


class Released(NamedTuple):
    """A slot's release record (``schemas/release.avsc``)."""

    record: dict

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.released(self)


class RecordsUsed(NamedTuple):
    """How many input records a released slot used."""

    records: int

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.records_used(self)


class DeadLetter(NamedTuple):
    """One input record that was not used, with the reason (``schemas/dead_letter.avsc``)."""

    letter: dict

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.dead_letter(self)


class LateRecord(NamedTuple):
    """One input record for a slot already released: a dead letter counted as late."""

    letter: dict

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.late(self)


class Duplicates(NamedTuple):
    """Input records of a user's second contribution to a slot: counted, not used."""

    records: int

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.duplicates(self)


def evaluation_row(mechanism, release, stream: str, slot: int) -> "EvaluationRow":
    """The release beside the truth the mechanism kept of its slot (NOT private): the counts, or for a numeric
    stream the estimate and its predicted error beside the true mean of the slot's holders."""
    if isinstance(mechanism, NumericStream):
        return EvaluationRow(stream, slot, [float(release.estimate[0]), float(release.predicted_error)],
                             [float(mechanism.exact_mean_for_evaluation())])
    return EvaluationRow(stream, slot, [int(x) for x in release.histogram],
                         [int(x) for x in mechanism.exact_histogram_for_evaluation()])


class EvaluationRow(NamedTuple):
    """A slot's release beside its TRUE histogram: NOT private (``--evaluate`` only).  A numeric stream's row
    holds ``[estimate, predicted_error]`` and ``[true mean]`` (floats, domain units; NaN where none is defined)."""

    stream: str
    slot: int
    released: list
    truth: list

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.evaluation(self)


class CheckpointSaved(NamedTuple):
    """The stream's state after ``next_slot - 1``, encoded as a checkpoint file's bytes, and the releases made
    since the previous one: a writer that can publish them (one file per slot) does so before it saves
    ``payload``; a bounded run's ``payload`` carries them itself (its sinks publish only at the end)."""

    stream: str
    next_slot: int
    payload: bytes
    releases: tuple = ()

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.checkpoint(self)


class ChargeChunk(NamedTuple):
    """One user's charges over some slots for the per-user ledger: rows in ``transforms.ledger.charge_chunk``'s
    columns (one per named part of the charges), under requirements of ``kind`` ("fixed", "dynamic" or
    "lifetime"); ``final`` at the end of a bounded run, ``complete`` when the chunk holds the user's whole
    stream."""

    key: str
    table: np.ndarray
    kind: str
    parts: tuple[str, ...]
    final: bool
    complete: bool

    def ledger_input(self) -> tuple:
        """What ``transforms.ledger.charge_chunk`` takes (the per-user ledger's element, after the key)."""
        return self.table, self.kind, self.parts, self.final, self.complete

    def deliver(self, outputs: StreamOutputs) -> None:
        outputs.charges(self)


StreamOutput = Released | RecordsUsed | DeadLetter | LateRecord | Duplicates | EvaluationRow | CheckpointSaved | \
    ChargeChunk


# ---------------------------------------------------------------------------------------------- the engine
class StreamEngine:
    """One stream's mechanism, its user index and declarations, released slot by slot (outside Beam)."""

    def __init__(self, config: ReleaseConfig, stream: str, mechanism: Mechanism, user_ids: list,
                 next_slot: int | None, randomness, declared: dict | None = None,
                 requirements: DeclaredRequirements | None = None):
        self.config, self.stream = config, stream
        self.requirements = requirements or DeclaredRequirements(mechanism.requirement_kind)
        self._last_in_force: tuple = (-1, None, None)
        self.user_ids = user_ids
        self.index = {user: i for i, user in enumerate(user_ids)}
        self.declarations: list = []  # one object per distinct declaration (state encodes each once) ...
        self._declaration_ids: dict = {}  # ... and its position there
        self.declared = {user: self.declarations[self.declaration_id(d)] for user, d in (declared or {}).items()}
        self._saved_at = next_slot  # next_slot of the last checkpoint emitted (or loaded)
        self.released = 0
        self.records_used = 0
        self.started = time.monotonic()
        self.next_slot = next_slot
        self.engine = Engine(mechanism, randomness)  # the ledger is per user, downstream (ChargeChunk)
        # local and DPI methods: least charges from the public schedule (its memory restarts with the job)
        self.schedule = schedule_for(config.mechanism, mechanism.params) if has_schedule(config.mechanism) else None
        self.translator = DeclarationTranslator(mechanism, config.policy)
        if requirements is None and user_ids:  # a checkpoint written before the stage kept its own register
            self._rebuild_requirements(next_slot or 1)
        self.pending_charges: list = []
        self.charge_parts: tuple[str, ...] | None = None  # the named parts of the pending charges' columns
        self.first_flush = next_slot is None  # a bounded run flushes everything at once
        self._firing: _Firing | None = None  # while release_until runs: its rows and lookups
        self.carry = False  # checkpoints carry the releases and charges not yet known to be in the output (load)
        self.unpublished: list = []  # releases since the last checkpoint (carry: since the job started), carried too

    @property
    def mechanism(self) -> Mechanism:
        return self.engine.mechanism

    @property
    def randomness(self):
        return self.engine.randomness

    @classmethod
    def load(cls, config: ReleaseConfig, stream: str, state: StreamState | None,
             carry: bool = False) -> "StreamEngine":
        """A fresh run, or one continuing ``state`` (from the stage's state cells or a checkpoint).

        ``carry``: its checkpoints carry the releases (and charges) made since the job started, for a writer that
        cannot publish them first (a batch sink publishes only when the pipeline ends); otherwise each
        ``CheckpointSaved`` hands the releases since the previous one to the writer, to publish before it."""
        if state is None:
            run = cls(config, stream, config.build(), [], None,
                      secure_randomness() if config.insecure_seed is None
                      else insecure_seeded_randomness(config.insecure_seed))
            run.carry = carry
            return run
        mechanism = mechanism_class(config.mechanism).from_bytes(config.build().params, state.mechanism)
        if config.insecure_seed is None:
            randomness = secure_randomness()  # whatever was saved: a resumed job draws secure noise
        elif state.randomness:
            randomness = load_randomness(state.randomness)
        else:
            randomness = insecure_seeded_randomness(config.insecure_seed)
        requirements = None if state.requirements is None else DeclaredRequirements.from_bytes(state.requirements)
        run = cls(config, stream, mechanism, list(state.user_ids), state.next_slot, randomness, state.declared,
                  requirements)
        # what the old job released but no output is known to hold: the next checkpoint carries (or writes) it again
        run.unpublished = list(state.unpublished)
        run.pending_charges = list(state.pending_charges)
        run.charge_parts = state.charge_parts
        run.carry = carry
        return run

    def state(self) -> StreamState:
        """Everything needed to continue this stream exactly (the seeded generator only with an insecure seed)."""
        if self._firing is not None:
            self._firing.save_declared()
        carried = (list(self.unpublished), list(self.pending_charges), self.charge_parts) if self.carry else ()
        return StreamState(self.mechanism.to_bytes(), list(self.user_ids), dict(self.declared), self.next_slot,
                           None if self.config.insecure_seed is None else dump_randomness(self.randomness),
                           self.requirements.to_bytes(), *carried)

    def _rebuild_requirements(self, slot: int) -> None:
        """Every known user's last declaration (or the default) in force, as an older checkpoint allows."""
        rows = [self.translator.row(self.declared.get(user))[0] for user in self.user_ids]
        known = [i for i, row in enumerate(rows) if row is not None]
        if known:
            self.requirements.declare(slot, np.array(known), self.translator.columns([rows[i] for i in known]), None)

    def declaration_id(self, declaration: tuple) -> int:
        """The position of ``declaration`` in ``declarations`` (appended when new)."""
        found = self._declaration_ids.setdefault(declaration, len(self.declarations))
        if found == len(self.declarations):
            self.declarations.append(declaration)
        return found

    def _checkpoint(self):
        """The state after ``next_slot - 1`` with the releases since the last checkpoint (see ``carry``)."""
        self._saved_at = self.next_slot
        payload = encode(self.config.new_checkpoint({self.stream: self.state()}))
        if self.carry:  # the payload holds them
            yield CheckpointSaved(self.stream, self.next_slot, payload)
            return
        releases, self.unpublished = tuple(self.unpublished), []  # the writer publishes them before the payload
        yield CheckpointSaved(self.stream, self.next_slot, payload, releases)

    def release_until(self, last_slot: int, contributions: list, final: bool):
        """Release every slot from ``next_slot`` to ``last_slot``; yields tagged outputs.

        ``contributions`` are ``Contribution`` tuples of slots up to ``last_slot``.  With the config's
        ``release_range`` the stream starts at the range's first slot, every slot of the range up to
        ``last_slot`` is released (empty ones as the mechanism's cheap skips) and contributions outside
        the range are dead letters.  Without one, the stream starts at its first slot with data and
        empty slots are released at most ``max_empty_slots`` in a row: a longer gap (a far-off
        timestamp, a stream that paused) resumes at the next slot with data.  Releasing fewer slots
        never costs privacy (any w consecutive slots then hold at most w mechanism steps), but which
        slots are released then depends on the data.
        """
        release_range = self.config.release_range
        if release_range is not None:
            contributions = yield from self._outside_range(release_range, contributions)
            last_slot = min(last_slot, release_range.last_slot)
            if self.next_slot is None or self.next_slot < release_range.first_slot:
                self.next_slot = release_range.first_slot  # a resumed stream never goes back
        columns = SlotColumns.of(contributions)
        if self.next_slot is None:
            self.next_slot = int(columns.slots[0])
        if columns.slots.size and columns.slots[0] < self.next_slot:  # already released: late
            for c in map(Contribution._make, sorted((c for c in contributions if c[0] < self.next_slot), key=_SLOT)):
                for raw in c.raws:
                    yield LateRecord(dead_letter(f"late: slot {c.slot} already released", raw, "release",
                                                 self.stream, c.user))
            columns = columns.since(self.next_slot)
        if columns.duplicates():
            yield Duplicates(columns.duplicates())
        self._firing = _Firing(self, columns)
        slot = self.next_slot
        for upcoming, start, end in [*columns.slot_rows(), (last_slot + 1, 0, 0)]:
            if release_range is None and upcoming - slot > self.config.max_empty_slots:
                _LOGGER.warning("stream %s: %d empty slots after slot %d are not released", self.stream,
                                upcoming - slot - self.config.max_empty_slots, slot - 1)
                empty_until = slot + self.config.max_empty_slots
            else:
                empty_until = upcoming
            for empty in range(slot, empty_until):
                yield from self._release_one(empty, 0, 0, final)
            if upcoming <= last_slot:
                yield from self._release_one(upcoming, start, end, final)
            slot = upcoming + 1
        self._firing.save_declared()
        self._firing = None
        if self.config.checkpoint_every and self.next_slot != self._saved_at:
            yield from self._checkpoint()  # the latest state: a resumed job must never release these slots again
        yield from self.flush(final=final)

    def _outside_range(self, release_range: ReleaseRange, contributions: list):
        """Dead letters for the records of contributions outside the range; returns the contributions inside."""
        if not contributions or (release_range.first_slot <= min(map(_SLOT, contributions))
                                 and max(map(_SLOT, contributions)) <= release_range.last_slot):
            return contributions
        inside, outside = release_range.split(contributions)
        for c in map(Contribution._make, sorted(outside, key=_SLOT)):
            reason = release_range.outside(c.slot)
            assert reason is not None  # split put the contribution outside
            for raw in c.raws:
                yield DeadLetter(dead_letter(reason, raw, "release", self.stream, c.user))
        return inside

    def _release_one(self, slot: int, start: int, end: int, final: bool):
        yield from self._release(slot, start, end)
        self.next_slot = slot + 1
        if self.config.checkpoint_every and self.next_slot % self.config.checkpoint_every == 0:
            yield from self._checkpoint()
        if len(self.pending_charges) >= self.config.ledger_flush_slots and not final:
            yield from self.flush(final=False)

    def _release(self, slot: int, start: int, end: int):
        """Release ``slot`` from the firing's rows ``start:end`` (that slot's, sorted by user id)."""
        firing = self._firing
        assert firing is not None, "a slot is released only inside release_until"
        columns = firing.columns
        codes = columns.users[start:end]
        in_force = firing.declare(codes, start, end)
        accepted = firing.accepted[in_force + 1]
        for i in np.flatnonzero(~accepted).tolist():
            reason, user = firing.reasons[in_force[i] + 1], columns.user_ids[codes[i]]
            for raw in columns.raws[start + i]:
                yield DeadLetter(dead_letter(reason, raw, "release", self.stream, user))
        users = firing.dense_index(codes[accepted])
        used = int(columns.raw_counts[start:end][accepted].sum())
        order = np.argsort(users, kind="stable")
        batch = SlotBatch(users[order], self._values(columns.values[start:end][accepted][order]),
                          self.translator.columns(firing.rows[in_force[accepted][order] + 1]) if users.size else None)
        release = self.engine.step(batch)
        yield RecordsUsed(used)
        self.released += 1
        self.records_used += used
        if self.released % 100 == 0:
            elapsed = max(time.monotonic() - self.started, 1e-9)
            _LOGGER.info("stream %s: %d slots released (up to slot %d), %d records used, %.0f slots/s",
                         self.stream, self.released, slot, self.records_used, self.released / elapsed)
        record = ReleaseRecord.of(release, self.stream, slot, self.config.clock, self.config.mechanism)
        if self.config.checkpoint_every:  # in no output yet: the next checkpoint carries or writes it
            self.unpublished.append(record)
        yield Released(record)
        if self.config.evaluate:
            yield evaluation_row(self.engine.mechanism, release, self.stream, slot)
        charges = release.charges
        # The ledger checks what users declared, kept here from the input, never the mechanism's view: the rows
        # that carry a declaration of their own this slot, and users seen for the first time (their default).
        declaring = (firing.own[start:end][accepted][order] >= 0) | ~self.requirements.knows(batch.users)
        self.requirements.declare(release.slot, batch.users[declaring],
                                  batch.requirements.take(declaring) if batch.requirements is not None
                                  and declaring.any() else None, None)
        if charges.parts != self.charge_parts:
            if self.charge_parts is not None:
                raise ValueError(f"{self.config.mechanism} charged parts {charges.parts} after {self.charge_parts}")
            self.charge_parts = charges.parts
        self.pending_charges.append((charges.users, np.column_stack(
            [np.full(charges.users.size, slot, np.int64), self._least(release),
             *(charges.part_units(part) for part in charges.parts), self._declared_in_force(charges.users)])))

    def _least(self, release) -> np.ndarray:
        """Each registered user's least charge: from the public schedule (packed with its findings, which the
        per-user ledger unpacks) for a method that has one, else from the release's evidence."""
        charges = release.charges
        if self.schedule is None:
            return least_charges_of_registered(charges)
        verdict = registered_verdict(self.schedule, release.slot, charges, self.requirements.matrix_of)
        return packed_least(verdict, charges.users)

    def _values(self, values: np.ndarray) -> np.ndarray:
        """The rows' integer values in the mechanism's domain type: an interval's are float64, NaN for none."""
        if self.mechanism.params.domain.dtype is np.int64:
            return values
        return np.where(values == NO_VALUE, np.nan, values.astype(np.float64))

    def _declared_in_force(self, users: np.ndarray) -> np.ndarray:
        """Each user's declared requirement in force; the last slot's rows again while nothing changed."""
        version, last_users, matrix = self._last_in_force
        if version != self.requirements.version or not np.array_equal(users, last_users):
            matrix = self.requirements.matrix_of(users)
            self._last_in_force = (self.requirements.version, users, matrix)
        return matrix

    def flush(self, final: bool):
        """The charges accumulated since the last flush, as one :class:`ChargeChunk` per user (one row per slot).

        :meth:`release_until` flushes every ``ledger_flush_slots`` slots and at its end; a caller that wants
        every charge checked before it goes on (the watch loop, each round) flushes again."""
        if not self.pending_charges:
            return
        pending, self.pending_charges = self.pending_charges, []
        if not any(users.size for users, _ in pending):  # nobody registered yet
            return
        table, first, counts = group_by_user(pending)
        self.first_flush, complete = False, self.first_flush
        kind, parts = kind_name(self.requirements.kind), self.charge_parts or ()  # parts: set with the first row
        for user in np.flatnonzero(counts).tolist():
            start = first[user]
            yield ChargeChunk(f"{self.stream}{KEY_SEPARATOR}{self.user_ids[user]}", table[start:start + counts[user]],
                              kind, parts, final, final and complete)


def group_by_user(pending: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the slots' charge tables ``(users, table)`` grouped by user (slot order kept within a user),
    and where each user's rows start and how many there are.

    A slot charges each user at most once, so a counting sort puts every slot's rows in place: no argsort of the
    ~users x slots rows of a bounded run (about a second) and no concatenated copy of them (hundreds of MB).
    """
    counts = np.bincount(np.concatenate([users for users, _ in pending]))
    first = np.cumsum(counts) - counts
    placed = np.zeros_like(counts)  # rows of each user placed so far
    grouped = np.empty((int(counts.sum()), pending[0][1].shape[1]), np.int64)
    for users, table in pending:
        grouped[first[users] + placed[users]] = table
        placed[users] += 1
    return grouped, first, counts

class _Firing:
    """Lookups for one ``release_until`` call by the columns' user codes and declaration ids, so that
    releasing a slot loops over neither its users nor its declarations."""

    def __init__(self, run: StreamEngine, columns: SlotColumns):
        self.run, self.columns = run, columns
        run_ids = [run.declaration_id(d) for d in columns.declarations]
        # each row's own declaration as the run's id (-1, no declaration, indexes the appended -1)
        self.own = np.array(run_ids + [-1], np.int64)[columns.requirements]
        users = columns.user_ids
        self.dense = np.fromiter((run.index.get(u, -1) for u in users), np.int64, len(users))
        # a user's own declaration in force, else the operator's assigned level (never the other way round)
        assigned = run.config.policy.assigned
        self.declared_ids = np.fromiter((-1 if d is None else run.declaration_id(d)
                                         for d in (run.declared.get(u) or assigned(u) for u in users)),
                                        np.int64, len(users))
        self.saved_ids = self.declared_ids.copy()
        # by declaration id + 1 (0: no declaration): accepted?, the refusal reason, the mechanism's requirement row
        verdicts = [run.translator.row(None)] + [run.translator.row(d) for d in run.declarations]
        width = run.translator.width
        self.accepted = np.array([row is not None for row, _ in verdicts])
        self.reasons = [reason for _, reason in verdicts]
        self.rows = np.array([row or (0,) * width for row, _ in verdicts], np.int64)

    def declare(self, codes: np.ndarray, start: int, end: int) -> np.ndarray:
        """The declaration id in force for rows ``start:end`` (users ``codes``): the row's own, else the user's last."""
        own = self.own[start:end]
        declares = own >= 0
        in_force = np.where(declares, own, self.declared_ids[codes])
        self.declared_ids[codes[declares]] = own[declares]
        return in_force

    def dense_index(self, codes: np.ndarray) -> np.ndarray:
        """The mechanism's user index of each of ``codes`` (ascending user ids); new users get the next ones."""
        run = self.run
        dense = self.dense[codes]
        new = codes[dense < 0]
        if new.size:
            first = len(run.user_ids)
            self.dense[new] = np.arange(first, first + new.size)
            names = [self.columns.user_ids[c] for c in new.tolist()]
            run.index.update(zip(names, range(first, first + new.size)))
            run.user_ids.extend(names)
            dense = self.dense[codes]
        return dense

    def save_declared(self) -> None:
        """Write the declarations that changed since the last call into the run's ``declared``."""
        run = self.run
        for code in np.flatnonzero(self.declared_ids != self.saved_ids).tolist():
            run.declared[self.columns.user_ids[code]] = run.declarations[self.declared_ids[code]]
        self.saved_ids = self.declared_ids.copy()


_SLOT = itemgetter(0)
