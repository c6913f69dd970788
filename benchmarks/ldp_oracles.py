"""Speed of the simulated users of local DP: reports per second user by user, and the aggregate shortcut.

``python -m benchmarks.ldp_oracles --users 1000000 --bins 100 --epsilon 1`` prints one JSON object: the
oracle the Ada rule picks, reports per second of :func:`perturb_values` (best of ``--repeats``), seconds of
one :func:`aggregate_counts` call for the same batch, and the device module's reports per second (pure
Python, ``--client-reports`` of them).  The generator is the secure one.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from device import wevent_client
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp import aggregate_counts, oracle_for, perturb_values
from transforms.mechanisms.noise import secure_randomness


def measure(users: int, bins: int, epsilon: str, repeats: int, client_reports: int, oracle: str | None) -> dict:
    """Timings of one configuration (see the module doc)."""
    rng = secure_randomness()
    units = to_units(epsilon)
    frequency_oracle = oracle_for(units, bins, oracle)
    values = np.arange(users, dtype=np.int64) % bins
    true_counts = np.bincount(values, minlength=bins)
    per_user, aggregate = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        perturb_values(frequency_oracle, values, rng)
        per_user.append(time.perf_counter() - start)
        start = time.perf_counter()
        aggregate_counts(frequency_oracle, true_counts, rng)
        aggregate.append(time.perf_counter() - start)
    start = time.perf_counter()
    for k in range(client_reports):
        wevent_client.perturb(frequency_oracle.kind, k % bins, units, bins)
    client_seconds = time.perf_counter() - start
    return {"users": users, "bins": bins, "epsilon": epsilon, "oracle": frequency_oracle.kind,
            "generator": type(rng).__name__, "per_user_seconds": min(per_user),
            "per_user_reports_per_second": users / min(per_user), "aggregate_seconds": min(aggregate),
            "client_reports_per_second": client_reports / client_seconds if client_reports else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ldp_oracles", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--bins", type=int, default=100)
    parser.add_argument("--epsilon", default="1")
    parser.add_argument("--oracle", choices=["grr", "oue"], help="force an oracle (default: the Ada rule)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--client-reports", type=int, default=2000)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.users, args.bins, args.epsilon, args.repeats, args.client_reports, args.oracle)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
