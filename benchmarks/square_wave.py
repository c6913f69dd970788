"""Speed of the discretised Square Wave: reports per second for a batch of users, and on the device.

``python -m benchmarks.square_wave --users 1000000 --epsilon 1`` prints one JSON object: reports per second
of :meth:`SquareWave.perturb` with the secure generator (best of ``--repeats``) and of the device module's
pure-Python randomizer (``--client-reports`` of them).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from device import wevent_client
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import secure_randomness
from transforms.mechanisms.numeric import SquareWave


def measure(users: int, epsilon: str, grid_bits: int, repeats: int, client_reports: int) -> dict:
    """Timings of one configuration (see the module doc)."""
    rng = secure_randomness()
    mechanism = SquareWave.create(to_units(epsilon), grid_bits)
    values = np.linspace(0.0, 1.0, users)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        mechanism.perturb(values, rng)
        seconds.append(time.perf_counter() - start)
    device = wevent_client.SquareWave(to_units(epsilon), grid_bits)
    start = time.perf_counter()
    for k in range(client_reports):
        device.perturb(k / client_reports)
    client_seconds = time.perf_counter() - start
    return {"users": users, "epsilon": epsilon, "grid_bits": grid_bits, "generator": type(rng).__name__,
            "seconds": min(seconds), "reports_per_second": users / min(seconds),
            "client_reports_per_second": client_reports / client_seconds if client_reports else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.square_wave", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--epsilon", default="1")
    parser.add_argument("--grid-bits", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--client-reports", type=int, default=20_000)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.users, args.epsilon, args.grid_bits, args.repeats, args.client_reports)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
