"""Recorded client reports through the Beam replay: every report counted or a dead letter with its reason."""

from __future__ import annotations

import json

import pytest

import schemas
from device import wevent_client
from pipelines import client_replay
from report_files import assert_matches_files


def _record(tmp_path, method: str, users: int, slots: int, window: int, budget: str, first: int = 1, offset: int = 0):
    """The reports devices would have sent under ``method``'s public schedule on absolute slots ``first ..
    first + slots - 1`` (LBU: everyone, every slot; LSP: the slots t with (t - 1 - offset) mod w == 0; LPU with
    public groups: each device at its own group's slots, learnt from its id)."""
    ids = [f"phone-{i:03d}" for i in range(users)]
    (tmp_path / "users.txt").write_text("".join(user + "\n" for user in ids))
    units = wevent_client.epsilon_units_from_string(budget)
    per_report = units // window if method == "lbu" else units
    lines = []
    for user_index, user in enumerate(ids):
        device = wevent_client.WEventClient(user, window, budget, lambda slot, u=user_index: (slot + u) % 2)
        turn = wevent_client.public_group(user, window) if method == "lpu" else offset
        for slot in range(first, first + slots):
            if method in ("lsp", "lpu") and (slot - 1) % window != turn:
                continue
            request = {"stream": "s", "user": user, "slot": slot, "method": f"{method}/m2",
                       "epsilon": wevent_client.units_to_decimal_string(per_report), "domain_size": 2}
            lines.append(json.dumps(device.respond(request)))
    return lines


@pytest.mark.parametrize("method", ["lbu", "lsp", "lpu"])
def test_recorded_reports_are_released_and_bad_ones_dead_lettered(tmp_path, method):
    lines = _record(tmp_path, method, users=30, slots=8, window=4, budget="1")
    last = max(json.loads(line)["slot"] for line in lines)
    forged = json.loads(lines[0])
    lines += ["not json", json.dumps({**forged, "epsilon": "0.9"}), json.dumps({**forged, "user": "intruder"}),
              lines[0]]  # a second report of one user in one round
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    code = client_replay.run(["--input", str(tmp_path / "reports.jsonl"), "--users", str(tmp_path / "users.txt"),
                              "--requirement", "fixed:4,1", "--mechanism", method, "--epsilon", "1", "--window",
                              "4", "--output", str(tmp_path / "out"), "--insecure-seed", "2", "--slot-seconds", "60",
                              "--origin", "1000"] + (["--param", "grouping=public"] if method == "lpu" else []))
    report = assert_matches_files(tmp_path / "out", "client-replay")  # the one schema, counts as in the files
    assert code == 0 and report["reconciles"] and report["ledger_violations"] == 0
    assert report["dead_letters"] == 4 and report["records_used"] == len(lines) - 4
    assert report["slots"] == last and last == (5 if method == "lsp" else 8)  # to the last report
    assert report["max_window_usage_ratio"] <= 1
    dead_letters = [json.loads(line) for path in sorted((tmp_path / "out").glob("dead_letters*"))
                    for line in path.read_text().splitlines()]
    releases = [json.loads(line) for path in (tmp_path / "out").glob("releases*") for line in path.read_text().splitlines()]
    for record in dead_letters:
        schemas.validate("dead_letter", record)
    for record in releases:  # the same records as every other job's, dated by --slot-seconds and --origin
        schemas.validate("release", record)
        assert (record["slot_start"], record["slot_end"]) == (1000 + 60 * record["slot"], 1060 + 60 * record["slot"])
    assert {record["user"] for record in dead_letters if record["stage"] == "client_release"} >= {"intruder"}
    dead = [record["reason"] for record in dead_letters]
    assert any("malformed" in r for r in dead) and any("no request" in r for r in dead)
    assert any("unknown user" in r for r in dead) and any("second report" in r for r in dead)


