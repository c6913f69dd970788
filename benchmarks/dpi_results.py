"""Issue #16's evaluation of DPI: one command writes ``docs/results_dpi.md`` (and its figures).

    nice -n 10 python -m benchmarks.dpi_results --data-dir /work/shared/data --long-slots 200000 --workers 2

Streams (spec §4.1): **COVID-19** (JHU daily counts, ``covid19_jhu_daily``: each new case is a record whose
item is its country; the 109 countries with the most cases and one "other" item make k = 110; 48,925 records
drawn from all cases, each placed uniformly within its day, split into 1,000 equal slots), **synthetic A**
(k = 100, 3,000 slots, each slot's item counts ~ N(100, σ²), σ drawn from 1..10 per slot), **synthetic B**
(App. E.2: the ten k = 1,000 datasets, counts ~ N(1000, j²) for dataset j, and k = 10,000 ones with the same
mean, σ from ``--b10k-sigmas``; 2,700 slots over the spec's 11 ε; drawn one slot at a time as count vectors,
10^6 and 10^7 records a slot) and a **Zipf(1.5)** stream (k = 100, 10,000 records a slot: the skewed stress
test the paper lacks).  Records are users, as in the paper (spec §1.2): the DPI mechanisms read each slot's
count vector (``step_counts``), the w-event baseline one user per record (it does not run on synthetic B).

Methods, all answering the accumulative query (truth: the PDF of every record so far): ``dpi`` (the paper's
loop, charged its sound upper bound; its ``eps_claimed`` is reported beside), ``dpi-sound`` (exact exponential
mechanism, lifetime budget), **uniform** (data-independent), **exact** (not private) and ``bd`` (a w-event
mechanism, w = 10, ε per window: **a different guarantee**, its per-slot counts summed, clipped at 0 and
normalised).  Metrics (spec §4.2): per-bin MSE and KL(true || released), averaged over the slots; mean ±
standard deviation over the repeats; DPI against uniform by the paired sign-flip test of
:mod:`pipelines.evaluation.stats` (same data and seed for every method; every ε of a stream and repeat in
lock step, in ``--workers`` processes).  The privacy ledger checks every mechanism's charges in every slot;
an overspend stops the command.  Then the hyper-parameter sweeps of
Fig. 3 (λ, μ, ζ and the RBA, on COVID-19), the long run of Fig. 11 (``dpi-sound`` alone, in a child process so
that its peak memory is its own) and the privacy audit (TV10, :mod:`benchmarks.dpi_audit`).

Every generator is seeded (``--seed``, then ``seed + 1`` ... for the repeats): the numbers are reproducible and
the releases are NOT private.  Prints a JSON summary and keeps every run in ``--json-out`` (by default beside
the figures), from which ``--render-only`` rewrites the document without running anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import lzma
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from benchmarks import dpi_audit
from benchmarks.dpi_pool import memory_mb
from pipelines.evaluation.stats import holm, paired_lower
from pipelines.evaluation_data import DEFAULT_DATA_DIR
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

COVID_FILE = os.path.join("covid19_jhu_daily", "timeseries_2020-01-22_to_2020-08-17.json.xz")
EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0)
B_EPSILONS = (0.5, *map(float, range(1, 11)))
"""Spec §4.1 (App. E.2): ε in [0.5, 10], 11 values."""
B_SIGMAS = tuple(range(1, 11))
"""App. E.2's k = 1,000 datasets: dataset j has σ = j."""
B10K_SIGMAS = B_SIGMAS
"""The k = 10,000 datasets, all ten as in the paper (σ = 1..10; the mean, which the paper leaves open, 1,000)."""
DEFAULTS = {"lam": 0.3, "mu": 0.1, "zeta": 0.2, "rba": "ranges"}
"""The DPI settings of every run unless swept: the spec's own runs, with Algorithm 4 so that ε matters."""
SWEEPS = {"lam": (0.05, 0.1, 0.5), "mu": (0.05, 0.2, 0.3), "zeta": (0.1, 0.3, 0.5), "rba": ("exponential",)}
"""Fig. 3's hyper-parameters (spec §4.3), each swept alone around ``DEFAULTS`` (whose runs are the main sweep's)."""
SWEEP_EPSILONS = (0.5, 2.0, 10.0)
WINDOW = 10
WEVENT = "bd"
WEVENT_LABEL = f"{WEVENT} (w = {WINDOW}): a different guarantee: w-event, not lifetime"
DPI_METHODS = ("dpi", "dpi-sound")
METHODS = ("dpi", "dpi-sound", "uniform", "exact", WEVENT)
ALPHA = 0.05


