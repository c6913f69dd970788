"""Empirical privacy audit with power: a statistical lower bound on what one slot of one user leaks.

    python -m pipelines.audit --mechanism pba --json
    python -m pipelines.audit --mechanism all --insecure-seed 7
    python -m pipelines.audit --mechanism pbd --broken reused-noise --json   # needs a source checkout

**Neighbours.** In every :class:`Scenario` a target user (user 0) reports bin 0
in every slot; the two neighbouring streams differ only in whether the target
reports at one slot ``t*`` (add/remove-one, sensitivity 1).  A local-DP method
protects the value a user reports, not whether they report (the collector
receives a report or none), which is the w-event LDP guarantee (spec
ldp_ids.md §2.1): for these the streams differ in the target's bin at ``t*``
(bin 0 or bin 1, replace-one) and ``E*`` is unchanged.  The scenarios have
several cohorts with subsampling active (a cohort whose budget is far below
the threshold OBS picks), a user joining and a user changing requirement
inside the audited stretch, and users that move between bins so that most
slots publish.  ``steady`` runs on every mechanism; ``changes`` (the target
starts waiting for a stricter fixed requirement at ``t*`` while another user
cancels a change of theirs, and a third user leaves and rejoins a cohort of
their own around a publication that absorbed three shares) runs on the
mechanisms with fixed personalized requirements.

**What is compared.** A mechanism may leak about the target's report at ``t*``
at most the smallest ``E`` of the requirements whose windows hold ``t*``
(``E*``: the requirement in force, and the stricter one the target is
waiting for).  The audit flags a violation when its lower bound exceeds
``E*``, or when the privacy ledger, fed every run's charges, sees any user
overspend in any window (which is how overspending spread over a window is
caught: a one-slot difference cannot show it).

**Statistics.** Each run gives a transcript: every slot's release kind and
histogram, and the noisy dissimilarity where the core computes one
(:func:`dissimilarity_probe`, a white-box view for auditing only).  From it
several statistics, each positive when it points to the target's report:
the release residual at ``t*`` (released count in bin 0 minus the other
users' count, which the auditor knows), the dissimilarity residual (the
noisy dissimilarity minus what the others' data and the previous release
explain, signed by whether the target's report would raise or lower it), a
likelihood-style sum of both weighted by the target's charges (which the
release carries), the same sum
unweighted, the release residual minus the other fresh slots' residuals (noise
reused across releases cancels), and the publish decision at ``t*``.

**Bound.** The first quarter of each stream's runs chooses the statistic and
the event on it (``{X >= τ}``, ``{X <= τ}``, or the mirrored ``{X >= τ}`` on
the runs with the report pooled with ``{X <= -τ}`` on the runs without, see
:class:`Event`) with the largest bound on them; the other runs
alone measure it: ``ε_LB = ln(P_lower / Q_upper)`` with one-sided
Clopper-Pearson bounds at ``(1 - confidence)/2`` each, so with probability
at least ``confidence`` the bound is below the mechanism's true loss on the
scenario.  Beside it, :func:`power` gives the bound the audit reaches with
as many runs on a mechanism that leaks exactly ``E*`` (expected counts of
the best possible event): what a tight mechanism could show at this run count.

**Noise.** Secure by default (one :class:`SecureRandomness` stream).
``--insecure-seed S`` gives a seeded generator per run (distinct for every
scenario, stream and run): reproducible, for this offline audit only.

Prints one line per audit (``--json``: one JSON object, ``"violation"`` and
``"reason"`` right after the mechanism and variant); exit code 0 when nothing was flagged, 1 when something
was, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from transforms.mechanisms import (MECHANISMS, NO_VALUE, DynamicRequirements, Family, FixedRequirements, Mechanism,
                                   MechanismParams, PrivacyLedger, Release, ReleaseKind, SlotBatch, TrustModel,
                                   mechanism_class)
from transforms.mechanisms import domain as _domain
from transforms.mechanisms import homogeneous as _homogeneous_module
from transforms.mechanisms import pwsm as _pwsm_module
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import Randomness, insecure_seeded_randomness, secure_randomness

TARGET = 0
"""The target user's index in every scenario."""
TARGET_BIN = 0
MAX_RUNS = 10_000_000
BROKEN_MODULE = Path(__file__).resolve().parents[1] / "tests" / "pipelines" / "broken_mechanisms.py"
"""The deliberately broken variants: test code, in a source checkout only, loaded only for ``--broken``."""


