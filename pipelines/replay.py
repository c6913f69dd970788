"""Batch replay of historical logs through the private release graph.

    python -m pipelines.replay --input 'logs/*.jsonl' --binning int:100 --slot-seconds 600 \\
        --mechanism pbd --requirement fixed:120,0.6 --output out/

Reads event files (JSONL, CSV, Avro, Parquet), T-Drive per-taxi logs (a
directory or .tar/.tar.xz) or check-in logs, maps values to bins, runs
``PrivateStreamHistogram`` and writes into ``--output``: releases, the
per-user ledger summary (usage), violations, dead letters (``--format``
jsonl/avro/parquet), with ``--ledger-detail`` every charge, and
``report.json`` with where every record went, the slots by kind and the
ledger's verdict (``pipelines.report``); with ``--evaluate``, and only then,
the utility against the true histograms (numeric: the true slot means) goes to
``OUTPUT/evaluation/`` (NOT private).  ``--start``/``--end`` fix the released slots
(``transforms.release_range``); without them they follow the data, and the
job warns.  ``--checkpoint-dir`` keeps the release state at the end (and
every ``--checkpoint-every`` slots); a later replay continues it with
``--resume-from`` (docs/operations.md).  A bad configuration stops before the pipeline starts with one
line naming the problem and exit code 2.  Extra arguments go to Beam
(``--runner``, ``--project``, ...); the default runner is FnApiRunner.
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import sys
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions

from pipelines import cli, logs, report_html
from pipelines.cli import ConfigError
from pipelines.job_report import job_report, output_counts, run_warnings, write_job_report
from pipelines.job_report import ACCOUNTING_PREFIX
from pipelines.report import (EVALUATION_DIR, EVALUATION_FILES, CountRead, NumericUtility, Utility, WriteAccounting,
                              evaluation_dir, per_user_evaluation_rows, write_evaluation)
from transforms.binning import binner_from_spec
from transforms.checkpoint import acknowledge, checkpoint_files, load_for_resume
from transforms.sinks import WriteCheckpoints
from transforms.declarations import RequirementPolicy
from transforms.lines import ReadLines
from transforms.mechanisms import (MECHANISMS)
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS
from transforms.mechanisms.numeric import server
from transforms.numeric_clients import (CLIENT_METHODS, PrivateNumericClients, SmoothReleases, holds_clients_only,
                                        write_clients_checkpoint)
from transforms.numeric_events import OUT_OF_RANGE_POLICIES, NumericDomain, ValueToGrid, clipped_count
from transforms.parse import ParseConfig, ParseEvents
from transforms.private_histogram import PrivateStreamHistogram
from transforms.release_range import RANGE_FROM_DATA_WARNING, parse_range, range_report
from transforms.sinks import FORMATS, WriteRecords

_LOGGER = logging.getLogger("pipelines.replay")
INPUT_FORMATS = ("jsonl", "csv", "avro", "parquet", "tdrive", "checkins")


@dataclass(frozen=True)
class ReplayConfig:
    """Everything a replay needs, validated before the pipeline is built."""

    inputs: tuple
    input_format: str
    output: str
    mechanism: str
    mechanism_params: dict
    slot_seconds: float
    origin: float
    allowed_lateness: float
    parse: ParseConfig
    policy: RequirementPolicy
    requirements_files: tuple = ()
    poi: str | None = None
    output_format: str = "jsonl"
    ledger_detail: bool = False
    insecure_seed: int | None = None
    evaluate: bool = False  # utility against the TRUE histograms into OUTPUT/evaluation/: NOT private
    plot: bool = False
    release_range: tuple | None = None  # (start, end) epoch seconds: the released slots; None: the data's
    resume_from: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 100
    beam_args: list = field(default_factory=list)
    requirements_parse: ParseConfig | None = None
    requirements_csv: tuple = ()
    csv_header: tuple = ()
    max_rejected_fraction: float = 0.5
    numeric: NumericDomain | None = None  # --domain: numeric events for the numeric mechanisms (numeric_events)
    per_user_clients: bool = False  # the clients in the per-user stage (transforms.numeric_clients)
    sma: tuple | None = None  # --sma K --sma-mode M: figures.sma on every numeric release (spec 3.5)
    accounting: tuple = ("strict", False)  # --sampling-accounting, --not-w-event-private (the per-user stage)
    strict: bool = False  # --strict: an empty input or a user excluded by a refused declaration exits 3


def _inputs(patterns: list[str]) -> tuple:
    if not patterns:
        raise ConfigError("no --input given")
    for pattern in patterns:
        matches = glob.glob(pattern)
        if not matches:
            raise ConfigError(f"input {pattern!r} matches no readable file")
        for path in matches:
            if not os.access(path, os.R_OK):
                raise ConfigError(f"input {path!r} is not readable")
    return tuple(patterns)


def build_config(argv=None) -> ReplayConfig:
    """Parse and validate the command line; raises ConfigError with one line."""
    args, beam_args = cli.strict_parse(parser(), argv)
    cli.check_output(args.output)
    if args.input_format == "checkins":
        cli.needs_value(args, "--poi", "check-ins name POIs; their coordinates come from the POI file")
    numeric = numeric_domain(args)
    try:
        binner = binner_from_spec(args.binning) if numeric is None else None
    except ValueError as error:
        raise ConfigError(f"--binning: {error}") from None
    bins = 1 if numeric is not None else binner.bins
    name, params = cli.mechanism_params(args, bins, sensitivity=args.sensitivity,
                                        **(numeric.mechanism_params() if numeric is not None else {}))
    levels, shares = cli.parse_levels(args.levels or "", args.level_ratios)
    default = cli.parse_requirement(args.requirement) if args.requirement else None
    cli.check_requirement_source(args, "--requirements-file")
    if os.path.exists(args.output) and os.listdir(args.output) and not args.overwrite:
        raise ConfigError(f"output {args.output!r} exists and is not empty (use --overwrite)")
    if args.plot and not args.evaluate:
        raise ConfigError("--plot draws the true counts: it needs --evaluate (whose outputs are not private)")
    fields = cli.parse_fields(args.field)
    file_format = {"jsonl": "jsonl", "csv": "csv"}.get(args.input_format, "record")
    if numeric is not None:
        to_bin, bins = ValueToGrid(numeric, fields.value), numeric.steps + 1  # a value's grid index (numeric_events)
    else:
        to_bin = None if args.binning.startswith("int:") and args.input_format in ("jsonl", "csv", "avro", "parquet") \
            else binner
    inputs = _inputs(args.input)
    requirements_files = _inputs(args.requirements_file) if args.requirements_file else ()
    names = (fields.user, fields.time, fields.value)
    columns = cli.csv_columns("--input", args.csv_columns, inputs, names) if file_format == "csv" else None
    req_format = "csv" if requirements_files and requirements_files[0].endswith(".csv") else "jsonl"
    req_columns = cli.csv_columns("--requirements-file", None, requirements_files, (fields.user, fields.time)) \
        if req_format == "csv" else None
    try:
        parse = ParseConfig(bins=bins, file_format=file_format, fields=fields, to_bin=to_bin,
                            csv_columns=columns)
        requirements_parse = ParseConfig(bins=bins, file_format="record" if req_columns else "jsonl",
                                         fields=fields) if requirements_files else None
        config = ReplayConfig(
            inputs=inputs, input_format=args.input_format, output=args.output, mechanism=name,
            mechanism_params=params, slot_seconds=args.slot_seconds, origin=args.origin,
            allowed_lateness=args.allowed_lateness, parse=parse,
            policy=RequirementPolicy(levels, default, args.min_epsilon, args.max_epsilon, args.max_window,
                                     level_shares=tuple(shares)),  # a default only: a user's declaration wins
            requirements_files=requirements_files, poi=args.poi, output_format=args.format,
            ledger_detail=args.ledger_detail, insecure_seed=args.insecure_seed, evaluate=args.evaluate,
            plot=args.plot, release_range=parse_range(args.start, args.end), resume_from=args.resume_from,
            checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every, beam_args=beam_args,
            requirements_parse=requirements_parse, requirements_csv=req_columns or (),
            csv_header=columns or (),
            max_rejected_fraction=args.max_rejected_fraction, numeric=numeric,
            per_user_clients=check_per_user_clients(args, numeric), sma=check_sma(args, numeric),
            accounting=(args.sampling_accounting, args.not_w_event_private), strict=args.strict)
        if args.resume_from and not config.per_user_clients and holds_clients_only(args.resume_from):
            raise ConfigError(f"--resume-from {args.resume_from}: written with --per-user-clients; resume with it")
        transform = histogram(config)  # builds and validates the mechanism and the slot clock
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(cli.flag_names(str(error))) from None
    cli.check_config(config, transform)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError("--plot needs the plot extra: pip install -e .[plot]") from None
    return config


def numeric_domain(args) -> NumericDomain | None:
    """``--domain``/``--out-of-range`` as a NumericDomain (None for the histogram mechanisms); one-line errors."""
    numeric = args.mechanism.lower() in NUMERIC_STREAMS
    if args.domain is None:
        if numeric:
            raise ConfigError(f"{args.mechanism} reads numeric values: give --domain LOW,HIGH")
        if args.binning is None:
            raise ConfigError("the following arguments are required: --binning (or --domain LOW,HIGH for a numeric "
                              "mechanism)")
        if args.out_of_range != "dead-letter":
            raise ConfigError("--out-of-range applies to numeric values: it needs --domain")
        return None
    if not numeric:
        raise ConfigError(f"--domain is for the numeric mechanisms ({', '.join(NUMERIC_STREAMS)}), "
                          f"not {args.mechanism}")
    if args.binning is not None:
        raise ConfigError("give --binning (histogram mechanisms) or --domain (numeric ones), not both")
    if any(item.partition("=")[0].strip() in ("low", "high", "grid_bits", "out_of_range") for item in args.param):
        raise ConfigError("the numeric interval comes from --domain and --out-of-range, not --param")
    try:
        return NumericDomain.parse(args.domain, args.out_of_range)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def check_sma(args, numeric: NumericDomain | None) -> tuple | None:
    """``--sma K``/``--sma-mode``: numeric releases only, a size and mode ``server.sma`` takes."""
    if args.sma is None:
        return None
    if numeric is None:
        raise ConfigError("--sma smooths numeric releases: it needs --domain")
    try:
        server.sma([0.0], args.sma, args.sma_mode)
    except ValueError as error:
        raise ConfigError(f"--sma: {error}") from None
    return args.sma, args.sma_mode


def check_per_user_clients(args, numeric: NumericDomain | None) -> bool:
    """``--per-user-clients``: only for the numeric methods (the crowd distribution not with --sma); the paper's
    sampling accounting only with it."""
    if (args.sampling_accounting != "strict" or args.not_w_event_private) and not args.per_user_clients:
        raise ConfigError("--sampling-accounting and --not-w-event-private are for the per-user stage: give "
                          "--per-user-clients (the registered mechanisms take only w-event private settings)")
    if not args.per_user_clients:
        return False
    if numeric is None or args.mechanism.lower() not in CLIENT_METHODS:
        raise ConfigError(f"--per-user-clients runs the clients of {', '.join(CLIENT_METHODS)} (with --domain)")
    crowd = sorted({item.partition("=")[0].strip().replace("-", "_") for item in args.param}
                   & {"crowd_window", "crowd_bins"})
    if crowd and args.sma is not None:
        raise ConfigError(f"--sma: the crowd distribution (--param {crowd[0]}) is a list of fractions per slot; its "
                          "SMA is not defined")
    return True


def parser() -> argparse.ArgumentParser:
    p = cli.job_parser("wevent replay", __doc__.split("\n\n")[0])
    p.add_argument("--input", action="append", default=[], help="file, directory or glob (repeatable)")
    p.add_argument("--input-format", choices=INPUT_FORMATS, default="jsonl", help="how --input is read")
    p.add_argument("--poi", help="check-ins: POI coordinates file (poi<TAB>lat<TAB>lon)")
    p.add_argument("--csv-columns", help="CSV column names, comma-separated (default: the file's header row)")
    p.add_argument("--field", action="append", default=[], help="field mapping, e.g. user=taxi_id (repeatable)")
    p.add_argument("--binning", help="int:D | categories:a,b,c | grid:LON0,LON1,LAT0,LAT1,RxC | tdrive "
                   "(the histogram mechanisms)")
    p.add_argument("--domain", metavar="LOW,HIGH", help="numeric mechanisms (sw-direct, ipp, app, capp, ...): each "
                   "event's value is a number in [LOW, HIGH]")
    p.add_argument("--per-user-clients", action="store_true", help="numeric methods (all of them): each user's "
                   "client runs in the per-user stage, its state in Beam state cells, instead of the users being "
                   "simulated in the release stage")
    p.add_argument("--out-of-range", choices=OUT_OF_RANGE_POLICIES, default="dead-letter",
                   help="with --domain: a value outside [LOW, HIGH] is clipped into it (counted) or a dead letter")
    p.add_argument("--sampling-accounting", choices=("strict", "paper"), default="strict", help="with "
                   "--per-user-clients, pp-s/app-s/capp-s/sampling: the strict n_w (default) or the paper's "
                   "n_w = ceil(w/L), not w-event private on a stream (needs --not-w-event-private; releases marked)")
    p.add_argument("--not-w-event-private", action="store_true", help="accept a configuration that is not w-event "
                   "private (its releases carry figures.w_event_private = 0)")
    p.add_argument("--sma", type=int, metavar="K", help="with --domain: each release also carries figures.sma, the "
                   "simple moving average of K released values of its stream (spec 3.5; post-processing)")
    p.add_argument("--sma-mode", choices=("centered", "trailing"), default="centered", help="--sma: centred (the "
                   "paper) or trailing (the reference code)")
    p.add_argument("--slot-seconds", type=float, default=600.0, help="slot length in seconds")
    p.add_argument("--origin", type=float, default=0.0, help="epoch seconds where slot 0 starts")
    p.add_argument("--allowed-lateness", type=float, default=0.0, help="seconds an event may come after its slot "
                   "ends and still count (later: a late dead letter)")
    p.add_argument("--carry-forward", action="store_true", help="a user's last bin stays in force until a new event")
    p.add_argument("--mechanism", default="pbd", help=", ".join(MECHANISMS))
    p.add_argument("--epsilon", type=float, help="homogeneous mechanisms: epsilon")
    p.add_argument("--window", type=int, help="homogeneous mechanisms: window w")
    p.add_argument("--max-window", type=int, default=1000, help="operator bound: longest declarable window")
    cli.add_mechanism_parameter_option(p)
    p.add_argument("--min-epsilon", type=float, help="operator bound: smallest declarable epsilon")
    p.add_argument("--max-epsilon", type=float, help="operator bound: largest declarable epsilon")
    p.add_argument("--sensitivity", type=int, default=1, help="L1 change of a histogram by one user (1: added or "
                   "removed, 2: replaced)")
    p.add_argument("--requirement", help="one requirement for all: fixed:W,E, dynamic:WB,EB,WF,EF or lifetime:E")
    p.add_argument("--requirements-file", action="append", help="declarations: user, time and w,epsilon or w_b,...")
    p.add_argument("--levels", help="named levels: high=fixed:40,1.0;low=fixed:120,0.6")
    p.add_argument("--level-ratios", help="assign levels by ratio: high=0.5,low=0.5")
    p.add_argument("--format", choices=FORMATS, default="jsonl", help="output file format")
    p.add_argument("--output", required=True, help="directory of the releases, usage, dead letters, violations and "
                   "report.json")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier replay's outputs in --output")
    p.add_argument("--ledger-detail", action="store_true", help="also write every per-user charge")
    p.add_argument("--insecure-seed", type=int, help="seeded noise: reproducible, NOT private (tests/replays only)")
    p.add_argument("--start", help="first instant of the public release range (epoch seconds or ISO 8601; "
                   "naive is UTC): every slot meeting [--start, --end) is released, and no other")
    p.add_argument("--end", help="end of the public release range (exclusive; epoch seconds or ISO 8601)")
    p.add_argument("--evaluate", action="store_true", help="also measure utility against the TRUE histograms "
                   f"(with --domain: the true slot means) into OUTPUT/{EVALUATION_DIR}/ (NOT private: never publish "
                   "it)")
    p.add_argument("--plot", action="store_true", help="with --evaluate: PNG of released vs true counts "
                   "(needs the plot extra)")
    p.add_argument("--resume-from", help="continue the release state of a checkpoint file or directory")
    p.add_argument("--checkpoint-dir", help="write each stream's release state into this directory")
    p.add_argument("--checkpoint-every", type=int, default=100, help="with --checkpoint-dir: slots between "
                   "checkpoints (the state at the end is always written)")
    p.add_argument("--quiet", action="store_true", help="print only warnings and errors: no progress, nothing "
                   "from Beam or its workers")
    cli.add_run_flags(p)
    return p


def finish_replay(config: ReplayConfig, report: dict) -> int:
    """The replay's summary line and checks (ledger violations, rejections, freshness) as its exit code."""
    ext = config.output_format
    needs = cli.fresh_threshold(histogram(config).config.build(), config.policy,
                                [name for name, _ in config.policy.level_shares] if config.policy.level_shares else None)
    return cli.finish("replay", report, config.output, config.max_rejected_fraction,
                      os.path.join(config.output, f"dead_letters-*.{ext}"), ext, needs, strict=config.strict)


