"""Replay of numeric events (``--domain LOW,HIGH``) through the real pipeline for seed 003's mechanisms.

Each run goes through ``pipelines.replay`` on the FnApiRunner with a seeded generator and is compared with the
Beam-free core's registered mechanism stepped on the same stream with the same generator: the released means
must be the same numbers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines import replay
from tests.pipelines.broken_mechanisms import half_charged_capp_client
from tests.transforms.test_numeric_clients import fresh_row, step_user
from transforms.mechanisms import FixedRequirements, make_mechanism
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.numeric_clients import report_randomness
from transforms.sinks import read_records

SEED = 7
SLOTS, USERS = 8, 6
LOW, HIGH = -5.0, 15.0


def values_at(user: int, slot: int) -> float:
    """A deterministic numeric stream: some values outside [LOW, HIGH] (user 5 at odd slots)."""
    if user == 5 and slot % 2:
        return 40.0 + slot
    return LOW + ((user * 7 + slot * 3) % 23) * 0.8731


def write_events(path, extra: list | None = None) -> list:
    rows = [{"user": f"u{u}", "time": s * 60 + u + 0.5, "value": values_at(u, s)}
            for s in range(SLOTS) for u in range(USERS)]
    with open(path, "w") as f:
        for row in rows + (extra or []):
            f.write(json.dumps(row) + "\n")
    return rows


def run_replay(tmp_path, mechanism: str, *args, ranged: bool = True) -> tuple[int, dict, list, list]:
    out = tmp_path / "out"
    if ranged:
        args = ("--start", "0", "--end", str(SLOTS * 60), *args)
    code = replay.run(["--input", str(tmp_path / "events.jsonl"), "--output", str(out), "--quiet",
                       "--insecure-seed", str(SEED), "--mechanism", mechanism, "--epsilon", "2", "--window", "3",
                       "--requirement", "fixed:3,2", "--slot-seconds", "60",
                       f"--domain={LOW},{HIGH}", *args])  # "=": LOW is negative
    with open(out / "report.json") as f:
        report = json.load(f)
    releases = sorted(read_records(str(out / "releases-*.jsonl"), "jsonl"), key=lambda r: r["slot"])
    dead = list(read_records(str(out / "dead_letters-*.jsonl"), "jsonl"))
    return code, report, releases, dead


def core_estimates(mechanism: str, clip: bool) -> list[float]:
    """The core's registered mechanism on the same stream (users by id order, as the release stage indexes them)."""
    m = make_mechanism(mechanism, bins=1, epsilon=2.0, window=3, low=LOW, high=HIGH,
                       out_of_range="clip" if clip else "refuse")
    rng = insecure_seeded_randomness(SEED)
    estimates = []
    for s in range(SLOTS):
        users = [u for u in range(USERS) if clip or LOW <= values_at(u, s) <= HIGH]
        declared = FixedRequirements.of([3] * len(users), [2.0] * len(users)) if s == 0 else None  # every user at 0
        batch = SlotBatch.of(np.array(users, np.int64), np.array([values_at(u, s) for u in users]), declared)
        estimates.append(float(m.step(batch, rng).estimate[0]))
    return estimates


@pytest.mark.parametrize("mechanism", ["sw-direct", "ipp", "app", "capp"])
def test_clipped_numeric_replay_releases_the_cores_means(tmp_path, mechanism):
    write_events(tmp_path / "events.jsonl")
    code, report, releases, dead = run_replay(tmp_path, mechanism, "--out-of-range", "clip")
    assert code == 0
    outside = sum(1 for s in range(SLOTS) for u in range(USERS) if not LOW <= values_at(u, s) <= HIGH)
    assert outside == SLOTS // 2
    assert report["clipped"] == outside and report["records_used"] == SLOTS * USERS and report["reconciles"]
    assert report["dead_letters"] == 0 and dead == []
    assert report["ledger_violations"] == 0 and 0 < report["max_window_usage_ratio"] <= 1
    assert [r["slot"] for r in releases] == list(range(SLOTS))
    statistic = "mean" if mechanism == "sw-direct" else "report_mean"  # only SW-direct's is de-biased
    assert {r["trust"] for r in releases} == {"local_simulated"} and {r["statistic"] for r in releases} == {statistic}
    got = [r["estimate"][0] for r in releases]
    assert got == core_estimates(mechanism, clip=True)  # the same numbers, not just close
    # CAPP's bounds may leave the interval; SW-direct's de-biased mean is not clipped to it
    assert all(LOW <= g <= HIGH for g in got) or mechanism in ("capp", "sw-direct")


