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

The work of a firing is the stream engine's (``transforms.engine.StreamEngine``,
Beam-free); this stage keeps its state in state cells and turns its typed
outputs into this stage's outputs and counters.  Besides releases it emits
each user's charges, in chunks of slots, for the per-user ``UserLedgerFn``
stage.

Checkpoints (``transforms.checkpoint``): with ``checkpoint_every=K`` the stage
emits each stream's state after every K-th slot and at the end of every
firing that released a slot (so the latest state is always saved); with
``resume_from`` a new job starts each stream from a saved state.  A resumed
stream never releases a slot before its saved next slot again (records for
those are late dead letters), and its mechanism carries the budget every user
already spent, so no window is overspent across the restart.  A bounded run's
checkpoints also carry every release it made and their charges (a batch sink
publishes only when the pipeline ends); an unbounded run's hand the releases
made since the previous checkpoint to the writer, which publishes them first
(``CheckpointSaved.releases``; docs/operations.md).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.coders import BytesCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from transforms.checkpoint import StreamState
from transforms.coders import UsersCoder
from transforms.engine import (ChargeChunk, CheckpointSaved, DeadLetter, Duplicates, EvaluationRow, LateRecord,
                               RecordsUsed, Released, ReleaseConfig, StreamEngine, StreamOutputs)
from transforms.records import DeadLetterRecord, ReleaseRecord, pack_contributions, unpack_contributions
from transforms.user_state import ACCOUNTING, NAMESPACE, Counted

CHARGES = "charges"
CHECKPOINTS = "checkpoints"
DEAD_LETTERS = "dead_letters"
EVALUATION = "evaluation"

OUTPUT_TYPES = {"releases": ReleaseRecord, CHARGES: ChargeChunk, DEAD_LETTERS: DeadLetterRecord,
                ACCOUNTING: Counted, EVALUATION: EvaluationRow, CHECKPOINTS: CheckpointSaved}
"""The element type of each of the stage's outputs (main: ``releases``): Beam picks their coders by these."""
_USERS = UsersCoder()


def release_stage(config: ReleaseConfig, bounded: bool) -> beam.PTransform:
    """The release stage with its tagged outputs and their types (see :data:`OUTPUT_TYPES`): on an unbounded
    input a stateful ParDo whose timers follow the watermark; on a bounded one each stream's contributions grouped
    and released at once, with no timer (a runner need not hold its watermark for a timer's outputs: Beam's
    BundleBasedDirectRunner does not, and its GroupByKeys after this stage would complete before them)."""
    types = dict(OUTPUT_TYPES)
    release = BoundedRelease(config) if bounded else ReleaseController(config)
    stage = (beam.ParDo(release)
             .with_output_types(types.pop("releases"), **types)
             .with_outputs(CHARGES, DEAD_LETTERS, ACCOUNTING, EVALUATION, CHECKPOINTS, main="releases"))
    return GroupedRelease(stage) if bounded else stage


class GroupedRelease(beam.PTransform):
    """Each stream's packed contributions grouped, then released by :class:`BoundedRelease`."""

    def __init__(self, stage: beam.ParDo):
        super().__init__()
        self.stage = stage

    def expand(self, packed):
        return packed | "GroupByStream" >> beam.GroupByKey() | "Release" >> self.stage


class ReleaseStage(beam.DoFn):
    """What both release stages share: the job's config, the checkpoints a resumed job starts from, the counters."""

    def __init__(self, config: ReleaseConfig):
        self.config = config
        self._resume: dict = {}
        self.counters = OutputCounters()

    def setup(self):
        self._resume = self.config.resume_state() if self.config.resume_from else {}


