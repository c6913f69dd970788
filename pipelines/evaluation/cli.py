"""The evaluation's command line: ``python -m pipelines.evaluation`` (or ``python -m pipelines.evaluate``,
``wevent evaluate``).  Parses and checks the options (a bad one is one ``error:`` line and exit code 2, before
anything runs), reads the real streams, runs the plan (:mod:`pipelines.evaluation.experiment`) or reads it back
``--from-csv``, and writes results.csv, summary.md, the plots and ``--report``.  Exit code 1 (after writing the
outputs) when a ledger saw more than a requirement spent in some window."""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import shutil
import sys
import time

from pipelines import evaluation
from pipelines.cli import ConfigError, parse_flags
from pipelines.evaluation.arguments import (PARTIAL_CSV, RUN_JSON, ArgumentError, checked_names,
                                           evaluation_parser)
from pipelines.evaluation.interrupts import run_stopping_cleanly
from pipelines.evaluation.experiment import (COLUMNS, NOISE_NOTE, Task, execute, plan, read_csv, run_labelled,
                                            write_csv)
from pipelines.evaluation.plots import write_plots
from pipelines.evaluation.report import command_line, document, git_commit, run_record
from pipelines.evaluation.sweeps import (DATASETS, DEFAULT_DATASETS, DEFAULT_DRIFT_EVERY, DEFAULT_REPEATS,
                                         DEFAULT_REPEATS_TEXT, EVENTS, RATIO_SWEEPS, SWEEPS, SYNTHETIC,
                                         takes_ratios)
from pipelines.evaluation_data import (DEFAULT_DATA_DIR, INPUT_FORMATS, REAL_SOURCES, DataUnavailable, EventSource,
                                       EventStream, build_stream)
from transforms.mechanisms import MECHANISMS, TrustModel
from transforms.mechanisms.registry import Family
from transforms.mechanisms.scenarios import SCENARIOS
from transforms.parse import FieldMapping

SUITES = ("pwsm", "ldp-ids")
"""``--suite``: the central papers' experiments (default) or the LDP-IDS ones (:mod:`pipelines.evaluation.ldp_cli`)."""
REGIME_PLOT = "useful_regimes.png"
REGIME_COLUMNS = ["regime", "mechanism", "users", "bins", "slots", "mean_present", "fresh", "amre", "zero_amre",
                  "ajsd", "ledger_violations", "predicted_relative_error", "binning", "slot_seconds", "levels"]


CENTRAL_MECHANISMS = tuple(name for name, cls in MECHANISMS.items()
                           if cls.trust is TrustModel.CENTRAL and Family.of(cls) is not Family.LIFETIME)
"""What this evaluation runs (spec pwsm.md): the trusted-collector w-event mechanisms; the local-DP methods have
their own suite (``--suite ldp-ids``, :mod:`pipelines.evaluation.ldp`), DPI under a lifetime budget its own
benchmark (``benchmarks.dpi_eval``)."""


