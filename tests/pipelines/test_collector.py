"""The client round trip through files: the collector's requests, a fleet of device processes' reports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipelines import collector
from report_files import assert_matches_files, lines_of


def _users(tmp_path, count=60):
    path = tmp_path / "users.txt"
    path.write_text("".join(f"phone-{i:03d}\n" for i in range(count)))
    return path


@pytest.mark.parametrize("method", ["lpd", "lbd"])
def test_devices_and_collector_round_trip(tmp_path, method):
    """Every report reaches the release or the dead letters; the ledger agrees; releases carry local_client.

    At E = 4 some slot of the six publishes (the devices' randomness is their own: in 400 simulated runs of
    LBD at this size none went without a publication; at E = 1, 6% did)."""
    users = _users(tmp_path)
    common = ["--users", str(users), "--requirement", "fixed:4,4", "--requests", str(tmp_path / "req"),
              "--reports", str(tmp_path / "rep")]
    devices = subprocess.Popen([sys.executable, "-m", "pipelines.devices", *common, "--idle-seconds", "5",
                                "--output", str(tmp_path / "fleet")],
                               stdout=subprocess.PIPE, text=True)  # every device answers: rounds close early
    try:
        code = collector.run(["--mechanism", method, "--epsilon", "4", "--window", "4", *common,
                              "--output", str(tmp_path / "out"), "--slots", "6", "--round-seconds", "10",
                              "--insecure-seed", "3"])
    finally:
        fleet = json.loads(devices.communicate(timeout=60)[0].strip().splitlines()[-1])
    report = assert_matches_files(tmp_path / "out", "collect")  # the one schema, counts as in the files
    assert code == 0 and report["ledger_violations"] == 0 and report["reconciles"]
    assert report["requests_sent"] == fleet["answered"] > 0  # no device refused a request
    answered = assert_matches_files(tmp_path / "fleet", "devices")
    assert answered["records_used"] == fleet["answered"] == len(lines_of(str(tmp_path / "rep" / "*.jsonl")))
    assert answered["records_read"] == report["requests_sent"] and answered["users_in_ledger"] == 60
    assert report["records_read"] == fleet["answered"] and report["dead_letters"] == 0
    releases = [json.loads(line) for line in (tmp_path / "out" / "releases.jsonl").read_text().splitlines()]
    assert [r["slot"] for r in releases] == list(range(1, 7))
    assert {r["trust"] for r in releases} == {"local_client"} and any(r["kind"] == "fresh" for r in releases)
    # the release schema's meanings: the registered devices, and the users who reported at the slot (LPD asks
    # each user at most once a slot; LBD asks every holder in both of its rounds)
    assert {r["registered_users"] for r in releases} == {len(users.read_text().split())}
    reporters = sum(r["reporters"] for r in releases)
    assert reporters == report["records_used"] if method == "lpd" else 0 < reporters <= report["records_used"]


def test_a_report_that_does_not_match_its_request_is_a_dead_letter(tmp_path):
    """A forged report file (another budget, an unknown user) is read, rejected with its reason and counted."""
    users = _users(tmp_path, 4)
    (tmp_path / "rep").mkdir()
    forged = {"request_id": "default/1/0", "stream": "default", "user": "phone-000", "slot": 1, "method": "lbu/m2",
              "oracle": "grr", "epsilon": "0.5", "realised_epsilon": "0.5", "domain_size": 2, "report": [1]}
    lines = [forged, {**forged, "user": "intruder"}]
    (tmp_path / "rep" / "slot-00000001-r0-forged.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    code = collector.run(["--mechanism", "lbu", "--epsilon", "1", "--window", "4", "--users", str(users),
                          "--requirement", "fixed:4,1", "--requests", str(tmp_path / "req"), "--reports",
                          str(tmp_path / "rep"), "--output", str(tmp_path / "out"), "--slots", "1",
                          "--round-seconds", "0.2", "--insecure-seed", "1"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    dead = [json.loads(line) for line in (tmp_path / "out" / "dead_letters.jsonl").read_text().splitlines()]
    assert code == 0 and report["dead_letters"] == 2 and report["reconciles"] and report["records_used"] == 0
    assert "epsilon" in dead[0]["reason"] and "unknown user" in dead[1]["reason"]


def test_a_central_mechanism_is_refused_in_one_line(tmp_path, capsys):
    users = _users(tmp_path, 2)
    code = collector.run(["--mechanism", "pbd", "--users", str(users), "--requirement", "fixed:4,1",
                          "--requests", str(tmp_path / "a"), "--reports", str(tmp_path / "b"),
                          "--output", str(tmp_path / "c"), "--slots", "1"])
    assert code == 2 and "not a local-DP method" in capsys.readouterr().err


def test_a_device_whose_value_does_not_fit_refuses_without_showing_it(tmp_path, capsys):
    """A value file with a value outside the request's domain: that device refuses as ``invalid`` (counted), the
    fleet goes on answering the others, and nothing it prints holds the value (before: the fleet stopped on a
    ValueError ending in ``got 7318``)."""
    from pipelines import devices

    (tmp_path / "users.txt").write_text("phone-a\nphone-b\n")
    (tmp_path / "values.jsonl").write_text(json.dumps({"user": "phone-a", "slot": 1, "value": 7318}) + "\n"
                                           + json.dumps({"user": "phone-b", "slot": 1, "value": 1}) + "\n")
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / "slot-00000001-r0.jsonl").write_text("".join(
        json.dumps({"request_id": f"s/1/0/{user}", "stream": "s", "user": user, "slot": 1, "method": "lbu/m2",
                    "epsilon": "0.5", "domain_size": 2}) + "\n" for user in ("phone-a", "phone-b")))
    code = devices.run(["--users", str(tmp_path / "users.txt"), "--requirement", "fixed:2,1", "--requests",
                        str(tmp_path / "requests"), "--reports", str(tmp_path / "reports"), "--values",
                        str(tmp_path / "values.jsonl"), "--idle-seconds", "0.3", "--poll-seconds", "0.05"])
    printed = capsys.readouterr()
    assert code == 0 and json.loads(printed.out.strip().splitlines()[-1]) == {"answered": 1, "refused_invalid": 1}
    assert "7318" not in printed.out + printed.err
    reports = (tmp_path / "reports" / "slot-00000001-r0-devices.jsonl").read_text().splitlines()
    assert [json.loads(line)["user"] for line in reports] == ["phone-b"]
