"""The paper's simple moving average of released numeric series (spec §3.5), bounded (:func:`smoothed`) and
streaming (:class:`SmoothStreamReleases`); :class:`SmoothReleases` picks one.  ``figures["sma"]`` of each release.
"""

from __future__ import annotations

import math
import typing

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.coders import VarIntCoder
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from transforms.coders import ReleaseRecordCoder, ValueCoder
from transforms.mechanisms.numeric import server
from transforms.records import ReleaseRecord




def sma_reach(size: int, mode: str) -> tuple[int, int]:
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
    before, after = sma_reach(size, mode)
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
        self.before, self.after = sma_reach(size, mode)

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
        sma_reach(size, mode)
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
