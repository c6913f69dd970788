"""The audit of the local and lifetime families (issue 26): window and lifetime scenarios, every shipped method
passing them, and each broken variant flagged by the ledger or the audit.

Audits run with the seeded generator and fixed seeds (reproducible); each
statistical test states how likely it would be to fail for a seed drawn at
random, from the bounds measured over seeds 0-4 (the commit message lists
them).
"""

from __future__ import annotations

import numpy as np
import pytest

from pipelines import audit as audit_module
from pipelines.audit import (AuditConfig, detection_probability, lifetime_scenario_for, power,
                             window_scenario_for)
from tests.pipelines.broken_mechanisms import VARIANTS, broken_class
from transforms.mechanisms import MECHANISMS, Family, TrustModel

LOCAL = [name for name, cls in MECHANISMS.items() if cls.trust is not TrustModel.CENTRAL]
LIFETIME = [name for name, cls in MECHANISMS.items() if Family.of(cls) is Family.LIFETIME]
QUICK = ("lbu", "lpd", "plbu", "sw-direct", "app")
"""One of each kind of local method in the default run; the others are marked slow."""


def run_audit(cls, runs, seed, broken=None, name="m", only=None):
    return audit_module.audit(name, cls, AuditConfig(runs=runs, insecure_seed=seed), broken, only)


# ---------------------------------------------------------------------- the scenarios
@pytest.mark.parametrize("name", LOCAL)
def test_every_local_method_has_a_window_scenario_that_changes_one_window(name):
    """The neighbours differ in the target's value at exactly the w slots of one window, nowhere else."""
    cls = MECHANISMS[name]
    scenario = window_scenario_for(cls)
    assert scenario is not None and lifetime_scenario_for(cls) is None
    present, absent = scenario.streams(cls)
    assert len(present) == len(absent) == scenario.slots
    differing = [slot for slot, (a, b) in enumerate(zip(present, absent), start=1)
                 if not np.array_equal(a.values, b.values)]
    assert differing == list(scenario.span) and len(differing) == scenario.window
    for a, b in zip(present, absent):
        assert np.array_equal(a.users, b.users) and np.array_equal(a.values[1:], b.values[1:], equal_nan=True)


@pytest.mark.parametrize("name", LIFETIME)
def test_dpi_has_a_lifetime_scenario_whose_neighbours_differ_by_one_users_records(name):
    cls = MECHANISMS[name]
    scenario = lifetime_scenario_for(cls)
    assert scenario is not None and window_scenario_for(cls) is None
    present, absent = scenario.streams()
    assert all(0 in batch.users.tolist() for batch in present)
    assert all(0 not in batch.users.tolist() for batch in absent)
    assert all(np.array_equal(a.users[a.users != 0], b.users) for a, b in zip(present, absent))


def test_central_mechanisms_have_neither():
    for name in ("pbd", "uniform", "dpba"):
        assert window_scenario_for(MECHANISMS[name]) is None and lifetime_scenario_for(MECHANISMS[name]) is None


def test_the_power_against_a_twofold_overspend_is_stated_and_grows_with_the_runs():
    """The best-case chance of flagging a 2x over-spend: small at a handful of runs, near 1 at the sizes used."""
    few, many = (detection_probability(2.0, 2.0, runs, 0.99, mirrored=False) for runs in (20, 300))
    assert 0 <= few < 0.5 < many <= 1
    assert detection_probability(2.0, 1.0, 300, 0.99, mirrored=False) <= 0.02  # a tight mechanism: <= 1 - conf
    assert power(2.0, 300, 0.99, mirrored=False) < power(2.0, 300, 0.99)  # mirrored events pool both streams


def test_every_scenario_result_states_its_power_and_false_flag_probability():
    result = run_audit(MECHANISMS["lbu"], 40, 3, name="lbu")
    for scenario in result.to_json()["scenarios"]:
        assert 0 <= scenario["power_at_2x"] <= 1 and scenario["false_flag_probability"] == pytest.approx(0.01)
        assert scenario["power"] >= 0


# ---------------------------------------------------------------------- shipped mechanisms pass
def _passes(name: str, runs: int) -> None:
    """300 runs per stream at confidence 0.99: a correct mechanism is flagged with probability at most 1% per
    scenario by the bound, never by the ledger or the consistency check."""
    result = run_audit(MECHANISMS[name], runs, seed=11, name=name, only=("window", "lifetime"))
    assert not result.violation, result.to_json()
    (scenario,) = result.scenarios
    assert scenario.ledger_violations == 0 and scenario.inconsistent_runs == 0


@pytest.mark.parametrize("name", [name for name in LOCAL if name in QUICK])
def test_shipped_local_methods_pass_the_window_audit(name):
    _passes(name, 300)


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in LOCAL if name not in QUICK])
def test_every_other_shipped_local_method_passes_the_window_audit(name):
    _passes(name, 300)


