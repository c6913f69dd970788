"""The DPI evaluation's settings and streams (spec §4.1): the ε grids, sweeps and methods compared, and the
per-slot item counts of COVID-19, synthetic A and B and Zipf(1.5), drawn one slot at a time from a seed.
"""

from __future__ import annotations

import functools
import json
import lzma
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np




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
