"""A watched directory, released live: the graph's stages in a loop paced by the wall clock.

Beam's local runners do not pace polling sources in real time (measured with
``fileio.MatchContinuously`` and ``PeriodicImpulse`` on the Direct and
FnApi runners: the whole polling schedule runs in seconds, then the
pipeline ends), so ``pipelines.streaming --watch`` runs the same stage code
(``parse_record``, the per-user slot rule, the stream engine
``transforms.engine.StreamEngine`` and the ledger's ``check_windows``) in a plain loop: every
``poll`` seconds it reads new ``*.jsonl`` files, closes the slots whose
end plus allowed lateness has passed on the wall clock, releases them in
order and appends each release to ``releases-live.jsonl`` as it is made.

With a checkpoint file the loop survives being stopped or killed.  Each round
(read new files, release due slots) is committed write-ahead: first the
checkpoint (every stage's state, the files consumed, the round's output lines
and the output files' sizes before them), then the lines are appended.  A
restart truncates each output file to the size the checkpoint recorded and
appends the round's lines again, so every line is written exactly once; a
round that never reached its checkpoint published nothing and is redone.  A
slot is therefore never released twice (which would spend its budget twice),
and files consumed before the checkpoint are not read again.

Handing files over (docs/operations.md).  The loop reads ``*.jsonl`` files
only, each once, whole.  Producers write ``NAME.jsonl.part`` (or any other
name not ending in ``.jsonl``) and rename it to ``NAME.jsonl`` when it is
complete; a rename within one file system is atomic.  For producers that
cannot rename, the loop also takes a ``*.jsonl`` file only once its
modification time is ``settle_seconds`` in the past (every write moves it), and
never reads a file while an older one is still settling (the older one's
records would otherwise be judged late); a producer must then never pause
longer than that between two writes of one file.  A file that changes
after it was read is reported (its new lines are not read): a finished file
must not be appended to.
"""

from __future__ import annotations

import collections
import glob
import json
import logging
import os
import time

import numpy as np

from pipelines.logs import add_counts
from transforms.checkpoint import Checkpoint, load, save
from transforms.ledger import charge_chunk, check_windows, empty_tail
from transforms.parse import ParseConfig, parse_record
from transforms.private_histogram import PrivateStreamHistogram
from transforms.records import Event, dead_letter
from transforms.engine import (ChargeChunk, CheckpointSaved, DeadLetter, Duplicates, EvaluationRow, LateRecord,
                               RecordsUsed, Released, StreamEngine, StreamOutputs)
from transforms.slotting import close_slots
from transforms.user_state import SEP

_LOGGER = logging.getLogger(__name__)
OUTPUTS = ("releases", "dead_letters", "violations")


