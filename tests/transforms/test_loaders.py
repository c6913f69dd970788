"""Real-data readers and the synthetic taxi stream (transforms/loaders.py)."""

from __future__ import annotations

import calendar
import collections
import gzip
import io
import json
import lzma
import os
import tarfile

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from transforms.binning import CategoryBins, GridBins
from transforms.loaders import (
    TDRIVE_START,
    ReadCheckins,
    ReadTDrive,
    iter_checkins,
    iter_tdrive,
    list_tdrive_inputs,
    load_pois,
    synthetic_taxi_stream,
)
from transforms.parse import ParseConfig, ParseEvents, parse_record
from transforms.records import Event

OUTSIDE_TDRIVE = "outside the grid lon [116, 116.8) x lat [39.5, 40.3)"

# Per-taxi files in the original layout. Taxi 1's first lines are those of Microsoft's user guide.
TDRIVE_FILES = {
    "1.txt": "1,2008-02-02 15:36:08,116.51172,39.92123\n"
             "1,2008-02-02 15:46:08,116.51135,39.93883\n"
             "1,2008-02-02 15:46:08,116.51135,39.93883\n"       # exact repeat, as in the real data
             "1,2008-02-02 15:56:08,0.0,0.0\n",                # GPS glitch outside the box
    "2.txt": "2,2008-02-02 13:33:52,116.36422,39.88781\r\n"    # CRLF line ending
             "this is not a T-Drive line\n"
             "2,2008-02-02 13:43:52,116.3,forty\n"
             "2,2008-02-30 13:53:52,116.36422,39.88781\n"      # no such day
             "2,2008-02-02 14:03:52,116.7999,40.2999",         # no final newline
    "10.txt": "10,2008-02-02 13:32:03,116.44457,39.92157\n"
              "10,2008-02-02 13:42:03,116.8,40.0\n"            # lon_max is outside the grid
              "10,2008-02-02 13:52:03,116.0,39.5\n",
    "295.txt": "",                                               # empty, like the real 295.txt
}
LINES = 12


def utc(text: str) -> float:
    return float(calendar.timegm(tuple(int(x) for x in text.replace("-", " ").replace(":", " ").split()) + (0, 0, 0)))


# (user, time, cell) of the valid points, and (reason, user) of the dead letters, with the T-Drive grid.
EXPECTED_EVENTS = sorted([
    ("1", utc("2008-02-02 15:36:08"), 56),
    ("1", utc("2008-02-02 15:46:08"), 56),
    ("1", utc("2008-02-02 15:46:08"), 56),
    ("2", utc("2008-02-02 13:33:52"), 44),
    ("2", utc("2008-02-02 14:03:52"), 99),
    ("10", utc("2008-02-02 13:32:03"), 55),
    ("10", utc("2008-02-02 13:52:03"), 0),
])
EXPECTED_DEAD_LETTERS = sorted([
    (OUTSIDE_TDRIVE, "1"),
    ("missing field 'user'", None),
    ("missing field 'user'", None),
    ("unparseable time '2008-02-30 13:53:52'", "2"),
    (OUTSIDE_TDRIVE, "10"),
])


def write_tdrive_dir(directory) -> str:
    directory.mkdir(parents=True)
    for name, text in TDRIVE_FILES.items():
        (directory / name).write_bytes(text.encode())
    return str(directory)


def write_tdrive_tar(path, folder: str = "taxi_log_2008_by_id", mode: str = "w:xz") -> str:
    with tarfile.open(path, mode) as archive:
        info = tarfile.TarInfo(folder)
        info.type = tarfile.DIRTYPE
        archive.addfile(info)
        for name, text in TDRIVE_FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        readme = b"not a taxi file\n"
        info = tarfile.TarInfo(f"{folder}/README.md")
        info.size = len(readme)
        archive.addfile(info, io.BytesIO(readme))
    return str(path)


