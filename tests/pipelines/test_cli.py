"""The command lines as a person runs them (subprocesses): strict flags, one-line errors, checks before and
after a run, progress and quiet, the streaming files, the watch loop's hand-over, the ``wevent`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pipelines import replay
from transforms.sinks import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def job(*args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m ARGS`` from the repository root, this worktree first on the path."""
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


def events(path, n: int = 200, users: int = 20, values: int = 2) -> str:
    path.write_text("".join(json.dumps({"user": f"u{i % users}", "time": 1000 + 30 * i, "value": i % values}) + "\n"
                            for i in range(n)))
    return str(path)


def only_warnings(stderr: str) -> bool:
    """``--quiet`` output: nothing but the job's warnings (about the configuration or the data)."""
    return all(line.startswith("warning: ") for line in stderr.splitlines())


def one_error_line(result: subprocess.CompletedProcess, code: int, fragment: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert lines and lines[-1].startswith("error: ") and fragment in lines[-1], lines
    assert "Traceback" not in result.stderr and "apitools" not in result.stderr, result.stderr


# ---------------------------------------------------------------------------------------------- 1: fail loudly
@pytest.mark.parametrize("extra, fragment", [
    (["--requirement", "fixed:2000,1.0"], "window 2000 exceeds the operator's maximum 1000"),
    (["--requirement", "fixed:20,0.5", "--min-epsilon", "1"], "epsilon 0.5 is below the operator's minimum 1.0"),
    (["--requirement", "fixed:20,0.5", "--mechanism", "bd", "--epsilon", "1", "--window", "10"],
     "stricter than bd's"),
    (["--requirement", "fixed:20,0.5", "--input-format", "tdrive"], "none of the first 50 records can be used"),
    (["--requirement", "fixed:20,0.5", "--input-format", "parquet"], "is not a parquet file"),
    (["--requirement", "fixed:20,0.5", "--input-format", "avro"], "is not a avro file"),
    (["--requirement", "fixed:20,0.5", "--input-format", "checkins"], "--poi is required"),
    (["--levels", "a=fixed:20,0.5;b=fixed:9000,1", "--level-ratios", "a=0.5,b=0.5"], "--levels b: can never be used"),
])
def test_configurations_that_cannot_use_any_record_are_refused_before_the_job_starts(tmp_path, capsys, extra,
                                                                                     fragment):
    source = events(tmp_path / "events.jsonl")
    assert replay.run(["--input", source, "--binning", "int:2", "--output", str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_csv_read_as_jsonl_and_a_hidden_binning_are_refused_through_the_command_line(tmp_path):
    csv = tmp_path / "events.csv"
    csv.write_text("user,time,value\n" + "".join(f"u{i},{1000 + i},1\n" for i in range(10)))
    one_error_line(job("pipelines.replay", "--input", str(csv), "--binning", "int:2", "--requirement",
                       "fixed:20,0.5", "--output", str(tmp_path / "out")), 2, "(most common reason: malformed JSON)")
    one_error_line(job("pipelines.replay", "--input", str(csv), "--input-format", "csv", "--requirement",
                       "fixed:20,0.5", "--output", str(tmp_path / "out")), 2, "required: --binning")
    assert not (tmp_path / "out").exists()


def test_a_run_that_rejects_most_records_exits_3_naming_the_biggest_reason(tmp_path):
    source = events(tmp_path / "events.jsonl", values=5)  # values 2, 3, 4 are outside int:2: 60% dead letters
    common = ["pipelines.replay", "--input", source, "--binning", "int:2", "--requirement", "fixed:20,0.5",
              "--insecure-seed", "1"]
    result = job(*common, "--output", str(tmp_path / "out"))
    one_error_line(result, 3, "120 of 200 records (60.0%) were rejected")
    assert "above --max-rejected-fraction 0.5; biggest reason (120 records): value " in result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["dead_letters"] == 120 and report["reconciles"]  # the outputs are still all there
    assert job(*common, "--output", str(tmp_path / "ok"), "--max-rejected-fraction", "0.6").returncode == 0


# ---------------------------------------------------------------------------------------------- 2: strict flags
def test_unknown_flags_exit_2_with_a_suggestion_among_the_jobs_own_flags(tmp_path):
    source = events(tmp_path / "events.jsonl")
    common = ["--input", source, "--binning", "int:2", "--requirement", "fixed:20,0.5", "--output",
              str(tmp_path / "out")]
    result = job("pipelines.replay", *common, "--epsilonn", "0.5")
    one_error_line(result, 2, "unknown flag --epsilonn (did you mean --epsilon")
    assert "--region" not in result.stderr  # Beam's flags are not suggested
    one_error_line(job("pipelines.streaming", "--demo", "--requirement", "fixed:6,2.0", "--output",
                       str(tmp_path / "s"), "--max-slot", "3"), 2, "did you mean --max-slots")
    for flags, fragment in [(["--field", "user"], "--field user: expected NAME=FIELD"),
                            (["--field", "foo=bar"], "--field foo=bar: unknown name 'foo'"),
                            (["--runner", "BogusRunner"], "--runner BogusRunner: Unexpected pipeline runner"),
                            (["--slot-seconds", "ten"], "--slot-seconds: invalid float value: 'ten'")]:
        assert replay.run([*common, *flags]) == 2
    one_error_line(job("pipelines.replay", *common[:-1], source), 2, "is a file; give a directory")
    assert not (tmp_path / "out").exists()
    # a Beam option passes through to Beam
    assert job("pipelines.replay", *common, "--direct_num_workers", "1", "--quiet").returncode == 0


def test_help_shows_the_defaults(tmp_path):
    for module in ("pipelines.replay", "pipelines.streaming"):
        result = job(module, "--help")
        assert result.returncode == 0 and "default: 600.0" in result.stdout and "--max-rejected-fraction" in \
            result.stdout, result.stdout


def test_csv_inputs_and_requirement_files_use_their_header_rows(tmp_path):
    csv = tmp_path / "events.csv"
    csv.write_text("user,time,value\n" + "".join(f"u{i % 10},{1000 + 60 * i},{i % 2}\n" for i in range(100)))
    requirements = tmp_path / "requirements.csv"
    requirements.write_text("user,time,w,epsilon\n" + "".join(f"u{i},1000,5,1.0\n" for i in range(10)))
    result = job("pipelines.replay", "--input", str(csv), "--input-format", "csv", "--binning", "int:2",
                 "--requirements-file", str(requirements), "--output", str(tmp_path / "out"), "--quiet")
    assert result.returncode == 0 and only_warnings(result.stderr), result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["records_read"], report["records_used"], report["dead_letters"]) == (110, 110, 0)
    bad = tmp_path / "bad.csv"
    bad.write_text("who,when,what\nu1,1,0\n")
    one_error_line(job("pipelines.replay", "--input", str(bad), "--input-format", "csv", "--binning", "int:2",
                       "--requirement", "fixed:5,1.0", "--output", str(tmp_path / "bad")), 2,
                   "has no header row naming time, user, value")


def test_replay_and_streaming_share_one_rule_for_requirements(tmp_path):
    source = events(tmp_path / "events.jsonl")
    rule = "say whose requirements apply: --requirement"
    one_error_line(job("pipelines.replay", "--input", source, "--binning", "int:2", "--output",
                       str(tmp_path / "r")), 2, rule)
    one_error_line(job("pipelines.streaming", "--demo", "--output", str(tmp_path / "s")), 2, rule)
    incoming = tmp_path / "in"
    incoming.mkdir()
    one_error_line(job("pipelines.streaming", "--watch", str(incoming), "--binning", "int:2", "--output",
                       str(tmp_path / "w")), 2, rule)


# ---------------------------------------------------------------------------------------------- 4: progress, quiet
def test_progress_lines_and_a_one_line_summary_on_stderr_and_nothing_with_quiet(tmp_path):
    source = events(tmp_path / "events.jsonl", n=2000, users=50)
    common = ["pipelines.replay", "--input", source, "--binning", "int:2", "--requirement", "fixed:20,0.5"]
    result = job(*common, "--output", str(tmp_path / "out"), env={"WEVENT_PROGRESS_SECONDS": "0.05"})
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert any(line.startswith("replaying ") for line in lines) and lines[-1].startswith("replay done in ")
    assert "2,000 records read = 2,000 used + 0 duplicates + 0 late + 0 dead letters" in lines[-1]
    progress = [line for line in lines if line.startswith("replay: ")]
    assert progress and all("records read (" in line or "s elapsed" in line for line in progress), lines
    assert "apitools" not in result.stderr and result.stdout == ""
    quiet = job(*common, "--output", str(tmp_path / "quiet"), "--quiet", "--direct_num_workers", "2",
                "--direct_running_mode", "multi_processing", env={"WEVENT_PROGRESS_SECONDS": "0.05"})
    assert quiet.returncode == 0 and quiet.stdout == "", quiet.stderr[-2000:]
    assert only_warnings(quiet.stderr) and "no --start/--end" in quiet.stderr  # no progress, no worker lines


def test_streaming_demo_files_are_named_by_slot_start_and_hold_their_own_slot(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "demo"
    result = job("pipelines.streaming", "--demo", "--demo-taxis", "10", "--max-slots", "6", "--requirement",
                 "fixed:6,2.0", "--insecure-seed", "3", "--output", str(out), env={"TMPDIR": str(scratch)})
    assert result.returncode == 0, result.stderr
    done = [line for line in result.stderr.splitlines() if line.startswith("stream done in ")]
    files = sorted(p for p in os.listdir(out) if p.startswith("releases-"))
    assert len(files) >= 6
    assert len(done) == 1 and f"{len(files)} slots released" in done[0], done  # was '0 slots released'
    # (a summary that now counts the slots also gives the honest 'none of the N slots was fresh' warning after it)
    from datetime import datetime, timezone

    for name in files:
        (release,) = read_records(str(out / name), "jsonl")
        start = datetime.fromtimestamp(release["slot_start"], tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert name == f"releases-{start}.jsonl"
    assert not [p for p in os.listdir(out) if p.endswith(".part")]
    assert os.listdir(scratch) == [], os.listdir(scratch)  # no temp folder left behind


# ---------------------------------------------------------------------------------------------- 5: hand-over
@pytest.mark.slow
def test_watch_loop_reads_every_record_of_a_file_written_in_two_flushes_seconds_apart(tmp_path):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    out = tmp_path / "live"
    command = [sys.executable, "-m", "pipelines.streaming", "--watch", str(incoming), "--binning", "int:2",
               "--slot-seconds", "6", "--max-slots", "2", "--poll-seconds", "0.3", "--settle-seconds", "4.5",
               "--allowed-lateness", "60", "--requirement", "fixed:3,4.0", "--output", str(out)]
    watcher = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        rows = [json.dumps({"user": f"u{i}", "time": time.time(), "value": i % 2}) + "\n" for i in range(100)]
        with open(incoming / "batch.jsonl", "w") as f:  # a producer that ignores the .part convention
            f.writelines(rows[:50])
            f.flush()
            time.sleep(3)
            f.writelines(rows[50:])
        _, stderr = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, stderr
    report = json.loads((out / "report.json").read_text())
    assert report["records_read"] == 100 and report["records_used"] == 100 and report["late"] == 0, report
    assert "watch done in" in stderr.strip().splitlines()[-1]


# ---------------------------------------------------------------------------------------------- 3: one command
def test_the_wevent_command_dispatches_to_every_job(tmp_path):
    listing = job("pipelines.main", "--help")
    assert listing.returncode == 0 and all(name in listing.stdout for name in ("replay", "stream", "evaluate",
                                                                              "audit", "run"))
    one_error_line(job("pipelines.main", "replya"), 2, "unknown subcommand 'replya' (did you mean replay?)")
    source = events(tmp_path / "events.jsonl")
    result = job("pipelines.main", "replay", "--input", source, "--binning", "int:2", "--requirement",
                 "fixed:20,0.5", "--output", str(tmp_path / "out"), "--quiet")
    assert result.returncode == 0 and json.loads((tmp_path / "out" / "report.json").read_text())["records_read"] == 200
    help_text = job("pipelines.main", "stream", "--help").stdout
    assert "--settle-seconds" in help_text and "(default: 5.0)" in help_text


def test_setup_installs_the_wevent_console_command_and_the_type_markers():
    import runpy
    from unittest import mock

    with mock.patch("setuptools.setup") as setup:
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            runpy.run_path(os.path.join(ROOT, "setup.py"))
        finally:
            os.chdir(cwd)
    kwargs = setup.call_args.kwargs
    assert "wevent = pipelines.main:main" in kwargs["entry_points"]["console_scripts"]
    assert any(r.startswith("mypy") for r in kwargs["extras_require"]["test"])
    assert all("py.typed" in kwargs["package_data"][p] for p in ("transforms", "pipelines"))
    assert all(os.path.exists(os.path.join(ROOT, p, "py.typed")) for p in ("transforms", "pipelines"))


# ---------------------------------------------------------------------------------------------- 7: fresh slots
def test_the_error_model_warns_before_a_run_that_cannot_publish_fresh_and_the_run_says_so_in_one_line(tmp_path):
    sparse = tmp_path / "sparse.jsonl"  # three users per 10-minute slot over 100 bins
    sparse.write_text("".join(json.dumps({"user": f"u{i % 3}", "time": 600 * (i // 3) + i % 3, "value": i % 100})
                              + "\n" for i in range(300)))
    result = job("pipelines.replay", "--input", str(sparse), "--binning", "int:100", "--requirement", "fixed:10,1.0",
                 "--insecure-seed", "2", "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    before = [line for line in lines if line.startswith("warning: the error model predicts no fresh slot")]
    after = [line for line in lines if line.startswith("warning: none of the 100 slots released was fresh")]
    assert len(before) == 1 and "has 3 users, a fresh release needs about 140" in before[0], lines
    assert len(after) == 1 and "use fewer bins" in after[0], lines
    assert json.loads((tmp_path / "out" / "report.json").read_text())["fresh"] == 0
    # the power check: a busy input is neither warned about nor reported as never fresh
    busy = events(tmp_path / "busy.jsonl", n=2000, users=200)
    ok = job("pipelines.replay", "--input", busy, "--binning", "int:2", "--requirement", "fixed:10,1.0",
             "--insecure-seed", "2", "--output", str(tmp_path / "busy"))
    assert ok.returncode == 0 and "predicts no fresh" not in ok.stderr and "was fresh" not in ok.stderr, ok.stderr
    assert json.loads((tmp_path / "busy" / "report.json").read_text())["fresh"] > 0


def test_the_plot_has_a_title_a_wall_clock_axis_units_and_a_legend(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    import matplotlib.pyplot as plt

    from pipelines.plots import plot_released_vs_true

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    utility = {"released": [[1, 2], [3, 1], [2, 2]], "true": [[1, 3], [2, 2], [2, 1]], "slots": [0, 1, 2]}
    png = plot_released_vs_true(utility, 600, 1_201_910_400, "pbd")
    (fig,) = figures
    axes = fig.axes
    assert png.startswith(b"\x89PNG")
    assert "busiest bins (pbd)" in fig._suptitle.get_text()
    assert all("users per slot" in ax.get_ylabel() for ax in axes) and "UTC" in axes[-1].get_xlabel()
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["true (not published)", "released (pbd)"]
    import matplotlib.dates as mdates

    assert mdates.num2date(axes[-1].get_xlim()[0]).year == 2008  # epoch seconds shown as dates


def test_every_input_is_checked_not_only_the_first(tmp_path, capsys):
    good = events(tmp_path / "good.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("user,time,value\nu1,1000,1\n")  # a CSV named .jsonl
    assert replay.run(["--input", good, "--input", str(bad), "--binning", "int:2", "--requirement", "fixed:20,0.5",
                       "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--input {bad}: none of the first 2 records" in err[0], err


def test_a_lifetime_budget_is_refused_by_a_windowed_mechanism_before_the_job_starts(tmp_path):
    """``--requirement lifetime:E`` parses, and every mechanism here takes windowed requirements: one line."""
    source = events(tmp_path / "events.jsonl")
    one_error_line(job("pipelines.replay", "--input", source, "--binning", "int:2", "--requirement", "lifetime:2",
                       "--output", str(tmp_path / "r")), 2,
                   "pbd takes windowed requirements (w-event), not a lifetime budget")
    one_error_line(job("pipelines.replay", "--input", source, "--binning", "int:2", "--requirement", "lifetime:2,3",
                       "--output", str(tmp_path / "r")), 2, "lifetime:E")
    assert not (tmp_path / "r").exists()
