"""The DPI evaluation's runs: every method of one stream in lock step over its ε (each checked by the privacy
ledger), the paired rows of DPI against uniform, Fig. 11's long run in a child process, and the pool of tasks
(one stream in one repeat) that :mod:`benchmarks.dpi_results` evaluates.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from benchmarks.dpi_pool import memory_mb
from pipelines.evaluation.stats import holm, paired_lower
from transforms.mechanisms import (
    FixedRequirement,
    LifetimeRequirement,
    PrivacyLedger,
    SlotBatch,
    make_mechanism,
)
from transforms.mechanisms.base import ReleaseKind
from transforms.mechanisms.domain import NO_VALUE
from transforms.mechanisms.dpi.theory import kl_divergence, pdf_mse
from transforms.mechanisms.noise import insecure_seeded_randomness
from benchmarks.dpi_streams import (ALPHA, DEFAULTS, DPI_METHODS, METHODS, SWEEPS, SWEEP_EPSILONS, Stream, WEVENT,
                                    WINDOW, stream_rows, synthetic_counts, to_pdf)


EVALUATION_CACHE_MB = 256
"""The evaluation caches the pool's counts (the releases are those of the lazy default, only faster)."""
_POOLS: dict[tuple, object] = {}
"""One mechanism per pool (k, N, n_units, public seed) whose cache and distance memo the others share
(:meth:`share_pool`): built once per process, not once per run."""


def build(method: str, bins: int, epsilon: float, settings: dict):
    """``method`` with every user's requirement as its default (records are users arriving every slot)."""
    if method == WEVENT:
        return make_mechanism(WEVENT, bins=bins, epsilon=epsilon, window=WINDOW,
                              default_requirement=FixedRequirement(WINDOW, epsilon))
    mechanism = make_mechanism(method, bins=bins, epsilon=epsilon, default_requirement=LifetimeRequirement(epsilon),
                               **{"pool_cache_mb": EVALUATION_CACHE_MB, **settings})
    pool = mechanism.params.pool
    key = (pool.k, pool.size, pool.n_units, pool.seed)
    if key in _POOLS:
        mechanism.share_pool(_POOLS[key])
    else:
        mechanism.pool_matrix()
        _POOLS[key] = mechanism
    return mechanism


REPRESENTATIVE = SlotBatch.of([0], [NO_VALUE])
"""The one registered user the DPI mechanisms are fed with the slot's counts (:meth:`step_counts`): every record's
user is charged alike, so the ledger checks that user's charges, which are each record's."""


def run_stream(rows: Iterable[np.ndarray], epsilons, seed: int, methods=METHODS, settings: dict | None = None
               ) -> dict[float, dict]:
    """Every method at every ε on one stream in lock step (same slots; each mechanism with
    ``insecure_seeded_randomness(seed)``); the privacy ledger checks every mechanism's charges every slot.

    DPI reads the slot's count vector (:meth:`step_counts`); the w-event baseline reads one user per record.
    Returns per ε and method the mean MSE and KL over the slots of the accumulative query, its seconds, and for
    the DPI variants the claimed and charged ε at the end and the first slot skipped for want of budget.
    Raises when a ledger finds a charge over a budget."""
    settings = {**DEFAULTS, **(settings or {})}
    epsilons = [float(e) for e in epsilons]
    mechanisms = {(m, e): None for m in methods if m not in ("uniform", "exact") for e in epsilons}
    bins = slots = 0
    sums = {(m, e): [0.0, 0.0] for m in methods for e in epsilons}
    seconds = dict.fromkeys(mechanisms, 0.0)
    last, stopped = {}, {}
    for t, counts in enumerate(rows):
        if t == 0:
            bins = counts.size
            cumulative, uniform = np.zeros(bins, np.int64), np.full(bins, 1 / bins)
            mechanisms = {key: build(key[0], bins, key[1], settings) for key in mechanisms}
            rngs = {key: insecure_seeded_randomness(seed) for key in mechanisms}
            ledgers = {key: PrivacyLedger(WINDOW if key[0] == WEVENT else 1) for key in mechanisms}
            wevent_sums = {e: np.zeros(bins, np.int64) for e in epsilons}
        slots += 1
        cumulative += counts
        truth = to_pdf(cumulative)
        fixed = {"uniform": uniform, "exact": truth}
        for m in ("uniform", "exact"):
            if m in methods:
                mse, kl = pdf_mse(fixed[m], truth), kl_divergence(truth, fixed[m])
                for e in epsilons:
                    sums[m, e][0] += mse
                    sums[m, e][1] += kl
        records = None
        for key, mechanism in mechanisms.items():
            m, e = key
            start = time.perf_counter()
            if m == WEVENT:
                if records is None:
                    records = SlotBatch.of(range(int(counts.sum())), np.repeat(np.arange(bins), counts))
                release = mechanism.step(records, rngs[key])
                wevent_sums[e] += release.histogram
                estimate = to_pdf(wevent_sums[e])
            else:
                release = mechanism.step_counts(counts, rngs[key], REPRESENTATIVE)
                estimate = release.values
                last[key] = release
                if release.kind is ReleaseKind.SKIPPED and key not in stopped:
                    stopped[key] = t
            seconds[key] += time.perf_counter() - start
            ledgers[key].record(release.slot, release.charges)
            sums[key][0] += pdf_mse(estimate, truth)
            sums[key][1] += kl_divergence(truth, estimate)
    for key, ledger in (ledgers.items() if slots else ()):
        if not ledger.ok:
            raise RuntimeError(f"the privacy ledger found an overspend by {key[0]} at ε = {key[1]}: "
                               f"{ledger.violations[0]}")
    results = {}
    for e in epsilons:
        result = results[e] = {}
        for m in methods:
            result[m] = {"mse": sums[m, e][0] / slots, "kl": sums[m, e][1] / slots}
            if (m, e) in mechanisms:
                result[m].update(seconds=seconds[m, e], ledger_slots=slots)
            if (m, e) in last:
                figures = last[m, e].figures
                result[m].update(eps_claimed=figures["eps_claimed"], eps_charged=figures["eps_charged_total"],
                                 stopped_at=stopped.get((m, e)))
    return results


