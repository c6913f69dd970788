"""DPI's time per slot and peak memory with and without the pool cache (issue #16: "memory proportional to the
domain, not the pool").

    python -m benchmarks.dpi_pool --bins 10000 --cache-mb 256,0

Each (mechanism, ``pool_cache_mb``) runs in a child process of its own, so that its peak resident memory
(``VmHWM``) is its own: ``--users`` users a slot over ``--bins`` items, N = 2,000, r = 20, ε = 0.6, Algorithm 3.
The first slot (which builds the cache when there is one) is reported apart from the mean of the others.
Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from transforms.mechanisms import LifetimeRequirement, SlotBatch, make_mechanism
from transforms.mechanisms.noise import insecure_seeded_randomness

EPSILON = 0.6


def memory_mb(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), in MB (Linux ``/proc``).

    Not ``ru_maxrss``: that survives ``exec``, so a child would report its parent's peak."""
    with open("/proc/self/status") as handle:
        line = next(line for line in handle if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def measure(name: str, cache_mb: int, bins: int, users: int, slots: int) -> dict:
    """``slots`` steps of ``name`` with ``pool_cache_mb=cache_mb``: the first slot's time, the mean and median of
    the others (ms) and the peak RSS (MB)."""
    mechanism = make_mechanism(name, bins=bins, epsilon=EPSILON, default_requirement=LifetimeRequirement(EPSILON),
                               pool_cache_mb=cache_mb)
    gen, rng, times = np.random.default_rng(0), insecure_seeded_randomness(0), []
    for _ in range(slots):
        batch = SlotBatch.of(range(users), gen.integers(0, bins, users))
        start = time.perf_counter()
        mechanism.step(batch, rng)
        times.append(time.perf_counter() - start)
    rest = np.array(times[1:]) * 1e3
    return {"mechanism": name, "pool_cache_mb": cache_mb, "bins": bins, "first_slot_ms": times[0] * 1e3,
            "ms_per_slot": float(rest.mean()), "median_ms": float(np.median(rest)), "peak_rss_mb": memory_mb("VmHWM"),
            "cached": mechanism._matrix is not None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dpi_pool", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bins", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=12, help="slots per run, the first reported apart")
    parser.add_argument("--mechanisms", default="dpi,dpi-sound")
    parser.add_argument("--cache-mb", default="256,0", help="pool_cache_mb values (0: no cache)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # NAME:CACHE_MB, run in this process (the child's side)
    args = parser.parse_args(argv)
    if args.bins < 2 or args.users < 1 or args.slots < 2:
        parser.error("--bins must be >= 2, --users >= 1 and --slots >= 2")
    if args.one:
        name, cache = args.one.rsplit(":", 1)
        print(json.dumps(measure(name, int(cache), args.bins, args.users, args.slots)))
        return 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    runs = []
    for cache in args.cache_mb.split(","):
        for name in args.mechanisms.split(","):
            done = subprocess.run([sys.executable, "-m", "benchmarks.dpi_pool", "--one", f"{name}:{int(cache)}",
                                   "--bins", str(args.bins), "--users", str(args.users), "--slots", str(args.slots)],
                                  cwd=root, env=env, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout))
    print(json.dumps({"bins": args.bins, "users": args.users, "slots": args.slots, "runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