# ---------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class UserPlan:
    """One user of a scenario.

    ``declared`` maps a slot to the fixed ``(w, E)`` the user declares there
    (the first one registers them); ``values`` is their bin per slot (``None``:
    no report).  ``sure`` lists the slots at which the auditor counts the
    report as certainly in the samples of a personalized mechanism (a member
    of the cohort whose budget OBS picks, not waiting); other reports count
    only for the homogeneous mechanisms, which never sample.
    """

    declared: dict[int, tuple[int, float]]
    values: tuple[int | None, ...]
    sure: frozenset[int]

    def requirement_at(self, slot: int) -> tuple[int, float] | None:
        """The user's latest declaration at or before ``slot``."""
        latest = [s for s in self.declared if s <= slot]
        return self.declared[max(latest)] if latest else None


@dataclass(frozen=True)
class Scenario:
    """Streams, the differing slot ``t*`` and the budget ``E*`` a leak there is compared with."""

    name: str
    description: str
    bins: int
    users: tuple[UserPlan, ...]
    target_slot: int
    bound: float                              # E*, in epsilon
    homogeneous: tuple[float, int]            # (E, w) the homogeneous baselines run with
    families: frozenset[Family]

    @property
    def slots(self) -> int:
        return len(self.users[0].values)

    @property
    def max_window(self) -> int:
        return max(w for user in self.users for w, _ in user.declared.values())

    def params_for(self, mechanism: type[Mechanism]) -> MechanismParams:
        """``mechanism``'s parameters in this scenario: the baselines at :attr:`homogeneous`, every declarable
        window up to the scenario's longest."""
        epsilon, window = self.homogeneous
        if mechanism.estimates is _domain.Estimate.MEAN:  # one mean of the bins taken as real values in [0, bins-1]
            return mechanism.params_type.from_options(1, epsilon=epsilon, window=window, low=0.0,
                                                      high=float(self.bins - 1))
        return mechanism.params_type.from_options(self.bins, epsilon=epsilon, window=window,
                                                  max_window=self.max_window)

    def _requirement(self, family: Family, window: int, epsilon: float) -> tuple[int, float]:
        if family is Family.HOMOGENEOUS:  # every user at least as loose as the baselines' (E, w)
            e, w = self.homogeneous
            return w, max(epsilon, e)
        return window, epsilon

    def streams(self, family: Family, replace: bool = False, numeric: bool = False
                ) -> tuple[list[SlotBatch], list[SlotBatch]]:
        """``(present, absent)``: identical except the target's report at ``t*`` (with ``replace``, the second
        stream's target reports the next bin there instead of nothing; ``numeric``: bins as real values)."""
        streams = ([], [])
        for slot in range(1, self.slots + 1):
            declaring = any(slot in user.declared for user in self.users)
            for which, batches in enumerate(streams):
                users, values, windows, epsilons = [], [], [], []
                for index, user in enumerate(self.users):
                    value = user.values[slot - 1]
                    if which == 1 and index == TARGET and slot == self.target_slot:
                        value = (value + 1) % self.bins if replace else None
                    requirement = user.requirement_at(slot)
                    if requirement is None or (value is None and not (declaring and slot in user.declared)):
                        continue
                    users.append(index)
                    values.append(NO_VALUE if value is None else value)
                    w, e = self._requirement(family, *requirement)
                    windows.append(w)
                    epsilons.append(e)
                requirements = None
                if declaring:
                    requirements = (DynamicRequirements.of(windows, epsilons, windows, epsilons)
                                    if family is Family.DYNAMIC else FixedRequirements.of(windows, epsilons))
                if numeric:
                    values = [math.nan if v == NO_VALUE else float(v) for v in values]
                batches.append(SlotBatch.of(users, values, requirements))
        return streams

    def expected_counts(self, family: Family) -> tuple[np.ndarray, np.ndarray]:
        """Per slot, the counts per bin the auditor expects in a sample, and whether bin 0 holds only sure reports.

        The target's own report counts at every slot but ``t*`` where it is sure.
        """
        counts = np.zeros((self.slots, self.bins))
        clean = np.ones(self.slots, bool)
        for index, user in enumerate(self.users):
            for slot, value in enumerate(user.values, start=1):
                if value is None or (index == TARGET and slot == self.target_slot):
                    continue
                if family is Family.HOMOGENEOUS or slot in user.sure:
                    counts[slot - 1, value] += 1
                elif value == TARGET_BIN:
                    clean[slot - 1] = False
        return counts, clean


