"""Real event streams for the evaluation harness: records -> each user's carried-forward bin per slot.

The papers' real datasets (spec/pwsm.md §5.1) and any event file the replay job reads become one
:class:`EventStream`, built with the pipeline's own stages run in-process (no Beam):

* records come from :mod:`transforms.loaders` (T-Drive, check-ins) or the replay formats (JSONL,
  CSV, Avro, Parquet), are parsed and binned by :func:`transforms.parse.parse_record` with a binner
  from :mod:`transforms.binning` (a record outside the grid is a dead letter, i.e. dropped);
* each user's events are cut into slots by :func:`transforms.slotting.close_slots` (one
  contribution per user and slot, the latest event wins; the rest are duplicates);
* the value of a user at slot t is the bin of their latest contribution at or before t (carry
  forward, the papers' taxi preprocessing [RC]); before their first contribution a user has no
  value and is absent (the reference code back-fills the first cell; that would use future data).

Declarations in the data are ignored: the evaluation assigns the papers' requirements itself.
Slot 0 starts at the first valid event, floored to a multiple of the slot length.
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from transforms.binning import GridBins, binner_from_spec
from transforms.loaders import text_lines, iter_checkins, iter_tdrive
from transforms.parse import FieldMapping, ParseConfig, parse_record
from transforms.records import NO_VALUE, Event
from transforms.sinks import read_records
from transforms.slotting import SlotClock, close_slots

DEFAULT_DATA_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                 "shared", "data"))
"""``../shared/data`` beside the repository: read-only, never copied into the project (licences)."""

INPUT_FORMATS = ("jsonl", "csv", "avro", "parquet", "tdrive", "checkins")

FOURSQUARE_GRID = GridBins(-125.0, -66.0, 24.0, 50.0, 10, 10)
"""10 x 10 grid over the contiguous US (lat [24, 50) x lon [-125, -66)); the subset has no countries to bin by."""


class DataUnavailable(Exception):
    """A real dataset's files are not on this machine: the dataset is skipped, saying why."""


@dataclass(frozen=True)
class EventSource:
    """Where a real stream's records come from and how they become bins and slots."""

    name: str
    description: str
    inputs: tuple[str, ...]
    input_format: str
    binning: str | GridBins
    slot_seconds: float
    poi: str | None = None
    fields: FieldMapping = field(default_factory=FieldMapping)
    csv_columns: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(f"input format must be one of {', '.join(INPUT_FORMATS)}, got {self.input_format!r}")
        if not (math.isfinite(self.slot_seconds) and self.slot_seconds > 0):
            raise ValueError(f"slot seconds must be a positive number, got {self.slot_seconds!r}")

    @property
    def binner(self):
        return self.binning if isinstance(self.binning, GridBins) else binner_from_spec(self.binning)

    def parse_config(self) -> ParseConfig:
        """The replay job's parse configuration for this source (integer bins of event files read ``value``)."""
        binner = self.binner
        file_format = self.input_format if self.input_format in ("jsonl", "csv") else "record"
        plain_integer = isinstance(self.binning, str) and self.binning.strip().lower().startswith("int:") \
            and self.input_format in ("jsonl", "csv", "avro", "parquet")
        return ParseConfig(bins=binner.bins, file_format=file_format, fields=self.fields,
                           to_bin=None if plain_integer else binner, csv_columns=self.csv_columns)


def taxi_source(data_dir: str = DEFAULT_DATA_DIR) -> EventSource:
    """T-Drive (spec §5.1): taxis are users, their 10 x 10 grid cell per 1-minute slot."""
    path = os.path.join(data_dir, "tdrive_sample600", "taxi_log_2008_by_id.tar.xz")
    _require(path, "taxi")
    return EventSource("taxi", "T-Drive sample (taxi ids 1-600), Beijing, 2-8 Feb 2008; 10x10 grid over "
                       "lon [116, 116.8) x lat [39.5, 40.3); 1-minute slots", (path,), "tdrive", GridBins.tdrive(),
                       60.0)


def foursquare_source(data_dir: str = DEFAULT_DATA_DIR) -> EventSource:
    """Foursquare check-ins (spec §5.1): users' 10 x 10 grid cell per 100-minute slot."""
    folder = os.path.join(data_dir, "foursquare_us5k")
    checkins, poi = (os.path.join(folder, name) for name in ("Foursquare_checkins.txt.xz",
                                                              "Foursquare_poi_coos.txt.xz"))
    _require(checkins, "foursquare")
    _require(poi, "foursquare")
    return EventSource("foursquare", "Foursquare check-ins, US subset of the TIST2015 period (Apr 2012 - Sep "
                       "2013); 10x10 grid over lon [-125, -66) x lat [24, 50); 100-minute slots", (checkins,),
                       "checkins", FOURSQUARE_GRID, 6000.0, poi=poi)


REAL_SOURCES: dict[str, Callable[[str], EventSource]] = {"taxi": taxi_source, "foursquare": foursquare_source}
"""The papers' real datasets by name, built from a data directory."""


