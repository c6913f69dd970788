"""Empirical privacy audit with power: statistical lower bounds on what one user's data leaks, for every family.

    wevent audit --mechanism pba --json
    wevent audit --mechanism all --insecure-seed 7
    wevent audit --mechanism lbu --broken over-budget-randomizer --json   # needs a source checkout

(``python -m pipelines.audit`` is the same command.)  Each mechanism runs many
times on each of two neighbouring inputs; from the outputs alone (and, for the
central methods, the noisy dissimilarity, which is charged as if published) a
threshold event is chosen on a quarter of the runs and its probability ratio
bounded on the others with one-sided Clopper-Pearson bounds: with probability at
least ``confidence`` the bound ``ε_LB = ln(P_lower/Q_upper)`` is below the
mechanism's true loss, so a correct mechanism is flagged with probability at most
``1 - confidence`` per scenario.  Every run's charges also go through a fresh
:class:`~transforms.mechanisms.PrivacyLedger`.  A scenario is flagged when
``ε_LB > E*`` (the budget the neighbours' difference may cost), when the ledger
sees any overspend, or (window scenario) when a release contradicts its own
reporters.

The scenarios, by family:

* :mod:`.scenarios` / :mod:`.one_slot` (every windowed mechanism): the
  target's report at one slot ``t*`` (central: present or absent; local:
  replaced), ``steady`` and ``changes``; ``E*`` the smallest ``E`` in force.
* :mod:`.window` (LDP-IDS, PLBU, the numeric methods): the target's value
  changes at every slot of one window, observed over the window and the
  memory slots after it; ``E*`` the window budget.
* :mod:`.lifetime` (DPI): all of one user's records present or absent;
  ``E*`` the charge the releases state (at most the lifetime budget).

Beside each bound: its *power* (:func:`.statistics.power`, the bound the
audit reaches at this run count on a mechanism that leaks exactly ``E*``)
and the best-case probability of flagging a variant that leaks twice ``E*``
(:func:`.statistics.detection_probability`).

**Noise.** Secure by default (one shared secure stream).  ``--insecure-seed S``
gives a seeded generator per run (distinct for every scenario, stream and
run): reproducible, for this offline audit only.
"""

from pipelines.audit.cli import BROKEN_MODULE, ArgumentError, Plan, StrictParser, load_broken_variants, parse_args, run
from pipelines.audit.lifetime import LIFETIME_STATISTICS, LifetimeScenario, audit_lifetime, lifetime_scenario_for
from pipelines.audit.one_slot import (RunOutcome, audit_scenario, build, dissimilarity_probe, run_once,
                                      scenarios_for)
from pipelines.audit.results import (MAX_RUNS, POWER_FACTOR, AuditConfig, AuditResult, ScenarioResult,
                                     randomness_for, run_seed)
from pipelines.audit.runner import audit
from pipelines.audit.scenarios import (ONE_SLOT_FAMILIES, SCENARIOS, TARGET, TARGET_BIN, Scenario, UserPlan,
                                       changes_scenario, steady_scenario)
from pipelines.audit.statistics import (SELECTION_FRACTION, STATISTICS, Direction, Estimate, Event,
                                        candidate_events, clopper_pearson, detection_probability, lower_bound,
                                        power)
from pipelines.audit.window import WINDOW_STATISTICS, WindowScenario, audit_window, window_scenario_for

__all__ = ["BROKEN_MODULE", "LIFETIME_STATISTICS", "MAX_RUNS", "ONE_SLOT_FAMILIES", "POWER_FACTOR", "SCENARIOS",
           "SELECTION_FRACTION", "STATISTICS", "TARGET", "TARGET_BIN", "WINDOW_STATISTICS", "ArgumentError",
           "AuditConfig", "AuditResult", "Direction", "Estimate", "Event", "LifetimeScenario", "Plan", "RunOutcome",
           "Scenario", "ScenarioResult", "StrictParser", "UserPlan", "WindowScenario", "audit", "audit_lifetime",
           "audit_scenario", "audit_window", "build", "candidate_events", "changes_scenario", "clopper_pearson",
           "detection_probability", "dissimilarity_probe", "lifetime_scenario_for", "load_broken_variants",
           "lower_bound", "parse_args", "power", "randomness_for", "run", "run_once", "run_seed", "scenarios_for",
           "steady_scenario", "window_scenario_for"]
