"""The window audit of the local families (LDP-IDS, PLBU, the numeric methods): a change spread over a window.

**Neighbours.** w-event local DP protects any change of one user's values
within ``w`` consecutive slots.  The target (user 0) holds value ``a`` at
every slot of the stream with the data and value ``b`` at the ``w`` slots
``t0 .. t0 + w - 1`` of the neighbour (replace-one at every slot of one
window); every other user holds the same values in both.  A correct method
leaks at most ``E`` about that change: budget division splits ``E`` over the
window's reports, population division asks the target once per window with
``E``, and the numeric methods with deviation memory ``h`` charge each report
``E/(w + h)`` because a change inside the span moves the span's reports *and*
the ``h`` reports after it.  So the released estimates are observed over the
span and the ``h`` slots after it (``h = w``: APP/CAPP's default memory).

**Population.** The numeric methods and the budget-division frequency
methods ask every holder at every slot, so the target reports alone (the
estimate is the target's de-biased report: nothing else blurs it).  The
population-division methods ask each user once per window and need others
to ask at the other slots: ``OTHERS`` users hold fixed values beside the
target (their reports are noise the audit cannot remove, so these
scenarios' power is lower, as stated beside each bound).

**Statistics.** Per run: the sum over the span of each fresh release's
estimate for ``a`` minus its estimate for ``b`` (frequencies) or of the
released mean (numeric: ``a = high``, ``b = low``), the same sum over the
span and the ``h`` slots after, the largest single-slot term, the number of
slots leaning each way, and for SW-direct/IPP/APP/CAPP the client likelihood
(:func:`client_likelihood`: how many reports fall in the *stated* client's
band under one hypothesis minus under the other, its inputs rebuilt from the
values and the earlier reports through the deviation memory).  Events are
one-sided (no mirroring: the two streams are not symmetric).  Each run's
charges go through a fresh :class:`PrivacyLedger`, and each fresh frequency
release's total is checked (:data:`TOTAL_TOLERANCE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pipelines.audit.results import AuditConfig, ScenarioResult
from pipelines.audit.statistics import lower_bound, power
from transforms.mechanisms import (Family, FixedRequirements, Mechanism, MechanismParams, PrivacyLedger, ReleaseKind,
                                   SlotBatch, TrustModel)
from transforms.mechanisms import domain as mechanism_domain
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.ldp.budget_division import LBU, LSP
from transforms.mechanisms.ldp.personalized import PLBU
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.numeric.perturbation import Client, PerturbationParams
from transforms.mechanisms.numeric.streams import NumericParams

WINDOW_STATISTICS = ("span", "span+memory", "largest slot", "span votes", "span+memory votes", "client likelihood")
OTHERS = 3
"""Users beside the target in the population-division scenario."""
TOTAL_TOLERANCE = 1e-9
"""How far a fresh frequency estimate's total may be from 1: every frequency method here de-biases GRR reports
(two values: the Ada rule always picks GRR), whose estimate sums to exactly 1 when its counts hold one report per
stated reporter; more reports than reporters (counted reports of users not asked) move it."""
NUMERIC_E = 2.0
"""The numeric scenario's window budget."""
POPULATION_E = 3.0
"""The window budget of the population-division scenario (its others' reports blur less at a larger budget)."""
ASK_EVERYONE = (LBU, LSP, PLBU)
"""Frequency methods that ask every holder at each of their publication slots without an adaptive decision: the
target can report alone (LBD/LBA with one user never find a change worth publishing)."""


