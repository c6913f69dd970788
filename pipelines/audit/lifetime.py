"""The lifetime audit of DPI: neighbours differ by all of one user's records.

**Neighbours.** DPI's budget is a lifetime one: it protects everything one
user ever contributes.  The stream with the data has the target (user 0)
adding a record of value 0 at every slot beside another user adding a
record of value 1; the neighbour has the other user alone (the target never
exists).  Both users declare the lifetime budget ``E`` the mechanism runs with.

**Set-up.** Two values, a four-synopsis public pool over two trials
(``pool_seed`` 1: (2, 0), (0, 2), (1, 1), (2, 0)), one draw a slot, the
sequential budget series with ``zeta = 3`` and ``mu = 1`` front-loading
``E = 2`` (the three slots spend 1.62 of it), ``update = "all"``.  With the
target the true distribution is (1/2, 1/2), without it (0, 1): a draw's
log-likelihood ratio is at most ``ε_t/2`` (every synopsis's l1 distance moves
by 1, the sensitivity is 2), so a correct mechanism leaks at most half of what
it spends here and one drawing at 8× its stated budget up to four times it.

**Compared with.** ``E*`` is what the releases state was charged (the
largest ``eps_charged_total`` over the runs' last releases, at most the
lifetime ``E``): a loss above it contradicts the charges the ledger adds up.

**Statistics.** Per run, from the releases alone: the drawn synopses' mass on
value 0 summed over the slots, the same weighted by each slot's public budget
``eps_t``, and the weighted sign (+1 when the draw puts mass on value 0).
One-sided events; every run's charges go through a fresh :class:`PrivacyLedger`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pipelines.audit.results import AuditConfig, ScenarioResult
from pipelines.audit.statistics import lower_bound, power
from transforms.mechanisms import Family, LifetimeRequirements, Mechanism, PrivacyLedger, ReleaseKind, SlotBatch
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import Randomness

LIFETIME_STATISTICS = ("mass", "weighted mass", "weighted sign")
SLOTS = 3
LIFETIME_E = 2.0


@dataclass(frozen=True)
class LifetimeScenario:
    """DPI's lifetime audit: ``E`` over the target's whole contribution."""

    name: str
    description: str
    bound: float   # E*: the lifetime budget (in a result: the charge the releases stated, at most that)
    slots: int

    def params(self) -> dict:
        """The mechanism's public parameters (module doc)."""
        return {"bins": 2, "epsilon": self.bound, "pool_size": 4, "draws": 1, "n_units": 2, "pool_seed": 1,
                "rba": "sequential", "zeta": 3.0, "mu": 1.0, "update": "all", "pool_cache_mb": 1}

    def streams(self) -> tuple[list[SlotBatch], list[SlotBatch]]:
        """``(with the target, without)``: the target's records at every slot, or none of them."""
        present, absent = [], []
        for slot in range(1, self.slots + 1):
            first = slot == 1
            present.append(SlotBatch.of([0, 1], [0, 1],
                                        LifetimeRequirements.of([self.bound, self.bound]) if first else None))
            absent.append(SlotBatch.of([1], [1], LifetimeRequirements.of([self.bound]) if first else None))
        return present, absent


def lifetime_scenario_for(cls: type[Mechanism]) -> LifetimeScenario | None:
    """The lifetime scenario of a DPI mechanism (None for a windowed one)."""
    if Family.of(cls) is not Family.LIFETIME:
        return None
    return LifetimeScenario("lifetime", f"one user's records at all {SLOTS} slots present or absent (lifetime "
                            f"E = {LIFETIME_E:g}; E* = the charge the releases state); another user throughout; "
                            "4-synopsis public pool, one draw a slot", LIFETIME_E, SLOTS)


@dataclass(frozen=True)
class LifetimeRun:
    """What one run of one stream showed."""

    statistics: np.ndarray
    fresh: int
    charged: float               # the total the last release states was charged (eps_charged_total)
    ledger_violations: int
    ledger_max_ratio: float
    first_violation: str | None


def run_lifetime_once(mechanism: Mechanism, batches: list[SlotBatch], rng: Randomness) -> LifetimeRun:
    """Step one stream through ``mechanism``; every charge goes through a fresh ledger."""
    ledger = PrivacyLedger(max_window=1)  # lifetime budgets: no window
    engine = Engine(mechanism, rng, ledger)
    mass = weighted = sign = charged = 0.0
    fresh = 0
    for batch in batches:
        release = engine.step(batch)
        charged = float(release.figures.get("eps_charged_total", charged))
        if release.kind is not ReleaseKind.FRESH:
            continue
        fresh += 1
        on_zero = float(release.histogram[0])
        budget = float(release.figures.get("eps_t", 0.0))
        mass += on_zero
        weighted += budget * on_zero
        sign += budget * (1.0 if on_zero > 0 else -1.0)
    engine.close()
    first = str(ledger.violations[0]) if ledger.violations else None
    return LifetimeRun(np.array([mass, weighted, sign]), fresh, charged, ledger.violation_count, ledger.max_usage_ratio, first)


def audit_lifetime(cls: type[Mechanism], scenario: LifetimeScenario, index: int, config: AuditConfig,
                   randomness: Callable[[int, int, int], Randomness]) -> ScenarioResult:
    """Both streams ``config.runs`` times with fresh mechanisms; the bound on the target's whole contribution."""
    statistics = np.zeros((2, len(LIFETIME_STATISTICS), config.runs))
    violations = flagged = fresh = 0
    ratio, first, charged = 0.0, None, 0.0
    params = cls.params_type(**scenario.params())
    for stream, batches in enumerate(scenario.streams()):
        for run in range(config.runs):
            outcome = run_lifetime_once(cls(params), batches, randomness(index, stream, run))
            statistics[stream, :, run] = outcome.statistics
            violations += outcome.ledger_violations
            flagged += outcome.ledger_violations > 0
            ratio = max(ratio, outcome.ledger_max_ratio)
            first = first or outcome.first_violation
            fresh += outcome.fresh
            charged = max(charged, outcome.charged)
    estimate = lower_bound(statistics[0], statistics[1], config.confidence, LIFETIME_STATISTICS, mirrored=False)
    runs = 2 * config.runs
    stated = dataclasses.replace(scenario, bound=min(charged, scenario.bound) if charged > 0 else scenario.bound)
    return ScenarioResult(stated, estimate, power(stated.bound, estimate.evaluation_runs, config.confidence,
                                                    mirrored=False),
                          fresh / (runs * scenario.slots), 0.0, violations, flagged, ratio, first,
                          (statistics[0], statistics[1]), config.confidence, False)
