"""Batch replay of recorded client reports (local DP, trust model ``local_client``) through a Beam graph.

    python -m pipelines.client_replay --input 'reports/*.jsonl' --users users.txt --requirement fixed:20,1 \\
        --mechanism lbu --epsilon 1 --window 20 --bins 2 --output out/

The reports (``schemas/report.avsc``, one JSON object per line) are the
devices' own: the collector never saw a value.  Only methods whose schedule
is public can be replayed (LBU, LSP, PLBU, and LPU with ``--param
grouping=public``: ``asks_on_schedule``), on the devices' schedule of absolute slots whatever the first slot
with a report; the
adaptive ones decide whom to ask from the reports and run live
(``pipelines.collector``).  The graph reads and parses the lines (a bad line
is a dead letter), groups each stream's reports and releases its slots in
order (``transforms.client_release``), checking every report against its
round.  With ``--domain LOW,HIGH`` the reports are numeric devices' (``device.numeric_client.NumericClient``:
every numeric method: sw-direct, ipp, app, capp, pp-s, app-s, capp-s, sampling, ba-sw, topl, whose
schedules are public; a sampling method's segment length is ``--param segment=L``) and are checked and averaged
per slot by
``transforms.numeric_report_release``; a user's second report of a slot is a duplicate
(``duplicates-*.jsonl``).  Outputs in ``--output``: ``releases-*.jsonl``, ``dead_letters-*.jsonl``
and ``report.json`` (reports read = used + duplicates + dead letters; the ledger's
verdict).  ``--baseline`` runs the non-private graph that reads the same
reports and counts them per slot and payload (the speed reference of
``benchmarks/client_pipeline.py``).  The default runner is FnApiRunner.
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

import apache_beam as beam

from pipelines import cli, logs
from pipelines.job_report import job_report, output_counts, summary_line, write_job_report
from pipelines.collector import read_users
from transforms.client_release import ClientReleaseConfig, parse_report, release_stream
from transforms.mechanisms.ldp.client import REPORT_FIELDS, ReportRejected
from transforms.records import dead_letter
from transforms.slotting import SlotClock
from transforms.numeric_events import NumericDomain
from transforms.numeric_report_release import (
    DEVICE_METHODS,
    NumericReportConfig,
    release_numeric_stream,
)

_LOGGER = logging.getLogger("pipelines.client_replay")


def parser():
    p = cli.job_parser("wevent client-replay", __doc__.split("\n\n")[0])
    p.add_argument("--input", action="append", required=True, help="report files (JSONL; glob, repeatable)")
    p.add_argument("--users", required=True, help="the registered devices: ID per line, or ID<TAB>fixed:W,E")
    p.add_argument("--requirement", help="fixed:W,E for every device whose line names none")
    p.add_argument("--mechanism", required=True, help="the method the devices answered: lbu, lsp, plbu, lpu with "
                   "--param grouping=public, or a numeric method with --domain")
    p.add_argument("--epsilon", type=float, help="homogeneous methods: epsilon")
    p.add_argument("--window", type=int, help="homogeneous methods: window w")
    p.add_argument("--max-window", type=int, default=1000, help="the ledger's largest window (slots)")
    p.add_argument("--bins", type=int, default=2, help="the domain size d of the devices' values")
    p.add_argument("--domain", metavar="LOW,HIGH", help="numeric device reports (every numeric method): the "
                   "interval the devices report over")
    cli.add_mechanism_parameter_option(p)
    p.add_argument("--slot-seconds", type=float, default=1.0, help="slot length, to date the releases (reports "
                   "carry slot indices): slot t covers [origin + t·s, origin + (t+1)·s)")
    p.add_argument("--origin", type=float, default=0.0, help="epoch seconds where slot 0 starts")
    p.add_argument("--output", required=True, help="directory of releases-*, dead_letters-*, duplicates-*, "
                   "ledger-* and report.json")
    p.add_argument("--baseline", action="store_true", help="the non-private count of the same reports")
    p.add_argument("--insecure-seed", type=int, help="reproducible, NOT private randomness (tests only)")
    return p


class _Parse(beam.DoFn):
    def process(self, line):
        try:
            yield parse_report(line)
        except ReportRejected as reason:
            yield beam.pvalue.TaggedOutput("dead", json.dumps(dead_letter(str(reason), line, "parse"), sort_keys=True))


class _Release(beam.DoFn):
    def __init__(self, config: ClientReleaseConfig | NumericReportConfig, clock: SlotClock):
        self.config = config
        self.release = functools.partial(release_numeric_stream, clock=clock) \
            if isinstance(config, NumericReportConfig) else release_stream

    def process(self, element):
        stream, reports = element
        for kind, record in self.release(self.config, stream, reports):
            text = json.dumps(record, sort_keys=True)
            yield text if kind == "release" else beam.pvalue.TaggedOutput(kind, text)


def _baseline_key(element):
    stream, report = element
    return (stream, report[REPORT_FIELDS.index("slot")], tuple(report[-1] or ())), 1


def run(argv: Sequence[str] | None = None) -> int:
    logs.configure(False)
    started = time.monotonic()
    try:
        args, beam_args = cli.strict_parse(parser(), argv if argv is not None else sys.argv[1:])
        files = sorted({path for pattern in args.input for path in glob.glob(pattern)})
        if not files:
            raise cli.ConfigError(f"--input matches no file: {args.input}")
        ids, requirements = read_users(args.users, args.requirement)
        users = (tuple(ids), tuple(int(w) for w in requirements.window),
                 tuple(int(e) for e in requirements.epsilon_units))
        config: ClientReleaseConfig | NumericReportConfig
        clock = SlotClock(args.slot_seconds, args.origin)
        if args.domain is not None:
            domain = NumericDomain.parse(args.domain)
            name, params = cli.mechanism_params(args, 1, **domain.mechanism_params())
            config = NumericReportConfig(name, params, domain, *users)
        elif args.mechanism.lower() in DEVICE_METHODS:
            raise cli.ConfigError(f"{args.mechanism} device reports are numeric: give --domain LOW,HIGH")
        else:
            name, params = cli.mechanism_params(args, args.bins)
            config = ClientReleaseConfig(name, params, *users, args.insecure_seed, clock)
    except (cli.ConfigError, ValueError, OSError) as error:
        return cli.fail(str(error))
    os.makedirs(args.output, exist_ok=True)
    _LOGGER.info("replaying %d report files with %s into %s", len(files), name, args.output)
    out = os.path.join(args.output, "")
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(beam_args)) as pipeline:
        lines = pipeline | beam.Create(files) | beam.io.ReadAllFromText()
        parsed = lines | "Parse" >> beam.ParDo(_Parse()).with_outputs("dead", main="reports")
        if args.baseline:
            (parsed.reports | beam.Map(_baseline_key) | beam.CombinePerKey(sum)
             | beam.Map(lambda kv: json.dumps([kv[0][0], kv[0][1], list(kv[0][2]), kv[1]]))
             | "WriteCounts" >> beam.io.WriteToText(out + "counts", file_name_suffix=".jsonl"))
            return 0
        released = (parsed.reports | beam.GroupByKey()
                    | beam.ParDo(_Release(config, clock)).with_outputs("dead", "duplicate", "ledger", main="releases"))
        released.releases | "WriteReleases" >> beam.io.WriteToText(out + "releases", file_name_suffix=".jsonl")
        ((parsed.dead, released.dead) | beam.Flatten()
         | "WriteDead" >> beam.io.WriteToText(out + "dead_letters", file_name_suffix=".jsonl"))
        released.duplicate | "WriteDuplicates" >> beam.io.WriteToText(out + "duplicates", file_name_suffix=".jsonl")
        released.ledger | "WriteLedger" >> beam.io.WriteToText(out + "ledger", file_name_suffix=".jsonl")
    read = sum(_non_empty_lines(path) for path in files)
    return _report(args.output, read, name, time.monotonic() - started, len(ids))


def _non_empty_lines(path: str) -> int:
    with open(path) as lines:
        return sum(1 for line in lines if line.strip())


def _count(directory: str, prefix: str) -> list[str]:
    lines = []
    for path in sorted(glob.glob(os.path.join(directory, prefix + "*.jsonl"))):
        with open(path) as text:
            lines += [line for line in text if line.strip()]
    return lines


def _report(directory: str, read: int, name: str, seconds: float, devices: int) -> int:
    """report.json from the files written: releases, dead letters, duplicates and the streams' ledger lines."""
    counts = output_counts(directory)
    duplicates = len(_count(directory, "duplicates"))
    ledgers = [json.loads(line) for line in _count(directory, "ledger")]
    counts.update(ledger_violations=sum(item["violations"] for item in ledgers),
                  max_window_usage_ratio=max((item["max_window_usage_ratio"] for item in ledgers), default=0.0),
                  users_in_ledger=devices)
    used = sum(item["reports_used"] for item in ledgers)
    report = write_job_report(directory, job_report("client-replay", name, counts, read, used, duplicates, seconds,
                                                    trust="local_client"))
    _LOGGER.info("%s", summary_line(report, directory))
    if report["ledger_violations"]:
        return cli.fail(f"{report['ledger_violations']} ledger violations (see {directory}/ledger-*)", 1)
    return 0


if __name__ == "__main__":
    sys.exit(run())
