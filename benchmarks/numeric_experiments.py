"""The numeric evaluation's runs (spec ``ipp_app_capp.md`` §6): its settings, the exact window check
(:class:`Ledger`), the non-sampling, sampling, other-base, δ-sweep and high-dimensional experiments, and the
paper's ordering claims decided by paired sign-flip tests (Holm-adjusted).  :mod:`benchmarks.numeric_results`
runs them and :mod:`benchmarks.numeric_page` writes the page.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from pipelines.evaluation.stats import holm, paired_lower, sign_flip_p_value
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import secure_randomness
from transforms.mechanisms.noise.generators import insecure_seeded_randomness
from transforms.mechanisms.numeric.bases import BASES
from transforms.mechanisms.numeric.bases import LABELS as BASE_LABELS
from transforms.mechanisms.numeric.baselines import (
    AbsorptionParams,
    ToplParams,
    ba_sw,
    topl,
)
from transforms.mechanisms.numeric.perturbation import (
    PerturbationParams,
    build_client,
    perturb_queries,
    perturb_streams,
    worst_window_units,
)
from transforms.mechanisms.numeric.sampling import SamplingParams, pp_sampling
from transforms.mechanisms.numeric.server import (
    cosine_distances,
    mse,
    sma,
    subsequence_means,
    wasserstein_w1,
)
from transforms.mechanisms.numeric.square_wave import DEFAULT_GRID_BITS
from benchmarks.numeric_data import Series


METHODS = ("sw", "ipp", "app", "capp", "ba-sw", "topl")
LABELS = {"sw": "SW-direct", "ipp": "IPP", "app": "APP", "capp": "CAPP", "ba-sw": "BA-SW", "topl": "ToPL(PM)",
          "sampling": "Sampling", "pp-s": "PP-S", "app-s": "APP-S", "capp-s": "CAPP-S"}
EPSILONS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
WINDOWS = (10, 30, 50)  # Figs 4, 5: w = q (spec §6.2.1); the other experiments run at their own w
ACCOUNTINGS = ("reference", "strict")
QUERIES = 40       # evenly spaced query starts (the reference code's h = floor(len/40))
BURN_IN = 4        # strict, long series: the stream starts BURN_IN·w slots before each query
WHOLE_STREAM_SLOTS = 2500  # strict: series up to this length run as one stream per user (queries read out)


ALPHA = 0.05
EQUIVALENCE = 0.10  # "≈": the geometric-mean ratio within ±10%


# spec §6.4.3, Volume, w = 10: the reference code's stored table (BA-SW left out: it ran at window 1205, T18) and,
# where given, the spec author's re-implementation; method -> (MSE, cosine distance) per ε
REF_VOLUME_W10 = {
    0.5: {"sw": (6.169e-2, 0.402), "ipp": (6.244e-2, 0.267), "app": (6.051e-2, 0.266), "capp": (5.335e-2, 0.229),
          "topl": (50.90, 0.964)},
    1.0: {"sw": (5.829e-2, 0.397), "ipp": (6.301e-2, 0.247), "app": (5.419e-2, 0.255), "capp": (5.230e-2, 0.226),
          "topl": (12.75, 0.930)},
    1.5: {"sw": (5.380e-2, 0.381), "ipp": (5.583e-2, 0.240), "app": (5.046e-2, 0.244), "capp": (4.773e-2, 0.227),
          "topl": (5.850, 0.895)},
    2.0: {"sw": (5.621e-2, 0.379), "ipp": (5.301e-2, 0.233), "app": (5.011e-2, 0.246), "capp": (4.614e-2, 0.227),
          "topl": (2.925, 0.900)},
    2.5: {"sw": (5.317e-2, 0.354), "ipp": (4.837e-2, 0.218), "app": (4.314e-2, 0.233), "capp": (4.300e-2, 0.221),
          "topl": (1.947, 0.832)},
    3.0: {"sw": (5.085e-2, 0.351), "ipp": (4.850e-2, 0.221), "app": (4.200e-2, 0.226), "capp": (4.143e-2, 0.221),
          "topl": (1.357, 0.812)},
}
SPEC_VOLUME_W10 = {
    0.5: {"sw": (6.27e-2, 0.403), "ipp": (6.34e-2, 0.258), "app": (5.94e-2, 0.260), "capp": (5.27e-2, 0.221),
          "ba-sw": (1.27e-1, 0.371), "topl": (53.8, 0.960)},
    1.0: {"sw": (5.91e-2, 0.394), "ipp": (5.82e-2, 0.252), "app": (5.64e-2, 0.252), "capp": (5.05e-2, 0.227),
          "ba-sw": (1.16e-1, 0.358), "topl": (13.4, 0.917)},
    3.0: {"sw": (5.05e-2, 0.352), "ipp": (4.66e-2, 0.214), "app": (4.15e-2, 0.225), "capp": (4.19e-2, 0.222),
          "ba-sw": (9.14e-2, 0.319), "topl": (1.32, 0.798)},
}
MSE_SLACK, COSINE_SLACK = 1.12, 0.02  # the acceptance test's widening (its module doc says why)


def acceptance_range(epsilon: float, method: str) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The spec §6.4.3 range of (MSE, cosine distance) for Volume, w = 10, or None where the spec gives none."""
    known = [t[epsilon][method] for t in (REF_VOLUME_W10, SPEC_VOLUME_W10) if method in t.get(epsilon, {})]
    if not known:
        return None
    mses, cosines = [k[0] for k in known], [k[1] for k in known]
    return ((min(mses) / MSE_SLACK, max(mses) * MSE_SLACK),
            (min(cosines) - COSINE_SLACK, max(cosines) + COSINE_SLACK))


