"""Hostile input through the stages: nothing crashes, every record ends in exactly one place."""

from __future__ import annotations

import json
import math
import os
import random

import numpy as np
import pytest

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipelines.live import LiveRelease
from transforms.ledger import charge_chunk, check_windows, empty_tail
from transforms.declarations import RequirementPolicy
from transforms.mechanisms import FixedRequirement
from transforms.parse import ParseConfig
from transforms.private_histogram import PrivateStreamHistogram
from transforms.sinks import read_records

numbers = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1, 2, 3, -1, 1e300, -0.0]))
texts = st.text(max_size=40)
values = st.one_of(numbers, texts, st.none(), st.booleans(), st.lists(st.integers(), max_size=3))
events = st.fixed_dictionaries(
    {"user": st.one_of(st.sampled_from(["a", "b", "c", "ü", "x" * 500]), values),
     "time": st.one_of(st.floats(0, 3000), values), "value": st.one_of(st.integers(0, 3), values)},
    optional={"w": st.one_of(st.integers(-3, 20), values), "epsilon": st.one_of(st.floats(-1, 20), values),
              "level": st.one_of(st.sampled_from(["gold", "nope"]), values)})


def as_line(record) -> str:
    if isinstance(record, str):
        return record.replace("\n", " ")
    return json.dumps(record, allow_nan=True, default=str)