def _require(path: str, name: str) -> None:
    if not os.path.isfile(path):
        raise DataUnavailable(f"{name}: {path} is not on this machine (the data stays outside the repository)")


@dataclass(frozen=True, eq=False)
class EventStream:
    """A real stream after slotting: contributions ``(slot, user, bin)`` sorted by slot, users densely indexed.

    ``user_ids[i]`` is user ``i``'s id (natural order, so T-Drive taxi 2 comes before taxi 10).
    """

    name: str
    description: str
    bins: int
    slot_seconds: float
    origin: float
    slots: int
    user_ids: tuple[str, ...]
    slot: np.ndarray
    user: np.ndarray
    value: np.ndarray
    counts: dict

    @property
    def users(self) -> int:
        return len(self.user_ids)

    def values(self) -> Iterator[np.ndarray]:
        """Per slot, every user's carried-forward bin (``NO_VALUE`` before their first contribution)."""
        current = np.full(self.users, NO_VALUE, np.int64)
        bounds = np.searchsorted(self.slot, np.arange(self.slots + 1))
        for t in range(self.slots):
            start, end = bounds[t], bounds[t + 1]
            current[self.user[start:end]] = self.value[start:end]
            yield current.copy()

    def true_histograms(self) -> np.ndarray:
        """``(slots, bins)`` true counts of the carried-forward values (NOT private; for evaluation)."""
        return np.array([np.bincount(v[v >= 0], minlength=self.bins) for v in self.values()], np.int64)


def _natural_key(text: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def _paths(pattern: str) -> list[str]:
    paths = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
    if not paths:
        raise ValueError(f"input {pattern!r} matches no file")
    return paths


def raw_records(source: EventSource) -> Iterator:
    """The source's raw records as the replay job reads them (lines for JSONL/CSV, dicts otherwise)."""
    for pattern in source.inputs:
        if source.input_format == "tdrive":
            yield from iter_tdrive(pattern)
        elif source.input_format == "checkins":
            yield from iter_checkins(pattern, source.poi)
        elif source.input_format in ("avro", "parquet"):
            yield from read_records(pattern, source.input_format)
        else:
            for path in _paths(pattern):
                yield from (line for line in text_lines(path) if line.strip())


def _capped_by_user(records: Iterable, max_users: int | None, user_field: str) -> Iterator:
    """Only the records of the first ``max_users`` users named in reading order (dict records: before parsing)."""
    kept: set = set()
    for record in records:
        user = record.get(user_field) if isinstance(record, dict) else None
        if max_users is not None and user is not None:
            if user not in kept:
                if len(kept) >= max_users:
                    continue
                kept.add(user)
        yield record


def build_stream(source: EventSource, max_users: int | None = None, max_slots: int | None = None) -> EventStream:
    """Read, parse, bin and slot ``source``: at most the first ``max_users`` users and ``max_slots`` slots."""
    config = source.parse_config()
    events: dict[str, list[Event]] = {}
    counts: Counter = Counter()
    dead: Counter = Counter()
    for raw in _capped_by_user(raw_records(source), max_users, source.fields.user):
        counts["records_read"] += 1
        parsed = parse_record(raw, config)
        if isinstance(parsed, dict):
            dead[parsed["reason"]] += 1
        elif parsed.value == NO_VALUE:
            counts["declarations_ignored"] += 1
        elif max_users is None or parsed.user in events or len(events) < max_users:
            events.setdefault(parsed.user, []).append(parsed._replace(requirement=None))
        else:
            counts["beyond_max_users"] += 1
    if not events:
        raise ValueError(f"{source.name}: no valid event in {', '.join(source.inputs)}")
    first = min(event.time for user_events in events.values() for event in user_events)
    origin = math.floor(first / source.slot_seconds) * source.slot_seconds
    clock = SlotClock(source.slot_seconds, origin)
    contributions = []
    for user, user_events in events.items():
        outcome, _ = close_slots(user_events, clock, None)
        counts["duplicates"] += outcome.duplicates
        contributions.extend((c.slot, user, c.value) for c in outcome.contributions)
    last = max(slot for slot, _, _ in contributions)
    slots = last + 1 if max_slots is None else min(last + 1, max_slots)
    kept = [c for c in contributions if c[0] < slots]
    counts["beyond_max_slots"] = len(contributions) - len(kept)
    user_ids = tuple(sorted({user for _, user, _ in kept}, key=_natural_key))
    index = {user: i for i, user in enumerate(user_ids)}
    kept.sort(key=lambda c: (c[0], index[c[1]]))
    counts.update(contributions=len(kept), dead_letters=sum(dead.values()))
    return EventStream(
        name=source.name, description=source.description, bins=config.bins, slot_seconds=source.slot_seconds,
        origin=origin, slots=slots, user_ids=user_ids,
        slot=np.array([c[0] for c in kept], np.int64), user=np.array([index[c[1]] for c in kept], np.int64),
        value=np.array([c[2] for c in kept], np.int64),
        counts={**counts, "dead_letter_reasons": dict(dead.most_common(5))})
