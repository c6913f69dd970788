"""The numeric per-user stage's releases (``transforms.numeric_clients``): the slots' exact sums of reports
(:class:`SlotSums`), every slot of a stream released in order as the central path releases it (:class:`SlotReleases`;
streaming: :class:`ReleaseStreamSlots`), skipped slots repeating the last estimate, the crowd distribution's counts.
"""

from __future__ import annotations

import logging

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.coders import FloatCoder, TupleCoder, VarIntCoder
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from transforms.coders import SlotSumCoder, ValueCoder
from transforms.engine import ReleaseConfig
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.numeric_records import REPORT_SCALE, SlotSum
from transforms.numeric_user_methods import UserMethod
from transforms.records import ReleaseRecord
from transforms.user_state import NAMESPACE
from transforms.numeric_stage_config import ClientStageConfig

_LOGGER = logging.getLogger(__name__)


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


def release_record(element, config, method: UserMethod, trust: str = "local_simulated") -> ReleaseRecord:
    """A slot's release (``schemas/release.avsc``) from its reports' exact sum, in the domain's units: the
    estimate, statistic and predicted error of the method's estimator (``method.estimator``, the registered
    mechanism's).  ``config`` has the mechanism's name, the domain and the slot clock
    (:class:`ClientStageConfig`, or the device reports' ``DeviceStreamConfig``)."""
    (stream, slot), (n, total, units) = element
    Metrics.counter(NAMESPACE, "slots_fresh").inc()
    domain, clock, estimator = config.domain, config.clock, method.estimator
    unit = estimator.unit_estimate(total / (n * REPORT_SCALE))  # int / int: correctly rounded
    estimate = float(domain.low) + domain.width * unit
    return ReleaseRecord({
        "stream": stream, "slot": slot, "slot_start": clock.start(slot), "slot_end": clock.end(slot),
        "mechanism": config.mechanism, "mechanism_slot": slot, "histogram": [round(estimate * n)],
        "kind": "fresh", "epsilon": units_to_decimal_string(units),
        "predicted_error": estimator.predicted_error(n, domain.width), "registered_users": None, "reporters": n,
        "statistic": estimator.statistic,
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

    def __init__(self, config: ClientStageConfig, method: UserMethod):
        self.config, self.method = config, method
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

    def release(self, stream: str, sums: dict, next_slot: int, estimate, last: int, crowd: dict | None = None,
                counted: int = 0) -> tuple[list, int, float, int]:
        """Slots ``next_slot .. last`` of ``stream`` from ``sums`` (slot -> SlotSum, all in that span): the
        records, the next slot, the last estimate and the slots released so far (with ``crowd``, slot -> bin
        counts: the crowd distribution's releases, the estimate a list of fractions).  ``counted``: the stream's
        slots released before (a resumed run's carried count); each record's ``mechanism_slot`` is its 1-based
        place in the stream's series, as the simulated mechanisms number their steps."""
        statistic = self.method.estimator.statistic if crowd is None else "distribution"
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
                    records.append(release_record(((stream, upcoming), sums[upcoming]), self.config, self.method))
                    estimate = records[-1]["estimate"][0]
                else:
                    records.append(skipped_record(stream, upcoming, estimate, self.config, self.method,
                                                  statistic=statistic))
            slot = upcoming + 1
        for place, record in enumerate(records, counted + 1):
            record["mechanism_slot"] = place
        return records, max(next_slot, last + 1), estimate, counted + len(records)

    def bounded(self, element, first_open: dict, estimates: dict) -> list:
        """Bounded input: ``(stream, all its (slot, SlotSum))``, released up to its last present slot (or the
        range's last); a resumed stream from its first open slot, repeating its carried last estimate."""
        stream, slot_sums = element
        sums = self.in_range(dict(slot_sums))
        start = self.first(sums, first_open.get(stream, 0))
        last = self.range.last_slot if self.range is not None else max(sums)
        carried = estimates.get(stream, (0, 0.0))
        return self.release(stream, sums, start, carried[1], last, counted=carried_count(carried))[0]

    def bounded_crowd(self, element, first_open: dict, estimates: dict) -> list:
        """:meth:`bounded` for the crowd distribution: ``(stream, {"sums": (slot, SlotSum)s, "crowd": (slot,
        counts)s})``; a resumed stream repeats its carried last distribution."""
        stream, joined = element
        sums = self.in_range(dict(joined["sums"]))
        start = self.first(sums, first_open.get(stream, 0))
        last = self.range.last_slot if self.range is not None else max(sums)
        carried = estimates.get(stream, (0, [0.0] * self.config.crowd[1]))
        return self.release(stream, sums, start, list(carried[1]), last, dict(joined["crowd"]),
                            carried_count(carried))[0]


def carried_count(carried: tuple) -> int:
    """The slots a checkpoint says its stream released, from its carried ``(slot, estimate, released)`` (0 for a
    checkpoint written before the count was carried: numbering restarts)."""
    return int(carried[2]) if len(carried) > 2 else 0


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
    COUNTED = ReadModifyWriteStateSpec("counted", VarIntCoder())  # the stream's slots released so far
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
        arm_timer(armed, release, max(self.clock.release_micros(slot), timestamp.micros))

    @on_timer(RELEASE)
    def on_release(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                   pending=beam.DoFn.StateParam(PENDING), crowd_state=beam.DoFn.StateParam(CROWD),
                   next_slot_state=beam.DoFn.StateParam(NEXT_SLOT), estimate_state=beam.DoFn.StateParam(ESTIMATE),
                   distribution_state=beam.DoFn.StateParam(DISTRIBUTION), armed=beam.DoFn.StateParam(ARMED),
                   counted_state=beam.DoFn.StateParam(COUNTED), release=beam.DoFn.TimerParam(RELEASE)):
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
        counted = counted_state.read() or 0
        if next_slot is None and key in self.first_open:  # a resumed stream continues where its checkpoint ended
            carried = self.estimates.get(key, (0, None))
            next_slot, estimate, counted = self.first_open[key], carried[1], carried_count(carried)
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
                records, next_slot, estimate, counted = self.releases.release(key, due, next_slot, estimate or 0.0,
                                                                              last, counted=counted)
            else:
                records, next_slot, estimate, counted = self.releases.release(
                    key, due, next_slot, list(estimate or [0.0] * crowd[1]), last, crowd_due, counted)
            next_slot_state.write(next_slot)
            estimate_state.write(estimate)
            counted_state.write(counted)
        if later:
            arm_timer(armed, release, self.clock.release_micros(min(slot for slot, _ in later)))
        elif release_range is not None and next_slot <= release_range.last_slot:
            # no report is held, but the range's remaining slots are released when they close, data or not
            at = min(self.clock.release_micros(release_range.last_slot), GlobalWindow().max_timestamp().micros)
            if at > fired.micros:  # (a range ending past Beam's last timestamp is not re-armed for ever)
                arm_timer(armed, release, at)
        return records


def crowd_slot_sums(element) -> list:
    """Streaming: a crowd entry ``((stream, slot), counts)`` as the release stage's input ``(stream, (slot,
    SlotSum(-1 - bin, users, 0)))``, one per non-empty bin (a negative count marks it: no slot has fewer than 0
    reports)."""
    (stream, slot), counts = element
    return [(stream, (slot, SlotSum(-1 - index, users, 0))) for index, users in enumerate(counts) if users]


def arm_timer(armed, release, at: int) -> None:
    """Set the ``release`` timer for ``at`` µs unless it is already set earlier."""
    pending = armed.read()
    if pending is None or at < pending:
        armed.write(at)
        release.set(Timestamp(micros=at))
