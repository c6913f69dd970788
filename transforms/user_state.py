"""Per-user state: one bounded contribution per user per slot, lateness, requirements.

Events are keyed by ``(stream, user)``; in batch they travel as compact
``(time, value, requirement, raw)`` tuples (the key already names the stream
and the user), in streaming one ``Event`` per element (``EventCoder``) and
the state keeps the compact tuple.  Every state cell and output has a coder
that never pickles (``transforms.coders``, ``docs/state_layout.md``).

* **Streaming**: ``UserSlotState`` is a stateful DoFn whose state cells hold
  the requirement in force, the user's last closed slot and the events of open
  slots.  An event-time timer fires when the earliest open slot
  closes (``slot end + allowed lateness``), emits that slot's contribution and
  re-arms for the next open slot.  An event for a slot already closed is late:
  it is counted and sent to the dead letters, never dropped silently.
* **Bounded input**: each bundle gathers its events per key first (a combiner
  lifted by hand: one call per event), a GroupByKey brings a key's events
  together, and ``CloseUserSlots`` closes all its slots at once, without
  state.  This avoids one timer round per slot, which costs a full pass of the runner each
  (measured: 258 records/s on FnApiRunner), a stateful call per event (about
  125 µs each), and the embedded worker's state cache, which measures every
  value it holds (milliseconds per access with ``objsize``).

Counts (late, duplicates) go to Beam metrics and, as ``(name, n)`` records, to
the ``accounting`` output, which every runner delivers (the bundle-based
DirectRunner drops metrics of later TestStream bundles).

Closed slots leave as ``(stream, packed contribution tuples)`` elements
(``records.pack_contributions``): one per user and timer firing in streaming,
one per stream and bundle in batch, never one per event.
"""

from __future__ import annotations

import typing

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from transforms.coders import DeclarationCoder, ValueCoder
from transforms.records import KEY_SEPARATOR, DeadLetterRecord, Event, dead_letter, pack_contributions
from transforms.slotting import SlotClock, close_user_slots

SEP = KEY_SEPARATOR
NAMESPACE = "wevent"
LATE = "late"
ACCOUNTING = "accounting"

UserKeyed = typing.Tuple[typing.Tuple[str, str], typing.Any]
Packed = typing.Tuple[str, bytes]
"""``(stream, records.pack_contributions bytes)``: how closed slots leave this stage."""
Counted = typing.Tuple[str, int]
"""An accounting record: ``(counter, n)``."""
OUTPUT_TYPES = {"contributions": Packed, LATE: DeadLetterRecord, ACCOUNTING: Counted}
"""The element type of each output of this stage (main: ``contributions``): Beam picks their coders by these."""


def closing_stage(closing: beam.DoFn) -> beam.ParDo:
    """``closing`` (:class:`CloseUserSlots` or :class:`UserSlotState`) as a ParDo with its typed outputs."""
    types = dict(OUTPUT_TYPES)
    return (beam.ParDo(closing).with_output_types(types.pop("contributions"), **types)
            .with_outputs(LATE, ACCOUNTING, main="contributions"))


def compact(event: Event) -> tuple:
    """What the per-user stage keeps of an event: ``(time, value, requirement, raw)``."""
    return event[2:]


def in_global_window(output):
    """An output of ``finish_bundle`` (plain or tagged), placed in the global window that bounded input uses."""
    if isinstance(output, beam.pvalue.TaggedOutput):
        return beam.pvalue.TaggedOutput(output.tag, in_global_window(output.value))
    return WindowedValue(output, MIN_TIMESTAMP, (GlobalWindow(),))


class _HeldPerBundle(beam.DoFn):
    """Bounded input: outputs held across a bundle, sent on at ``MAX_HELD`` (bounds memory) and at its end.

    Subclasses count what they hold in ``_held`` and return everything from ``_take``.
    """

    MAX_HELD: int

    def _take_if_full(self) -> list | None:
        # Not a generator: most calls emit nothing, and a generator costs an object per call.
        return self._take() if self._held >= self.MAX_HELD else None

    def finish_bundle(self):
        return map(in_global_window, self._take())

    def _take(self) -> list:
        raise NotImplementedError


