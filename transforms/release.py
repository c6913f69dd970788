"""The release stage: one stateful key per stream runs a mechanism slot by slot, in order.

At slot t every user's publication budget depends on which earlier slots were
published, and the publish decision depends on all users' data at t: a
feedback loop that a DAG can only hold inside one key (DESIGN §3).  So
``ReleaseController`` keeps the mechanism (``Mechanism.to_bytes``), the map
from user ids to dense indices and the next slot to release in state cells,
and releases every slot in order, including slots in which nobody reported.

Streaming: a timer fires 1 ms after a slot's users have closed it (the
per-user stage holds the watermark until then) and releases every due slot.
Bounded input: one firing at the end releases all slots.  Trailing slots
after the last one with data are not released (the stream has no more data).

Besides releases it emits each user's charges, in chunks of slots, for the
per-user ``PrivacyLedger`` stage.

Checkpoints (``transforms.checkpoint``): with ``checkpoint_every=K`` the stage
emits each stream's state after every K-th slot and at the end of every
firing that released a slot (so the latest state is always saved); with
``resume_from`` a new job starts each stream from a saved state.  A resumed
stream never releases a slot before its saved next slot again (records for
those are late dead letters), and its mechanism carries the budget every user
already spent, so no window is overspent across the restart.
"""

from __future__ import annotations

import logging
import math
import pickle
import time
from dataclasses import dataclass, field

import apache_beam as beam
import numpy as np
from apache_beam.coders import BytesCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from transforms.checkpoint import Checkpoint, StreamState, dump_randomness, encode, load_for_resume, load_randomness
from transforms.declarations import DeclarationTranslator, RequirementPolicy
from transforms.mechanisms import DynamicRequirements, Mechanism, SlotBatch, mechanism_class, make_mechanism
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.records import Contribution, dead_letter
from transforms.slot_batch import SlotBatchFn
from transforms.slotting import SlotClock
from transforms.user_state import ACCOUNTING, NAMESPACE, SEP

_LOGGER = logging.getLogger(__name__)

CHARGES = "charges"
CHECKPOINTS = "checkpoints"
DEAD_LETTERS = "dead_letters"
EVALUATION = "evaluation"


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
        checkpoint.check(self.mechanism, self.build().params.to_json(), self.clock.slot_seconds, self.clock.origin,
                         self.insecure_seed, source)

    def resume_state(self) -> dict:
        """stream -> StreamState saved in ``resume_from`` (checked against this configuration)."""
        checkpoint = load_for_resume(self.resume_from)
        self.check_checkpoint(checkpoint, self.resume_from)
        return checkpoint.streams


