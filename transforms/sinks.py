"""Write boundary records (releases, ledger, usage, dead letters) as JSON lines, Avro or Parquet.

One transform for all three formats so a job picks its output format by a
flag. Every record is first made plain (numpy values become Python ones,
NaN and infinities become null, so the three formats hold the same data) and
validated against its schema in ``schemas/``; a bad record fails the write
with a ValueError naming the schema instead of writing a file no reader can
use. :func:`read_records` reads the files back without Beam.
"""

from __future__ import annotations

import glob
import json
import math
import os

import apache_beam as beam
import fastavro
import numpy as np
import pyarrow.parquet as pq

from schemas import arrow_schema, avro_schema, validate
from transforms import checkpoint

FORMATS = ("jsonl", "avro", "parquet")
STREAMING_FORMATS = ("jsonl",)
"""Formats that can be written from an unbounded input: Beam 2.77's Avro and Parquet sinks keep one file handle
per sink, so when a bundle holds several windows they close each other's files and drop records (silently: the
error is only logged)."""


def _check_format(file_format: str) -> None:
    if file_format not in FORMATS:
        raise ValueError(f"unknown file format {file_format!r}; expected one of {', '.join(FORMATS)}")


def _check_streamable(file_format: str) -> None:
    if file_format not in STREAMING_FORMATS:
        raise ValueError(f"{file_format} cannot be written from a stream (its Beam sink drops records when a bundle "
                         f"spans several windows); stream to one of {', '.join(STREAMING_FORMATS)}")


def plain_values(value):
    """``value`` with numpy values as Python ones and non-finite floats as None, through lists and dicts."""
    if isinstance(value, (np.ndarray, np.generic)):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [plain_values(item) for item in value]
    if isinstance(value, dict):
        return {key: plain_values(item) for key, item in value.items()}
    return value


def schema_checked(record: dict, schema_name: str) -> dict:
    """``record`` as plain values, validated against the schema ``schema_name`` (ValueError if it does not fit)."""
    record = plain_values(record)
    validate(schema_name, record)
    return record


def _text_time_fields(schema_name: str) -> tuple[str, ...]:
    """Fields that are a double-or-string union in Avro and plain text in Arrow."""
    return tuple(field["name"] for field in avro_schema(schema_name)["fields"]
                 if isinstance(field["type"], list) and {"double", "string"} <= set(field["type"]))


def _with_text_fields(record: dict, field_names: tuple[str, ...]) -> dict:
    converted = dict(record)
    for name in field_names:
        if converted.get(name) is not None and not isinstance(converted[name], str):
            converted[name] = str(converted[name])
    return converted


class WriteRecords(beam.PTransform):
    """Write dict records that follow schema `schema_name` to `<prefix>-SSSSS-of-NNNNN.<ext>` files in one format.

    ``triggering_frequency`` (seconds) only matters for an unbounded input:
    Beam then writes one set of files per fixed window of that length, named
    ``<prefix>-[window start, window end)-SSSSS-of-NNNNN.<ext>``; an
    unbounded input in the global window requires it. Only the formats in
    ``STREAMING_FORMATS`` accept an unbounded input or a triggering
    frequency. The output is the PCollection of written file names.
    """

    def __init__(self, prefix: str, schema_name: str, file_format: str = "jsonl", num_shards: int = 1,
                 triggering_frequency: int | None = None):
        super().__init__()
        _check_format(file_format)
        avro_schema(schema_name)  # raises ValueError for an unknown schema
        if num_shards < 0:
            raise ValueError(f"num_shards must be >= 0 (0 lets the runner choose), got {num_shards}")
        if triggering_frequency is not None:
            if triggering_frequency <= 0:
                raise ValueError(f"triggering_frequency must be a positive number of seconds, "
                                 f"got {triggering_frequency}")
            _check_streamable(file_format)
        self.prefix = prefix
        self.schema_name = schema_name
        self.file_format = file_format
        self.num_shards = num_shards
        self.triggering_frequency = triggering_frequency

    def default_label(self) -> str:
        return f"WriteRecords({self.schema_name}, {self.file_format})"

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        if not records.is_bounded:
            _check_streamable(self.file_format)
        checked = records | "Check" >> beam.Map(schema_checked, self.schema_name)
        common = {"file_name_suffix": f".{self.file_format}", "num_shards": self.num_shards,
                  "triggering_frequency": self.triggering_frequency}
        if self.file_format == "jsonl":
            return (checked
                    | "ToJson" >> beam.Map(json.dumps, sort_keys=True, allow_nan=False)
                    | "Write" >> beam.io.WriteToText(self.prefix, **common))
        if self.file_format == "avro":
            return checked | "Write" >> beam.io.WriteToAvro(self.prefix, schema=avro_schema(self.schema_name),
                                                            **common)
        text_fields = _text_time_fields(self.schema_name)
        if text_fields:
            checked = checked | "TimeAsText" >> beam.Map(_with_text_fields, text_fields)
        return checked | "Write" >> beam.io.WriteToParquet(self.prefix, schema=arrow_schema(self.schema_name),
                                                           **common)


def read_records(path_pattern: str, file_format: str) -> list[dict]:
    """All records of the files matching the glob ``path_pattern``, file by file in name order (no Beam).

    Windowed file names contain ``[``, a glob character: pass ``glob.escape(path)`` to read one such file.
    """
    _check_format(file_format)
    paths = sorted(glob.glob(path_pattern))
    if not paths:
        raise FileNotFoundError(f"no {file_format} files match {path_pattern!r}")
    records: list[dict] = []
    for path in paths:
        if file_format == "jsonl":
            with open(path, encoding="utf-8") as lines:
                records.extend(json.loads(line) for line in lines if line.strip())
        elif file_format == "avro":
            with open(path, "rb") as avro_file:
                records.extend(fastavro.reader(avro_file))
        else:
            records.extend(pq.read_table(path).to_pylist(maps_as_pydicts="strict"))  # maps as dicts, as avro
    return records


class WriteCheckpoints(beam.DoFn):
    """Writes each ``CheckpointSaved`` the release stage emits to ``directory``; keeps the latest ``keep`` files
    per stream.  Yields the path written.

    ``publish`` (streaming): a callable that writes one release durably into the output (one file per slot,
    ``pipelines.slot_files.SlotFileWriter``); each checkpoint's releases are published before the checkpoint is
    saved, so a checkpoint never records a slot as released that no output holds.  Without it (a batch sink, which
    publishes only when the pipeline ends) the checkpoint carries its releases itself."""

    def __init__(self, directory: str, keep: int = 3, publish=None):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
        self.directory, self.keep, self.publish = directory, keep, publish

    def process(self, element):
        stream, next_slot, payload, releases = element
        if self.publish is not None:
            for release in releases:
                self.publish(release)
        name = checkpoint.file_name(stream, next_slot)
        path = os.path.join(self.directory, name) if checkpoint.is_local(self.directory) else \
            self.directory.rstrip("/") + "/" + name
        checkpoint.write_atomically(path, payload)
        prefix = name.rsplit("-", 1)[0] + "-"
        older = [f for f in checkpoint.checkpoint_files(self.directory) if os.path.basename(f).startswith(prefix)]
        stale = sorted(older)[:-self.keep]
        if stale:
            if checkpoint.is_local(self.directory):
                for f in stale:
                    try:
                        os.remove(f)
                    except FileNotFoundError:  # another worker pruned it first
                        pass
            else:
                from apache_beam.io.filesystems import FileSystems

                FileSystems.delete(stale)
        yield path