def histogram(config: ReplayConfig) -> PrivateStreamHistogram | PrivateNumericClients:
    if config.per_user_clients:
        return PrivateNumericClients(config.mechanism, config.slot_seconds, config.numeric,
                                     mechanism_params={k: v for k, v in config.mechanism_params.items()
                                                       if k not in ("bins", *config.numeric.mechanism_params())},
                                     origin=config.origin, allowed_lateness=config.allowed_lateness,
                                     policy=config.policy, insecure_seed=config.insecure_seed,
                                     ledger_detail=config.ledger_detail, bounded=True,
                                     resume_from=config.resume_from, carry=config.checkpoint_dir is not None,
                                     accounting=config.accounting[0], not_w_event_private=config.accounting[1],
                                     release_range=config.release_range, evaluate=config.evaluate)
    return PrivateStreamHistogram(config.mechanism, config.slot_seconds, 1 if config.numeric else config.parse.bins,
                                  mechanism_params={k: v for k, v in config.mechanism_params.items() if k != "bins"},
                                  origin=config.origin, allowed_lateness=config.allowed_lateness,
                                  policy=config.policy, insecure_seed=config.insecure_seed,
                                  ledger_detail=config.ledger_detail, bounded=True, evaluate=config.evaluate,
                                  release_range=config.release_range, resume_from=config.resume_from,
                                  checkpoint_every=config.checkpoint_every if config.checkpoint_dir else None,
                                  numeric=config.numeric)