def test_out_of_range_values_are_dead_letters_by_default(tmp_path):
    bad = [{"user": "u0", "time": 1.0, "value": "nan"}, {"user": "u1", "time": 2.0, "value": "x"},
           {"user": "u2", "time": 3.0, "value": float("inf")}]
    write_events(tmp_path / "events.jsonl", bad)
    code, report, releases, dead = run_replay(tmp_path, "capp")
    assert code == 0
    reasons = sorted(d["reason"] for d in dead)
    assert reasons.count(f"value outside the domain [{LOW:g}, {HIGH:g}]") == SLOTS // 2
    assert {"value is NaN", "value is not a number"} <= set(reasons) and len(dead) == SLOTS // 2 + 3
    assert report["records_read"] == SLOTS * USERS + 3 and report["reconciles"]
    assert report["clipped"] == 0 and report["ledger_violations"] == 0
    assert [r["estimate"][0] for r in releases] == core_estimates("capp", clip=False)


@pytest.mark.parametrize("args, message", [
    (["--mechanism", "capp", "--domain", "3,1"], "LOW < HIGH"),
    (["--mechanism", "capp", "--domain", "1"], "--domain must be LOW,HIGH"),
    (["--mechanism", "capp", "--domain", "0,1", "--out-of-range", "wrap"], "invalid choice"),
    (["--mechanism", "capp", "--binning", "int:4"], "give --domain LOW,HIGH"),
    (["--mechanism", "pbd", "--domain", "0,1", "--binning", "int:4"], "--domain is for the numeric mechanisms"),
    (["--mechanism", "capp", "--domain", "0,1", "--binning", "int:4"], "not both"),
    (["--mechanism", "capp", "--domain", "0,1", "--param", "high=3"], "not --param"),
    (["--mechanism", "capp", "--domain", "0,1", "--epsilon", "0.000000000003"], "too small"),
])
def test_bad_numeric_configuration_fails_before_running_with_one_line(tmp_path, capsys, args, message):
    write_events(tmp_path / "events.jsonl")
    argv = ["--input", str(tmp_path / "events.jsonl"), "--output", str(tmp_path / "out"), "--quiet",
            "--requirement", "fixed:3,2", *args]
    if "--epsilon" not in args:
        argv += ["--epsilon", "2", "--window", "3"]
    else:
        argv += ["--window", "3"]
    assert replay.run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", [[], ["--per-user-clients"], ["--per-user-clients", "pp-s", "--param", "segment=3"],
                                   ["--per-user-clients", "ba-sw"]])
