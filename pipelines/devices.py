"""A fleet of simulated devices answering the collector's request files (for trying client mode end to end).

    python -m pipelines.devices --users users.txt --requirement fixed:20,1 --requests requests/ \\
        --reports reports/ --values sine --bins 2 --idle-seconds 10

Each device is the device module ``device/wevent_client.py`` as a phone embeds it:
it holds its own value, keeps its own w-event budget and answers a request
with a randomized report, or refuses one its budget cannot pay.  The fleet
watches ``--requests`` for request files (``*.jsonl``, written whole by
``pipelines.collector``), answers each file's requests and writes the reports
to ``--reports`` under the request file's name (``.part``, then renamed).
``--drop P`` leaves a share of requests unanswered (devices offline).

Values: ``sine`` gives each device a value in ``[0, bins)`` that drifts with a
slow sine (deterministic per ``--seed``); ``FILE`` is JSONL ``{"user", "slot",
"value"}`` (a device without a value for a slot repeats its last one, 0
before any).  The randomness of the reports is the device module's own
(``secrets``), as on a phone.  At exit it prints one JSON line: requests
answered, refused by code, dropped.
"""

from __future__ import annotations

import collections
import glob
import json
import logging
import math
import os
import random
import sys
import time
from collections.abc import Sequence

from device import wevent_client
from pipelines import cli, logs
from pipelines.job_report import job_report, output_counts, summary_line, write_job_report
from pipelines.collector import read_users

_LOGGER = logging.getLogger("pipelines.devices")


def parser():
    p = cli.job_parser("wevent devices", __doc__.split("\n\n")[0])
    p.add_argument("--users", required=True, help="ID per line, or ID<TAB>fixed:W,E")
    p.add_argument("--requirement", help="fixed:W,E for every user whose line names none")
    p.add_argument("--requests", required=True, help="directory the collector writes its request files to")
    p.add_argument("--reports", required=True, help="directory the devices write their report files to")
    p.add_argument("--output", help="directory for report.json and dead_letters-devices.jsonl (the refused "
                   "requests); without it only the summary line")
    p.add_argument("--values", default="sine", help="sine, or a JSONL file of {user, slot, value}")
    p.add_argument("--bins", type=int, default=2, help="the domain size d of the devices' values")
    p.add_argument("--seed", type=int, default=0, help="the sine values' phases (not the reports' randomness)")
    p.add_argument("--drop", type=float, default=0.0, help="share of requests left unanswered")
    p.add_argument("--poll-seconds", type=float, default=0.05, help="how often to look for request files")
    p.add_argument("--idle-seconds", type=float, default=10.0, help="stop after this long without a new file")
    return p


def value_source(spec: str, bins: int, seed: int):
    """``value(user, slot)`` for the fleet."""
    if spec == "sine":
        phases = random.Random(seed)
        cache: dict[str, float] = {}

        def sine(user: str, slot: int) -> int:
            phase = cache.setdefault(user, phases.random())
            level = (0.5 + 0.5 * math.sin(slot / 8 + 2 * math.pi * phase)) * bins
            return min(int(level), bins - 1)
        return sine
    table: dict[str, dict[int, int]] = collections.defaultdict(dict)
    with open(spec) as lines:
        for line in lines:
            if line.strip():
                record = json.loads(line)
                table[record["user"]][int(record["slot"])] = int(record["value"])

    def from_file(user: str, slot: int) -> int:
        known = [t for t in table.get(user, {}) if t <= slot]
        return table[user][max(known)] if known else 0
    return from_file


