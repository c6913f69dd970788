"""The evidence a release carries, and the ledger's check of charges against it."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanism_helpers import declaring, run_with_ledger
from transforms.mechanisms import (DISSIMILARITY, PUBLICATION, CohortCharges, DynamicRequirements, Family,
                                   FixedRequirements, PrivacyLedger, SlotBatch, make_mechanism)
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.evidence import CERTAIN, Evidence, Statistic, least_charge_units
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.population import WAITING
from transforms.mechanisms.sampling import laplace_scale, sampled_statistic


def test_a_certain_report_costs_exactly_the_statistics_epsilon():
    assert least_charge_units(CERTAIN, laplace_scale(123_456, 1), 1) == 123_456
    assert least_charge_units(CERTAIN, laplace_scale(123_456, 2), 2) == 123_456
    assert least_charge_units(CERTAIN, Fraction(3), 1) == -(-UNITS_PER_EPSILON // 3)  # 1/3 rounded up
    assert least_charge_units(0, Fraction(1), 1) == 0


@settings(max_examples=200, deadline=None)
@given(theta=st.integers(10**9, 5 * 10**12), fraction=st.floats(0.001, 0.999))
def test_subsampling_coins_cost_no_more_than_the_budget_they_were_drawn_for(theta, fraction):
    """A cohort with budget ε_i < θ gets coins of probability (e^ε_i - 1)/(e^θ - 1), rounded down:
    the least charge the ledger derives never exceeds ε_i, and is within a unit of it."""
    budget = max(int(theta * fraction), 1)
    statistic = sampled_statistic("publication", np.array([budget]), theta, 1)
    least = least_charge_units(int(statistic.thresholds[0]), statistic.noise_scale, 1)
    assert least <= budget
    granularity = UNITS_PER_EPSILON * math.expm1(theta / UNITS_PER_EPSILON) / CERTAIN  # one step of a coin
    assert least >= budget - 2 - granularity - budget * 2.0**-38  # tight: the coins lose only their rounding


def test_the_least_charge_grows_with_the_probability_and_matches_the_amplification_formula():
    scale = laplace_scale(UNITS_PER_EPSILON, 1)  # a 1-DP statistic
    previous = 0
    for p in (2**-20, 0.01, 0.25, 0.5, 0.9, 1 - 2**-20):
        threshold = int(p * CERTAIN)
        least = least_charge_units(threshold, scale, 1)
        expected = math.log1p(threshold / CERTAIN * math.expm1(1.0)) * UNITS_PER_EPSILON
        assert expected <= least <= expected + 2 and least > previous
        previous = least


def _charges(cohort_of, dc, publication, evidence):
    rows = len(dc)
    return CohortCharges(cohort_of=cohort_of, cohort_parts={DISSIMILARITY: np.array(dc, np.int64),
                                                         PUBLICATION: np.array(publication, np.int64)},
                         cohort_requirements=FixedRequirements(np.full(rows, 2), np.full(rows, 10 * UNITS_PER_EPSILON)),
                         waiting_users=np.flatnonzero(cohort_of == WAITING),
                         waiting_requirements=FixedRequirements(np.array([2]), np.array([UNITS_PER_EPSILON]))
                         if (cohort_of == WAITING).any() else None,
                         evidence=evidence,
                         declarations=declaring(np.arange(cohort_of.size),
                                                FixedRequirements.of([2] * cohort_of.size, [10] * cohort_of.size)))


def test_the_ledger_flags_a_user_in_a_statistic_whom_the_charges_call_waiting():
    """The shape of finding 1: user 0 entered the statistic through a stale row, charged 0 as waiting."""
    cohort_of = np.array([WAITING, 0, 0])
    stale = np.array([0, 0, 0])
    statistic = Statistic("publication", laplace_scale(UNITS_PER_EPSILON, 1), 1, np.array([CERTAIN], np.uint64))
    ledger = PrivacyLedger(max_window=4)
    ledger.record(1, _charges(cohort_of, [0], [UNITS_PER_EPSILON], Evidence(stale, (statistic,))))
    assert ledger.violation_count == 1
    (violation,) = ledger.violations
    assert (violation.user, violation.kind, violation.window_units, violation.bound_units) == \
        (0, "undercharged", UNITS_PER_EPSILON, 0)
    assert "charged 0" in str(violation)
    # the same statistic built from the memberships the charges name is covered
    ledger = PrivacyLedger(max_window=4)
    ledger.record(1, _charges(cohort_of, [0], [UNITS_PER_EPSILON], Evidence(cohort_of, (statistic,))))
    assert ledger.ok


def test_the_ledger_flags_a_row_charged_less_than_its_coins_and_noise_imply():
    cohort_of = np.array([0, 1, 1])
    budgets = np.array([UNITS_PER_EPSILON // 2, UNITS_PER_EPSILON])
    statistic = sampled_statistic("publication", budgets, UNITS_PER_EPSILON, 1)
    ledger = PrivacyLedger(max_window=4)
    ledger.record(1, _charges(cohort_of, [0, 0], budgets, Evidence(cohort_of, (statistic,))))
    assert ledger.ok
    ledger.record(2, _charges(cohort_of, [0, 0], budgets * 9 // 10, Evidence(cohort_of, (statistic,))))
    assert ledger.violation_count == 3 and {v.kind for v in ledger.violations} == {"undercharged"}


@pytest.mark.parametrize("name", ["pbd", "pba", "bd", "ba", "uniform", "sample"])
def test_a_mechanism_that_charges_half_its_publications_is_caught(name, monkeypatch):
    """Power: halving every publication charge (the statistics unchanged) must not pass the ledger."""
    from transforms.mechanisms import base

    real = base.Decision.__init__

    def halved(self, kind, histogram, epsilon_units, predicted_error, dc_units, publication_units, statistics=()):
        real(self, kind, histogram, epsilon_units, predicted_error, dc_units, publication_units // 2, statistics)

    monkeypatch.setattr(base.Decision, "__init__", halved)
    kwargs = {"epsilon": 2.0, "window": 4} if Family.of(name) is Family.HOMOGENEOUS else {}
    mechanism = make_mechanism(name, bins=3, **kwargs)
    gen = np.random.default_rng(3)
    reqs = FixedRequirements.of([4] * 40, [2.0] * 20 + [4.0] * 20)
    batches = [SlotBatch.of(range(40), gen.integers(0, 3, 40), reqs if t == 0 else None) for t in range(12)]
    releases, ledger = run_with_ledger(mechanism, batches)
    assert any(r.kind.value == "fresh" for r in releases)
    assert not ledger.ok and {v.kind for v in ledger.violations} == {"undercharged"}


@pytest.mark.parametrize("name", ["pbd", "pba", "dpbd", "dpba", "bd", "ba", "uniform", "sample"])
def test_every_release_names_its_statistics_and_the_cells_come_from_its_groups(name):
    kwargs = {"epsilon": 1.0, "window": 4} if Family.of(name) is Family.HOMOGENEOUS else {}
    mechanism = make_mechanism(name, bins=2, **kwargs)
    gen = np.random.default_rng(1)
    dynamic = Family.of(name) is Family.DYNAMIC
    for t in range(8):
        if dynamic:
            reqs = DynamicRequirements.of([4] * 30, [1.0] * 30, [4] * 30, [1.0] * 30) if t == 0 else None
        else:
            reqs = FixedRequirements.of([4] * 30, [1.0] * 30) if t == 0 else None
        users = np.sort(gen.choice(30, 20, replace=False)) if t else np.arange(30)
        release = mechanism.step(SlotBatch.of(users, gen.integers(0, 2, users.size), reqs),
                                 insecure_seeded_randomness(t))
        evidence = release.charges.evidence
        names = [s.name for s in evidence.statistics]
        assert names in ([], ["dissimilarity"], ["publication"], ["dissimilarity", "publication"])
        assert (release.kind.value == "fresh") == ("publication" in names)
        assert evidence.groups is release.charges.group_of  # the snapshot the cells were counted from
        assert not evidence.groups.flags.writeable