def _positive(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ArgumentError(f"{what} must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise ArgumentError(f"{what} must be >= 1, got {value}")
    return value


def _repeats(text: str, sweeps: list[str]) -> dict[str, int]:
    """``10`` or ``epsilon=10,window=3,ratio=3`` (a bare number is the default of the sweeps not named)."""
    default, named = DEFAULT_REPEATS, {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, equals, count = item.partition("=")
        if equals:
            name = name.strip().lower()
            if name not in SWEEPS:
                raise ArgumentError(f"--repeats names unknown sweep {name!r}; choose from {', '.join(SWEEPS)}")
            named[name] = _positive(count.strip(), f"--repeats {name}")
        else:
            default = _positive(item, "--repeats")
    if not text.strip():
        raise ArgumentError("--repeats must be >= 1, got ''")
    return {sweep: named.get(sweep, default) for sweep in sweeps}


def parse_args(argv=None) -> argparse.Namespace:
    parser = evaluation_parser("wevent evaluate", evaluation.__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=SUITES, default=SUITES[0],
                        help="pwsm: the central papers' experiments (these options); ldp-ids: the LDP-IDS "
                             "experiments (python -m pipelines.evaluate --suite ldp-ids --help)")
    parser.add_argument("--datasets", default=",".join(DEFAULT_DATASETS),
                        help=f"comma list of {', '.join(DATASETS)} (real ones skipped when their data is absent)")
    parser.add_argument("--mechanisms", default="all",
                        help=f"comma list of {', '.join(CENTRAL_MECHANISMS)} (default all of them: the central "
                             "mechanisms; the local-DP methods run in --suite ldp-ids)")
    parser.add_argument("--sweep", default="epsilon,window,ratio,wratio",
                        help="comma list of epsilon, window, ratio (o users at E = 1.0), wratio (o users at w = 40)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="requirement scenarios of the dynamic mechanisms: redrawn (every slot, the authors' "
                             "code), held (one draw per type), drifting (a new draw every --drift-every slots)")
    parser.add_argument("--drift-every", type=int, default=DEFAULT_DRIFT_EVERY, metavar="K",
                        help="slots between two forward draws in the drifting scenario")
    parser.add_argument("--users", type=int, default=10_000, help="synthetic N; caps the users of real streams")
    parser.add_argument("--slots", type=int, default=10_000, help="synthetic T; caps the slots of real streams")
    parser.add_argument("--repeats", default=DEFAULT_REPEATS_TEXT,
                        help="N, or per sweep: epsilon=10,window=3 (a bare N is the default of the others)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of data, requirements and (insecure) noise")
    parser.add_argument("--segment-reset", type=int, default=None, metavar="K",
                        help="re-create the mechanism every K slots (the authors' code: 250); breaks w-event "
                             "privacy across segments")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (1: in this process)")
    parser.add_argument("--output", default="evaluation", help="output directory (created if missing)")
    parser.add_argument("--report", default=None, metavar="PATH.md",
                        help="also write the results document there, its plots and results.csv in PATH/")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where the real datasets are (read-only)")
    parser.add_argument("--input", action="append", default=[], help="event file or glob: dataset 'events'")
    parser.add_argument("--input-format", choices=INPUT_FORMATS, default="jsonl", help="events: the input's format")
    parser.add_argument("--binning", default=None, help="events: int:D | categories:a,b | grid:... | tdrive")
    parser.add_argument("--slot-seconds", type=float, default=600.0, help="events: slot length")
    parser.add_argument("--poi", help="events in check-in format: POI coordinates file")
    parser.add_argument("--field", action="append", default=[], help="events: field mapping, e.g. user=taxi_id")
    parser.add_argument("--csv-columns", help="events: CSV column names, comma-separated")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots (they take a few seconds)")
    parser.add_argument("--from-csv", default=None, metavar="RESULTS.csv",
                        help="render the outputs from the results.csv of a run with the same options; run nothing")
    parser.add_argument("--regimes", action="store_true",
                        help="also map where each mechanism publishes something useful (error model) and check it on "
                             "T-Drive under the README's and proposed settings (about 2 CPU minutes)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    args = parse_flags(parser, [] if argv is None else argv)
    args.datasets = checked_names(args.datasets, DATASETS, "dataset")
    if args.input and EVENTS not in args.datasets:
        args.datasets.append(EVENTS)
    args.mechanisms = list(CENTRAL_MECHANISMS) if args.mechanisms.strip().lower() == "all" else \
        checked_names(args.mechanisms, list(CENTRAL_MECHANISMS), "mechanism")
    args.sweeps = checked_names(args.sweep, list(SWEEPS), "sweep")
    args.scenarios = checked_names(args.scenarios, list(SCENARIOS), "scenario")
    if args.drift_every < 1:
        raise ArgumentError(f"--drift-every must be >= 1, got {args.drift_every}")
    args.repeats = _repeats(args.repeats, args.sweeps)
    for name in ("users", "slots", "workers"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.seed < 0:
        raise ArgumentError(f"--seed must be >= 0, got {args.seed}")
    if args.segment_reset is not None and args.segment_reset < 1:
        raise ArgumentError(f"--segment-reset must be >= 1, got {args.segment_reset}")
    if set(args.sweeps) <= set(RATIO_SWEEPS) and not any(takes_ratios(m) for m in args.mechanisms):
        raise ArgumentError("the ratio sweeps need a personalized fixed-requirement mechanism (pbd, pba, adaptive)")
    if args.report is not None and not args.report.endswith(".md"):
        raise ArgumentError(f"--report must name a .md file, got {args.report!r}")
    args.events_source = _events_source(args) if EVENTS in args.datasets else None
    if args.from_csv is not None and not os.path.isfile(args.from_csv):
        raise ArgumentError(f"--from-csv {args.from_csv!r} does not exist")
    return args


def _events_source(args) -> EventSource:
    """The ``events`` dataset from the replay-style input options."""
    if not args.input:
        raise ArgumentError("dataset 'events' needs --input")
    if args.binning is None:
        raise ArgumentError("dataset 'events' needs --binning")
    for pattern in args.input:
        if not any(os.path.isfile(path) for path in glob.glob(pattern)):
            raise ArgumentError(f"--input {pattern!r} matches no readable file")
    if args.poi is not None and not os.path.isfile(args.poi):
        raise ArgumentError(f"--poi {args.poi!r} does not exist")
    try:
        fields = FieldMapping(**dict(item.split("=", 1) for item in args.field)) if args.field else FieldMapping()
        source = EventSource(EVENTS, f"{', '.join(args.input)} ({args.input_format}, {args.binning}, "
                             f"{args.slot_seconds:g}-second slots)", tuple(args.input), args.input_format,
                             args.binning, args.slot_seconds, poi=args.poi, fields=fields,
                             csv_columns=tuple(args.csv_columns.split(",")) if args.csv_columns else None)
        source.parse_config()
    except (ValueError, TypeError) as error:
        raise ArgumentError(f"events: {error}") from None
    return source


def load_streams(args) -> tuple[dict[str, EventStream], dict[str, str]]:
    """The real streams asked for, and why any of them is skipped."""
    streams, skipped = {}, {}
    for dataset in args.datasets:
        if dataset in SYNTHETIC:
            continue
        try:
            source = args.events_source if dataset == EVENTS else REAL_SOURCES[dataset](args.data_dir)
        except DataUnavailable as reason:
            skipped[dataset] = str(reason)
            continue
        started = time.perf_counter()
        try:
            streams[dataset] = build_stream(source, max_users=args.users, max_slots=args.slots)
        except ValueError as error:
            raise ArgumentError(str(error)) from None
        if not args.quiet:
            stream = streams[dataset]
            print(f"[evaluate] {dataset}: {stream.users:,} users x {stream.slots:,} slots, d = {stream.bins} "
                  f"({time.perf_counter() - started:.0f} s to read)", file=sys.stderr)
    return streams, skipped


def _suite(argv: list[str]) -> tuple[str, list[str]]:
    """``--suite NAME`` (or ``--suite=NAME``) taken out of ``argv``."""
    for index, item in enumerate(argv):
        if item == "--suite" and index + 1 < len(argv):
            return argv[index + 1], argv[:index] + argv[index + 2:]
        if item.startswith("--suite="):
            return item.partition("=")[2], argv[:index] + argv[index + 1:]
    return SUITES[0], argv


def main(argv: list[str] | None = None) -> int:
    """Run the evaluation (or render it again ``--from-csv``) and write its outputs; the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    suite, argv = _suite(argv)
    if suite == "ldp-ids":
        from pipelines.evaluation.ldp_cli import main as ldp_main
        return ldp_main(argv)
    if suite != SUITES[0]:
        print(f"error: unknown --suite {suite!r}; choose from {', '.join(SUITES)}", file=sys.stderr)
        return 2
    return run_stopping_cleanly(argv, parse_args, _evaluate, PARTIAL_CSV, git_commit)


def _evaluate(args, argv: list[str], started: float, commit: str) -> int:
    try:
        streams, skipped = load_streams(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs = plan(args, streams)
    if not runs:
        print("error: nothing to run: " + "; ".join(skipped.values()), file=sys.stderr)
        return 2
    for reason in skipped.values():
        print(f"[evaluate] skipping {reason}", file=sys.stderr)
    if args.from_csv is not None:
        rows, original = _read_back(args)
    else:
        rows, original = _run(args, runs, streams), None
    datasets = [d for d in args.datasets if any(r["dataset"] == d for r in rows)]
    os.makedirs(args.output, exist_ok=True)
    write_csv(os.path.join(args.output, "results.csv"), rows)
    regimes = _regimes(args) if args.regimes else None
    plots = [] if args.no_plots else write_plots(rows, args, args.output, datasets)
    if regimes is not None and plots is not None and not args.no_plots:
        from pipelines.evaluation.regimes import MAP_EXAMPLES, write_map
        if write_map(os.path.join(args.output, REGIME_PLOT), MAP_EXAMPLES):
            plots.append(REGIME_PLOT)
            regimes["plot"] = REGIME_PLOT
    with open(os.path.join(args.output, "summary.md"), "w", encoding="utf-8") as handle:
        handle.write(document(rows, args, streams, skipped, plots, regimes=regimes))
    if args.report is not None:
        _write_report(args, argv, rows, streams, skipped, plots, regimes, commit, started, original)
    if plots is None and not args.quiet:
        print("[evaluate] plots skipped: matplotlib is not installed (pip install -e .[plot])", file=sys.stderr)
    over = [r for r in rows if r["max_window_usage_ratio"] > 1]
    if over:
        print("!" * 78, file=sys.stderr)
        print(f"WARNING: PRIVACY VIOLATION: {len(over)} run(s) spent more than a user's requirement in some window "
              f"(max window usage ratio up to {max(r['max_window_usage_ratio'] for r in over):.4f}), e.g. "
              f"{over[0]['mechanism']} on {over[0]['dataset']} at E={over[0]['epsilon']}, w={over[0]['window']}",
              file=sys.stderr)
        print("!" * 78, file=sys.stderr)
        return 1
    return 0


def _read_back(args) -> tuple[list[dict], dict | None]:
    """``--from-csv``: the rows of the options' datasets and sweeps, and the run's own record if kept beside."""
    rows = [r for r in read_csv(args.from_csv) if r["dataset"] in args.datasets and r["sweep"] in args.sweeps]
    saved = os.path.join(os.path.dirname(args.from_csv), RUN_JSON)
    if not os.path.isfile(saved):
        return rows, None
    with open(saved, encoding="utf-8") as handle:
        return rows, json.load(handle)


def _run(args, runs: list[tuple[str, Task]], streams: dict[str, EventStream]) -> list[dict]:
    """Every task once, each finished run written at once to ``results.partial.csv``; one row per (sweep, task)."""
    tasks = list(dict.fromkeys(task for _, task in runs))
    if not args.quiet:
        print(f"[evaluate] {len(tasks)} runs ({len(runs)} rows); {NOISE_NOTE}", file=sys.stderr)
    os.makedirs(args.output, exist_ok=True)
    return run_labelled(runs, os.path.join(args.output, PARTIAL_CSV), COLUMNS, "sweep",
                        lambda tasks, keep: execute(tasks, args.workers, args.quiet, streams, on_result=keep))


def _write_report(args, argv: list[str], rows: list[dict], streams: dict[str, EventStream],
                  skipped: dict[str, str], plots: list[str] | None, regimes: dict | None, commit: str,
                  started: float, original: dict | None) -> None:
    """``--report PATH.md``: the document headed by its command, its plots and results.csv in PATH/, and (after
    a run) the run's record in run.json beside the results."""
    folder = args.report[:-len(".md")]
    os.makedirs(folder, exist_ok=True)
    write_csv(os.path.join(folder, "results.csv"), rows)
    for name in (plots or []) + (["regimes.csv"] if regimes and regimes["rows"] else []):
        shutil.copyfile(os.path.join(args.output, name), os.path.join(folder, name))
    wall_seconds = None if args.from_csv else time.perf_counter() - started
    if original is None and wall_seconds is not None:
        original = run_record(command_line(argv), commit, args.workers, wall_seconds)
        for directory in (args.output, folder):
            with open(os.path.join(directory, RUN_JSON), "w", encoding="utf-8") as handle:
                json.dump(original, handle, indent=1)
    with open(args.report, "w", encoding="utf-8") as handle:
        handle.write(document(rows, args, streams, skipped, plots,
                              command=original["command"] if original else command_line(argv),
                              plot_prefix=os.path.basename(folder) + "/", wall_seconds=wall_seconds,
                              commit=commit, regimes=regimes, original=original))


def _regimes(args) -> dict:
    """The T-Drive checks of the useful-regime map: run, or read back beside ``--from-csv``'s results."""
    from pipelines.evaluation.regimes import tdrive_checks
    path = os.path.join(args.output, "regimes.csv")
    if args.from_csv is not None:
        saved = os.path.join(os.path.dirname(args.from_csv), "regimes.csv")
        if not os.path.isfile(saved):
            return {"rows": [], "why": f"{saved} is missing", "plot": None}
        with open(saved, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        for row in rows:
            for name in ("users", "bins", "slots", "fresh", "ledger_violations"):
                row[name] = int(row[name])
            for name in ("mean_present", "amre", "zero_amre", "ajsd", "predicted_relative_error"):
                row[name] = float(row[name])
        why = None
    else:
        if not args.quiet:
            print("[evaluate] useful-regime checks on T-Drive ...", file=sys.stderr)
        rows, why = tdrive_checks(args.data_dir, args.seed)
    if rows:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=REGIME_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return {"rows": rows, "why": why, "plot": None}