@pytest.mark.parametrize("name", LIFETIME)
def test_shipped_dpi_passes_the_lifetime_audit(name):
    _passes(name, 300)


def test_the_window_audit_sees_most_of_budget_divisions_budget():
    """LBU with the target alone: the bound reaches a good part of what a tight mechanism could show (0.98-1.36
    over seeds 1-5 at 300-400 runs against a power of 1.58), so the scenario is not blind."""
    result = run_audit(MECHANISMS["lbu"], 300, seed=11, name="lbu", only="window")
    assert result.scenarios[0].estimate.lower_bound > 0.5


# ---------------------------------------------------------------------- broken variants
# (variant, mechanism, runs, the checks that may flag it): each is flagged by the ledger or the audit.
FLAGGED = [
    ("over-budget-randomizer", "lbu", 300, ("empirical: window",)),
    ("over-budget-randomizer", "plbu", 300, ("empirical: window",)),
    ("over-budget-randomizer", "sw-direct", 400, ("empirical: window",)),
    ("unasked-reports-counted", "lpd", 50, ("consistency: window", "empirical: window", "ledger: window")),
    ("unasked-reports-counted", "lpu", 50, ("consistency: window", "empirical: window", "ledger: window")),
    ("memory-ignored", "app", 100, ("empirical: window", "ledger: window")),
    ("dpi-over-draw", "dpi-sound", 1200, ("empirical: lifetime", "ledger: lifetime")),
    ("half-charge", "lbu", 20, ("ledger: window",)),
    ("half-charge", "plbu", 20, ("ledger: window",)),
    ("half-charge", "sw-direct", 20, ("ledger: window",)),
    ("half-charge", "app", 20, ("ledger: window",)),
    ("half-charge", "dpi-sound", 20, ("ledger: lifetime",)),
]
"""Chance of a miss for a random seed: the over-budget randomizers leak 4x (LBU/PLBU bounds 3.6 against E* = 2;
SW-direct 2.25-3.11 over seeds 0-4 at 400 runs against 2); an unasked report moves the GRR estimate's total off 1
in every run (certain); the over-draw's bound was 2.3-2.6 against the stated 1.62 over seeds 0-4 at 1200 runs; the
ledger re-derives each report's and draw's least charge from its evidence, so a half charge is seen in every run.
``memory-ignored`` leaks 2E: at 100 runs only the ledger's memory-aware window check (issue 26 item 2) can see
it (this case fails until that check lands); the bound sees it at 2400 runs for most seeds (the slow test
below)."""


def test_every_new_variant_is_tested():
    tested = {variant for variant, *_ in FLAGGED}
    assert tested == set(VARIANTS) - {"noiseless-dissimilarity", "reused-noise", "half-scale-noise",
                                      "waiting-user-used", "dead-cohort-absorbs", "forgotten-slot",
                                      "authors-bookkeeping"}


@pytest.mark.parametrize("variant, mechanism, runs, checks", FLAGGED)
def test_every_broken_variant_is_flagged_by_the_ledger_or_the_audit(variant, mechanism, runs, checks):
    result = run_audit(broken_class(variant, mechanism), runs, seed=21, broken=variant, name=mechanism,
                       only=("window", "lifetime"))
    assert result.violation, result.to_json()
    assert any(check in result.reason for check in checks), result.reason


@pytest.mark.slow
def test_memory_ignored_is_flagged_by_the_bound_alone():
    """APP at eps/w with memory w leaks up to 2E over a window and the h slots after it; the client-likelihood
    statistic (the stated client's band membership, its inputs rebuilt from the values and earlier reports) sees
    it at 2400 runs: bounds 2.08, 2.48, 2.21 (seeds 0-2), 1.91 (seed 7, a miss) against E* = 2, so a random seed
    misses it with probability around 1 in 5 (a correct APP stays near 0.8).  The ledger's memory-aware check
    (the default-run test above) is what sees it for certain."""
    result = run_audit(broken_class("memory-ignored", "app"), 2400, seed=21, broken="memory-ignored", name="app",
                       only="window")
    assert result.violation and "empirical: window" in result.reason, result.to_json()


def test_the_half_charge_of_a_central_mechanism_is_flagged_by_the_ledger():
    result = run_audit(broken_class("half-charge", "pbd"), 10, seed=2, broken="half-charge", name="pbd",
                       only="steady")
    assert result.violation and "ledger: steady" in result.reason, result.reason


def test_variants_are_built_from_public_names_only():
    """No broken variant reaches into a private (underscore) name of the mechanisms."""
    import inspect

    from tests.pipelines import broken_mechanisms

    source = inspect.getsource(broken_mechanisms)
    new = source[source.index("class OverBudgetRandomizer"):source.index("DISSIMILARITY = (")]
    assert "._" not in new.replace("self._", "").replace("._replace", "")
    assert "self._" not in new
