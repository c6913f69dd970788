"""Issue #16's evaluation of DPI: one command writes ``docs/results_dpi.md`` (and its figures).

    nice -n 10 python -m benchmarks.dpi_results --data-dir /work/shared/data

Streams (spec §4.1): **COVID-19** (JHU daily counts, ``covid19_jhu_daily``: each new case is a record whose
item is its country; the 109 countries with the most cases and one "other" item make k = 110; 48,925 records
drawn from all cases, each placed uniformly within its day, split into 1,000 equal slots), **synthetic A**
(k = 100, each slot's item counts ~ N(100, σ²), σ drawn from 1..10 per slot), **synthetic B** (k = 1,000,
counts ~ N(1000, σ²), the dataset with σ = 10) and a **Zipf(1.5)** stream (k = 100, 10,000 records a slot:
the skewed stress test the paper lacks).  Records are users, as in the paper (spec §1.2).

Methods, all answering the accumulative query (truth: the PDF of every record so far): ``dpi`` (the paper's
loop, charged its sound upper bound; its ``eps_claimed`` is reported beside), ``dpi-sound`` (exact exponential
mechanism, lifetime budget), **uniform** (data-independent), **exact** (not private) and ``bd`` (a w-event
mechanism, w = 10, ε per window: **a different guarantee**, its per-slot counts summed, clipped at 0 and
normalised).  Metrics (spec §4.2): per-bin MSE and KL(true || released), averaged over the slots; mean ±
standard deviation over the repeats; DPI against uniform by the paired sign-flip test of
:mod:`pipelines.evaluation.stats` (same data and seed for every method).  Then the hyper-parameter sweeps of
Fig. 3 (λ, μ, ζ and the RBA, on COVID-19), the long run of Fig. 11 (``dpi-sound`` alone, in a child process so
that its peak memory is its own) and the privacy audit (TV10, :mod:`benchmarks.dpi_audit`).

Every generator is seeded (``--seed``, then ``seed + 1`` ... for the repeats): the numbers are reproducible and
the releases are NOT private.  Prints a JSON summary and keeps every run in ``--json-out`` (by default beside
the figures), from which ``--render-only`` rewrites the document without running anything.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from benchmarks import dpi_audit
from pipelines.evaluation.stats import holm, paired_lower
from pipelines.evaluation_data import DEFAULT_DATA_DIR
from transforms.mechanisms import (
    FixedRequirement,
    LifetimeRequirement,
    SlotBatch,
    make_mechanism,
)
from transforms.mechanisms.base import ReleaseKind
from transforms.mechanisms.dpi.theory import kl_divergence, pdf_mse
from transforms.mechanisms.noise import insecure_seeded_randomness

COVID_FILE = os.path.join("covid19_jhu_daily", "timeseries_2020-01-22_to_2020-08-17.json.xz")
EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0)
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
    """A stream as per-slot item counts (``slots x k``); each count is that many one-record users."""

    name: str
    description: str
    counts: np.ndarray

    @property
    def bins(self) -> int:
        return self.counts.shape[1]


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


def make_streams(seed: int, slots: dict[str, int], data_dir: str) -> tuple[list[Stream], str | None]:
    """The four streams of repeat ``seed`` (COVID-19 left out, with the reason returned, when its file is absent)."""
    gen = np.random.default_rng(seed)
    streams, missing = [], None
    path = os.path.join(data_dir, COVID_FILE)
    if os.path.exists(path):
        _, daily = load_covid_daily(path)
        streams.append(Stream("covid19", "JHU daily new cases, 48,925 records, 109 countries + other",
                              covid_counts(daily, slots["covid19"], 48_925, 110, gen)))
    else:
        missing = f"COVID-19 skipped: {path} is not on this machine"
    streams.append(Stream("synthetic_a", "N(100, σ²) per item, σ from 1..10 per slot",
                          synthetic_counts(slots["synthetic_a"], 100, 100, gen.integers(1, 11, slots["synthetic_a"]),
                                           gen)))
    streams.append(Stream("synthetic_b", "N(1000, 10²) per item (App. E.2's dataset j = 10)",
                          synthetic_counts(slots["synthetic_b"], 1000, 1000, np.array(10.0), gen)))
    streams.append(Stream("zipf", "Zipf(1.5), 10,000 records a slot",
                          zipf_counts(slots["zipf"], 100, 10_000, 1.5, gen)))
    return streams, missing


# -- running the methods -------------------------------------------------------------------------------------------
def to_pdf(counts: np.ndarray) -> np.ndarray:
    """Counts clipped at 0 and normalised; the uniform distribution when nothing is left (spec I-14)."""
    clipped = np.clip(np.asarray(counts, np.float64), 0, None)
    total = clipped.sum()
    return clipped / total if total > 0 else np.full(clipped.size, 1 / clipped.size)


_POOLS: dict[tuple, np.ndarray] = {}
"""Pool matrices by (k, N, n_units, public seed): built once per process, not once per run (read-only arrays)."""


def build(method: str, bins: int, epsilon: float, settings: dict):
    """``method`` with every user's requirement as its default (records are users arriving every slot)."""
    if method == WEVENT:
        return make_mechanism(WEVENT, bins=bins, epsilon=epsilon, window=WINDOW,
                              default_requirement=FixedRequirement(WINDOW, epsilon))
    mechanism = make_mechanism(method, bins=bins, epsilon=epsilon, default_requirement=LifetimeRequirement(epsilon),
                               **settings)
    pool = mechanism.params.pool
    key = (pool.k, pool.size, pool.n_units, pool.seed)
    if key in _POOLS:
        mechanism._matrix = _POOLS[key]
    else:
        _POOLS[key] = mechanism.pool_matrix()
    return mechanism


