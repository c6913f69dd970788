"""The one-slot audit: run both streams of a :mod:`.scenarios` scenario many times and bound the leak at ``t*``.

Each run's transcript gives the candidate statistics of :data:`.statistics.STATISTICS`
(release residual, dissimilarity residual seen through :func:`dissimilarity_probe`,
their weighted and unweighted log-likelihood signs, the residual less the other
fresh slots', the publish decision); every run's charges go through a fresh
:class:`PrivacyLedger`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from pipelines.audit.results import AuditConfig, ScenarioResult
from pipelines.audit.scenarios import SCENARIOS, TARGET, TARGET_BIN, Scenario
from pipelines.audit.statistics import STATISTICS, lower_bound, power
from transforms.mechanisms import Family, Mechanism, PrivacyLedger, Release, ReleaseKind, SlotBatch, TrustModel
from transforms.mechanisms import domain as mechanism_domain
from transforms.mechanisms import homogeneous as homogeneous_module
from transforms.mechanisms import pwsm as pwsm_module
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import Randomness


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
    modules = (pwsm_module, homogeneous_module)
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
    ledger = PrivacyLedger(max_window=scenario.max_window)
    engine = Engine(mechanism, rng, ledger)
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
                               numeric=cls.estimates is mechanism_domain.Estimate.MEAN)
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
                          (statistics[0], statistics[1]), config.confidence, True)

