"""LDP-IDS's LBD and LPD per slot, ours beside the unofficial Python port, in one run (issue #14).

    nice -n 10 python -m benchmarks.ldp_port --port-mirror /work/.mirror/pumpkinbo+LDP-IDS/repo

prints one JSON object.  The port (https://github.com/pumpkinbo/LDP-IDS, spec ldp_ids.md §9) is not part
of the project: its mirror (a bare git directory, ``--port-mirror`` or ``$LDP_IDS_PORT_MIRROR``) is
materialised into a temporary directory outside the repository for the run only and imported from there;
without it ``"port"`` says ``{"available": false, "reason": ...}`` and only our side is measured.

The stream is Sin (spec §8.1): ``p_t = 0.05 sin(0.01 t) + 0.075`` and, at each slot, a fresh uniform subset
of exactly ``round(p_t n)`` users holds value 1, the rest 0 (``d = 2``).  Every round runs, for LBD and
LPD, the port once and ours once per simulation (``users``, ``aggregate``), the port first in even rounds
and last in odd ones, so the shared machine's noise falls on both.  Reported per implementation: the
median over rounds of seconds per slot (every round listed), and per round the ratio port / ours with
its median, minimum and maximum.

* Ours: ``make_mechanism(method, bins=2, epsilon, window, simulation)`` stepped by ``Engine`` with the
  secure generator, everyone reporting (``SlotBatch.of(range(n), ...)``, requirements ``(w, ε)`` at slot 1),
  as ``benchmarks/core.py`` times the core: ``Engine.mechanism_seconds`` after the warm-up slot 1 (the
  registration of every user), divided by the slots after it.
* The port: its ``LBD``/``LPD(u, d, w, e, rounds=1, c, beta=0.5)`` called once on the whole stream
  (``u`` is ``(n, T)`` with values ``1..d``, ``c`` the ``(d, T)`` true counts: inputs adapted, code
  untouched); its wall time divided by ``T``.  It has no warm-up to drop, its slot 1 (a forced
  publication) included, and it draws from numpy's global generator, seeded per round here.

MRE (spec §8.5: all bins, ``δ = 1/n``, i.e. ``|r − c| / max(c, 1)`` in counts) is reported for both as a
sanity check: the port's is the first value it returns.  ``port.depends_on_data`` runs the port at
``--check-users`` on the stream and on its complement (every value flipped), both scored against the
stream's true counts.  A port whose estimates follow its input scores about what the flipped stream's
exact counts score (``mre_if_following_flipped``: several, as the 1-bin holds 5-15% of the users); one
that ignored its input would score as on the true stream.  ``depends`` says the flipped MRE is nearer the
first.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable

import numpy as np

from transforms.mechanisms import SlotBatch
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import secure_randomness
from transforms.mechanisms.registry import make_mechanism
from transforms.mechanisms.requirements import FixedRequirement, FixedRequirements
from transforms.mechanisms.synthetic import sin_probabilities

BINS = 2
METHODS = ("lbd", "lpd")
SIMULATIONS = ("users", "aggregate")
PORT_FILES = ("Var.py", "ldp_protocol/__init__.py", "ldp_protocol/grr.py", "ldp_protocol/oue.py",
              "budget_division/LBD.py", "budget_division/LPD.py")
"""The port's files its LBD and LPD import (spec §9); nothing else of it is read."""
PORT_ENV = "LDP_IDS_PORT_MIRROR"
PORT_ABSENT = "the unofficial port was not measured"
"""Starts ``port.reason`` whenever the port could not be run (CI has no mirror)."""


def sin_stream(users: int, slots: int, seed: int) -> np.ndarray:
    """The ``(slots, users)`` 0/1 values of spec §8.1's Sin: exactly ``round(p_t n)`` ones at slot ``t``."""
    gen = np.random.default_rng(seed)
    ones = np.rint(sin_probabilities(slots) * users).astype(np.int64)
    stream = np.zeros((slots, users), np.int8)
    for t, count in enumerate(ones):
        stream[t, gen.permutation(users)[:count]] = 1
    return stream


