"""A watched directory, released live: the graph's stages in a loop paced by the wall clock.

Beam's local runners do not pace polling sources in real time (measured with
``fileio.MatchContinuously`` and ``PeriodicImpulse`` on the Direct and
FnApi runners: the whole polling schedule runs in seconds, then the
pipeline ends), so ``pipelines.streaming --watch`` runs the same stage code
(``parse_record``, the per-user slot rule, the release stage's
``_StreamRun`` and the ledger's ``check_windows``) in a plain loop: every
``poll`` seconds it reads new ``*.jsonl`` files, closes the slots whose
end plus allowed lateness has passed on the wall clock, releases them in
order and appends each release to ``releases-live.jsonl`` as it is made.
"""

from __future__ import annotations

import glob
import json
import os
import time

from transforms.ledger import check_windows, empty_tail
from transforms.parse import ParseConfig, parse_record
from transforms.private_histogram import PrivateStreamHistogram
from transforms.records import Event, dead_letter
from transforms.release import _StreamRun
from transforms.slotting import close_slots


class LiveRelease:
    """Holds every stage's state between polls."""

    def __init__(self, watch: str, output: str, parse: ParseConfig, transform: PrivateStreamHistogram):
        self.watch, self.output, self.parse = watch, output, parse
        self.clock, self.config = transform.clock, transform.config
        self.max_window = transform.ledger_max_window
        self.seen: set = set()
        self.pending: dict = {}       # (stream, user) -> events of open slots
        self.declared: dict = {}      # (stream, user) -> requirement in force
        self.last_closed: dict = {}   # (stream, user) -> last closed slot
        self.runs: dict = {}          # stream -> _StreamRun
        self.tails: dict = {}         # (stream, user) -> ledger tail
        self.counts = {"records_read": 0, "records_used": 0, "duplicates": 0, "late": 0, "dead_letters": 0,
                       "releases": 0, "ledger_violations": 0}
        os.makedirs(output, exist_ok=True)
        self.files = {name: open(os.path.join(output, f"{name}-live.jsonl"), "a")
                      for name in ("releases", "dead_letters", "violations")}

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def _write(self, name: str, record: dict) -> None:
        self.files[name].write(json.dumps(record, sort_keys=True) + "\n")
        self.files[name].flush()

    def poll(self) -> None:
        """Read files that appeared since the last poll."""
        for path in sorted(glob.glob(os.path.join(self.watch, "*.jsonl")), key=os.path.getmtime):
            if path in self.seen:
                continue
            self.seen.add(path)
            with open(path, encoding="utf-8", errors="replace", newline="\n") as f:  # only \n ends a record
                for line in f:
                    self.counts["records_read"] += 1
                    self._accept(parse_record(line.rstrip("\n"), self.parse))

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
        """Close every slot whose end plus lateness has passed; release those slots in order."""
        by_stream: dict = {}
        for key in list(self.pending):
            due = [e for e in self.pending[key] if self.clock.close_time(self.clock.slot_of(e.time)) <= now]
            if not due:
                continue
            self.pending[key] = [e for e in self.pending[key] if e not in due]
            outcome, self.declared[key] = close_slots(due, self.clock, self.declared.get(key))
            self.last_closed[key] = max(self.clock.slot_of(e.time) for e in due)
            self.counts["duplicates"] += outcome.duplicates
            by_stream.setdefault(key[0], []).extend(outcome.contributions)
        released = 0
        for stream, contributions in by_stream.items():
            run = self.runs.setdefault(stream, _StreamRun.load(self.config, stream, None, None, None, None))
            by_slot: dict = {}
            for c in contributions:
                by_slot.setdefault(c.slot, []).append(tuple(c))
            for kind, payload in run.release_until(max(by_slot), by_slot, final=False):
                released += self._output(stream, kind, payload)
            for kind, payload in run._flush(final=False):
                self._output(stream, kind, payload)
        return released

    def _output(self, stream: str, kind: str, payload) -> int:
        if kind == "release":
            self.counts["releases"] += 1
            self._write("releases", payload)
            return 1
        if kind == "used":
            self.counts["records_used"] += payload
        elif kind == "dead":
            self._dead(payload)
        elif kind == "late":
            self.counts["late"] += 1
            self._write("dead_letters", payload)
        elif kind == "charges":
            key, chunk = payload
            tail, _, violations = check_windows(self.tails.get(key, empty_tail()), chunk, self.max_window)
            self.tails[key] = tail
            for violation in violations:
                self.counts["ledger_violations"] += 1
                self._write("violations", {"key": key, **violation})
        return 0


def watch(directory: str, output: str, parse: ParseConfig, transform: PrivateStreamHistogram,
          poll_seconds: float, max_slots: int | None, clock=time.time, sleep=time.sleep) -> dict:
    """Run until ``max_slots`` slots of wall-clock time have passed (or Ctrl-C); returns the counts."""
    live = LiveRelease(directory, output, parse, transform)
    started = clock()
    try:
        while max_slots is None or clock() - started < max_slots * transform.clock.slot_seconds:
            live.poll()
            live.release_due(clock())
            sleep(poll_seconds)
        live.poll()
        live.release_due(float("inf"))  # stopping: every open slot closes now
    except KeyboardInterrupt:
        live.release_due(float("inf"))
    finally:
        live.close()
    with open(os.path.join(output, "report.json"), "w") as f:
        json.dump(live.counts, f, indent=2)
    return live.counts