def test_a_resumed_replay_continues_the_clients_state_exactly(tmp_path, stage):
    """The checkpoint carries every user's client rows (deviation ring, D, age) and the seeded generator (the
    per-user stage: the rows, declarations and ledger tails; its draws are keyed per report): two halves replayed
    with --checkpoint-dir / --resume-from release what one whole replay releases."""
    rows = write_events(tmp_path / "events.jsonl")
    half = SLOTS // 2
    for name, part in (("first", rows[:half * USERS]), ("second", rows[half * USERS:])):
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in part)
    mechanism, stage = (stage[1], stage[:1] + stage[2:]) if len(stage) > 1 else ("capp", stage)
    common = ["--quiet", "--insecure-seed", str(SEED), "--mechanism", mechanism, "--epsilon", "2", "--window", "3",
              "--requirement", "fixed:3,2", "--slot-seconds", "60", f"--domain={LOW},{HIGH}",
              "--out-of-range", "clip", *stage]
    whole = tmp_path / "whole"
    assert replay.run(["--input", str(tmp_path / "events.jsonl"), "--output", str(whole), *common]) == 0
    checkpoints = tmp_path / "checkpoints"
    assert replay.run(["--input", str(tmp_path / "first.jsonl"), "--output", str(tmp_path / "a"),
                       "--checkpoint-dir", str(checkpoints), *common]) == 0
    assert replay.run(["--input", str(tmp_path / "second.jsonl"), "--output", str(tmp_path / "b"),
                       "--resume-from", str(checkpoints), *common]) == 0

    def estimates(directory) -> dict:
        return {r["slot"]: (r["kind"], r["estimate"][0])
                for r in read_records(str(directory / "releases-*.jsonl"), "jsonl")}

    resumed = {**estimates(tmp_path / "a"), **estimates(tmp_path / "b")}
    assert sorted(resumed) == list(range(SLOTS))  # every slot: PP-S's are skipped but at the segments' ends
    assert [s for s, (kind, _) in sorted(resumed.items()) if kind == "fresh"] == \
        ([2, 5] if mechanism == "pp-s" else list(range(SLOTS)))
    assert resumed == estimates(whole)  # the state after slot 3 continued bit for bit
    fresh = tmp_path / "fresh"  # without the state the second half differs: the test can fail
    assert replay.run(["--input", str(tmp_path / "second.jsonl"), "--output", str(fresh), *common]) == 0
    assert estimates(fresh) != {s: e for s, e in estimates(whole).items() if s >= half}
    with open(tmp_path / "b" / "report.json") as f:
        report = json.load(f)
    assert report["ledger_violations"] == 0 and report["reconciles"]
    other = [a for a in common if a != "--per-user-clients"] + ([] if stage else ["--per-user-clients"])
    assert replay.run(["--input", str(tmp_path / "second.jsonl"), "--output", str(tmp_path / "c"),
                       "--resume-from", str(checkpoints), *other]) == 2  # the other stage's checkpoint: refused


def test_per_user_clients_replay_runs_each_users_client_in_the_per_user_stage(tmp_path):
    write_events(tmp_path / "events.jsonl", [{"user": "u1", "time": 60.5, "value": 2.0}])  # a duplicate in slot 1
    code, report, releases, _ = run_replay(tmp_path, "app", "--out-of-range", "clip", "--per-user-clients",
                                              ranged=False)
    assert code == 0, report
    assert report["records_used"] == SLOTS * USERS and report["duplicates"] == 1 and report["reconciles"]
    assert report["clipped"] == SLOTS // 2 and report["ledger_violations"] == 0 and report["fresh"] == SLOTS
    client = make_mechanism("app", bins=1, epsilon=2.0, window=3, **_grid().mechanism_params()).client
    reports: dict = {}
    for u in range(USERS):
        row = fresh_row(client)
        for s in range(SLOTS):
            x = _grid().grid_index(min(max(values_at(u, s), LOW), HIGH)) / _grid().steps
            report_value, row = step_user(client, row, x, report_randomness(SEED, "default", f"u{u}", s))
            reports.setdefault(s, []).append(report_value)
    assert [r["estimate"][0] for r in releases] == [LOW + (HIGH - LOW) * float(np.mean(reports[s]))
                                                    for s in range(SLOTS)]
    assert {r["reporters"] for r in releases} == {USERS}  # its own field: the central path's meaning is kept
    assert {r["registered_users"] for r in releases} == {None}  # the per-user stage does not know registrations


def _grid():
    from transforms.numeric_events import NumericDomain

    return NumericDomain(LOW, HIGH, "clip")