class _GatherUserEvents(_HeldPerBundle):
    """Bounded input: a bundle's events per ``(stream, user)`` as one ``(key, [compact event, ...])`` each."""

    MAX_HELD = 250_000  # events held before the bundle's lists are sent on early (bounds memory)

    def start_bundle(self):
        self._lists: dict = {}
        self._held = 0

    def process(self, event):
        key = (event[0], event[1])
        held = self._lists.get(key)
        if held is None:
            self._lists[key] = [compact(event)]
        else:
            held.append(compact(event))
        self._held += 1
        return self._take_if_full()

    def _take(self) -> list:
        lists, self._lists, self._held = self._lists, {}, 0
        return list(lists.items())


class GroupUserEvents(beam.PTransform):
    """Key events by ``(stream, user)``: in batch ``(key, [[compact event, ...], ...])``, each key once; streaming
    ``(key, event)``, one event per element."""

    def __init__(self, bounded: bool):
        super().__init__()
        self.bounded = bounded

    def expand(self, events):
        if not self.bounded:  # the whole Event travels, through its registered coder (EventCoder)
            return events | "OneEventPerElement" >> beam.Map(
                lambda e: ((e[0], e[1]), e)).with_output_types(typing.Tuple[typing.Tuple[str, str], Event])
        if not isinstance(events.windowing.windowfn, GlobalWindows):
            raise ValueError("a bounded input must be in the global window (slots are the only windows)")
        return (events
                | "GatherPerBundle" >> beam.ParDo(_GatherUserEvents()).with_output_types(UserKeyed)
                | "EventsPerUser" >> beam.GroupByKey())


class CloseUserSlots(_HeldPerBundle):
    """Bounded input: closes every slot of each complete key at once, without state.

    Not a stateful DoFn (a stateful call costs about 125 µs per key), and a
    bundle's contributions leave as one ``(stream, rows)`` element per stream,
    so the release stage makes one stateful call per bundle, not one per user.
    """

    MAX_HELD = 100_000  # contributions held before they are sent on early (bounds memory and state chunks)

    def __init__(self, clock: SlotClock):
        self.clock = clock
        self.duplicates = Metrics.counter(NAMESPACE, "duplicates")

    def start_bundle(self):
        self._rows: dict = {}
        self._held = self._duplicates = 0

    def process(self, element):
        (stream, user), lists = element
        rows, duplicates, _ = close_user_slots(user, [r for held in lists for r in held], self.clock, None)
        held = self._rows.get(stream)
        if held is None:
            self._rows[stream] = rows
        else:
            held.extend(rows)
        self._held += len(rows)
        self._duplicates += duplicates
        return self._take_if_full()

    def _take(self) -> list:
        outputs = [(stream, pack_contributions(rows)) for stream, rows in self._rows.items()]
        if self._duplicates:
            self.duplicates.inc(self._duplicates)
            outputs.append(beam.pvalue.TaggedOutput(ACCOUNTING, ("duplicates", self._duplicates)))
        self._rows, self._held, self._duplicates = {}, 0, 0
        return outputs


def hold_event(stage, element, events_state, last_closed_state, next_close_state, close):
    """Streaming: hold one keyed event until its slot closes (arming the timer), or dead-letter it as late.

    ``stage`` has ``clock`` and the ``late`` counter (:class:`UserSlotState` and stages that extend its cells)."""
    (stream, user), event = element
    report = compact(event)
    slot = stage.clock.slot_of(report[0])
    last_closed = last_closed_state.read()
    if last_closed is not None and slot <= last_closed:
        stage.late.inc()
        yield beam.pvalue.TaggedOutput(ACCOUNTING, ("late", 1))
        yield beam.pvalue.TaggedOutput(LATE, dead_letter(
            f"late: slot {slot} closed (allowed lateness {stage.clock.allowed_lateness:g}s)",
            report[3], "user_slot_state", stream, user))
        return
    events_state.add(report)
    pending = next_close_state.read()
    if pending is None or slot < pending:
        next_close_state.write(slot)
        close.set(Timestamp(micros=stage.clock.close_micros(slot)))


