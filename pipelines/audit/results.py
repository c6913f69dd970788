"""An audit's setting and results: the configuration, per-run randomness, one scenario's result, one audit's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from pipelines.audit.statistics import Estimate, detection_probability
from transforms.mechanisms.noise import Randomness, insecure_seeded_randomness, secure_randomness

MAX_RUNS = 10_000_000
POWER_FACTOR = 2.0
"""The over-spend each scenario's stated power is against: a variant whose loss is this many times ``E*``."""


class AuditedScenario(Protocol):
    """What a result needs of its scenario: a name, a description and the budget ``E*`` compared with."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def bound(self) -> float: ...


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


def randomness_for(config: AuditConfig) -> Callable[[int, int, int], Randomness]:
    """Per (scenario, stream, run) randomness: one shared secure stream, or a seeded generator per run."""
    if config.insecure_seed is None:
        shared = secure_randomness()
        return lambda scenario, stream, run: shared
    seed = config.insecure_seed
    return lambda scenario, stream, run: insecure_seeded_randomness(run_seed(seed, scenario, stream, run))


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario of an audit: the bound beside ``E*`` and the power, and the ledger's findings."""

    scenario: AuditedScenario
    estimate: Estimate
    power: float
    fresh_at_target: float         # share of runs with a fresh release at t*
    dissimilarity_seen: float      # share of runs in which the dissimilarity at t* was observed
    ledger_violations: int         # over all runs and users
    ledger_runs_flagged: int
    ledger_max_ratio: float
    first_violation: str | None
    statistics: tuple[np.ndarray, np.ndarray] = field(repr=False, compare=False)
    confidence: float = 0.99
    mirrored: bool = True          # events may pool both streams (one-slot scenarios) or not (window, lifetime)
    inconsistent_runs: int = 0     # runs whose releases contradict their stated reporters (window scenario)

    @property
    def empirical_violation(self) -> bool:
        return self.estimate.lower_bound > self.scenario.bound

    @property
    def detection_power(self) -> float:
        """The chance (at best) of flagging a variant whose loss is :data:`POWER_FACTOR` × ``E*`` at this run count
        (:func:`.statistics.detection_probability`)."""
        return detection_probability(self.scenario.bound, POWER_FACTOR, self.estimate.evaluation_runs,
                                     self.confidence, self.mirrored)

    def to_json(self) -> dict:
        e = self.estimate
        return {"scenario": self.scenario.name, "epsilon": self.scenario.bound,
                "lower_bound": round(e.lower_bound, 6), "power": round(self.power, 6),
                f"power_at_{POWER_FACTOR:g}x": round(self.detection_power, 4),
                "false_flag_probability": round(1 - self.confidence, 6),
                "event": None if e.event is None else str(e.event), "evaluation_runs": e.evaluation_runs,
                "event_trials": e.trials, "favoured_hits": e.favoured_hits, "other_hits": e.other_hits,
                "fresh_at_target_slot": round(self.fresh_at_target, 4),
                "dissimilarity_observed": round(self.dissimilarity_seen, 4),
                "inconsistent_runs": self.inconsistent_runs, "ledger_violations": self.ledger_violations,
                "ledger_runs_flagged": self.ledger_runs_flagged,
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
            if result.inconsistent_runs:
                found.append(f"consistency: {name}: {result.inconsistent_runs} runs release frequencies whose "
                             f"total is not 1 (their counts hold more reports than the stated reporters)")
            if result.ledger_violations:
                found.append(f"ledger: {name}: {result.ledger_runs_flagged} of {2 * self.config.runs} runs "
                             f"overspend, first: {result.first_violation}")
        return "; ".join(found) or None

    def to_json(self) -> dict:
        c = self.config
        return {"mechanism": self.mechanism, "broken": self.broken, "violation": self.violation,
                "reason": self.reason, "runs": c.runs, "confidence": c.confidence, "noise": c.noise,
                "scenarios": [result.to_json() for result in self.scenarios], "seconds": round(self.seconds, 3)}