@pytest.mark.parametrize("args, message", [
    (["--mechanism", "pbd", "--binning", "int:4", "--per-user-clients"], "--per-user-clients runs the clients of"),
    (["--mechanism", "pp-s", "--domain", "0,1", "--sampling-accounting", "paper"],
     "are for the per-user stage: give --per-user-clients"),
    (["--mechanism", "pp-s", "--domain", "0,1", "--per-user-clients", "--sampling-accounting", "paper",
      "--param", "segment=2"], "is not w-event private on a stream (trap T3"),
    (["--mechanism", "capp", "--domain", "0,1", "--per-user-clients", "--sampling-accounting", "paper",
      "--not-w-event-private"], "accounting applies to the sampling methods"),
    (["--mechanism", "capp", "--domain", "0,1", "--sma", "4"], "--sma: a centred window has an odd size"),
    (["--mechanism", "pbd", "--binning", "int:4", "--sma", "3"], "--sma smooths numeric releases"),
])
def test_per_user_clients_configuration_errors(tmp_path, capsys, args, message):
    test_bad_numeric_configuration_fails_before_running_with_one_line(tmp_path, capsys, args, message)


def test_the_paper_sampling_accounting_runs_only_flagged_and_marks_its_releases(tmp_path):
    """--sampling-accounting paper --not-w-event-private: the per-user stage's PP-S at the paper's n_w, every
    release marked; the strict run of the same events releases other numbers (a larger per-sample budget)."""
    write_events(tmp_path / "events.jsonl")
    flags = ("--out-of-range", "clip", "--per-user-clients", "--param", "segment=2")
    code, report, paper, _ = run_replay(tmp_path, "pp-s", *flags, "--sampling-accounting", "paper",
                                        "--not-w-event-private", ranged=False)
    assert code == 0 and report["reconciles"]
    assert [r["slot"] for r in paper if r["kind"] == "fresh"] == [1, 3, 5, 7]  # the segments' ends
    assert [r["slot"] for r in paper] == list(range(SLOTS))  # the others skipped
    assert all(r["figures"] == {"w_event_private": 0.0} for r in paper)
    (tmp_path / "out").rename(tmp_path / "paper")
    code, _, strict, _ = run_replay(tmp_path, "pp-s", *flags, ranged=False)
    assert code == 0 and all(r["figures"] == {} for r in strict)
    assert [r["epsilon"] for r in strict] != [r["epsilon"] for r in paper]


def _gap_rows(far: bool = False) -> list:
    """Users 0-5 at slots 0, 1, 4 and 6 (slots 2, 3 and 5 empty); with ``far`` one more record at slot 30."""
    rows = [{"user": f"u{u}", "time": s * 60 + u + 0.5, "value": values_at(u, s) % 10}
            for s in (0, 1, 4, 6) for u in range(USERS)]
    return rows + ([{"user": "u2", "time": 30 * 60 + 5, "value": 3.0}] if far else [])


def _replay_rows(tmp_path, name: str, rows: list, *args) -> tuple[dict, list, list]:
    events, out = tmp_path / f"{name}.jsonl", tmp_path / name
    events.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert replay.run(["--input", str(events), "--output", str(out), "--quiet", "--insecure-seed", str(SEED),
                       "--mechanism", "sw-direct", "--epsilon", "2", "--window", "3", "--requirement", "fixed:3,2",
                       "--slot-seconds", "60", f"--domain={LOW},{HIGH}", *args]) == 0
    with open(out / "report.json") as f:
        report = json.load(f)
    releases = sorted(read_records(str(out / "releases-*.jsonl"), "jsonl"), key=lambda r: r["slot"])
    return report, releases, list(read_records(str(out / "dead_letters-*.jsonl"), "jsonl"))