# ------------------------------------------------------------------ the privacy check


def windowed_worst_units(charges, first_dependency, window: int) -> np.ndarray:
    """:func:`worst_window_units` on long streams in ``O(slots·(w + lag))``: the same exact values.

    A span ``[a, a + w - 1]`` touches only reports in ``[a, a + w - 1 + lag]`` (``lag``: the longest reach of a
    report back to its first dependency), so the stream is checked in overlapping chunks that each hold every
    span they are responsible for in full; a span cut by a chunk's edge counts a subset of its reports, never
    more, so the maximum over chunks is the exact worst."""
    charges = np.asarray(charges, np.int64)
    first = np.asarray(first_dependency, np.int64)
    slots = charges.shape[-1]
    lag = int(np.max(np.arange(slots) - first, initial=0))
    reach = window - 1 + lag
    step = max(4 * (reach + 1), 64)
    worst = np.zeros(charges.shape[:-1], np.int64)
    for begin in range(0, slots, step):
        stop = min(slots, begin + step + reach)
        worst = np.maximum(worst, worst_window_units(charges[..., begin:stop], first[..., begin:stop] - begin,
                                                     window))
        if stop == slots:
            break
    return worst


@dataclass
class Ledger:
    """Exact window checks of every run: how many runs and user rows, and the violations."""

    runs: int = 0
    rows: int = 0
    violations: int = 0
    worst_fraction: float = 0.0
    failures: list = field(default_factory=list)
    unclaimed_runs: int = 0
    unclaimed_over: int = 0

    def check(self, label: str, charges, first, window: int, epsilon: float, claimed: bool = True) -> float:
        """Check one run; returns its largest window spend as a fraction of ε.  ``claimed=False``: a paper
        reading that is not claimed to be w-event private (checked and counted apart, not a violation)."""
        budget = to_units(epsilon, "epsilon")
        charges, first = np.asarray(charges), np.asarray(first)
        same = (charges == charges[:1]).all() and (first == first[:1]).all()
        worst = windowed_worst_units(charges[:1] if same else charges, first[:1] if same else first, window)
        over = int(np.count_nonzero(worst > budget)) * (charges.shape[0] if same else 1)
        fraction = float(worst.max()) / budget
        if not claimed:
            self.unclaimed_runs += 1
            self.unclaimed_over += over > 0
            return fraction
        self.runs += 1
        self.rows += charges.shape[0]
        self.violations += over
        self.worst_fraction = max(self.worst_fraction, fraction)
        if over:
            self.failures.append(f"{label}: {over} rows over ε")
        return fraction


# ------------------------------------------------------------------ runs


