"""DPI through the real replay job (FnApiRunner): lifetime budgets, its parameters from ``--param``, its figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines import replay
from transforms.sinks import read_records


def write_events(tmp_path, slots=6, users=20, bins=4) -> str:
    """A small generated stream: ``users`` report a bin every 10-second slot; one record is outside the domain."""
    gen = np.random.default_rng(0)
    lines = [json.dumps({"user": f"u{u}", "time": 10 * t + float(gen.random()), "value": int(gen.integers(bins))})
             for t in range(slots) for u in range(users)]
    lines.append(json.dumps({"user": "u1", "time": 3.0, "value": bins + 5}))
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
def test_dpi_replays_with_exact_accounting_and_reports_its_figures(tmp_path, name):
    out = tmp_path / "out"
    code = replay.run(["--input", write_events(tmp_path), "--binning", "int:4", "--slot-seconds", "10",
                       "--start", "0", "--end", "60", "--requirement", "lifetime:2.0", "--mechanism", name,
                       "--epsilon", "2.0", "--param", "pool_size=50", "--param", "draws=4", "--param", "rba=ranges",
                       "--param", "queries=acc,inst", "--output", str(out), "--quiet", "--insecure-seed", "1"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["records_read"] == 121 and report["records_used"] == 120 and report["dead_letters"] == 1
    assert report["reconciles"] and report["ledger_violations"] == 0 and report["max_window_usage_ratio"] <= 1
    releases = sorted(read_records(str(out / "releases-*.jsonl"), "jsonl"), key=lambda r: r["slot"])
    assert [r["slot"] for r in releases] == list(range(6))
    assert all(r["statistic"] == "distribution" and abs(sum(r["estimate"]) - 1) < 1e-12 for r in releases)
    figures = releases[-1]["figures"]
    assert figures["epoch"] == 1 and figures["eps_sound_upper"] <= 2.0
    assert figures["eps_charged_total"] == pytest.approx(sum(float(r["epsilon"]) for r in releases))
    if name == "dpi":
        assert figures["eps_claimed"] > 0
    dead = read_records(str(out / "dead_letters-*.jsonl"), "jsonl")
    assert len(dead) == 1 and "out of domain" in dead[0]["reason"]


@pytest.mark.parametrize("args, message", [
    (["--mechanism", "dpi", "--epsilon", "2.0", "--param", "lam=1.5"], "lam must be a number in (0, 1]"),
    (["--mechanism", "dpi-sound", "--epsilon", "0"], "epsilon"),
    (["--mechanism", "dpi", "--epsilon", "2.0", "--param", "pool_size=5", "--param", "draws=10"], "pool"),
    (["--mechanism", "dpi", "--epsilon", "2.0", "--param", "restart=sometimes"], "restart must be one of"),
    (["--mechanism", "dpi", "--epsilon", "2.0", "--param", "beta=3"], "no such parameter"),
    (["--mechanism", "dpi"], "give epsilon"),
])
def test_bad_dpi_configuration_fails_before_running_with_one_line(tmp_path, capsys, args, message):
    events = tmp_path / "events.jsonl"
    events.write_text('{"user": "u", "time": 1, "value": 0}\n')
    argv = ["--input", str(events), "--binning", "int:2", "--requirement", "lifetime:2.0", "--output",
            str(tmp_path / "out"), *args]
    assert replay.run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()