class ReleaseController(beam.DoFn):
    """Runs one stream's mechanism over its slots, strictly in order."""

    # Large values are kept as pickled bytes: the SDK's state cache measures every object it holds.
    CONTRIBUTIONS = BagStateSpec("contributions", BytesCoder())
    MECHANISM = ReadModifyWriteStateSpec("mechanism", BytesCoder())
    USERS = ReadModifyWriteStateSpec("users", BytesCoder())
    NEXT_SLOT = ReadModifyWriteStateSpec("next_slot", VarIntCoder())
    RANDOMNESS = ReadModifyWriteStateSpec("randomness", BytesCoder())
    ARMED = ReadModifyWriteStateSpec("armed", VarIntCoder())
    RELEASE = TimerSpec("release", TimeDomain.WATERMARK)

    def __init__(self, config: ReleaseConfig, bounded: bool):
        self.config = config
        self.bounded = bounded
        self._armed_keys: set = set()
        self._resume: dict = {}
        self.used = Metrics.counter(NAMESPACE, "records_used")
        self.late = Metrics.counter(NAMESPACE, "late")
        self.dead = Metrics.counter(NAMESPACE, "dead_letters")
        self.kinds = {kind: Metrics.counter(NAMESPACE, f"slots_{kind}") for kind in ("fresh", "skipped", "nullified")}

    def setup(self):
        self._resume = self.config.resume_state() if self.config.resume_from else {}

    def start_bundle(self):
        self._armed_keys = set()

    def process(self, element, contributions=beam.DoFn.StateParam(CONTRIBUTIONS),
                armed=beam.DoFn.StateParam(ARMED), release=beam.DoFn.TimerParam(RELEASE)):
        stream, chunk = element
        if not chunk:
            return
        contributions.add(pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL))
        if self.bounded:  # one firing at the end; setting the same timer again is harmless
            if stream not in self._armed_keys:
                self._armed_keys.add(stream)
                release.set(GlobalWindow().max_timestamp())
            return
        earliest = self.config.clock.release_micros(min(c[0] for c in chunk))
        pending = armed.read()
        if pending is None or earliest < pending:
            armed.write(earliest)
            release.set(Timestamp(micros=earliest))

    @on_timer(RELEASE)
    def on_release(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                   contributions=beam.DoFn.StateParam(CONTRIBUTIONS), mechanism_state=beam.DoFn.StateParam(MECHANISM),
                   users_state=beam.DoFn.StateParam(USERS), next_slot_state=beam.DoFn.StateParam(NEXT_SLOT),
                   randomness_state=beam.DoFn.StateParam(RANDOMNESS), armed=beam.DoFn.StateParam(ARMED),
                   release=beam.DoFn.TimerParam(RELEASE)):
        clock = self.config.clock
        by_slot: dict[int, list] = {}
        for chunk in contributions.read():
            for c in pickle.loads(chunk):
                by_slot.setdefault(c[0], []).append(c)
        contributions.clear()
        armed.clear()
        due = sorted(s for s in by_slot if self.bounded or clock.release_micros(s) <= fired.micros)
        due_set = set(due)
        later = [c for s in by_slot if s not in due_set for c in by_slot[s]]
        if later:
            contributions.add(pickle.dumps(later, protocol=pickle.HIGHEST_PROTOCOL))
            earliest = clock.release_micros(min(c[0] for c in later))
            armed.write(earliest)
            release.set(Timestamp(micros=earliest))
        if not due:
            return
        mechanism_bytes = mechanism_state.read()
        if mechanism_bytes is None:  # the stream's first firing in this job: maybe a resumed one
            state = self._resume.get(key)
        else:
            user_ids, declared = pickle.loads(users_state.read())
            state = StreamState(mechanism_bytes, user_ids, declared, next_slot_state.read(), randomness_state.read())
        run = _StreamRun.load(self.config, key, state)
        for output in run.release_until(max(due), by_slot, final=self.bounded):
            kind, payload = output
            if kind == "release":
                self.kinds[payload["kind"]].inc()
                yield payload
            elif kind == "used":
                self.used.inc(payload)
                yield beam.pvalue.TaggedOutput(ACCOUNTING, ("records_used", payload))
            elif kind == "dead":
                self.dead.inc()
                yield beam.pvalue.TaggedOutput(ACCOUNTING, ("dead_letters", 1))
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, payload)  # one per input record
            elif kind == "late":
                self.late.inc()
                yield beam.pvalue.TaggedOutput(ACCOUNTING, ("late", 1))
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, payload)
            elif kind == "evaluation":
                yield beam.pvalue.TaggedOutput(EVALUATION, payload)
            elif kind == "checkpoint":
                yield beam.pvalue.TaggedOutput(CHECKPOINTS, payload)
            else:
                yield beam.pvalue.TaggedOutput(CHARGES, payload)
        state = run.state()
        mechanism_state.write(state.mechanism)
        users_state.write(pickle.dumps((state.user_ids, state.declared), protocol=pickle.HIGHEST_PROTOCOL))
        next_slot_state.write(state.next_slot)
        if state.randomness is not None:
            randomness_state.write(state.randomness)


