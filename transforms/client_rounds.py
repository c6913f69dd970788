"""Client devices in a Beam streaming job: each slot's requests go out, the reports that come back are counted.

The adaptive local-DP methods (LBD, LBA, LPD, LPA and the extensions) decide
whom to ask, and at which budget, from the reports of the slot's earlier
rounds, so the collector talks to the devices while it releases.
:class:`ClientRounds` does it in one stateful step keyed by stream, over one
merged input of slot ticks and report records:

* a tick (``PeriodicImpulse`` on a runner, a TestStream in tests) for slot
  ``s`` makes every slot up to ``s`` due; the next due slot starts: its first
  round becomes request records (``schemas/request.avsc``, JSON text) on the
  ``requests`` output, and a processing-time timer is set to the round's
  deadline, ``round_seconds`` after the round opened;
* report records (``schemas/report.avsc``, JSON text or bytes) for the open
  round are kept in a bag until the round closes: at its deadline, or early
  once every asked user has sent an acceptable report;
* a closing round is checked and answered by
  ``transforms.mechanisms.ldp.client.answer_round`` (the checks of the file
  collector, ``pipelines.collector``); users who did not answer count as not
  reporting.  The next round opens with its own deadline, or the slot's
  release (trust ``local_client``, ``schemas/release.avsc``) goes to the main
  output, the privacy ledger checks its charges, and the next due slot starts.

Every report read ends in exactly one of: used, a duplicate (a second report
of the user in the round), late (for a round that had closed) or a dead letter
with its reason (malformed, another stream, an unknown request, a user not
asked, another budget ...): ``records_read = records_used + duplicates + late +
dead_letters``, in Beam counters (``transforms.accounting``) and on the
``accounting`` output (duplicates and late reports are in the dead letters
too, with their reasons).

**State.**  Between slots the method lives in a state cell as bytes
(``Mechanism.to_bytes``), beside the privacy ledger (``PrivacyLedger.to_bytes``),
the slot progress, the run's first absolute slot (``first_slot``: a public
schedule, LPU's public groups and LSP's sampling slots, is kept on absolute
slots as the devices keep it, ``transforms.client_release.on_absolute_slots``)
and, with the seeded test option only, the generator
(``transforms.checkpoint.dump_randomness``).  The rounds of the open slot are a
Python generator, which no state cell can hold: they stay in the worker's
memory under a nonce that the open round's state cell holds too.  When a
worker restarts (or the key moves to another worker) in the middle of a slot,
the nonce in state finds no rounds in memory, and the slot starts again from
the state saved before it: round 0 again, with new requests; the reports
buffered for the lost round are routed to the new one.  A device refuses a
second request of one method for a slot it answered (``wevent_client``:
``duplicate``), so no user pays twice for a slot, and those users count as not
reporting in the repeated slot.  The collector's ledger does not see what
they spent in the lost attempt; their own bookkeeping does, and it is what
bounds their privacy.

**Time.**  A round that opens at ``now`` has until ``now + round_seconds``;
``now`` is the latest of the worker's clock, the latest tick and the deadline
that just passed, and a round that opens after an early close starts at the
previous round's deadline (so no round has less than ``round_seconds``).  A
slot's rounds should fit in a slot: slots ticked while one is open wait and
are released in order, each with its own rounds.
"""

from __future__ import annotations

import json
import time
import typing
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.coders import BytesCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from transforms.checkpoint import dump_randomness, load_randomness
from transforms.client_release import on_absolute_slots, parse_report
from transforms.coders import ValueCoder
from transforms.mechanisms import FixedRequirements, PrivacyLedger, SlotBatch, make_mechanism
from transforms.mechanisms.public_schedule.registry import schedule_if_any
from transforms.mechanisms.ldp.client import DUPLICATE_REPORT, ReportRejected, RoundRequest, answer_round, report_record
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.records import DeadLetterRecord, ReleaseRecord, dead_letter
from transforms.slotting import SlotClock
from transforms.user_state import NAMESPACE

TICK, REPORT = "tick", "report"
REQUESTS, DEAD_LETTERS, ACCOUNTING = "requests", "dead_letters", "accounting"
STAGE = "client_rounds"
LATE_REPORT = "late: the round had closed"
_REQUEST_ID, _SLOT = 0, 3  # positions in a compact report (transforms.mechanisms.ldp.client.REPORT_FIELDS)
Keyed = typing.Tuple[str, typing.Any]
"""``(stream, (TICK, micros))`` or ``(stream, (REPORT, compact report))``: the stateful step's input."""