def run_methods(counts: np.ndarray, epsilon: float, seed: int, methods=METHODS, settings: dict | None = None) -> dict:
    """Every method on one stream in lock step (same batches, each with ``insecure_seeded_randomness(seed)``).

    Returns per method the mean MSE and KL over the slots of the accumulative query, its seconds, and for the
    DPI variants the claimed and charged ε at the end and the first slot skipped for want of budget."""
    settings = {**DEFAULTS, **(settings or {})}
    slots, bins = counts.shape
    mechanisms = {m: build(m, bins, epsilon, settings) for m in methods if m not in ("uniform", "exact")}
    rngs = {m: insecure_seeded_randomness(seed) for m in mechanisms}
    sums = {m: [0.0, 0.0] for m in methods}
    seconds = dict.fromkeys(mechanisms, 0.0)
    cumulative, wevent_sum = np.zeros(bins, np.int64), np.zeros(bins, np.int64)
    uniform = np.full(bins, 1 / bins)
    last, stopped = {}, {}
    for t in range(slots):
        cumulative += counts[t]
        truth = to_pdf(cumulative)
        batch = SlotBatch.of(range(int(counts[t].sum())), np.repeat(np.arange(bins), counts[t]))
        estimates = {"uniform": uniform, "exact": truth}
        for m, mechanism in mechanisms.items():
            start = time.perf_counter()
            release = mechanism.step(batch, rngs[m])
            seconds[m] += time.perf_counter() - start
            if m == WEVENT:
                wevent_sum += release.histogram
                estimates[m] = to_pdf(wevent_sum)
            else:
                estimates[m] = release.values
                last[m] = release
                if release.kind is ReleaseKind.SKIPPED and m not in stopped:
                    stopped[m] = t
        for m in methods:
            sums[m][0] += pdf_mse(estimates[m], truth)
            sums[m][1] += kl_divergence(truth, estimates[m])
    result = {}
    for m in methods:
        result[m] = {"mse": sums[m][0] / slots, "kl": sums[m][1] / slots}
        if m in mechanisms:
            result[m]["seconds"] = seconds[m]
        if m in last:
            result[m].update(eps_claimed=last[m].figures["eps_claimed"],
                             eps_charged=last[m].figures["eps_charged_total"], stopped_at=stopped.get(m))
    return result


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
def memory_mb(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), in MB (Linux ``/proc``).

    Not ``ru_maxrss``: that survives ``exec``, so a child would report its parent's peak."""
    with open("/proc/self/status") as handle:
        line = next(line for line in handle if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


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


def long_run_in_child(slots: int, bins: int, epsilon: float, seed: int) -> dict:
    """:func:`long_run` in a fresh interpreter, so that its peak memory is the run's alone."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "benchmarks.dpi_results", "--long-run-only", "--long-slots",
                           str(slots), "--long-bins", str(bins), "--seed", str(seed)], cwd=root, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


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


def render(results: dict, figures: list[str] | None = None) -> str:
    """The Markdown document from a results object (see :func:`main`)."""
    runs, paired, config = results["runs"], results["paired"], results["config"]
    streams = results["streams"]
    out = ["# DPI: the evaluation of issue #16", "",
           (f"Generated by `{config['command']}` in {config['wall_seconds']:.0f} s of wall time "
           f"(the figures and this file excluded) on a machine with {os.cpu_count()} cores. Spec: `../shared/spec/dpi.md` §4; the mechanisms "
           "and the readings chosen: [docs/dpi.md](dpi.md). Every generator is seeded: the numbers are "
           "reproducible and these releases are **not** private (a deployment uses the secure generator)."), "",
           "## Set-up", "",
           (f"- Repeats: {config['repeats']} per point (seeds {config['seed']}..{config['seed'] + config['repeats'] - 1});"
           " every method sees the same data and the same seed in a repeat, so the comparisons are paired."),
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
           "", "| stream | k | slots | records a slot (mean) | what |", "|---|---|---|---|---|"]
    for s in streams:
        out.append(f"| {s['name']} | {s['bins']} | {s['slots']} | {s['records_per_slot']:,.0f} | {s['description']} |")
    if results.get("missing"):
        out += ["", f"**{results['missing']}.**"]
    out += ["", ("COVID-19 preprocessing (spec §4.1; the paper's Kaggle file is not available offline): the JHU "
            "cumulative counts become daily new cases (negative corrections count 0); each case is a record whose "
            "item is its country, the 109 countries with the most cases keep their item and the rest share "
            "\"other\" (k = 110); 48,925 records are drawn from all cases (a fresh draw per repeat), each placed "
            "uniformly within its day, and the 209 days are split into 1,000 equal slots of about 5 h (the paper: "
            "4.38 h). Synthetic B is one of App. E.2's ten k = 1,000 datasets (σ = 10, the farthest from uniform), "
            f"run for {config['slots']['synthetic_b']} slots instead of 2,700 to fit the time budget; synthetic A "
            f"runs {config['slots']['synthetic_a']} of its 3,000 slots.")]
    verdicts = [row for row in paired if row["verdict"] == "no better than uniform"]
    out += ["", "## Plainly", "",
            (f"Of {len(paired)} paired comparisons of a DPI variant with releasing the uniform distribution (per "
            f"stream, ε and metric), DPI is **no better than uniform in {len(verdicts)}** (one-sided paired "
            f"sign-flip test over the repeats, p ≥ {ALPHA}; with {config['repeats']} pairs the smallest possible "
            f"p is {1 / 2 ** config['repeats']:.3f}). Per stream and variant, over every ε (ratios are geometric "
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
    main = [r for r in runs if r["sweep"] is None]
    points = sorted({(r["stream"], r["epsilon"]) for r in main})
    wevent_better = sum(summarise([r["results"][WEVENT]["mse"] for r in main if (r["stream"], r["epsilon"]) == k])[0]
                        < summarise([r["results"]["uniform"]["mse"] for r in main
                                     if (r["stream"], r["epsilon"]) == k])[0] for k in points)
    out += ["", (f"The w-event baseline `{WEVENT}` (**a different guarantee: w-event, not lifetime**; ε per "
                 f"{WINDOW} slots) has a lower mean MSE than uniform at {wevent_better} of {len(points)} (stream, ε) "
                 "points. It is not a competitor under DPI's guarantee: over these streams a user's loss under it "
                 f"grows to ε·T/{WINDOW}. It shows what the data allow when the budget is renewed.")]
    better = [row for row in paired if row["verdict"] == "better than uniform"]
    if better:
        out += ["", "DPI beats uniform only here: " + "; ".join(
            f"{row['stream']} ε = {_eps(row['epsilon'])} `{row['variant']}` {row['metric'].upper()} "
            f"(ratio {row['ratio']:.3g}, p = {row['p_better']:.3f})" for row in better) + "."]
    for stream in [s["name"] for s in streams]:
        out += ["", f"## {stream}", ""] + stream_table(runs, stream)
        slots = next(s["slots"] for s in streams if s["name"] == stream)
        timing = {m: summarise([r["results"][m]["seconds"] for r in runs if r["stream"] == stream
                                and r["sweep"] is None])[0] / slots for m in METHODS if m in runs[0]["results"]
                  and "seconds" in runs[0]["results"][m]}
        out += ["", "Mechanism time per slot (mean over the runs above, on the shared machine; building the pool is not "
                "timed): "
                + ", ".join(f"`{m}` {1e3 * t:.2f} ms" for m, t in timing.items()) + "."]
        if figures:
            out += [""] + [f"![{stream}](results_dpi/{f})" for f in figures if f.startswith(stream)]
    out += ["", "## DPI against uniform: paired tests", "",
            ("One-sided sign-flip tests on the log ratio over the repeats (`pipelines/evaluation/stats.py`): "
            "`p(better)` tests \"DPI < uniform\", `p(worse)` tests \"uniform < DPI\"; Holm adjusts `p(better)` "
            "over every row."), "",
            "| stream | ε | variant | metric | DPI/uniform | DPI wins | p(better) | Holm | p(worse) | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for row in paired:
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
                f"(data generation and metrics included), **peak RSS {lr['peak_rss_mb']:.0f} MB** (a child "
                f"process of its own). Resident memory went from {first['rss_mb']:.1f} MB at slot {first['slot']:,} "
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
    for stream in [s["name"] for s in results["streams"]]:
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
def evaluate(repeats: int, seed: int, epsilons, slots: dict[str, int], data_dir: str) -> dict:
    """The main sweep (every stream, ε, repeat, method) and Fig. 3's sweeps on the first stream."""
    runs, described, missing = [], [], None
    for repeat in range(repeats):
        streams, missing = make_streams(seed + repeat, slots, data_dir)
        if repeat == 0:
            described = [{"name": s.name, "description": s.description, "bins": s.bins, "slots": s.counts.shape[0],
                          "records_per_slot": float(s.counts.sum(axis=1).mean())} for s in streams]
        for stream in streams:
            for epsilon in epsilons:
                runs.append({"stream": stream.name, "epsilon": epsilon, "seed": seed + repeat, "sweep": None,
                             "results": run_methods(stream.counts, epsilon, seed + repeat)})
        sweep = streams[0]
        for name, values in SWEEPS.items():
            for value in values:
                methods = ("dpi",) if name == "lam" else DPI_METHODS
                for epsilon in SWEEP_EPSILONS:
                    runs.append({"stream": sweep.name, "epsilon": epsilon, "seed": seed + repeat,
                                 "sweep": [name, value],
                                 "results": run_methods(sweep.counts, epsilon, seed + repeat, methods, {name: value})})
    return {"runs": runs, "streams": described, "missing": missing, "sweep_stream": described[0]["name"],
            "sweep_min_distance": min_pool_distance(sweep.counts)}


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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilons", default=",".join(_eps(e) for e in EPSILONS))
    parser.add_argument("--slots", default="covid19=1000,synthetic_a=1000,synthetic_b=200,zipf=1000",
                        help="slots per stream")
    parser.add_argument("--long-slots", type=int, default=50_000, help="the long run's slots (0: none)")
    parser.add_argument("--long-bins", type=int, default=1000)
    parser.add_argument("--long-run-only", action="store_true", help="run only the long run and print its JSON")
    parser.add_argument("--audit-slots", type=int, default=1000)
    args = parser.parse_args(argv)
    try:
        epsilons = [float(e) for e in args.epsilons.split(",")]
        slots = {k: int(v) for k, v in (item.split("=") for item in args.slots.split(","))}
    except ValueError:
        parser.error("--epsilons takes numbers and --slots NAME=COUNT pairs, separated by commas")
    if set(slots) != {"covid19", "synthetic_a", "synthetic_b", "zipf"} or min(slots.values()) < 1:
        parser.error("--slots needs covid19, synthetic_a, synthetic_b and zipf, each at least 1")
    if args.repeats < 1 or args.long_slots < 0 or args.long_bins < 2 or args.audit_slots < 1 or min(epsilons) <= 0:
        parser.error("--repeats and --audit-slots must be >= 1, --long-slots >= 0, --long-bins >= 2, ε > 0")
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
    results = evaluate(args.repeats, args.seed, epsilons, slots, args.data_dir)
    results["paired"] = paired_rows(results["runs"])
    if args.long_slots:
        results["long_run"] = long_run_in_child(args.long_slots, args.long_bins, 2.0, args.seed)
    results["audit"] = {"slots": args.audit_slots,
                        "variants": {n: dpi_audit.audit(n, args.audit_slots, 2000) for n in DPI_METHODS}}
    results["config"] = {"command": "python -m benchmarks.dpi_results " + " ".join(argv if argv is not None
                                                                                  else sys.argv[1:]),
                         "repeats": args.repeats, "seed": args.seed, "slots": slots, "long_slots": args.long_slots,
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