def _plan(values, declared, sure=None) -> UserPlan:
    values = tuple(values)
    return UserPlan(declared, values, frozenset(range(1, len(values) + 1) if sure is None else sure))


AUDITED_FAMILIES = frozenset(Family) - {Family.LIFETIME}
"""The windowed families these scenarios audit; DPI's lifetime budgets have their own audit
(``benchmarks/dpi_audit.py``, spec TV10)."""


def steady_scenario() -> Scenario:
    """Every mechanism: the target's report at slot 3 of 4 carries a whole (w = 1, E = 2) budget.

    Cohort T (w = 1, E = 2): the target and three others in bin 0, twelve users
    moving between bins 1 and 2 every slot (so most slots publish), a user who
    declares (w = 1, E = 3) at slot 3 (a cohort of their own) and one who joins
    at slot 3.  Cohort S (w = 4, E = 0.08): two users in bin 2 whose budget is
    far below T's, so OBS picks T's and samples S with probability below 2%.
    The baselines run with (E, w) = (2, 1), everyone declaring at least that.
    """
    slots, t = 4, 3
    t_cohort = {1: (1, 2.0)}
    users = [_plan([0] * slots, t_cohort)]                                        # the target
    users += [_plan([0] * slots, t_cohort) for _ in range(3)]
    users += [_plan([1 + s % 2 for s in range(slots)], t_cohort) for _ in range(12)]
    users += [_plan([2] * slots, {1: (4, 0.08)}, sure=()) for _ in range(2)]
    users.append(_plan([1] * slots, {1: (1, 2.0), t: (1, 3.0)}))                # changes requirement at t*
    users.append(_plan([None] * (t - 1) + [1] * (slots - t + 1), {t: (1, 2.0)}))  # joins at t*
    return Scenario("steady", "target in force (w=1, E=2), reports at t*=3 of 4 slots; several cohorts, "
                    "subsampling, a joiner and a requirement change at t*", 3, tuple(users), t, 2.0, (2.0, 1),
                    AUDITED_FAMILIES)


