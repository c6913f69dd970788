"""Speed and memory of the mechanism core, one mechanism per child process.

    python -m benchmarks.core --users 10000 --slots 200 --bins 2 --json

prints ``{"users": N, "bins": D, "slots": T, "mechanisms": {"pbd": {"seconds_per_slot": ...,
"peak_memory_bytes": ...}, ...}}``.  Each mechanism runs in ``--repeats``
(default 3) fresh processes, one after another, and ``seconds_per_slot`` is
the fastest of them (as ``timeit`` reports: the other tenants of a shared
machine only ever add time); every run is listed in ``seconds_per_slot_runs``.

The local-DP methods (LDP-IDS, PLBU) simulate their users' reports as
``--simulation`` says: ``aggregate`` (default: the exact counts a batch of
reports sums to, spec ldp_ids.md §3.5) or ``users`` (every reporter's
randomizer); ``--epsilon`` and ``--window`` set their ``(ε, w)`` (the LDP-IDS
paper's default is ``--epsilon 1 --window 20``).

Every user reports every slot (the papers' setting, so batches are
``SlotBatch.of(range(n), ...)``) and about 10% of them move to another bin
per slot; users follow the papers' ten requirement types around
``(E, w) = (0.6, window)``, and the dynamic mechanisms get per-type forward
requirements redrawn every slot; DPI's users all declare the lifetime budget
``E`` (its defaults: pool N = 2,000, r = 20 draws, the accumulative query).
Noise comes from the secure generator, as in production.  Data generation is outside the timed region;
``peak_memory_bytes`` is the child process's maximum resident set size
(interpreter and numpy included).

With ``--tricks`` each mechanism also runs with each speed trick of :data:`TRICKS`
turned off, one at a time, and ``"without": {"<trick>": {"seconds_per_slot": ...}}``
sits beside its numbers: a trick stays only while it shows a gain there.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import numpy as np

from transforms.mechanisms import (MECHANISMS, Estimate, Family, LifetimeRequirements, SlotBatch, TrustModel, obs,
                                   sampling)
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import secure_randomness
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS
from transforms.mechanisms.registry import mechanism_class, mechanism_for_setup
from transforms.mechanisms.scenarios import WINDOW_GRID, PaperSetup


def peak_memory_bytes() -> int:
    """This process's maximum resident set size so far (interpreter and numpy included)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


TRICKS = {
    "pool": "each generator's pool of pre-drawn noise (noise.pool): off, every draw is made when asked",
    "cache": "OBS and coin thresholds answered from a cache for per-cohort inputs up to obs.CACHED_ROWS rows",
    "every_user": "users given as SlotBatch.of(range(n)), known to be 0..n-1 without a scan: off, an array",
}
"""Speed tricks that must show a number here (``--tricks``)."""


def _turn_off(trick: str) -> None:
    """Disable a module-level trick for this (child) process."""
    if trick == "cache":
        obs.CACHED_ROWS = sampling.CACHED_ROWS = -1  # every input is recomputed


