"""The continuous job: the same private graph over an unbounded source.

Locally:

    python -m pipelines.streaming --watch incoming/ --binning tdrive --slot-seconds 600 \\
        --requirement fixed:120,0.6 --output live/ --max-slots 50
    python -m pipelines.streaming --demo --output demo/          # a generated stream, slot by slot

``--demo`` replays the project's synthetic taxi stream through a TestStream
on the bundle-based DirectRunner, advancing the watermark slot by slot, and
writes each slot's release into its own file named by the slot's start time
(``releases-2008-02-02T13:50:00Z.jsonl``, ``pipelines.slot_files``).
``--watch`` picks up new JSON-lines files as they land in a directory and appends each release to
``releases-live.jsonl`` as it is made; Beam's local runners do not pace a
polling source in real time, so it runs the graph's stages in a wall-clock
loop (``pipelines.live``).  Both stop after ``--max-slots`` slots (watch: of
wall-clock time) or on Ctrl-C.

Stopping and resuming (docs/operations.md): ``--watch DIR --checkpoint PATH``
commits a checkpoint after every round and resumes from it on start; a Beam
job writes each stream's state into ``--checkpoint-dir`` (every
``--checkpoint-every`` slots and after every firing) and a new job continues it
with ``--resume-from`` (a checkpoint file or that directory); with ``--domain --per-user-clients`` the checkpoint
holds every user's client state and ledger tail too (``transforms.numeric_clients.WriteClientCheckpoints``).

On a runner (exact command lines in the README):

* Dataflow + Pub/Sub: ``--pubsub-subscription projects/P/subscriptions/S --runner DataflowRunner ...``
* Flink or Dataflow + Kafka: ``--kafka-bootstrap host:9092 --kafka-topic events --runner FlinkRunner ...``
  (Beam's Kafka IO is cross-language: it needs Java and the expansion-service jar at build time).
* Numeric events (``--domain LOW,HIGH``, seed 003's methods): from Pub/Sub, Kafka, ``--demo`` (a generated
  numeric stream, :func:`numeric_demo_lines`) or ``--watch`` (the loop's central numeric path); in a Beam job
  ``--per-user-clients`` runs each user's client in the per-user stage's cells and ``--sma K`` adds each
  release's simple moving average (``transforms.numeric_clients.SmoothReleases``).  ``--clients --domain``:
  numeric devices are asked nothing; their reports come from ``--reports-subscription`` (event time: when they
  were published) and each slot is released once the watermark passes its close.
* Client devices (local DP, trust model ``local_client``): ``--clients --requests-topic projects/P/topics/T
  --reports-subscription projects/P/subscriptions/S --users users.txt --mechanism lpd ...``: a tick at
  every slot start (``PeriodicImpulse``) starts the slot, each round's requests go to the topic and the
  devices' reports come back through the subscription until the round's deadline (``--round-seconds``;
  ``transforms.client_rounds``).  The collector never sees a value.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import sys
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.window import TimestampedValue

from pipelines import cli, logs, report_html
from pipelines.cli import ConfigError
from pipelines.collector import read_users

from pipelines.job_report import ACCOUNTING_PREFIX
from pipelines.report import CountRead, WriteAccounting
from pipelines.slot_files import SlotFileWriter, WriteSlotFiles
from transforms.binning import binner_from_spec
from transforms.client_rounds import ClientRounds, ClientRoundsConfig
from transforms.sinks import WriteCheckpoints
from transforms.checkpoint import load as load_checkpoint
from transforms.declarations import RequirementPolicy
from transforms.parse import ParseConfig, ParseEvents, time_seconds
from transforms.loaders import TDRIVE_START
from transforms.numeric_clients import PrivateNumericClients, SmoothReleases, holds_clients_only
from transforms.numeric_events import OUT_OF_RANGE_POLICIES, NumericDomain, ValueToGrid
from transforms.numeric_report_release import DeviceStreamConfig, NumericReportConfig, StreamNumericReports
from transforms.client_release import parse_report
from transforms.mechanisms.ldp.client import ReportRejected
from transforms.records import dead_letter
from transforms.slotting import SlotClock
from transforms.private_histogram import PrivateStreamHistogram
from transforms.release_range import RANGE_FROM_DATA_WARNING, parse_range
from transforms.sinks import WriteRecords

_LOGGER = logging.getLogger("pipelines.streaming")


def parser() -> argparse.ArgumentParser:
    p = cli.job_parser("wevent stream", __doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--watch", help="directory to watch for new .jsonl files")
    source.add_argument("--demo", action="store_true", help="replay a generated taxi stream slot by slot")
    source.add_argument("--pubsub-subscription", help="Pub/Sub subscription (Dataflow)")
    source.add_argument("--kafka-bootstrap", help="Kafka bootstrap servers (Flink/Dataflow)")
    source.add_argument("--clients", action="store_true", help="client devices (local DP): requests to "
                        "--requests-topic, reports from --reports-subscription (Pub/Sub)")
    p.add_argument("--kafka-topic", help="Kafka topic (with --kafka-bootstrap)")
    p.add_argument("--requests-topic", help="--clients: Pub/Sub topic the request records go to")
    p.add_argument("--reports-subscription", help="--clients: Pub/Sub subscription the devices' reports come from")
    p.add_argument("--users", help="--clients: the devices, ID per line, or ID<TAB>fixed:W,E")
    p.add_argument("--round-seconds", type=float, default=5.0, help="--clients: deadline of one round of requests")
    p.add_argument("--stream", default="default", help="--clients: the stream the requests and reports name")
    p.add_argument("--binning", help="int:D | categories:a,b,c | grid:LON0,LON1,LAT0,LAT1,RxC | tdrive "
                   "(required, except --demo: tdrive)")
    p.add_argument("--domain", metavar="LOW,HIGH", help="numeric mechanisms (sw-direct, ipp, app, capp, ...): each "
                   "event's value is a number in [LOW, HIGH] (as pipelines.replay; write --domain=-5,15 when LOW < 0)")
    p.add_argument("--out-of-range", choices=OUT_OF_RANGE_POLICIES, default="dead-letter",
                   help="with --domain: a value outside [LOW, HIGH] is clipped into it (counted) or a dead letter")
    p.add_argument("--per-user-clients", action="store_true", help="with --domain: each user's client runs in the "
                   "per-user stage, its state in Beam state cells (transforms.numeric_clients)")
    p.add_argument("--sma", type=int, metavar="K", help="with --domain: each release also carries figures.sma, the "
                   "simple moving average of K released values of its stream (spec 3.5; post-processing)")
    p.add_argument("--sma-mode", choices=("centered", "trailing"), default="centered",
                   help="--sma: centred (the paper; a release waits for (K-1)/2 more) or trailing")
    p.add_argument("--slot-seconds", type=float, default=600.0, help="slot length in seconds")
    p.add_argument("--allowed-lateness", type=float, default=60.0, help="seconds an event may come after its slot "
                   "ends and still count (later: a late dead letter)")
    p.add_argument("--poll-seconds", type=float, default=2.0, help="--watch: how often to look for new files")
    p.add_argument("--settle-seconds", type=float, default=5.0, help="--watch: a *.jsonl file is read once it has "
                   "not been modified for this long; producers should write NAME.jsonl.part, then rename it")
    p.add_argument("--max-slots", type=int, help="stop after this many slots")
    p.add_argument("--mechanism", default="pbd", help="the release mechanism (wevent replay --help lists them)")
    p.add_argument("--epsilon", type=float, help="homogeneous mechanisms: epsilon")
    p.add_argument("--window", type=int, help="homogeneous mechanisms: window w")
    p.add_argument("--max-window", type=int, default=1000, help="operator bound: longest declarable window")
    cli.add_mechanism_parameter_option(p)
    p.add_argument("--carry-forward", action="store_true", help="a user's last bin stays in force until a new event")
    p.add_argument("--requirement", help="one requirement for every user who declares none: fixed:W,E, "
                   "dynamic:WB,EB,WF,EF or lifetime:E")
    p.add_argument("--levels", help="named levels: high=fixed:40,1.0;low=fixed:120,0.6")
    p.add_argument("--level-ratios", help="assign the --levels to users by ratio: high=0.5,low=0.5")
    p.add_argument("--min-epsilon", type=float, help="operator bound: smallest declarable epsilon")
    p.add_argument("--max-epsilon", type=float, help="operator bound: largest declarable epsilon")
    p.add_argument("--output", required=True, help="directory of the releases, dead letters, usage and report.json")
    p.add_argument("--insecure-seed", type=int, help="seeded noise: reproducible, NOT private (demo/tests only)")
    p.add_argument("--checkpoint", help="--watch: checkpoint file, resumed from when it exists, written every round")
    p.add_argument("--resume-from", help="Beam job: continue the release state of a checkpoint file or directory "
                   "(--per-user-clients: every user's client state too)")
    p.add_argument("--checkpoint-dir", help="Beam job: write each stream's release state into this directory "
                   "(--per-user-clients: every user's client state too, one file)")
    p.add_argument("--checkpoint-every", type=int, default=100, help="with --checkpoint-dir: slots between "
                   "checkpoints (one is also written after every firing; --per-user-clients: at the end)")
    p.add_argument("--start", help="first instant of the public release range (epoch seconds or ISO 8601; "
                   "naive is UTC): every slot meeting [--start, --end) is released, and no other")
    p.add_argument("--end", help="end of the public release range (exclusive; epoch seconds or ISO 8601)")
    p.add_argument("--demo-taxis", type=int, default=50, help="--demo: taxis in the generated stream")
    p.add_argument("--quiet", action="store_true", help="print only warnings and errors: no progress, nothing "
                   "from Beam or its workers")
    cli.add_run_flags(p)
    return p


def check_checkpoint_flags(args) -> None:
    if args.watch and (args.resume_from or args.checkpoint_dir):
        raise ConfigError("--watch resumes from and writes one file: give --checkpoint PATH")
    if not args.watch and args.checkpoint:
        raise ConfigError("--checkpoint is for --watch; a Beam job takes --checkpoint-dir and --resume-from")
    if args.checkpoint and os.path.isdir(args.checkpoint):
        raise ConfigError(f"--checkpoint {args.checkpoint!r} is a directory; give a file path")


def requirement_policy(args) -> RequirementPolicy:
    """Whose requirements apply, from the flags every job shares: ``--requirement``, ``--levels`` with
    ``--level-ratios``, and the operator's bounds ``--min-epsilon``/``--max-epsilon``/``--max-window``."""
    levels, shares = cli.parse_levels(args.levels or "", args.level_ratios)
    cli.check_requirement_source(args)
    default = cli.parse_requirement(args.requirement) if args.requirement else None
    try:
        return RequirementPolicy(levels, default, args.min_epsilon, args.max_epsilon, args.max_window,
                                 level_shares=tuple(shares))
    except ValueError as error:
        raise ConfigError(cli.flag_names(str(error))) from None


