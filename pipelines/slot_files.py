"""Streaming releases written one file per stream and slot, named by the slot's start time.

``releases-2008-02-02T13:50:00Z.jsonl`` holds exactly the release of the slot
that starts then (``releases-<start>-<stream>.jsonl`` for a stream other than
``default``).  Beam's windowed text files are named by the window a release
was *emitted* in, which is the slot after the one released (a slot is
released once its end plus the allowed lateness has passed); naming by the
release's own ``slot_start`` avoids that.  Each file is written whole under a
temporary name and renamed, so a reader never sees half a release; a retried
bundle rewrites the same file with the same record.  The checkpoint writer
publishes the same files (:class:`SlotFileWriter`) before it saves a
checkpoint, so both may write one slot's file: each writes under its own
temporary name and the rename replaces the file with the same content.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from datetime import datetime, timezone

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.sinks import schema_checked  # the same schema check and plain values as every other sink

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slot_file_name(prefix: str, release: dict, suffix: str = ".jsonl") -> str:
    """``<prefix>-<slot start, UTC ISO 8601>[-<stream>]<suffix>``."""
    start = datetime.fromtimestamp(release["slot_start"], tz=timezone.utc)
    stamp = start.strftime("%Y-%m-%dT%H:%M:%S") + (f".{start.microsecond:06d}" if start.microsecond else "") + "Z"
    stream = release.get("stream", "default")
    tail = "" if stream == "default" else "-" + (_UNSAFE.sub("_", stream)[:80] or "_")
    return f"{prefix}-{stamp}{tail}{suffix}"


def write_slot_file(prefix: str, release: dict) -> str:
    """Write one release's file (under a temporary name of its own, then renamed); returns its path."""
    path = slot_file_name(prefix, release)
    temporary = f"{path}.{uuid.uuid4().hex}.part"
    line = (json.dumps(schema_checked(release, "release"), sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
    if "://" in path:  # an object store publishes the object whole when it is closed
        with FileSystems.create(temporary) as f:
            f.write(line)
        FileSystems.rename([temporary], [path])
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(temporary, "wb") as f:  # local: on disk before the rename, so a checkpoint after it can count on it
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    return path


class SlotFileWriter:
    """``WriteCheckpoints(publish=...)``: a release record as the release stage made it, written as its slot file
    (in the interval's units for a numeric stream, as ``PrivateStreamHistogram`` outputs it)."""

    def __init__(self, prefix: str, numeric=None):
        self.prefix, self.numeric = prefix, numeric

    def __call__(self, release: dict) -> str:
        return write_slot_file(self.prefix, release if self.numeric is None else self.numeric.in_domain_units(release))


class _WriteSlotFile(beam.DoFn):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def process(self, release: dict):
        yield write_slot_file(self.prefix, release)


class WriteSlotFiles(beam.PTransform):
    """Release records -> one JSON-lines file per (stream, slot); the output is the written paths."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def expand(self, releases):
        return releases | "WriteSlotFile" >> beam.ParDo(_WriteSlotFile(self.prefix))