def take_due(stage, fired, events_state, next_close_state, close) -> list:
    """The held events of the slots closed at ``fired`` (taken out); re-arms the timer for the others."""
    reports = list(events_state.read())
    events_state.clear()
    due, later = [], []
    slot_of, close_micros = stage.clock.slot_of, stage.clock.close_micros
    for report in reports:
        (due if close_micros(slot_of(report[0])) <= fired.micros else later).append(report)
    for report in later:
        events_state.add(report)
    if later:
        earliest = min(slot_of(r[0]) for r in later)
        next_close_state.write(earliest)
        close.set(Timestamp(micros=close_micros(earliest)))
    else:
        next_close_state.clear()
    return due


class UserSlotState(beam.DoFn):
    """Streaming: closes each user's slots as event time passes: dedupes, applies lateness and the requirement in
    force."""

    EVENTS = BagStateSpec("events", ValueCoder())  # compact events: (time, value, declaration, raw)
    REQUIREMENT = ReadModifyWriteStateSpec("requirement", DeclarationCoder())
    LAST_CLOSED = ReadModifyWriteStateSpec("last_closed", VarIntCoder())
    NEXT_CLOSE = ReadModifyWriteStateSpec("next_close", VarIntCoder())
    CLOSE = TimerSpec("close", TimeDomain.WATERMARK)

    def __init__(self, clock: SlotClock):
        self.clock = clock
        self.late = Metrics.counter(NAMESPACE, "late")
        self.duplicates = Metrics.counter(NAMESPACE, "duplicates")

    def process(self, element, events_state=beam.DoFn.StateParam(EVENTS),
                last_closed_state=beam.DoFn.StateParam(LAST_CLOSED),
                next_close_state=beam.DoFn.StateParam(NEXT_CLOSE), close=beam.DoFn.TimerParam(CLOSE)):
        return hold_event(self, element, events_state, last_closed_state, next_close_state, close)

    @on_timer(CLOSE)
    def on_close(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                 events_state=beam.DoFn.StateParam(EVENTS), requirement_state=beam.DoFn.StateParam(REQUIREMENT),
                 last_closed_state=beam.DoFn.StateParam(LAST_CLOSED),
                 next_close_state=beam.DoFn.StateParam(NEXT_CLOSE), close=beam.DoFn.TimerParam(CLOSE)):
        due = take_due(self, fired, events_state, next_close_state, close)
        if due:
            yield from self._close(key, due, requirement_state, last_closed_state)

    def _close(self, key, reports, requirement_state, last_closed_state):
        """Close the slots of ``reports`` (all due)."""
        rows = yield from close_due(self, key[1], reports, requirement_state, last_closed_state)
        if rows:
            yield key[0], pack_contributions(rows)


def close_due(stage, user: str, reports: list, requirement_state, last_closed_state):
    """Streaming: the contribution rows of ``user``'s due ``reports`` (returned; the duplicates counted and
    yielded as accounting), the requirement in force and the last closed slot written to their cells.

    ``stage`` has ``clock`` and the ``duplicates`` counter (:class:`UserSlotState` and stages that extend its
    cells)."""
    rows, duplicates, in_force = close_user_slots(user, reports, stage.clock, requirement_state.read())
    requirement_state.write(in_force)
    last_closed_state.write(max(stage.clock.slot_of(r[0]) for r in reports))
    if duplicates:
        stage.duplicates.inc(duplicates)
        yield beam.pvalue.TaggedOutput(ACCOUNTING, ("duplicates", duplicates))
    return rows
