"""Cost of the numeric clients in Beam: the per-user client stage and the central path vs exact per-slot means.

    python -m benchmarks.numeric_pipeline --records 1000000 --mechanism capp

generates ``records`` JSON lines (``users`` users, a real value in ``[0, 100]`` each, over ``slots`` one-minute
slots), then runs on FnApiRunner, one after the other in this process, each reading the same file with the
same parser (``ValueToGrid``) and writing release files:

* clients: ``PrivateNumericClients`` (each user's client in the per-user stage, exact combine, per-user ledger);
* central: ``PrivateStreamHistogram(numeric=...)`` (the release stage simulates the users, per-user ledger);
* baseline: exact (NOT private) mean per slot.

Prints one JSON object: each run's fastest wall and CPU seconds over ``--repeats`` (alternating) and the ratios
to the baseline.  ``--mechanism a,b,c`` runs several methods beside the same baseline (their times and ratios
under ``"methods"``); ``--kinds baseline,clients`` leaves out the central path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import apache_beam as beam
import numpy as np

from benchmarks.pipeline import SLOT_SECONDS, cpu_seconds, pipeline
from transforms.declarations import RequirementPolicy
from transforms.lines import ReadLines
from transforms.mechanisms import FixedRequirement
from transforms.numeric_clients import PrivateNumericClients
from transforms.numeric_events import NumericDomain, ValueToGrid
from transforms.parse import ParseConfig, ParseEvents
from transforms.private_histogram import PrivateStreamHistogram
from transforms.sinks import WriteRecords

DOMAIN = NumericDomain(0.0, 100.0, "clip")
WINDOW, EPSILON = 10, 1.0


def write_input(path: str, records: int, users: int, slots: int, seed: int = 0) -> None:
    """Random numeric events, written in chunks (not timed): each user at most once per slot, mostly."""
    gen = np.random.default_rng(seed)
    with open(path, "w") as out:
        for start in range(0, records, 200_000):
            n = min(200_000, records - start)
            index = np.arange(start, start + n)
            who, slot = index % users, index // users % slots
            when = slot * SLOT_SECONDS + gen.uniform(0, SLOT_SECONDS - 1, n).round(3)
            value = (50 + 30 * np.sin(slot / 7 + who) + gen.normal(0, 5, n)).round(4)
            out.write("".join(f'{{"user": "u{u}", "time": {t}, "value": {v}}}\n' for u, t, v in zip(who, when, value)))


def mean_record(element) -> dict:
    (stream, slot), mean = element
    return {"stream": stream, "slot": slot, "slot_start": slot * SLOT_SECONDS, "slot_end": (slot + 1) * SLOT_SECONDS,
            "mechanism": "exact", "mechanism_slot": slot, "histogram": [], "kind": "fresh", "epsilon": "0",
            "predicted_error": 0.0, "registered_users": 0, "statistic": "mean",
            "estimate": [DOMAIN.low + DOMAIN.width * mean / DOMAIN.steps], "trust": "central",
            "figures": {}}


def events_of(p, source: str):
    return (p | ReadLines(source) | ParseEvents(ParseConfig(bins=DOMAIN.steps + 1, to_bin=ValueToGrid(DOMAIN)))).events


def run(kind: str, mechanism: str, source: str, output: str) -> float:
    start = time.perf_counter()
    policy = RequirementPolicy(default=FixedRequirement(window=WINDOW, epsilon=EPSILON))
    params = {"epsilon": EPSILON, "window": WINDOW}
    with pipeline() as p:
        events = events_of(p, source)
        if kind == "clients":
            releases = (events | PrivateNumericClients(mechanism, SLOT_SECONDS, DOMAIN, mechanism_params=params,
                                                       policy=policy))["releases"]
        elif kind == "central":
            releases = (events | PrivateStreamHistogram(mechanism, SLOT_SECONDS, 1, mechanism_params=params,
                                                        policy=policy, numeric=DOMAIN))["releases"]
        else:
            releases = (events
                        | beam.Map(lambda e: ((e.stream, int(e.time // SLOT_SECONDS)), e.value))
                        | beam.CombinePerKey(beam.combiners.MeanCombineFn())
                        | beam.Map(mean_record))
        releases | WriteRecords(os.path.join(output, kind), "release")
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.numeric_pipeline",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=1_000)
    parser.add_argument("--mechanism", default="capp", help="a numeric method, or several separated by commas")
    parser.add_argument("--kinds", default="baseline,clients,central", help="which of baseline, clients, central")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    mechanisms = args.mechanism.split(",")
    kinds = args.kinds.split(",")
    if "baseline" not in kinds or not set(kinds) <= {"baseline", "clients", "central"}:
        parser.error("--kinds: baseline and any of clients, central")
    runs = [("baseline", None)] + [(kind, m) for m in mechanisms for kind in kinds if kind != "baseline"]
    times: dict = {run_: [] for run_ in runs}
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "events.jsonl")
        write_input(source, args.records, args.users, args.slots)
        for _ in range(args.repeats):
            for kind, mechanism in runs:
                cpu = cpu_seconds()
                wall = run(kind, mechanism or mechanisms[0], source, work)
                times[(kind, mechanism)].append((wall, cpu_seconds() - cpu))
    best = {run_: min(walls) for run_, walls in times.items()}
    baseline = best[("baseline", None)][0]
    result = {"records": args.records, "users": args.users, "slots": args.slots, "mechanism": args.mechanism,
              "repeats": args.repeats, "baseline_seconds": baseline,
              "baseline_cpu_seconds": best[("baseline", None)][1]}
    methods = {m: {**{f"{kind}_seconds": best[(kind, m)][0] for kind in kinds if kind != "baseline"},
                   **{f"{kind}_cpu_seconds": best[(kind, m)][1] for kind in kinds if kind != "baseline"},
                   **{f"{kind}_ratio": best[(kind, m)][0] / baseline for kind in kinds if kind != "baseline"}}
               for m in mechanisms}
    result.update(methods[mechanisms[0]] if len(mechanisms) == 1 else {"methods": methods})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