def private_transform(args, bins: int, numeric: NumericDomain | None = None) -> PrivateStreamHistogram:
    name, params = cli.mechanism_params(args, bins, **(numeric.mechanism_params() if numeric is not None else {}))
    del params["bins"]  # the transform takes them apart
    policy = requirement_policy(args)
    check_checkpoint_flags(args)
    beam_job = not args.watch
    try:
        release_range = parse_range(args.start, args.end)
        transform = PrivateStreamHistogram(name, args.slot_seconds, bins, mechanism_params=params,
                                           allowed_lateness=args.allowed_lateness, policy=policy,
                                           insecure_seed=args.insecure_seed, bounded=False,
                                           release_range=release_range,
                                           resume_from=args.resume_from if beam_job else None,
                                           checkpoint_every=args.checkpoint_every if beam_job and args.checkpoint_dir
                                           else None, numeric=numeric)
    except ValueError as error:
        raise ConfigError(cli.flag_names(str(error))) from None
    cli.check_requirements_usable(transform.config.build(), policy)
    return transform


def per_user_clients(args, numeric: NumericDomain) -> PrivateNumericClients:
    """``--per-user-clients``: each user's client in the per-user stage's cells (transforms.numeric_clients)."""
    name, params = cli.mechanism_params(args, 1, **numeric.mechanism_params())
    params = {k: v for k, v in params.items() if k not in ("bins", *numeric.mechanism_params())}
    policy = requirement_policy(args)
    check_checkpoint_flags(args)
    try:
        transform = PrivateNumericClients(name, args.slot_seconds, numeric, mechanism_params=params,
                                          allowed_lateness=args.allowed_lateness, policy=policy,
                                          insecure_seed=args.insecure_seed, bounded=False,
                                          ledger_max_window=args.max_window, sma=args.sma, sma_mode=args.sma_mode,
                                          release_range=parse_range(args.start, args.end),
                                          resume_from=args.resume_from,
                                          checkpoint_every=args.checkpoint_every if args.checkpoint_dir else None)
    except ValueError as error:
        raise ConfigError(cli.flag_names(str(error))) from None
    cli.check_requirements_usable(transform.config.build(), policy)
    return transform


