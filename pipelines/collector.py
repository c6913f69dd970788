"""The collector of client reports, live: each slot's requests go out as files, the devices' reports come back.

    python -m pipelines.collector --mechanism lpd --epsilon 1 --window 20 --users users.txt \\
        --requests requests/ --reports reports/ --output out/ --slots 100 --round-seconds 5

With client devices (trust model ``local_client``) the collector never sees a
value: every round of a slot (``transforms.mechanisms.ldp.client``) is written
to ``REQUESTS/slot-SSSSSSSS-rK.jsonl`` (one request record per asked user,
``schemas/request.avsc``; written as ``.part`` and renamed, so a reader never
sees half a file), and the reports the devices write to
``REPORTS/slot-SSSSSSSS-rK*.jsonl`` (``schemas/report.avsc``) before the
round's deadline are checked and counted; the round closes early once every
asked user has answered.  Users who do not answer count as not reporting.
``pipelines.devices`` simulates the devices with the device module
``device/wevent_client.py``.

``--users`` lists the devices, one per line: ``ID`` (with ``--requirement``
for everyone) or ``ID<TAB>fixed:W,E``.  Outputs in ``--output``:
``releases.jsonl`` (every slot, labelled ``local_client``), ``dead_letters.jsonl``
(every rejected report with its reason, and reports that came after their
round closed, as late), ``report.json`` (requests sent; reports read = used +
rejected + late; the ledger's verdict, checked from each release's charges
against what the users declared).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from pipelines import cli, logs
from pipelines.job_report import job_report, output_counts, summary_line, write_job_report
from transforms.mechanisms import FixedRequirements, PrivacyLedger, SlotBatch, make_mechanism
from transforms.mechanisms.public_schedule.registry import schedule_if_any
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.ldp.client import assign_public_groups, client_slot
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.requirements import FixedRequirement
from transforms.records import published_users

_LOGGER = logging.getLogger("pipelines.collector")


def parser():
    p = cli.job_parser("wevent collect", __doc__.split("\n\n")[0])
    p.add_argument("--mechanism", required=True, help="a local-DP method: lbu, lsp, lbd, lba, lpu, lpd, lpa, plbu")
    p.add_argument("--epsilon", type=float, help="homogeneous methods: epsilon")
    p.add_argument("--window", type=int, help="homogeneous methods: window w")
    p.add_argument("--max-window", type=int, default=1000, help="the ledger's largest window (slots)")
    p.add_argument("--bins", type=int, default=2, help="the domain size d of the devices' values")
    cli.add_mechanism_parameter_option(p)
    p.add_argument("--users", required=True, help="the devices: ID per line, or ID<TAB>fixed:W,E")
    p.add_argument("--requirement", help="fixed:W,E for every user whose line names none")
    p.add_argument("--requests", required=True, help="directory the request files are written to")
    p.add_argument("--reports", required=True, help="directory the devices' report files are read from")
    p.add_argument("--output", required=True, help="directory of releases.jsonl, dead_letters.jsonl, report.json")
    p.add_argument("--stream", default="default", help="the stream the requests and releases name")
    p.add_argument("--slots", type=int, required=True, help="how many slots to release")
    p.add_argument("--round-seconds", type=float, default=5.0, help="deadline of one round of requests")
    p.add_argument("--poll-seconds", type=float, default=0.05, help="how often to look for report files")
    p.add_argument("--insecure-seed", type=int, help="reproducible, NOT private randomness (tests only)")
    return p


def read_users(path: str, default: str | None) -> tuple[list[str], FixedRequirements]:
    """Device ids and their fixed requirements; a ConfigError names the first bad line."""
    ids, windows, epsilons = [], [], []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            user, _, requirement = line.rstrip("\n").partition("\t")
            if not user.strip():
                continue
            requirement = requirement.strip() or default
            if requirement is None:
                raise cli.ConfigError(f"--users line {number}: {user!r} has no requirement and --requirement is unset")
            parsed = cli.parse_requirement(requirement)
            if not isinstance(parsed, FixedRequirement):
                raise cli.ConfigError(f"--users line {number}: client devices keep a fixed:W,E requirement")
            ids.append(user.strip())
            windows.append(parsed.window)
            epsilons.append(parsed.epsilon)
    if len(set(ids)) != len(ids) or not ids:
        raise cli.ConfigError("--users must list at least one device, each once")
    return ids, FixedRequirements.of(windows, epsilons)


class Exchange:
    """Request files out, report files in, until the round's deadline (or every asked user answered)."""

    def __init__(self, requests: str, reports: str, deadline: float, poll: float):
        self.requests, self.reports, self.deadline, self.poll = requests, reports, deadline, poll
        self.read: set[str] = set()
        self.closed: list[str] = []  # name prefixes of the rounds whose deadline passed
        self.sent = self.received = 0

    def __call__(self, round_request, records: list[dict]) -> list[dict]:
        name = f"slot-{round_request.slot:08d}-r{round_request.round}"
        part = os.path.join(self.requests, name + ".jsonl.part")
        with open(part, "w") as out:
            out.writelines(json.dumps(record, sort_keys=True) + "\n" for record in records)
        os.replace(part, part[:-5])
        self.sent += len(records)
        reports, asked, end = [], len(records), time.monotonic() + self.deadline
        while True:
            for path in sorted(glob.glob(os.path.join(self.reports, name + "*.jsonl"))):
                if path not in self.read:
                    self.read.add(path)
                    reports += _records(path)
            if len(reports) >= asked or time.monotonic() >= end:
                break
            time.sleep(self.poll)
        self.closed.append(name)
        self.received += len(reports)
        return reports

    def late(self) -> list[dict]:
        """Reports in files for rounds already closed that were not read before their deadline."""
        late = []
        for name in self.closed:
            for path in sorted(glob.glob(os.path.join(self.reports, name + "*.jsonl"))):
                if path not in self.read:
                    self.read.add(path)
                    late += _records(path)
        return late


