"""Numeric device reports released slot by slot: :func:`release_numeric_stream`, the Beam-free core of
``pipelines.client_replay --domain``, and :class:`StreamNumericReports`, the same checks on unbounded input
(``pipelines.streaming --clients --domain``: each device's reports held in state cells until their slot closes).

The devices (``device.numeric_client.NumericClient``) run every numeric method of seed 003 themselves and send
reports (``schemas/report.avsc``, oracle ``"sw"``, payload: square wave output cells).  Every method's schedule
is public, so the collector checks each report against it without asking:

* SW-direct / IPP / APP / CAPP: every holder reports every slot at ``ε/(w + h)``, payload ``[j]``;
* PP-S / APP-S / CAPP-S / Sampling: one report per segment, at the segment's last slot (segments of the public
  length ``segment`` aligned on the slot numbers), at ``ε/(n_w + h)``; a report at another slot is refused;
* BA-SW: the collector replays the public absorption rule on each user's accepted reports in slot order (the
  nullified slots, the absorbed shares, the dissimilarity report against the half-band): the payload must hold
  exactly the parts the rule gives (``[dissimilarity]``, ``[dissimilarity, publication]``, at the first report
  ``[publication]``) at their budgets; the slot's value is the user's release (a new publication or the last);
* ToPL: ``[j]``, the PM cell (a square wave with PM's half-band) at ``ε/w``.

Each report must name a registered user, the method, ``epsilon`` equal to the schedule's budget,
``realised_epsilon`` equal to that of the randomizers, ``domain_size`` 1 and cells of the randomizers, at most
one report per user and slot (a second one is a duplicate).  Anything else is a dead letter with its reason;
nothing is charged or counted for it.  No numeric method's schedule depends on collector-side private state, so
none is refused before the job.

Each slot with accepted reports releases a ``schemas/release.avsc`` record (the streaming job's, dated by the
slot clock): the method's estimate and predicted error (``transforms.mechanisms.numeric.estimates``, as the
central and per-user paths: de-biased for SW-direct and ToPL, the raw ``report_mean`` with a worst-case bound
for the methods with memory), the reporters as ``reporters``, the most a report of the slot was charged as
``epsilon``.  Dead letters and duplicates are
``schemas/dead_letter.avsc`` records (stage ``numeric_reports``).  The sum is exact (every report
value is a dyadic rational, summed as an integer times ``2**64``), so the order the reports arrive in cannot
change a bit.  A slot between the first and last report of a stream without any accepted report repeats the
last estimate (``kind`` ``skipped``, as the central path; the sampling methods' slots between segment ends).
The users' declared ``(w_i, E_i)`` must accept the mechanism's ``(w, ε)`` (checked before the job starts); the
ledger's verdict is the numeric ledger's (``transforms.numeric_ledger``): each accepted report's least charge
rebuilt from the public schedule, and every memory-aware window of ``w_i + reach`` slots within ``E_i``.
"""

from __future__ import annotations

import json
import typing
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import apache_beam as beam
import numpy as np
from apache_beam.coders import VarIntCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import FixedWindows, GlobalWindows
from apache_beam.utils.timestamp import Timestamp

from transforms.coders import ValueCoder
from transforms.ledger import ENTRIES, VIOLATIONS, empty_tail
from transforms.mechanisms import make_mechanism
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.ldp.client import (
    DUPLICATE_REPORT,
    REPORT_FIELDS,
    ReportRejected,
    exact_units,
    report_record,
)
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS
from transforms.numeric_clients import (
    CHARGES,
    DEAD_LETTERS,
    SlotSums,
    release_record,
    skipped_record,
)
from transforms.numeric_events import NumericDomain
from transforms.numeric_user_clients import scaled_report
from transforms.mechanisms.public_schedule.numeric_plan import NumericPlan
from transforms.numeric_ledger import LedgerRules, NumericLedgerFn, check_reports
from transforms.numeric_records import NumericCharges, SlotSum
from transforms.numeric_user_methods import user_method
from transforms.records import KEY_SEPARATOR, DeadLetterRecord, ReleaseRecord, dead_letter
from transforms.slotting import SlotClock
from transforms.user_state import LATE

DEVICE_METHODS = tuple(NUMERIC_STREAMS)
"""The numeric methods whose device reports are replayed: all of them (every schedule is public)."""
NUMERIC_ORACLE = "sw"
"""The oracle a numeric device report names: the Square Wave (ToPL's PM is a square wave with PM's half-band)."""