def canonical(records) -> list[str]:
    return sorted(json.dumps(record, sort_keys=True) for record in records)


@pytest.fixture(scope="module")
def tdrive(tmp_path_factory):
    """The same taxis as a directory, a .tar.xz, a .tar.gz and a plain .tar, each with a folder inside."""
    root = tmp_path_factory.mktemp("tdrive")
    return {
        "dir": write_tdrive_dir(root / "taxi_log_2008_by_id"),
        "tar.xz": write_tdrive_tar(root / "taxi_log_2008_by_id.tar.xz"),
        "tar.gz": write_tdrive_tar(root / "taxi.tar.gz", folder="some/deeper/folder", mode="w:gz"),
        "tar": write_tdrive_tar(root / "taxi.tar", mode="w"),
    }


# -- T-Drive ------------------------------------------------------------------------------------------------------


def one_taxi_file(tmp_path, text: str) -> str:
    path = tmp_path / "1.txt"
    path.write_text(text)
    return str(path)


def test_tdrive_records(tmp_path):
    records = list(iter_tdrive(one_taxi_file(tmp_path, "1,2008-02-02 15:36:08,116.51172,39.92123\nnonsense\n\n")))
    assert records == [
        {"user": "1", "time": "2008-02-02 15:36:08", "lon": 116.51172, "lat": 39.92123,
         "raw": "1,2008-02-02 15:36:08,116.51172,39.92123"},
        {"raw": "nonsense", "malformed": True},
        {"raw": "", "malformed": True},
    ]


@pytest.mark.parametrize("kind", ["dir", "tar.xz", "tar.gz", "tar"])
def test_every_layout_reads_the_same_records(tdrive, kind):
    records = list(iter_tdrive(tdrive[kind]))
    assert len(records) == LINES
    assert canonical(records) == canonical(iter_tdrive(tdrive["dir"]))
    malformed = [r for r in records if r.get("malformed")]
    assert sorted(r["raw"] for r in malformed) == ["2,2008-02-02 13:43:52,116.3,forty", "this is not a T-Drive line"]
    assert all(set(r) == {"raw", "malformed"} for r in malformed)
    assert all(not r["raw"].endswith("\r") for r in records)


def test_files_are_read_in_natural_order_and_lines_in_file_order(tdrive):
    users = [r["user"] for r in iter_tdrive(tdrive["dir"]) if "user" in r]
    assert users == ["1"] * 4 + ["2"] * 3 + ["10"] * 3
    assert [r["time"] for r in iter_tdrive(tdrive["dir"]) if r.get("user") == "10"] == [
        "2008-02-02 13:32:03", "2008-02-02 13:42:03", "2008-02-02 13:52:03"]


def test_plain_tar_is_listed_per_member_and_compressed_tar_as_one_unit(tdrive):
    members = list_tdrive_inputs(tdrive["tar"])
    assert [m.member for m in members] == [f"taxi_log_2008_by_id/{n}.txt" for n in (1, 2, 10, 295)]
    assert all(not m.whole_archive for m in members)
    [archive] = list_tdrive_inputs(tdrive["tar.xz"])
    assert archive.whole_archive and archive.member is None


def test_globs_of_archives_and_files(tdrive, tmp_path):
    twice = list(iter_tdrive(os.path.join(os.path.dirname(tdrive["tar.xz"]), "*.tar.?z")))
    assert canonical(twice) == sorted(canonical(iter_tdrive(tdrive["dir"])) * 2)
    some = list(iter_tdrive(os.path.join(tdrive["dir"], "1*.txt")))
    assert {r["user"] for r in some} == {"1", "10"}


