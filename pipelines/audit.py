"""Empirical privacy audit: a statistical lower bound on what a mechanism leaks about one user.

    python -m pipelines.audit --mechanism pba --runs 1000 --json
    python -m pipelines.audit --mechanism all --insecure-seed 7 --json

For user i (user 0) with requirement ``(w_i, E_i)`` it builds two neighbouring
streams that differ only in user i's reports inside one window of ``w_i``
slots, runs the mechanism ``R`` times on each with independent randomness, and
bounds the privacy loss from below with a threshold test on one number per run.
The audit flags a violation when the bound exceeds ``E_i``.  A lower bound can
only show violations: passing is evidence, not proof (``docs/audit.md``).

**Streams.** ``users`` users, 2 bins, everyone with user i's requirement (one
cohort, so no subsampling; the homogeneous baselines run with ``(E_i, w_i)``;
the dynamic mechanisms get ``(w_B, E_B, w_F, E_F) = (w_i, E_i, w_i, E_i)``).
The others switch bins together at every slot, so the data always moves far
more than the noise and publication decisions hardly depend on user i; user i
sits in bin 0.  After ``warmup`` slots (default ``w_i - 1``, so the window
starts when every budget window has formed) comes the window of ``w_i`` slots,
in which user i reports bin 0 in the first stream and nothing in the second
(add/remove-one neighbours, sensitivity 1).

**Statistic.** Per run, the privacy-loss sign test of the fresh releases in the
window: ``S = Σ ε_t · (+1 if r_t[0] > c_t else -1)`` over fresh slots ``t``,
with ``ε_t`` the release's noise budget (public) and ``c_t`` the others' count
in bin 0 (known to the auditor).  For discrete Laplace noise this is the exact
log-likelihood ratio of the releases given the decisions.

**Bound.** The first quarter of each stream's runs chooses one event: ``{S >= τ}``,
``{S <= τ}``, or the mirrored ``{S >= τ}`` on the present runs pooled with
``{S <= -τ}`` on the absent ones (see :class:`Event`), whichever their
frequencies predict to give the largest bound.  The other runs alone then
measure it, so the confidence statement is honest: ``ε_LB = ln(P_lower /
Q_upper)``, with one-sided Clopper-Pearson bounds at level ``(1 - confidence)/2``
each, P the probability of the event on the side it favours and Q on the
other.  With probability at least ``confidence``, ``ε_LB`` is at most the true
privacy loss of the mechanism on these two streams.

**Ledger.** Every run's charges go through a :class:`PrivacyLedger`; the
output gives the largest fraction of ``E_i`` that user i was charged in any
``w_i`` consecutive slots over all runs, and the ledger's violation count.

**Noise.** Secure by default (one :class:`SecureRandomness` stream, so runs are
independent).  ``--insecure-seed S`` uses a seeded generator per run (seeds
``(S, stream, run)``, distinct by construction): faster and reproducible, for
this offline audit only; the output says which noise was used.

Prints one line per mechanism (``--json``: one JSON object per line); exit code
0 when nothing was flagged, 1 when a bound exceeded ``E_i`` or the ledger saw a
violation, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Protocol

import numpy as np

from transforms.mechanisms import (MECHANISMS, NO_VALUE, DynamicRequirements, FixedRequirements, PrivacyLedger,
                                   Release, ReleaseKind, SlotBatch, mechanism_class)
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import Randomness, insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.requirements import MAX_WINDOW
from transforms.mechanisms.run import mechanism_for

BINS = 2
TARGET = 0
"""User i: user index 0, always in bin 0."""
TARGET_BIN = 0
MAX_RUNS = 10_000_000


class Steppable(Protocol):
    """What the audit needs of a mechanism (registered ones, or wrappers in tests)."""

    requirement_kind: type

    def step(self, batch: SlotBatch, rng: Randomness) -> Release: ...


@dataclass(frozen=True)
class AuditConfig:
    """One audit's setting; validated at construction (``ValueError`` naming the field)."""

    epsilon: float = 2.0
    window: int = 4
    users: int = 20
    runs: int = 1000
    confidence: float = 0.95
    warmup: int | None = None
    insecure_seed: int | None = None

    def __post_init__(self):
        to_units(self.epsilon, "epsilon")
        for name, low, high in (("window", 1, MAX_WINDOW), ("users", 2, 10**7), ("runs", 4, MAX_RUNS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        if isinstance(self.confidence, bool) or not isinstance(self.confidence, (int, float)) \
                or not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence must be in [0.5, 1), got {self.confidence!r}")
        if self.warmup is not None and (isinstance(self.warmup, bool) or not isinstance(self.warmup, int)
                                        or self.warmup < 0):
            raise ValueError(f"warmup must be an integer >= 0, got {self.warmup!r}")
        if self.insecure_seed is not None and (isinstance(self.insecure_seed, bool)
                                               or not isinstance(self.insecure_seed, int)
                                               or not 0 <= self.insecure_seed < 2**32):
            raise ValueError(f"insecure_seed must be an integer in [0, 2**32), got {self.insecure_seed!r}")

    @property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")

    @property
    def max_window(self) -> int:
        """For :func:`mechanism_for`: the longest window any user declares."""
        return self.window

    @property
    def warmup_slots(self) -> int:
        return self.window - 1 if self.warmup is None else self.warmup

    @property
    def noise(self) -> str:
        if self.insecure_seed is None:
            return "secure"
        return f"INSECURE seeded (seed {self.insecure_seed}): offline audit only"


@dataclass(frozen=True)
class Neighbours:
    """The two streams: user i reports bin 0 in the window (``present``) or not (``absent``)."""

    present: list[SlotBatch]
    absent: list[SlotBatch]
    window_slots: np.ndarray          # the differing slots, 1-based
    others_in_target_bin: np.ndarray  # c_t: the other users' count in user i's bin, per window slot


def neighbouring_streams(config: AuditConfig, dynamic: bool) -> Neighbours:
    """Build the two streams; only user i's rows inside the window differ."""
    n, w, e = config.users, config.window, config.epsilon
    requirements = (DynamicRequirements.of([w] * n, [e] * n, [w] * n, [e] * n) if dynamic
                    else FixedRequirements.of([w] * n, [e] * n))
    first, last = config.warmup_slots + 1, config.warmup_slots + w
    users = np.arange(n)
    present, absent, others = [], [], []
    for slot in range(1, last + 1):
        values = np.full(n, slot % 2)           # the others switch bins together every slot
        values[TARGET] = TARGET_BIN
        declared = requirements if slot == 1 else None
        present.append(SlotBatch.of(users, values, declared))
        if slot >= first:
            gone = values.copy()
            gone[TARGET] = NO_VALUE             # reports nothing (still declares at slot 1)
            absent.append(SlotBatch.of(users, gone, declared))
            others.append(int(np.count_nonzero(values[1:] == TARGET_BIN)))
        else:
            absent.append(present[-1])
    return Neighbours(present, absent, np.arange(first, last + 1), np.array(others, np.int64))


def registered_factory(name: str) -> Callable[[AuditConfig], Steppable]:
    """A factory building registered mechanism ``name`` for an audit (homogeneous ones at ``(E_i, w_i)``)."""
    mechanism_class(name)  # fails early, naming the choices
    return lambda config: mechanism_for(name.lower(), config, BINS)


@dataclass(frozen=True)
class RunOutcome:
    """One run: the statistic S (budget units), user i's largest window usage ratio, ledger findings."""

    statistic: int
    usage_ratio: float
    ledger_violations: int
    fresh_in_window: int


def run_once(mechanism: Steppable, batches: list[SlotBatch], neighbours: Neighbours, rng: Randomness,
             config: AuditConfig) -> RunOutcome:
    """Step one stream through ``mechanism``, checking every charge in a fresh ledger."""
    ledger = PrivacyLedger(max_window=config.window)
    first = int(neighbours.window_slots[0])
    statistic, ratio, fresh = 0, 0.0, 0
    for batch in batches:
        release = mechanism.step(batch, rng)
        slot = release.slot
        ledger.record(slot, release.charges)
        spent = ledger.window_sum(TARGET, max(1, slot - config.window + 1), slot)
        ratio = max(ratio, spent / config.epsilon_units)
        if slot >= first and release.kind is ReleaseKind.FRESH:
            fresh += 1
            above = int(release.histogram[TARGET_BIN]) > int(neighbours.others_in_target_bin[slot - first])
            statistic += release.epsilon_units if above else -release.epsilon_units
    ledger.close()
    return RunOutcome(statistic, ratio, ledger.violation_count, fresh)


# ---------------------------------------------------------------------- statistics
def _log_choose(n: int) -> np.ndarray:
    """``ln C(n, j)`` for j = 0..n."""
    j = np.arange(1, n + 1)
    return np.concatenate([[0.0], np.cumsum(np.log((n - j + 1) / j))])


def _binomial_log_pmf(n: int, p: np.ndarray, log_choose: np.ndarray) -> np.ndarray:
    """Row r: ``ln P(X = j)`` for j = 0..n, X ~ Binomial(n, p[r]), 0 < p < 1."""
    j = np.arange(n + 1)
    return log_choose + j * np.log(p)[:, None] + (n - j) * np.log1p(-p)[:, None]


def clopper_pearson(successes, n: int, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper-Pearson bounds ``(lower, upper)``, each wrong with probability at most ``tail``.

    ``lower`` solves ``P(Bin(n, p) >= k) = tail`` (0 when k = 0) and ``upper``
    solves ``P(Bin(n, p) <= k) = tail`` (1 when k = n).  Both are roots of a
    function increasing in p whose derivative is ``n`` times a Binomial(n-1, p)
    probability, found by Newton steps kept inside a shrinking bracket (a
    bisection step whenever Newton would leave it) to about 1e-15, then moved
    outward by 1e-12.
    """
    k = np.atleast_1d(np.asarray(successes, np.int64))
    if n < 1 or k.size and (k.min() < 0 or k.max() > n):
        raise ValueError(f"successes must be in [0, n] with n >= 1, got {k.tolist()} of n={n}")
    if not 0 < tail < 1:
        raise ValueError(f"tail must be in (0, 1), got {tail}")
    m = k.size
    # Rows 0..m-1 (lower): h = P(X >= k) - tail; rows m..2m-1 (upper): h = tail - P(X <= k).
    # Both increase with p, and h' = n P(Y = j), Y ~ Bin(n-1, p), j = k-1 (lower) or k (upper).
    column = np.concatenate([k - 1, k])
    lower_rows = np.arange(2 * m) < m
    j = np.clip(column, 0, max(n - 1, 0))
    log_choose, log_choose_less = _log_choose(n), _log_choose(n - 1)
    outcomes = np.arange(n + 1)
    low, high = np.zeros(2 * m), np.ones(2 * m)
    p = np.clip((j + 0.5) / (n + 1), 1e-9, 1 - 1e-9)
    active = np.flatnonzero(np.concatenate([k > 0, k < n]))
    for _ in range(200):
        if active.size == 0:
            break
        q, lo, hi, col, jj = p[active], low[active], high[active], column[active], j[active]
        pmf = np.exp(_binomial_log_pmf(n, q, log_choose))
        counted = np.where(lower_rows[active, None], outcomes > col[:, None], outcomes <= col[:, None])
        h = np.where(lower_rows[active], 1.0, -1.0) * (pmf * counted).sum(axis=1) \
            + np.where(lower_rows[active], -tail, tail)   # P(X >= k) summed directly, never 1 - cdf
        slope = n * np.exp(log_choose_less[jj] + jj * np.log(q) + (n - 1 - jj) * np.log1p(-q))
        hi, lo = np.where(h > 0, q, hi), np.where(h > 0, lo, q)
        with np.errstate(all="ignore"):  # a vanishing slope gives no Newton step: bisect instead
            step = q - h / slope
        following = np.where(np.isfinite(step) & (step > lo) & (step < hi), step, (lo + hi) / 2)
        low[active], high[active] = lo, hi
        converged = np.abs(following - q) <= 1e-15 + 1e-13 * q
        p[active] = np.where(converged, q, following)
        active = active[~converged]
    p[active] = np.where(lower_rows, low, high)[active]  # never reached in practice: the safe bracket end
    lower = np.where(k == 0, 0.0, np.maximum(p[:m] - 1e-12, 0.0))
    upper = np.where(k == n, 1.0, np.minimum(p[m:] + 1e-12, 1.0))
    return lower, upper


class Direction(str, Enum):
    """Which runs an event counts (S is large when user i reports, small when they do not)."""

    AT_LEAST = ">="    # {S >= τ}: more likely with user i present
    AT_MOST = "<="     # {S <= τ}: more likely with user i absent
    MIRRORED = "<>"    # {S >= τ} on the present runs and {S <= -τ} on the absent runs, pooled


@dataclass(frozen=True)
class Event:
    """A threshold event on S, and how to count it.

    A mirrored event is an event of the mechanism M' that flips a fair coin b
    and runs M on the stream (b = 0) or on its neighbour (b = 1): M' is exactly
    as private as M, and ``{b = 0 and S >= τ} or {b = 1 and S <= -τ}`` has
    probability ``(P0(S >= τ) + P1(S <= -τ))/2`` with user i present and
    ``(P1(S >= τ) + P0(S <= -τ))/2`` without.  Counting it over both streams'
    runs (a fixed half with each b) doubles the trials; the count is then
    Poisson-binomial, for which the binomial Clopper-Pearson bounds stay valid
    at these tail levels: a Poisson-binomial's tails beyond its mean are at most
    the binomial ones with the same mean (Hoeffding 1956, "On the distribution
    of the number of successes in independent trials"; checked in the tests).
    """

    direction: Direction
    threshold: int

    def counts(self, present: np.ndarray, absent: np.ndarray) -> tuple[int, int, int]:
        """(runs favouring a larger probability, runs of the other side, trials per side)."""
        t = self.threshold
        if self.direction is Direction.AT_LEAST:
            return int(np.sum(present >= t)), int(np.sum(absent >= t)), present.size
        if self.direction is Direction.AT_MOST:
            return int(np.sum(absent <= t)), int(np.sum(present <= t)), present.size
        return (int(np.sum(present >= t) + np.sum(absent <= -t)), int(np.sum(absent >= t) + np.sum(present <= -t)),
                2 * present.size)

    def __str__(self) -> str:
        value = f"{self.threshold / 10**12:g}"
        if self.direction is Direction.MIRRORED:
            return f"S >= {value} mirrored"
        return f"S {self.direction.value} {value}"


def _bounds(events: list[Event], present: np.ndarray, absent: np.ndarray, tail: float,
            scale: float = 1.0) -> np.ndarray:
    """``ln(P_lower / Q_upper)`` per event (``-inf`` when P_lower is 0).

    ``scale`` != 1 predicts the bound that ``scale`` times as many runs would
    give, with hit counts ``(k + 1/2) * scale`` (the half keeps an event never
    seen on one side from looking impossible there).
    """
    counts = np.array([e.counts(present, absent) for e in events], np.int64).reshape(-1, 3)
    if scale != 1.0:
        trials = np.rint(counts[:, 2] * scale)
        hits = np.minimum(np.rint((counts[:, :2] + 0.5) * scale), trials[:, None])
        counts = np.column_stack([hits, trials]).astype(np.int64)
    scores = np.full(len(events), -np.inf)
    for trials in np.unique(counts[:, 2]):
        pick = counts[:, 2] == trials
        favoured, other = counts[pick, 0], counts[pick, 1]
        distinct, where = np.unique(np.concatenate([favoured, other]), return_inverse=True)
        low, high = clopper_pearson(distinct, int(trials), tail)  # once per distinct count
        with np.errstate(divide="ignore"):
            scores[pick] = np.log(low[where[:favoured.size]]) - np.log(high[where[favoured.size:]])
    return scores


SELECTION_FRACTION = 0.25
"""Share of each stream's runs that only chooses the event (the rest measures it)."""


@dataclass(frozen=True)
class Estimate:
    """The lower bound and how it was found."""

    lower_bound: float
    event: Event | None
    selection_bound: float  # the bound the selection runs predicted for the chosen event (for diagnosis)
    favoured_hits: int      # on the evaluation runs: how often the event held on the side it favours
    other_hits: int         # ... and on the other side
    trials: int             # ... out of this many trials per side
    evaluation_runs: int


def lower_bound(present: np.ndarray, absent: np.ndarray, confidence: float) -> Estimate:
    """Choose the event on the first runs, bound its log-ratio on the others.

    The first ``SELECTION_FRACTION`` of each stream's runs choose the event whose
    frequencies on them predict the largest bound on the remaining runs; those
    remaining runs alone give the bound, which is
    at most the true privacy loss with probability at least ``confidence``
    (each Clopper-Pearson bound fails with probability at most
    ``(1 - confidence)/2``).
    """
    present, absent = np.asarray(present), np.asarray(absent)
    if present.size != absent.size or present.size < 4:
        raise ValueError("need the same number (>= 4) of runs for both streams")
    selected = max(2, int(present.size * SELECTION_FRACTION))
    tail = (1 - confidence) / 2
    values = np.unique(np.concatenate([present[:selected], absent[:selected]]))
    events = [Event(direction, int(t)) for t in values for direction in (Direction.AT_LEAST, Direction.AT_MOST)]
    events += [Event(Direction.MIRRORED, int(t)) for t in values if t > 0]
    evaluation = present.size - selected
    scores = _bounds(events, present[:selected], absent[:selected], tail, evaluation / selected)
    if not np.any(np.isfinite(scores)):
        return Estimate(0.0, None, 0.0, 0, 0, 0, evaluation)
    best = events[int(np.argmax(scores))]
    bound = float(_bounds([best], present[selected:], absent[selected:], tail)[0])
    favoured, other, trials = best.counts(present[selected:], absent[selected:])
    return Estimate(max(bound, 0.0), best, float(np.max(scores)), favoured, other, trials, evaluation)


# ---------------------------------------------------------------------- the audit
@dataclass(frozen=True)
class AuditResult:
    """One audit: the bound, the ledger's findings and the raw statistics (present, absent)."""

    mechanism: str
    config: AuditConfig
    estimate: Estimate
    ledger_max_window_usage_ratio: float
    ledger_violations: int
    fresh_in_window: float          # mean number of fresh releases in the window per run
    seconds: float
    statistics: tuple[np.ndarray, np.ndarray] = field(repr=False, compare=False)

    @property
    def violation(self) -> bool:
        return self.estimate.lower_bound > self.config.epsilon

    def to_json(self) -> dict:
        e, c = self.estimate, self.config
        return {"mechanism": self.mechanism, "epsilon": c.epsilon, "window": c.window,
                "lower_bound": round(e.lower_bound, 6), "runs": c.runs, "violation": self.violation,
                "confidence": c.confidence, "users": c.users, "warmup": c.warmup_slots, "noise": c.noise,
                "event": None if e.event is None else str(e.event), "evaluation_runs": e.evaluation_runs,
                "event_trials": e.trials, "favoured_hits": e.favoured_hits, "other_hits": e.other_hits,
                "fresh_in_window": round(self.fresh_in_window, 4),
                "ledger_max_window_usage_ratio": self.ledger_max_window_usage_ratio,
                "ledger_violations": self.ledger_violations, "seconds": round(self.seconds, 3)}


def run_seed(seed: int, stream: int, run: int) -> int:
    """The insecure seed of one run: distinct for every ``(seed, stream, run)`` by construction."""
    return (seed << 40) | (stream << 32) | run


def _randomness(config: AuditConfig) -> Callable[[int, int], Randomness]:
    """Per (stream, run) randomness: one shared secure stream, or a seeded generator per run."""
    if config.insecure_seed is None:
        shared = secure_randomness()
        return lambda stream, run: shared
    return lambda stream, run: insecure_seeded_randomness(run_seed(config.insecure_seed, stream, run))


def audit(name: str, factory: Callable[[AuditConfig], Steppable], config: AuditConfig) -> AuditResult:
    """Run the audit of the mechanisms ``factory(config)`` builds (a fresh one per run)."""
    start = time.perf_counter()
    dynamic = factory(config).requirement_kind is DynamicRequirements
    neighbours = neighbouring_streams(config, dynamic)
    randomness = _randomness(config)
    statistics = np.zeros((2, config.runs), np.int64)
    ratio, violations, fresh = 0.0, 0, 0
    for stream, batches in enumerate((neighbours.present, neighbours.absent)):
        for run in range(config.runs):
            outcome = run_once(factory(config), batches, neighbours, randomness(stream, run), config)
            statistics[stream, run] = outcome.statistic
            ratio = max(ratio, outcome.usage_ratio)
            violations += outcome.ledger_violations
            fresh += outcome.fresh_in_window
    estimate = lower_bound(statistics[0], statistics[1], config.confidence)
    return AuditResult(name, config, estimate, ratio, violations, fresh / (2 * config.runs),
                       time.perf_counter() - start, (statistics[0], statistics[1]))


# ---------------------------------------------------------------------- command line
class ArgumentError(Exception):
    """A bad command line; reported as one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ArgumentError(message)


def parse_args(argv=None) -> tuple[list[str], AuditConfig, bool]:
    """Mechanism names, the validated config and whether to print JSON."""
    parser = _Parser(prog="python -m pipelines.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mechanism", required=True, help=f"one of {', '.join(MECHANISMS)}, or all")
    parser.add_argument("--runs", type=int, default=AuditConfig.runs, help="runs per neighbouring stream")
    parser.add_argument("--epsilon", type=float, default=AuditConfig.epsilon, help="E_i of user i")
    parser.add_argument("--window", type=int, default=AuditConfig.window, help="w_i of user i")
    parser.add_argument("--users", type=int, default=AuditConfig.users, help="population, user i included")
    parser.add_argument("--confidence", type=float, default=AuditConfig.confidence)
    parser.add_argument("--warmup", type=int, default=None, help="slots before the window (default w_i - 1)")
    parser.add_argument("--insecure-seed", type=int, default=None,
                        help="seeded, NOT secure noise (reproducible, faster); default: secure noise")
    parser.add_argument("--json", action="store_true", help="one JSON object per mechanism and line")
    args = parser.parse_args(argv)
    names = list(MECHANISMS) if args.mechanism.lower() == "all" else [args.mechanism.lower()]
    if names[0] not in MECHANISMS:
        raise ArgumentError(f"unknown mechanism {args.mechanism!r}; choose one of {', '.join(MECHANISMS)} or all")
    try:
        config = AuditConfig(epsilon=args.epsilon, window=args.window, users=args.users, runs=args.runs,
                             confidence=args.confidence, warmup=args.warmup, insecure_seed=args.insecure_seed)
        for name in names:  # e.g. a window beyond a mechanism's own bounds
            registered_factory(name)(config)
    except ValueError as error:
        raise ArgumentError(str(error)) from None
    return names, config, args.json


def _line(result: AuditResult) -> str:
    verdict = "VIOLATION" if result.violation else "pass"
    e = result.estimate
    return (f"{result.mechanism:8s} E={result.config.epsilon:g} w={result.config.window} "
            f"lower bound {e.lower_bound:.3f} ({result.config.confidence:.0%}, {result.config.runs} runs per "
            f"stream, event {e.event or '-'}) ledger max {result.ledger_max_window_usage_ratio:.3f}: {verdict}")


def run(argv=None) -> int:
    """Entry point: returns the process exit code."""
    try:
        names, config, as_json = parse_args(argv)
    except ArgumentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    flagged = False
    for name in names:
        result = audit(name, registered_factory(name), config)
        flagged |= result.violation or result.ledger_violations > 0
        print(json.dumps(result.to_json()) if as_json else _line(result), flush=True)
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(run())