def changes_scenario() -> Scenario:
    """Fixed personalized mechanisms: the target starts waiting at t* = 5 of 7; a leak there is charged nothing.

    The target (w = 1, E = 4) declares (w = 3, E = 1) at slot 5, which takes
    effect at slot 7: a window of the new requirement holds slot 5, so
    ``E* = 1``, and a correct mechanism uses none of the target's report at
    slot 5.  At slot 5 another user cancels a change declared at slot 4 (so
    cohort sizes and the number of waiting users are what they were) and a
    registered user with a small index reports nothing (the circumstances of
    issue 12's finding 1).  User C alone has (w = 3, E = 3): slots
    2-4 repeat the data so skip, slot 5 publishes with three of C's shares,
    C starts waiting at slot 6 (a publication while C's cohort is empty) and
    cancels at slot 7, when C's cohort may not publish for them again yet.
    """
    slots, t = 7, 5
    big = {1: (1, 4.0)}
    users = [_plan([0] * slots, {1: (1, 4.0), t: (3, 1.0)}, sure={1, 2, 3, 4})]   # the target
    users += [_plan([0] * slots, big) for _ in range(3)]
    movers = [1, 1, 1, 1, 2, 1, 2]
    users.append(_plan(movers[:4] + [None] + movers[5:], big))  # reports nothing at t*, so the batch has a gap
    users += [_plan(movers, big) for _ in range(15)]
    users.append(_plan([2] * slots, {1: (1, 4.0), 4: (3, 4.0), t: (1, 4.0)}, sure={1, 2, 3, 5, 6, 7}))
    users.append(_plan([2] * slots, {1: (1, 0.02)}, sure=()))                      # a subsampled cohort
    users.append(_plan([None] * slots, {1: (3, 3.0), 6: (3, 2.0), 7: (3, 3.0)}, sure=()))  # user C
    return Scenario("changes", "target (w=1, E=4) starts waiting for (w=3, E=1) at t*=5 of 7 while another user "
                    "cancels; a lone cohort empties and refills around a 3-share publication", 3, tuple(users), t,
                    1.0, (4.0, 1), frozenset({Family.FIXED}))


SCENARIOS: dict[str, Callable[[], Scenario]] = {"steady": steady_scenario, "changes": changes_scenario}


# ---------------------------------------------------------------------- observing a run
@contextmanager
def dissimilarity_probe() -> Iterator[list]:
    """Record every noisy dissimilarity the core computes while the block runs.

    A white-box view for auditing only: it wraps the function the mechanisms'
    ``decide`` calls (in ``pwsm`` and ``homogeneous``), appends each value to
    the list it yields and restores the modules on exit.  The dissimilarity is
    charged as if it were published, so observing it is fair.
    """
    seen: list[int] = []
    modules = (_pwsm_module, _homogeneous_module)
    originals = [module.noisy_total_deviation for module in modules]

    def recording(original):
        def noisy_total_deviation(*args, **kwargs):
            value = original(*args, **kwargs)
            seen.append(value)
            return value
        return noisy_total_deviation

    for module, original in zip(modules, originals):
        module.noisy_total_deviation = recording(original)
    try:
        yield seen
    finally:
        for module, original in zip(modules, originals):
            module.noisy_total_deviation = original


STATISTICS = ("release", "dissimilarity", "weighted", "unweighted", "reuse", "decision")
"""The candidate statistics, each positive when it points to the target's report at ``t*``."""


@dataclass(frozen=True)
class RunOutcome:
    """What one run of one stream showed."""

    statistics: np.ndarray        # one value per STATISTICS entry (nan: not defined in this run)
    fresh_at_target: bool
    dissimilarity_seen: bool
    ledger_violations: int
    ledger_max_ratio: float
    first_violation: str | None


def _target_charges(release: Release) -> tuple[float, float]:
    """The target's (dissimilarity, publication) charge at this slot, in epsilon."""
    charges = release.charges
    users = charges.users
    at = int(np.searchsorted(users, TARGET))
    if at >= users.size or users[at] != TARGET:
        return 0.0, 0.0
    return (float(charges.part_units(DISSIMILARITY)[at]) / UNITS_PER_EPSILON,
            float(charges.part_units(PUBLICATION)[at]) / UNITS_PER_EPSILON)


def _llr_sign(value: float) -> float:
    """Discrete Laplace log-likelihood ratio of a residual for a shift of 1, per unit of budget."""
    return float(np.clip(2 * value - 1, -1.0, 1.0))