def test_missing_or_unreadable_inputs_fail_at_the_call(tmp_path):
    for bad, message in [(tmp_path / "nope", "does not exist"), (tmp_path / "*.tar.xz", "no T-Drive input matches")]:
        with pytest.raises(ValueError, match=message):
            iter_tdrive(str(bad))
        with pytest.raises(ValueError, match=message):
            ReadTDrive(str(bad))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no T-Drive .txt files"):
        ReadTDrive(str(tmp_path / "empty"))
    (tmp_path / "junk.tar.xz").write_bytes(b"this is not xz")
    with pytest.raises(ValueError, match="not a readable tar archive"):
        ReadTDrive(str(tmp_path / "junk.tar.xz"))


def test_read_tdrive_in_a_pipeline_equals_iter_tdrive(tdrive):
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        for kind in ("dir", "tar.xz", "tar"):
            records = pipeline | f"Read {kind}" >> ReadTDrive(tdrive[kind])
            assert_that(records | f"Canonical {kind}" >> beam.Map(lambda r: json.dumps(r, sort_keys=True)),
                        equal_to(canonical(iter_tdrive(tdrive[kind]))), label=f"Check {kind}")


def test_malformed_records_are_dead_letters_not_exceptions():
    config = ParseConfig(bins=100, file_format="record", to_bin=GridBins.tdrive())
    dead = parse_record({"raw": "this is not a T-Drive line", "malformed": True}, config)
    assert dead["reason"] == "missing field 'user'"
    assert "this is not a T-Drive line" in dead["record"]


def test_end_to_end_tdrive_to_events_and_dead_letters(tdrive):
    config = ParseConfig(bins=100, file_format="record", to_bin=GridBins.tdrive())
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        parsed = pipeline | ReadTDrive(tdrive["tar.xz"]) | ParseEvents(config)
        assert_that(parsed.events | "EventKeys" >> beam.Map(lambda e: (e.user, e.time, e.value)),
                    equal_to(EXPECTED_EVENTS), label="Events")
        assert_that(parsed.dead_letters | "DeadLetterKeys" >> beam.Map(lambda d: (d["reason"], d["user"])),
                    equal_to(EXPECTED_DEAD_LETTERS), label="DeadLetters")


def test_events_keep_the_original_line(tmp_path):
    config = ParseConfig(bins=100, file_format="record", to_bin=GridBins.tdrive())
    [record] = iter_tdrive(one_taxi_file(tmp_path, "1,2008-02-02 15:36:08,116.51172,39.92123\n"))
    event = parse_record(record, config)
    assert isinstance(event, Event) and event.stream == "default"
    assert json.loads(event.raw)["raw"] == "1,2008-02-02 15:36:08,116.51172,39.92123"


# -- check-ins ----------------------------------------------------------------------------------------------------

CHECKINS = ("0\t0\t1333447208.0\n"
            "1\t20\t1333447209.0\n"
            "2\t79\t1333447219.0\n"
            "3\t999\t1333447300.0\n"        # POI not in the POI file
            "a line without tabs\n"
            "4\t0\tyesterday\n")
POIS = ("0\t40.748939\t-73.99228\n"
        "20\t40.719726\t-74.002472\n"
        "79\t25.696201\t-100.351632\n")
US_GRID = GridBins(-125, -66, 24, 50, 4, 4)


def write_text(path, text: str) -> str:
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix, open)
    with opener(path, "wt", encoding="utf-8") as file:
        file.write(text)
    return str(path)


@pytest.fixture(params=["", ".xz", ".gz"])
def checkin_files(request, tmp_path):
    return (write_text(tmp_path / f"checkins.txt{request.param}", CHECKINS),
            write_text(tmp_path / f"pois.txt{request.param}", POIS))