def _records(path: str) -> list[dict]:
    records = []
    with open(path) as lines:
        for line in lines:
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    records.append({"unparsed": line.rstrip("\n")})
    return records


class StopRequest:
    """While active, SIGINT and SIGTERM only ask the collector to stop after the slot it is releasing (a second
    signal stops at once): the slots released so far keep their files and are reported."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.saved: dict = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may handle signals
        for number in (signal.SIGINT, signal.SIGTERM):
            self.saved[number] = signal.signal(number, self._requested)
        return self

    def _requested(self, number, _frame) -> None:
        self.signal = number
        for saved_number, handler in self.saved.items():
            signal.signal(saved_number, handler)
        _LOGGER.info("stopping after this slot (%s again stops at once)", signal.Signals(number).name)

    def __exit__(self, *exc) -> None:
        for number, handler in self.saved.items():
            signal.signal(number, handler)


def run(argv: Sequence[str] | None = None) -> int:
    logs.configure(False)
    try:
        args = cli.parse_flags(parser(), sys.argv[1:] if argv is None else argv)
        ids, requirements = read_users(args.users, args.requirement)
        name, params = cli.mechanism_params(args, args.bins)
        mechanism = make_mechanism(name, **params)
        if not hasattr(mechanism, "start_slot"):
            raise cli.ConfigError(f"{name} is not a local-DP method: client devices need one")
        assign_public_groups(mechanism, ids)
        for directory in (args.requests, args.reports, args.output):
            os.makedirs(directory, exist_ok=True)
    except (cli.ConfigError, ValueError, OSError) as error:
        return cli.fail(str(error))
    started = time.monotonic()
    _LOGGER.info("collecting %d slots from %d devices: requests in %s, reports from %s, outputs in %s (Ctrl-C "
                 "stops after the current slot)", args.slots, len(ids), args.requests, args.reports, args.output)
    rng = secure_randomness() if args.insecure_seed is None else insecure_seeded_randomness(args.insecure_seed)
    exchange = Exchange(args.requests, args.reports, args.round_seconds, args.poll_seconds)
    index_of = {user: i for i, user in enumerate(ids)}
    ledger = PrivacyLedger(max(int(requirements.window.max()), 1), schedule=schedule_if_any(name, mechanism.params))
    kinds = {"fresh": 0, "skipped": 0, "nullified": 0}
    rejected_total = 0
    with open(os.path.join(args.output, "releases.jsonl"), "w") as releases, \
            open(os.path.join(args.output, "dead_letters.jsonl"), "w") as dead, StopRequest() as stop:
        for slot in range(1, args.slots + 1):
            batch = SlotBatch.of(range(len(ids)), mechanism.params.domain.no_values(len(ids)), requirements) if slot == 1 \
                else SlotBatch.empty()
            release, rejected = client_slot(mechanism, batch, rng, args.stream, slot, ids, index_of, exchange)
            ledger.record(release.slot, release.charges)
            kinds[release.kind.value] += 1
            rejected_total += len(rejected)
            dead.writelines(json.dumps({"reason": reason, "record": record}, sort_keys=True) + "\n"
                            for record, reason in rejected)
            releases.write(json.dumps({"stream": args.stream, "slot": slot, "kind": release.kind.value,
                                       "estimate": release.estimate.tolist(), "statistic": release.estimates.value,
                                       "trust": release.trust.value, "mechanism": name,
                                       "epsilon": units_to_decimal_string(release.epsilon_units),
                                       **published_users(release)},
                                      sort_keys=True) + "\n")
            releases.flush()
            _LOGGER.info("collect: %.0f s, slot %d of %d released (%s), %d requests sent, %d reports read",
                         time.monotonic() - started, slot, args.slots, release.kind.value, exchange.sent,
                         exchange.received)
            if stop.signal is not None:
                break
        ledger.close()
        late = exchange.late()
        dead.writelines(json.dumps({"reason": "late: the round had closed", "record": record}, sort_keys=True) + "\n"
                        for record in late)
    counts = output_counts(args.output)  # releases, dead letters and late ones, as written
    counts.update(users_in_ledger=len(ids), ledger_violations=ledger.violation_count,
                  max_window_usage_ratio=ledger.max_usage_ratio)
    stopped = None if stop.signal is None else f"{signal.Signals(stop.signal).name} after slot {slot} of {args.slots}"
    report = write_job_report(args.output, job_report(
        "collect", name, counts, exchange.received + len(late), exchange.received - rejected_total, 0,
        time.monotonic() - started, requests_sent=exchange.sent, trust="local_client", stopped=stopped))
    _LOGGER.info("%s", summary_line(report, args.output))
    if not report["reconciles"]:
        return cli.fail(f"the reports do not reconcile with {args.output}/dead_letters.jsonl", 1)
    if not ledger.ok:
        return cli.fail(f"{ledger.violation_count} ledger violations", 1)
    return 0 if stop.signal is None else 128 + stop.signal


if __name__ == "__main__":
    sys.exit(run())
