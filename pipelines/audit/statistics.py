"""The audit's statistics: Clopper-Pearson bounds, threshold events, the lower bound on ε and its power.

Shared by every scenario: a scenario turns each run into one or more
statistics (each larger when the run points to the neighbour that holds
the target's data); :func:`lower_bound` chooses an event on the first runs
and bounds ``ln(P/Q)`` on the others; :func:`power` and
:func:`detection_probability` say what the bound can show at that run count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

STATISTICS = ("release", "dissimilarity", "weighted", "unweighted", "reuse", "decision")
"""The one-slot scenarios' candidate statistics, each positive when it points to the target's report at ``t*``
(the default names of an event's statistic)."""

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
    """Which runs an event counts (a statistic is large when the target reports, small when not)."""

    AT_LEAST = ">="    # {X >= τ}: more likely with the report
    AT_MOST = "<="     # {X <= τ}: more likely without it
    MIRRORED = "<>"    # {X >= τ} on the runs with the report and {X <= -τ} on the runs without, pooled


@dataclass(frozen=True)
class Event:
    """A threshold event on one statistic, and how to count it.

    A mirrored event is an event of the mechanism M' that flips a fair coin b
    and runs M on the stream (b = 0) or on its neighbour (b = 1): M' is exactly
    as private as M, and ``{b = 0 and X >= τ} or {b = 1 and X <= -τ}`` has
    probability ``(P0(X >= τ) + P1(X <= -τ))/2`` with the report and
    ``(P1(X >= τ) + P0(X <= -τ))/2`` without.  Counting it over both streams'
    runs (a fixed half with each b) doubles the trials; the count is then
    Poisson-binomial, for which the binomial Clopper-Pearson bounds stay valid
    at these tail levels: a Poisson-binomial's tails beyond its mean are at most
    the binomial ones with the same mean (Hoeffding 1956, "On the distribution
    of the number of successes in independent trials"; checked in the tests).
    A statistic that is not defined in a run (nan) is in no event.
    """

    direction: Direction
    threshold: float
    statistic: int = 0
    label: str | None = field(default=None, compare=False)  # the statistic's name (default: STATISTICS')

    def counts(self, present: np.ndarray, absent: np.ndarray) -> tuple[int, int, int]:
        """(runs favouring a larger probability, runs of the other side, trials per side)."""
        t = self.threshold
        if present.ndim == 2:
            present, absent = present[self.statistic], absent[self.statistic]
        if self.direction is Direction.AT_LEAST:
            return int(np.sum(present >= t)), int(np.sum(absent >= t)), present.size
        if self.direction is Direction.AT_MOST:
            return int(np.sum(absent <= t)), int(np.sum(present <= t)), present.size
        return (int(np.sum(present >= t) + np.sum(absent <= -t)), int(np.sum(absent >= t) + np.sum(present <= -t)),
                2 * present.size)

    def __str__(self) -> str:
        name = self.label or STATISTICS[self.statistic]
        if self.direction is Direction.MIRRORED:
            return f"{name} >= {self.threshold:g} mirrored"
        return f"{name} {self.direction.value} {self.threshold:g}"


def _bounds(events: list[Event], present: np.ndarray, absent: np.ndarray, tail: float) -> np.ndarray:
    """``ln(P_lower / Q_upper)`` per event (``-inf`` when P_lower is 0)."""
    counts = np.array([e.counts(present, absent) for e in events], np.int64).reshape(-1, 3)
    scores = np.full(len(events), -np.inf)
    for trials in np.unique(counts[:, 2]):
        pick = counts[:, 2] == trials
        favoured, other = counts[pick, 0], counts[pick, 1]
        distinct, where = np.unique(np.concatenate([favoured, other]), return_inverse=True)
        low, high = clopper_pearson(distinct, int(trials), tail)  # once per distinct count
        with np.errstate(divide="ignore"):
            scores[pick] = np.log(low[where[:favoured.size]]) - np.log(high[where[favoured.size:]])
    return scores


MAX_THRESHOLDS = 400
"""At most this many thresholds per statistic (quantiles of the selection runs' values beyond that)."""

SELECTION_FRACTION = 0.25
"""Share of each stream's runs that only chooses the statistic and event (the rest measures it)."""


@dataclass(frozen=True)
class Estimate:
    """The lower bound and how it was found."""

    lower_bound: float
    event: Event | None
    selection_bound: float  # the chosen event's bound on the selection runs (for diagnosis)
    favoured_hits: int      # on the evaluation runs: how often the event held on the side it favours
    other_hits: int         # ... and on the other side
    trials: int             # ... out of this many trials per side
    evaluation_runs: int


def candidate_events(present: np.ndarray, absent: np.ndarray, names: tuple[str, ...] | None = None,
                     mirrored: bool = True) -> list[Event]:
    """Every threshold event on every statistic, thresholds at the values the runs took (``names``: the
    statistics' names, for the report; ``mirrored``: with the mirrored events, for statistics symmetric
    about 0 under the swap of the two streams)."""
    present, absent = np.atleast_2d(present), np.atleast_2d(absent)
    events = []
    for k in range(present.shape[0]):
        label = None if names is None else names[k]
        values = np.unique(np.concatenate([present[k], absent[k]]))
        values = values[np.isfinite(values)]
        if values.size > MAX_THRESHOLDS:  # a continuous statistic: thresholds at its quantiles
            values = np.unique(np.quantile(values, np.linspace(0, 1, MAX_THRESHOLDS)))
        events += [Event(d, float(t), k, label) for t in values for d in (Direction.AT_LEAST, Direction.AT_MOST)]
        if mirrored:
            events += [Event(Direction.MIRRORED, float(t), k, label) for t in values if t > 0]
    return events


def lower_bound(present: np.ndarray, absent: np.ndarray, confidence: float,
                names: tuple[str, ...] | None = None, mirrored: bool = True) -> Estimate:
    """Choose the statistic and event on the first runs, bound its log-ratio on the others.

    ``present`` and ``absent`` hold one statistic per run (1-d) or one row per
    statistic (2-d).  The first ``SELECTION_FRACTION`` of each stream's runs
    choose the event with the largest bound on them (their own Clopper-Pearson
    bounds, which keep a rare event seen by chance from winning); the
    remaining runs alone give the bound, which is at most
    the true privacy loss with probability at least ``confidence`` (each
    Clopper-Pearson bound fails with probability at most ``(1 - confidence)/2``).
    """
    present, absent = np.atleast_2d(np.asarray(present, float)), np.atleast_2d(np.asarray(absent, float))
    runs = present.shape[1]
    if present.shape != absent.shape or runs < 4:
        raise ValueError("need the same number (>= 4) of runs for both streams")
    selected = max(2, int(runs * SELECTION_FRACTION))
    tail = (1 - confidence) / 2
    evaluation = runs - selected
    events = candidate_events(present[:, :selected], absent[:, :selected], names, mirrored)
    scores = _bounds(events, present[:, :selected], absent[:, :selected], tail) if events else np.zeros(0)
    if not np.any(np.isfinite(scores)):
        return Estimate(0.0, None, 0.0, 0, 0, 0, evaluation)
    best = events[int(np.argmax(scores))]
    bound = float(_bounds([best], present[:, selected:], absent[:, selected:], tail)[0])
    favoured, other, trials = best.counts(present[:, selected:], absent[:, selected:])
    return Estimate(max(bound, 0.0), best, float(np.max(scores)), favoured, other, trials, evaluation)


def power(epsilon: float, evaluation_runs: int, confidence: float, mirrored: bool = True) -> float:
    """The largest bound the audit can reach with ``evaluation_runs`` runs per stream on a loss of exactly ``epsilon``.

    The best case for the audit: an event of probability ``p`` with the report
    and ``p·e^-ε`` without, counted over both streams (mirrored, twice the
    trials) at its expected counts, for the best ``p``.  No statistic of a real
    mechanism does better, so a bound far below this is a weak test and a
    violation smaller than the gap cannot be seen at this run count.
    """
    trials = (2 if mirrored else 1) * evaluation_runs
    tail = (1 - confidence) / 2
    p = np.linspace(0.01, 1.0, 100)
    favoured = np.rint(p * trials).astype(np.int64)
    other = np.rint(p * math.exp(-epsilon) * trials).astype(np.int64)
    low, _ = clopper_pearson(favoured, trials, tail)
    _, high = clopper_pearson(other, trials, tail)
    with np.errstate(divide="ignore"):
        return max(float(np.max(np.log(low) - np.log(high))), 0.0)



def detection_probability(claimed: float, factor: float, evaluation_runs: int, confidence: float,
                          mirrored: bool = True, simulations: int = 2000, seed: int = 0) -> float:
    """The chance that the bound exceeds ``claimed`` on a variant whose loss is ``factor`` times it.

    The audit's power against a ``factor``-times over-spend, in its best case: the
    variant's best event has probability ``p`` with the data and ``p·e^-(factor·claimed)``
    without (``p`` the value that maximises the expected bound), its counts are drawn
    ``simulations`` times (binomial, over both streams when ``mirrored``) and
    bounded as the audit bounds them.  A real statistic's event is at most this
    informative, so the audit's measured power is at most this; the tests check
    the variants they name against it.  Seeded: a stated figure, not noise.
    """
    trials = (2 if mirrored else 1) * evaluation_runs
    tail = (1 - confidence) / 2
    loss = factor * claimed
    grid = np.linspace(0.02, 1.0, 50)
    expected = [_bound_at(p, loss, trials, tail) for p in grid]
    p = float(grid[int(np.argmax(expected))])
    rng = np.random.default_rng(seed)
    favoured = rng.binomial(trials, p, simulations)
    other = rng.binomial(trials, p * math.exp(-loss), simulations)
    distinct, where = np.unique(np.concatenate([favoured, other]), return_inverse=True)
    low, high = clopper_pearson(distinct, trials, tail)
    with np.errstate(divide="ignore"):
        bounds = np.log(low[where[:simulations]]) - np.log(high[where[simulations:]])
    return float(np.mean(bounds > claimed))


def _bound_at(p: float, loss: float, trials: int, tail: float) -> float:
    favoured, other = round(p * trials), round(p * math.exp(-loss) * trials)
    low, _ = clopper_pearson([favoured], trials, tail)
    _, high = clopper_pearson([other], trials, tail)
    return float(np.log(low[0]) - np.log(high[0])) if low[0] > 0 else -math.inf
