"""Portable checkpoints of the release state, so that a stopped job can be continued by a new one.

A runner (Dataflow, Flink) checkpoints Beam state itself; a checkpoint here is
what an operator carries from one job, or one machine, to the next so that
the privacy accounting continues.  Per stream it holds the mechanism
(``Mechanism.to_bytes``), the user ids in index order, each user's declaration
last seen, the next slot to release and, only when an insecure seed is in
use, the seeded generator's state (a secure generator's state is never
saved).  The watch loop (``pipelines.live``) adds its own state: the input
files consumed, events of slots still open, per-user slot state, the ledger's
windows, the counts, and the outputs of the round being published.

Version 2 adds, per stream, what the stream released but no output is known
to hold yet (``unpublished`` releases and, from a bounded run, the ``pending
charges`` of those slots for the ledger).  A Beam batch sink publishes its
files only when the pipeline ends, so a replay's checkpoint carries every
release of the job; a job resumed from it writes them first and the driver
clears them (:func:`acknowledge`) once its pipeline has finished.  A
checkpoint therefore never records a slot as released whose release is in no
output and in no checkpoint (docs/operations.md).  Version 1 files are still
read (nothing carried).

A file is ``MAGIC``, the SHA-256 of the rest, then an ``.npz`` archive
(loaded without pickle) whose ``header`` is JSON.  Loading checks the magic,
the version and the checksum, and :meth:`Checkpoint.check` compares the
mechanism, its parameters, the slot clock and the seed with the job's, so a
wrong or damaged checkpoint stops the job with one line before anything runs.
Files are written atomically (a temporary file, fsync, rename).

A checkpoint holds per-user state and raw events: protect it like the raw data.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import pickle
import tempfile
import zipfile
from dataclasses import dataclass, field, replace

import numpy as np

MAGIC = b"WEVENT-CHECKPOINT "
VERSION = 2
READABLE_VERSIONS = (1, 2)
SUFFIX = ".wevent"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, damaged, or written by a different configuration."""


@dataclass
class StreamState:
    """One stream's release state: everything the release stage needs to continue exactly."""

    mechanism: bytes                 # Mechanism.to_bytes()
    user_ids: list                   # user id of each dense index the mechanism uses
    declared: dict                   # user -> the declaration last seen (a tuple), for users who declared
    next_slot: int | None            # the next slot to release (None: nothing released yet)
    randomness: bytes | None = None  # pickled seeded generator; only with an insecure seed
    requirements: bytes | None = None  # DeclaredRequirements.to_bytes(): what users declared, for the ledger
    unpublished: list = field(default_factory=list)  # release records no output is known to hold yet (v2)
    pending_charges: list = field(default_factory=list)  # (users, table) per slot not yet sent to the ledger (v2)
    charge_parts: tuple | None = None  # the named parts of the pending charges' columns (v2)

    def acknowledged(self) -> "StreamState":
        """This state once its unpublished releases (and their charges) are known to be in the output."""
        return replace(self, unpublished=[], pending_charges=[], charge_parts=None)