def true_counts(stream: np.ndarray) -> np.ndarray:
    """``(slots, d)`` true counts of ``stream``."""
    ones = stream.sum(axis=1, dtype=np.int64)
    return np.stack([stream.shape[1] - ones, ones], axis=1)


def mre(released_counts: np.ndarray, true: np.ndarray) -> float:
    """Spec §8.5: mean over slots and all bins of ``|r − c| / max(c, 1)`` (counts; ``δ = 1/n`` in frequencies)."""
    return float(np.mean(np.abs(released_counts - true) / np.maximum(true, 1)))


def measure_ours(method: str, simulation: str, stream: np.ndarray, epsilon: float, window: int) -> dict:
    """Seconds per slot after the warm-up slot 1, and the MRE over every slot, of our ``method``."""
    slots, users = stream.shape
    mechanism = make_mechanism(method, bins=BINS, epsilon=epsilon, window=window, simulation=simulation)
    engine = Engine(mechanism, secure_randomness())
    requirements = FixedRequirements.uniform(FixedRequirement(window, epsilon), users)
    released = np.empty((slots, BINS))
    for t in range(slots):
        release = engine.step(SlotBatch.of(range(users), stream[t], requirements if t == 0 else None))
        released[t] = release.estimate * users  # frequencies of everyone registered, as counts
        if t == 0:
            engine.mechanism_seconds = 0.0
    return {"seconds_per_slot": engine.mechanism_seconds / (slots - 1),
            "mre": mre(released, true_counts(stream))}


class Port:
    """The port's LBD and LPD, imported from a temporary directory its mirror's files are written to."""

    def __init__(self, mirror: str):
        self.commit = _git(mirror, "rev-parse", "HEAD").decode().strip()
        self._directory = tempfile.TemporaryDirectory(prefix="ldp_ids_port_")
        sys.path.insert(0, self._directory.name)  # its modules import each other by top-level name
        before = set(sys.modules)
        try:
            with tarfile.open(fileobj=io.BytesIO(_git(mirror, "archive", "HEAD", *PORT_FILES))) as archive:
                archive.extractall(self._directory.name, filter="data")
            self.functions: dict[str, Callable] = {
                method: getattr(importlib.import_module(f"budget_division.{method.upper()}"), method.upper())
                for method in METHODS}
        except BaseException:
            self._modules = set(sys.modules) - before
            self.close()
            raise
        self._modules = set(sys.modules) - before

    def close(self) -> None:
        """Forget its modules and delete its files."""
        for name in self._modules:
            del sys.modules[name]
        sys.path.remove(self._directory.name)
        self._directory.cleanup()

    def measure(self, method: str, stream: np.ndarray, epsilon: float, window: int, seed: int,
                counts: np.ndarray | None = None) -> dict:
        """Wall seconds per slot of one call on the whole stream, and the MRE it returns (against
        ``counts``, the stream's own true counts unless given)."""
        u = stream.T.astype(np.int64) + 1  # (n, T), values 1..d
        c = (true_counts(stream) if counts is None else counts).T.astype(np.float64)
        np.random.seed(seed)
        start = time.perf_counter()
        errors = self.functions[method](u, BINS, window, epsilon, 1, c, 0.5)
        seconds = time.perf_counter() - start
        return {"seconds_per_slot": seconds / stream.shape[0], "mre": float(errors[0])}

    def depends_on_data(self, users: int, slots: int, epsilon: float, window: int, seed: int) -> dict:
        """MRE of each method on the Sin stream and on its complement, both against the true counts."""
        stream = sin_stream(users, slots, seed)
        counts = true_counts(stream)
        followed = mre(true_counts(1 - stream), counts)
        result = {}
        for method in METHODS:
            true = self.measure(method, stream, epsilon, window, seed)["mre"]
            flipped = self.measure(method, 1 - stream, epsilon, window, seed, counts)["mre"]
            result[method] = {"mre": true, "mre_flipped": flipped,
                              "depends": abs(flipped - followed) < abs(flipped - true)}
        return {"users": users, "mre_if_following_flipped": followed, "methods": result,
                "all": all(m["depends"] for m in result.values())}


def _git(mirror: str, *arguments: str) -> bytes:
    return subprocess.run(["git", "--git-dir", mirror, *arguments], check=True, capture_output=True).stdout