class LiveRelease:
    """Holds every stage's state between polls; resumes from ``checkpoint`` when that file exists."""

    def __init__(self, watch: str, output: str, parse: ParseConfig, transform: PrivateStreamHistogram,
                 checkpoint: str | None = None, settle_seconds: float = 0.0):
        if not settle_seconds >= 0:
            raise ValueError(f"settle_seconds must be >= 0, got {settle_seconds!r}")
        self.watch, self.output, self.parse = watch, output, parse
        self.settle_seconds = settle_seconds
        self.read_signature: dict = {}  # path -> (size, mtime_ns) when read: a later change is reported
        self.clock, self.config = transform.clock, transform.config
        self.numeric = transform.numeric  # numeric events (``--domain``): releases mapped back to the interval
        if self.config.evaluate or self.config.checkpoint_every:
            raise ValueError("the watch loop measures no utility and saves its own checkpoint (--checkpoint): "
                             "build the transform without evaluate and checkpoint_every")
        self.max_window = transform.ledger_max_window
        self.checkpoint = checkpoint
        self.seen: set = set()
        self.pending: dict = {}       # (stream, user) -> events of open slots
        self.declared: dict = {}      # (stream, user) -> requirement in force
        self.last_closed: dict = {}   # (stream, user) -> last closed slot
        self.runs: dict = {}          # stream -> StreamEngine
        self.tails: dict = {}         # (stream, user) -> ledger tail
        self.counts = {"records_read": 0, "records_used": 0, "duplicates": 0, "late": 0, "dead_letters": 0,
                       "releases": 0, "fresh": 0, "ledger_violations": 0}
        self.outbox: collections.deque = collections.deque()  # (output name, line) of the round, not yet written
        self.outputs = _LoopOutputs(self)
        self.consumed_since_commit = False
        os.makedirs(output, exist_ok=True)
        self.paths = {name: os.path.join(output, f"{name}-live.jsonl") for name in OUTPUTS}
        restored = None
        if checkpoint and os.path.exists(checkpoint):
            restored = load(checkpoint)
            self.config.check_checkpoint(restored, checkpoint)
            self._restore(restored)
        self.files = {name: open(path, "a", encoding="utf-8") for name, path in self.paths.items()}
        if restored is not None:
            self._publish()  # the round the checkpoint committed may not have been written, or only in part
            self._publish_carried()
            _LOGGER.info("resumed from %s: %d files consumed, next slots %s", checkpoint, len(self.seen),
                         {s: r.next_slot for s, r in self.runs.items()})

    def close(self, commit: bool = True) -> None:
        """Commit what is pending (unless stopping after an interruption: the checkpoint has it) and close."""
        if commit:
            self.commit()
        for f in self.files.values():
            f.close()

    def _write(self, name: str, record: dict) -> None:
        self.outbox.append((name, json.dumps(record, sort_keys=True) + "\n"))

    def poll(self, settled: bool = False) -> None:
        """Read files that appeared since the last poll and have settled (or all, with ``settled``), oldest
        first.

        Consumed files that left the directory are forgotten, so the set of
        consumed files (kept in every checkpoint) is never larger than the
        directory: a job that runs for years with its inputs rotated away
        does not grow.  A new file with a forgotten name is read as new.
        """
        now = time.time()  # the file system's clock, not the loop's
        listing = []
        for path in glob.glob(os.path.join(self.watch, "*.jsonl")):
            try:
                status = os.stat(path)
            except FileNotFoundError:  # removed between listing and stat: nothing to read
                continue
            listing.append((status.st_mtime, path, (status.st_size, status.st_mtime_ns)))
        present = {path for _, path, _ in listing}
        if not self.seen <= present:
            self.seen &= present
            self.consumed_since_commit = True  # the next checkpoint records the smaller set
        self.read_signature = {path: v for path, v in self.read_signature.items() if path in present}
        for _, path, signature in sorted(listing):
            if path in self.seen:
                if self.read_signature.setdefault(path, signature) != signature:
                    self.read_signature[path] = signature  # reported once per change
                    _LOGGER.warning("%s changed after it was read; the loop reads each file once (write NAME.jsonl"
                                    ".part, then rename it): what was added is not read", path)
                continue
            if not (settled or now - signature[1] / 1e9 >= self.settle_seconds):
                break  # newer files wait for this one
            self.seen.add(path)
            self.consumed_since_commit = True
            read = 0
            with open(path, encoding="utf-8", errors="replace", newline="\n") as f:  # only \n ends a record
                for line in f:
                    read += 1
                    self._accept(parse_record(line.rstrip("\n"), self.parse))
            self.counts["records_read"] += read
            self.read_signature[path] = signature
            add_counts(read=read)

    def _accept(self, parsed) -> None:
        if not isinstance(parsed, Event):
            self._dead(parsed)
            return
        key = (parsed.stream, parsed.user)
        slot = self.clock.slot_of(parsed.time)
        if key in self.last_closed and slot <= self.last_closed[key]:
            self.counts["late"] += 1
            self._write("dead_letters", dead_letter(f"late: slot {slot} closed", parsed.raw, "user_slot_state",
                                                    parsed.stream, parsed.user))
            return
        self.pending.setdefault(key, []).append(parsed)

    def _dead(self, letter: dict) -> None:
        self.counts["dead_letters"] += 1
        self._write("dead_letters", letter)

    def release_due(self, now: float) -> int:
        """Close every slot whose end plus lateness has passed; release those slots in order; commit."""
        by_stream: dict = {}
        for key in list(self.pending):
            due = [e for e in self.pending[key] if self.clock.close_time(self.clock.slot_of(e.time)) <= now]
            if not due:
                continue
            self.pending[key] = [e for e in self.pending[key] if e not in due]
            if not self.pending[key]:
                del self.pending[key]
            outcome, self.declared[key] = close_slots(due, self.clock, self.declared.get(key))
            self.last_closed[key] = max(self.clock.slot_of(e.time) for e in due)
            self.counts["duplicates"] += outcome.duplicates
            by_stream.setdefault(key[0], []).extend(outcome.contributions)
        released = 0
        release_range = self.config.release_range
        if release_range is not None:  # every closed slot of the range, also in streams with no new data
            by_stream = {**{stream: [] for stream in self.runs}, **by_stream}
        for stream, contributions in by_stream.items():
            run = self.runs.get(stream) or self.runs.setdefault(stream, StreamEngine.load(self.config, stream, None))
            rows = [tuple(c) for c in contributions]
            last = (max(c.slot for c in contributions) if release_range is None
                    else release_range.last_due(self.clock, now * 1_000_000))
            before = self.counts["releases"]
            for output in (*run.release_until(last, rows, final=False), *run.flush(final=False)):
                output.deliver(self.outputs)
            released += self.counts["releases"] - before
        self.commit()
        return released

    def _publish_carried(self) -> None:
        """A replay's checkpoint may carry releases no output is known to hold: the loop publishes them, committed
        like a round (in the loop's checkpoint first, then appended), so each is written once."""
        carried = False
        for run in self.runs.values():
            for record in run.unpublished:
                self.outputs.released(Released(record))
                carried = True
            run.unpublished = []
            for output in run.flush(final=False):  # and their charges, into the loop's ledger windows
                output.deliver(self.outputs)
                carried = True
        if carried:
            self.commit()

    # ------------------------------------------------------------------ commit and resume
    def commit(self) -> None:
        """End of a round: save the checkpoint (with the round's lines), then write the lines."""
        if not self.outbox and not self.consumed_since_commit:
            return
        if self.checkpoint:
            self._save_checkpoint()
        self.consumed_since_commit = False
        self._publish()

    def _save_checkpoint(self) -> None:
        for f in self.files.values():
            f.flush()
        sizes = {name: os.path.getsize(path) for name, path in self.paths.items()}
        save(self.checkpoint, self.snapshot(sizes))

    def _publish(self) -> None:
        """Append the round's lines, then make them durable: the next checkpoint counts on their sizes."""
        while self.outbox:
            name, line = self.outbox[0]
            self.files[name].write(line)
            self.outbox.popleft()
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())

    def snapshot(self, sizes: dict) -> Checkpoint:
        """The whole loop's state; ``sizes`` are the output files' sizes before the round's lines."""
        keys = sorted(self.tails)
        tails = [self.tails[k] for k in keys]
        opened = [(i, *window) for i, tail in enumerate(tails) for window in tail["open"]]
        arrays = {"ledger.sizes": np.array([t["slots"].size for t in tails], np.int64),
                  "ledger.keep": np.array([t.get("keep", 0) for t in tails], np.int64),
                  "ledger.slots": np.concatenate([t["slots"] for t in tails] or [np.zeros(0, np.int64)]),
                  "ledger.spent": np.concatenate([t["spent"] for t in tails] or [np.zeros(0, np.int64)]),
                  "ledger.dc": np.concatenate([t["dc"] for t in tails] or [np.zeros(0, np.int64)]),
                  "ledger.before": np.array([t.get("before", 0) for t in tails], np.int64),
                  "ledger.open": np.array(opened, np.int64).reshape(-1, 4)}
        live = {"consumed": sorted(self.seen), "counts": self.counts, "ledger_keys": keys,
                "pending": [list(e) for key in sorted(self.pending) for e in self.pending[key]],
                "declared": [[*key, None if d is None else list(d)] for key, d in sorted(self.declared.items())],
                "last_closed": [[*key, slot] for key, slot in sorted(self.last_closed.items())],
                "sizes": sizes, "outbox": list(self.outbox)}
        return self.config.new_checkpoint({s: run.state() for s, run in self.runs.items()}, live=live,
                                          arrays=arrays)

    def _restore(self, checkpoint: Checkpoint) -> None:
        """Continue ``checkpoint``; one a Beam job wrote has only the streams (every file is then read)."""
        self.runs = {s: StreamEngine.load(self.config, s, state) for s, state in checkpoint.streams.items()}
        live, arrays = checkpoint.live, checkpoint.arrays
        if live is None:
            return
        self.seen = set(live["consumed"])
        self.counts.update(live["counts"])
        for stream, user, time_, value, requirement, raw in live["pending"]:
            event = Event(stream, user, time_, value, None if requirement is None else tuple(requirement), raw)
            self.pending.setdefault((stream, user), []).append(event)
        self.declared = {(s, u): None if d is None else tuple(d) for s, u, d in live["declared"]}
        self.last_closed = {(s, u): slot for s, u, slot in live["last_closed"]}
        ends = np.cumsum(arrays["ledger.sizes"])
        opened = arrays["ledger.open"]
        for i, key in enumerate(live["ledger_keys"]):
            start = ends[i] - arrays["ledger.sizes"][i]
            tail = {"slots": arrays["ledger.slots"][start:ends[i]].copy(),
                    "spent": arrays["ledger.spent"][start:ends[i]].copy(),
                    "dc": arrays["ledger.dc"][start:ends[i]].copy() if "ledger.dc" in arrays
                    else np.zeros(ends[i] - start, np.int64),
                    "open": [tuple(int(v) for v in row[1:]) for row in opened[opened[:, 0] == i]],
                    "before": int(arrays["ledger.before"][i]) if "ledger.before" in arrays else 0}
            if arrays["ledger.keep"][i]:
                tail["keep"] = int(arrays["ledger.keep"][i])
            self.tails[key] = tail
        for name, size in live["sizes"].items():  # drop what a killed round wrote after its checkpoint
            path = self.paths[name]
            if os.path.exists(path) and os.path.getsize(path) >= size:
                os.truncate(path, size)
            else:
                _LOGGER.warning("%s is shorter than the checkpoint recorded (moved or truncated by hand?); "
                                "appending after what is there", path)
        self.outbox = collections.deque((name, line) for name, line in live["outbox"])


