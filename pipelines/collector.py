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
``wevent_client.py``.

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
import os
import sys
import time
from collections.abc import Sequence

from pipelines import cli
from transforms.mechanisms import FixedRequirements, PrivacyLedger, SlotBatch, make_mechanism
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.ldp.client import assign_public_groups, client_slot
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.requirements import FixedRequirement
from transforms.records import published_users


def parser():
    p = cli.job_parser("python -m pipelines.collector", __doc__.split("\n\n")[0])
    p.add_argument("--mechanism", required=True, help="a local-DP method: lbu, lsp, lbd, lba, lpu, lpd, lpa, plbu")
    p.add_argument("--epsilon", type=float, help="homogeneous methods: epsilon")
    p.add_argument("--window", type=int, help="homogeneous methods: window w")
    p.add_argument("--max-window", type=int, default=1000)
    p.add_argument("--bins", type=int, default=2, help="the domain size d of the devices' values")
    cli.add_mechanism_parameter_option(p)
    p.add_argument("--users", required=True, help="the devices: ID per line, or ID<TAB>fixed:W,E")
    p.add_argument("--requirement", help="fixed:W,E for every user whose line names none")
    p.add_argument("--requests", required=True, help="directory the request files are written to")
    p.add_argument("--reports", required=True, help="directory the devices' report files are read from")
    p.add_argument("--output", required=True)
    p.add_argument("--stream", default="default")
    p.add_argument("--slots", type=int, required=True, help="how many slots to release")
    p.add_argument("--round-seconds", type=float, default=5.0, help="deadline of one round of requests")
    p.add_argument("--poll-seconds", type=float, default=0.05)
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


def run(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        ids, requirements = read_users(args.users, args.requirement)
        name, params = cli.mechanism_params(args, args.bins)
        mechanism = make_mechanism(name, **params)
        if not hasattr(mechanism, "start_slot"):
            raise cli.ConfigError(f"{name} is not a local-DP method: client devices need one")
        assign_public_groups(mechanism, ids)
        for directory in (args.requests, args.reports, args.output):
            os.makedirs(directory, exist_ok=True)
    except (cli.ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rng = secure_randomness() if args.insecure_seed is None else insecure_seeded_randomness(args.insecure_seed)
    exchange = Exchange(args.requests, args.reports, args.round_seconds, args.poll_seconds)
    index_of = {user: i for i, user in enumerate(ids)}
    ledger = PrivacyLedger(max(int(requirements.window.max()), 1))
    kinds = {"fresh": 0, "skipped": 0, "nullified": 0}
    rejected_total = 0
    with open(os.path.join(args.output, "releases.jsonl"), "w") as releases, \
            open(os.path.join(args.output, "dead_letters.jsonl"), "w") as dead:
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
        ledger.close()
        late = exchange.late()
        dead.writelines(json.dumps({"reason": "late: the round had closed", "record": record}, sort_keys=True) + "\n"
                        for record in late)
    used = exchange.received - rejected_total
    report = {"mechanism": name, "trust": "local_client", "slots": args.slots, **kinds,
              "requests_sent": exchange.sent, "reports_read": exchange.received + len(late), "reports_used": used,
              "dead_letters": rejected_total, "late": len(late), "ledger_violations": ledger.violation_count,
              "max_window_usage_ratio": ledger.max_usage_ratio}
    report["reconciles"] = report["reports_read"] == used + rejected_total + len(late)
    with open(os.path.join(args.output, "report.json"), "w") as out:
        json.dump(report, out, indent=2, sort_keys=True)
    return 0 if ledger.ok else 1


if __name__ == "__main__":
    sys.exit(run())
