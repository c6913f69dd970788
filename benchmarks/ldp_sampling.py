"""Speed of the exact binomials behind the local-DP aggregate shortcut, before and after, in one run.

``python -m benchmarks.ldp_sampling`` prints one JSON object with, in seconds (the best of ``--repeats``:
the other tenants of a shared machine only ever add time):

* ``binomials``: ``--cells`` draws of Binomial(``--trials``, p) in one call, for p = 1/2 and OUE's
  ``q = Q/2**32`` at eps = ``--epsilon``: ``after`` with :func:`transforms.mechanisms.noise.binomial`,
  ``before`` with one exact coin per trial (:func:`~transforms.mechanisms.noise.count_successes`, in
  chunks of ``CHUNK_COINS``, the former ``aggregate_counts`` path);
* ``aggregate_counts``: one slot of ``--users`` reporters, OUE over ``--bins`` values and GRR over
  ``--grr-bins`` values, ``after`` with :func:`~transforms.mechanisms.ldp.aggregate_counts` and
  ``before`` with the former path (OUE: the coins above; GRR: one 64-bit draw per reporter, which is
  :func:`~transforms.mechanisms.ldp.perturb_values` then :func:`~transforms.mechanisms.ldp.report_counts`).

The generator is the secure one.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp import aggregate_counts, oracle_for, perturb_values, report_counts
from transforms.mechanisms.ldp.simulate import CHUNK_COINS
from transforms.mechanisms.noise import binomial, count_successes, secure_randomness


def coin_binomial(trials: np.ndarray, thresholds: np.ndarray, rng) -> np.ndarray:
    """Binomial(trials[i], thresholds[i]/2**32) as explicit coins, at most ``CHUNK_COINS`` per call (the old path)."""
    result = np.zeros(trials.size, np.int64)
    for cell, (n, threshold) in enumerate(zip(trials.tolist(), thresholds.tolist())):
        for start in range(0, n, CHUNK_COINS):
            size = min(CHUNK_COINS, n - start)
            result[cell] += count_successes(np.array([size]), np.array([threshold], np.uint64), rng)[0]
    return result


def best(function, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(trials: int, cells: int, users: int, bins: int, grr_bins: int, epsilon: str, repeats: int,
            before_repeats: int) -> dict:
    """Timings of every configuration (see the module doc)."""
    rng = secure_randomness()
    units = to_units(epsilon)
    oue, grr = oracle_for(units, bins, "oue"), oracle_for(units, grr_bins, "grr")
    n = np.full(cells, trials)
    out: dict = {"generator": type(rng).__name__, "epsilon": epsilon, "binomials": {}, "aggregate_counts": {}}
    for name, numerator, denominator in (("p_half", 1, 2), ("p_oue_q", oue.other, oue.denominator)):
        thresholds = np.full(cells, numerator * (2**32 // denominator), np.uint64)
        out["binomials"][name] = {
            "trials": trials, "cells": cells,
            "after_seconds": best(lambda: binomial(n, numerator, denominator, rng), repeats),
            "before_seconds": best(lambda: coin_binomial(n, thresholds, rng), before_repeats)}
    for oracle in (oue, grr):
        counts = np.bincount(np.arange(users) % oracle.d, minlength=oracle.d)
        if oracle.kind == "oue":
            trials_2d = np.concatenate([counts, users - counts])
            thresholds = np.repeat(np.array([2**31, oracle.other], np.uint64), oracle.d)

            def before(oracle=oracle):
                successes = coin_binomial(trials_2d, thresholds, rng)
                return successes[:oracle.d] + successes[oracle.d:]
        else:
            values = np.repeat(np.arange(oracle.d), counts)

            def before(oracle=oracle):
                return sum(report_counts(oracle, perturb_values(oracle, values[start:start + CHUNK_COINS], rng))
                           for start in range(0, users, CHUNK_COINS))
        out["aggregate_counts"][oracle.kind] = {
            "users": users, "bins": oracle.d,
            "after_seconds": best(lambda: aggregate_counts(oracle, counts, rng), repeats),
            "before_seconds": best(before, before_repeats)}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ldp_sampling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--bins", type=int, default=100)
    parser.add_argument("--grr-bins", type=int, default=5)
    parser.add_argument("--epsilon", default="1")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--before-repeats", type=int, default=2)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.trials, args.cells, args.users, args.bins, args.grr_bins, args.epsilon,
                             args.repeats, args.before_repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