def generator(seed: int | None, *key):
    """The run's randomness: secure, or (replay) seeded by ``seed`` and the run's key (no method in it, so
    every method of a repeat draws from the same seed)."""
    if seed is None:
        return secure_randomness()
    words = [zlib.crc32(k.encode()) if isinstance(k, str) else int(k) for k in key]
    digest = np.random.SeedSequence([seed, *words]).generate_state(1)[0]
    return insecure_seeded_randomness(int(digest))


def query_starts(slots: int, window: int, first: int = 0) -> np.ndarray:
    """The reference's query starts ``0, h, 2h, ... <= slots - window`` with ``h = floor(slots/40)``, the first
    ``QUERIES`` of them, each moved to at least ``first`` (strict runs need ``first`` slots of stream before)."""
    starts = np.arange(0, slots - window + 1, max(1, slots // QUERIES))[:QUERIES]
    return np.maximum(starts, first)


def release(method: str, epsilon: float, window: int, accounting: str, x: np.ndarray, rng, base: str = "sw"):
    """One method's release of every row of ``x`` (queries, or streams under ``strict``): a ``Perturbed``
    (``base``: the clients' randomizer, Fig 9)."""
    if method == "ba-sw":
        return ba_sw(AbsorptionParams(epsilon, window), x, rng)
    if method == "topl":
        return topl(ToplParams(epsilon, window), x, rng)
    if accounting == "reference":
        memory = {"unbounded": True} if method in ("app", "capp") else {}
        params = PerturbationParams(epsilon, window, method, reset=x.shape[1], budget="paper", base=base, **memory)
        return perturb_queries(params, x, rng)
    return perturb_streams(PerturbationParams(epsilon, window, method, base=base), x, rng)


def published(method: str, reports: np.ndarray) -> np.ndarray:
    """The published slice: SW-direct raw, the others after the trailing SMA of size 3 (the reference)."""
    return reports if method == "sw" else sma(reports, 3, "trailing")


@dataclass(frozen=True)
class Config:
    window: int = 10
    repeats: int = 5
    reps: int = 40            # repetitions of every query within one repeat (single-user series)
    seed: int | None = None
    epsilons: tuple = EPSILONS


def nonsampling(series: Series, config: Config, ledger: Ledger, methods: dict | None = None) -> dict:
    """Per accounting, method, ε: arrays over repeats of MSE and mean cosine distance (and for multi-user data
    the crowd-level W1 averaged over queries); dropped cosine rows counted.  ``methods``: key -> (method, base)
    (default :data:`METHODS` on the square wave); every method of a repeat draws from the same seed."""
    methods = methods or {m: (m, "sw") for m in METHODS}
    w = config.window
    users, slots = series.values.shape
    reps = config.reps if users == 1 else 1
    out = {"mse": {}, "cos": {}, "w1": {}, "dropped": 0}
    for accounting in ACCOUNTINGS:
        whole = accounting == "strict" and slots <= WHOLE_STREAM_SLOTS
        lead = BURN_IN * w if accounting == "strict" and not whole else 0
        starts = query_starts(slots, w, lead)
        slices = starts[:, None] + np.arange(w)
        x = np.repeat(series.values[:, slices].reshape(-1, w), reps, axis=0)  # rows (user, query, rep)
        if whole:  # every user's whole series, reps times: rows (user, rep)
            inputs = np.repeat(series.values, reps, axis=0)
        elif lead:  # each query with its burn-in: rows (user, query, rep)
            inputs = np.repeat(series.values[:, (starts - lead)[:, None] + np.arange(lead + w)].reshape(-1, lead + w),
                               reps, axis=0)
        else:
            inputs = x
        truth = x.mean(axis=1)
        for e_index, epsilon in enumerate(config.epsilons):
            for key, (method, base) in methods.items():
                scores = np.empty((3, config.repeats))
                for repeat in range(config.repeats):
                    rng = generator(config.seed, series.name, accounting, e_index, repeat)
                    run = release(method, epsilon, w, accounting, inputs, rng, base)
                    ledger.check(f"{series.name}/{accounting}/{key}/ε={epsilon}/{repeat}", run.charges,
                                 run.first_dependency, w, epsilon)
                    if whole:
                        reports = run.reports[:, slices].reshape(users, reps, len(starts), w)
                        reports = reports.transpose(0, 2, 1, 3).reshape(-1, w)
                    else:
                        reports = run.reports[:, lead:]
                    estimates = subsequence_means(reports)
                    distances, dropped = cosine_distances(x, published(method, reports))
                    out["dropped"] += dropped
                    scores[0, repeat] = mse(estimates, truth)
                    scores[1, repeat] = distances.mean()
                    if users > 1:
                        pairs = zip(estimates.reshape(users, -1).T, truth.reshape(users, -1).T)
                        scores[2, repeat] = np.mean([wasserstein_w1(a, b) for a, b in pairs])
                cell_key = (accounting, key, epsilon)
                out["mse"][cell_key], out["cos"][cell_key] = scores[0], scores[1]
                if users > 1:
                    out["w1"][cell_key] = scores[2]
    return out


# ------------------------------------------------------------------ claims


# (metric, better, worse, kind): "<" one-sided paired test; "≈" equivalence within ±EQUIVALENCE
CLAIMS = (("mse", "capp", "app", "<"), ("mse", "app", "ipp", "<"), ("mse", "ipp", "sw", "≈"),
          ("mse", "sw", "ba-sw", "<"), ("mse", "capp", "sw", "<"),
          ("cos", "capp", "app", "<"), ("cos", "ipp", "app", "<"), ("cos", "ipp", "sw", "<"),
          ("cos", "ba-sw", "sw", "<"))


@dataclass(frozen=True)
class Claim:
    dataset: str
    accounting: str
    metric: str
    a: str
    b: str
    kind: str
    pairs: int
    wins: int
    ratio: float
    p_value: float
    adjusted: float = 1.0
    window: int = 10

    @property
    def holds(self) -> bool:
        if self.kind == "≈":
            return abs(math.log(self.ratio)) <= math.log(1 + EQUIVALENCE)
        return self.adjusted < ALPHA

    @property
    def text(self) -> str:
        return f"{LABELS[self.a]} {self.kind} {LABELS[self.b]}"


def decide(dataset: str, accounting: str, results: dict, epsilons, claims_to_test=CLAIMS, window: int = 10
           ) -> list[Claim]:
    """The paired tests of ``claims_to_test`` over (ε, repeat) pairs (same data and seed for both methods) of the
    runs at ``window``."""
    claims = []
    for metric, a, b, kind in claims_to_test:
        first = np.concatenate([results[metric][(accounting, a, e)] for e in epsilons])
        second = np.concatenate([results[metric][(accounting, b, e)] for e in epsilons])
        test = paired_lower(first, second)
        p = test.p_value
        if kind == "≈":  # two-sided: is there a detectable difference at all
            logs = np.log(first) - np.log(second)
            p = min(1.0, 2 * min(sign_flip_p_value(logs), sign_flip_p_value(-logs)))
        claims.append(Claim(dataset, accounting, metric, a, b, kind, test.pairs, test.wins, test.ratio, p,
                            window=window))
    return claims


def adjust(claims: list[Claim]) -> list[Claim]:
    """Holm over the one-sided claims of one accounting and window (the family the page reports as holding or
    not: each w is its own experiment, so adding a w leaves the others' verdicts as they were)."""
    out = list(claims)
    for accounting, window in {(c.accounting, c.window) for c in out}:
        index = [i for i, c in enumerate(out) if (c.accounting, c.window) == (accounting, window) and c.kind == "<"]
        for i, p in zip(index, holm([out[i].p_value for i in index])):
            out[i] = Claim(**{**out[i].__dict__, "adjusted": p})
    return out


# ------------------------------------------------------------------ other base mechanisms (Fig 9)


FIG9_METHODS = {f"{b}:{m}": (m, b) for b in BASES for m in ("sw", "ipp", "app", "capp") if m != "capp" or b == "sw"}
"""X-direct, X-IPP, X-APP for every base X (CAPP on SW only: its bounds are SW's, bases.py says why)."""
LABELS.update({k: f"{BASE_LABELS[b]}-{'direct' if m == 'sw' else m.upper()}" for k, (m, b) in FIG9_METHODS.items()})
FIG9_CLAIMS = tuple((metric, f"{b}:app", f"{b}:sw", "<") for b in BASES for metric in ("mse", "cos"))
FIG9_DATA = ("C6H6", "Volume")


def other_bases(series: Series, config: Config, ledger: Ledger, fig4: dict) -> dict:
    """Fig 9: X-direct / X-IPP / X-APP for X in Laplace, SR, PM (:func:`nonsampling`'s protocol, both
    accountings, the same queries and seeds) beside SW's, which are Fig 4's runs ``fig4`` (not run again)."""
    out = nonsampling(series, config, ledger, {k: v for k, v in FIG9_METHODS.items() if v[1] != "sw"})
    for metric in ("mse", "cos"):
        out[metric].update({(a, f"sw:{m}", e): v for (a, m, e), v in fig4[metric].items() if m in METHODS[:4]})
    return out


# ------------------------------------------------------------------ sampling (Figs 6, 7) and the δ sweep (Fig 11)


SAMPLING_SHAPES = ((20, 10), (30, 20))  # (w, q): q <= w, so the per-query non-sampled runs are w-event private
LONG_QUERY_SHAPES = ((30, 40), (20, 30))  # q > w (spec §6.2.2's other shapes)
SAMPLING_ACCOUNTINGS = ("strict", "paper")
SAMPLING_METHODS = ("sw", "app", "capp", "sampling", "pp-s", "app-s", "capp-s")
SAMPLING_CLAIMS = (("sampling", "sw"), ("app-s", "app"), ("capp-s", "capp"), ("capp-s", "sw"))
SAMPLING_BASE = {"sampling": "none", "pp-s": "ipp", "app-s": "app", "capp-s": "capp"}


def sampling_run(series: Series, config: Config, ledger: Ledger, shapes=SAMPLING_SHAPES, accounting: str = "strict",
                 queries: int = 100) -> dict:
    """Per (w, q), method, ε: MSE and cosine distance over repeats; random query starts shared across ε
    (the reference's protocol, §6.2.2), sampled methods at the ``accounting``'s ``n_w``, the others on their
    ``q``-slot query (a query is all they report): for ``q <= w`` at ``ε/q`` per report; for ``q > w`` under
    ``strict`` the library's clients (SW-direct ``ε/w``, APP/CAPP ``ε/(2w)`` with ``h = w``), under ``paper``
    the reference's ``ε/min(q, w)`` with every deviation of the query remembered.  The paper readings at
    ``q > w`` are not claimed w-event private: their window spend is measured (``worst``), not a violation."""
    out = {"mse": {}, "cos": {}, "samples": {}, "worst": {}}
    slots = series.values.shape[1]
    for w, q in shapes:
        starts = np.random.default_rng(q * 1000 + w).integers(0, slots - 61, queries)  # fixed: shared across ε
        x = np.repeat(series.values[0, starts[:, None] + np.arange(q)], max(1, config.reps // 4), axis=0)
        truth = x.mean(axis=1)
        for e_index, epsilon in enumerate(config.epsilons):
            for method in SAMPLING_METHODS:
                scores = np.empty((2, config.repeats))
                for repeat in range(config.repeats):
                    rng = generator(config.seed, series.name, "sampling", w, q, e_index, repeat)
                    claimed = accounting == "strict" or q <= w
                    if method in SAMPLING_BASE:
                        run = pp_sampling(SamplingParams(epsilon, w, SAMPLING_BASE[method], accounting=accounting),
                                          x, rng)
                        reports, charges, first = run.expanded, run.charges, run.first_dependency
                        out["samples"][(w, q, method, epsilon)] = reports.shape[1] // run.segment_length
                    elif q > w and accounting == "strict":
                        run = perturb_streams(PerturbationParams(epsilon, w, method), x, rng)
                        reports, charges, first = run.reports, run.charges, run.first_dependency
                    else:
                        memory = {"unbounded": True} if method != "sw" else {}
                        params = PerturbationParams(epsilon, min(q, w), method, reset=q, budget="paper",
                                                    not_w_event_private=q > w, **memory)
                        run = perturb_queries(params, x, rng)
                        reports, charges, first = run.reports, run.charges, run.first_dependency
                    worst = ledger.check(f"{series.name}/sampling/{w},{q}/{accounting}/{method}/ε={epsilon}",
                                         charges, first, w, epsilon, claimed)
                    key = (w, q, method, epsilon)
                    out["worst"][key] = max(out["worst"].get(key, 0.0), worst)
                    scores[0, repeat] = mse(subsequence_means(reports), truth)
                    smoothed = reports if method in ("sw", "app") else sma(reports, 3, "trailing")
                    scores[1, repeat] = cosine_distances(x, smoothed)[0].mean()
                out["mse"][(w, q, method, epsilon)], out["cos"][(w, q, method, epsilon)] = scores
    return out


DELTAS = (-1.0, -0.75, -0.5, -0.25, 0.0, 0.125, 0.25, 0.375, 0.45)  # δ < 1/2: [δ, 1 − δ] must be an interval
DELTA_EPSILONS = (0.5, 1.0, 2.0, 3.0, 5.0)


def delta_sweep(series: Series, config: Config, ledger: Ledger) -> dict:
    """CAPP's MSE on ``w = q = 10`` queries (reference protocol) with δ swept, and at Eq. 11's δ (Fig 11)."""
    w = 10
    starts = query_starts(series.values.shape[1], w)
    x = np.repeat(series.values[0, starts[:, None] + np.arange(w)], config.reps, axis=0)
    out = {}
    for e_index, epsilon in enumerate(DELTA_EPSILONS):
        for delta in (*DELTAS, None):
            scores = np.empty(config.repeats)
            for repeat in range(config.repeats):
                params = PerturbationParams(epsilon, w, "capp", unbounded=True, reset=w, budget="paper", delta=delta)
                run = perturb_queries(params, x, generator(config.seed, series.name, "delta", e_index, repeat))
                ledger.check(f"{series.name}/delta={delta}/ε={epsilon}", run.charges, run.first_dependency, w,
                             epsilon)
                scores[repeat] = mse(subsequence_means(run.reports), x.mean(axis=1))
            out[(epsilon, delta)] = scores
    return out


HIGH_DIMENSIONS = (5, 10)
HIGH_WINDOW = 20


def sin_data(dims: int, length: int) -> np.ndarray:
    """Fig 10's Sin-data: ``(1 + sin(2π t / p_k))/2`` with periods ``p_k = 10 + 7k`` (spec §6.1: distinct
    frequencies; the paper gives none)."""
    t = np.arange(length)
    return (1 + np.sin(2 * np.pi * t[None, :] / (10 + 7 * np.arange(dims))[:, None])) / 2


def held(values: np.ndarray, reported: np.ndarray) -> np.ndarray:
    """Each slot's last report (the first report before it), along the last axis: SS's gap filling."""
    index = np.where(reported, np.arange(values.shape[-1]), -1)
    index = np.maximum.accumulate(index, axis=-1)
    index = np.where(index < 0, np.argmax(reported), index)
    return np.take_along_axis(values, np.broadcast_to(index, values.shape), axis=-1)


def high_dimensional(config: Config, ledger: Ledger, length: int) -> dict:
    """Fig 10, per accounting, (d, method, scheme, ε): MSE of the dimensions' query means (the mean of their
    reports) and the cosine distance of the held, trailing-SMA slices, over repeats (spec §3.8.2's recommended
    readings: SS reports one dimension a slot, round robin, and holds each dimension's last report in between).

    * ``reference`` (queries of w slots from scratch, every deviation of the query remembered): BS reports every
      dimension every slot at ε/(d·w); SS dimension ``j mod d`` at the query's slot ``j`` at ε/w.
    * ``strict`` (every dimension's whole series as one stream, ``reps`` times, the queries read out of it):
      APP/CAPP remember ``h`` reports of their dimension; a change within w slots touches the span's reports
      and the next ``h`` reports of each dimension: BS ``h = w``, ε/(d·(w + h)) per report; SS ``h = ceil(w/d)``
      (a window's reports of one dimension), a report depends on its dimension's slots back to ``t - h·d``,
      ε/(w + d·h) per report.  The exact window check verifies both.
    """
    w = HIGH_WINDOW
    out = {"mse": {}, "cos": {}}
    for d in HIGH_DIMENSIONS:
        data = sin_data(d, length)
        starts = query_starts(length, w)
        slices = starts[:, None] + np.arange(w)
        x = np.repeat(data[:, slices], config.reps, axis=1)  # (d, rows, w), rows (query, rep)
        truth = x.mean(axis=-1)
        streams = np.repeat(data[:, None, :], config.reps, axis=1)  # strict: (d, reps, length)
        for e_index, epsilon in enumerate(config.epsilons):
            units = to_units(epsilon, "epsilon")
            for method in ("app", "capp"):
                for scheme in ("BS", "SS"):
                    for accounting in ACCOUNTINGS:
                        strict = accounting == "strict"
                        scores = np.empty((2, config.repeats))
                        for repeat in range(config.repeats):
                            key = ("sin", d, e_index, repeat) if not strict else ("sin", "strict", d, e_index, repeat)
                            rng = generator(config.seed, *key)
                            run = (_high_strict if strict else _high_reference)(streams if strict else x, d, w, units,
                                                                                method, scheme, rng)
                            released, estimates, spent, first = run
                            if strict:  # read the queries out of the streams: rows (query, rep) as x's
                                released = released[:, :, slices].transpose(0, 2, 1, 3).reshape(x.shape)
                                estimates = estimates[:, :, slices]
                                reported = ~np.isnan(estimates)
                                estimates = (np.where(reported, estimates, 0).sum(-1) / reported.sum(-1))
                                estimates = estimates.transpose(0, 2, 1).reshape(truth.shape)
                            ledger.check(f"sin/{accounting}/d={d}/{method}/{scheme}/ε={epsilon}", spent, first, w,
                                         epsilon)
                            scores[0, repeat] = mse(estimates, truth)
                            scores[1, repeat] = cosine_distances(x, sma(released, 3, "trailing"))[0].mean()
                        cell_key = (accounting, d, method, scheme, epsilon)
                        out["mse"][cell_key], out["cos"][cell_key] = scores
    return out


def _high_reference(x: np.ndarray, d: int, w: int, units: int, method: str, scheme: str, rng):
    """One reference run of Fig 10 on the queries ``x`` (d, rows, w): (released, query means, charges, first)."""
    released, estimates = np.empty_like(x), np.empty(x.shape[:2])
    if scheme == "BS":
        client = build_client(units // (d * w), DEFAULT_GRID_BITS, 0, True, w, method == "capp")
        reports = client.run(x.reshape(-1, w), rng)[0].reshape(x.shape)
        released, estimates = reports, reports.mean(axis=-1)
        spent = np.full((1, w), d * client.report_units)
    else:
        client = build_client(units // w, DEFAULT_GRID_BITS, 0, True, w, method == "capp")
        for k in range(d):
            slots = np.arange(k, w, d)
            reported = np.isin(np.arange(w), slots)
            reports = np.zeros(x.shape[1:])
            reports[:, slots] = client.run(x[k][:, slots], rng)[0]
            released[k], estimates[k] = held(reports, reported), reports[:, slots].mean(axis=-1)
        spent = np.full((1, w), client.report_units)
    # a query is all a user reports: every report may depend on the query's first slot
    return released, estimates, spent, np.zeros((1, w), np.int64)


def _high_strict(streams: np.ndarray, d: int, w: int, units: int, method: str, scheme: str, rng):
    """One strict run of Fig 10 on whole streams (d, reps, length): (held releases, reports with NaN where a
    dimension did not report, charges and first dependencies of the merged stream, one row)."""
    length = streams.shape[-1]
    t = np.arange(length)
    if scheme == "BS":
        h = w
        client = build_client(units // (d * (w + h)), DEFAULT_GRID_BITS, h, False, None, method == "capp")
        reports = client.run(streams.reshape(-1, length), rng)[0].reshape(streams.shape)
        return reports, reports, np.full((1, length), d * client.report_units), np.maximum(t - h, 0)[None, :]
    h = -(-w // d)
    client = build_client(units // (w + d * h), DEFAULT_GRID_BITS, h, False, None, method == "capp")
    released, reports = np.empty_like(streams), np.full(streams.shape, np.nan)
    for k in range(d):
        slots = np.arange(k, length, d)
        reports[k][:, slots] = client.run(streams[k][:, slots], rng)[0]
        released[k] = held(np.nan_to_num(reports[k]), t % d == k)
    return released, reports, np.full((1, length), client.report_units), np.maximum(t - h * d, t % d)[None, :]