@pytest.mark.parametrize("method, offset", [("lbu", 0), ("lsp", 0), ("lsp", 2), ("lpu", 0)])
@pytest.mark.parametrize("first", [0, 6])
def test_reports_replay_on_absolute_slots_whatever_the_first_slot_with_data(tmp_path, method, offset, first):
    """The devices keep the public schedule on absolute slots; a recording that starts at slot 6 (or 0) is
    replayed on the same schedule and every honest report is used.  Before, the schedule was anchored at the
    first slot with a report: LPU rejected most reports, and LSP with an offset every one."""
    lines = _record(tmp_path, method, users=30, slots=9, window=4, budget="1", first=first, offset=offset)
    slots = sorted({json.loads(line)["slot"] for line in lines})
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    code = client_replay.run(["--input", str(tmp_path / "reports.jsonl"), "--users", str(tmp_path / "users.txt"),
                              "--requirement", "fixed:4,1", "--mechanism", method, "--epsilon", "1", "--window",
                              "4", "--output", str(tmp_path / "out"), "--insecure-seed", "2",
                              "--param", f"sampling_offset={offset}"]
                             + (["--param", "grouping=public"] if method == "lpu" else []))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0 and report["reconciles"] and report["ledger_violations"] == 0
    assert report["dead_letters"] == 0 and report["records_used"] == len(lines) > 0
    assert report["slots"] == slots[-1] - slots[0] + 1
    releases = [json.loads(line) for path in (tmp_path / "out").glob("releases*") for line in path.read_text().splitlines()]
    assert sorted(r["slot"] for r in releases) == list(range(slots[0], slots[-1] + 1))
    reported = {t: sum(json.loads(line)["slot"] == t for line in lines) for t in slots}
    assert all(r["reporters"] == reported.get(r["slot"], 0) and r["registered_users"] == 30 for r in releases)


@pytest.mark.parametrize("method", ["lpd", "lpu"])
def test_a_method_without_a_public_schedule_is_refused_before_the_pipeline(tmp_path, capsys, method):
    """LPD decides whom to ask from the reports; LPU draws its groups at random unless they are public."""
    lines = _record(tmp_path, "lbu", users=2, slots=1, window=2, budget="1")
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    code = client_replay.run(["--input", str(tmp_path / "reports.jsonl"), "--users", str(tmp_path / "users.txt"),
                              "--requirement", "fixed:2,1", "--mechanism", method, "--epsilon", "1", "--window",
                              "2", "--output", str(tmp_path / "out")])
    assert code == 2 and "cannot be replayed" in capsys.readouterr().err


def test_the_baseline_counts_the_same_reports(tmp_path):
    lines = _record(tmp_path, "lbu", users=10, slots=3, window=2, budget="1")
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    code = client_replay.run(["--input", str(tmp_path / "reports.jsonl"), "--users", str(tmp_path / "users.txt"),
                              "--requirement", "fixed:2,1", "--mechanism", "lbu", "--epsilon", "1", "--window",
                              "2", "--output", str(tmp_path / "out"), "--baseline"])
    counts = [json.loads(line) for path in (tmp_path / "out").glob("counts*") for line in path.read_text().splitlines()]
    assert code == 0 and sum(row[-1] for row in counts) == len(lines)


def test_recorded_mean_reports_replay_with_the_devices_hybrid_mechanism(tmp_path):
    """LBU estimating a mean: devices answer the public schedule's requests with HM reports over [0, 10]."""
    ids = [f"phone-{i:03d}" for i in range(400)]
    (tmp_path / "users.txt").write_text("".join(user + "\n" for user in ids))
    per_report = wevent_client.units_to_decimal_string(wevent_client.epsilon_units_from_string("8") // 2)
    oracle = wevent_client.hybrid_mechanism(wevent_client.epsilon_units_from_string(per_report)).oracle
    lines = []
    for index, user in enumerate(ids):
        device = wevent_client.WEventClient(user, 2, "8", lambda slot, u=index: float(u % 10))
        for slot in (1, 2, 3):
            lines.append(json.dumps(device.respond({
                "stream": "s", "user": user, "slot": slot, "method": "lbu-mean/m2", "epsilon": per_report,
                "domain_size": 1, "oracle": oracle, "low": 0.0, "high": 10.0})))
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    code = client_replay.run(["--input", str(tmp_path / "reports.jsonl"), "--users", str(tmp_path / "users.txt"),
                              "--requirement", "fixed:2,8", "--mechanism", "lbu-mean", "--epsilon", "8", "--window",
                              "2", "--bins", "1", "--param", "low=0", "--param", "high=10", "--output",
                              str(tmp_path / "out"), "--insecure-seed", "1"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0 and report["reconciles"] and report["ledger_violations"] == 0
    assert report["records_used"] == len(lines) and report["dead_letters"] == 0
    releases = [json.loads(line) for path in (tmp_path / "out").glob("releases*") for line in path.read_text().splitlines()]
    # 400 reporters at eps 4 over [0, 10]: the estimate's sd is 5·sqrt(Var*(4) = 0.53)/20 = 0.18; true mean 4.5,
    # so beyond 1.5 (8 sd) a false failure has probability below 1e-14 per slot.
    assert len(releases) == 3 and all(abs(r["estimate"][0] - 4.5) < 1.5 for r in releases)
    assert {r["trust"] for r in releases} == {"local_client"}