lines = st.lists(st.one_of(events.map(as_line), texts.map(as_line),
                           events.map(lambda e: as_line(e)[: len(as_line(e)) // 2])),  # truncated
                 min_size=1, max_size=40)


VALID_FIRST = [json.dumps({"user": "a", "time": 10, "value": 1}), json.dumps({"user": "a", "time": 20, "value": 2}),
               json.dumps({"user": "b", "time": 30, "value": 0, "level": "gold"})]
VALID_SECOND = [json.dumps({"user": "c", "time": 70, "value": 3}),  # c's first report: used
                json.dumps({"user": "a", "time": 40, "value": 3}),  # a's slot 0 already closed: late
                "{truncated"]                                        # dead letter


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=lines, second=lines)
@example(first=VALID_FIRST, second=VALID_SECOND)
def test_every_hostile_record_is_used_duplicate_late_or_a_dead_letter(tmp_path_factory, first, second):
    work = tmp_path_factory.mktemp("live")
    watch, out = work / "in", work / "out"
    watch.mkdir()
    policy = RequirementPolicy(levels={"gold": FixedRequirement(5, 2.0)}, default=FixedRequirement(4, 1.0),
                               max_epsilon=10.0, max_window=10)
    transform = PrivateStreamHistogram("pba", 60, 4, policy=policy, insecure_seed=1)
    live = LiveRelease(str(watch), str(out), ParseConfig(bins=4), transform)
    try:
        (watch / "a.jsonl").write_text("\n".join(first) + "\n")
        live.poll()
        live.release_due(1500.0)  # slots ending by t=1500 close; later records for them are late
        (watch / "b.jsonl").write_text("\n".join(second) + "\n")
        live.poll()
        live.release_due(math.inf)
    finally:
        live.close()
    counts = live.counts
    assert counts["records_read"] == len(first) + len(second)
    assert counts["records_read"] == (counts["records_used"] + counts["duplicates"] + counts["late"]
                                      + counts["dead_letters"]), counts
    assert counts["ledger_violations"] == 0
    dead = read_records(str(out / "dead_letters-*.jsonl"), "jsonl") if counts["dead_letters"] + counts["late"] else []
    assert len(dead) == counts["dead_letters"] + counts["late"]
    assert all(d["reason"] for d in dead)
    if first == VALID_FIRST and second == VALID_SECOND:  # the pinned example exercises every outcome
        assert (counts["records_used"], counts["duplicates"], counts["late"], counts["dead_letters"]) == (3, 1, 1, 1)


# ---------------------------------------------------------------- stop, kill and resume (docs/operations.md)

class Crash(Exception):
    """A simulated kill: the process stops where it is."""


ROUNDS = 9


def round_lines(k: int, power_check: bool = False) -> list[str]:
    """Slot k's records (60 s slots): six users, declarations in slot 0 (and u5's change in slot 4), a
    duplicate, a junk line and, from slot 2 on, a straggler for slot k - 2 (late).

    ``power_check``: every user declares at every slot, with budgets so large that noise is negligible,
    and slot 1 repeats slot 0's values: slot 1 is skipped, slot 2 publishes with two shares, and every
    later slot (its data moved) publishes, so a mechanism that forgets what it spent overspends whatever
    the seed (with the small budgets that depends on the noise drawn)."""
    values_of = 0 if power_check and k == 1 else k  # the slot whose values this one reports
    rnd = random.Random(values_of)
    lines = []
    scale = 100 if power_check else 1
    for u in range(6):
        record = {"user": f"u{u}", "time": k * 60 + rnd.uniform(0, 50), "value": rnd.randrange(4)}
        if k == 0 or (u == 5 and k == 4) or power_check:
            record.update(w=[3, 5, 4][u % 3] + (u == 5 and k >= 4), epsilon=scale * [1.0, 2.0, 1.5][u % 3])
        lines.append(json.dumps(record))
    lines.append(json.dumps({"user": "u1", "time": k * 60 + 55, "value": (values_of + 1) % 4}))  # u1's duplicate
    lines.append("{not json")
    if k >= 2:
        lines.append(json.dumps({"user": "u2", "time": (k - 2) * 60 + 1, "value": 0}))
    return lines


def live_transform(mechanism: str) -> PrivateStreamHistogram:
    params = {"max_window": 8} if mechanism.startswith("dp") else {}
    return PrivateStreamHistogram(mechanism, 60, 4, mechanism_params=params, insecure_seed=3,
                                  policy=RequirementPolicy())  # every event declares its own


class Recording(LiveRelease):
    """Keeps every charge of a committed round: what the whole run really spent."""

    def __init__(self, *args, spent: list, **kwargs):
        self.spent, self.round_charges = spent, []
        super().__init__(*args, **kwargs)
        check = self.outputs.charges

        def recorded(chunk):
            self.round_charges.append((chunk.key, chunk.ledger_input()))
            check(chunk)

        self.outputs.charges = recorded

    def commit(self):
        if self.checkpoint is None:
            self.spent.extend(self.round_charges)
            self.round_charges = []
        super().commit()

    def _save_checkpoint(self):
        super()._save_checkpoint()
        self.spent.extend(self.round_charges)  # from here on the round's releases will be published
        self.round_charges = []


def whole_run_violations(spent: list, max_window: int = 1000) -> list:
    """The ledger over every committed charge of the run at once (pre- and post-restart)."""
    by_user: dict = {}
    for key, charges in spent:
        by_user.setdefault(key, []).append(charge_chunk(*charges))
    found = []
    for key, chunks in by_user.items():
        whole = {name: np.concatenate([c[name] for c in chunks])
                 for name in ("slots", "charge", "dc", "least", "requirements")}
        order = np.argsort(whole["slots"], kind="stable")
        whole = {name: values[order] for name, values in whole.items()}
        whole.update(kind=chunks[0]["kind"], final=True)
        found += [(key, v) for v in check_windows(empty_tail(), whole, max_window)[2]]
    return found


def run_rounds(work, mechanism: str, crashes: dict | None = None, checkpoint: bool = True,
               forget_at: int | None = None, forget: str = "checkpoint", spent: list | None = None) -> Recording:
    """Round k writes slot k's file, polls and releases slot k.  ``crashes``: round -> list of crash points
    ('read': after reading; 'save': while saving the checkpoint; ('publish', n): after n lines of the
    round's output, the n+1-th half written).  ``forget_at``: at that round restart and forget
    ``"checkpoint"`` (start afresh, the files read so far archived) or ``"mechanism"`` (resume, but with
    mechanisms that forgot what users spent): the power checks."""
    watch, out, path = work / "in", work / "out", work / "state" / "checkpoint.wevent"
    watch.mkdir(parents=True, exist_ok=True)
    spent = [] if spent is None else spent
    transform = live_transform(mechanism)

    def start(with_checkpoint=True):
        return Recording(str(watch), str(out), ParseConfig(bins=4), transform,
                         str(path) if checkpoint and with_checkpoint else None, spent=spent)

    def kill(live):
        for f in live.files.values():
            getattr(f, "raw", f).close()  # what the process wrote reaches the file, partial lines included

    live = start()
    crashes = {k: list(v) for k, v in (crashes or {}).items()}
    for k in range(ROUNDS):
        name = watch / f"part{k:02d}.jsonl"
        name.write_text("\n".join(round_lines(k, power_check=forget_at is not None)) + "\n")
        os.utime(name, (1000 + k, 1000 + k))
        if k == forget_at:
            kill(live)
            if forget == "checkpoint":
                archive = work / "archive"
                archive.mkdir()
                for old in watch.glob("*.jsonl"):
                    if old != name:
                        old.rename(archive / old.name)
            live = start(with_checkpoint=forget != "checkpoint")
            if forget == "mechanism":
                for run in live.runs.values():
                    run.engine.mechanism = live.config.build()
        while True:
            point = crashes.get(k, [None]).pop(0) if crashes.get(k) else None
            try:
                arm(live, point)
                live.poll()
                if point == "read":
                    raise Crash
                live.release_due((k + 1) * 60)
                break
            except Crash:
                kill(live)
                live = start()
    live.close()
    return live


def arm(live: LiveRelease, point) -> None:
    """Make ``live`` crash at ``point`` of the next commit."""
    if point == "save":
        def crash_saving():
            raise Crash
        live._save_checkpoint = crash_saving
    elif isinstance(point, tuple):
        budget = [point[1]]

        class Dying:
            def __init__(self, f):
                self.raw = f

            def write(self, line):
                if budget[0] == 0:
                    self.raw.write(line[: len(line) // 2])
                    raise Crash
                budget[0] -= 1
                return self.raw.write(line)

            def __getattr__(self, name):
                return getattr(self.raw, name)

        live.files = {name: Dying(f) for name, f in live.files.items()}


def outputs(work) -> dict:
    return {name: (work / "out" / f"{name}-live.jsonl").read_text() for name in ("releases", "dead_letters",
                                                                                 "violations")}


UNINTERRUPTED: dict = {}  # mechanism -> outputs and counts of the run without checkpoint or crash
crash_points = st.one_of(st.just("read"), st.just("save"), st.tuples(st.just("publish"), st.integers(0, 6)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mechanism=st.sampled_from(["pbd", "pba", "dpbd"]),
       crashes=st.dictionaries(st.integers(0, ROUNDS - 1), st.lists(crash_points, min_size=1, max_size=2),
                               min_size=1, max_size=3))
def test_killed_and_resumed_loop_writes_exactly_the_uninterrupted_outputs(tmp_path_factory, mechanism, crashes):
    if mechanism not in UNINTERRUPTED:
        work = tmp_path_factory.mktemp("reference")
        counts = run_rounds(work, mechanism, checkpoint=False).counts
        UNINTERRUPTED[mechanism] = outputs(work), counts
    expected, expected_counts = UNINTERRUPTED[mechanism]
    work = tmp_path_factory.mktemp("killed")
    spent: list = []
    resumed = run_rounds(work, mechanism, crashes, spent=spent)
    assert outputs(work) == expected  # byte for byte: every release and dead letter once, in order
    assert resumed.counts == expected_counts
    counts = resumed.counts
    assert counts["records_read"] == 9 * 8 + 7 * 1
    assert counts["records_read"] == (counts["records_used"] + counts["duplicates"] + counts["late"]
                                      + counts["dead_letters"])
    assert counts["releases"] == ROUNDS and counts["late"] == 7 and counts["ledger_violations"] == 0
    assert whole_run_violations(spent) == []
    assert not resumed.outbox and not any(p.name.startswith(".checkpoint-") for p in (work / "state").iterdir())


@pytest.mark.parametrize("mechanism", ["pbd", "pba", "dpbd", "dpba"])
def test_a_restart_without_the_checkpoint_overspends(tmp_path, mechanism):
    """The power check: restarted afresh, the loop releases again slots a straggler names and its fresh
    mechanism spends budget the users already spent; the whole-run ledger of the test above reports it."""
    spent: list = []
    live = run_rounds(tmp_path, mechanism, forget_at=3, spent=spent)
    assert whole_run_violations(spent), "restarting from scratch must overspend some window"
    assert live.counts["ledger_violations"] == 0  # the fresh loop's own ledger cannot know


@pytest.mark.parametrize("mechanism", ["pba", "dpba"])
def test_restored_ledger_windows_see_what_a_mechanism_that_forgot_its_budgets_overspends(tmp_path, mechanism):
    """Resumed with everything but the mechanism's state: the ledger windows restored from the checkpoint
    report exactly the violations of the whole-run ledger, across the restart."""
    spent: list = []
    live = run_rounds(tmp_path, mechanism, forget_at=3, forget="mechanism", spent=spent)
    assert live.counts["ledger_violations"] == len(whole_run_violations(spent)) > 0


def test_a_stopped_watch_keeps_open_slots_for_the_next_run(tmp_path):
    """Stopped with a checkpoint, the loop leaves the open slot open (without one it would release it now);
    the next run, started later, continues it: the releases equal one uninterrupted run's."""
    from pipelines.live import watch

    def files(directory, slots):
        directory.mkdir(parents=True, exist_ok=True)
        for slot in slots:
            records = [{"user": f"u{u}", "time": slot * 60 + 10 + u, "value": (slot + u) % 4, "w": 3, "epsilon": 1.0}
                       for u in range(4)]
            (directory / f"slot{slot}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def run(work, start, slots, checkpoint):
        now = [start]
        return watch(str(work / "in"), str(work / "out"), ParseConfig(bins=4), live_transform("pbd"), 5.0, slots,
                     clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s), checkpoint=checkpoint)

    files(tmp_path / "whole" / "in", range(4))
    whole = run(tmp_path / "whole", 0.0, 4, None)
    path = str(tmp_path / "stopped" / "checkpoint.wevent")
    files(tmp_path / "stopped" / "in", [0, 1, 2])
    first = run(tmp_path / "stopped", 0.0, 2, path)  # stops at t=120: slot 2 (t=130..) is still open
    assert first["releases"] == 2 and first["records_used"] == 8
    files(tmp_path / "stopped" / "in", [3])
    second = run(tmp_path / "stopped", 120.0, 2, path)
    assert second == whole and second["releases"] == 4 and second["late"] == 0
    released = lambda work: (work / "out" / "releases-live.jsonl").read_text()  # noqa: E731
    assert released(tmp_path / "stopped") == released(tmp_path / "whole")


def test_consumed_files_that_leave_the_directory_are_forgotten(tmp_path):
    """Rotated-away inputs leave the consumed set (and the checkpoint); nothing is read twice, and a new
    file that reuses a forgotten name is read."""
    watch, out, path = tmp_path / "in", tmp_path / "out", str(tmp_path / "checkpoint.wevent")
    watch.mkdir()
    live = LiveRelease(str(watch), str(out), ParseConfig(bins=4), live_transform("pbd"), path)
    for k in range(3):
        (watch / f"part{k}.jsonl").write_text("\n".join(round_lines(k)) + "\n")
        os.utime(watch / f"part{k}.jsonl", (1000 + k, 1000 + k))
    live.poll()
    live.release_due(3 * 60)
    read = live.counts["records_read"]
    assert len(live.seen) == 3
    (watch / "part0.jsonl").unlink()
    (watch / "part1.jsonl").unlink()
    live.poll()
    live.commit()
    assert live.seen == {str(watch / "part2.jsonl")} and live.counts["records_read"] == read
    live.close()
    resumed = LiveRelease(str(watch), str(out), ParseConfig(bins=4), live_transform("pbd"), path)
    assert resumed.seen == {str(watch / "part2.jsonl")}
    (watch / "part0.jsonl").write_text("\n".join(round_lines(3)) + "\n")  # a new file, an old name
    resumed.poll()
    assert resumed.counts["records_read"] == read + len(round_lines(3))
    resumed.close()


def test_files_are_taken_only_once_settled_and_part_files_never(tmp_path, caplog):
    """The hand-over convention: ``*.jsonl.part`` is never read; a ``*.jsonl`` file waits until it has not
    changed for ``settle_seconds`` (here simulated by moving its modification time back); a file that changes
    after it was read is reported, not read again."""
    watch, out = tmp_path / "in", tmp_path / "out"
    watch.mkdir()
    transform = PrivateStreamHistogram("pbd", 60, 4, policy=RequirementPolicy(default=FixedRequirement(4, 1.0)))
    rows = [json.dumps({"user": f"u{i}", "time": 10 + i, "value": i % 4}) + "\n" for i in range(100)]
    old, new = watch / "a.jsonl", watch / "b.jsonl"
    old.write_text("".join(rows[:50]))  # the first flush of a file still being written
    (watch / "c.jsonl.part").write_text("".join(rows))
    past = os.stat(old).st_mtime - 60
    new.write_text(rows[0])
    os.utime(new, (past, past))  # finished a minute ago: settled
    live = LiveRelease(str(watch), str(out), ParseConfig(bins=4), transform, settle_seconds=5)
    try:
        live.poll()
        assert live.counts["records_read"] == 1  # b (settled) only; a is still being written
        with open(old, "a") as f:
            f.write("".join(rows[50:]))  # the second flush
        live.poll()
        assert live.counts["records_read"] == 1
        os.utime(old, (past + 30, past + 30))
        live.poll()
        assert live.counts["records_read"] == 101  # all of a, once; the .part file never
        with open(old, "a") as f:
            f.write(rows[0])
        with caplog.at_level("WARNING", logger="pipelines.live"):
            live.poll()
        assert live.counts["records_read"] == 101 and "changed after it was read" in caplog.text
    finally:
        live.close()
    unsettled = LiveRelease(str(watch), str(tmp_path / "out0"), ParseConfig(bins=4), transform, settle_seconds=0)
    try:  # the power check: without settling, a file is read as it stands
        (watch / "d.jsonl").write_text("".join(rows[:50]))
        unsettled.poll()
        assert unsettled.counts["records_read"] == 50 + 1 + 101
    finally:
        unsettled.close()


def test_the_loops_checkpoint_keeps_each_ledger_tails_lifetime_spend(tmp_path):
    """A tail keeps, besides its recent slots, the spend of the slots it dropped (``before``): a lifetime budget
    covers them.  Saved in the loop's checkpoint and resumed, the tail still sees the slot the spend passes 3 ε
    (nine slots of ⌊ε/3⌋, 3 ε less 3 units, then 4 units: 3 ε + 1 unit)."""
    from transforms.mechanisms.budget import UNITS_PER_EPSILON as U

    def lifetime(slots, units):
        table = np.column_stack([slots, np.zeros(len(slots), np.int64), units, np.full(len(slots), 3 * U)])
        return charge_chunk(np.asarray(table, np.int64), "lifetime", ("report",), False, False)

    (tmp_path / "in").mkdir()
    path, key = str(tmp_path / "checkpoint.wevent"), "s\x1fu"

    def loop():
        return LiveRelease(str(tmp_path / "in"), str(tmp_path / "out"), ParseConfig(bins=4), live_transform("pbd"),
                           checkpoint=path)

    live = loop()
    try:
        apart = [1 + k * (live.max_window + 1) for k in range(10)]  # each slot beyond the window depth of the last
        live.tails[key] = check_windows(empty_tail(), lifetime(apart[:9], [U // 3] * 9), live.max_window)[0]
        assert live.tails[key]["slots"].size == 1 and live.tails[key]["before"] == 8 * (U // 3)
        live._save_checkpoint()
    finally:
        live.close(commit=False)
    resumed = loop()
    try:
        assert resumed.tails[key]["before"] == live.tails[key]["before"]
        _, _, violations = check_windows(resumed.tails[key], lifetime(apart[9:], [4]), resumed.max_window)
        assert [(v["slot"], v["kind"], v["window_units"]) for v in violations] == [(apart[9], "lifetime", 3 * U + 1)]
    finally:
        resumed.close(commit=False)