def watch(directory: str, output: str, parse: ParseConfig, transform: PrivateStreamHistogram,
          poll_seconds: float, max_slots: int | None, clock=time.time, sleep=time.sleep,
          checkpoint: str | None = None, settle_seconds: float = 0.0, on_round=None) -> dict:
    """Run until ``max_slots`` slots of wall-clock time have passed (or Ctrl-C); returns the counts.  After every
    round ``on_round(released_something)`` is called when given.

    Without a checkpoint, stopping closes every open slot (there is no later run to finish them); with one,
    open slots stay open in the checkpoint and the next run continues them; files still settling are read
    at the end without one (no later run would read them) and left to the next run with one.
    """
    live = LiveRelease(directory, output, parse, transform, checkpoint, settle_seconds)
    started = clock()
    interrupted = False
    try:
        while max_slots is None or clock() - started < max_slots * transform.clock.slot_seconds:
            live.poll()
            released = live.release_due(clock())
            if on_round is not None:  # e.g. report_html.Refresher.refresh: the page as slots are released
                on_round(released > 0)
            sleep(poll_seconds)
        live.poll(settled=not checkpoint)
        live.release_due(clock() if checkpoint else float("inf"))
    except KeyboardInterrupt:
        interrupted = True
        if not checkpoint:
            live.release_due(float("inf"))
    finally:
        live.close(commit=not (interrupted and checkpoint))  # the checkpoint holds an interrupted round
    # report.json is written by the caller from the output files (pipelines.cli.finish_watch), also after a signal
    return {**live.counts, "users": len(live.tails), "pairs": [tuple(k.split(SEP, 1)) for k in live.tails],
            "stopped": "interrupted" if interrupted else None}


