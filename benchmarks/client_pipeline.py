"""The client-report replay beside a non-private pipeline that reads and counts the same reports.

    python -m benchmarks.client_pipeline --users 50000 --slots 20 --rounds 3 --json

Writes ``users × slots`` LBU report records (the devices' GRR reports at
ε/w, made with the core's randomizer so that generating a million is quick;
the records are what ``device/wevent_client.py`` sends), then times, in alternating
rounds, ``pipelines.client_replay`` (private: every report checked against its
round, the estimate, the ledger) and ``pipelines.client_replay --baseline``
(parse and count per slot and payload), each in a fresh process, on the same
files.  Prints per-run wall and CPU seconds, their medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from transforms.mechanisms.budget import to_units, units_to_decimal_string
from transforms.mechanisms.ldp.oracles import oracle_for
from transforms.mechanisms.ldp.simulate import perturb_values
from transforms.mechanisms.noise import insecure_seeded_randomness


def write_reports(directory: str, users: int, slots: int, epsilon: float, window: int, bins: int) -> int:
    """LBU reports of ``users`` devices over ``slots`` slots in one JSONL file; returns the number of records."""
    units = to_units(epsilon) // window
    oracle = oracle_for(units, bins)
    rng, gen = insecure_seeded_randomness(1), np.random.default_rng(2)
    common = {"request_id": None, "stream": "bench", "method": "lbu/m2", "oracle": oracle.kind,
              "epsilon": units_to_decimal_string(units),
              "realised_epsilon": units_to_decimal_string(oracle.realised_units), "domain_size": bins}
    ids = [f"device-{i:07d}" for i in range(users)]
    with open(os.path.join(directory, "users.txt"), "w") as out:
        out.writelines(user + "\n" for user in ids)
    with open(os.path.join(directory, "reports.jsonl"), "w") as out:
        for slot in range(1, slots + 1):
            reports = perturb_values(oracle, gen.integers(0, bins, users), rng)
            rows = reports[:, None] if oracle.kind == "grr" else reports.astype(np.int64)
            out.writelines(json.dumps({**common, "user": user, "slot": slot, "report": row.tolist()}) + "\n"
                           for user, row in zip(ids, rows))
    return users * slots


def _timed(command: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_seconds": time.perf_counter() - start, "cpu_seconds": cpu}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.client_pipeline", description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--slots", type=int, default=20)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--bins", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        records = write_reports(directory, args.users, args.slots, args.epsilon, args.window, args.bins)
        common = [sys.executable, "-m", "pipelines.client_replay", "--input", os.path.join(directory, "reports.jsonl"),
                  "--users", os.path.join(directory, "users.txt"),
                  "--requirement", f"fixed:{args.window},{args.epsilon}", "--mechanism", "lbu",
                  "--epsilon", str(args.epsilon), "--window", str(args.window), "--bins", str(args.bins)]
        runs = {"private": [], "baseline": []}
        for round_ in range(args.rounds):
            for kind in (("private", "baseline") if round_ % 2 == 0 else ("baseline", "private")):
                output = os.path.join(directory, f"out-{kind}-{round_}")
                runs[kind].append(_timed(common + ["--output", output] + (["--baseline"] if kind == "baseline" else [])))
            with open(os.path.join(directory, f"out-private-{round_}", "report.json")) as report:
                checked = json.load(report)
            if not (checked["reconciles"] and checked["records_used"] == records and checked["ledger_violations"] == 0):
                raise SystemExit(f"the private run did not use every report: {checked}")
    medians = {kind: {key: statistics.median(run[key] for run in values) for key in ("wall_seconds", "cpu_seconds")}
               for kind, values in runs.items()}
    result = {"records": records, "users": args.users, "slots": args.slots, "runs": runs, "medians": medians,
              "private_over_baseline_wall": medians["private"]["wall_seconds"] / medians["baseline"]["wall_seconds"],
              "private_over_baseline_cpu": medians["private"]["cpu_seconds"] / medians["baseline"]["cpu_seconds"]}
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