@dataclass(frozen=True)
class ClientRoundsConfig:
    """The method and its parameters, the registered devices and their fixed requirements, slots and deadlines."""

    mechanism: str
    params: dict
    user_ids: tuple[str, ...]
    windows: tuple[int, ...]
    epsilon_units: tuple[int, ...]
    slot_seconds: float
    round_seconds: float
    stream: str = "default"
    insecure_seed: int | None = None  # reproducible, NOT private randomness: tests only

    def __post_init__(self):
        if not isinstance(self.stream, str) or not self.stream:
            raise ValueError(f"stream must be a non-empty string, got {self.stream!r}")
        if not self.user_ids or len(set(self.user_ids)) != len(self.user_ids):
            raise ValueError("the registered devices must be listed, each once")
        if not len(self.user_ids) == len(self.windows) == len(self.epsilon_units):
            raise ValueError("every device needs one window and one budget")
        SlotClock(self.slot_seconds)  # checks slot_seconds
        if isinstance(self.round_seconds, bool) or not isinstance(self.round_seconds, (int, float)) \
                or not 0 < self.round_seconds < self.slot_seconds:
            raise ValueError(f"round_seconds must be positive and shorter than a slot ({self.slot_seconds} s), "
                             f"got {self.round_seconds!r}")
        if not hasattr(self.build(), "start_slot"):
            raise ValueError(f"{self.mechanism} is not a local-DP method: client devices need one")

    def build(self):
        return make_mechanism(self.mechanism, **self.params)

    @cached_property
    def clock(self) -> SlotClock:
        return SlotClock(self.slot_seconds)

    @cached_property
    def index_of(self) -> dict[str, int]:
        return {user: i for i, user in enumerate(self.user_ids)}

    def first_slot(self, slot: int) -> tuple:
        """A new mechanism for a run whose first slot is absolute slot ``slot`` (on the devices' public schedule,
        with the public groups it takes: ``transforms.client_release.on_absolute_slots``) and that slot's batch:
        every device registers with its requirement, and no value."""
        mechanism, _ = on_absolute_slots(self.mechanism, self.params, self.user_ids, slot)
        users = len(self.user_ids)
        return mechanism, SlotBatch.of(range(users), mechanism.params.domain.no_values(users), FixedRequirements(
            np.array(self.windows, np.int64), np.array(self.epsilon_units, np.int64)))

    def params_from(self, slot: int | None):
        """The parameters of a run whose first slot was absolute slot ``slot`` (None: a state saved before runs
        kept it, whose method was built from the configured parameters)."""
        params = self.params if slot is None else on_absolute_slots(self.mechanism, self.params, (), slot)[1]
        return make_mechanism(self.mechanism, **params).params


class ClientRounds(beam.PTransform):
    """``{"ticks": slot ticks, "reports": report lines}`` -> releases (main), requests, dead letters, accounting.

    A tick is a timestamp (what ``PeriodicImpulse`` emits) or epoch seconds: it makes its slot due.  Report lines
    are JSON text or bytes.  Outputs: ``releases`` (:class:`ReleaseRecord`), ``requests`` (JSON text, one request
    record per asked user), ``dead_letters`` (:class:`DeadLetterRecord`, late reports and duplicates included) and
    ``accounting`` (``(counter, n)``: records_used, duplicates, late, dead_letters).
    """

    def __init__(self, config: ClientRoundsConfig):
        super().__init__()
        self.config = config

    def expand(self, inputs):
        stream = self.config.stream
        ticks = inputs["ticks"] | "KeyTicks" >> beam.Map(
            lambda tick: (stream, (TICK, Timestamp.of(tick).micros))).with_output_types(Keyed)
        read = inputs["reports"] | "ReadReports" >> beam.ParDo(ReadReports(stream)).with_outputs(
            DEAD_LETTERS, ACCOUNTING, main="reports")
        rounds = ((ticks, read.reports) | "TicksAndReports" >> beam.Flatten().with_output_types(Keyed)
                  | "Rounds" >> beam.ParDo(ClientRoundsFn(self.config)).with_output_types(
                      ReleaseRecord, requests=str, dead_letters=DeadLetterRecord,
                      accounting=typing.Tuple[str, int]).with_outputs(REQUESTS, DEAD_LETTERS, ACCOUNTING,
                                                                       main="releases"))
        return {"releases": rounds.releases, "requests": rounds[REQUESTS],
                "dead_letters": (read[DEAD_LETTERS], rounds[DEAD_LETTERS]) | "DeadLetters" >> beam.Flatten(),
                "accounting": (read[ACCOUNTING], rounds[ACCOUNTING]) | "Accounting" >> beam.Flatten()}