def open_port(mirror: str | None) -> tuple[Port | None, str | None]:
    """The port from ``mirror``, or None and why not."""
    if not mirror:
        return None, f"{PORT_ABSENT}: no mirror given (--port-mirror or ${PORT_ENV})"
    try:
        return Port(mirror), None
    except (OSError, subprocess.CalledProcessError, ImportError, AttributeError, tarfile.TarError) as error:
        detail = error.stderr.decode().strip() if isinstance(error, subprocess.CalledProcessError) else error
        return None, f"{PORT_ABSENT}: cannot load it from {mirror!r}: {detail}"


def summary(runs: list[dict]) -> dict:
    """Median seconds per slot and MRE over rounds, with every round's."""
    return {"seconds_per_slot": statistics.median(r["seconds_per_slot"] for r in runs),
            "seconds_per_slot_runs": [r["seconds_per_slot"] for r in runs],
            "mre": statistics.median(r["mre"] for r in runs), "mre_runs": [r["mre"] for r in runs]}


def ratios(port_runs: list[dict], our_runs: list[dict]) -> dict:
    """Port / ours seconds per slot in each round (same round, so the same machine load), and their spread."""
    each = [p["seconds_per_slot"] / o["seconds_per_slot"] for p, o in zip(port_runs, our_runs)]
    return {"median": statistics.median(each), "min": min(each), "max": max(each), "runs": each}


def run(users: int, slots: int, rounds: int, epsilon: float, window: int, seed: int, port: Port | None) -> dict:
    """Every round's measurements, alternating which implementation goes first."""
    stream = sin_stream(users, slots, seed)
    ours = {(m, s): [] for m in METHODS for s in SIMULATIONS}
    theirs = {m: [] for m in METHODS}
    for r in range(rounds):
        for method in METHODS:
            port_first = r % 2 == 0
            if port is not None and port_first:
                theirs[method].append(port.measure(method, stream, epsilon, window, seed + r))
            for simulation in SIMULATIONS:
                ours[method, simulation].append(measure_ours(method, simulation, stream, epsilon, window))
            if port is not None and not port_first:
                theirs[method].append(port.measure(method, stream, epsilon, window, seed + r))
    methods = {}
    for method in METHODS:
        methods[method] = {"ours": {s: summary(ours[method, s]) for s in SIMULATIONS}}
        if port is not None:
            methods[method]["port"] = summary(theirs[method])
            methods[method]["port_over_ours"] = {s: ratios(theirs[method], ours[method, s]) for s in SIMULATIONS}
    return methods


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ldp_port", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--slots", type=int, default=200, help="T, slots of the Sin stream (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="of the stream (and of the port's global generator)")
    parser.add_argument("--port-mirror", default=os.environ.get(PORT_ENV),
                        help=f"bare git directory of pumpkinbo/LDP-IDS (default ${PORT_ENV})")
    parser.add_argument("--check-users", type=int, default=20_000,
                        help="users of the port's data-dependence check (default 20000; 0 skips it)")
    args = parser.parse_args(argv)
    if min(args.users, args.rounds, args.window) < 1 or args.slots < 2 or args.check_users < 0:
        parser.error("--users, --rounds and --window must be at least 1, --slots at least 2 (slot 1 is our "
                     "warm-up), --check-users at least 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    port, reason = open_port(args.port_mirror)
    try:
        result = {"users": args.users, "bins": BINS, "slots": args.slots, "rounds": args.rounds,
                  "epsilon": args.epsilon, "window": args.window, "stream": "sin", "seed": args.seed,
                  "methods": run(args.users, args.slots, args.rounds, args.epsilon, args.window, args.seed, port)}
        if port is None:
            result["port"] = {"available": False, "reason": reason}
        else:
            result["port"] = {"available": True, "repository": "https://github.com/pumpkinbo/LDP-IDS",
                              "commit": port.commit}
            if args.check_users:
                result["port"]["depends_on_data"] = port.depends_on_data(
                    args.check_users, args.slots, args.epsilon, args.window, args.seed)
    finally:
        if port is not None:
            port.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