def warn_without_range(args) -> None:
    """Once the configuration is good (so that an error stays one line): say the released slots follow the data."""
    if args.start is None and args.end is None:
        _LOGGER.warning("warning: %s", RANGE_FROM_DATA_WARNING)


def numeric_domain(args) -> NumericDomain | None:
    """``--domain``/``--out-of-range`` checked as the replay checks them (None for the histogram mechanisms), and
    the numeric-only flags (``--sma``, ``--per-user-clients``)."""
    from pipelines.replay import check_sma
    from pipelines.replay import numeric_domain as checked

    binning = args.binning or ("tdrive" if args.demo and args.domain is None else None)  # the demo's default
    numeric = checked(argparse.Namespace(**{**vars(args), "binning": binning}, evaluate=False))
    if numeric is None and args.per_user_clients:
        raise ConfigError("--per-user-clients is for the numeric mechanisms (--domain)")
    check_sma(args, numeric)
    if args.watch and (args.sma is not None or args.per_user_clients):
        raise ConfigError("--sma and --per-user-clients run in the Beam job: the --watch loop releases each slot as "
                          "it closes, through the central numeric path")
    if args.resume_from and not args.per_user_clients and holds_clients_only(args.resume_from):
        raise ConfigError(f"--resume-from {args.resume_from}: written with --per-user-clients; resume with it")
    return numeric