class ReadReports(beam.DoFn):
    """A report line -> ``(stream, (REPORT, compact report))``, or a dead letter (malformed, another stream)."""

    def __init__(self, stream: str):
        self.stream = stream
        self.read = Metrics.counter(NAMESPACE, "records_read")
        self.dead = Metrics.counter(NAMESPACE, "dead_letters")

    def process(self, line):
        self.read.inc()
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        try:
            stream, report = parse_report(text)
            if stream != self.stream:
                raise ReportRejected(f"report for stream {stream!r}, not {self.stream!r}")
        except ReportRejected as reason:
            self.dead.inc()
            yield beam.pvalue.TaggedOutput(ACCOUNTING, ("dead_letters", 1))
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead_letter(str(reason), text, STAGE, self.stream))
            return
        yield stream, (REPORT, report)


class _Slot:
    """The open slot of one stream, in the worker's memory: the method, its rounds and the open round."""

    def __init__(self, nonce: str, slot: int, mechanism, rng, rounds):
        self.nonce, self.slot, self.mechanism, self.rng, self.rounds = nonce, slot, mechanism, rng, rounds
        self.number = -1          # the open round
        self.request: RoundRequest | None = None
        self.answered: set[int] = set()  # users with an acceptable report in the open round
        self.closed: set[str] = set()    # request ids of the slot's closed rounds
        self.deadline = 0         # of the open round, epoch microseconds


class _Cells(NamedTuple):
    mechanism: typing.Any
    ledger: typing.Any
    randomness: typing.Any
    progress: typing.Any
    open_round: typing.Any
    reports: typing.Any
    deadline: typing.Any
    first: typing.Any