def run(argv: Sequence[str] | None = None) -> int:
    logs.configure(False)
    try:
        args = cli.parse_flags(parser(), sys.argv[1:] if argv is None else argv)
        if args.output is not None:
            cli.check_output(args.output)
        ids, requirements = read_users(args.users, args.requirement)
        value = value_source(args.values, args.bins, args.seed)
    except (cli.ConfigError, ValueError, OSError) as error:
        return cli.fail(str(error))
    started = time.monotonic()
    _LOGGER.info("%d devices answering requests from %s into %s (stop after %g s without a new file, or Ctrl-C)",
                 len(ids), args.requests, args.reports, args.idle_seconds)
    devices = {user: wevent_client.WEventClient(user, int(w), wevent_client.units_to_decimal_string(int(e)),
                                                (lambda u: lambda slot: value(u, slot))(user))
               for user, w, e in zip(ids, requirements.window, requirements.epsilon_units)}
    os.makedirs(args.reports, exist_ok=True)
    drop = random.Random(args.seed + 1)
    done: set[str] = set()
    counts: collections.Counter = collections.Counter()
    idle_since = time.monotonic()
    refused: list[dict] = []
    methods: set[str] = set()
    stopped = None
    try:
        _answer(args, devices, drop, done, counts, refused, methods, idle_since, started)
    except KeyboardInterrupt:
        stopped = "interrupted"
    print(json.dumps(dict(sorted(counts.items()))))
    unanswered = counts["dropped"]
    dead = sum(n for name, n in counts.items() if name.startswith("refused_") or name == "unknown_user")
    read = counts["answered"] + unanswered + dead
    if args.output is None:
        _LOGGER.info("devices done in %.1f s: %d requests read = %d answered + %d refused + %d unanswered; "
                     "reports in %s (no --output: no report.json)", time.monotonic() - started, read,
                     counts["answered"], dead, unanswered, args.reports)
        return 130 if stopped else 0
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "dead_letters-devices.jsonl"), "w") as out:
        out.writelines(json.dumps(letter, sort_keys=True) + "\n" for letter in refused)
    outputs = output_counts(args.output)
    outputs.update(users_in_ledger=len(ids), slots=0, fresh=0, skipped=0, nullified=0)
    report = write_job_report(args.output, job_report(
        "devices", ",".join(sorted(methods)) or "none asked", outputs, read, counts["answered"], 0,
        time.monotonic() - started,
        unanswered=unanswered, trust="local_client", stopped=stopped))
    _LOGGER.info("%s", summary_line(report, args.output))
    return 130 if stopped else 0


def _answer(args, devices: dict, drop: random.Random, done: set, counts: collections.Counter, refused: list,
            methods: set, idle_since: float, started: float) -> None:
    """Answer every new request file until ``--idle-seconds`` pass without one; refusals go to ``refused``."""
    last_progress = started
    while time.monotonic() - idle_since < args.idle_seconds:
        new = [p for p in sorted(glob.glob(os.path.join(args.requests, "*.jsonl"))) if p not in done]
        for path in new:
            done.add(path)
            reports = []
            with open(path) as lines:
                for line in filter(str.strip, lines):
                    request = json.loads(line)
                    methods.add(str(request.get("method")))
                    device = devices.get(request.get("user"))
                    if device is None:
                        counts["unknown_user"] += 1
                        refused.append({"reason": "unknown user: no such device", "record": line.strip(),
                                        "stage": "device", "stream": request.get("stream"), "user": None})
                    elif drop.random() < args.drop:
                        counts["dropped"] += 1
                    else:
                        try:
                            reports.append(device.respond(request))
                            counts["answered"] += 1
                        except wevent_client.RequestRefused as refusal:
                            counts[f"refused_{refusal.code}"] += 1
                            refused.append({"reason": f"refused ({refusal.code}): {refusal}", "record": line.strip(),
                                            "stage": "device", "stream": request.get("stream"),
                                            "user": request.get("user")})
            target = os.path.join(args.reports, os.path.basename(path)[:-len(".jsonl")] + "-devices.jsonl")
            with open(target + ".part", "w") as out:
                out.writelines(json.dumps(report, sort_keys=True) + "\n" for report in reports)
            os.replace(target + ".part", target)
        if new:
            idle_since = time.monotonic()
        else:
            time.sleep(args.poll_seconds)
        if time.monotonic() - last_progress >= logs.PROGRESS_SECONDS:
            last_progress = time.monotonic()
            _LOGGER.info("devices: %.0f s, %d request files, %d answered", last_progress - started, len(done),
                         counts["answered"])


if __name__ == "__main__":
    sys.exit(run())