def run_once(mechanism: Mechanism, batches: list[SlotBatch], scenario: Scenario, expected: np.ndarray, clean: np.ndarray,
             rng: Randomness, seen: list) -> RunOutcome:
    """Step one stream through ``mechanism``; every charge goes through a fresh ledger."""
    engine = Engine(mechanism, rng, PrivacyLedger(max_window=scenario.max_window))
    ledger = engine.ledger
    t = scenario.target_slot
    previous = np.zeros(scenario.bins, np.int64)
    residuals, fresh_slots = {}, []
    dis, weights, fresh, before = None, (0.0, 0.0), False, previous
    for batch in batches:
        del seen[:]
        release = engine.step(batch)
        slot = release.slot
        if release.kind is ReleaseKind.FRESH:
            fresh_slots.append(slot)
            residuals[slot] = float(release.histogram[TARGET_BIN]) - expected[slot - 1, TARGET_BIN]
        if slot == t:
            dis = seen[0] if len(seen) == 1 else None
            weights, fresh, before = _target_charges(release), release.kind is ReleaseKind.FRESH, previous
        previous = release.histogram
    engine.close()
    stats = np.full(len(STATISTICS), np.nan)
    release_term = residuals.get(t)
    if release_term is not None:
        stats[0] = release_term - 0.5
    if dis is not None:
        base = expected[t - 1]
        sign = 1.0 if before[TARGET_BIN] <= base[TARGET_BIN] else -1.0
        dis_term = sign * (dis - float(np.abs(base - before).sum()))
        stats[1] = dis_term - 0.5
    dc_part = 0.0 if dis is None else _llr_sign(dis_term)
    pub_part = 0.0 if release_term is None else _llr_sign(release_term)
    stats[2] = weights[0] * dc_part + weights[1] * pub_part
    stats[3] = dc_part + pub_part
    others = [residuals[s] for s in fresh_slots if s != t and clean[s - 1]]
    if release_term is not None and others:
        stats[4] = release_term - float(np.mean(others)) - 0.5
    stats[5] = 1.0 if fresh else -1.0
    first = str(ledger.violations[0]) if ledger.violations else None
    return RunOutcome(stats, fresh, dis is not None, ledger.violation_count, ledger.max_usage_ratio, first)


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
        name = STATISTICS[self.statistic]
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


def candidate_events(present: np.ndarray, absent: np.ndarray) -> list[Event]:
    """Every threshold event on every statistic, thresholds at the values the runs took."""
    present, absent = np.atleast_2d(present), np.atleast_2d(absent)
    events = []
    for k in range(present.shape[0]):
        values = np.unique(np.concatenate([present[k], absent[k]]))
        values = values[np.isfinite(values)]
        events += [Event(d, float(t), k) for t in values for d in (Direction.AT_LEAST, Direction.AT_MOST)]
        events += [Event(Direction.MIRRORED, float(t), k) for t in values if t > 0]
    return events


def lower_bound(present: np.ndarray, absent: np.ndarray, confidence: float) -> Estimate:
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
    events = candidate_events(present[:, :selected], absent[:, :selected])
    scores = _bounds(events, present[:, :selected], absent[:, :selected], tail) if events else np.zeros(0)
    if not np.any(np.isfinite(scores)):
        return Estimate(0.0, None, 0.0, 0, 0, 0, evaluation)
    best = events[int(np.argmax(scores))]
    bound = float(_bounds([best], present[:, selected:], absent[:, selected:], tail)[0])
    favoured, other, trials = best.counts(present[:, selected:], absent[:, selected:])
    return Estimate(max(bound, 0.0), best, float(np.max(scores)), favoured, other, trials, evaluation)