class ClientRoundsFn(beam.DoFn):
    """One stream's slots, round by round, in order (see the module docstring)."""

    MECHANISM = ReadModifyWriteStateSpec("mechanism", BytesCoder())  # Mechanism.to_bytes after the last release
    LEDGER = ReadModifyWriteStateSpec("ledger", BytesCoder())  # PrivacyLedger.to_bytes
    RANDOMNESS = ReadModifyWriteStateSpec("randomness", BytesCoder())  # dump_randomness: seeded only
    PROGRESS = ReadModifyWriteStateSpec("progress", ValueCoder())  # (slot to release next, latest due, latest µs)
    OPEN = ReadModifyWriteStateSpec("open", ValueCoder())  # (nonce, slot, round, deadline µs) of the open round
    REPORTS = BagStateSpec("reports", ValueCoder())  # compact reports routed to the open round
    FIRST = ReadModifyWriteStateSpec("first_slot", ValueCoder())  # the run's first absolute slot: its schedule
    DEADLINE = TimerSpec("deadline", TimeDomain.REAL_TIME)

    _open: typing.ClassVar[dict] = {}
    """(this step's token, stream) -> the open :class:`_Slot`: shared by the copies of the DoFn in one process."""

    def __init__(self, config: ClientRoundsConfig):
        self.config = config
        self.token = uuid.uuid4().hex  # copies made by pickling share it (a runner's bundles, the DirectRunner's)
        self.counters = {name: Metrics.counter(NAMESPACE, name) for name in (
            "records_used", "duplicates", "late", "dead_letters", "slots_fresh", "slots_skipped", "slots_nullified",
            "ledger_violations", "requests_sent", "slots_restarted")}

    def setup(self):
        self._template = self.config.build()
        self._params: dict = {}  # the run's first slot -> the method's parameters on the absolute schedule
        self._secure = secure_randomness() if self.config.insecure_seed is None else None

    def process(self, element, mechanism=beam.DoFn.StateParam(MECHANISM), ledger=beam.DoFn.StateParam(LEDGER),
                randomness=beam.DoFn.StateParam(RANDOMNESS), progress=beam.DoFn.StateParam(PROGRESS),
                open_round=beam.DoFn.StateParam(OPEN), reports=beam.DoFn.StateParam(REPORTS),
                deadline=beam.DoFn.TimerParam(DEADLINE), first=beam.DoFn.StateParam(FIRST)):
        stream, (kind, payload) = element
        cells = _Cells(mechanism, ledger, randomness, progress, open_round, reports, deadline, first)
        out: list = []
        if kind == TICK:
            next_slot, due, known = progress.read() or (None, None, 0)
            slot = self.config.clock.slot_of(payload / 1e6)
            progress.write((next_slot, slot if due is None else max(due, slot), max(known, payload)))
        now = self._now(cells)
        if self._current(stream, cells, now, out) is None:
            self._start_due(stream, cells, now, out)
        if kind == REPORT:
            self._route(stream, cells, payload, now, out)
        yield from out

    @on_timer(DEADLINE)
    def on_deadline(self, stream=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                    mechanism=beam.DoFn.StateParam(MECHANISM), ledger=beam.DoFn.StateParam(LEDGER),
                    randomness=beam.DoFn.StateParam(RANDOMNESS), progress=beam.DoFn.StateParam(PROGRESS),
                    open_round=beam.DoFn.StateParam(OPEN), reports=beam.DoFn.StateParam(REPORTS),
                    deadline=beam.DoFn.TimerParam(DEADLINE), first=beam.DoFn.StateParam(FIRST)):
        cells = _Cells(mechanism, ledger, randomness, progress, open_round, reports, deadline, first)
        held = progress.read()
        if held is None:
            return
        progress.write((*held[:2], max(held[2], fired.micros)))
        out: list = []
        now = self._now(cells)
        slot = self._current(stream, cells, now, out)
        if slot is not None and fired.micros >= slot.deadline:  # else: an earlier round's timer, or a new attempt
            self._close(stream, cells, slot, now, out)
        yield from out

    # -- slots and rounds -------------------------------------------------------------------------------
    def _now(self, cells: _Cells) -> int:
        """The latest of the worker's clock and the latest tick or deadline seen (epoch microseconds)."""
        held = cells.progress.read()
        return max(int(time.time() * 1e6), held[2] if held else 0)

    def _current(self, stream: str, cells: _Cells, now: int, out: list) -> _Slot | None:
        """The open slot; one lost with a worker restart starts again from the state saved before it."""
        held = cells.open_round.read()
        if held is None:
            return None
        slot = self._open.get((self.token, stream))
        if slot is not None and slot.nonce == held[0]:
            return slot
        self.counters["slots_restarted"].inc()
        buffered = list(cells.reports.read())
        cells.reports.clear()
        cells.open_round.clear()
        self._start_due(stream, cells, now, out)  # the progress still names the lost slot as the next one
        for report in buffered:
            self._route(stream, cells, report, now, out)
        return self._open.get((self.token, stream))

    def _start_due(self, stream: str, cells: _Cells, at: int, out: list) -> None:
        """Start the next due slot (releasing those that ask nobody) until one has an open round."""
        while True:
            held = cells.progress.read()
            if held is None or held[1] is None:
                return
            next_slot, due, known = held
            slot = due if next_slot is None else next_slot  # the first slot is the first one ticked
            if slot > due:
                return
            cells.progress.write((slot, due, known))
            saved = cells.mechanism.read()
            if saved is None:
                mechanism, batch = self.config.first_slot(slot)
                cells.first.write(slot)
            else:
                first = cells.first.read()
                if first not in self._params:
                    self._params[first] = self.config.params_from(first)
                params = self._params[first]
                mechanism, batch = type(self._template).from_bytes(params, saved), SlotBatch.empty()
            seed, state = self.config.insecure_seed, cells.randomness.read()
            if seed is None:
                rng = self._secure
            else:
                rng = insecure_seeded_randomness(seed) if state is None else load_randomness(state)
            opened = _Slot(uuid.uuid4().hex, slot, mechanism, rng, mechanism.start_slot(batch, rng, clients=True))
            if self._next_round(stream, cells, opened, at, out):
                return

    def _next_round(self, stream: str, cells: _Cells, slot: _Slot, at: int, out: list) -> bool:
        """Open the slot's next round (True), or release the slot once it asks nothing more (False)."""
        while slot.rounds.request is not None:
            slot.number += 1
            request = RoundRequest(stream, slot.slot, slot.number, slot.mechanism.name, slot.rounds.request)
            if request.request.users.size == 0:  # nobody to ask: answered at once
                answer_round(slot.rounds, request, [], self.config.index_of)
                continue
            slot.request, slot.answered, slot.deadline = request, set(), at + int(self.config.round_seconds * 1e6)
            records = request.records(self.config.user_ids)
            self.counters["requests_sent"].inc(len(records))
            out += [beam.pvalue.TaggedOutput(REQUESTS, json.dumps(r, sort_keys=True)) for r in records]
            self._open[(self.token, stream)] = slot
            cells.open_round.write((slot.nonce, slot.slot, slot.number, slot.deadline))
            cells.deadline.set(Timestamp(micros=slot.deadline))
            return True
        self._release(stream, cells, slot, out)
        return False

    def _route(self, stream: str, cells: _Cells, report: tuple, now: int, out: list) -> None:
        """A report to the open round (closing it once everyone asked answered), or late, or a dead letter."""
        slot = self._open.get((self.token, stream)) if cells.open_round.read() is not None else None
        held = cells.progress.read()
        next_slot = held[0] if held else None
        if slot is None:
            late = next_slot is not None and report[_SLOT] < next_slot
            self._reject(stream, report_record(report), LATE_REPORT if late else
                         f"unknown request {report[_REQUEST_ID]!r}: no round is open", out)
            return
        if report[_SLOT] < slot.slot or report[_REQUEST_ID] in slot.closed:
            self._reject(stream, report_record(report), LATE_REPORT, out)
            return
        cells.reports.add(report)
        try:
            slot.answered.add(slot.request.check(report, self.config.index_of)[0])
        except ReportRejected:
            return  # a dead letter when the round closes (answer_round says why)
        if len(slot.answered) == slot.request.request.users.size:
            self._close(stream, cells, slot, now, out)

    def _close(self, stream: str, cells: _Cells, slot: _Slot, now: int, out: list) -> None:
        """Answer the open round with its reports; then the next round, or the release and the next due slot."""
        request = slot.request
        assert request is not None, "a slot in memory has an open round"
        reports = list(cells.reports.read())
        cells.reports.clear()
        rejected = answer_round(slot.rounds, request, reports, self.config.index_of)
        slot.closed.add(request.request_id)
        self._count(out, "records_used", len(reports) - len(rejected))
        for record, reason in rejected:
            self._reject(stream, record, reason, out)
        at = max(slot.deadline, now)  # an early close leaves the next round the rest of this one's time too
        if not self._next_round(stream, cells, slot, at, out):
            self._start_due(stream, cells, at, out)

    def _release(self, stream: str, cells: _Cells, slot: _Slot, out: list) -> None:
        """The slot's release to the main output; the method, ledger and generator saved for the next slot."""
        release = slot.rounds.release
        saved = cells.ledger.read()
        method = slot.mechanism
        ledger = PrivacyLedger(max(self.config.windows), schedule=schedule_if_any(method.name, method.params)) \
            if saved is None else PrivacyLedger.from_bytes(saved)
        before = ledger.violation_count
        ledger.record(release.slot, release.charges)
        cells.ledger.write(ledger.to_bytes())
        cells.mechanism.write(slot.mechanism.to_bytes())
        if self._secure is None:
            cells.randomness.write(dump_randomness(slot.rng))
        _, due, known = cells.progress.read()
        cells.progress.write((slot.slot + 1, due, known))
        cells.open_round.clear()
        self._open.pop((self.token, stream), None)
        self.counters["ledger_violations"].inc(ledger.violation_count - before)
        self.counters[f"slots_{release.kind.value}"].inc()
        out.append(ReleaseRecord.of(release, stream, slot.slot, self.config.clock, slot.mechanism.name))

    def _reject(self, stream: str, record: dict, reason: str, out: list) -> None:
        """A dead letter, counted as late, a duplicate or a dead letter by its reason."""
        self._count(out, {LATE_REPORT: "late", DUPLICATE_REPORT: "duplicates"}.get(reason, "dead_letters"), 1)
        user = record.get("user")
        out.append(beam.pvalue.TaggedOutput(DEAD_LETTERS, dead_letter(
            reason, json.dumps(record, sort_keys=True), STAGE, stream, user if isinstance(user, str) else None)))

    def _count(self, out: list, name: str, n: int) -> None:
        if n:
            self.counters[name].inc(n)
            out.append(beam.pvalue.TaggedOutput(ACCOUNTING, (name, n)))