@dataclass(frozen=True)
class WindowScenario:
    """A local method's window audit: ``E`` over ``w`` slots, the span, the slots observed after it."""

    name: str
    description: str
    bound: float          # E*: the window budget
    window: int
    lead: int             # slots before the span
    memory: int           # slots observed after the span
    others: int           # users beside the target

    @property
    def span(self) -> range:
        return range(self.lead + 1, self.lead + self.window + 1)

    @property
    def slots(self) -> int:
        return self.lead + self.window + self.memory

    def params_for(self, cls: type[Mechanism]) -> MechanismParams:
        """``cls``'s parameters: one ``(E, w)``; a mean over ``[0, 1]``, or frequencies over two values."""
        if cls.estimates is mechanism_domain.Estimate.MEAN:
            return cls.params_type.from_options(1, epsilon=self.bound, window=self.window, low=0.0, high=1.0)
        return cls.params_type.from_options(2, epsilon=self.bound, window=self.window, max_window=self.window)

    def target_values(self) -> tuple[np.ndarray, np.ndarray]:
        """The target's numeric values per slot: ``(with, without)`` (``high`` everywhere, ``low`` over the span)."""
        present = np.ones(self.slots)
        absent = present.copy()
        absent[self.lead:self.lead + self.window] = 0.0
        return present, absent

    def streams(self, cls: type[Mechanism]) -> tuple[list[SlotBatch], list[SlotBatch]]:
        """``(with, without)``: the target holds ``a`` everywhere, or ``b`` over the span."""
        numeric = cls.estimates is mechanism_domain.Estimate.MEAN
        a, b = (1.0, 0.0) if numeric else (0, 1)
        users = np.arange(self.others + 1)
        streams: tuple[list[SlotBatch], list[SlotBatch]] = ([], [])
        for slot in range(1, self.slots + 1):
            requirements = FixedRequirements.of([self.window] * users.size, [self.bound] * users.size) \
                if slot == 1 else None
            for which, batches in enumerate(streams):
                target = b if which == 1 and slot in self.span else a
                others = [0.5 if numeric else slot % 2] * self.others  # all flip: the estimate moves, so publishes
                batches.append(SlotBatch.of(users, [target, *others], requirements))
        return streams


def window_scenario_for(cls: type[Mechanism]) -> WindowScenario | None:
    """The window scenario of a local method (None for a central or lifetime one)."""
    if cls.trust is TrustModel.CENTRAL or Family.of(cls) not in (Family.HOMOGENEOUS, Family.FIXED):
        return None
    numeric = cls.estimates is mechanism_domain.Estimate.MEAN
    if numeric:
        return WindowScenario("window", f"target's value changes over all w = 2 slots of one window (E = "
                              f"{NUMERIC_E:g}), observed over the window and the 2 slots after it (memory); "
                              "target alone", NUMERIC_E, 2, 1, 2, 0)
    if issubclass(cls, ASK_EVERYONE):
        return WindowScenario("window", "target's value changes over all w = 2 slots of one window (E = 2); "
                              "target alone", 2.0, 2, 1, 2, 0)
    return WindowScenario("window", f"target's value changes over all w = 2 slots of one window (E = {POPULATION_E:g}); "
                          f"{OTHERS} other users whose values all flip every slot", POPULATION_E, 2, 1, 2, OTHERS)


def claimed_client(cls: type[Mechanism], params: MechanismParams) -> Client | None:
    """The client a numeric method with per-slot reports (SW-direct, IPP, APP, CAPP) states it runs: rebuilt from
    its public name and parameters, not read from the mechanism (None for the other methods)."""
    method = getattr(cls, "method", None)
    if method not in ("sw", "ipp", "app", "capp") or not isinstance(params, NumericParams):
        return None
    p = params
    return PerturbationParams(p.epsilon, p.window, method, memory=p.memory, reset=p.reset, bound_mode=p.bound_mode,
                              delta=p.delta, grid_bits=p.grid_bits).client


def client_likelihood(client: Client, reports: np.ndarray, present: np.ndarray, absent: np.ndarray) -> float:
    """How many reports fall in the stated square wave's band under the values ``present`` minus under ``absent``.

    The log-likelihood ratio of the reports (over ``ε`` per report) for the stated client, whose inputs under
    either hypothesis follow from the values and the earlier reports (the deviation memory: ``x + D``, ``D``
    the sum of the last ``h`` deviations ``x - report``; CAPP's maps).  A valid statistic whatever the
    mechanism really runs; for the stated client the most powerful one.
    """
    low, high, low_in, high_in = client.bounds
    band = float(client.sw.b) + 1.0 / client.sw.steps
    counts = []
    for values in (present, absent):
        ring, accumulated, inside = np.zeros(max(client.memory, 1)), 0.0, 0
        for age, (x, report) in enumerate(zip(values, reports)):
            shifted = x + accumulated if client.memory else x
            wave_input = min(max((shifted - low_in) / (high_in - low_in), 0.0), 1.0)
            inside += abs((report - low) / (high - low) - wave_input) <= band
            if client.memory:
                deviation = x - report
                accumulated += deviation - ring[age % client.memory]
                ring[age % client.memory] = deviation
        counts.append(inside)
    return float(counts[0] - counts[1])