def test_checkins_with_pois(checkin_files):
    checkins, pois = checkin_files
    records = list(iter_checkins(checkins, pois))
    assert records[:2] == [
        {"user": "0", "time": 1333447208.0, "poi": "0", "lat": 40.748939, "lon": -73.99228,
         "raw": "0\t0\t1333447208.0"},
        {"user": "1", "time": 1333447209.0, "poi": "20", "lat": 40.719726, "lon": -74.002472,
         "raw": "1\t20\t1333447209.0"},
    ]
    assert records[3] == {"user": "3", "time": 1333447300.0, "poi": "999", "raw": "3\t999\t1333447300.0"}
    assert records[4:] == [{"raw": "a line without tabs", "malformed": True},
                           {"raw": "4\t0\tyesterday", "malformed": True}]
    config = ParseConfig(bins=US_GRID.bins, file_format="record", to_bin=US_GRID)
    parsed = [parse_record(r, config) for r in records]
    assert [(p.user, p.value) for p in parsed if isinstance(p, Event)] == [("0", 11), ("1", 11), ("2", 1)]
    assert [p["reason"] for p in parsed if not isinstance(p, Event)] == [
        "missing coordinates", "missing field 'user'", "missing field 'user'"]


def test_checkins_without_pois_bin_by_poi_id(checkin_files):
    checkins, _ = checkin_files
    records = list(iter_checkins(checkins))
    assert records[0] == {"user": "0", "time": 1333447208.0, "poi": "0", "value": "0", "raw": "0\t0\t1333447208.0"}
    assert all("lat" not in r and "lon" not in r for r in records)
    categories = CategoryBins(("0", "20", "79"))
    config = ParseConfig(bins=categories.bins, file_format="record", to_bin=categories)
    parsed = [parse_record(r, config) for r in records]
    assert [(p.user, p.time, p.value) for p in parsed if isinstance(p, Event)] == [
        ("0", 1333447208.0, 0), ("1", 1333447209.0, 1), ("2", 1333447219.0, 2)]
    assert [p["reason"] for p in parsed if not isinstance(p, Event)] == [
        "unknown category '999'", "missing field 'user'", "missing field 'user'"]


def test_read_checkins_in_a_pipeline(tmp_path):
    checkins = write_text(tmp_path / "checkins.txt.xz", CHECKINS)
    more = write_text(tmp_path / "more_checkins.txt.gz", "9\t20\t1333447999.0\n")
    pois = write_text(tmp_path / "pois.txt", POIS)
    pattern = str(tmp_path / "*checkins.txt.*")
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        for label, poi_path in (("WithPois", pois), ("WithoutPois", None)):
            records = pipeline | f"Read{label}" >> ReadCheckins(pattern, poi_path)
            expected = canonical(list(iter_checkins(checkins, poi_path)) + list(iter_checkins(more, poi_path)))
            assert len(expected) == 7
            assert_that(records | f"Canonical{label}" >> beam.Map(lambda r: json.dumps(r, sort_keys=True)),
                        equal_to(expected), label=f"Check{label}")


def test_checkin_inputs_are_checked_at_the_call(tmp_path):
    checkins = write_text(tmp_path / "checkins.txt", CHECKINS)
    for call in (iter_checkins, ReadCheckins):
        with pytest.raises(ValueError, match="does not exist"):
            call(str(tmp_path / "nope.txt"))
        with pytest.raises(ValueError, match="POI file .* does not exist"):
            call(checkins, str(tmp_path / "nope.txt"))
        with pytest.raises(ValueError, match="no check-in input matches"):
            call(str(tmp_path / "*.csv"))


def test_malformed_poi_file_names_the_line(tmp_path):
    bad = write_text(tmp_path / "pois.txt", "0\t40.7\t-73.9\n\n20\tforty\t-74.0\n")
    with pytest.raises(ValueError, match=r"pois.txt:3: expected poi_id<TAB>lat<TAB>lon"):
        load_pois(bad)
    twice = write_text(tmp_path / "twice.txt", "0\t40.7\t-73.9\n0\t41.0\t-73.9\n")
    with pytest.raises(ValueError, match="twice.txt:2: POI '0' has a second location"):
        iter_checkins(write_text(tmp_path / "c.txt", CHECKINS), twice)
    assert load_pois(write_text(tmp_path / "same.txt", "0\t40.7\t-73.9\n0\t40.7\t-73.9\n")) == {"0": (40.7, -73.9)}


