"""The replay job: fixtures in the real formats, exact record accounting, configuration errors."""

from __future__ import annotations

import json
from decimal import Decimal
import lzma
import os
import tarfile
from datetime import datetime, timezone

import pytest

from pipelines import replay
from transforms.binning import GridBins
from transforms.sinks import read_records

TDRIVE_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "tdrive_sample600",
                           "taxi_log_2008_by_id.tar.xz")


def epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def write_tdrive(tmp_path) -> tuple[str, dict]:
    """Three taxis over four 10-minute slots, in a .tar.xz like the original; returns the path and what to expect."""
    lines = {
        "1": ["1,2008-02-02 00:01:00,116.40,39.90", "1,2008-02-02 00:05:00,116.41,39.91",   # slot 0: 1 used, 1 duplicate
              "1,2008-02-02 00:25:00,116.55,40.05"],                                        # slot 2
        "2": ["2,2008-02-02 00:02:00,116.05,39.55", "2,2008-02-02 00:12:00,117.50,39.55",   # slot 1: outside the grid
              "2,2008-02-02 00:33:00,116.05,39.55", "2,2008-02-02 00:33:00,116.05,39.55"],  # slot 3: exact repeat
        "3": ["3,2008-02-02 00:14:00,116.79,40.29", "not,a,valid line"],                     # slot 1; malformed
    }
    source = tmp_path / "taxi_log_2008_by_id"
    source.mkdir()
    for taxi, rows in lines.items():
        (source / f"{taxi}.txt").write_text("\n".join(rows) + "\n")
    archive = tmp_path / "taxis.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(source, arcname="taxi_log_2008_by_id")
    expected = {"records_read": 9, "records_used": 5, "duplicates": 2, "late": 0, "dead_letters": 2}
    return str(archive), expected


def run_replay(tmp_path, *args) -> tuple[int, dict]:
    out = tmp_path / "out"
    code = replay.run(["--output", str(out), "--quiet", "--insecure-seed", "1", *args])
    with open(out / "report.json") as f:
        return code, json.load(f)


def test_tdrive_fixture_replays_with_exact_accounting(tmp_path):
    archive, expected = write_tdrive(tmp_path)
    origin = epoch("2008-02-02 00:00:00")
    code, report = run_replay(tmp_path, "--input", archive, "--input-format", "tdrive", "--binning", "tdrive",
                              "--slot-seconds", "600", "--origin", str(origin), "--carry-forward",
                              "--requirement", "fixed:3,2.0")
    assert code == 0
    assert {k: report[k] for k in expected} == expected
    assert report["reconciles"] and report["ledger_violations"] == 0 and report["max_window_usage_ratio"] <= 1
    assert report["slots"] == 4 and len(read_records(str(tmp_path / "out" / "usage-*.jsonl"), "jsonl")) == 3
    releases = sorted(read_records(str(tmp_path / "out" / "releases-*.jsonl"), "jsonl"), key=lambda r: r["slot"])
    assert [r["slot"] for r in releases] == [0, 1, 2, 3]
    assert all(len(r["histogram"]) == 100 for r in releases)
    grid = GridBins.tdrive()
    assert grid({"lon": 116.40, "lat": 39.90}) != grid({"lon": 116.55, "lat": 40.05})  # the fixture moves taxi 1
    reasons = sorted(d["reason"].split(" ")[0] for d in read_records(str(tmp_path / "out" / "dead_letters-*.jsonl"),
                                                                      "jsonl"))
    assert len(reasons) == 2