def test_per_user_clients_replay_releases_every_slot_as_the_central_replay(tmp_path):
    """Gaps in the data: the per-user stage's replay releases slots 0-6, the empty ones skipped (epsilon 0, the
    last estimate repeated), slot for slot the kinds of the central replay; report.json counts and reconciles."""
    report, releases, _ = _replay_rows(tmp_path, "clients", _gap_rows(), "--per-user-clients")
    central_report, central, _ = _replay_rows(tmp_path, "central", _gap_rows())
    kinds = [(r["slot"], r["kind"]) for r in releases]
    assert kinds == [(r["slot"], r["kind"]) for r in central]
    assert kinds == [(s, "skipped" if s in (2, 3, 5) else "fresh") for s in range(7)]
    assert all(r["epsilon"] == "0" and r["estimate"] == releases[r["slot"] - 1]["estimate"]
               for r in releases if r["kind"] == "skipped")
    for counts in (report, central_report):
        assert counts["reconciles"] and counts["records_used"] == 4 * USERS
        assert (counts["slots"], counts["fresh"], counts["skipped"]) == (7, 4, 3)


def test_per_user_clients_replay_with_start_and_end_releases_the_range_for_neighbouring_inputs(tmp_path):
    """--start/--end with --per-user-clients: slots 1-9 released for two inputs differing by one far record
    (a dead letter, accounted), the same slots and kinds as the central replay; records before --start are dead
    letters too and charge no one; without the range the far record moves the released slots (power check)."""
    bounds = ("--start", "60", "--end", "600")
    report, releases, _ = _replay_rows(tmp_path, "a", _gap_rows(), "--per-user-clients", *bounds)
    far_report, far_releases, far_dead = _replay_rows(tmp_path, "b", _gap_rows(far=True), "--per-user-clients",
                                                      *bounds)
    _, central, _ = _replay_rows(tmp_path, "c", _gap_rows(far=True), *bounds)
    slots = lambda records: [(r["slot"], r["kind"]) for r in records]  # noqa: E731
    assert slots(releases) == slots(far_releases) == slots(central)
    assert [s for s, _ in slots(releases)] == list(range(1, 10))
    assert releases == far_releases  # the far record changes nothing that is published
    assert report["range_from_data"] is False and report["release_range"]["first_slot"] == 1
    assert report["release_range"]["last_slot"] == 9 and report["warnings"] == []
    assert report["dead_letters"] == USERS and far_report["dead_letters"] == USERS + 1  # slot 0's, and the far one
    assert report["reconciles"] and far_report["reconciles"]
    assert {d["reason"].split(":")[0] for d in far_dead} == {"outside the release range"}
    assert sorted(d["record"].count('"time": 1805') for d in far_dead) == [0] * USERS + [1]
    _, free, _ = _replay_rows(tmp_path, "d", _gap_rows(), "--per-user-clients")
    _, free_far, _ = _replay_rows(tmp_path, "e", _gap_rows(far=True), "--per-user-clients")
    assert [r["slot"] for r in free] != [r["slot"] for r in free_far]  # power: without the range the slots move


CROWD = ("--param", "crowd_window=3", "--param", "crowd_bins=4")


def test_crowd_replay_releases_the_cores_distribution_at_the_mean_releases_cost(tmp_path):
    """--param crowd_window/crowd_bins: every release is the core's crowd distribution (4 fractions summing to 1,
    statistic "distribution"), charged as the mean release is (same usage, no violation)."""
    write_events(tmp_path / "events.jsonl")
    code, report, releases, dead = run_replay(tmp_path, "capp", "--out-of-range", "clip", *CROWD)
    assert code == 0 and dead == [] and report["reconciles"] and report["ledger_violations"] == 0
    m = make_mechanism("capp", epsilon=2.0, window=3, low=LOW, high=HIGH, out_of_range="clip", crowd_window=3,
                       crowd_bins=4)
    rng, declared = insecure_seeded_randomness(SEED), FixedRequirements.of([3] * USERS, [2.0] * USERS)
    core = [m.step(SlotBatch.of(np.arange(USERS), np.array([values_at(u, s) for u in range(USERS)]),
                                declared if s == 0 else None), rng).values.tolist() for s in range(SLOTS)]
    assert [r["slot"] for r in releases] == list(range(SLOTS))
    assert {r["statistic"] for r in releases} == {"distribution"} and {r["kind"] for r in releases} == {"fresh"}
    assert all(len(r["estimate"]) == 4 and abs(sum(r["estimate"]) - 1) < 1e-12 for r in releases)
    assert [r["estimate"] for r in releases] == core
    (tmp_path / "mean").mkdir()
    write_events(tmp_path / "mean" / "events.jsonl")
    mean_report = run_replay(tmp_path / "mean", "capp", "--out-of-range", "clip")[1]
    assert report["max_window_usage_ratio"] == mean_report["max_window_usage_ratio"] > 0