def power(epsilon: float, evaluation_runs: int, confidence: float) -> float:
    """The largest bound the audit can reach with ``evaluation_runs`` runs per stream on a loss of exactly ``epsilon``.

    The best case for the audit: an event of probability ``p`` with the report
    and ``p·e^-ε`` without, counted over both streams (mirrored, twice the
    trials) at its expected counts, for the best ``p``.  No statistic of a real
    mechanism does better, so a bound far below this is a weak test and a
    violation smaller than the gap cannot be seen at this run count.
    """
    trials = 2 * evaluation_runs
    tail = (1 - confidence) / 2
    p = np.linspace(0.01, 1.0, 100)
    favoured = np.rint(p * trials).astype(np.int64)
    other = np.rint(p * math.exp(-epsilon) * trials).astype(np.int64)
    low, _ = clopper_pearson(favoured, trials, tail)
    _, high = clopper_pearson(other, trials, tail)
    with np.errstate(divide="ignore"):
        return max(float(np.max(np.log(low) - np.log(high))), 0.0)


# ---------------------------------------------------------------------- the audit
@dataclass(frozen=True)
class AuditConfig:
    """One audit's setting; validated at construction (``ValueError`` naming the field)."""

    runs: int = 1000
    confidence: float = 0.99
    insecure_seed: int | None = None

    def __post_init__(self):
        if isinstance(self.runs, bool) or not isinstance(self.runs, (int, np.integer)) \
                or not 8 <= self.runs <= MAX_RUNS:
            raise ValueError(f"runs must be an integer in [8, {MAX_RUNS}], got {self.runs!r}")
        if isinstance(self.confidence, bool) or not isinstance(self.confidence, (int, float)) \
                or not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence must be in [0.5, 1), got {self.confidence!r}")
        if self.insecure_seed is not None and (isinstance(self.insecure_seed, bool)
                                               or not isinstance(self.insecure_seed, int)
                                               or not 0 <= self.insecure_seed < 2**24):
            raise ValueError(f"insecure_seed must be an integer in [0, 2**24), got {self.insecure_seed!r}")

    @property
    def noise(self) -> str:
        if self.insecure_seed is None:
            return "secure"
        return f"INSECURE seeded (seed {self.insecure_seed}): offline audit only"


def run_seed(seed: int, scenario: int, stream: int, run: int) -> int:
    """The insecure seed of one run: distinct for every ``(seed, scenario, stream, run)`` by construction."""
    return (seed << 40) | (scenario << 33) | (stream << 32) | run


def _randomness(config: AuditConfig) -> Callable[[int, int, int], Randomness]:
    """Per (scenario, stream, run) randomness: one shared secure stream, or a seeded generator per run."""
    if config.insecure_seed is None:
        shared = secure_randomness()
        return lambda scenario, stream, run: shared
    return lambda scenario, stream, run: insecure_seeded_randomness(
        run_seed(config.insecure_seed, scenario, stream, run))


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario of an audit: the bound beside ``E*`` and the power, and the ledger's findings."""

    scenario: Scenario
    estimate: Estimate
    power: float
    fresh_at_target: float         # share of runs with a fresh release at t*
    dissimilarity_seen: float      # share of runs in which the dissimilarity at t* was observed
    ledger_violations: int         # over all runs and users
    ledger_runs_flagged: int
    ledger_max_ratio: float
    first_violation: str | None
    statistics: tuple[np.ndarray, np.ndarray] = field(repr=False, compare=False)

    @property
    def empirical_violation(self) -> bool:
        return self.estimate.lower_bound > self.scenario.bound

    def to_json(self) -> dict:
        e = self.estimate
        return {"scenario": self.scenario.name, "epsilon": self.scenario.bound,
                "lower_bound": round(e.lower_bound, 6), "power": round(self.power, 6),
                "event": None if e.event is None else str(e.event), "evaluation_runs": e.evaluation_runs,
                "event_trials": e.trials, "favoured_hits": e.favoured_hits, "other_hits": e.other_hits,
                "fresh_at_target_slot": round(self.fresh_at_target, 4),
                "dissimilarity_observed": round(self.dissimilarity_seen, 4),
                "ledger_violations": self.ledger_violations, "ledger_runs_flagged": self.ledger_runs_flagged,
                "ledger_max_window_usage_ratio": round(self.ledger_max_ratio, 6),
                "first_ledger_violation": self.first_violation}


