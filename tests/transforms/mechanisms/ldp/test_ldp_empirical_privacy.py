"""An empirical privacy check of the local methods through their releases, with power.

One user alone at a slot, with value 0 or 1 (neighbours that replace the value, the w-event LDP
guarantee), every method run at (E, w) = (2, 1), so the slot's reports may spend E = 2 in all.  The event
"the released estimate puts more than half on bin 0" is counted over many runs of each neighbour;
``ln(P_lower / Q_upper)`` with one-sided Clopper-Pearson bounds at 1e-7 each is below the true loss of
the event with probability at least 1 - 2e-7, so a correct method fails a test with probability below
2e-7.  Power: at these run counts a correct GRR report shows at least 1.5 of its 2 (checked), and a
method whose reports are not randomized is flagged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.ldp.budget_division import LBU
from transforms.mechanisms.noise import insecure_seeded_randomness

RUNS = 3000
ALPHA = 1e-7
BOUND = 2.0


def _event_rate(make, value: int, seed: int) -> int:
    hits = 0
    rng = insecure_seeded_randomness(seed)
    for _ in range(RUNS):
        mechanism = make()
        release = mechanism.step(SlotBatch.of([0], [value], FixedRequirements.of([1], [BOUND])), rng)
        hits += release.estimate[0] > 0.5
    return hits


def lower_bound(make) -> float:
    """The Clopper-Pearson lower bound on the loss of the event, from RUNS runs of each neighbour."""
    favoured, other = _event_rate(make, 0, 1), _event_rate(make, 1, 2)
    p_low = stats.beta.ppf(ALPHA, favoured, RUNS - favoured + 1) if favoured else 0.0
    q_high = stats.beta.ppf(1 - ALPHA, other + 1, RUNS - other) if other < RUNS else 1.0
    return math.log(p_low / q_high) if p_low > 0 else 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lbu", "lsp", "lbd", "lba", "lpu", "plbu"])
def test_a_lone_users_release_leaks_at_most_their_budget(name):
    params = {"bins": 2} if name == "plbu" else {"bins": 2, "epsilon": BOUND, "window": 1}
    bound = lower_bound(lambda: make_mechanism(name, **params))
    assert bound <= BOUND, bound
    if name in ("lbu", "lsp", "lpu", "plbu"):  # one report of the whole budget: the audit sees most of it
        assert bound >= 1.5, bound


class Unrandomized(LBU):
    """A broken method: its users' reports are their true values (the oracle is never applied)."""

    def simulate(self, request, holders, rng):
        return np.bincount(holders.value_of[request.users], minlength=request.oracle.d)


@pytest.mark.slow
def test_reports_that_are_not_randomized_are_flagged():
    bound = lower_bound(lambda: Unrandomized(Unrandomized.params_type(bins=2, epsilon=BOUND, window=1)))
    assert bound > BOUND, bound
