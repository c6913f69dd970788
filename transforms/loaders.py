"""Real-data readers (T-Drive taxi logs, LBSN check-ins) as dict records, and a synthetic taxi stream.

The records suit ``ParseConfig(file_format="record")`` with a binner from
:mod:`transforms.binning` as ``to_bin``. Readers only split lines into fields;
judging them (times, coordinates, domains) is the parse stage's job, so every
line becomes one record and a line that cannot even be split becomes
``{"raw": line, "malformed": True}``, which parsing dead-letters (it has no user).

The Beam sources list their inputs at construction (a missing input is a
ValueError then) and read them on the workers, one element per file.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import json
import lzma
import math
import numbers
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import apache_beam as beam
import numpy as np

from transforms.binning import GridBins

COMPRESSED_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")
TAR_SUFFIX = ".tar"
TDRIVE_FILE_SUFFIX = ".txt"

TDRIVE_START = 1201910400.0
"""2008-02-02T00:00:00Z, the first day of the T-Drive sample, in epoch seconds."""

_GLOB_CHARACTERS = re.compile(r"[*?\[]")


def malformed(line: str) -> dict:
    """The record of a line that cannot be split into fields; parsing dead-letters it."""
    return {"raw": line, "malformed": True}


def _lines(data: bytes) -> Iterator[str]:
    """The lines of a file's bytes, without line endings; undecodable bytes are kept as escapes."""
    for line in data.splitlines():
        yield line.decode("utf-8", "backslashreplace")


