"""``python -m pipelines.evaluate --suite ldp-ids``: the LDP-IDS experiments (spec ``ldp_ids.md`` §8) in-process,
without Beam.

Runs every experiment of :data:`~pipelines.evaluation.ldp.EXPERIMENTS` (or ``--experiments``) over the
synthetic streams (``--users`` n, ``--slots`` T; Table 2 at ``--table2-users``) and the real ones found under
``--data-dir`` (skipped, saying why, when absent), with ``--repeats`` repeats; writes ``results.csv`` and
``summary.md`` (and ``run.json``, the run's command and wall time) to ``--output`` and, with ``--report PATH.md``,
the same document there, headed by its command, with its figures (:mod:`pipelines.evaluation.ldp_plots`) beside it.  ``--from-csv`` renders them again from a run's results.csv (with
its run.json beside it) without running.
Exit code 1 (after writing) when a ledger saw a violation; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from pipelines.cli import parse_flags
from pipelines.evaluation.arguments import PARTIAL_CSV, RUN_JSON, ArgumentError, checked_names, evaluation_parser
from pipelines.evaluation.interrupts import run_stopping_cleanly
from pipelines.evaluation.experiment import run_labelled, write_csv
from pipelines.evaluation.ldp import (ADAPTIVE, ALL_DATASETS, BETAS, CON_HIGH, CON_SIGMA, COLUMNS,
                                      DEFAULT_BETA, DEFAULT_EPSILON, DEFAULT_FLUCTUATION, DEFAULT_WINDOW, EPSILONS,
                                      EXPERIMENTS, EXTENSION_WINDOW, EXTENSIONS, FLUCTUATIONS, LOCAL_METHODS,
                                      MEAN_EXPERIMENTS, PAPER_METHODS, REAL, SYNTHETIC, USER_FACTORS, WINDOWS, LdpTask,
                                      base_dataset, bins_of, build_method, execute, mean_version, read_csv)
from pipelines.evaluation.ldp_data import LdpStream, load_stream
from pipelines.evaluation.ldp_metrics import REDUCTIONS
from pipelines.evaluation.ldp_paper import TABLE2_SETTINGS
from pipelines.evaluation.ldp_plots import write_plots
from pipelines.evaluation.ldp_report import document
from pipelines.evaluation.report import command_line, git_commit, run_record
from pipelines.evaluation_data import DEFAULT_DATA_DIR, DataUnavailable

SUITE = "ldp-ids"


def parse_args(argv) -> argparse.Namespace:
    parser = evaluation_parser(f"wevent evaluate --suite {SUITE}", __doc__.split("\n\n")[0])
    parser.add_argument("--experiments", default=",".join(EXPERIMENTS), help=f"comma list of {', '.join(EXPERIMENTS)}")
    parser.add_argument("--datasets", default=",".join(ALL_DATASETS),
                        help=f"comma list of {', '.join(ALL_DATASETS)}")
    parser.add_argument("--methods", default=",".join(PAPER_METHODS),
                        help=f"comma list of registered local methods ({', '.join(LOCAL_METHODS)}); the extensions "
                             "experiment runs the registered LB-/LP- adaptations besides")
    parser.add_argument("--users", type=int, default=10_000, help="synthetic n of the sweeps")
    parser.add_argument("--slots", type=int, default=400, help="synthetic T of the sweeps (the paper: 800)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--table2-users", type=int, default=200_000, help="synthetic n of Table 2 (the paper's)")
    parser.add_argument("--table2-slots", type=int, default=800, help="synthetic T of Table 2 (the paper's)")
    parser.add_argument("--table2-repeats", type=int, default=5,
                        help="repeats of Table 2's adaptive methods (LBU, LSP, LPU send data-independent bits: once)")
    parser.add_argument("--con-sigma", type=float, default=CON_SIGMA,
                        help="σ of the -Con streams' values N(p_t, σ²) (the paper prints 10: spec §8.1)")
    parser.add_argument("--con-high", type=float, default=CON_HIGH,
                        help="the -Con streams' declared domain is [0, this]; values outside are clipped")
    parser.add_argument("--exchangeable", action="store_true",
                        help="run the synthetic binary streams (lns, sin, log) from their counts alone: each sample's "
                             "true counts drawn hypergeometrically (spec §3.5), no user's value built (the same law)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of data and (insecure) noise")
    parser.add_argument("--mre-floor", type=float, default=None, help="the MRE's sanity bound (default 1/n)")
    parser.add_argument("--reduction", choices=REDUCTIONS, default=None,
                        help="event monitoring's statistic (default: 'one' for binary data, 'index', the mean "
                             "category index, for real data)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", default="evaluation-ldp", help="output directory (created if missing)")
    parser.add_argument("--report", default=None, metavar="PATH.md", help="also write the results document there")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where the real datasets are (read-only)")
    parser.add_argument("--real-users", type=int, default=None, help="cap the users of the real streams")
    parser.add_argument("--real-slots", type=int, default=None, help="cap the slots of the real streams")
    parser.add_argument("--from-csv", default=None, metavar="RESULTS.csv", help="render from a run's results.csv")
    parser.add_argument("--quiet", action="store_true")
    args = parse_flags(parser, argv)
    args.experiments = checked_names(args.experiments, list(EXPERIMENTS), "experiment")
    args.datasets = checked_names(args.datasets, ALL_DATASETS, "dataset")
    args.methods = checked_names(args.methods, LOCAL_METHODS, "method")
    for name in ("users", "slots", "repeats", "table2_users", "table2_slots", "table2_repeats", "workers"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("real_users", "real_slots"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ArgumentError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.seed < 0:
        raise ArgumentError(f"--seed must be >= 0, got {args.seed}")
    if not (args.con_sigma >= 0 and args.con_high > 0):
        raise ArgumentError(f"--con-sigma must be >= 0 and --con-high > 0, got {args.con_sigma} and {args.con_high}")
    if args.mre_floor is not None and not args.mre_floor > 0:
        raise ArgumentError(f"--mre-floor must be > 0, got {args.mre_floor}")
    if args.report is not None and not args.report.endswith(".md"):
        raise ArgumentError(f"--report must name a .md file, got {args.report!r}")
    if args.from_csv is not None and not os.path.isfile(args.from_csv):
        raise ArgumentError(f"--from-csv {args.from_csv!r} does not exist")
    return args


def load_streams(args) -> tuple[dict[str, LdpStream], dict[str, str]]:
    """The real streams asked for, and why any is skipped."""
    streams, skipped = {}, {}
    wanted = {d for name in args.experiments for d in EXPERIMENTS[name].datasets}
    for dataset in (d for d in args.datasets if d in REAL and d in wanted):
        started = time.perf_counter()
        try:
            streams[dataset] = load_stream(args.data_dir, dataset, args.real_users, args.real_slots)
        except DataUnavailable as reason:
            skipped[dataset] = str(reason)
            continue
        if not args.quiet:
            s = streams[dataset]
            print(f"[ldp-ids] {dataset}: {s.users:,} users x {s.slots:,} slots, d = {s.bins} "
                  f"({time.perf_counter() - started:.0f} s to read)", file=sys.stderr)
    return streams, skipped


def _points(experiment: str, dataset: str, args) -> list[tuple[float, int, float, int, float | None]]:
    """(ε, w, β, n, fluctuation) of every point of ``experiment`` on ``dataset``."""
    n, e, w, b = args.users, DEFAULT_EPSILON, DEFAULT_WINDOW, DEFAULT_BETA
    if experiment == "epsilon":
        return [(x, w, b, n, None) for x in EPSILONS]
    if experiment == "window":
        return [(e, x, b, n, None) for x in WINDOWS]
    if experiment == "beta":
        return [(e, w, x, n, None) for x in BETAS]
    if experiment == "users":
        return [(e, w, b, max(1, int(n * f)), None) for f in USER_FACTORS]
    if experiment in ("fluctuation", "mean"):
        base = base_dataset(dataset)
        return [(e, w, b, n, None if x == DEFAULT_FLUCTUATION[base] else x) for x in FLUCTUATIONS[base]]
    if experiment == "mean-epsilon":
        return [(x, w, b, n, None) for x in EPSILONS]
    if experiment == "table2":
        return [(x, y, b, args.table2_users, None) for x, y in TABLE2_SETTINGS]
    return [(e, EXTENSION_WINDOW, b, n, None)]


def _methods(experiment: str, args) -> list[str]:
    if experiment == "beta":
        return [m for m in args.methods if m in ADAPTIVE]
    if experiment == "extensions":
        return list(EXTENSIONS) + [m for m in ("lba", "lpa") if EXTENSIONS]
    if experiment in MEAN_EXPERIMENTS:
        return list(dict.fromkeys(m for m in map(mean_version, args.methods) if m is not None))
    return args.methods


def plan(args, streams: dict[str, LdpStream]) -> list[tuple[str, LdpTask]]:
    """Every (experiment, task) to report; a task shared by experiments runs once."""
    runs = []
    for experiment in args.experiments:
        for dataset in EXPERIMENTS[experiment].datasets:
            if dataset not in args.datasets or (dataset in REAL and dataset not in streams):
                continue
            for method in _methods(experiment, args):
                repeats = args.repeats if experiment != "table2" else \
                    (args.table2_repeats if method in ADAPTIVE else 1)
                for epsilon, window, beta, users, fluctuation in _points(experiment, dataset, args):
                    if dataset in REAL:
                        users, slots = streams[dataset].users, streams[dataset].slots
                    else:
                        slots = args.table2_slots if experiment == "table2" else args.slots
                    for repeat in range(repeats):
                        runs.append((experiment, LdpTask(dataset, method, epsilon, window, beta, users, slots, repeat,
                                                         args.seed, fluctuation, args.mre_floor, args.reduction,
                                                         args.con_sigma, args.con_high,
                                                         args.exchangeable and dataset in SYNTHETIC)))
    return runs


def check_methods(runs: list[tuple[str, LdpTask]], streams: dict[str, LdpStream]) -> None:
    """Build every distinct method of the plan once, so that a setting a method refuses (a per-report budget
    above its limit, ε too small to split over w, ...) fails in one line before anything runs."""
    for method, epsilon, window, beta, dataset in {(t.method, t.epsilon, t.window, t.beta, t.dataset)
                                                   for _, t in runs}:
        task = LdpTask(dataset, method, epsilon, window, beta, 1, 1, 0, 0)
        try:
            build_method(task, bins_of(dataset, streams))
        except ValueError as error:
            raise ValueError(f"{method} at ε = {epsilon}, w = {window}, β = {beta}: {error}") from None


def _save_record(folder: str, record: dict) -> None:
    with open(os.path.join(folder, RUN_JSON), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)


def main(argv: list[str]) -> int:
    """Run the LDP-IDS suite (or render it ``--from-csv``); the process exit code."""
    return run_stopping_cleanly(argv, parse_args, _evaluate, PARTIAL_CSV, git_commit)


def _evaluate(args, argv: list[str], started: float, commit: str) -> int:
    try:
        streams, skipped = load_streams(args)
    except ArgumentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for reason in skipped.values():
        print(f"[ldp-ids] skipping {reason}", file=sys.stderr)
    runs = plan(args, streams)
    if not runs:
        print("error: nothing to run" + (": " + "; ".join(skipped.values()) if skipped else ""), file=sys.stderr)
        return 2
    try:
        check_methods(runs, streams)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    os.makedirs(args.output, exist_ok=True)
    if args.from_csv is not None:
        rows = read_csv(args.from_csv)
        with open(os.path.join(os.path.dirname(args.from_csv), RUN_JSON), encoding="utf-8") as handle:
            record = json.load(handle)
    else:
        if not args.quiet:
            print(f"[ldp-ids] {len(set(task for _, task in runs))} runs ({len(runs)} rows) on {args.workers} "
                  "workers", file=sys.stderr)
        command = command_line(["--suite", SUITE] + list(argv))
        _save_record(args.output, {**run_record(command, commit, args.workers, 0.0), "wall_seconds": None})
        rows = run_labelled(runs, os.path.join(args.output, PARTIAL_CSV), COLUMNS, "experiment",
                            lambda tasks, keep: execute(tasks, args.workers, args.quiet, streams, on_result=keep))
        record = run_record(command, commit, args.workers, time.perf_counter() - started)
        _save_record(args.output, record)
    write_csv(os.path.join(args.output, "results.csv"), rows, COLUMNS)
    plots = write_plots(rows, args.output)
    with open(os.path.join(args.output, "summary.md"), "w", encoding="utf-8") as handle:
        handle.write(document(rows, args, streams, skipped, record, plots))
    if args.report is not None:
        folder = args.report.removesuffix(".md")  # docs/results_ldp_ids.md: its figures in docs/results_ldp_ids/
        plots = write_plots(rows, folder) if plots else plots
        with open(args.report, "w", encoding="utf-8") as handle:
            handle.write(document(rows, args, streams, skipped, record, plots, os.path.basename(folder) + "/"))
    violations = sum(int(r["ledger_violations"]) for r in rows)
    if violations:
        print(f"WARNING: PRIVACY VIOLATION: the ledgers saw {violations} violations", file=sys.stderr)
        return 1
    return 0
