"""Numeric device reports (``device.numeric_client.NumericClient``) replayed through Beam: checked against the public
schedule, averaged per slot exactly, every report used, a duplicate or a dead letter with its reason."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest

import schemas
from device import numeric_client, wevent_client
from pipelines import client_replay
from transforms.mechanisms import make_mechanism
from transforms.numeric_user_methods import user_method

LOW, HIGH, WINDOW, BUDGET = -5.0, 15.0, 4, "2"


def _devices(tmp_path, method: str, users: int, slots: int, seed: int = 7):
    """Every device's reports of a drifting value, and the exact per-slot average of their report values."""
    ids = [f"phone-{i:03d}" for i in range(users)]
    (tmp_path / "users.txt").write_text("".join(user + "\n" for user in ids))
    draws = random.Random(seed)
    lines, values = [], {}
    for u, user in enumerate(ids):
        device = numeric_client.NumericClient(user, method, WINDOW, BUDGET, LOW, HIGH, randbits=draws.getrandbits)
        for slot in range(slots):
            if (u + slot) % 7 == 3:  # a device without a value this slot sends nothing
                continue
            report = device.report("s", slot, LOW + (HIGH - LOW) * ((u * 13 + slot * 5) % 17) / 16)
            lines.append(json.dumps(report))
            values.setdefault(slot, []).append(Fraction(device.report_value(report["report"][0])))
    return lines, values


def _run(tmp_path, method, lines, *extra):
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    return client_replay.run(["--input", str(tmp_path / "reports.jsonl"), "--users", str(tmp_path / "users.txt"),
                              "--requirement", f"fixed:{WINDOW},{BUDGET}", "--mechanism", method, "--epsilon",
                              BUDGET, "--window", str(WINDOW), f"--domain={LOW},{HIGH}", "--output",
                              str(tmp_path / "out"), *extra])


def schedule_estimator(method: str, **params):
    """The registered mechanism's estimator (its statistic and de-biasing) at the jobs' budget and domain."""
    return user_method(make_mechanism(method, bins=1, epsilon=float(BUDGET), window=WINDOW, low=LOW, high=HIGH,
                                      **params)).estimator


def _lines(tmp_path, prefix):
    return [json.loads(line) for path in sorted((tmp_path / "out").glob(prefix + "*"))
            for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("method", ["sw-direct", "ipp", "app", "capp"])
def test_device_reports_release_their_exact_averages_and_bad_ones_are_dead_letters(tmp_path, method):
    lines, values = _devices(tmp_path, method, users=25, slots=6)
    good = json.loads(lines[0])
    cells = int(good["report"][0])
    forged = [json.dumps({**good, "epsilon": BUDGET}),                       # not the per-report budget
              json.dumps({**good, "realised_epsilon": good["epsilon"]}),       # not the square wave's
              json.dumps({**good, "method": "sw-direct" if method != "sw-direct" else "ipp"}),
              json.dumps({**good, "oracle": "grr"}),
              json.dumps({**good, "report": [cells + 10 ** 6]}),               # no cell of the square wave
              json.dumps({**good, "user": "intruder"}),
              json.dumps({**good, "slot": -1}),
              "not json"]
    code = _run(tmp_path, method, lines + forged + [lines[3]],  # and one device's second report of a slot
                "--slot-seconds", "60", "--origin", "1000")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0 and report["ledger_violations"] == 0 and report["max_window_usage_ratio"] <= 1
    # memory-aware windows: a change within w slots moves the h reports after them too, so the worst window holds
    # min(slots, w + h) reports at ε/(w + h) (the plain w-slot windows held w of them: 1/2 for APP and CAPP)
    memory = {"sw-direct": 0, "ipp": 1, "app": WINDOW, "capp": WINDOW}[method]
    worst = min(6, WINDOW + memory) / (WINDOW + memory)
    assert worst - 1e-6 < report["max_window_usage_ratio"] <= worst
    assert report["records_read"] == len(lines) + len(forged) + 1
    assert (report["records_used"], report["duplicates"], report["late"], report["dead_letters"]) == \
        (len(lines), 1, 0, len(forged)) and report["reconciles"]
    reasons = sorted(d["reason"] for d in _lines(tmp_path, "dead_letters"))
    for expected in ("not the schedule's", "not the square wave's", "report for method", "not sw over 1",
                     "outside the domain", "unknown user", "slots start at 0", "not JSON"):
        assert sum(expected in reason for reason in reasons) == 1, (expected, reasons)
    for record in _lines(tmp_path, "dead_letters") + _lines(tmp_path, "duplicates"):
        schemas.validate("dead_letter", record)
        assert record["stage"] == "parse" or (record["stage"], record["stream"]) == ("numeric_reports", "s")
    releases = {r["slot"]: r for r in _lines(tmp_path, "releases")}
    assert sorted(releases) == sorted(values)
    for slot, reported in values.items():
        record = releases[slot]
        schemas.validate("release", record)  # the same records as every other job's, dated by the clock
        assert (record["slot_start"], record["slot_end"]) == (1000 + 60 * slot, 1060 + 60 * slot)
        mean = float(sum(reported) / len(reported))
        estimator = schedule_estimator(method)
        assert record["estimate"] == [LOW + (HIGH - LOW) * estimator.unit_estimate(mean)]
        assert record["statistic"] == estimator.statistic
        assert record["reporters"] == len(reported) and record["trust"] == "local_client"
        assert record["registered_users"] is None  # the reporters' own field, registrations not written here
    per_report = wevent_client.epsilon_units_from_string(BUDGET) // (WINDOW + {"sw-direct": 0, "ipp": 1}.get(method,
                                                                                                           WINDOW))
    assert {json.loads(line)["epsilon"] for line in lines} == {wevent_client.units_to_decimal_string(per_report)}
    realised = {json.loads(line)["realised_epsilon"] for line in lines}  # what each report was charged
    assert {r["epsilon"] for r in releases.values()} == realised and len(realised) == 1