class ReleaseController(ReleaseStage):
    """Runs one stream's mechanism over its slots, strictly in order."""

    # Large values are kept as bytes made by a versioned encoding (docs/state_layout.md), never pickle: the SDK's
    # state cache measures every object it holds, and one bytes object is cheap to measure.
    CONTRIBUTIONS = BagStateSpec("contributions", BytesCoder())  # records.pack_contributions (ContributionsCoder)
    MECHANISM = ReadModifyWriteStateSpec("mechanism", BytesCoder())  # Mechanism.to_bytes (.npz, no pickle)
    USERS = ReadModifyWriteStateSpec("users", BytesCoder())  # UsersCoder: user ids, each user's last declaration
    NEXT_SLOT = ReadModifyWriteStateSpec("next_slot", VarIntCoder())
    RANDOMNESS = ReadModifyWriteStateSpec("randomness", BytesCoder())  # checkpoint.dump_randomness: seeded only
    ARMED = ReadModifyWriteStateSpec("armed", VarIntCoder())
    REQUIREMENTS = ReadModifyWriteStateSpec("requirements", BytesCoder())  # DeclaredRequirements.to_bytes (.npz)
    RELEASE = TimerSpec("release", TimeDomain.WATERMARK)

    def process(self, element, contributions=beam.DoFn.StateParam(CONTRIBUTIONS),
                armed=beam.DoFn.StateParam(ARMED), release=beam.DoFn.TimerParam(RELEASE)):
        stream, packed = element
        contributions.add(packed)
        earliest = self.config.clock.release_micros(min(c[0] for c in unpack_contributions(packed)))
        pending = armed.read()
        if pending is None or earliest < pending:
            armed.write(earliest)
            release.set(Timestamp(micros=earliest))

    @on_timer(RELEASE)
    def on_release(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                   contributions=beam.DoFn.StateParam(CONTRIBUTIONS), mechanism_state=beam.DoFn.StateParam(MECHANISM),
                   users_state=beam.DoFn.StateParam(USERS), next_slot_state=beam.DoFn.StateParam(NEXT_SLOT),
                   randomness_state=beam.DoFn.StateParam(RANDOMNESS), armed=beam.DoFn.StateParam(ARMED),
                   release=beam.DoFn.TimerParam(RELEASE),
                   requirements_state=beam.DoFn.StateParam(REQUIREMENTS)):
        clock = self.config.clock
        held = [c for packed in contributions.read() for c in unpack_contributions(packed)]
        contributions.clear()
        armed.clear()
        held_slots = {c[0] for c in held}
        due_slots = {s for s in held_slots if clock.release_micros(s) <= fired.micros}
        if due_slots == held_slots:
            due, later = held, []
        else:
            due = [c for c in held if c[0] in due_slots]
            later = [c for c in held if c[0] not in due_slots]
        if later:
            contributions.add(pack_contributions(later))
            earliest = clock.release_micros(min(held_slots - due_slots))
            armed.write(earliest)
            release.set(Timestamp(micros=earliest))
        release_range = self.config.release_range
        if not due and release_range is None:
            return
        mechanism_bytes = mechanism_state.read()
        if mechanism_bytes is None:  # the stream's first firing in this job: maybe a resumed one
            state = self._resume.get(key)
        else:
            user_ids, declared = _USERS.decode(users_state.read())
            state = StreamState(mechanism_bytes, user_ids, declared, next_slot_state.read(), randomness_state.read(),
                                requirements_state.read())  # None only in a job started before the cell existed
        run = StreamEngine.load(self.config, key, state)
        if release_range is None:
            last = max(due_slots)
        else:  # every slot of the range that has closed, with data or not
            last = release_range.last_due(clock, fired.micros - 1000)
        outputs = _StageOutputs(self)
        for output in run.release_until(last, due, final=False):
            output.deliver(outputs)
            yield from outputs.take()
        if release_range is not None and not later and run.next_slot <= release_range.last_slot:
            # no data is held, but the range's remaining slots are released when they close, data or not
            at = min(clock.release_micros(release_range.last_slot), GlobalWindow().max_timestamp().micros)
            if at > fired.micros:  # (a range ending past Beam's last timestamp is not re-armed for ever)
                armed.write(at)
                release.set(Timestamp(micros=at))
        state = run.state()
        mechanism_state.write(state.mechanism)
        users_state.write(_USERS.encode((state.user_ids, state.declared)))
        next_slot_state.write(state.next_slot)
        requirements_state.write(state.requirements)
        if state.randomness is not None:
            randomness_state.write(state.randomness)



class BoundedRelease(ReleaseStage):
    """A bounded run's release of one stream: every contribution at once, every slot closed (as the
    :class:`ReleaseController` does slot by slot as the watermark passes)."""

    def process(self, element):
        key, packed = element
        held = [c for blob in packed for c in unpack_contributions(blob)]
        release_range = self.config.release_range
        if not held and release_range is None:
            return
        # its checkpoints carry every release made: a batch sink publishes only when the pipeline ends
        run = StreamEngine.load(self.config, key, self._resume.get(key), carry=True)
        last = release_range.last_slot if release_range is not None else max(c[0] for c in held)
        outputs = _StageOutputs(self)
        for output in run.release_until(last, held, final=True):
            output.deliver(outputs)
            yield from outputs.take()


class OutputCounters:
    """The Beam metrics a release stage counts its outputs in (records by fate, slots by kind)."""

    def __init__(self):
        self.used = Metrics.counter(NAMESPACE, "records_used")
        self.late = Metrics.counter(NAMESPACE, "late")
        self.dead = Metrics.counter(NAMESPACE, "dead_letters")
        self.duplicates = Metrics.counter(NAMESPACE, "duplicates")
        self.kinds = {kind: Metrics.counter(NAMESPACE, f"slots_{kind}") for kind in ("fresh", "skipped", "nullified")}


class _StageOutputs(StreamOutputs):
    """The stream engine's outputs as this stage's main and tagged outputs, counted in Beam metrics."""

    def __init__(self, stage: ReleaseStage):
        self.stage = stage
        self.pending: list = []

    def take(self) -> list:
        taken, self.pending = self.pending, []
        return taken

    def released(self, output: Released) -> None:
        self.stage.counters.kinds[output.record["kind"]].inc()
        self.pending.append(ReleaseRecord(output.record))

    def records_used(self, output: RecordsUsed) -> None:
        self.stage.counters.used.inc(output.records)
        self.pending.append(beam.pvalue.TaggedOutput(ACCOUNTING, ("records_used", output.records)))

    def dead_letter(self, output: DeadLetter) -> None:
        self.stage.counters.dead.inc()
        self.pending += [beam.pvalue.TaggedOutput(ACCOUNTING, ("dead_letters", 1)),
                         beam.pvalue.TaggedOutput(DEAD_LETTERS, output.letter)]  # one per input record

    def late(self, output: LateRecord) -> None:
        self.stage.counters.late.inc()
        self.pending += [beam.pvalue.TaggedOutput(ACCOUNTING, ("late", 1)),
                         beam.pvalue.TaggedOutput(DEAD_LETTERS, output.letter)]

    def duplicates(self, output: Duplicates) -> None:
        self.stage.counters.duplicates.inc(output.records)
        self.pending.append(beam.pvalue.TaggedOutput(ACCOUNTING, ("duplicates", output.records)))

    def evaluation(self, output: EvaluationRow) -> None:
        self.pending.append(beam.pvalue.TaggedOutput(EVALUATION, output))

    def checkpoint(self, output: CheckpointSaved) -> None:
        self.pending.append(beam.pvalue.TaggedOutput(CHECKPOINTS, output))

    def charges(self, output: ChargeChunk) -> None:
        self.pending.append(beam.pvalue.TaggedOutput(CHARGES, output))