_STREAM, _USER, _SLOT = (REPORT_FIELDS.index(name) for name in ("stream", "user", "slot"))


@dataclass(frozen=True)
class NumericReportConfig:
    """The method, its parameters (grid units, from ``NumericDomain.mechanism_params``), the interval, the
    registered devices and their fixed requirements (public)."""

    mechanism: str
    params: dict
    domain: NumericDomain
    user_ids: tuple[str, ...]
    windows: tuple[int, ...]
    epsilon_units: tuple[int, ...]

    def __post_init__(self):
        if self.mechanism not in DEVICE_METHODS:
            raise ValueError(f"device reports of {self.mechanism} cannot be replayed: the numeric devices run "
                             f"{', '.join(DEVICE_METHODS)}")
        if len(set(self.user_ids)) != len(self.user_ids) or not self.user_ids:
            raise ValueError("the registered devices must be listed, each once")
        params = self.build().params
        for user, window, units in zip(self.user_ids, self.windows, self.epsilon_units):
            if window > params.window or units < params.epsilon_units:
                raise ValueError(f"user {user!r} declares (w={window}, E={units_to_decimal_string(units)}), which "
                                 f"{self.mechanism} at (w={params.window}, ε={units_to_decimal_string(params.epsilon_units)}) "
                                 "does not honour")

    def build(self):
        return make_mechanism(self.mechanism, **self.params)

    def ledger_rules(self, max_window: int | None = None) -> LedgerRules:
        """What the ledger checks the accepted reports with: the method's public schedule (built from the public
        parameters by ``public_schedule.numeric_plan``, not from the collector's own waves)."""
        method = user_method(self.build())
        plan = NumericPlan.of(self.mechanism, json.loads(self.build().params.to_json()),
                              getattr(method, "segment", None))
        return LedgerRules(plan, max_window or max(self.windows))


class _Schedule:
    """What every report of the configuration must say, and the checks (module doc)."""

    def __init__(self, config: NumericReportConfig):
        self.method = config.mechanism
        self.user_method = user_method(config.build())
        self.index_of = {user: i for i, user in enumerate(config.user_ids)}
        self.absorption = getattr(self.user_method, "params", None)  # BA-SW: its waves by shares
        self.client = getattr(self.user_method, "client", None)  # the per-report methods' client (ToPL: None)
        self.wave = self.client.sw if self.client is not None else self.user_method.wave
        self.segment = getattr(self.user_method, "segment", None)
        self.absorbed: dict[int, list] = defaultdict(lambda: [0.0, -1, 1, 0])  # BA-SW: published, last, shares, age

    def check(self, report: tuple) -> tuple[int, int, int, tuple[int, int, int, int]]:
        """``(user index, report value·2**64, realised units, parts)`` of an acceptable report, ``parts`` its
        ``(dissimilarity charge, publication charge, dissimilarity budget, publication budget)`` (what the ledger
        derives the least charge from); ReportRejected with the reason otherwise.  BA-SW's reports must come in
        slot order per user (its rule reads the earlier ones)."""
        _, _, user, slot, method, oracle, epsilon, realised, d, payload = report
        index = self.index_of.get(user) if isinstance(user, str) else None
        if index is None:
            raise ReportRejected(f"unknown user {user!r}")
        if slot < 0:
            raise ReportRejected(f"report for slot {slot}: slots start at 0")
        if method != self.method:
            raise ReportRejected(f"report for method {method!r}, not {self.method!r}")
        if oracle != NUMERIC_ORACLE or d != 1:
            raise ReportRejected(f"report through {oracle!r} over {d!r} values, not sw over 1")
        if type(payload) is not list or not payload or any(type(cell) is not int for cell in payload):
            raise ReportRejected("malformed report: the payload must be a list of integer cells")
        if self.segment is not None and (slot + 1) % self.segment:
            raise ReportRejected(f"report for slot {slot}: the schedule reports at the last slot of each segment "
                                 f"of {self.segment}")
        if self.absorption is not None:
            return self._absorb(index, epsilon, realised, payload)
        _expect(epsilon, realised, self.wave.epsilon_units, self.wave.realised_units)
        if len(payload) != 1:
            raise ReportRejected("malformed report: the payload must be [cell], one integer")
        value = _cell_value(self.wave, payload[0])
        if self.client is not None and self.client.bounds[:2] != (0.0, 1.0):  # CAPP's output bounds: still dyadic
            low, high = (Fraction(b) for b in self.client.bounds[:2])
            value = low + (high - low) * value
        units = self.wave.realised_units
        return index, scaled_report(float(value)), units, (0, units, 0, self.wave.epsilon_units)

    def _absorb(self, index: int, epsilon, realised, payload: list) -> tuple[int, int, int, tuple]:
        """BA-SW's public rule on the user's accepted reports so far: the expected parts and budgets."""
        published, last, shares, age = self.absorbed[index]
        first, params = last < 0, self.absorption
        one = params.wave(1)
        k = 1 if first else min(max(age - (last + shares - 1), 1), params.window)
        wave = params.wave(k)
        if first:
            publish = True
        else:
            dissimilarity = abs(_cell_value(one, payload[0]))
            publish = age - last > shares - 1 and dissimilarity > wave.b
        parts = ([] if first else [one]) + ([wave] if publish else [])
        if len(payload) != len(parts):
            raise ReportRejected(f"the absorption rule makes this report {len(parts)} cell(s), not {len(payload)}")
        _expect(epsilon, realised, sum(w.epsilon_units for w in parts), sum(w.realised_units for w in parts))
        cells = [_cell_value(w, cell) for w, cell in zip(parts, payload)]
        if publish:
            published, last, shares = float(cells[-1]), age, k
        self.absorbed[index] = [published, last, shares, age + 1]
        dc = (0, 0) if first else (one.realised_units, one.epsilon_units)
        pub = (wave.realised_units, wave.epsilon_units) if publish else (0, 0)
        return index, scaled_report(published), dc[0] + pub[0], (dc[0], pub[0], dc[1], pub[1])