def run_methods(counts: np.ndarray, epsilon: float, seed: int, methods=METHODS, settings: dict | None = None) -> dict:
    """:func:`run_stream` at one ε over a ``slots x k`` count matrix."""
    return run_stream(iter(counts), [epsilon], seed, methods, settings)[float(epsilon)]


def summarise(values) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    values = np.asarray(values, np.float64)
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0


def paired_rows(runs: list[dict]) -> list[dict]:
    """DPI variants against uniform per (stream, ε, metric): paired over repeats, both directions, Holm over all."""
    rows = []
    keys = sorted({(r["stream"], r["epsilon"]) for r in runs if r["sweep"] is None})
    for stream, epsilon in keys:
        point = sorted((r for r in runs if r["sweep"] is None and (r["stream"], r["epsilon"]) == (stream, epsilon)),
                       key=lambda r: r["seed"])
        for variant in DPI_METHODS:
            for metric in ("mse", "kl"):
                dpi = np.array([r["results"][variant][metric] for r in point])
                uni = np.array([r["results"]["uniform"][metric] for r in point])
                better, worse = paired_lower(dpi, uni), paired_lower(uni, dpi)
                rows.append({"stream": stream, "epsilon": epsilon, "variant": variant, "metric": metric,
                             "pairs": better.pairs, "wins": better.wins, "ratio": better.ratio,
                             "p_better": better.p_value, "p_worse": worse.p_value})
    for row, adjusted in zip(rows, holm([row["p_better"] for row in rows])):
        row["p_better_holm"] = adjusted
        row["verdict"] = "better than uniform" if row["p_better"] < ALPHA else "no better than uniform"
    return rows


