"""An empty input and users excluded by refused declarations are named in the summary line and report.json, and
``--strict`` makes either exit 3 (issue 27, 'first contact': both ended with exit 0 and nothing said).

Each test fails on the code before this change: report.json had no ``excluded_users``, the summary no note, and
``--strict`` was an unknown flag (exit 2)."""

from __future__ import annotations

import json

from pipelines import cli, replay
from pipelines.job_report import EMPTY_INPUT_WARNING, check_report, job_report

RANGE = ["--start", "0", "--end", "600", "--slot-seconds", "60", "--binning", "int:3", "--insecure-seed", "3"]


def write(path, rows) -> str:
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows))
    return str(path)


def declarations_run(tmp_path, *extra):
    events = write(tmp_path / "e.jsonl", [{"user": f"u{i % 4}", "time": 15 * i, "value": i % 3} for i in range(40)])
    declared = tmp_path / "req.csv"  # u0 and u1 declare well; u2's window is 0, u3's epsilon is not a number
    declared.write_text("user,time,w,epsilon\nu0,0,4,1.0\nu1,0,4,1.0\nu2,0,0,1.0\nu3,0,4,abc\n")
    out = tmp_path / "out"
    code = replay.run(["--input", events, "--requirements-file", str(declared), *RANGE, "--output", str(out),
                       *extra])
    return code, json.loads((out / "report.json").read_text())


def test_users_excluded_by_refused_declarations_are_named(tmp_path, capsys):
    code, report = declarations_run(tmp_path)
    assert code == 0
    assert report["excluded_users"] == 2 and report["users_in_ledger"] == 2
    assert any("2 user(s) excluded" in w and "u2, u3" in w for w in report["warnings"])
    assert "2 users excluded: no usable requirement" in capsys.readouterr().err  # the summary line


def test_strict_fails_on_excluded_users(tmp_path, capsys):
    code, report = declarations_run(tmp_path, "--strict")
    assert code == cli.EXIT_REJECTED and report["excluded_users"] == 2
    assert "error: --strict: 2 user(s) excluded" in capsys.readouterr().err


def test_an_empty_input_is_named_and_strict_fails_on_it(tmp_path, capsys):
    empty = write(tmp_path / "empty.jsonl", [])
    argv = ["--input", empty, "--requirement", "fixed:4,1.0", *RANGE, "--output", str(tmp_path / "out")]
    assert replay.run(argv) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["records_read"] == 0 and EMPTY_INPUT_WARNING in report["warnings"]
    assert "EMPTY INPUT" in capsys.readouterr().err  # the summary line
    assert replay.run([*argv, "--overwrite", "--strict"]) == cli.EXIT_REJECTED
    assert "error: --strict: empty input" in capsys.readouterr().err


def test_excluded_users_are_those_the_ledger_never_checked():
    counts = {"slots": 1, "fresh": 1, "skipped": 0, "nullified": 0, "late": 0, "dead_letters": 3,
              "users_in_ledger": 1, "ledger_violations": 0, "max_window_usage_ratio": 0.5,
              "pairs": [("s", "a")], "declaration_refused": [("s", "a"), ("s", "b")]}
    report = job_report("watch", "pbd", counts, 5, 2, 0, 1.0)
    check_report(report)
    assert report["excluded_users"] == 1  # "a" had a refused line but was checked: a later declaration held
    assert cli.finish("watch", report, "out", 1.0, "none-*.jsonl", strict=True) == cli.EXIT_REJECTED
    assert cli.finish("watch", report, "out", 1.0, "none-*.jsonl") == 0
    collector = job_report("collect", "lpd", {k: v for k, v in counts.items() if k != "declaration_refused"}, 5, 5,
                           0, 1.0)
    assert collector["excluded_users"] is None and collector["warnings"] == []