def numeric_demo_lines(domain: NumericDomain, users: int, hours: float = 6, report_seconds: float = 300,
                       seed: int = 0) -> list[str]:
    """The demo's numeric stream: each user's value drifts along a sine wave across ``domain`` with noise, one line
    every ``report_seconds`` (a few values fall outside the interval: clipped or dead letters), ordered by time."""
    rnd = random.Random(seed)
    rows = []
    for user in range(users):
        phase = rnd.uniform(0, 2 * math.pi)
        for step in range(int(hours * 3600 // report_seconds)):
            t = TDRIVE_START + step * report_seconds + rnd.uniform(0, report_seconds / 2)
            unit = 0.5 + 0.45 * math.sin(2 * math.pi * step * report_seconds / 10800 + phase) + rnd.gauss(0, 0.05)
            rows.append((t, user, json.dumps({"user": f"sensor{user + 1}", "time": round(t, 3),
                                              "value": round(domain.low + domain.width * unit, 6)})))
    rows.sort()
    return [line for _, _, line in rows]


def binner(args):
    """``--binning`` (the demo's generated taxis default to the T-Drive grid; every other source must say)."""
    if args.binning is None:
        if not args.demo:
            raise ConfigError("--binning is required: how values map to histogram bins (int:D, categories:..., "
                              "grid:..., tdrive)")
        args.binning = "tdrive"
    try:
        return binner_from_spec(args.binning)
    except ValueError as error:
        raise ConfigError(f"--binning: {error}") from None


def demo_source(pipeline, args, numeric: NumericDomain | None = None):
    """The synthetic taxi stream (``--domain``: the numeric demo stream, :func:`numeric_demo_lines`) as a
    TestStream: each slot's lines, then the watermark past the slot."""
    from apache_beam.testing.test_stream import TestStream

    from transforms.loaders import synthetic_taxi_stream

    if numeric is not None:
        lines = numeric_demo_lines(numeric, args.demo_taxis)
    else:
        with tempfile.TemporaryDirectory(prefix="wevent-demo-") as scratch:  # removed once read
            path = os.path.join(scratch, "taxis.jsonl")
            synthetic_taxi_stream(path, taxis=args.demo_taxis, hours=6)
            with open(path) as f:
                lines = f.read().splitlines()
    by_slot: dict[int, list] = {}
    for line in lines:
        by_slot.setdefault(int(json.loads(line)["time"] // args.slot_seconds), []).append(line)
    stream = TestStream()
    slots = sorted(by_slot)[: args.max_slots or None]
    for slot in slots:
        start = slot * args.slot_seconds
        stream = stream.add_elements([TimestampedValue(line, start) for line in by_slot[slot]])
        stream = stream.advance_watermark_to(start + args.slot_seconds + args.allowed_lateness + 1)
    watermark = (slots[-1] + 1) * args.slot_seconds + args.allowed_lateness + 1
    range_closed = time_seconds(args.end) + args.allowed_lateness + 1 if args.end else watermark
    if range_closed > watermark:  # the range's trailing empty slots are released while their window is open
        stream = stream.advance_watermark_to(range_closed)
    stream = stream.advance_watermark_to(max(range_closed + args.slot_seconds,
                                             (slots[-1] + 3) * args.slot_seconds + args.allowed_lateness))
    return pipeline | "Demo" >> stream.advance_watermark_to_infinity()


def runner_source(pipeline, args):
    if args.pubsub_subscription:
        return (pipeline | "PubSub" >> beam.io.ReadFromPubSub(subscription=args.pubsub_subscription)
                | "Decode" >> beam.Map(lambda b: b.decode("utf-8")))
    from apache_beam.io.kafka import ReadFromKafka

    if not args.kafka_topic:
        raise ConfigError("--kafka-bootstrap needs --kafka-topic")
    return (pipeline | "Kafka" >> ReadFromKafka({"bootstrap.servers": args.kafka_bootstrap}, [args.kafka_topic])
            | "Values" >> beam.Map(lambda kv: kv[1].decode("utf-8")))


def numeric_reports_config(args) -> DeviceStreamConfig:
    """``--clients --domain``: numeric devices push their reports on their public schedule (nothing is asked of
    them): the method, the devices and the subscription, checked before the pipeline starts."""
    if not args.reports_subscription or not args.users:
        raise ConfigError("--clients --domain needs --reports-subscription and --users")
    if args.requests_topic:
        raise ConfigError("--requests-topic: numeric devices are asked nothing (they report on their public "
                          "schedule); give --reports-subscription only")
    for flag, value in (("--checkpoint-dir", args.checkpoint_dir), ("--resume-from", args.resume_from),
                        ("--start", args.start), ("--end", args.end), ("--levels", args.levels),
                        ("--per-user-clients", args.per_user_clients)):
        if value:
            raise ConfigError(f"{flag} is not supported with --clients")
    numeric = numeric_domain(args)
    try:
        ids, requirements = read_users(args.users, args.requirement)
    except OSError as error:
        raise ConfigError(f"--users: {error}") from None
    name, params = cli.mechanism_params(args, 1, **numeric.mechanism_params())
    try:
        config = NumericReportConfig(name, params, numeric, tuple(ids), tuple(int(w) for w in requirements.window),
                                     tuple(int(e) for e in requirements.epsilon_units))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return DeviceStreamConfig(config, SlotClock(args.slot_seconds, 0.0, args.allowed_lateness))


def numeric_report_source(pipeline, args):
    """The devices' report lines from ``--reports-subscription`` (event time: when they were published)."""
    try:
        reports = pipeline | "Reports" >> beam.io.ReadFromPubSub(subscription=args.reports_subscription)
    except ValueError as error:
        raise ConfigError(f"--reports-subscription: {error}") from None
    return reports | "DecodeReports" >> beam.Map(lambda b: b.decode("utf-8"))


def _parsed_report(line: str):
    try:
        yield parse_report(line)
    except ReportRejected as reason:
        yield beam.pvalue.TaggedOutput("dead", dead_letter(str(reason), line, "parse"))


def build_numeric_reports(pipeline, args) -> None:
    """Numeric device reports, streaming: each slot's exact average once the watermark passes the slot's close
    (``transforms.numeric_report_release.StreamNumericReports``), dead letters, the ledger's usage."""
    config = numeric_reports_config(args)
    parsed = (numeric_report_source(pipeline, args)
              | "ParseReports" >> beam.FlatMap(_parsed_report).with_outputs("dead", main="reports"))
    outputs = parsed.reports | "Devices" >> StreamNumericReports(config, args.max_window)
    releases = outputs["releases"]
    if args.sma is not None:
        releases = releases | "SMA" >> SmoothReleases(args.sma, args.sma_mode, bounded=False)
    out = lambda name: os.path.join(args.output, name)  # noqa: E731
    releases | "ReleaseProgress" >> beam.Map(logs.count_release) | "WriteReleases" >> WriteSlotFiles(out("releases"))
    ((outputs["dead_letters"], parsed.dead) | "AllDead" >> beam.Flatten()
     | "WriteDead" >> WriteRecords(out("dead_letters"), "dead_letter", triggering_frequency=args.slot_seconds))
    outputs["usage"] | "WriteUsage" >> WriteRecords(out("usage"), "user_usage", triggering_frequency=args.slot_seconds)


def client_config(args) -> ClientRoundsConfig:
    """``--clients``: the method, the devices and the Pub/Sub names, checked before the pipeline starts."""
    client_flags = (("--requests-topic", args.requests_topic), ("--reports-subscription", args.reports_subscription),
                    ("--users", args.users))
    for flag, value in client_flags:
        if not value:
            raise ConfigError(f"--clients needs {flag}")
    for flag, value in (("--checkpoint-dir", args.checkpoint_dir), ("--resume-from", args.resume_from),
                        ("--start", args.start), ("--end", args.end), ("--levels", args.levels)):
        if value:
            raise ConfigError(f"{flag} is not supported with --clients")
    bins = binner(args).bins
    try:
        ids, requirements = read_users(args.users, args.requirement)
    except OSError as error:
        raise ConfigError(f"--users: {error}") from None
    name, params = cli.mechanism_params(args, bins)
    try:
        return ClientRoundsConfig(name, params, tuple(ids), tuple(int(w) for w in requirements.window),
                                  tuple(int(e) for e in requirements.epsilon_units), args.slot_seconds,
                                  args.round_seconds, args.stream, args.insecure_seed)
    except ValueError as error:
        raise ConfigError(str(error).replace("round_seconds", "--round-seconds").replace(
            "slot_seconds", "--slot-seconds")) from None


def build_clients(pipeline, args) -> None:
    """The client-device graph: slot ticks and Pub/Sub reports in, requests to Pub/Sub, releases and dead letters
    to files (numeric devices, ``--domain``: :func:`build_numeric_reports`)."""
    from apache_beam.transforms.periodicsequence import PeriodicImpulse

    if args.domain is not None:
        return build_numeric_reports(pipeline, args)

    config = client_config(args)
    try:
        write_requests = beam.io.WriteToPubSub(args.requests_topic)
    except ValueError as error:
        raise ConfigError(f"--requests-topic: {error}") from None
    try:
        reports = pipeline | "Reports" >> beam.io.ReadFromPubSub(subscription=args.reports_subscription)
    except ValueError as error:
        raise ConfigError(f"--reports-subscription: {error}") from None
    first = math.ceil(time.time() / args.slot_seconds) * args.slot_seconds  # a tick at every slot's start
    ticks = pipeline | "SlotTicks" >> PeriodicImpulse(start_timestamp=first, fire_interval=args.slot_seconds)
    outputs = {"ticks": ticks, "reports": reports} | "Clients" >> ClientRounds(config)
    (outputs["requests"] | "EncodeRequests" >> beam.Map(lambda text: text.encode("utf-8")).with_output_types(bytes)
     | "WriteRequests" >> write_requests)
    out = lambda name: os.path.join(args.output, name)  # noqa: E731
    outputs["releases"] | "ReleaseProgress" >> beam.Map(logs.count_release) | "WriteReleases" >> WriteSlotFiles(
        out("releases"))
    outputs["dead_letters"] | "WriteDead" >> WriteRecords(out("dead_letters"), "dead_letter",
                                                          triggering_frequency=args.slot_seconds)


def build(pipeline, args) -> None:
    if args.clients:
        return build_clients(pipeline, args)
    numeric = numeric_domain(args)
    if numeric is not None:  # each value as its grid index on [LOW, HIGH] (transforms.numeric_events)
        parse = ParseConfig(bins=numeric.steps + 1, to_bin=ValueToGrid(numeric))
        transform = (per_user_clients(args, numeric) if args.per_user_clients
                     else private_transform(args, 1, numeric))
    else:
        bins = binner(args)
        parse = ParseConfig(bins=bins.bins, to_bin=None if args.binning.startswith("int:") else bins)
        transform = private_transform(args, bins.bins)
    if args.demo:
        lines = demo_source(pipeline, args, numeric)
    else:
        lines = runner_source(pipeline, args)
    lines = lines | "Progress" >> beam.Map(logs.count_read)
    parsed = lines | "Parse" >> ParseEvents(parse)
    read_counts = lines | "CountRead" >> CountRead()  # report.json's records read, from the job's own outputs
    outputs = parsed.events | "Private" >> transform
    every = args.slot_seconds
    out = lambda name: os.path.join(args.output, name)  # noqa: E731
    releases = outputs["releases"]
    if args.sma is not None and not args.per_user_clients:  # the per-user stage smooths its own releases
        releases = releases | "SMA" >> SmoothReleases(args.sma, args.sma_mode, bounded=False)
    written = releases | "ReleaseProgress" >> beam.Map(logs.count_release) | "WriteReleases" >> WriteSlotFiles(
        out("releases"))
    written | "RefreshReportHtml" >> beam.ParDo(report_html.RefreshFn(args.output, report_html.public_config(args)))
    ((outputs["dead_letters"], parsed.dead_letters) | "AllDead" >> beam.Flatten()
     | "WriteDead" >> WriteRecords(out("dead_letters"), "dead_letter", triggering_frequency=every))
    outputs["usage"] | "WriteUsage" >> WriteRecords(out("usage"), "user_usage", triggering_frequency=every)
    ((outputs["accounting"], read_counts) | "AllCounts" >> beam.Flatten()
     | "WriteAccounting" >> WriteAccounting(out(ACCOUNTING_PREFIX), every))
    if args.checkpoint_dir and "checkpoints" in outputs:
        # each checkpoint's releases are written into their slot files first (not with --sma: a smoothed release
        # is made downstream, later), so a checkpoint never counts a slot as released that no file holds
        publish = SlotFileWriter(out("releases"), numeric) if args.sma is None else None
        outputs["checkpoints"] | "WriteCheckpoints" >> beam.ParDo(WriteCheckpoints(args.checkpoint_dir,
                                                                                   publish=publish))


def run_watch(args) -> int:
    from pipelines.live import watch

    try:
        numeric = numeric_domain(args)
        if numeric is None:
            bins = binner(args)
        if not os.path.isdir(args.watch):
            raise ConfigError(f"--watch {args.watch!r} is not a directory")
        cli.check_output(args.output)
        if numeric is not None:  # the central numeric path, its releases in the interval's units (live.py)
            transform = private_transform(args, 1, numeric)
            parse = ParseConfig(bins=numeric.steps + 1, to_bin=ValueToGrid(numeric))
        else:
            transform = private_transform(args, bins.bins)
            parse = ParseConfig(bins=bins.bins, to_bin=None if args.binning.startswith("int:") else bins)
        if args.checkpoint and os.path.exists(args.checkpoint):  # refuse a damaged or foreign one before starting
            transform.config.check_checkpoint(load_checkpoint(args.checkpoint), args.checkpoint)
    except (ConfigError, ValueError) as error:
        return cli.fail(str(error))
    warn_without_range(args)
    _LOGGER.info("watching %s, releasing into %s/releases-live.jsonl (Ctrl-C stops)", args.watch, args.output)
    with logs.Progress("watch") as progress:
        counts = watch(args.watch, args.output, parse, transform, args.poll_seconds, args.max_slots,
                       checkpoint=args.checkpoint, settle_seconds=args.settle_seconds,
                       on_round=report_html.Refresher(args.output, report_html.public_config(args)).refresh)
    code = cli.finish_watch(args, counts, progress.seconds, transform.config.release_range)
    report_html.write_after_job(args.output, report_html.public_config(args))
    return code


@cli.stops_cleanly("stream")
def run(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    logs.configure("--quiet" in argv)
    try:
        args, beam_args = cli.strict_parse(parser(), argv)
    except ConfigError as error:
        return cli.fail(str(error))
    if not args.clients and (args.requests_topic or args.reports_subscription or args.users):
        return cli.fail("--requests-topic, --reports-subscription and --users are for --clients")
    if args.watch:
        return run_watch(args)
    try:
        cli.check_output(args.output)
        options = cli.pipeline_options(beam_args, args.quiet)
        options.view_as(StandardOptions).streaming = True
        runner = options.view_as(StandardOptions).runner or ("BundleBasedDirectRunner" if args.demo else None)
        if runner is None:
            from apache_beam.runners.portability.fn_api_runner import FnApiRunner

            runner = FnApiRunner()
        pipeline = beam.Pipeline(runner=runner, options=options)
        build(pipeline, args)
        os.makedirs(args.output, exist_ok=True)
    except ConfigError as error:
        return cli.fail(str(error))
    if not args.clients:  # client rounds release every ticked slot
        warn_without_range(args)
    _LOGGER.info("streaming into %s (Ctrl-C stops)", args.output)
    cli.on_interrupt(lambda: cli.remove_temporary_files(args.output),
                     f"resume with --resume-from {args.checkpoint_dir}" if args.checkpoint_dir else None)
    with logs.Progress("stream") as progress, logs.quiet_workers(args.quiet):
        result = pipeline.run()
        result.wait_until_finish()
    code = cli.finish_stream(args, result, progress.seconds)
    report_html.write_after_job(args.output, report_html.public_config(args))
    return code


if __name__ == "__main__":
    sys.exit(run())