def read_raw(pipeline, config: ReplayConfig, label: str, patterns: tuple, input_format: str):
    sources = []
    for i, pattern in enumerate(patterns):
        step = f"{label}{i}"
        if input_format in ("jsonl", "csv"):
            sources.append(pipeline | step >> ReadLines(pattern))  # batches of lines: ParseEvents reads them
        elif input_format == "avro":
            sources.append(pipeline | step >> beam.io.ReadFromAvro(pattern))
        elif input_format == "parquet":
            sources.append(pipeline | step >> beam.io.ReadFromParquet(pattern))
        else:
            from transforms.loaders import ReadCheckins, ReadTDrive

            source = ReadTDrive(pattern) if input_format == "tdrive" else ReadCheckins(pattern, config.poi)
            sources.append(pipeline | step >> source)
    return sources[0] if len(sources) == 1 else tuple(sources) | f"{label}All" >> beam.Flatten()


def build(pipeline, config: ReplayConfig) -> None:
    raw = read_raw(pipeline, config, "Read", config.inputs, config.input_format) | "Progress" >> beam.Map(
        logs.count_read)
    if config.csv_header:
        raw = raw | "DropHeader" >> beam.Map(cli.drop_header, config.csv_header)
    parsed = raw | "Parse" >> ParseEvents(config.parse)
    read_counts = [raw | "CountRead" >> CountRead()]  # report.json's records read, from the job's own outputs
    events = parsed.events
    if config.requirements_files:
        declared = read_raw(pipeline, config, "ReadRequirements", config.requirements_files, "jsonl")
        if config.requirements_csv:
            declared = declared | "RequirementsCsv" >> beam.FlatMap(cli.csv_dicts, config.requirements_csv)
        read_counts.append(declared | "CountDeclared" >> CountRead())
        declared = declared | "ParseRequirements" >> ParseEvents(config.requirements_parse)
        events = (events, declared.events) | "WithDeclarations" >> beam.Flatten()
        parsed_dead = (parsed.dead_letters, declared.dead_letters) | "ParseDead" >> beam.Flatten()
    else:
        parsed_dead = parsed.dead_letters
    transform = histogram(config)
    outputs = events | "Private" >> transform
    out = lambda name: os.path.join(config.output, name)  # noqa: E731
    releases = outputs["releases"]
    if config.sma is not None:
        releases = releases | "SMA" >> SmoothReleases(*config.sma, bounded=True)
    (releases | "ReleaseProgress" >> beam.Map(logs.count_release)
     | "WriteReleases" >> WriteRecords(out("releases"), "release", config.output_format))
    outputs["usage"] | "WriteUsage" >> WriteRecords(out("usage"), "user_usage", config.output_format)
    ((outputs["dead_letters"], parsed_dead) | "AllDead" >> beam.Flatten()
     | "WriteDead" >> WriteRecords(out("dead_letters"), "dead_letter", config.output_format))
    ((outputs["accounting"], *read_counts) | "AllCounts" >> beam.Flatten()
     | "WriteAccounting" >> WriteAccounting(out(ACCOUNTING_PREFIX)))
    outputs["violations"] | "WriteViolations" >> beam.Map(json.dumps) | beam.io.WriteToText(
        out("violations"), file_name_suffix=".jsonl", num_shards=1)
    if config.ledger_detail:
        outputs["ledger_entries"] | "WriteLedger" >> WriteRecords(out("ledger"), "ledger_entry", config.output_format)
    if config.checkpoint_dir and isinstance(transform, PrivateNumericClients):  # every user's client state, one file
        (outputs["carry"] | "AllCarried" >> beam.combiners.ToList()
         | "WriteClientsCheckpoint" >> beam.Map(write_clients_checkpoint, transform.config, config.checkpoint_dir,
                                                transform.resume, beam.pvalue.AsDict(outputs["estimates"])))
    elif config.checkpoint_dir:
        outputs["checkpoints"] | "WriteCheckpoints" >> beam.ParDo(WriteCheckpoints(config.checkpoint_dir))
    if config.evaluate and config.per_user_clients:  # the fresh releases beside their slots' true values
        fresh = (outputs["releases"] | "FreshReleases" >> beam.Filter(lambda r: r["kind"] == "fresh")
                 | "BySlot" >> beam.Map(lambda r: ((r["stream"], r["slot"]), r)))
        outputs["evaluation"] = ({"release": fresh, "truth": outputs["truth"]} | "WithTruth" >> beam.CoGroupByKey()
                                 | "EvaluationRows" >> beam.FlatMap(per_user_evaluation_rows, config.numeric))
    if config.evaluate:  # NOT private: written by the pipeline into OUTPUT/evaluation/, nowhere else
        (outputs["evaluation"] | "Utility" >> beam.CombineGlobally(Utility() if config.numeric is None
                                                                 else NumericUtility(config.numeric))
         | "WriteEvaluation" >> beam.Map(write_evaluation, evaluation_dir(config.output),
                                         {"slot_seconds": config.slot_seconds, "origin": config.origin,
                                          "mechanism": config.mechanism} if config.plot else None))