def test_a_users_declaration_the_schedule_does_not_honour_is_refused_before_the_pipeline(tmp_path, capsys):
    lines, _ = _devices(tmp_path, "capp", users=2, slots=1)
    (tmp_path / "reports.jsonl").write_text("\n".join(lines) + "\n")
    args = ["--input", str(tmp_path / "reports.jsonl"), "--users", str(tmp_path / "users.txt"), "--mechanism",
            "capp", "--epsilon", BUDGET, "--window", str(WINDOW), "--output", str(tmp_path / "out")]
    assert client_replay.run(args + ["--requirement", "fixed:8,2", "--domain", "0,1"]) == 2
    assert "does not honour" in capsys.readouterr().err
    assert client_replay.run(args + ["--requirement", "fixed:4,2"]) == 2
    assert "give --domain" in capsys.readouterr().err


def method_devices(tmp_path, method: str, users: int, slots: int, segment: int | None, seed: int = 11):
    """Every device's reports (sampling methods: closing a segment whose last slot they missed), and per slot the
    exact values the collector must average: the report values, BA-SW's released value (the new publication or
    the last one), ToPL's cells."""
    ids = [f"phone-{i:03d}" for i in range(users)]
    (tmp_path / "users.txt").write_text("".join(user + "\n" for user in ids))
    draws = random.Random(seed)
    lines, values = [], {}
    for u, user in enumerate(ids):
        device = numeric_client.NumericClient(user, method, WINDOW, BUDGET, LOW, HIGH, segment=segment,
                                             randbits=draws.getrandbits)
        for slot in range(slots):
            if (u + slot) % 7 == 3:
                continue
            made = []
            if segment is not None and device.open[2] and slot // segment != device.open[0]:
                made.append(device.close("s", slot - 1))
            made.append(device.report("s", slot, LOW + (HIGH - LOW) * ((u * 13 + slot * 5) % 17) / 16))
            for report in filter(None, made):
                lines.append(json.dumps(report))
                value = device.absorption[0] if method == "ba-sw" else device.report_value(report["report"][0])
                values.setdefault(report["slot"], []).append(Fraction(value))
    return lines, values


@pytest.mark.parametrize("method, segment", [("pp-s", 3), ("capp-s", 2), ("sampling", 3), ("ba-sw", None),
                                             ("topl", None)])
def test_device_reports_of_every_other_method_release_their_exact_averages(tmp_path, method, segment):
    """The sampling methods report at their segments' last slots (a report elsewhere is a dead letter), BA-SW's
    reports are replayed through its public absorption rule (a report with a part the rule does not allow is a
    dead letter), ToPL's PM cells are de-biased after averaging; 0 window violations."""
    lines, values = method_devices(tmp_path, method, users=20, slots=9, segment=segment)
    good = json.loads(lines[1])
    forged = [json.dumps({**good, "epsilon": BUDGET})]
    if segment is not None:
        forged.append(json.dumps({**good, "slot": good["slot"] + 1}))  # not a segment's last slot
    if method == "ba-sw":
        later = next(json.loads(line) for line in lines if json.loads(line)["slot"] > 0)
        forged.append(json.dumps({**later, "user": "phone-019", "slot": 20,  # a part the rule does not allow
                                  "report": later["report"] + later["report"]}))
    code = _run(tmp_path, method, lines + forged, *(["--param", f"segment={segment}"] if segment else []))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0 and report["ledger_violations"] == 0 and 0 < report["max_window_usage_ratio"] <= 1
    twice = int(method == "ba-sw")  # BA-SW: a second report of a slot is a duplicate before its rule reads it
    assert (report["records_used"], report["duplicates"], report["dead_letters"]) == \
        (len(lines), twice, len(forged) - twice) and report["reconciles"]
    reasons = [d["reason"] for d in _lines(tmp_path, "dead_letters")]
    assert sum("not the schedule's" in r for r in reasons) == 1 - twice
    if segment is not None:
        assert sum("last slot of each segment" in r for r in reasons) == 1
    if method == "ba-sw":
        assert sum("the absorption rule makes this report" in r for r in reasons) == 1
    releases = {r["slot"]: r for r in _lines(tmp_path, "releases")}
    fresh = {slot: r for slot, r in releases.items() if r["kind"] == "fresh"}
    assert sorted(fresh) == sorted(values)
    if segment is not None:
        assert all((slot + 1) % segment == 0 for slot in fresh)
    estimator = schedule_estimator(method, **({} if segment is None else {"segment": segment}))
    for slot, reported in values.items():
        mean = float(sum(reported) / len(reported))
        assert fresh[slot]["estimate"] == [LOW + (HIGH - LOW) * estimator.unit_estimate(mean)]
        assert fresh[slot]["statistic"] == estimator.statistic
        assert fresh[slot]["reporters"] == len(reported)