@dataclass(frozen=True)
class AuditResult:
    """An audit of one mechanism (or broken variant) over its scenarios."""

    mechanism: str
    broken: str | None
    config: AuditConfig
    scenarios: tuple[ScenarioResult, ...]
    seconds: float

    @property
    def violation(self) -> bool:
        return self.reason is not None

    @property
    def reason(self) -> str | None:
        """Which check caught a violation (all of them that did), or None."""
        found = []
        for result in self.scenarios:
            name, bound = result.scenario.name, result.scenario.bound
            if result.empirical_violation:
                found.append(f"empirical: {name}: lower bound {result.estimate.lower_bound:.3f} > E* {bound:g} "
                             f"({result.estimate.event})")
            if result.ledger_violations:
                found.append(f"ledger: {name}: {result.ledger_runs_flagged} of {2 * self.config.runs} runs "
                             f"overspend, first: {result.first_violation}")
        return "; ".join(found) or None

    def to_json(self) -> dict:
        c = self.config
        return {"mechanism": self.mechanism, "broken": self.broken, "violation": self.violation,
                "reason": self.reason, "runs": c.runs, "confidence": c.confidence, "noise": c.noise,
                "scenarios": [result.to_json() for result in self.scenarios], "seconds": round(self.seconds, 3)}


def build(cls: type[Mechanism], scenario: Scenario) -> Mechanism:
    """A fresh mechanism of class ``cls`` (registered or broken) for ``scenario``."""
    return cls(scenario.params_for(cls))


def scenarios_for(cls: type[Mechanism]) -> list[Scenario]:
    """The scenarios a mechanism of this class is audited on."""
    family = Family.of(cls)
    return [s for s in (make() for make in SCENARIOS.values()) if family in s.families]


def audit_scenario(cls: type[Mechanism], scenario: Scenario, index: int, config: AuditConfig,
                   randomness: Callable[[int, int, int], Randomness]) -> ScenarioResult:
    """Run both streams of ``scenario`` ``config.runs`` times each with fresh mechanisms, and bound the leak."""
    family = Family.of(cls)
    streams = scenario.streams(family, replace=cls.trust is not TrustModel.CENTRAL,
                               numeric=cls.estimates is _domain.Estimate.MEAN)
    expected, clean = scenario.expected_counts(family)
    statistics = np.zeros((2, len(STATISTICS), config.runs))
    fresh = seen_dis = violations = flagged = 0
    ratio, first = 0.0, None
    with dissimilarity_probe() as seen:
        for stream, batches in enumerate(streams):
            for run in range(config.runs):
                outcome = run_once(build(cls, scenario), batches, scenario, expected, clean,
                                   randomness(index, stream, run), seen)
                statistics[stream, :, run] = outcome.statistics
                fresh += outcome.fresh_at_target
                seen_dis += outcome.dissimilarity_seen
                violations += outcome.ledger_violations
                flagged += outcome.ledger_violations > 0
                ratio = max(ratio, outcome.ledger_max_ratio)
                first = first or outcome.first_violation
    estimate = lower_bound(statistics[0], statistics[1], config.confidence)
    runs = 2 * config.runs
    return ScenarioResult(scenario, estimate, power(scenario.bound, estimate.evaluation_runs, config.confidence),
                          fresh / runs, seen_dis / runs, violations, flagged, ratio, first,
                          (statistics[0], statistics[1]))


def audit(name: str, cls: type[Mechanism], config: AuditConfig, broken: str | None = None,
          only: str | None = None) -> AuditResult:
    """Audit mechanism class ``cls`` (reported as ``name``, and ``broken`` for a broken variant).

    ``only`` names the one scenario to run (tests use it to spend runs where a check can fire).
    """
    start = time.perf_counter()
    randomness = _randomness(config)
    results = tuple(audit_scenario(cls, scenario, index, config, randomness)
                    for index, scenario in enumerate(scenarios_for(cls)) if only in (None, scenario.name))
    return AuditResult(name, broken, config, results, time.perf_counter() - start)