class _LoopOutputs(StreamOutputs):
    """The stream engines' outputs as the loop's files and counts; charges go through the loop's ledger."""

    def __init__(self, live: LiveRelease):
        self.live = live

    def released(self, output: Released) -> None:
        counts = self.live.counts
        fresh = output.record["kind"] == "fresh"
        counts["releases"] += 1
        counts["fresh"] += fresh
        add_counts(released=1, fresh=fresh)
        numeric = self.live.numeric  # a numeric mechanism runs in grid units: its release in the interval's
        self.live._write("releases", output.record if numeric is None else numeric.in_domain_units(output.record))

    def records_used(self, output: RecordsUsed) -> None:
        self.live.counts["records_used"] += output.records

    def dead_letter(self, output: DeadLetter) -> None:
        self.live._dead(output.letter)

    def late(self, output: LateRecord) -> None:
        self.live.counts["late"] += 1
        self.live._write("dead_letters", output.letter)

    def duplicates(self, output: Duplicates) -> None:
        self.live.counts["duplicates"] += output.records

    def evaluation(self, output: EvaluationRow) -> None:
        raise AssertionError("refused in LiveRelease: the loop measures no utility")

    def checkpoint(self, output: CheckpointSaved) -> None:
        raise AssertionError("refused in LiveRelease: the loop saves its own checkpoint, with every stage's state")

    def charges(self, output: ChargeChunk) -> None:
        live = self.live
        tail, worst, violations = check_windows(live.tails.get(output.key, empty_tail()),
                                                charge_chunk(*output.ledger_input()),
                                                live.max_window)
        live.tails[output.key] = tail
        live.counts["max_window_usage_ratio"] = max(live.counts.get("max_window_usage_ratio", 0.0), float(worst))
        for violation in violations:
            live.counts["ledger_violations"] += 1
            live._write("violations", {"key": output.key, **violation})