# -- synthetic taxi stream ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = tmp_path_factory.mktemp("synthetic") / "taxis.jsonl"
    count = synthetic_taxi_stream(str(path), taxis=60, hours=12, report_seconds=300, seed=7)
    return path, count


def test_synthetic_stream_is_deterministic_per_seed(synthetic, tmp_path):
    path, count = synthetic
    again = tmp_path / "again.jsonl"
    assert synthetic_taxi_stream(str(again), taxis=60, hours=12, report_seconds=300, seed=7) == count
    assert again.read_bytes() == path.read_bytes()
    other = tmp_path / "other.jsonl"
    synthetic_taxi_stream(str(other), taxis=60, hours=12, report_seconds=300, seed=8)
    assert other.read_bytes() != path.read_bytes()


def test_synthetic_stream_shape(synthetic):
    path, count = synthetic
    lines = path.read_text().splitlines()
    assert len(lines) == count
    records = [json.loads(line) for line in lines]
    assert all(set(r) == {"user", "time", "lon", "lat"} for r in records)
    per_taxi = collections.Counter(r["user"] for r in records)
    assert set(per_taxi) <= {f"taxi{n}" for n in range(1, 61)} and len(per_taxi) >= 58
    # about 12 h / 5 min = 144 reports per taxi, fewer for taxis off shift for a while
    assert 60 * 100 < count < 60 * 160
    assert max(per_taxi.values()) <= 12 * 3600 / (0.8 * 300) + 2
    times = [r["time"] for r in records]
    assert times == sorted(times)
    assert TDRIVE_START <= times[0] and times[-1] < TDRIVE_START + 12 * 3600
    assert all(t == int(t) for t in times)
    taxi_times = collections.defaultdict(list)
    for r in records:
        taxi_times[r["user"]].append(r["time"])
    gaps = sorted(b - a for times in taxi_times.values() for a, b in zip(times, times[1:]) if b > a)
    assert 270 < gaps[len(gaps) // 2] < 330
    assert gaps[0] >= 0.8 * 300 - 1
    repeats = sum(1 for a, b in zip(lines, lines[1:]) if a == b)
    assert 0 < repeats < 0.02 * count


def test_synthetic_points_mostly_bin_inside_the_tdrive_grid(synthetic):
    path, count = synthetic
    grid = GridBins.tdrive()
    cells, outside = collections.Counter(), 0
    for line in path.read_text().splitlines():
        try:
            cells[grid(json.loads(line))] += 1
        except ValueError as error:
            assert str(error) == OUTSIDE_TDRIVE
            outside += 1
    assert 0 < outside < 0.02 * count
    assert len(cells) >= 20                                        # spread over the city ...
    assert sum(n for _, n in cells.most_common(10)) > 0.5 * count   # ... but mostly in a few busy cells


def test_synthetic_stream_parses_as_jsonl(synthetic):
    path, count = synthetic
    config = ParseConfig(bins=100, to_bin=GridBins.tdrive())
    parsed = [parse_record(line, config) for line in path.read_text().splitlines()]
    events = [p for p in parsed if isinstance(p, Event)]
    assert len(events) > 0.98 * count
    assert {p["reason"] for p in parsed if not isinstance(p, Event)} == {OUTSIDE_TDRIVE}


@pytest.mark.parametrize("arguments, parameter", [
    ({"taxis": 0}, "taxis"), ({"taxis": 2.5}, "taxis"), ({"hours": 0}, "hours"), ({"hours": float("nan")}, "hours"),
    ({"report_seconds": -1}, "report_seconds"), ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"),
])
def test_synthetic_validation(tmp_path, arguments, parameter):
    with pytest.raises(ValueError, match=parameter):
        synthetic_taxi_stream(str(tmp_path / "x.jsonl"), **arguments)
    assert not (tmp_path / "x.jsonl").exists()