def test_per_user_crowd_replay_releases_the_distribution_of_its_reports_at_the_mean_releases_cost(tmp_path):
    """--per-user-clients with the crowd distribution: every slot a "distribution" release (fractions of whole
    users summing to 1, the central replay's slots and kinds), at the per-user mean replay's usage."""
    write_events(tmp_path / "events.jsonl")
    code, report, releases, dead = run_replay(tmp_path, "ipp", "--out-of-range", "clip", "--per-user-clients",
                                              *CROWD)
    assert code == 0 and dead == [] and report["reconciles"] and report["ledger_violations"] == 0
    assert [r["slot"] for r in releases] == list(range(SLOTS)) and {r["kind"] for r in releases} == {"fresh"}
    assert {r["statistic"] for r in releases} == {"distribution"}
    for r in releases:
        assert len(r["estimate"]) == 4 and abs(sum(r["estimate"]) - 1) < 1e-12
        assert sum(r["histogram"]) == USERS and r["estimate"] == [n / USERS for n in r["histogram"]]
    assert len({tuple(r["estimate"]) for r in releases}) > 1  # power: not one fixed distribution
    (tmp_path / "mean").mkdir()
    write_events(tmp_path / "mean" / "events.jsonl")
    mean_report = run_replay(tmp_path / "mean", "ipp", "--out-of-range", "clip", "--per-user-clients")[1]
    assert report["max_window_usage_ratio"] == mean_report["max_window_usage_ratio"] > 0


@pytest.mark.parametrize("args, message", [
    (["--mechanism", "capp", "--domain", "0,1", "--per-user-clients", "--sma", "3", *CROWD],
     "--sma: the crowd distribution"),
    (["--mechanism", "capp", "--domain", "0,1", "--param", "crowd_window=3"], "needs both crowd_window"),
    (["--mechanism", "capp", "--domain", "0,1", "--param", "crowd_window=0", "--param", "crowd_bins=2"],
     "crowd_window must be an integer >= 1"),
])
def test_bad_crowd_configuration_fails_before_running_with_one_line(tmp_path, capsys, args, message):
    test_bad_numeric_configuration_fails_before_running_with_one_line(tmp_path, capsys, args, message)


# ---------------------------------------------------------------------------------------------------------------
# The ledger stage derives each report's least charge from the public schedule and checks memory-aware windows.
# On the code before it, the stage sent the ledger ``least = charge``: every test below saw 0 violations there.


def _violations(tmp_path) -> list:
    return list(read_records(str(tmp_path / "out" / "violations-*.jsonl"), "jsonl"))


def _broken(monkeypatch, name: str, cls) -> None:
    """Register ``cls`` under ``name`` (the registry is the public extension point the stage builds from)."""
    from transforms.mechanisms.registry import MECHANISMS

    monkeypatch.setitem(MECHANISMS, name, cls)


def test_a_capp_client_charging_half_its_square_wave_fails_the_per_user_replay(tmp_path, monkeypatch):
    """The per-user stage ships the budget each report was made at; the ledger stage rebuilds the square wave's
    cost itself, so a CAPP client charging half of it is undercharged at every report: ledger violations, exit 1
    (the documented code for violations)."""
    write_events(tmp_path / "events.jsonl")
    _broken(monkeypatch, "capp", half_charged_capp_client())
    code, report, _, _ = run_replay(tmp_path, "capp", "--out-of-range", "clip", "--per-user-clients")
    violations = _violations(tmp_path)
    assert code == 1 and report["ledger_violations"] == len(violations) == SLOTS * USERS
    assert {v["kind"] for v in violations} == {"undercharged"}
    assert all(v["window_units"] in (2 * v["bound_units"], 2 * v["bound_units"] + 1) for v in violations)