@dataclass(frozen=True)
class WindowRun:
    """What one run of one stream showed."""

    statistics: np.ndarray     # one value per WINDOW_STATISTICS entry
    fresh_in_span: int         # span slots with a fresh release
    inconsistent: bool         # a fresh frequency release whose total is not 1
    ledger_violations: int
    ledger_max_ratio: float
    first_violation: str | None


def run_window_once(mechanism: Mechanism, batches: list[SlotBatch], scenario: WindowScenario, numeric: bool,
                    rng: Randomness, client: Client | None = None) -> WindowRun:
    """Step one stream through ``mechanism``; every charge goes through a fresh ledger."""
    ledger = PrivacyLedger(max_window=scenario.window)
    engine = Engine(mechanism, rng, ledger)
    terms = np.full(scenario.slots, np.nan)  # nan: no fresh release at the slot
    fresh = inconsistent = 0
    for batch in batches:
        release = engine.step(batch)
        if release.kind is not ReleaseKind.FRESH:
            continue
        estimate = release.estimate
        terms[release.slot - 1] = float(estimate[0]) if numeric else float(estimate[0] - estimate[1])
        fresh += release.slot in scenario.span
        inconsistent += not numeric and abs(float(estimate.sum()) - 1.0) > TOTAL_TOLERANCE
    engine.close()
    span = slice(scenario.lead, scenario.lead + scenario.window)
    votes = np.where(np.isnan(terms), 0.0, np.sign(terms - (0.5 if numeric else 0.0)))
    likelihood = math.nan
    if client is not None and not np.isnan(terms).any():  # the target alone: each release is their report
        likelihood = client_likelihood(client, terms, *scenario.target_values())
    terms = np.nan_to_num(terms)
    statistics = np.array([terms[span].sum(), terms[scenario.lead:].sum(), terms[span].max(), votes[span].sum(),
                           votes[scenario.lead:].sum(), likelihood])
    first = str(ledger.violations[0]) if ledger.violations else None
    return WindowRun(statistics, fresh, inconsistent > 0, ledger.violation_count, ledger.max_usage_ratio, first)


def audit_window(cls: type[Mechanism], scenario: WindowScenario, index: int, config: AuditConfig,
                 randomness: Callable[[int, int, int], Randomness]) -> ScenarioResult:
    """Both streams ``config.runs`` times with fresh mechanisms; the bound on the window's change."""
    numeric = cls.estimates is mechanism_domain.Estimate.MEAN
    statistics = np.zeros((2, len(WINDOW_STATISTICS), config.runs))
    violations = flagged = fresh = inconsistent = 0
    ratio, first = 0.0, None
    params = scenario.params_for(cls)
    client = claimed_client(cls, params) if numeric and scenario.others == 0 else None
    for stream, batches in enumerate(scenario.streams(cls)):
        for run in range(config.runs):
            outcome = run_window_once(cls(params), batches, scenario, numeric, randomness(index, stream, run),
                                      client)
            statistics[stream, :, run] = outcome.statistics
            violations += outcome.ledger_violations
            flagged += outcome.ledger_violations > 0
            ratio = max(ratio, outcome.ledger_max_ratio)
            first = first or outcome.first_violation
            fresh += outcome.fresh_in_span
            inconsistent += outcome.inconsistent
    estimate = lower_bound(statistics[0], statistics[1], config.confidence, WINDOW_STATISTICS, mirrored=False)
    runs = 2 * config.runs
    return ScenarioResult(scenario, estimate, power(scenario.bound, estimate.evaluation_runs, config.confidence,
                                                    mirrored=False),
                          fresh / (runs * scenario.window), 0.0, violations, flagged, ratio, first,
                          (statistics[0], statistics[1]), config.confidence, False, inconsistent)