def _expect(epsilon, realised, units: int, realised_units: int) -> None:
    """Refuse a report whose budget or realised epsilon is not the schedule's."""
    if epsilon != units_to_decimal_string(units) and (not isinstance(epsilon, str) or exact_units(epsilon) != units):
        raise ReportRejected(f"report at epsilon {epsilon!r}, not the schedule's {units_to_decimal_string(units)}")
    if realised != units_to_decimal_string(realised_units) and (not isinstance(realised, str)
                                                                 or exact_units(realised) != realised_units):
        raise ReportRejected(f"realised epsilon {realised!r} is not the square wave's "
                             f"{units_to_decimal_string(realised_units)}")


def _cell_value(wave, cell: int) -> Fraction:
    """The value of ``cell`` of ``wave`` (``(j + 1/2)/m``); ReportRejected outside its cells."""
    if not -wave.half_band <= cell < wave.steps + wave.half_band:
        raise ReportRejected(f"report outside the domain: the square wave's cells are "
                             f"[{-wave.half_band}, {wave.steps + wave.half_band})")
    return Fraction(2 * cell + 1, 2 * wave.steps)


def release_numeric_stream(config: NumericReportConfig, stream: str, reports: Iterable[tuple],
                           clock: SlotClock | None = None) -> Iterator[tuple[str, dict]]:
    """``("release", record)`` per slot of ``stream`` (``schemas/release.avsc``, dated by ``clock``; default slots of
    one second from 0), ``("dead", record)`` per rejected report (``schemas/dead_letter.avsc``; ``"duplicate"`` for a
    second report of a user in a slot), and last ``("ledger", {...})``: the exact per-user window check.  BA-SW's
    reports are checked in slot order per user (its public rule reads the earlier accepted ones)."""
    schedule = _Schedule(config)
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])  # reports, their sum·2**64, the most charged
    seen: set[tuple[int, int]] = set()
    charges_of: dict[int, list[tuple]] = defaultdict(list)

    def refused(reason: str, report: tuple) -> DeadLetterRecord:
        return dead_letter(reason, _raw(report), "numeric_reports", stream,
                           report[_USER] if isinstance(report[_USER], str) else None)

    if schedule.absorption is not None:
        reports = sorted(reports, key=lambda r: (r[_SLOT], str(r[_USER])) if isinstance(r[_SLOT], int) else (-1, ""))
    for report in reports:
        if schedule.absorption is not None and (schedule.index_of.get(report[_USER]), report[_SLOT]) in seen:
            yield "duplicate", refused(DUPLICATE_REPORT, report)
            continue  # before the rule reads it: a second report of a slot must not advance the user's state
        try:
            index, scaled, units, parts = schedule.check(report)
        except ReportRejected as reason:
            yield "dead", refused(str(reason), report)
            continue
        if (index, report[_SLOT]) in seen:
            yield "duplicate", refused(DUPLICATE_REPORT, report)
            continue
        seen.add((index, report[_SLOT]))
        charges_of[index].append((report[_SLOT], *parts))
        held = sums[report[_SLOT]]
        held[0] += 1
        held[1] += scaled
        held[2] = max(held[2], units)
    if not sums:
        return
    dated = DeviceStreamConfig(config, clock or SlotClock(1.0))
    method = schedule.user_method
    estimate = None  # the first slot always has reports
    for slot in range(min(sums), max(sums) + 1):
        n, total, units = sums.get(slot, (0, 0, 0))
        if n:  # epsilon: the most a report of the slot was charged (realised), as the streaming job releases
            record = release_record(((stream, slot), (n, total, units)), dated, method, "local_client")
            estimate = record["estimate"][0]
            yield "release", record
        else:
            yield "release", skipped_record(stream, slot, estimate, dated, method, "local_client")
    violations, worst = _window_check(config, charges_of)
    yield "ledger", {"stream": stream, "reports_used": len(seen), "violations": violations,
                     "max_window_usage_ratio": worst}