@dataclass
class Checkpoint:
    """Release state of every stream, with what it was written for; ``live`` is the watch loop's state."""

    mechanism: str
    params: str                      # MechanismParams.to_json()
    slot_seconds: float
    origin: float
    insecure_seed: int | None
    streams: dict = field(default_factory=dict)   # stream -> StreamState
    live: dict | None = None         # JSON-able watch-loop state
    arrays: dict = field(default_factory=dict)    # the watch loop's numpy arrays (ledger windows)

    def check(self, mechanism: str, params, slot_seconds: float, origin: float,
              insecure_seed: int | None, source: str) -> None:
        """Raise one-line :class:`CheckpointError` unless this checkpoint fits the job's configuration.

        ``params``: the job's ``MechanismParams`` (a field added since the checkpoint was written must hold its
        default: ``MechanismParams.matches_json``), or another checkpoint's parameter JSON (equal text)."""
        if self.mechanism != mechanism:
            raise CheckpointError(f"checkpoint {source} was written by mechanism {self.mechanism}, not {mechanism}")
        params_json = params if isinstance(params, str) else params.to_json()
        if not (self.params == params_json if isinstance(params, str) else params.matches_json(self.params)):
            saved, now = json.loads(self.params), json.loads(params_json)
            differ = ", ".join(f"{k} saved {saved.get(k)!r} now {now.get(k)!r}" for k in sorted(set(saved) | set(now))
                               if saved.get(k) != now.get(k))
            raise CheckpointError(f"checkpoint {source} was written with other {mechanism} parameters: {differ}")
        if (self.slot_seconds, self.origin) != (slot_seconds, origin):
            raise CheckpointError(f"checkpoint {source} counts slots of {self.slot_seconds:g} s from "
                                  f"{self.origin:g}, this job of {slot_seconds:g} s from {origin:g}")
        if insecure_seed is not None and insecure_seed != self.insecure_seed:
            raise CheckpointError(f"checkpoint {source} was written with insecure seed {self.insecure_seed}, "
                                  f"not {insecure_seed}; resume with the same seed or without one (secure noise)")


def _blob(value) -> np.ndarray:
    return np.frombuffer(value, np.uint8)


def _json_blob(value) -> np.ndarray:
    return _blob(json.dumps(value, ensure_ascii=True, allow_nan=False).encode("ascii"))


def _records_blob(records: list) -> np.ndarray:
    """Release records as JSON (NaN kept: a resumed job writes exactly the record the old one made)."""
    return _blob(json.dumps(records, ensure_ascii=True, default=_plain_number).encode("ascii"))