def measure(name: str, users: int, slots: int, bins: int, window: int, seed: int = 0,
            without: tuple[str, ...] = (), epsilon: float = 0.6, simulation: str = "aggregate") -> dict:
    """Time ``slots`` steps of ``name`` (after one warm-up slot) in this process, without the tricks named."""
    for trick in without:
        _turn_off(trick)
    gen = np.random.default_rng(seed)
    grid = tuple(w for w in WINDOW_GRID if w <= window) or (window,)
    setup = PaperSetup(users=users, epsilon=epsilon, window=window, window_grid=grid)
    local = MECHANISMS[name].trust is not TrustModel.CENTRAL
    numeric = name in NUMERIC_STREAMS
    if numeric:  # seed 003's numeric streams: one mean of real values in [0, 1], every user's client simulated
        mechanism = mechanism_for_setup(name, setup, 1, low=0.0, high=1.0)
    else:
        mechanism = mechanism_for_setup(name, setup, bins, **({"simulation": simulation} if local else {}))
    dynamic = Family.of(name) is Family.DYNAMIC
    declarations = setup.dynamic_declarations(gen, slots + 1) if dynamic else None
    fixed = None if dynamic else setup.fixed(gen)
    if Family.of(name) is Family.LIFETIME:  # DPI: everyone's lifetime budget is the set-up's E
        fixed = LifetimeRequirements.of(np.full(users, epsilon))
    draw = (lambda size: gen.random(size)) if numeric else (lambda size: gen.integers(0, bins, size))
    values = draw(users)
    rng = secure_randomness()
    if "pool" in without:
        rng._noise_pool = None
    every_user = range(users) if "every_user" not in without else np.arange(users)
    engine = Engine(mechanism, rng)
    for t in range(slots + 1):
        movers = gen.random(users) < 0.1
        values[movers] = draw(int(movers.sum()))
        requirements = next(declarations) if dynamic else (fixed if t == 0 else None)
        batch = SlotBatch.of(every_user, values.copy(), requirements)
        engine.step(batch)
        if t == 0:  # slot 1 (registration of every user) is the warm-up
            engine.mechanism_seconds = 0.0
    return {"seconds_per_slot": engine.mechanism_seconds / slots, "peak_memory_bytes": peak_memory_bytes()}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.core", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--bins", type=int, default=2)
    parser.add_argument("--window", type=int, default=200, help="largest requirement window (w <= this)")
    parser.add_argument("--epsilon", type=float, default=0.6, help="the budget E the requirements are drawn around")
    parser.add_argument("--simulation", choices=("aggregate", "users"), default="aggregate",
                        help="how the local-DP methods simulate their users' reports (default aggregate)")
    binned = [name for name, cls in MECHANISMS.items() if cls.estimates is not Estimate.MEAN]  # the data are bins
    parser.add_argument("--mechanisms", default=",".join(binned),
                        help="comma-separated lower-case names (default: every one over bins)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per mechanism (default 3); the fastest is reported, all are listed")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--tricks", action="store_true",
                        help=f"also run each mechanism without each speed trick ({', '.join(TRICKS)})")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--without", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    numeric = list(NUMERIC_STREAMS)  # real values in [0, 1]
    args.names = [_registered(n.strip()) for n in args.mechanisms.split(",") if n.strip()]
    unknown = [n for n in args.names if n not in binned + numeric]
    if unknown:
        parser.error(f"unknown mechanisms {unknown}; choose from {', '.join(binned + numeric)} (these streams are "
                     "bins, or real values for the numeric streams: the other mean-estimating methods take neither)")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.without = tuple(t for t in args.without.split(",") if t)
    if set(args.without) - TRICKS.keys():
        parser.error(f"unknown tricks {sorted(set(args.without) - TRICKS.keys())}; choose from {', '.join(TRICKS)}")
    return args


def _registered(name: str) -> str:
    """The registered name of ``name`` (an alias such as ``sw`` resolved); unknown names are kept for the error."""
    try:
        return mechanism_class(name).name
    except ValueError:
        return name.lower()


def _runs(args: argparse.Namespace, name: str, without: str = "") -> dict:
    """``--repeats`` child processes of ``name``: the fastest per-slot time, the largest peak, every run."""
    command = [sys.executable, "-m", "benchmarks.core", "--worker", name, "--users", str(args.users),
               "--slots", str(args.slots), "--bins", str(args.bins), "--window", str(args.window),
               "--epsilon", repr(args.epsilon), "--simulation", args.simulation, "--without", without]
    runs = [json.loads(subprocess.run(command, check=True, capture_output=True, text=True)
                       .stdout.strip().splitlines()[-1]) for _ in range(args.repeats)]
    return {"seconds_per_slot": min(run["seconds_per_slot"] for run in runs),
            "peak_memory_bytes": max(run["peak_memory_bytes"] for run in runs),
            "seconds_per_slot_runs": [run["seconds_per_slot"] for run in runs]}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, args.users, args.slots, args.bins, args.window,
                                 without=args.without, epsilon=args.epsilon, simulation=args.simulation)))
        return 0
    results = {}
    for name in args.names:
        results[name] = _runs(args, name)
        if args.tricks:
            results[name]["without"] = {trick: _runs(args, name, trick) for trick in TRICKS}
        if not args.json:
            print(f"{name:>8}: {results[name]['seconds_per_slot'] * 1e3:9.3f} ms/slot, "
                  f"peak {results[name]['peak_memory_bytes'] / 2**20:7.1f} MiB", file=sys.stderr)
            for trick, run in results[name].get("without", {}).items():
                print(f"{'':>8}  without {trick}: {run['seconds_per_slot'] * 1e3:9.3f} ms/slot", file=sys.stderr)
    print(json.dumps({"users": args.users, "bins": args.bins, "slots": args.slots, "window": args.window,
                      "epsilon": args.epsilon, "simulation": args.simulation, "mechanisms": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