def _window_check(config: NumericReportConfig, charges_of: dict[int, list[tuple]]) -> tuple[int, float]:
    """Users with a violation among their accepted reports (``(slot, dissimilarity charge, publication charge,
    dissimilarity budget, publication budget)``) and the largest usage: the numeric ledger's check
    (``transforms.numeric_ledger``: least charges from the public schedule, memory-aware windows of each user's
    ``(w_i, E_i)``)."""
    rules = config.ledger_rules()
    violations, worst = 0, 0.0
    for index, charges in charges_of.items():
        charges.sort()
        table = [(*charge, config.windows[index], config.epsilon_units[index]) for charge in charges]
        _, most, found, _ = check_reports(empty_tail(), NumericCharges(str(index), np.array(table, np.int64),
                                                                         "fixed", True, True), rules)
        violations += bool(found)
        worst = max(worst, most)
    return violations, worst


# ---------------------------------------------------------------------------------------------- streaming (Beam)


@dataclass(frozen=True)
class DeviceStreamConfig:
    """A streaming job's numeric device reports: the replay's configuration and the slot clock (slot ``t`` closes
    when the watermark passes ``clock.close_time(t)``: a report for it after that is late)."""

    reports: NumericReportConfig
    clock: SlotClock

    @property
    def mechanism(self) -> str:
        return self.reports.mechanism

    @property
    def domain(self) -> NumericDomain:
        return self.reports.domain


