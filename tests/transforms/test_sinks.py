"""WriteRecords writes schema records that read_records gets back unchanged, in every format."""

from __future__ import annotations

import math

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_stream
from apache_beam.transforms.window import FixedWindows

from transforms.sinks import FORMATS, WriteRecords, read_records

RELEASES = [
    {"stream": "taxi", "slot": 0, "slot_start": 1700000000.0, "slot_end": 1700000060.0, "mechanism": "PBD",
     "mechanism_slot": 1, "histogram": [0, 5, 2], "kind": "fresh", "epsilon": "0.25", "predicted_error": 12.5,
     "registered_users": 7, "reporters": None, "statistic": "counts", "estimate": [0.0, 5.0, 2.0], "trust": "central",
     "figures": {}},
    {"stream": "taxi", "slot": 1, "slot_start": 1700000060.0, "slot_end": 1700000120.0, "mechanism": "PBD",
     "mechanism_slot": 2, "histogram": [0, 5, 2], "kind": "skipped", "epsilon": "0", "predicted_error": math.nan,
     "registered_users": 7, "reporters": None, "statistic": "counts", "estimate": [0.0, 5.0, 2.0],
     "trust": "central", "figures": {"eps_claimed": 0.5, "eps_sound_upper": 1.25}},
    {"stream": "ταξί 🚕", "slot": 2, "slot_start": 1700000120.0, "slot_end": 1700000180.0, "mechanism": "PBA",
     "mechanism_slot": 1, "histogram": [], "kind": "nullified", "epsilon": "0", "predicted_error": None,
     "registered_users": None, "reporters": 0, "statistic": "mean", "estimate": [0.25], "trust": "local_client",
     "figures": {}},
]
DEAD_LETTERS = [
    {"stream": None, "user": None, "stage": "parse", "reason": "not JSON", "record": '{"user": "ü\n'},
    {"stream": "taxi", "user": "Zoë", "stage": "validate", "reason": "value 9 outside [0, 3)",
     "record": '{"user": "Zoë", "value": 9}'},
]
EVENTS = [
    {"stream": "taxi", "user": "u1", "time": 1700000000.5, "value": 1, "w": None, "epsilon": None, "w_b": None,
     "epsilon_b": None, "w_f": None, "epsilon_f": None, "level": None, "lifetime": None},
    {"stream": "taxi", "user": "u2", "time": "2023-11-14T22:13:20Z", "value": None, "w": 10, "epsilon": 1.0,
     "w_b": None, "epsilon_b": None, "w_f": None, "epsilon_f": None, "level": None, "lifetime": None},
]


def _without_nan(record: dict) -> dict:
    return {key: None if isinstance(value, float) and math.isnan(value) else value for key, value in record.items()}


def _by_key(records: list[dict], key: str) -> list[dict]:
    return sorted(records, key=lambda record: record[key])


@pytest.fixture(scope="module", params=FORMATS)
def written(request, tmp_path_factory):
    """One pipeline per format writing releases, dead letters and events; returns (format, output dir)."""
    file_format = request.param
    out = tmp_path_factory.mktemp(file_format)
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        for name, records in (("release", RELEASES), ("dead_letter", DEAD_LETTERS), ("event", EVENTS)):
            (pipeline
             | f"Create {name}" >> beam.Create(records)
             | WriteRecords(str(out / name), name, file_format))
    return file_format, out


def test_releases_round_trip(written):
    file_format, out = written
    assert sorted(path.name for path in out.glob("release*")) == [f"release-00000-of-00001.{file_format}"]
    read = read_records(str(out / "release-*"), file_format)
    assert _by_key(read, "slot") == [_without_nan(release) for release in RELEASES]


def test_dead_letters_round_trip(written):
    file_format, out = written
    read = read_records(str(out / "dead_letter-*"), file_format)
    assert _by_key(read, "reason") == _by_key(DEAD_LETTERS, "reason")


def test_event_times_round_trip_as_text_only_in_parquet(written):
    file_format, out = written
    read = _by_key(read_records(str(out / "event-*"), file_format), "user")
    epoch_time = "1700000000.5" if file_format == "parquet" else 1700000000.5
    expected_times = [epoch_time, "2023-11-14T22:13:20Z"]
    assert [event["time"] for event in read] == expected_times
    assert read == [{**event, "time": time} for event, time in zip(EVENTS, expected_times)]


def test_numpy_values_and_infinities_are_written_as_plain_values():
    from transforms.sinks import plain_values

    release = {**RELEASES[0], "histogram": np.array([1, 2], dtype=np.int64), "slot": np.int64(3),
               "predicted_error": np.float64(np.inf)}
    plain = plain_values(release)
    assert plain["histogram"] == [1, 2] and type(plain["histogram"][0]) is int
    assert type(plain["slot"]) is int and plain["predicted_error"] is None


def test_record_breaking_its_schema_fails_the_write(tmp_path):
    bad = {**RELEASES[0], "kind": "published"}
    with pytest.raises(ValueError, match="schema 'release'"), beam.Pipeline(runner=FnApiRunner()) as pipeline:
        pipeline | beam.Create([bad]) | WriteRecords(str(tmp_path / "release"), "release")


@pytest.mark.parametrize("arguments, message", [
    ({"file_format": "csv"}, "unknown file format 'csv'.*jsonl, avro, parquet"),
    ({"schema_name": "releases"}, "unknown schema 'releases'"),
    ({"num_shards": -1}, "num_shards"),
    ({"triggering_frequency": 0}, "triggering_frequency"),
])
def test_bad_configuration_raises_at_construction(arguments, message):
    with pytest.raises(ValueError, match=message):
        WriteRecords(**{"prefix": "/tmp/unused", "schema_name": "release", **arguments})


def _unbounded_releases() -> beam.PCollection:
    """An unbounded PCollection, only for building graphs: FnApiRunner cannot run TestStream."""
    pipeline = beam.Pipeline(runner=FnApiRunner())
    return pipeline | test_stream.TestStream().add_elements(RELEASES[:1]).advance_watermark_to_infinity()


def _applied(pipeline: beam.Pipeline) -> list:
    applied = []

    class Collect(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            applied.append(node)

    pipeline.visit(Collect())
    return applied


def test_jsonl_streams_in_fixed_windows_of_the_triggering_frequency():
    releases = _unbounded_releases()
    assert not releases.is_bounded
    releases | WriteRecords("/tmp/unused", "release", "jsonl", triggering_frequency=60)
    windowings = [transform.transform.windowing.windowfn for transform in _applied(releases.pipeline)
                  if transform.full_label.endswith("ApplyFixedWindows")]
    assert windowings == [FixedWindows(60)]


@pytest.mark.parametrize("file_format", ["avro", "parquet"])
def test_avro_and_parquet_refuse_to_stream(file_format):
    with pytest.raises(ValueError, match=f"{file_format} cannot be written from a stream"):
        WriteRecords("/tmp/unused", "release", file_format, triggering_frequency=60)
    with pytest.raises(ValueError, match=f"{file_format} cannot be written from a stream"):
        _unbounded_releases() | WriteRecords("/tmp/unused", "release", file_format)


def test_read_records_rejects_unknown_format_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="unknown file format 'csv'"):
        read_records(str(tmp_path / "*"), "csv")
    with pytest.raises(FileNotFoundError, match="no jsonl files match"):
        read_records(str(tmp_path / "nothing-*"), "jsonl")