@cli.stops_cleanly("replay")
def run(argv=None) -> int:
    """Entry point: returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    quiet = "--quiet" in argv
    logs.configure(quiet)
    try:
        config = build_config(argv)
        options = cli.pipeline_options(config.beam_args, quiet)
    except ConfigError as error:
        return cli.fail(str(error))
    remove_previous_outputs(config.output)
    os.makedirs(config.output, exist_ok=True)
    runner = options.view_as(StandardOptions).runner
    pipeline = beam.Pipeline(runner=runner or _fn_api_runner(), options=options)
    build(pipeline, config)
    if config.release_range is None:
        _LOGGER.warning("warning: %s", RANGE_FROM_DATA_WARNING)
    _LOGGER.info("replaying %s with %s into %s", ", ".join(config.inputs), config.mechanism, config.output)
    # stopped before its sinks published: nothing of this run is output (its checkpoints carry its releases)
    cli.on_interrupt(lambda: remove_previous_outputs(config.output), lambda: resume_hint(config))
    with logs.Progress("replay") as progress, logs.quiet_workers(quiet):
        result = pipeline.run()
        result.wait_until_finish()
    with cli.signals_deferred():  # the sinks have published every file: the checkpoints need not carry them
        if config.checkpoint_dir and not config.per_user_clients:
            acknowledge(config.checkpoint_dir, load_for_resume(config.resume_from) if config.resume_from else None)
        cli.on_interrupt(None)
        report = write_report(config, result, progress.seconds)
    report_html.write_after_job(config.output, report_html.public_config(cli.strict_parse(parser(), argv)[0]))
    return finish_replay(config, report)


def resume_hint(config: ReplayConfig) -> str | None:
    """What the line of a stopped replay tells the operator: how to continue it."""
    if not config.checkpoint_dir:
        return None
    if not checkpoint_files(config.checkpoint_dir):
        return f"no checkpoint in {config.checkpoint_dir} yet: run it again as it was"
    return f"continue with --resume-from {config.checkpoint_dir} (same --output, with --overwrite after a kill -9)"


OUTPUT_PATTERNS = ("releases-*", "usage-*", "dead_letters-*", "violations-*", "ledger-*", "report.json",
                   f"{ACCOUNTING_PREFIX}-*", "report.html", "released_vs_true.png",
                   *(os.path.join(EVALUATION_DIR, name) for name in EVALUATION_FILES))


def remove_previous_outputs(directory: str) -> None:
    """With --overwrite, or after an interruption: delete what a replay wrote there (temporary files too), and
    nothing else."""
    cli.remove_temporary_files(directory)
    for pattern in OUTPUT_PATTERNS:
        for path in glob.glob(os.path.join(directory, pattern)):
            os.remove(path)


def _fn_api_runner():
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return FnApiRunner()


def opted_in_report(config: ReplayConfig, max_ratio: float) -> dict:
    """What ``--not-w-event-private`` costs, from the ledger's outputs: the flags that accepted it, the largest
    memory-aware window usage and how many windows over budget the flags accepted (the violations files' records
    marked ``accepted_by``; not counted as ledger violations)."""
    accepted = 0
    for path in glob.glob(os.path.join(config.output, "violations-*.jsonl")):
        with open(path) as f:
            accepted += sum(1 for line in f if line.strip() and "accepted_by" in json.loads(line))
    opt_in = "--sampling-accounting paper --not-w-event-private" if config.accounting[0] == "paper" \
        else "--not-w-event-private"
    return {"opt_in": opt_in, "max_window_usage_ratio": max_ratio, "windows_over_budget": accepted}


def write_report(config: ReplayConfig, result, seconds: float) -> dict:
    """``report.json``: records by fate, slots by kind, the ledger's verdict, the release range, warnings.

    Nothing in it is computed from the true histograms (``--evaluate`` writes those into its own folder).
    Every count is read back from the files the job wrote (``pipelines.report.output_counts``)."""
    counts = output_counts(config.output, config.output_format)
    release_range = histogram(config).config.release_range
    optional = {}
    if config.numeric is not None:
        optional["clipped"] = clipped_count(result)  # used values clipped into --domain (already in records_used)
    if config.per_user_clients and config.accounting[1]:  # an opt-in that is not private says so in its numbers
        optional["not_w_event_private"] = opted_in_report(config, counts["max_window_usage_ratio"])
    if config.evaluate:
        optional["evaluation"] = (f"{EVALUATION_DIR}/ (NOT private: utility against the true "
                                  f"{'histograms' if config.numeric is None else 'slot means'})")
    accounting = counts["accounting"]
    report = job_report("replay", config.mechanism, counts, accounting.get("records_read", 0),
                        accounting.get("records_used", 0), accounting.get("duplicates", 0), seconds,
                        run_warnings(release_range, counts["pairs"]), **range_report(release_range), **optional)
    return write_job_report(config.output, report)


if __name__ == "__main__":
    sys.exit(run())