class DeviceReportCells(beam.DoFn):
    """Streaming, keyed by ``(stream, user)``: a device's reports wait in ``reports`` until their slot closes (the
    event-time timer ``close``), then go through the schedule's checks in slot order (BA-SW's public rule from the
    user's ``absorbed`` cell); each accepted report leaves as its slot's partial sum and its charge.  A report for a
    closed slot is late, a second one of a slot a duplicate, a refused one a dead letter with its reason."""

    REPORTS = BagStateSpec("reports", ValueCoder())  # compact reports (schemas/report.avsc fields)
    LAST_CLOSED = ReadModifyWriteStateSpec("last_closed", VarIntCoder())
    NEXT_CLOSE = ReadModifyWriteStateSpec("next_close", VarIntCoder())
    ABSORBED = ReadModifyWriteStateSpec("absorbed", ValueCoder())  # BA-SW: [published, last, shares, age]
    CLOSE = TimerSpec("close", TimeDomain.WATERMARK)

    def __init__(self, config: DeviceStreamConfig):
        self.config = config

    def setup(self):
        self.schedule = _Schedule(self.config.reports)

    def process(self, element, reports=beam.DoFn.StateParam(REPORTS),
                last_closed=beam.DoFn.StateParam(LAST_CLOSED), next_close=beam.DoFn.StateParam(NEXT_CLOSE),
                close=beam.DoFn.TimerParam(CLOSE)):
        (stream, user), report = element
        slot, last = report[_SLOT], last_closed.read()
        if last is not None and slot <= last:
            yield beam.pvalue.TaggedOutput(LATE, dead_letter(f"late: slot {slot} closed", _raw(report),
                                                             "numeric_reports", stream, user))
            return
        reports.add(report)
        pending = next_close.read()
        if pending is None or slot < pending:
            next_close.write(slot)
            close.set(Timestamp(micros=self.config.clock.close_micros(slot)))

    @on_timer(CLOSE)
    def on_close(self, key=beam.DoFn.KeyParam, reports=beam.DoFn.StateParam(REPORTS),
                 last_closed=beam.DoFn.StateParam(LAST_CLOSED), next_close=beam.DoFn.StateParam(NEXT_CLOSE),
                 close=beam.DoFn.TimerParam(CLOSE), absorbed=beam.DoFn.StateParam(ABSORBED)):
        stream, user = key
        armed, held = next_close.read(), list(reports.read())
        reports.clear()
        due = sorted((r for r in held if r[_SLOT] <= armed), key=lambda r: r[_SLOT])  # stable: arrival order
        later = [r for r in held if r[_SLOT] > armed]
        for report in later:
            reports.add(report)
        next_close.clear()
        if later:
            next_close.write(min(r[_SLOT] for r in later))
            close.set(Timestamp(micros=self.config.clock.close_micros(min(r[_SLOT] for r in later))))
        last_closed.write(armed)
        schedule, index = self.schedule, self.schedule.index_of.get(user)
        if index is not None and schedule.absorption is not None:
            schedule.absorbed[index] = absorbed.read() or [0.0, -1, 1, 0]
        seen, charges = set(), []
        for report in due:
            if schedule.absorption is not None and report[_SLOT] in seen:
                yield _refused(DUPLICATE_REPORT, report, stream, user)
                continue
            try:
                index, scaled, units, parts = schedule.check(report)
            except ReportRejected as reason:
                yield _refused(str(reason), report, stream, user)
                continue
            if report[_SLOT] in seen:
                yield _refused(DUPLICATE_REPORT, report, stream, user)
                continue
            seen.add(report[_SLOT])
            yield (stream, report[_SLOT]), SlotSum(1, scaled, units)
            charges.append((report[_SLOT], *parts, self.config.reports.windows[index],
                            self.config.reports.epsilon_units[index]))
        if index is not None and schedule.absorption is not None:
            absorbed.write(schedule.absorbed.pop(index))
        if charges:
            name = f"{stream}{KEY_SEPARATOR}{user}"
            yield beam.pvalue.TaggedOutput(CHARGES, (name, NumericCharges(name, np.array(charges, np.int64), "fixed",
                                                                          False, False)))


def _raw(report: tuple) -> str:
    return json.dumps(report_record(report), sort_keys=True)


def _refused(reason: str, report: tuple, stream: str, user) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(DEAD_LETTERS, dead_letter(reason, _raw(report), "numeric_reports", stream,
                                                              user if isinstance(user, str) else None))


class StreamNumericReports(beam.PTransform):
    """Numeric device reports on an unbounded source (``(stream, compact report)`` elements, event time = when they
    were sent): each slot's release once the watermark passes its close (the exact average, as
    :func:`release_numeric_stream`; trust ``local_client``), dead letters and late reports, the per-user ledger."""

    def __init__(self, config: DeviceStreamConfig, ledger_max_window: int = 1000):
        super().__init__()
        self.config = config
        self.method = _Schedule(config.reports).user_method
        self.ledger_max_window = max(ledger_max_window, max(config.reports.windows))

    def expand(self, reports):
        clock = self.config.clock
        closed = (reports
                  | "ByUser" >> beam.Map(lambda sr: ((sr[0], sr[1][_USER]), sr[1])).with_output_types(
                      typing.Tuple[typing.Tuple[str, typing.Any], typing.Any])
                  | "DeviceReports" >> beam.ParDo(DeviceReportCells(self.config)).with_outputs(
                      CHARGES, DEAD_LETTERS, LATE, main="sums"))
        sums = (closed.sums
                | "SlotWindows" >> beam.WindowInto(FixedWindows(
                    clock.slot_seconds, offset=(clock.origin + clock.allowed_lateness) % clock.slot_seconds))
                | "SlotSums" >> beam.CombinePerKey(SlotSums())
                | "Global" >> beam.WindowInto(GlobalWindows()))
        releases = sums | "Release" >> beam.Map(release_record, self.config, self.method,
                                                 "local_client").with_output_types(ReleaseRecord)
        ledger = (closed[CHARGES] | "PrivacyLedger" >> beam.ParDo(NumericLedgerFn(self.config.reports.ledger_rules(
            self.ledger_max_window)))
                  .with_outputs(VIOLATIONS, ENTRIES, main="usage"))
        dead = (closed[LATE], closed[DEAD_LETTERS]) | "DeadLetters" >> beam.Flatten()
        return {"releases": releases, "dead_letters": dead, "usage": ledger.usage, "violations": ledger[VIOLATIONS]}