def _plain_number(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a release record holds {type(value).__name__}, which a checkpoint cannot keep")


def _declaration(value):
    return None if value is None else tuple(value)


def encode(checkpoint: Checkpoint) -> bytes:
    """The file's bytes."""
    arrays, streams = {}, []
    for i, (name, state) in enumerate(sorted(checkpoint.streams.items())):
        streams.append({"stream": name, "next_slot": state.next_slot, "users": list(state.user_ids),
                        "declared": sorted([user, list(d)] for user, d in state.declared.items()),
                        "randomness": state.randomness is not None, "requirements": state.requirements is not None,
                        "unpublished": len(state.unpublished), "charge_slots": len(state.pending_charges),
                        "charge_parts": None if state.charge_parts is None else list(state.charge_parts)})
        if state.unpublished:
            arrays[f"stream{i}.unpublished"] = _records_blob(list(state.unpublished))
        if state.pending_charges:
            arrays[f"stream{i}.charge_rows"] = np.array([users.size for users, _ in state.pending_charges], np.int64)
            arrays[f"stream{i}.charge_users"] = np.concatenate([users for users, _ in state.pending_charges])
            arrays[f"stream{i}.charge_table"] = np.concatenate([table for _, table in state.pending_charges])
        arrays[f"stream{i}.mechanism"] = _blob(state.mechanism)
        if state.requirements is not None:
            arrays[f"stream{i}.requirements"] = _blob(state.requirements)
        if state.randomness is not None:
            arrays[f"stream{i}.randomness"] = _blob(state.randomness)
    header = {"format": "wevent-checkpoint", "version": VERSION, "mechanism": checkpoint.mechanism,
              "params": checkpoint.params, "slot_seconds": checkpoint.slot_seconds, "origin": checkpoint.origin,
              "insecure_seed": checkpoint.insecure_seed, "streams": streams, "live": checkpoint.live}
    for name, values in checkpoint.arrays.items():
        arrays[f"live.{name}"] = values
    buffer = io.BytesIO()
    np.savez(buffer, header=_json_blob(header), **arrays)
    body = buffer.getvalue()
    return MAGIC + str(VERSION).encode() + b"\n" + hashlib.sha256(body).digest() + body


def decode(payload: bytes, source: str) -> Checkpoint:
    """Parse :func:`encode` output; raises one-line :class:`CheckpointError`."""
    if not payload.startswith(MAGIC):
        raise CheckpointError(f"{source} is not a wevent checkpoint")
    line, _, rest = payload[len(MAGIC):].partition(b"\n")
    if line not in [str(v).encode() for v in READABLE_VERSIONS]:
        raise CheckpointError(f"checkpoint {source} has format version {line[:20].decode('ascii', 'replace')!r}; "
                              f"this version reads {', '.join(map(str, READABLE_VERSIONS))}")
    digest, body = rest[:32], rest[32:]
    if hashlib.sha256(body).digest() != digest:
        raise CheckpointError(f"checkpoint {source} is damaged (checksum mismatch); use an earlier copy")
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        header = json.loads(arrays.pop("header").tobytes())
        streams = {}
        for i, s in enumerate(header["streams"]):
            streams[s["stream"]] = StreamState(
                arrays.pop(f"stream{i}.mechanism").tobytes(), list(s["users"]),
                {user: _declaration(d) for user, d in s["declared"]}, s["next_slot"],
                arrays.pop(f"stream{i}.randomness").tobytes() if s["randomness"] else None,
                arrays.pop(f"stream{i}.requirements").tobytes() if s.get("requirements") else None,
                json.loads(arrays.pop(f"stream{i}.unpublished").tobytes()) if s.get("unpublished") else [],
                _charges(arrays, i) if s.get("charge_slots") else [],
                None if s.get("charge_parts") is None else tuple(s["charge_parts"]))
        return Checkpoint(header["mechanism"], header["params"], header["slot_seconds"], header["origin"],
                          header["insecure_seed"], streams, header["live"],
                          {k[5:]: v for k, v in arrays.items() if k.startswith("live.")})
    except (KeyError, TypeError, ValueError, zipfile.BadZipFile) as error:  # checksum fine: written by other code
        raise CheckpointError(f"checkpoint {source} cannot be read: {error}") from None


def _charges(arrays: dict, i: int) -> list:
    """The pending charges of stream ``i``: ``(users, table)`` per slot, as the stream engine keeps them."""
    rows = arrays.pop(f"stream{i}.charge_rows")
    users, table = arrays.pop(f"stream{i}.charge_users"), arrays.pop(f"stream{i}.charge_table")
    ends = np.cumsum(rows)
    return [(users[end - n:end].copy(), table[end - n:end].copy()) for n, end in zip(rows.tolist(), ends.tolist())]


def is_local(path: str) -> bool:
    return "://" not in path


def save(path: str, checkpoint: Checkpoint) -> None:
    """Write atomically: a crash leaves either the previous file or the new one, never a mix."""
    write_atomically(path, encode(checkpoint))


def write_atomically(path: str, payload: bytes) -> None:
    """Local files: temporary file, fsync, rename, fsync of the directory; object stores publish on close."""
    if not is_local(path):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(path) as f:
            f.write(payload)
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".checkpoint-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename itself survives a power cut
    finally:
        os.close(descriptor)


def load(path: str) -> Checkpoint:
    """Read one checkpoint file."""
    try:
        if is_local(path):
            with open(path, "rb") as f:
                payload = f.read()
        else:
            from apache_beam.io.filesystems import FileSystems

            with FileSystems.open(path) as f:
                payload = f.read()
    except OSError as error:
        raise CheckpointError(f"checkpoint {path} cannot be read: {error.strerror or error}") from None
    return decode(payload, path)


def file_name(stream: str, next_slot: int) -> str:
    """Where a Beam job writes one stream's checkpoint: sortable by slot, the stream hashed."""
    digest = hashlib.sha256(stream.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"checkpoint-{digest}-{next_slot:015d}{SUFFIX}"


def checkpoint_files(directory: str) -> list[str]:
    pattern = f"checkpoint-*{SUFFIX}"
    if is_local(directory):
        return sorted(glob.glob(os.path.join(directory, pattern))) if os.path.isdir(directory) else []
    from apache_beam.io.filesystems import FileSystems

    found = FileSystems.match([directory.rstrip("/") + "/" + pattern])[0].metadata_list
    return sorted(m.path for m in found)


def latest_files(directory: str) -> dict[str, str]:
    """Each stream's latest checkpoint file in ``directory`` (a Beam job's), by the stream's file-name prefix."""
    latest: dict[str, str] = {}
    for name in checkpoint_files(directory):  # names sort by stream digest, then slot: the last one is the latest
        latest[os.path.basename(name).rsplit("-", 1)[0]] = name
    return latest


def acknowledge(directory: str, resumed: Checkpoint | None = None) -> int:
    """After a batch job's pipeline has finished, so that its sinks have published every file: rewrite each
    stream's latest checkpoint in ``directory`` without its unpublished releases and charges (the output now holds
    them).  A stream of ``resumed`` (the checkpoint the job continued) that has no file there gets its state,
    acknowledged, so that a job resuming from ``directory`` continues every stream.  Returns the files written."""
    written = 0
    latest = latest_files(directory)
    for name in latest.values():
        saved = load(name)
        if any(s.unpublished or s.pending_charges for s in saved.streams.values()):
            saved.streams = {stream: state.acknowledged() for stream, state in saved.streams.items()}
            save(name, saved)
            written += 1
    if resumed is None:
        return written
    for stream, state in resumed.streams.items():
        name = file_name(stream, state.next_slot or 0)
        if name.rsplit("-", 1)[0] not in latest:
            path = os.path.join(directory, name) if is_local(directory) else directory.rstrip("/") + "/" + name
            save(path, replace(resumed, streams={stream: state.acknowledged()}, live=None, arrays={}))
            written += 1
    return written


def load_for_resume(path: str) -> Checkpoint:
    """A file, or a directory a Beam job wrote into: then each stream's latest checkpoint."""
    files = checkpoint_files(path)
    if not files:
        if is_local(path) and os.path.isdir(path):
            raise CheckpointError(f"checkpoint directory {path} holds no checkpoint-*{SUFFIX} file")
        if is_local(path) and not os.path.exists(path):
            raise CheckpointError(f"checkpoint {path} does not exist")
        return load(path)
    latest = latest_files(path)
    merged = None
    for name in latest.values():
        checkpoint = load(name)
        if merged is None:
            merged = checkpoint
            continue
        checkpoint.check(merged.mechanism, merged.params, merged.slot_seconds, merged.origin,
                         merged.insecure_seed, name)
        merged.streams.update(checkpoint.streams)
    return merged


_RANDOMNESS_CLASSES = {("transforms.mechanisms.noise", "InsecureSeededRandomness"), ("random", "Random"),
                       ("numpy", "dtype"), ("numpy", "ndarray")}
_NUMPY_RECONSTRUCTORS = {"__generator_ctor", "__bit_generator_ctor", "__randomstate_ctor", "PCG64",
                         "SeedSequence", "__pyx_unpickle_SeedSequence", "_frombuffer", "_reconstruct", "scalar"}


class _RandomnessUnpickler(pickle.Unpickler):
    """Loads a seeded generator and nothing else: a checkpoint file must not be able to run code."""

    def find_class(self, module, name):
        if (module, name) in _RANDOMNESS_CLASSES or (module.startswith("numpy.") and name in _NUMPY_RECONSTRUCTORS):
            return super().find_class(module, name)
        raise CheckpointError(f"checkpoint randomness refers to {module}.{name}, which a checkpoint may not load")


def dump_randomness(randomness) -> bytes:
    """A seeded generator's state (refuses a secure one: its state is never saved)."""
    if randomness.is_secure:
        raise ValueError("a secure generator's state is never saved")
    return pickle.dumps(randomness, protocol=pickle.HIGHEST_PROTOCOL)


def load_randomness(payload: bytes):
    """Inverse of :func:`dump_randomness`, loading only the generator's own classes."""
    try:
        randomness = _RandomnessUnpickler(io.BytesIO(payload)).load()
    except CheckpointError:
        raise
    except Exception as error:  # noqa: BLE001 - any unpickling failure means the payload is unusable
        raise CheckpointError(f"checkpoint randomness cannot be loaded: {error}") from None
    if getattr(randomness, "is_secure", True):
        raise CheckpointError("checkpoint randomness is not a seeded generator")
    return randomness