# ---------------------------------------------------------------------- broken variants (tests only)
def load_broken_variants():
    """The module of deliberately broken variants, from a source checkout (it is test code, never shipped)."""
    if not BROKEN_MODULE.is_file():
        raise ArgumentError(f"--broken needs a source checkout: {BROKEN_MODULE} not found")
    name = "wevent_audit_broken_variants"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BROKEN_MODULE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# ---------------------------------------------------------------------- command line
class ArgumentError(Exception):
    """A bad command line; reported as one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ArgumentError(message)


@dataclass(frozen=True)
class Plan:
    """What the command line asked for: (reported name, class) per audit, the config, JSON or not."""

    audits: list[tuple[str, type[Mechanism]]]
    broken: str | None
    config: AuditConfig
    as_json: bool


def parse_args(argv=None) -> Plan:
    parser = _Parser(prog="python -m pipelines.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mechanism", required=True, help=f"one of {', '.join(MECHANISMS)}, or all")
    parser.add_argument("--broken", default=None,
                        help="audit a deliberately broken variant of the mechanism (test code, source checkout)")
    parser.add_argument("--runs", type=int, default=AuditConfig.runs, help="runs per neighbouring stream and scenario")
    parser.add_argument("--confidence", type=float, default=AuditConfig.confidence)
    parser.add_argument("--insecure-seed", type=int, default=None,
                        help="seeded, NOT secure noise (reproducible, faster); default: secure noise")
    parser.add_argument("--json", action="store_true", help="one JSON object per audit and line")
    args = parser.parse_args(argv)
    try:
        config = AuditConfig(runs=args.runs, confidence=args.confidence, insecure_seed=args.insecure_seed)
    except ValueError as error:
        raise ArgumentError(str(error)) from None
    if args.mechanism.lower() == "all":
        if args.broken is not None:
            raise ArgumentError("--broken takes one --mechanism, not all")
        names = [name for name, cls in MECHANISMS.items() if Family.of(cls) in AUDITED_FAMILIES]
    else:
        try:
            names = [mechanism_class(args.mechanism).name]
        except ValueError as error:
            raise ArgumentError(f"{error} or all") from None
        if Family.of(names[0]) not in AUDITED_FAMILIES:
            raise ArgumentError(f"{names[0]} takes lifetime budgets, which these scenarios do not audit; "
                                f"see benchmarks/dpi_audit.py")
    if args.broken is None:
        return Plan([(name, MECHANISMS[name]) for name in names], None, config, args.json)
    variants = load_broken_variants()
    try:
        cls = variants.broken_class(args.broken, names[0])
    except ValueError as error:
        raise ArgumentError(str(error)) from None
    return Plan([(names[0], cls)], args.broken, config, args.json)


def _line(result: AuditResult) -> str:
    name = result.mechanism + (f" ({result.broken})" if result.broken else "")
    parts = [f"{r.scenario.name}: bound {r.estimate.lower_bound:.3f} of E* {r.scenario.bound:g} "
             f"(power {r.power:.2f}), ledger {r.ledger_max_ratio:.3f}" for r in result.scenarios]
    verdict = f"VIOLATION ({result.reason})" if result.violation else "pass"
    return f"{name}: {'; '.join(parts)}: {verdict}"


def run(argv=None) -> int:
    """Entry point: returns the process exit code."""
    try:
        plan = parse_args(argv)
    except ArgumentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    flagged = False
    for name, cls in plan.audits:
        result = audit(name, cls, plan.config, plan.broken)
        flagged |= result.violation
        print(json.dumps(result.to_json()) if plan.as_json else _line(result), flush=True)
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(run())