# -- streams -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    """One evaluated stream: its public shape and how its per-slot item counts are drawn (:func:`stream_rows`).

    ``kind`` is covid19, synthetic_a, synthetic_b or zipf; ``sigma`` and ``mean`` are synthetic B's per-item
    N(mean, σ²); ``wevent`` says whether the w-event baseline runs on it (it reads users, one per record)."""

    name: str
    kind: str
    description: str
    bins: int
    slots: int
    epsilons: tuple[float, ...]
    records_per_slot: float
    wevent: bool = True
    sigma: float = 0.0
    mean: float = 0.0

    @property
    def methods(self) -> tuple[str, ...]:
        return METHODS if self.wevent else tuple(m for m in METHODS if m != WEVENT)


def load_covid_daily(path: str) -> tuple[list[str], np.ndarray]:
    """The countries and their daily new cases (``days x countries``) from the JHU time series (cumulative)."""
    with lzma.open(path, "rt") as handle:
        series = json.load(handle)
    countries = sorted(series)
    cumulative = np.array([[day["confirmed"] or 0 for day in series[c]] for c in countries], np.int64).T
    return countries, np.diff(cumulative, axis=0, prepend=0)


def covid_counts(daily: np.ndarray, slots: int, records: int, bins: int, gen: np.random.Generator) -> np.ndarray:
    """Spec §4.1's preprocessing of daily new cases (``days x countries``) into ``slots x bins`` record counts.

    Negative days (the source's corrections) count as 0.  The ``bins - 1`` countries with the most cases keep
    their own item and the rest share the last ("other"; no such item when every country fits).  ``records``
    cases are drawn from all cases, each placed uniformly at random within its day, and the period is split
    into ``slots`` equal slots (the paper: 48,925 records, 1,000 slots over about six months)."""
    daily = np.clip(np.asarray(daily, np.int64), 0, None)
    days, countries = daily.shape
    if countries > bins:
        order = np.argsort(-daily.sum(axis=0), kind="stable")
        daily = np.column_stack([daily[:, order[:bins - 1]], daily[:, order[bins - 1:]].sum(axis=1)])
    bins = daily.shape[1]
    if daily.sum() == 0:
        raise ValueError("the COVID-19 series has no new cases")
    cells = gen.multinomial(records, daily.ravel() / daily.sum())
    day, item = np.divmod(np.repeat(np.arange(cells.size), cells), bins)
    slot = np.minimum(((day + gen.random(day.size)) / days * slots).astype(np.int64), slots - 1)
    counts = np.zeros((slots, bins), np.int64)
    np.add.at(counts, (slot, item), 1)
    return counts


def synthetic_counts(slots: int, bins: int, mean: float, sigmas: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """Item counts ~ N(mean, σ_t²) rounded and clipped at 0, ``σ_t`` per slot (spec §4.1's synthetic A and B)."""
    sigmas = np.broadcast_to(np.asarray(sigmas, np.float64), (slots,))
    return np.rint(np.clip(gen.normal(mean, sigmas[:, None], (slots, bins)), 0, None)).astype(np.int64)


def zipf_counts(slots: int, bins: int, records: int, exponent: float, gen: np.random.Generator) -> np.ndarray:
    """``records`` a slot drawn from Zipf(``exponent``) over ``bins`` items."""
    weights = np.arange(1, bins + 1, dtype=np.float64) ** -exponent
    return gen.multinomial(records, weights / weights.sum(), size=slots).astype(np.int64)


def make_streams(slots: dict[str, int], data_dir: str, b_sigmas=B_SIGMAS, b10k_sigmas=B10K_SIGMAS,
                 epsilons=EPSILONS, b_epsilons=B_EPSILONS) -> tuple[list[Stream], str | None]:
    """Every evaluated stream (COVID-19 left out, with the reason returned, when its file is absent).

    Synthetic B: App. E.2's k = 1,000 datasets j (σ = j) and k = 10,000 ones (the paper leaves their mean
    open; here 1,000, as at k = 1,000), over the spec's ε grid; the w-event baseline does not run on them
    (10^6 records a slot, as users, through a user-level mechanism)."""
    streams, missing = [], None
    path = os.path.join(data_dir, COVID_FILE)
    if os.path.exists(path):
        streams.append(Stream("covid19", "covid19", "JHU daily new cases, 48,925 records, 109 countries + other", 110,
                              slots["covid19"], tuple(epsilons), 48_925 / slots["covid19"]))
    else:
        missing = f"COVID-19 skipped: {path} is not on this machine"
    streams.append(Stream("synthetic_a", "synthetic_a", "N(100, σ²) per item, σ from 1..10 per slot", 100,
                          slots["synthetic_a"], tuple(epsilons), 100 * 100))
    streams.append(Stream("zipf", "zipf", "Zipf(1.5), 10,000 records a slot", 100, slots["zipf"], tuple(epsilons),
                          10_000))
    for bins, sigmas in ((1000, b_sigmas), (10_000, b10k_sigmas)):
        for sigma in sigmas:
            streams.append(Stream(f"synthetic_b_k{bins}_s{sigma:g}", "synthetic_b",
                                  f"N(1000, {sigma:g}²) per item (App. E.2, k = {bins:,})", bins, slots["synthetic_b"],
                                  tuple(b_epsilons), 1000.0 * bins, wevent=False, sigma=float(sigma), mean=1000.0))
    return streams, missing


@functools.lru_cache(maxsize=2)
def _covid_daily(path: str) -> np.ndarray:
    """The daily new cases of ``path``, read once per process (every repeat draws its records from them)."""
    return load_covid_daily(path)[1]


def stream_rows(stream: Stream, seed: int, data_dir: str) -> Iterator[np.ndarray]:
    """The item counts of ``stream`` in repeat ``seed``, slot by slot (synthetic B is drawn one slot at a time:
    memory one slot, never ``slots x k``); a fresh draw per repeat and stream."""
    gen = np.random.default_rng([seed, zlib.crc32(stream.name.encode())])
    if stream.kind == "covid19":
        yield from covid_counts(_covid_daily(os.path.join(data_dir, COVID_FILE)), stream.slots, 48_925, 110, gen)
    elif stream.kind == "synthetic_a":
        yield from synthetic_counts(stream.slots, 100, 100, gen.integers(1, 11, stream.slots), gen)
    elif stream.kind == "zipf":
        yield from zipf_counts(stream.slots, 100, 10_000, 1.5, gen)
    else:
        for _ in range(stream.slots):
            yield synthetic_counts(1, stream.bins, stream.mean, np.array(stream.sigma), gen)[0]


# -- running the methods -------------------------------------------------------------------------------------------
def to_pdf(counts: np.ndarray) -> np.ndarray:
    """Counts clipped at 0 and normalised; the uniform distribution when nothing is left (spec I-14)."""
    clipped = np.clip(np.asarray(counts, np.float64), 0, None)
    total = clipped.sum()
    return clipped / total if total > 0 else np.full(clipped.size, 1 / clipped.size)


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


# -- the document --------------------------------------------------------------------------------------------------
def _pm(values, digits: int = 2) -> str:
    mean, sd = summarise(values)
    return f"{mean:.{digits}e} ± {sd:.1e}"


def _eps(value: float) -> str:
    return f"{value:g}"


def stream_table(runs: list[dict], stream: str) -> list[str]:
    """MSE and KL (mean ± sd over repeats) per ε and method, with DPI's claimed / charged ε and stop slot."""
    header = "| ε | metric | " + " | ".join(WEVENT_LABEL if m == WEVENT else f"`{m}`" if m in DPI_METHODS else m
                                           for m in METHODS) + " |"
    lines = [header, "|" + "---|" * (len(METHODS) + 2)]
    budget = ["", ("| ε | `dpi` claimed ε (paper, Thm 5.1) | `dpi` charged ε (sound upper bound) | `dpi` first "
              "skipped slot | `dpi-sound` charged ε |"), "|---|---|---|---|---|"]
    for epsilon in sorted({r["epsilon"] for r in runs if r["stream"] == stream and r["sweep"] is None}):
        point = [r["results"] for r in runs if r["stream"] == stream and r["sweep"] is None
                 and r["epsilon"] == epsilon]
        for metric in ("mse", "kl"):
            lines.append(f"| {_eps(epsilon)} | {metric.upper()} | "
                         + " | ".join(_pm([p[m][metric] for p in point]) for m in METHODS) + " |")
        stops = [p["dpi"]["stopped_at"] for p in point]
        stop = "never" if all(s is None for s in stops) else \
            ", ".join("never" if s is None else str(s) for s in stops)
        budget.append(f"| {_eps(epsilon)} | {summarise([p['dpi']['eps_claimed'] for p in point])[0]:.3g} | "
                      f"{summarise([p['dpi']['eps_charged'] for p in point])[0]:.3g} | {stop} | "
                      f"{summarise([p['dpi-sound']['eps_charged'] for p in point])[0]:.3g} |")
    return lines + budget


def sweep_table(runs: list[dict], stream: str, name: str) -> list[str]:
    """KL and MSE of both DPI variants per swept value and ε (the default's runs are the main sweep's)."""
    values = sorted({DEFAULTS[name], *SWEEPS[name]}, key=str)
    lines = [f"| {name} | ε | `dpi` MSE | `dpi` KL | `dpi-sound` MSE | `dpi-sound` KL |", "|---|---|---|---|---|---|"]
    for value in values:
        for epsilon in SWEEP_EPSILONS:
            if value == DEFAULTS[name]:
                point = [r["results"] for r in runs if r["stream"] == stream and r["sweep"] is None
                         and r["epsilon"] == epsilon]
            else:
                point = [r["results"] for r in runs if r["stream"] == stream and r["sweep"] == [name, value]
                         and r["epsilon"] == epsilon]
            if not point:
                continue
            cells = [(_pm([p[m][metric] for p in point]) if m in point[0] else "(unaffected)")
                     for m in DPI_METHODS for metric in ("mse", "kl")]
            lines.append(f"| {value}{' (default)' if value == DEFAULTS[name] else ''} | {_eps(epsilon)} | "
                         + " | ".join(cells) + " |")
    return lines


def timing_line(runs: list[dict], streams: list[str], slots: int) -> str:
    """Mechanism time per slot, mean over the streams' runs (every ε)."""
    point = [r["results"] for r in runs if r["stream"] in streams and r["sweep"] is None]
    timing = {m: summarise([p[m]["seconds"] for p in point])[0] / slots for m in point[0] if "seconds" in point[0][m]}
    return ("Mechanism time per slot (mean over the runs above and their ε, on the shared machine; building the pool "
            "is not timed; `dpi-sound` measures the pool once a slot for all ε, which share it): "
            + ", ".join(f"`{m}` {1e3 * t:.2f} ms" for m, t in timing.items()) + ".")


def paper_table(results: dict) -> list[str]:
    """What ran here against what the paper ran (spec §4.1)."""
    config, streams = results["config"], results["streams"]
    b = {bins: sorted(s["sigma"] for s in streams if s["kind"] == "synthetic_b" and s["bins"] == bins)
         for bins in (1000, 10_000)}
    b_slots = config["slots"]["synthetic_b"]

    def sigmas(values):
        return ", ".join(f"{v:g}" for v in values) or "none"

    b_eps = next((s["epsilons"] for s in streams if s["kind"] == "synthetic_b"), ())
    main_eps = next((s["epsilons"] for s in streams if s["kind"] == "synthetic_a"), ())
    return ["", "| set | the paper | here |", "|---|---|---|",
            (f"| synthetic A (§6.4) | 3,000 slots, k = 100, ε not stated | {config['slots']['synthetic_a']:,} slots, "
             f"ε ∈ {{{', '.join(map(_eps, main_eps))}}}, {config['repeats']} repeats |"),
            (f"| synthetic B, k = 1,000 (App. E.2) | 10 datasets (σ = 1..10), 2,700 slots, 11 ε in [0.5, 10], "
             f"10 repetitions | σ ∈ {{{sigmas(b[1000])}}}, {b_slots:,} slots, ε ∈ {{{', '.join(map(_eps, b_eps))}}}, "
             f"{config['b_repeats']} repeats |"),
            (f"| synthetic B, k = 10,000 (App. E.2) | 10 datasets, \"similar settings\" (mean not stated), 2,700 "
             f"slots | σ ∈ {{{sigmas(b[10_000])}}} with mean 1,000 (our choice: App. E.2's k = 1,000 setting with the "
             f"larger domain, 10^7 records a slot), {b_slots:,} slots, the same ε, {config['b_repeats']} repeats |"),
            (f"| long run (Fig. 11) | 200,000 slots, k = 10,000 | {config['long_slots']:,} slots, k = "
             f"{results['long_run']['bins'] if 'long_run' in results else '-'} (below) |")]


def synthetic_b_section(runs: list[dict], paired: list[dict], streams: list[dict], figures: list[str]) -> list[str]:
    """One row per dataset σ: each method's mean error (over the repeats) as its range over ε, and the paired
    verdicts against uniform."""
    bins = streams[0]["bins"]
    out = ["", f"## Synthetic B, k = {bins:,} (App. E.2)", "",
           (f"Per dataset (σ), the mean over the repeats at each ε; DPI's columns give the range of those means over "
            f"the {len(streams[0]['epsilons'])} ε (uniform's and exact's do not depend on ε; exact is 0). "
            "\"worse\" and \"better\" count the (ε, metric) comparisons where the paired test finds DPI "
            "significantly worse or better than uniform. `dpi` stops for want of budget at the slot given (first "
            "repeat, smallest to largest ε)."), "",
           ("| σ | uniform MSE | `dpi` MSE | `dpi-sound` MSE | uniform KL | `dpi` KL | `dpi-sound` KL | `dpi`: worse / "
            "better | `dpi-sound`: worse / better | `dpi` stops at slot |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for stream in sorted(streams, key=lambda s: s["sigma"]):
        main = [r for r in runs if r["stream"] == stream["name"] and r["sweep"] is None]
        epsilons = sorted({r["epsilon"] for r in main})

        def spread(method, metric, main=main, epsilons=epsilons):
            means = [summarise([r["results"][method][metric] for r in main if r["epsilon"] == e])[0] for e in epsilons]
            return f"{min(means):.3g} to {max(means):.3g}"

        cells = [_pm([r["results"]["uniform"]["mse"] for r in main if r["epsilon"] == epsilons[0]]),
                 spread("dpi", "mse"), spread("dpi-sound", "mse"),
                 _pm([r["results"]["uniform"]["kl"] for r in main if r["epsilon"] == epsilons[0]]),
                 spread("dpi", "kl"), spread("dpi-sound", "kl")]
        for variant in DPI_METHODS:
            rows = [row for row in paired if row["stream"] == stream["name"] and row["variant"] == variant]
            cells.append(f"{sum(row['p_worse'] < ALPHA for row in rows)} / "
                         f"{sum(row['verdict'] == 'better than uniform' for row in rows)} of {len(rows)}")
        first = min(r["seed"] for r in main)
        stops = [next(r["results"]["dpi"]["stopped_at"] for r in main if r["seed"] == first and r["epsilon"] == e)
                 for e in epsilons]
        cells.append(f"{min(s for s in stops if s is not None) if any(s is not None for s in stops) else 'never'} "
                     f"to {'never' if None in stops else max(stops)}")
        out.append(f"| {stream['sigma']:g} | " + " | ".join(cells) + " |")
    out += ["", timing_line(runs, [s["name"] for s in streams], streams[0]["slots"])]
    out += [""] + [f"![synthetic B, k = {bins}](results_dpi/{f})" for f in figures if f == f"synthetic_b_k{bins}.png"]
    return out


def render(results: dict, figures: list[str] | None = None) -> str:
    """The Markdown document from a results object (see :func:`main`)."""
    runs, paired, config = results["runs"], results["paired"], results["config"]
    streams = results["streams"]
    ledger_slots = sum(result.get("ledger_slots", 0) for r in runs for result in r["results"].values())
    out = ["# DPI: the evaluation of issue #16", "",
           (f"Generated by `{config['command']}` in {config['wall_seconds']:.0f} s of wall time "
           f"(the figures and this file excluded) on a machine with {os.cpu_count()} cores. The experiments follow "
           "the DPI paper (Feng et al., IEEE S&P 2024); the mechanisms "
           "and the readings chosen: [docs/dpi.md](dpi.md). Every generator is seeded: the numbers are "
           "reproducible and these releases are **not** private (a deployment uses the secure generator)."), "",
           "## Set-up", "",
           (f"- Repeats: {config['repeats']} per point (seeds {config['seed']}..{config['seed'] + config['repeats'] - 1}),"
           f" {config['b_repeats']} for synthetic B; every method sees the same data and the same seed in a repeat "
           "(all ε in lock step over the same slots), so the comparisons are paired. The data are drawn afresh "
           "per repeat and stream."),
           ("- The privacy ledger (`transforms/mechanisms/ledger.py`) checked every mechanism's charges in every slot "
           f"of every run ({ledger_slots:,} slot charges; a run with an overspend would have stopped this "
           "command): none was over its budget. The DPI mechanisms read each slot's count vector (`step_counts`: "
           "at 10^6 and 10^7 records a slot, the counts are what the mechanism reads), one registered user standing "
           "for every record's user, who are all charged alike; `bd` reads one user per record."),
           ("- Query: the accumulative distribution (truth: the PDF of every record so far); metrics (spec §4.2, "
           "I-16, I-17): per-bin MSE of the PDFs and KL(true ‖ released) in nats (release smoothed by 1e-10), "
           "averaged over the slots; tables give mean ± standard deviation over the repeats."),
           (f"- DPI settings unless swept: λ = {DEFAULTS['lam']}, μ = {DEFAULTS['mu']}, ζ = {DEFAULTS['zeta']}, "
           "N = 2,000, r = 20, n_units = k, Algorithm 4's ranges (with Algorithm 3 and Λ = 1e8 the slot budgets "
           "are about 1e-8 whatever ε is: see the `rba` sweep). `dpi` is charged its sound upper bound (spec "
           "§2.10.1) and stops when that reaches ε; its `eps_claimed` (Theorem 5.1) is reported beside it."),
           (f"- Baselines: uniform (data-independent), exact (not private: its KL is 0 up to the smoothing), and "
           f"**{WEVENT_LABEL}**: each slot's noisy counts, summed, clipped at 0 and normalised; ε is its budget per "
           f"window of {WINDOW} slots, so over T slots a user can lose up to ε·T/{WINDOW}."),
           "", "| stream | k | slots | records a slot (mean) | ε | methods | what |", "|---|---|---|---|---|---|---|"]
    for s in streams:
        out.append(f"| {s['name']} | {s['bins']:,} | {s['slots']:,} | {s['records_per_slot']:,.0f} | "
                   f"{', '.join(map(_eps, s['epsilons']))} | {'all' if s['wevent'] else f'all but {WEVENT}'} | "
                   f"{s['description']} |")
    if results.get("missing"):
        out += ["", f"**{results['missing']}.**"]
    out += ["", ("COVID-19 preprocessing (spec §4.1; the paper's Kaggle file is not available offline): the JHU "
            "cumulative counts become daily new cases (negative corrections count 0); each case is a record whose "
            "item is its country, the 109 countries with the most cases keep their item and the rest share "
            "\"other\" (k = 110); 48,925 records are drawn from all cases (a fresh draw per repeat), each placed "
            "uniformly within its day, and the 209 days are split into 1,000 equal slots of about 5 h (the paper: "
            "4.38 h).")] + paper_table(results)
    verdicts = [row for row in paired if row["verdict"] == "no better than uniform"]
    fewest = min(config["repeats"], config["b_repeats"])
    out += ["", "## Plainly", "",
            (f"Of {len(paired)} paired comparisons of a DPI variant with releasing the uniform distribution (per "
            f"stream, ε and metric), DPI is **no better than uniform in {len(verdicts)}** (one-sided paired "
            f"sign-flip test over the repeats, p ≥ {ALPHA}; with {fewest} pairs the smallest possible "
            f"p is {1 / 2 ** fewest:.3f}). Per stream and variant, over every ε (ratios are geometric "
            "means over the repeats of DPI's error divided by uniform's):"), "",
            "| stream | variant | DPI/uniform MSE | DPI/uniform KL | significantly worse than uniform | better |",
            "|---|---|---|---|---|---|"]
    for stream in [s["name"] for s in streams]:
        for variant in DPI_METHODS:
            rows = [row for row in paired if row["stream"] == stream and row["variant"] == variant]
            ratios = {m: [row["ratio"] for row in rows if row["metric"] == m] for m in ("mse", "kl")}
            out.append(f"| {stream} | `{variant}` | " + " | ".join(f"{min(r):.4g} to {max(r):.4g}"
                                                              for r in ratios.values())
                       + f" | {sum(row['p_worse'] < ALPHA for row in rows)} of {len(rows)} | "
                       f"{sum(row['verdict'] == 'better than uniform' for row in rows)} of {len(rows)} |")
    main = [r for r in runs if r["sweep"] is None and WEVENT in r["results"]]
    points = sorted({(r["stream"], r["epsilon"]) for r in main})
    wevent_better = sum(summarise([r["results"][WEVENT]["mse"] for r in main if (r["stream"], r["epsilon"]) == k])[0]
                        < summarise([r["results"]["uniform"]["mse"] for r in main
                                     if (r["stream"], r["epsilon"]) == k])[0] for k in points)
    out += ["", (f"The w-event baseline `{WEVENT}` (**a different guarantee: w-event, not lifetime**; ε per "
                 f"{WINDOW} slots) has a lower mean MSE than uniform at {wevent_better} of {len(points)} (stream, ε) "
                 "points. It is not a competitor under DPI's guarantee: over these streams a user's loss under it "
                 f"grows to ε·T/{WINDOW}. It shows what the data allow when the budget is renewed.")]
    worse = sum(row["p_worse"] < ALPHA for row in paired)
    b_rows = [row for row in paired if row["stream"].startswith("synthetic_b") and row["metric"] == "mse"]
    out += ["", (f"DPI is significantly **worse** than uniform in {worse} of the {len(paired)} comparisons. "
                 + (f"On synthetic B its MSE is {min(r['ratio'] for r in b_rows):.3g} to "
                    f"{max(r['ratio'] for r in b_rows):.3g} times uniform's, the same whatever σ and ε: the truth is "
                    "within about 0.01 (L1) of uniform while the pool's entries (n_units = k) are about 0.74 from "
                    "it (2/e, spec TV11), and the weights barely move (§2.10.3). " if b_rows else "")
                 + "Where the truth is far from uniform (COVID-19, Zipf), no pool entry comes close to it either, "
                 "and both variants stay within a few percent of uniform.")]
    better = [row for row in paired if row["verdict"] == "better than uniform"]
    if better:
        out += ["", "DPI beats uniform only here: " + "; ".join(
            f"{row['stream']} ε = {_eps(row['epsilon'])} `{row['variant']}` {row['metric'].upper()} "
            f"(ratio {row['ratio']:.3g}, p = {row['p_better']:.3f})" for row in better) + "."]
    for stream in [s["name"] for s in streams if s["kind"] != "synthetic_b"]:
        out += ["", f"## {stream}", ""] + stream_table(runs, stream)
        slots = next(s["slots"] for s in streams if s["name"] == stream)
        out += ["", timing_line(runs, [stream], slots)]
        if figures:
            out += [""] + [f"![{stream}](results_dpi/{f})" for f in figures if f.startswith(stream)]
    for bins in sorted({s["bins"] for s in streams if s["kind"] == "synthetic_b"}):
        out += synthetic_b_section(runs, paired, [s for s in streams if s["kind"] == "synthetic_b"
                                                  and s["bins"] == bins], figures or [])
    out += ["", "## DPI against uniform: paired tests", "",
            ("One-sided sign-flip tests on the log ratio over the repeats (`pipelines/evaluation/stats.py`): "
            "`p(better)` tests \"DPI < uniform\", `p(worse)` tests \"uniform < DPI\"; Holm adjusts `p(better)` "
            "over every comparison, synthetic B's included (those rows are in `results_dpi/results.json`, summed up "
            "in the tables above)."), "",
            "| stream | ε | variant | metric | DPI/uniform | DPI wins | p(better) | Holm | p(worse) | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for row in (row for row in paired if not row["stream"].startswith("synthetic_b")):
        out.append(f"| {row['stream']} | {_eps(row['epsilon'])} | `{row['variant']}` | {row['metric'].upper()} | "
                   f"{row['ratio']:.3g} | {row['wins']}/{row['pairs']} | {row['p_better']:.3f} | "
                   f"{row['p_better_holm']:.3f} | {row['p_worse']:.3f} | {row['verdict']} |")
    sweep_stream = config["sweep_stream"]
    out += ["", f"## Hyper-parameter sweeps (Fig. 3) on {sweep_stream}", "",
            ("Each parameter swept alone around the defaults. λ enters only the paper variant's score, so "
            "`dpi-sound` is not re-run for it; μ and ζ set the budget series of both (C = Δ/(μζ)). The paper's "
            "findings (spec §4.4): smaller λ, μ and ζ lower KL faster."), "",
            f"On this stream no pool entry ever comes closer than L1 {results['sweep_min_distance']:.3f} to the "
            + ("truth, beyond λ + μ for every swept pair: every score is −1, so λ changes nothing (identical "
               "numbers) and μ and ζ act only through the budgets and learning rates."
               if results["sweep_min_distance"] > max(max(SWEEPS["lam"]) + DEFAULTS["mu"],
                                                       DEFAULTS["lam"] + max(SWEEPS["mu"]))
               else "truth: only pairs with λ + μ above that can score an entry above −1.")
            + " Differences between rows smaller than the standard deviations are noise of the draws."]
    for name in SWEEPS:
        out += ["", f"### {name}", ""] + sweep_table(runs, sweep_stream, name)
        if figures:
            out += [""] + [f"![{name}](results_dpi/{f})" for f in figures if f == f"sweep_{name}.png"]
    if "long_run" in results:
        lr = results["long_run"]
        first, end = lr["checkpoints"][0], lr["checkpoints"][-1]
        out += ["", "## The long run (Fig. 11)", "",
                (f"`dpi-sound`, k = {lr['bins']}, ε = {_eps(lr['epsilon'])}, Algorithm 3 (Λ = 1e8, so every slot is "
                f"fresh), a synthetic-A-like stream (100 ± σ records per item): **{lr['slots']:,} slots** "
                f"({lr['fresh']:,} fresh) in {lr['wall_seconds']:.0f} s, **{lr['ms_per_slot']:.2f} ms per slot** "
                f"(data generation and metrics included; it ran beside the evaluation's {config.get('workers', 1)} "
                "worker process(es) on the shared machine, so its time is inflated by theirs), **peak RSS "
                f"{lr['peak_rss_mb']:.0f} MB** (a child process of its own). Resident memory went from {first['rss_mb']:.1f} MB at slot {first['slot']:,} "
                f"to {end['rss_mb']:.1f} MB at slot {end['slot']:,} ({100 * (end['rss_mb'] / first['rss_mb'] - 1):+.1f}%)"
                f"; ε charged at the end: {lr['eps_charged']:.3g}. Algorithm 3 keeps the series indices it handed "
                f"out (it must never hand one out twice), {lr['rba_indices']:,} of them at the end, as runs of "
                f"consecutive indices: about {lr['rba_mb']:.1f} MB."), "",
                "| slot | seconds | RSS (MB) | median MSE since the last row | median KL |", "|---|---|---|---|---|"]
        for c in lr["checkpoints"]:
            out.append(f"| {c['slot']:,} | {c['seconds']:.0f} | {c['rss_mb']:.1f} | {c['median_mse']:.3e} | "
                       f"{c['median_kl']:.3e} |")
        if config["long_slots"] < 200_000:
            out += ["", (f"Scaled down from the paper's 200,000 slots to {config['long_slots']:,} to fit the time "
                    "budget of this run; `--long-slots 200000` runs the full length.")]
        if figures and "long_run.png" in figures:
            out += ["", "![long run](results_dpi/long_run.png)"]
    audit = results["audit"]
    out += ["", "## The privacy audit (spec TV10, `python -m benchmarks.dpi_audit`)", "",
            (f"TV10's neighbours over {audit['slots']} slots through both real mechanisms (r = 1); the worst "
            "transcript's loss is exact."), "",
            ("| variant | worst transcript's loss | mean sampled loss | claimed ε | charged ε | exceeds its claim | within "
            "its charge |"), "|---|---|---|---|---|---|---|"]
    for name, a in audit["variants"].items():
        claim = a["eps_claimed"] / (2 if name == "dpi" else 1)
        out.append(f"| `{name}` | {a['worst_case_loss']:.3g} | {a['sampled_loss_mean']:.3g} | {claim:.3g}"
                   f"{' (P_A share)' if name == 'dpi' else ''} | {a['eps_sound_upper']:.4g} | "
                   f"{'yes' if a['exceeds_claim'] else 'no'} | {'yes' if a['within_charge'] else 'no'} |")
    return "\n".join(out) + "\n"


def plot(results: dict, directory: str) -> list[str]:
    """Figures (PNG) into ``directory``; their file names (none when matplotlib is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(directory, exist_ok=True)
    runs, names = results["runs"], []
    for bins in sorted({s["bins"] for s in results["streams"] if s["kind"] == "synthetic_b"}):
        streams = sorted((s for s in results["streams"] if s["kind"] == "synthetic_b" and s["bins"] == bins),
                         key=lambda s: s["sigma"])
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, metric in zip(axes, ("mse", "kl")):
            for s, colour in zip(streams, plt.cm.viridis(np.linspace(0, 0.9, len(streams)))):
                main = [r for r in runs if r["stream"] == s["name"] and r["sweep"] is None]
                epsilons = sorted({r["epsilon"] for r in main})
                for m, style in (("dpi-sound", "-"), ("uniform", ":")):
                    ax.plot(epsilons, [summarise([r["results"][m][metric] for r in main if r["epsilon"] == e])[0]
                                       for e in epsilons], style, color=colour, marker="o" if m != "uniform" else None,
                            markersize=3, label=f"σ = {s['sigma']:g}" if m == "dpi-sound" else None)
            ax.set(xscale="log", yscale="log", xlabel="ε", ylabel=metric.upper(),
                   title=f"synthetic B, k = {bins:,}: {metric.upper()} (solid dpi-sound, dotted uniform)")
        axes[0].legend(fontsize=6, ncol=2)
        fig.tight_layout()
        names.append(f"synthetic_b_k{bins}.png")
        fig.savefig(os.path.join(directory, names[-1]), dpi=90)
        plt.close(fig)
    for stream in [s["name"] for s in results["streams"] if s["kind"] != "synthetic_b"]:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        epsilons = sorted({r["epsilon"] for r in runs if r["stream"] == stream and r["sweep"] is None})
        for ax, metric in zip(axes, ("mse", "kl")):
            for m in (m for m in METHODS if m != "exact"):  # exact is 0: off a log scale
                stats = [summarise([r["results"][m][metric] for r in runs if r["stream"] == stream
                                    and r["sweep"] is None and r["epsilon"] == e]) for e in epsilons]
                ax.errorbar(epsilons, [s[0] for s in stats], yerr=[s[1] for s in stats], marker="o", capsize=3,
                            label=f"{WEVENT} (w-event, not lifetime)" if m == WEVENT else m)
            ax.set(xscale="log", yscale="log", xlabel="ε", ylabel=metric.upper(), title=f"{stream}: {metric.upper()}")
        axes[0].legend(fontsize=7, title="exact: 0", title_fontsize=7)
        fig.tight_layout()
        names.append(f"{stream}.png")
        fig.savefig(os.path.join(directory, names[-1]), dpi=90)
        plt.close(fig)
    stream = results["config"]["sweep_stream"]
    for name, swept in SWEEPS.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        for value, colour in zip(sorted({DEFAULTS[name], *swept}, key=str), plt.rcParams["axes.prop_cycle"]):
            sweep = None if value == DEFAULTS[name] else [name, value]
            for m, style in (("dpi", "-"), ("dpi-sound", "--")):
                points = {e: [r["results"][m]["kl"] for r in runs if r["stream"] == stream and r["sweep"] == sweep
                              and r["epsilon"] == e and m in r["results"]] for e in SWEEP_EPSILONS}
                points = {e: kls for e, kls in points.items() if kls}
                if points:
                    ax.plot(list(points), [summarise(kls)[0] for kls in points.values()], style, marker="o",
                            color=colour["color"], label=f"{m} {name}={value}")
        uniform = summarise([r["results"]["uniform"]["kl"] for r in runs if r["stream"] == stream
                             and r["sweep"] is None])[0]
        ax.axhline(uniform, color="black", linewidth=0.8, label="uniform")
        ax.set(xscale="log", xlabel="ε", ylabel="KL", title=f"{stream}: {name} (solid dpi, dashed dpi-sound)")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        names.append(f"sweep_{name}.png")
        fig.savefig(os.path.join(directory, names[-1]), dpi=90)
        plt.close(fig)
    if "long_run" in results:
        checkpoints = results["long_run"]["checkpoints"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        axes[0].plot([c["slot"] for c in checkpoints], [c["rss_mb"] for c in checkpoints], marker="o")
        axes[0].set(xlabel="slot", ylabel="RSS (MB)", title="dpi-sound: resident memory", ylim=(0, None))
        axes[1].plot([c["slot"] for c in checkpoints], [c["median_kl"] for c in checkpoints], marker="o")
        axes[1].set(xlabel="slot", ylabel="median KL", title="dpi-sound: KL over the run")
        fig.tight_layout()
        names.append("long_run.png")
        fig.savefig(os.path.join(directory, names[-1]), dpi=90)
        plt.close(fig)
    return names


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dpi_results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join("docs", "results_dpi.md"))
    parser.add_argument("--figures", default=os.path.join("docs", "results_dpi"), help="directory of the PNGs")
    parser.add_argument("--json-out", default=os.path.join("docs", "results_dpi", "results.json"),
                        help="every run as JSON (the document can be re-rendered from it with --render-only)")
    parser.add_argument("--render-only", action="store_true", help="re-render --out from --json-out, run nothing")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="holds covid19_jhu_daily/ (read only)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--b-repeats", type=int, default=None, help="synthetic B's repeats (default --repeats)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilons", default=",".join(_eps(e) for e in EPSILONS),
                        help="ε of COVID-19, synthetic A and Zipf")
    parser.add_argument("--b-epsilons", default=",".join(_eps(e) for e in B_EPSILONS), help="ε of synthetic B")
    parser.add_argument("--b-sigmas", default=",".join(map(str, B_SIGMAS)), help="σ of the k = 1,000 datasets")
    parser.add_argument("--b10k-sigmas", default=",".join(map(str, B10K_SIGMAS)),
                        help="σ of the k = 10,000 datasets (empty: none)")
    parser.add_argument("--slots", default="covid19=1000,synthetic_a=3000,synthetic_b=2700,zipf=1000",
                        help="slots per stream")
    parser.add_argument("--workers", type=int, default=1, help="processes for the runs (the long run has its own)")
    parser.add_argument("--long-slots", type=int, default=50_000, help="the long run's slots (0: none)")
    parser.add_argument("--long-bins", type=int, default=1000)
    parser.add_argument("--long-run-only", action="store_true", help="run only the long run and print its JSON")
    parser.add_argument("--audit-slots", type=int, default=1000)
    args = parser.parse_args(argv)

    def numbers(text: str, kind=float) -> list:
        return [kind(v) for v in text.split(",") if v.strip()]

    try:
        epsilons, b_epsilons = numbers(args.epsilons), numbers(args.b_epsilons)
        b_sigmas, b10k_sigmas = numbers(args.b_sigmas), numbers(args.b10k_sigmas)
        slots = {k: int(v) for k, v in (item.split("=") for item in args.slots.split(","))}
    except ValueError:
        parser.error("--epsilons, --b-epsilons and the σ lists take numbers and --slots NAME=COUNT pairs, "
                     "separated by commas")
    if set(slots) != {"covid19", "synthetic_a", "synthetic_b", "zipf"} or min(slots.values()) < 1:
        parser.error("--slots needs covid19, synthetic_a, synthetic_b and zipf, each at least 1")
    if args.repeats < 1 or (args.b_repeats is not None and args.b_repeats < 1) or args.long_slots < 0 \
            or args.long_bins < 2 or args.audit_slots < 1 or args.workers < 1 or not epsilons or not b_epsilons \
            or min(epsilons + b_epsilons) <= 0 or min(b_sigmas + b10k_sigmas, default=1) <= 0:
        parser.error("--repeats, --b-repeats, --workers and --audit-slots must be >= 1, --long-slots >= 0, "
                     "--long-bins >= 2, every ε and σ > 0")
    if args.render_only:
        with open(args.json_out) as handle:
            results = json.load(handle)
        with open(args.out, "w") as handle:
            handle.write(render(results, plot(results, args.figures)))
        return 0
    if args.long_run_only:
        print(json.dumps(long_run(args.long_slots, args.long_bins, 2.0, args.seed)))
        return 0
    start = time.perf_counter()
    child = long_run_child(args.long_slots, args.long_bins, 2.0, args.seed) if args.long_slots else None
    streams, missing = make_streams(slots, args.data_dir, b_sigmas, b10k_sigmas, epsilons, b_epsilons)
    results = evaluate(args.repeats, args.seed, streams, args.data_dir, args.workers, args.b_repeats)
    results["missing"] = missing
    results["paired"] = paired_rows(results["runs"])
    results["audit"] = {"slots": args.audit_slots,
                        "variants": {n: dpi_audit.audit(n, args.audit_slots, 2000) for n in DPI_METHODS}}
    if child is not None:
        results["long_run"] = long_run_result(child)
    results["config"] = {"command": "python -m benchmarks.dpi_results " + " ".join(argv if argv is not None
                                                                                  else sys.argv[1:]),
                         "repeats": args.repeats, "b_repeats": args.b_repeats or args.repeats, "seed": args.seed,
                         "slots": slots, "long_slots": args.long_slots, "workers": args.workers,
                         "sweep_stream": results.pop("sweep_stream"), "wall_seconds": time.perf_counter() - start}
    figures = plot(results, args.figures)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as handle:
        handle.write(render(results, figures))
    os.makedirs(os.path.dirname(args.json_out) or ".", exist_ok=True)
    with open(args.json_out, "w") as handle:
        json.dump(results, handle, indent=0)
    no_better = sum(row["verdict"] == "no better than uniform" for row in results["paired"])
    print(json.dumps({"out": args.out, "figures": figures, "wall_seconds": results["config"]["wall_seconds"],
                      "paired_tests": len(results["paired"]), "no_better_than_uniform": no_better,
                      "long_run": {k: v for k, v in results.get("long_run", {}).items() if k != "checkpoints"},
                      "missing": results["missing"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