def _natural_key(text: str) -> list:
    """Sort key putting ``2.txt`` before ``10.txt``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def _expand(path_or_glob: str, what: str) -> list[str]:
    """The existing paths a path or glob names, sorted; none is a ValueError."""
    if not isinstance(path_or_glob, str) or not path_or_glob:
        raise ValueError(f"{what} path must be a non-empty string, got {path_or_glob!r}")
    if _GLOB_CHARACTERS.search(path_or_glob):
        paths = sorted(glob.glob(path_or_glob, recursive=True), key=_natural_key)
        if not paths:
            raise ValueError(f"no {what} input matches {path_or_glob!r}")
        return paths
    if not os.path.exists(path_or_glob):
        raise ValueError(f"{what} input {path_or_glob!r} does not exist")
    return [path_or_glob]


# -- T-Drive -----------------------------------------------------------------------------------------------------


def tdrive_record(line: str) -> dict:
    """One ``taxi_id,YYYY-MM-DD HH:MM:SS,lon,lat`` line as a record.

    The time stays text; the parse stage reads it as a naive time, that is
    UTC. The original times are Beijing local time (UTC+8), so event times
    are shifted by 8 hours; slots stay aligned to local hours, which is what
    daily patterns need.
    """
    parts = line.split(",")
    if len(parts) == 4:
        try:
            lon, lat = float(parts[2]), float(parts[3])
        except ValueError:
            return malformed(line)
        return {"user": parts[0].strip(), "time": parts[1].strip(), "lon": lon, "lat": lat, "raw": line}
    return malformed(line)


@dataclass(frozen=True)
class TDriveInput:
    """One unit of T-Drive reading: a text file, a member of a plain tar, or a whole compressed tar.

    A compressed tar is read in one pass: xz and gzip streams cannot seek, so
    reading its members one by one would decompress the archive once per member.
    """

    path: str
    member: str | None = None
    offset: int = 0
    size: int = 0
    whole_archive: bool = False


def _is_tdrive_member(member: tarfile.TarInfo) -> bool:
    return member.isfile() and member.name.endswith(TDRIVE_FILE_SUFFIX)


def list_tdrive_inputs(path_or_glob: str) -> list[TDriveInput]:
    """The reading units of a T-Drive directory, archive, file, or a glob of them (reads tar headers only)."""
    inputs: list[TDriveInput] = []
    for path in _expand(path_or_glob, "T-Drive"):
        if os.path.isdir(path):
            files = sorted(glob.glob(os.path.join(glob.escape(path), "**", "*" + TDRIVE_FILE_SUFFIX), recursive=True),
                           key=_natural_key)
            inputs.extend(TDriveInput(file) for file in files if os.path.isfile(file))
        elif path.lower().endswith(COMPRESSED_TAR_SUFFIXES):
            _check_tar(path)
            inputs.append(TDriveInput(path, whole_archive=True))
        elif path.lower().endswith(TAR_SUFFIX):
            with _open_tar(path) as archive:
                members = sorted((m for m in archive.getmembers() if _is_tdrive_member(m)),
                                 key=lambda m: _natural_key(m.name))
            inputs.extend(TDriveInput(path, m.name, m.offset_data, m.size) for m in members)
        else:
            inputs.append(TDriveInput(path))
    if not inputs:
        raise ValueError(f"no T-Drive {TDRIVE_FILE_SUFFIX} files in {path_or_glob!r}")
    return inputs


def _open_tar(path: str) -> tarfile.TarFile:
    try:
        return tarfile.open(path)
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as error:
        raise ValueError(f"{path!r} is not a readable tar archive: {error}") from None


def _check_tar(path: str) -> None:
    """Opens a compressed tar and reads its first header only, so a wrong file fails at construction."""
    with _open_tar(path) as archive:
        try:
            archive.next()
        except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as error:
            raise ValueError(f"{path!r} is not a readable tar archive: {error}") from None


def read_tdrive_input(source: TDriveInput) -> Iterator[dict]:
    """The records of one reading unit, in file order (archive members in archive order)."""
    if source.whole_archive:
        with tarfile.open(source.path, mode="r|*") as archive:
            for member in archive:
                if _is_tdrive_member(member):
                    yield from map(tdrive_record, _lines(archive.extractfile(member).read()))
        return
    with open(source.path, "rb") as file:
        if source.member is None:
            data = file.read()
        else:
            file.seek(source.offset)
            data = file.read(source.size)
    yield from map(tdrive_record, _lines(data))


def iter_tdrive(path_or_glob: str) -> Iterator[dict]:
    """Records ``{"user", "time", "lon", "lat", "raw"}`` of T-Drive per-taxi files.

    ``path_or_glob``: a directory of ``<id>.txt`` files (searched recursively),
    a ``.tar``/``.tar.gz``/``.tar.xz`` archive holding ``<folder>/<id>.txt``
    (read without extracting), a single file, or a glob of any of these.
    A missing input is a ValueError at the call, not at the first record.
    """
    sources = list_tdrive_inputs(path_or_glob)
    return (record for source in sources for record in read_tdrive_input(source))


class ReadTDrive(beam.PTransform):
    """T-Drive records (see :func:`iter_tdrive`) read in parallel, one element per file or compressed archive."""

    def __init__(self, path_or_glob: str, label: str | None = None):
        super().__init__(label)
        self.path_or_glob = path_or_glob
        self.inputs = list_tdrive_inputs(path_or_glob)

    def expand(self, pbegin):
        return (pbegin
                | "ListTDriveFiles" >> beam.Create(self.inputs)
                | "ReadTDriveFiles" >> beam.FlatMap(read_tdrive_input)
                | "Redistribute" >> beam.Reshuffle())


# -- check-ins ---------------------------------------------------------------------------------------------------


def _open_text(path: str) -> IO[str]:
    """A text file, decompressed by suffix (``.xz``, ``.gz``, ``.bz2``)."""
    lowered = path.lower()
    if lowered.endswith(".xz"):
        binary = lzma.open(path, "rb")
    elif lowered.endswith(".gz"):
        binary = gzip.open(path, "rb")
    elif lowered.endswith(".bz2"):
        binary = bz2.open(path, "rb")
    else:
        binary = open(path, "rb")
    return io.TextIOWrapper(binary, encoding="utf-8", errors="backslashreplace", newline="")


def text_lines(path: str) -> Iterator[str]:
    """The lines of a text file (compressed or not), without their line ends."""
    with _open_text(path) as file:
        for line in file:
            yield line.rstrip("\r\n")


def load_pois(poi_path: str) -> dict[str, tuple[float, float]]:
    """POI id -> (lat, lon) from lines ``poi_id<TAB>lat<TAB>lon``.

    Reference data, so a malformed line or a POI with two locations is a
    ValueError naming the line rather than check-ins silently losing coordinates.
    """
    pois: dict[str, tuple[float, float]] = {}
    for number, line in enumerate(text_lines(poi_path), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        try:
            if len(parts) != 3:
                raise ValueError
            poi, location = parts[0].strip(), (float(parts[1]), float(parts[2]))
        except ValueError:
            raise ValueError(f"{poi_path}:{number}: expected poi_id<TAB>lat<TAB>lon, got {line[:80]!r}") from None
        if pois.setdefault(poi, location) != location:
            raise ValueError(f"{poi_path}:{number}: POI {poi!r} has a second location")
    return pois


def checkin_record(line: str, pois: dict[str, tuple[float, float]] | None) -> dict:
    """One ``user_id<TAB>poi_id<TAB>unix_time`` line as a record.

    With ``pois`` the record gets ``lat``/``lon`` (none for an unknown POI, which
    a grid dead-letters as missing coordinates); without, ``value`` is the POI id.
    """
    parts = line.split("\t")
    if len(parts) != 3:
        return malformed(line)
    try:
        time = float(parts[2])
    except ValueError:
        return malformed(line)
    poi = parts[1].strip()
    record = {"user": parts[0].strip(), "time": time, "poi": poi, "raw": line}
    if pois is None:
        record["value"] = poi
    elif poi in pois:
        record["lat"], record["lon"] = pois[poi]
    return record


def read_checkin_file(path: str, pois: dict[str, tuple[float, float]] | None) -> Iterator[dict]:
    for line in text_lines(path):
        yield checkin_record(line, pois)


def _checkin_inputs(checkins_path: str, poi_path: str | None) -> list[str]:
    files = [path for path in _expand(checkins_path, "check-in") if os.path.isfile(path)]
    if not files:
        raise ValueError(f"no check-in files in {checkins_path!r}")
    if poi_path is not None and not os.path.isfile(poi_path):
        raise ValueError(f"POI file {poi_path!r} does not exist")
    return files


def iter_checkins(checkins_path: str, poi_path: str | None = None) -> Iterator[dict]:
    """Records ``{"user", "time", "poi", "raw"}`` plus ``lat``/``lon`` (with ``poi_path``) or ``value`` (without).

    ``checkins_path`` is a file or glob of files (``.xz``/``.gz``/``.bz2`` are
    decompressed); ``time`` is the float Unix time of the line. Missing inputs
    and a malformed POI file are a ValueError at the call.
    """
    files = _checkin_inputs(checkins_path, poi_path)
    pois = load_pois(poi_path) if poi_path is not None else None
    return (record for path in files for record in read_checkin_file(path, pois))


class _ReadCheckinFile(beam.DoFn):
    """Reads one check-in file; the POI table is loaded once per DoFn instance."""

    def __init__(self, poi_path: str | None):
        super().__init__()
        self.poi_path = poi_path
        self.pois: dict | None = None

    def setup(self):
        if self.poi_path is not None:
            self.pois = load_pois(self.poi_path)

    def process(self, path: str) -> Iterator[dict]:
        yield from read_checkin_file(path, self.pois)


class ReadCheckins(beam.PTransform):
    """Check-in records (see :func:`iter_checkins`) read in parallel, one element per file."""

    def __init__(self, checkins_path: str, poi_path: str | None = None, label: str | None = None):
        super().__init__(label)
        self.files = _checkin_inputs(checkins_path, poi_path)
        self.poi_path = poi_path

    def expand(self, pbegin):
        return (pbegin
                | "ListCheckinFiles" >> beam.Create(self.files)
                | "ReadCheckinFiles" >> beam.ParDo(_ReadCheckinFile(self.poi_path))
                | "Redistribute" >> beam.Reshuffle())


# -- synthetic taxis ---------------------------------------------------------------------------------------------

_HUBS = (
    (116.397, 39.909),  # Tiananmen / city centre
    (116.322, 39.895),  # Beijing West station
    (116.379, 39.865),  # Beijing South station
    (116.427, 39.903),  # Beijing station
    (116.587, 40.080),  # Capital airport
    (116.310, 39.983),  # Zhongguancun
    (116.461, 39.909),  # CBD
)
_CITY_CENTRE = (116.40, 39.92)
_CITY_SPREAD = (0.12, 0.09)
_STEP_SPREAD = (0.010, 0.008)
_PULL = 0.3
_GLITCHES = ((0.0, 0.0), (116.4, 41.2), (118.1, 39.9), (195.0, 68.0))
_EDGE_MARGIN = 1e-4


def synthetic_taxi_stream(path: str, taxis: int = 200, hours: float = 24, report_seconds: float = 300,
                          seed: int = 0) -> int:
    """Writes a T-Drive-like JSONL stream to ``path`` and returns its number of lines.

    Each taxi ``taxiN`` has a few haunts (stations, the airport, spots around
    the centre) and random-walks between them inside the T-Drive box, sometimes
    parked, now and then jumping across town or going off shift for a while.
    It reports every ``report_seconds`` (+-20% jitter) from 2008-02-02T00:00Z,
    in whole seconds. As in the real data, about 0.5% of points are GPS
    glitches outside the box and about 0.5% of lines repeat the line before.
    Lines are ordered by time. The same seed gives the same file.
    """
    _check_synthetic(taxis, hours, report_seconds, seed)
    rng = np.random.default_rng(seed)
    box = GridBins.tdrive()
    bounds = (box.lon_min + _EDGE_MARGIN, box.lon_max - _EDGE_MARGIN,
              box.lat_min + _EDGE_MARGIN, box.lat_max - _EDGE_MARGIN)
    duration = hours * 3600.0
    rows: list[tuple[float, int, int, str]] = []
    for taxi in range(taxis):
        reports = _taxi_reports(rng, duration, report_seconds, bounds)
        repeats = (rng.random(len(reports)) < 0.005).tolist()
        for order, ((time, lon, lat), repeat) in enumerate(zip(reports, repeats)):
            line = json.dumps({"user": f"taxi{taxi + 1}", "time": TDRIVE_START + time, "lon": lon, "lat": lat})
            rows.append((time, taxi, 2 * order, line))
            if repeat:
                rows.append((time, taxi, 2 * order + 1, line))
    rows.sort()
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(row[3] + "\n" for row in rows)
    return len(rows)


def _check_synthetic(taxis: int, hours: float, report_seconds: float, seed: int) -> None:
    if not isinstance(taxis, numbers.Integral) or isinstance(taxis, bool) or taxis < 1:
        raise ValueError(f"taxis must be an integer >= 1, got {taxis!r}")
    for name, value in (("hours", hours), ("report_seconds", report_seconds)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")


def _clip(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def _taxi_reports(rng: np.random.Generator, duration: float, report_seconds: float,
                  bounds: tuple[float, float, float, float]) -> list[tuple[float, float, float]]:
    """One taxi's reports (seconds from the start, lon, lat), rounded like T-Drive (whole seconds, 5 decimals)."""
    lon_low, lon_high, lat_low, lat_high = bounds
    count = int(duration / (0.8 * report_seconds)) + 2
    times = (rng.uniform(0, report_seconds) - report_seconds
             + np.cumsum(report_seconds * rng.uniform(0.8, 1.2, count))).round().tolist()
    off_start = rng.uniform(0, duration)
    off_end = off_start + (rng.exponential(2 * 3600) if rng.random() < 0.5 else 0.0)
    hubs = rng.choice(len(_HUBS), size=rng.integers(1, 3), replace=False).tolist()
    spots = rng.normal(_CITY_CENTRE, _CITY_SPREAD, size=(rng.integers(2, 5), 2)).tolist()
    haunts = [(_clip(lon, lon_low, lon_high), _clip(lat, lat_low, lat_high))
              for lon, lat in [_HUBS[h] for h in hubs] + spots]
    steps = (rng.normal(0, 1, size=(count, 2)) * _STEP_SPREAD).tolist()
    draws = rng.random(size=(count, 4)).tolist()  # retarget, jump, parked, glitch
    picks = rng.integers(0, 1 << 30, size=(count, 2)).tolist()
    target_lon, target_lat = haunts[picks[0][0] % len(haunts)]
    lon, lat = target_lon, target_lat
    reports = []
    for time, (step_lon, step_lat), (retarget, jump, parked, glitch), (pick, place) in zip(times, steps, draws, picks):
        if time >= duration:
            break
        if retarget < 0.08:
            target_lon, target_lat = haunts[pick % len(haunts)]
        if jump < 0.01:
            lon, lat = _HUBS[place % len(_HUBS)]
        elif parked >= 0.15:
            lon += _PULL * (target_lon - lon) + step_lon
            lat += _PULL * (target_lat - lat) + step_lat
        lon, lat = _clip(lon, lon_low, lon_high), _clip(lat, lat_low, lat_high)
        if time < 0 or off_start <= time < off_end:
            continue
        reported = _GLITCHES[place % len(_GLITCHES)] if glitch < 0.005 else (lon, lat)
        reports.append((time, round(reported[0], 5), round(reported[1], 5)))
    return reports