# -- the long run --------------------------------------------------------------------------------------------------
def long_run(slots: int, bins: int, epsilon: float, seed: int, marks: int = 10) -> dict:
    """``dpi-sound`` (Algorithm 3, the paper's Λ = 1e8: every slot fresh) on a synthetic-A-like stream over
    ``bins`` items for ``slots`` slots; resident memory and the median KL/MSE at ``marks`` evenly spaced points."""
    gen = np.random.default_rng(seed)
    mechanism = build("dpi-sound", bins, epsilon, {**DEFAULTS, "rba": "exponential"})
    rng = insecure_seeded_randomness(seed)
    cumulative = np.zeros(bins, np.int64)
    every = max(1, slots // marks)
    block, checkpoints, fresh = [], [], 0
    start = time.perf_counter()
    for t in range(1, slots + 1):
        counts = synthetic_counts(1, bins, 100, gen.integers(1, 11, 1), gen)[0]
        cumulative += counts
        release = mechanism.step(SlotBatch.of(range(int(counts.sum())), np.repeat(np.arange(bins), counts)), rng)
        fresh += release.kind is ReleaseKind.FRESH
        truth = to_pdf(cumulative)
        block.append((pdf_mse(release.values, truth), kl_divergence(truth, release.values)))
        if t % every == 0 or t == slots:
            mse, kl = np.median(np.array(block), axis=0)
            checkpoints.append({"slot": t, "seconds": time.perf_counter() - start, "rss_mb": memory_mb(),
                                "median_mse": float(mse), "median_kl": float(kl)})
            block = []
    wall = time.perf_counter() - start
    return {"slots": slots, "bins": bins, "epsilon": epsilon, "fresh": fresh, "wall_seconds": wall,
            "ms_per_slot": 1e3 * wall / slots, "peak_rss_mb": memory_mb("VmHWM"),
            "eps_charged": release.figures["eps_charged_total"], "rba_indices": len(mechanism.rba._free),
            "rba_mb": rba_memory_mb(mechanism.rba), "checkpoints": checkpoints}


def rba_memory_mb(rba) -> float:
    """About the memory of Algorithm 3's record of the series indices it handed out (two lists of ints, one
    entry per run of consecutive indices): it must never hand an index out twice, so the record grows with
    the slots, by far less than one entry per slot."""
    free, integer = rba._free, sys.getsizeof(1 << 40)
    return sum(sys.getsizeof(part) + integer * len(part) for part in (free.starts, free.ends)) / 2 ** 20


def long_run_child(slots: int, bins: int, epsilon: float, seed: int) -> subprocess.Popen:
    """:func:`long_run` started in a fresh interpreter (so that its peak memory is the run's alone), running
    beside the other runs; :func:`long_run_result` waits for it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "benchmarks.dpi_results", "--long-run-only", "--long-slots",
                             str(slots), "--long-bins", str(bins), "--seed", str(seed)], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def long_run_result(child: subprocess.Popen) -> dict:
    out, err = child.communicate()
    if child.returncode:
        raise RuntimeError(f"the long run failed ({child.returncode}): {err.strip()[-500:]}")
    return json.loads(out)


# -- the command ---------------------------------------------------------------------------------------------------
def run_task(task: tuple) -> list[dict]:
    """One stream in one repeat, every ε in lock step (a sweep value when ``sweep`` is given): its run records."""
    stream, seed, sweep, data_dir = task
    methods = (("dpi",) if sweep[0] == "lam" else DPI_METHODS) if sweep else stream.methods
    epsilons = SWEEP_EPSILONS if sweep else stream.epsilons
    results = run_stream(stream_rows(stream, seed, data_dir), epsilons, seed, methods,
                         {sweep[0]: sweep[1]} if sweep else None)
    return [{"stream": stream.name, "epsilon": e, "seed": seed, "sweep": list(sweep) if sweep else None,
             "results": result} for e, result in results.items()]


def evaluate(repeats: int, seed: int, streams: list[Stream], data_dir: str, workers: int = 1,
             b_repeats: int | None = None) -> dict:
    """The main sweep (every stream, ε, repeat, method) and Fig. 3's sweeps on the first stream, over
    ``workers`` processes (the costliest tasks first); synthetic B runs ``b_repeats`` repeats (default
    ``repeats``)."""
    b_repeats = repeats if b_repeats is None else b_repeats
    tasks = [(stream, seed + r, None, data_dir) for stream in streams
             for r in range(b_repeats if stream.kind == "synthetic_b" else repeats)]
    sweep_stream = streams[0]
    tasks += [(sweep_stream, seed + r, (name, value), data_dir) for name, values in SWEEPS.items()
              for value in values for r in range(repeats)]
    order = sorted(range(len(tasks)), key=lambda i: -tasks[i][0].bins * tasks[i][0].slots
                   * len(SWEEP_EPSILONS if tasks[i][2] else tasks[i][0].epsilons))
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            done = dict(zip(order, pool.map(run_task, [tasks[i] for i in order])))
    else:
        done = {i: run_task(tasks[i]) for i in order}
    runs = [run for i in range(len(tasks)) for run in done[i]]
    described = [{**dataclasses.asdict(s), "methods": list(s.methods)} for s in streams]
    sweep_counts = np.array(list(stream_rows(sweep_stream, seed, data_dir)))
    return {"runs": runs, "streams": described, "sweep_stream": sweep_stream.name,
            "sweep_min_distance": min_pool_distance(sweep_counts)}


def min_pool_distance(counts: np.ndarray) -> float:
    """The smallest L1 distance between any entry of the default pool and the accumulative truth, over all slots
    (beyond ``lam + mu`` every score is -1, so ``lam`` cannot matter)."""
    pool = build("dpi", counts.shape[1], 1.0, DEFAULTS).pool_matrix() / counts.shape[1]
    cumulative = np.cumsum(counts, axis=0)
    return float(min(np.abs(pool - to_pdf(row)).sum(axis=1).min() for row in cumulative))
