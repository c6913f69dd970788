"""Checkpoints of the numeric per-user stage (``transforms.numeric_clients``): every user's :class:`Carried` state
and each stream's last estimate in one file, written by bounded runs (:func:`write_clients_checkpoint`) and by
streaming jobs (:class:`WriteClientCheckpoints`), read back to resume (:func:`read_clients_checkpoint`).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.coders import BytesCoder, TupleCoder, VarIntCoder
from apache_beam.transforms.window import GlobalWindow

from transforms import checkpoint
from transforms.coders import ValueCoder
from transforms.encoding import decode_value, encode_value
from transforms.engine import CheckpointSaved
from transforms.numeric_slot_releases import arm_timer
from transforms.numeric_stage_config import ClientStageConfig

USER_STATE, STREAM_ESTIMATE = "user", "estimate"  # what the streaming checkpoint writer receives


class Carried(NamedTuple):
    """One user's per-user stage at the end of a bounded run, what a resumed run continues from: the client row
    (None: never reported), the first slot not yet closed (the stream's slots before the largest of its users'
    are late for everyone in a resumed run), the declaration in force and the ledger's tail
    (``transforms.numeric_ledger.carried_tail``: the recent charges a later window still reaches)."""

    row: tuple | None
    next_slot: int
    declared: tuple | None
    tail: dict
    recent: tuple = ()  # the crowd distribution: the user's reports ``(slot, value)`` a later slot's mean reads


CLIENTS_STREAM = "\x00per-user-clients"
"""The name a per-user client checkpoint is filed under (``checkpoint.file_name``): no stream is called so."""


class CarriedClients(dict):
    """``(stream, user) -> Carried`` as read from a checkpoint, with ``estimates``: each stream's last released
    estimate (``stream -> (slot, estimate, released)``), which its skipped slots repeat in the resumed run, and how
    many slots it released (its releases' ``mechanism_slot`` continues from there; absent in older files)."""

    def __init__(self, carried=(), estimates: dict | None = None):
        super().__init__(carried)
        self.estimates = dict(estimates or {})


def clients_checkpoint(carried: dict, config: ClientStageConfig, estimates: dict) -> tuple[int, checkpoint.Checkpoint]:
    """Every user's :class:`Carried` state (``(stream, user) -> Carried``) and each stream's last estimate
    (``stream -> (slot, estimate)``) as one checkpoint (the project's format, ``transforms.checkpoint``), with the
    slot its file is named after (the largest next slot)."""
    crowd = config.crowd is not None  # with it, each row ends with the user's recent reports
    table = [(stream, user, None if c.row is None else tuple(c.row), c.next_slot, c.declared, c.tail,
              *((tuple(c.recent),) if crowd else ())) for (stream, user), c in sorted(carried.items())]
    saved = checkpoint.Checkpoint(config.label, config.build().params.to_json(), config.clock.slot_seconds,
                                  config.clock.origin, config.insecure_seed, live={"per_user_clients": len(table)},
                                  arrays={"clients": np.frombuffer(encode_value(table), np.uint8),
                                          "estimates": np.frombuffer(encode_value(sorted(
                                              (stream, *at) for stream, at in estimates.items())), np.uint8)})
    return max((c.next_slot for c in carried.values()), default=0), saved


def write_clients_checkpoint(carried: list, config: ClientStageConfig, directory: str, before: dict | None,
                             estimates: dict | None = None) -> str:
    """Every user's :class:`Carried` state (``before``'s users absent from this run kept as they were) and each
    stream's last estimate (``estimates``: the ``"estimates"`` output) as one checkpoint file in ``directory``
    (:func:`clients_checkpoint`); returns its path."""
    merged = dict(before or {})
    merged.update(carried)
    next_slot, saved = clients_checkpoint(merged, config, {**getattr(before, "estimates", {}), **(estimates or {})})
    path = os.path.join(directory, checkpoint.file_name(CLIENTS_STREAM, next_slot))
    os.makedirs(directory, exist_ok=True)
    checkpoint.save(path, saved)
    return path


def holds_clients_only(path: str) -> bool:
    """Whether the checkpoint at ``path`` holds per-user client state and no release stage's (so the central path
    must not resume from it: it would start afresh)."""
    try:
        saved = checkpoint.load_for_resume(path)
    except checkpoint.CheckpointError:
        return False  # the central path reports it
    return not saved.streams and saved.live is not None and "per_user_clients" in saved.live


def read_clients_checkpoint(path: str, config: ClientStageConfig) -> dict:
    """``(stream, user) -> Carried`` from :func:`write_clients_checkpoint`'s file (or the latest in a directory),
    checked against ``config``; one-line ``CheckpointError`` otherwise."""
    saved = checkpoint.load_for_resume(path)
    if not saved.live or "per_user_clients" not in saved.live or "clients" not in saved.arrays:
        raise checkpoint.CheckpointError(f"checkpoint {path} holds no per-user client state (written without "
                                         "--per-user-clients?)")
    saved.check(config.label, config.build().params, config.clock.slot_seconds, config.clock.origin,
                config.insecure_seed, path)
    carried, row_type = CarriedClients(), config.method().row_type
    if "estimates" in saved.arrays:
        rows = decode_value(saved.arrays["estimates"].tobytes())
        carried.estimates = {stream: tuple(at) for stream, *at in rows}  # (slot, estimate[, released count])
    for stream, user, row, next_slot, declared, tail, *recent in decode_value(saved.arrays["clients"].tobytes()):
        if row is not None and row_type is not None and len(row) == len(row_type._fields):
            row = row_type(*row)
        elif row is not None:
            raise checkpoint.CheckpointError(f"checkpoint {path}: a user's state row does not fit {config.mechanism}")
        carried[(stream, user)] = Carried(row, next_slot, None if declared is None else tuple(declared), tail,
                                          tuple(tuple(report) for report in recent[0]) if recent else ())
    return carried


def resumed_first_open(resume: dict) -> dict:
    """Each resumed stream's first slot the checkpoint did not close: after its users' next slots and its last
    released slot (``resume.estimates``)."""
    first_open: dict = {}
    for (stream, _), before in resume.items():
        first_open[stream] = max(first_open.get(stream, 0), before.next_slot)
    for stream, (slot, *_) in getattr(resume, "estimates", {}).items():
        first_open[stream] = max(first_open.get(stream, 0), slot + 1)
    return first_open


class WriteClientCheckpoints(beam.DoFn):
    """Streaming ``--per-user-clients`` checkpoints: every user's :class:`Carried` state and each stream's last
    estimate, as the batch replay writes them (:func:`clients_checkpoint`), after every ``every``-th slot and at
    the end of the input.  One key (``CLIENTS_STREAM``) gathers the users' states (sent by each firing of the
    per-user stage, stamped with the slot's close) and the releases' estimates (stamped with their release); a
    checkpoint after slot S takes what is stamped up to S's release time (``SlotClock.release_micros``) once the
    watermark has passed it, so it is one consistent cut (every report it charged is released in it) on a runner
    that holds the per-user stage's output watermark at its pending timers (Dataflow, Flink); the direct runner
    may fire a cut before the rest of its slots arrive, and then writes the same file again with them.  Each user's
    next slot is at least its stream's next unreleased slot (so that neither a streaming nor a batch resume
    releases a slot twice).  Outputs ``CheckpointSaved`` for ``transforms.sinks.WriteCheckpoints``."""

    HELD = BagStateSpec("held", TupleCoder((VarIntCoder(), BytesCoder())))  # (µs stamped, encoded state)
    SNAPSHOT = ReadModifyWriteStateSpec("snapshot", ValueCoder())  # (user rows, estimate rows) of the last cut
    ARMED = ReadModifyWriteStateSpec("armed", VarIntCoder())
    CUT = TimerSpec("cut", TimeDomain.WATERMARK)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, config: ClientStageConfig, every: int, before: dict | None = None):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint_every must be an integer >= 1, got {every!r}")
        self.config, self.every, self.clock = config, every, config.clock
        self.before = CarriedClients(before or {}, getattr(before, "estimates", {}))

    def cut_slot(self, stamped: int) -> int:
        """The first slot S released at or after ``stamped`` µs with S + 1 a multiple of ``every``: the checkpoint
        that takes what is stamped so."""
        slot = self.clock.slot_of(stamped / 1e6 - self.clock.allowed_lateness - self.clock.slot_seconds) - 1
        while self.clock.release_micros(slot) < stamped:
            slot += 1
        return slot + -(slot + 1) % self.every

    def process(self, element, timestamp=beam.DoFn.TimestampParam, held=beam.DoFn.StateParam(HELD),
                armed=beam.DoFn.StateParam(ARMED), cut=beam.DoFn.TimerParam(CUT), end=beam.DoFn.TimerParam(END)):
        held.add((timestamp.micros, element[1]))
        arm_timer(armed, cut, self.clock.release_micros(self.cut_slot(timestamp.micros)) + 1)
        end.set(GlobalWindow().max_timestamp())

    @on_timer(CUT)
    def on_cut(self, fired=beam.DoFn.TimestampParam, held=beam.DoFn.StateParam(HELD),
               snapshot=beam.DoFn.StateParam(SNAPSHOT), armed=beam.DoFn.StateParam(ARMED),
               cut=beam.DoFn.TimerParam(CUT)):
        items = list(held.read())
        held.clear()
        armed.clear()
        later = [item for item in items if item[0] >= fired.micros]
        for item in later:
            held.add(item)
        if later:
            arm_timer(armed, cut, self.clock.release_micros(self.cut_slot(min(at for at, _ in later))) + 1)
        now = [item for item in items if item[0] < fired.micros]
        return self._cut(snapshot, now, self.cut_slot(fired.micros - 1) + 1) if now else []

    @on_timer(END)
    def on_end(self, held=beam.DoFn.StateParam(HELD), snapshot=beam.DoFn.StateParam(SNAPSHOT)):
        items = list(held.read())
        held.clear()
        return self._cut(snapshot, items, None) if items else []

    def _cut(self, snapshot, items: list, name_slot: int | None) -> list:
        """Fold ``items`` into the last cut's state and encode it (named after ``name_slot``, the slot after the
        cut; None at the end: the largest next slot, as the batch replay names its file).  The fold does not
        depend on the order the items came in: a user's state with the larger next slot, a stream's latest
        estimate."""
        saved = snapshot.read()
        if saved is None:
            users, estimates = dict(self.before), dict(self.before.estimates)
        else:
            users = {(stream, user): Carried(row, *rest) for stream, user, row, *rest in saved[0]}
            estimates = {stream: tuple(at) for stream, *at in saved[1]}
        for _, payload in items:
            kind, stream, *state = decode_value(payload)
            if kind == USER_STATE:
                user, row, next_slot, declared, tail, recent = state
                if (stream, user) not in users or next_slot >= users[(stream, user)].next_slot:
                    users[(stream, user)] = Carried(row, next_slot, declared, tail, tuple(recent))
            else:
                estimates[stream] = max(estimates.get(stream, (-1, 0.0)), tuple(state))
        users = {key: c._replace(next_slot=max(c.next_slot, estimates.get(key[0], (-1,))[0] + 1))
                 for key, c in users.items()}
        snapshot.write(([(*key, None if c.row is None else tuple(c.row), *c[1:]) for key, c in users.items()],
                        [(stream, *at) for stream, at in estimates.items()]))
        next_slot, saved_checkpoint = clients_checkpoint(users, self.config, estimates)
        return [CheckpointSaved(CLIENTS_STREAM, next_slot if name_slot is None else name_slot,
                                checkpoint.encode(saved_checkpoint))]