def test_the_honest_capp_passes_the_per_user_replay(tmp_path):
    write_events(tmp_path / "events.jsonl")
    code, report, _, _ = run_replay(tmp_path, "capp", "--out-of-range", "clip", "--per-user-clients")
    assert code == 0 and report["ledger_violations"] == 0 and not _violations(tmp_path)
    assert 0.99 < report["max_window_usage_ratio"] <= 1.0  # the memory-aware window: w + h reports at ε/(w + h)


def test_app_at_eps_over_w_with_memory_fails_the_per_user_replay(tmp_path, monkeypatch):
    """APP at the paper's ε/w with deviation memory w (charged in full): every plain w-slot window fits, a change
    within w slots moves 2w reports: memory_window violations (and off_schedule: the schedule names ε/(2w)), exit 1."""
    from functools import cached_property

    from transforms.mechanisms.numeric.perturbation import PerturbationParams
    from transforms.mechanisms.numeric.streams import APPStream

    class PaperBudgetAPP(APPStream):
        @cached_property
        def client(self):
            p = self.params
            return PerturbationParams(p.epsilon, p.window, "app", budget="paper", not_w_event_private=True,
                                      grid_bits=p.grid_bits).client

    write_events(tmp_path / "events.jsonl")
    _broken(monkeypatch, "app", PaperBudgetAPP)
    code, report, _, _ = run_replay(tmp_path, "app", "--out-of-range", "clip", "--per-user-clients")
    kinds = {v["kind"] for v in _violations(tmp_path)}
    assert code == 1 and report["ledger_violations"] > 0 and kinds == {"memory_window", "off_schedule"}
    assert 1.6 < report["max_window_usage_ratio"] <= 2.0


def test_the_paper_sampling_accounting_reports_its_true_memory_aware_usage(tmp_path):
    """--sampling-accounting paper --not-w-event-private (PP-S, w = 3, L = 2, ε = 2): each segment's report costs
    ε/2, and a change within 3 slots moves 3 reports (2 segments plus 1 of memory): 1.5·ε.  The opt-in is
    explicit, so the exit code stays 0 and no ledger violation is counted, but report.json, the usage output and
    the summary line say 1.5 and name the opt-in; the windows over budget are in the violations file, marked
    accepted_by it.  The strict run of the same events stays within 1."""
    from pipelines import cli

    write_events(tmp_path / "events.jsonl")
    flags = ("--out-of-range", "clip", "--per-user-clients", "--param", "segment=2")
    code, report, _, _ = run_replay(tmp_path, "pp-s", *flags, "--sampling-accounting", "paper",
                                    "--not-w-event-private", ranged=False)
    accepted = _violations(tmp_path)
    usage = list(read_records(str(tmp_path / "out" / "usage-*.jsonl"), "jsonl"))
    assert code == 0 and report["ledger_violations"] == 0
    assert 1.49 < report["max_window_usage_ratio"] <= 1.5
    assert max(u["max_window_usage_ratio"] for u in usage) == report["max_window_usage_ratio"]
    opted = report["not_w_event_private"]
    assert opted == {"opt_in": "--sampling-accounting paper --not-w-event-private",
                     "max_window_usage_ratio": report["max_window_usage_ratio"],
                     "windows_over_budget": len(accepted)}
    assert len(accepted) == USERS * 2  # the reports at slots 5 and 7 end windows moving 3 reports
    assert {(v["kind"], v["accepted_by"]) for v in accepted} == {("memory_window", opted["opt_in"])}
    assert "not w-event private (--sampling-accounting paper --not-w-event-private): max window usage 1.50" in \
        cli.summary("replay", report, "out")
    (tmp_path / "out").rename(tmp_path / "paper")
    code, strict, _, _ = run_replay(tmp_path, "pp-s", *flags, ranged=False)
    assert code == 0 and strict["ledger_violations"] == 0 and strict["max_window_usage_ratio"] <= 1.0
    assert strict["not_w_event_private"] is None and "not w-event private" not in cli.summary("replay", strict, "o")