def test_checkin_fixture_replays_with_exact_accounting(tmp_path):
    checkins = tmp_path / "checkins.txt.xz"
    pois = tmp_path / "pois.txt"
    pois.write_text("0\t40.75\t-73.99\n1\t41.88\t-87.63\n2\t25.67\t-100.31\n")
    rows = ["7\t0\t1333447208.0", "7\t1\t1333447300.0", "8\t2\t1333450000.0", "8\t99\t1333450100.0",
            "9\t1\t1333460000.0"]
    with lzma.open(checkins, "wt") as f:
        f.write("\n".join(rows) + "\n")
    code, report = run_replay(tmp_path, "--input", str(checkins), "--input-format", "checkins", "--poi", str(pois),
                              "--binning", "grid:-125,-66,24,50,10x10", "--slot-seconds", "6000",
                              "--requirement", "fixed:4,1.0")
    assert code == 0
    assert report["records_read"] == 5
    assert report["dead_letters"] == 1  # POI 99 has no coordinates
    assert report["duplicates"] == 1    # user 7 twice in one slot
    assert report["records_used"] == 3 and report["reconciles"]


@pytest.mark.parametrize("file_format", ["avro", "parquet"])
def test_other_output_formats(tmp_path, file_format):
    archive, _ = write_tdrive(tmp_path)
    code, report = run_replay(tmp_path, "--input", archive, "--input-format", "tdrive", "--binning", "tdrive",
                              "--slot-seconds", "600", "--requirement", "fixed:3,2.0", "--format", file_format,
                              "--ledger-detail")
    assert code == 0
    releases = read_records(str(tmp_path / "out" / f"releases-*.{file_format}"), file_format)
    assert len(releases) == report["slots"]
    ledger = read_records(str(tmp_path / "out" / f"ledger-*.{file_format}"), file_format)
    assert len(ledger) > 0 and all("." in e["charge"] or e["charge"].isdigit() for e in ledger)


@pytest.mark.parametrize("args, message", [
    (["--mechanism", "xyz"], "unknown mechanism 'xyz'"),
    (["--requirement", "fixed:3,0"], "epsilon must be in (0"),
    (["--requirement", "fixed:3,-1"], "epsilon must be in (0"),
    (["--binning", "grid:116,116.8,39.5,40.3,0x10"], "rows must be an integer >= 1"),
    (["--input", "/nonexistent/events.jsonl"], "matches no readable file"),
    (["--output", "EXISTING"], "exists and is not empty (use --overwrite)"),
    (["--mechanism", "bd"], "give --epsilon and --window"),
    (["--levels", "a=fixed:3,1.0", "--level-ratios", "a=0.4"], "sum to 1"),
    (["--min-epsilon", "2", "--max-epsilon", "1"], "--min-epsilon must not exceed --max-epsilon"),
])
def test_configuration_errors_fail_before_running_with_one_line(tmp_path, capsys, args, message):
    events = tmp_path / "events.jsonl"
    events.write_text('{"user": "u", "time": 1, "value": 0}\n')
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("x")
    argv = ["--input", str(events), "--binning", "int:2", "--requirement", "fixed:3,1.0", "--output",
            str(tmp_path / "out")] + [str(existing) if a == "EXISTING" else a for a in args]
    if "--levels" in args:
        argv.remove("--requirement"), argv.remove("fixed:3,1.0")
    assert replay.run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()
    assert (existing / "keep.txt").exists()


def test_declarations_outside_the_operators_bounds_become_dead_letters(tmp_path):
    events = tmp_path / "events.jsonl"
    rows = [{"user": "ok", "time": 5, "value": 1, "w": 10, "epsilon": 1.0},
            {"user": "greedy", "time": 6, "value": 1, "w": 10, "epsilon": 50.0},
            {"user": "long", "time": 7, "value": 0, "w": 5000, "epsilon": 1.0}]
    events.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, report = run_replay(tmp_path, "--input", str(events), "--binning", "int:2", "--requirement", "fixed:10,1.0",
                              "--max-epsilon", "10", "--max-window", "100", "--max-rejected-fraction", "1")
    assert code == 0 and report["records_used"] == 1 and report["dead_letters"] == 2 and report["reconciles"]
    reasons = sorted(d["reason"] for d in read_records(str(tmp_path / "out" / "dead_letters-*.jsonl"), "jsonl"))
    assert "exceeds the operator's maximum 10.0" in reasons[0] and "window 5000 exceeds" in reasons[1]