class _StreamRun:
    """One firing's work for a stream: the mechanism and its user index, outside Beam."""

    def __init__(self, config: ReleaseConfig, stream: str, mechanism: Mechanism, user_ids: list,
                 next_slot: int | None, randomness, declared: dict | None = None):
        self.config, self.stream, self.mechanism = config, stream, mechanism
        self.user_ids = user_ids
        self.index = {user: i for i, user in enumerate(user_ids)}
        self._interned: dict = {}  # one object per distinct declaration: state pickles each once
        self.declared = {user: self._intern(d) for user, d in (declared or {}).items()}
        self._saved_at = next_slot  # next_slot of the last checkpoint emitted (or loaded)
        self.released = 0
        self.records_used = 0
        self.started = time.monotonic()
        self.next_slot = next_slot
        self.randomness = randomness
        self.translator = DeclarationTranslator(mechanism, config.policy)
        self.combine = SlotBatchFn()
        self.pending_charges: list = []
        self.first_flush = next_slot is None  # a bounded run flushes everything at once

    @classmethod
    def load(cls, config: ReleaseConfig, stream: str, state: StreamState | None) -> "_StreamRun":
        """A fresh run, or one continuing ``state`` (from the stage's state cells or a checkpoint)."""
        if state is None:
            return cls(config, stream, config.build(), [], None,
                       secure_randomness() if config.insecure_seed is None
                       else insecure_seeded_randomness(config.insecure_seed))
        mechanism = mechanism_class(config.mechanism).from_bytes(config.build().params, state.mechanism)
        if config.insecure_seed is None:
            randomness = secure_randomness()  # whatever was saved: a resumed job draws secure noise
        elif state.randomness:
            randomness = load_randomness(state.randomness)
        else:
            randomness = insecure_seeded_randomness(config.insecure_seed)
        return cls(config, stream, mechanism, list(state.user_ids), state.next_slot, randomness, state.declared)

    def state(self) -> StreamState:
        """Everything needed to continue this stream exactly (the seeded generator only with an insecure seed)."""
        return StreamState(self.mechanism.to_bytes(), list(self.user_ids), dict(self.declared), self.next_slot,
                           None if self.config.insecure_seed is None else dump_randomness(self.randomness))

    def _intern(self, declaration: tuple) -> tuple:
        return self._interned.setdefault(declaration, declaration)

    def _checkpoint(self):
        self._saved_at = self.next_slot
        payload = encode(self.config.new_checkpoint({self.stream: self.state()}))
        yield "checkpoint", (self.stream, self.next_slot, payload)

    def release_until(self, last_slot: int, by_slot: dict, final: bool):
        """Release every slot from ``next_slot`` to ``last_slot``; yields tagged outputs.

        Empty slots are released too, but at most ``max_empty_slots`` in a row: a longer gap (a
        far-off timestamp, a stream that paused) resumes at the next slot with data.  Releasing fewer
        slots never costs privacy: any w consecutive slots then hold at most w mechanism steps.
        """
        if self.next_slot is None:
            self.next_slot = min(by_slot)
        for slot in sorted(s for s in by_slot if s < self.next_slot):  # already released: late
            for c in map(Contribution._make, by_slot[slot]):
                for raw in c.raws:
                    yield "late", dead_letter(f"late: slot {slot} already released", raw, "release", self.stream,
                                              c.user)
        with_data = sorted(s for s in by_slot if self.next_slot <= s <= last_slot)
        slot = self.next_slot
        for upcoming in with_data + [last_slot + 1]:
            if upcoming - slot > self.config.max_empty_slots:
                _LOGGER.warning("stream %s: %d empty slots after slot %d are not released", self.stream,
                                upcoming - slot - self.config.max_empty_slots, slot - 1)
                empty_until = slot + self.config.max_empty_slots
            else:
                empty_until = upcoming
            for empty in range(slot, empty_until):
                yield from self._release_one(empty, [], final)
            if upcoming <= last_slot:
                yield from self._release_one(upcoming, by_slot[upcoming], final)
            slot = upcoming + 1
        if self.config.checkpoint_every and self.next_slot != self._saved_at:
            yield from self._checkpoint()  # the latest state: a resumed job must never release these slots again
        yield from self._flush(final=final)

    def _release_one(self, slot: int, contributions: list, final: bool):
        yield from self._release(slot, contributions)
        self.next_slot = slot + 1
        if self.config.checkpoint_every and self.next_slot % self.config.checkpoint_every == 0:
            yield from self._checkpoint()
        if len(self.pending_charges) >= self.config.ledger_flush_slots and not final:
            yield from self._flush(final=False)

    def _release(self, slot: int, contributions: list):
        columns = self.combine.build(contributions)
        users, values, rows, used = [], [], [], 0
        for user, value, declaration, raws in zip(columns.users, columns.values, columns.requirements,
                                                   columns.raws):
            if declaration is None:  # never declared, or a resumed job's per-user stage does not know it yet
                declaration = self.declared.get(user)
            else:
                declaration = self.declared[user] = self._intern(tuple(declaration))
            row, reason = self.translator.row(declaration)
            if reason is not None:
                for raw in raws:
                    yield "dead", dead_letter(reason, raw, "release", self.stream, user)
                continue
            if user not in self.index:
                self.index[user] = len(self.user_ids)
                self.user_ids.append(user)
            users.append(self.index[user])
            values.append(value)
            rows.append(row)
            used += len(raws)
        order = np.argsort(np.array(users, np.int64), kind="stable")
        batch = SlotBatch(np.array(users, np.int64)[order], np.array(values, np.int64)[order],
                          self.translator.columns([rows[i] for i in order]) if rows else None)
        release = self.mechanism.step(batch, self.randomness)
        yield "used", used
        self.released += 1
        self.records_used += used
        if self.released % 100 == 0:
            elapsed = max(time.monotonic() - self.started, 1e-9)
            _LOGGER.info("stream %s: %d slots released (up to slot %d), %d records used, %.0f slots/s",
                         self.stream, self.released, slot, self.records_used, self.released / elapsed)
        clock = self.config.clock
        error = release.predicted_error
        yield "release", {
            "stream": self.stream, "slot": slot, "slot_start": clock.start(slot), "slot_end": clock.end(slot),
            "mechanism": self.config.mechanism, "mechanism_slot": release.slot,
            "histogram": [int(x) for x in release.histogram], "kind": release.kind.value,
            "epsilon": units_to_decimal_string(release.epsilon_units),
            "predicted_error": float(error) if math.isfinite(error) else None,
            "registered_users": int(release.charges.users.size)}
        if self.config.evaluate:
            yield "evaluation", (self.stream, slot, [int(x) for x in release.histogram],
                                 [int(x) for x in self.mechanism.exact_histogram_for_evaluation()])
        charges = release.charges
        requirements = charges.requirements
        matrix = (requirements.as_matrix() if isinstance(requirements, DynamicRequirements)
                  else np.stack([requirements.window, requirements.epsilon_units], axis=1))
        self.pending_charges.append((slot, charges.users, charges.dc_units, charges.publication_units, matrix))

    def _flush(self, final: bool):
        """Per-user chunks of the charges accumulated since the last flush."""
        if not self.pending_charges:
            return
        slots = np.concatenate([np.full(users.size, slot, np.int64) for slot, users, *_ in self.pending_charges])
        users = np.concatenate([p[1] for p in self.pending_charges])
        dc = np.concatenate([p[2] for p in self.pending_charges])
        publication = np.concatenate([p[3] for p in self.pending_charges])
        matrix = np.concatenate([p[4] for p in self.pending_charges])
        self.pending_charges = []
        if users.size == 0:  # nobody registered yet
            return
        order = np.argsort(users, kind="stable")
        users, slots, dc, publication, matrix = users[order], slots[order], dc[order], publication[order], matrix[order]
        self.first_flush, complete = False, self.first_flush
        starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
        ends = np.r_[starts[1:], users.size]
        dynamic = matrix.shape[1] == 4
        for start, end in zip(starts, ends):
            user = self.user_ids[int(users[start])]
            yield "charges", (f"{self.stream}{SEP}{user}", {
                "slots": slots[start:end], "dc": dc[start:end], "publication": publication[start:end],
                "requirements": matrix[start:end], "dynamic": dynamic, "final": final,
                "complete": final and complete})