@pytest.mark.parametrize("stage", [[], ["--per-user-clients"]])
def test_numeric_evaluate_measures_the_releases_against_the_true_slot_means(tmp_path, stage):
    """--evaluate with --domain (refused before), on both paths: evaluation/utility.json, NOT private, holds the
    errors of the fresh releases against the true means of each slot's (clipped, grid-rounded) values, from the
    same run's own releases; the releases themselves are the run without --evaluate's."""
    write_events(tmp_path / "events.jsonl")
    code, _, releases, _ = run_replay(tmp_path, "sw-direct", "--out-of-range", "clip", "--evaluate", "--plot", *stage)
    assert code == 0
    utility = json.loads((tmp_path / "out" / "evaluation" / "utility.json").read_text())
    assert utility["not_private"] is True and utility["slots"] == SLOTS
    truth = [LOW + (HIGH - LOW) * np.mean([round((min(max(values_at(u, s), LOW), HIGH) - LOW) / (HIGH - LOW)
                                                 * 65536) / 65536 for u in range(USERS)]) for s in range(SLOTS)]
    errors = np.array([r["estimate"][0] for r in releases]) - np.array(truth)
    assert utility["mse"] == pytest.approx(float(np.mean(errors ** 2)), rel=1e-9)
    assert utility["mean_error"] == pytest.approx(float(np.mean(errors)), rel=1e-9, abs=1e-12)
    assert utility["mean_predicted_error"] == pytest.approx(np.mean([r["predicted_error"] for r in releases]))
    assert "NOT PRIVATE" in (tmp_path / "out" / "evaluation" / "README.txt").read_text()
    assert (tmp_path / "out" / "evaluation" / "released_vs_true.png").read_bytes()[:4] == b"\x89PNG"  # with its band
    (tmp_path / "out").rename(tmp_path / "evaluated")
    assert run_replay(tmp_path, "sw-direct", "--out-of-range", "clip", *stage)[2] == releases


@pytest.mark.parametrize("mechanism", ["sw-direct", "capp", "ba-sw", "topl"])
def test_both_paths_of_a_mechanism_write_the_same_fields(tmp_path, mechanism):
    """The simulated release stage and the per-user stage on one stream: every field of every release equal,
    but the three that cannot be: ``estimate`` and ``histogram`` (the estimate times the reporters), whose draws
    come from one generator in user order in the simulated stage and from one per (user, slot) in the per-user
    stage, and ``registered_users`` (the per-user stage keeps no registry); for BA-SW also ``epsilon`` (the most a
    reporter was charged, in both: which users publish, and at which budget, is drawn).  The estimates are the
    same function of the reports (:func:`core_estimates` and ``test_numeric_clients``)."""
    write_events(tmp_path / "events.jsonl")
    runs = []
    for stage in ([], ["--per-user-clients"]):
        runs.append(run_replay(tmp_path, mechanism, "--out-of-range", "clip", *stage)[2])
        (tmp_path / "out").rename(tmp_path / f"out{len(runs)}")
    simulated, per_user = runs
    assert len(simulated) == len(per_user) == SLOTS
    differ = ("estimate", "histogram", "registered_users") + (("epsilon",) if mechanism == "ba-sw" else ())
    for a, b in zip(simulated, per_user):
        assert {k: v for k, v in a.items() if k not in differ} == {k: v for k, v in b.items() if k not in differ}
        assert a["registered_users"] == USERS and b["registered_users"] is None
    assert {r["epsilon"] for r in simulated} != {"0"}  # the realised charge, the same decimal in both