def test_named_levels_are_assigned_by_ratio(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"user": f"u{i}", "time": 10 * i, "value": i % 2}) + "\n" for i in range(400)))
    code, report = run_replay(tmp_path, "--input", str(events), "--binning", "int:2", "--slot-seconds", "600",
                              "--levels", "short=fixed:4,1.0;long=fixed:12,0.6", "--level-ratios", "short=0.5,long=0.5",
                              "--ledger-detail")
    assert code == 0 and len(read_records(str(tmp_path / "out" / "usage-*.jsonl"), "jsonl")) == 400
    assert report["reconciles"]
    ledger = read_records(str(tmp_path / "out" / "ledger-*.jsonl"), "jsonl")
    first_dc = {}
    for entry in ledger:
        first_dc.setdefault(entry["user"], entry["parts"]["dissimilarity"])
    shares = sorted(set(first_dc.values()))
    assert shares == ["0.025", "0.125"]  # 0.6/(2*12) and 1.0/(2*4)
    # what the ledger derived from each release's evidence: covered by every charge, and not trivially 0
    least = [(Decimal(e["least"]), Decimal(e["charge"])) for e in ledger]
    assert all(derived <= charge for derived, charge in least) and any(derived > 0 for derived, _ in least)
    short = sum(1 for v in first_dc.values() if v == "0.125") / len(first_dc)
    assert 0.4 < short < 0.6  # binomial(400, 0.5): outside this range with probability < 1e-4


def test_dataflow_style_options_build_a_serializable_graph(tmp_path):
    """The replay graph builds and pickles with the Dataflow command line, without submitting anything.

    Beam checks Dataflow options (a real project id and bucket) when it creates the runner, so the
    graph is built with the same options on a local runner object and serialized as a submission would.
    """
    import apache_beam as beam
    from apache_beam.internal import pickler
    from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    events = tmp_path / "events.jsonl"
    events.write_text('{"user": "u", "time": 1, "value": 0}\n')
    config = replay.build_config(["--input", str(events), "--binning", "int:2", "--requirement", "fixed:3,1.0",
                                  "--output", str(tmp_path / "out"), "--runner", "DataflowRunner", "--project", "p",
                                  "--region", "r", "--temp_location", "gs://b/t", "--setup_file", "./setup.py"])
    options = PipelineOptions(config.beam_args)
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    assert options.view_as(SetupOptions).setup_file == "./setup.py"
    pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
    replay.build(pipeline, config)
    proto = pipeline.to_runner_api()
    names = {t.unique_name for t in proto.components.transforms.values()}
    for stage in ("UserSlotState", "ReleaseController", "PrivacyLedger"):
        assert any(stage in name for name in names), stage
    for applied in pipeline.transforms_stack[0].parts:
        pickler.loads(pickler.dumps(applied.transform))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(TDRIVE_DATA), reason="../shared/data/tdrive_sample600 is not on this machine "
                    "(its licence forbids copying it into the project)")
def test_full_tdrive_sample_replays_without_violation(tmp_path):
    code, report = run_replay(tmp_path, "--input", TDRIVE_DATA, "--input-format", "tdrive", "--binning", "tdrive",
                              "--slot-seconds", "600", "--origin", str(epoch("2008-02-02 13:30:00")),
                              "--carry-forward", "--levels", "short=fixed:40,1.0;long=fixed:120,0.6",
                              "--level-ratios", "short=0.5,long=0.5")
    assert code == 0
    assert report["records_read"] == 848_964
    # every slot from the first to the last one holding an in-grid point is released, gaps included
    from transforms.loaders import iter_tdrive

    grid, origin, slots = GridBins.tdrive(), epoch("2008-02-02 13:30:00"), []
    for record in iter_tdrive(TDRIVE_DATA):
        try:
            grid(record)
        except ValueError:
            continue
        slots.append(int((epoch(record["time"]) - origin) // 600))
    assert report["slots"] == max(slots) - min(slots) + 1 > 880
    assert report["ledger_violations"] == 0 and report["max_window_usage_ratio"] <= 1
    assert report["reconciles"]
