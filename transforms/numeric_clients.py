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
not matter; bounded input: a combine per ``(stream, slot)``, :class:`SlotSums`) and their count; the release's
estimate, ``statistic`` and ``predicted_error`` are the registered mechanism's estimator's
(``transforms.mechanisms.numeric.estimates``: SW-direct's and ToPL's average de-biased, Sampling's segment mean,
the memory methods' raw ``report_mean`` with a worst-case bound), in the domain's units: the simulated path's
fields, ``mechanism_slot`` the release's place in its stream's series (carried by checkpoints).  BA-SW's value
for a slot is what the user releases (a new publication or the last one repeated).  Every slot of a stream is released, in order, as the central path
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
``figures["w_event_private"] = 0``.  Each user's reports leave as ``NumericCharges``: per report its charges and
the budget each part was made at, with the requirement the user declared (or the operator's default), never a
least charge.  The ledger stage (``transforms.numeric_ledger``) derives the least charge from the method's public
schedule and checks every memory-aware window (``w + reach`` slots: a change within ``w`` slots moves the reports
whose deviation memory or segment reaches into it); under ``not_w_event_private`` the windows over budget it
accepted are reported, not counted.  A declaration the mechanism refuses turns the user's records into dead
letters with the reason, as in the histogram pipeline.

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

import typing
from typing import NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from transforms.coders import AbsorptionRowCoder, ClientRowCoder, SampledRowCoder, ValueCoder
from transforms.declarations import RequirementPolicy
from transforms.encoding import encode_value
from transforms.engine import CheckpointSaved
from transforms.ledger import ENTRIES, VIOLATIONS, empty_tail
from transforms.numeric_events import NumericDomain
from transforms.numeric_ledger import CompleteNumericLedgerFn, NumericLedgerFn, ResumedNumericLedgerFn, carried_tail
from transforms.numeric_records import AbsorptionRow, NumericCharges, SampledRow, SlotSum
from transforms.numeric_client_checkpoints import (CLIENTS_STREAM, STREAM_ESTIMATE, USER_STATE, Carried,
                                                   CarriedClients, WriteClientCheckpoints, holds_clients_only,
                                                   read_clients_checkpoint, resumed_first_open,
                                                   write_clients_checkpoint)
from transforms.numeric_slot_releases import (ReleaseStreamSlots, SlotReleases, SlotSums, crowd_slot_sums,
                                              release_record, skipped_record)
from transforms.numeric_smoothing import SmoothReleases, sma_reach
from transforms.numeric_stage_config import CLIENT_METHODS, ClientStageConfig
from transforms.numeric_user_clients import (CHARGES, CROWD, DEAD_LETTERS, PARTS, TRUTH, ReportDraws, UserClients,
                                             report_randomness)
from transforms.private_histogram import AccountingTotals
from transforms.release_range import ReleaseRange
from transforms.records import KEY_SEPARATOR, DeadLetterRecord, Event, ReleaseRecord, dead_letter
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

CARRY = "carry"
Summed = typing.Tuple[typing.Tuple[str, int], SlotSum]
"""``((stream, slot), SlotSum)``: how the reports leave the stage (summed within a bundle)."""
Crowd = typing.Tuple[typing.Tuple[str, int], typing.Tuple[int, ...]]
"""``((stream, slot), counts)``: how many users' means fall in each crowd bin (summed within a bundle)."""
OUTPUT_TYPES = {"reports": Summed, CHARGES: typing.Tuple[str, NumericCharges], DEAD_LETTERS: DeadLetterRecord,
                LATE: DeadLetterRecord, ACCOUNTING: Counted}


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
        self.rules = config.ledger_rules(max_window)
        self.first_open = first_open or {}  # stream -> its first slot a resumed checkpoint did not close

    def setup(self):
        self.users = UserClients(self.config)
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
                    tail = carried_tail(tail, output, self.rules)
                kept = reporting.slots or (before is not None and before.row is not None)
                carried = Carried(row if kept else None, ending.next_slot, ending.declared, tail,
                                  self.users.recent(earlier, made, max(ending.horizon or -1, ending.next_slot - 1)))
                outputs.append(beam.pvalue.TaggedOutput(CARRY, ((reporting.stream, reporting.user), carried)))
        return self.users.slot_sums(sums) + outputs


class _Ending(NamedTuple):
    next_slot: int
    declared: tuple | None
    horizon: int | None  # the stream's slots closed by the end of the run (the sampling methods' segments)
    present: list  # the slots the user's records make present (``UserClients.admit``)
    first_open: int = 0  # the stream's first slot a resumed checkpoint did not close


def _charges_of(reports: list, outputs: list) -> list:
    """Each user's NumericCharges among ``emit``'s outputs (None for a user without reports), in ``reports``' order."""
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
        self.rules = config.ledger_rules(max_window)
        self.resume, self.first_open = dict(resume or {}), dict(first_open or {})
        self.late = Metrics.counter(NAMESPACE, "late")
        self.duplicates = Metrics.counter(NAMESPACE, "duplicates")

    def setup(self):
        self.users = UserClients(self.config)
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
            tail = carried_tail(tail, chunk, self.rules)
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


class PrivateNumericClients(beam.PTransform):
    """Per-slot private means of numeric events, each user's client in the per-user stage (module doc)."""

    def __init__(self, mechanism: str, slot_seconds: float, domain: NumericDomain, *,
                 mechanism_params: dict | None = None, origin: float = 0.0, allowed_lateness: float = 0.0,
                 policy: RequirementPolicy | None = None, insecure_seed: int | None = None,
                 ledger_detail: bool = False, ledger_max_window: int = 1000, bounded: bool | None = None,
                 sma: int | None = None, sma_mode: str = "centered", resume: dict | None = None,
                 resume_from: str | None = None, carry: bool = False, accounting: str = "strict",
                 not_w_event_private: bool = False, release_range: tuple[float, float] | None = None,
                 checkpoint_every: int | None = None, evaluate: bool = False):
        super().__init__()
        if sma is not None:
            sma_reach(sma, sma_mode)  # refuses a bad size or mode now
        self.sma = (sma, sma_mode) if sma is not None else None
        if not isinstance(policy, RequirementPolicy):
            raise ValueError("PrivateNumericClients needs policy=RequirementPolicy(...) (RequirementPolicy() when "
                             "every event declares its own)")
        clock = SlotClock(slot_seconds, origin, allowed_lateness)
        self.config = ClientStageConfig(mechanism.lower(), domain, dict(mechanism_params or {}), clock, policy,
                                        insecure_seed, accounting, not_w_event_private,
                                        None if release_range is None else ReleaseRange.of(clock, *release_range),
                                        evaluate)
        if evaluate and bounded is not True:
            raise ValueError("evaluate is for bounded input (the true slot means of a replay)")
        if self.config.crowd is not None and sma is not None:
            raise ValueError("sma: the crowd distribution is a list of fractions per slot; its SMA is not defined")
        mechanism_built = self.config.build()
        self.method = self.config.method()
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
            if self.config.evaluate:
                types[TRUTH], tags = typing.Tuple[typing.Tuple[str, int], typing.Tuple[int, int]], tags + (TRUTH,)
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
        releaser = SlotReleases(self.config, self.method)
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
                (STREAM_ESTIMATE, r["stream"], r["slot"], r["estimate"] if crowd else r["estimate"][0],
                 r["mechanism_slot"])))) \
                .with_output_types(typing.Tuple[str, bytes])
            checkpoints = ((closed[CARRY], stamped) | "CheckpointInput" >> beam.Flatten()
                           | "Checkpoints" >> beam.ParDo(self.writer).with_output_types(CheckpointSaved))
        if self.sma is not None:
            releases = releases | "SMA" >> SmoothReleases(*self.sma, bounded=bounded)
        rules = self.config.ledger_rules(self.ledger_max_window)
        if bounded:
            ledger_fn = (CompleteNumericLedgerFn if carried is None else ResumedNumericLedgerFn)(rules,
                                                                                               self.ledger_detail)
        else:
            ledger_fn = NumericLedgerFn(rules, self.ledger_detail, {
                f"{stream}{KEY_SEPARATOR}{user}": before.tail for (stream, user), before in (self.resume or {}).items()})
        ledger = (closed[CHARGES]
                  | "PrivacyLedger" >> beam.ParDo(ledger_fn, **({} if carried is None else {"carried": carried}))
                  .with_outputs(VIOLATIONS, ENTRIES, main="usage"))
        dead_letters = (closed[LATE], closed[DEAD_LETTERS]) | "DeadLetters" >> beam.Flatten()
        accounting = closed[ACCOUNTING]
        outputs = {"releases": releases, "dead_letters": dead_letters, "usage": ledger.usage,
                   "violations": ledger[VIOLATIONS], "ledger_entries": ledger[ENTRIES], "accounting": accounting}
        if self.config.evaluate:  # NOT private: each slot's holders' count and sum of grid values
            outputs["truth"] = closed[TRUTH] | "TrueSums" >> beam.CombinePerKey(
                lambda pairs: tuple(map(sum, zip(*pairs))))
        if self.carry:
            outputs["carry"] = closed[CARRY]
            crowd = self.config.crowd is not None
            outputs["estimates"] = (releases | "StreamEstimates" >> beam.Map(
                lambda r: (r["stream"], (r["slot"], r["estimate"] if crowd else r["estimate"][0],
                                         r["mechanism_slot"])))
                | "LastEstimates" >> beam.CombinePerKey(max))
        if checkpoints is not None:
            outputs["checkpoints"] = checkpoints
        if bounded:
            outputs["accounting_totals"] = accounting | "AccountingTotals" >> beam.CombineGlobally(
                AccountingTotals()).with_output_types(typing.Dict[str, int])
        return outputs


__all__ = ["CHARGES", "CLIENTS_STREAM", "CLIENT_METHODS", "CarriedClients", "ClientStageConfig", "DEAD_LETTERS", "PARTS",
           "PrivateNumericClients", "ReportDraws", "SlotSums", "SmoothReleases", "UserAbsorptionState",
           "UserClientState", "UserSampledState", "WriteClientCheckpoints", "holds_clients_only",
           "read_clients_checkpoint", "release_record", "report_randomness", "skipped_record", "state_fn",
           "write_clients_checkpoint"]
"""The stage and, re-exported, the names its users import (they live in the modules split from this one)."""
