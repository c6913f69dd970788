"""The fast LDP-IDS methods (and PLBU) against the per-user reference (``reference_ldp_ids``), same draws.

Generated streams (joins, absences, rows that only declare, ``carry_forward``
on and off; small n, d in 2..5, w in 1..8, β in {0.3, 0.5, 0.7}) run through
the fast mechanism and through the reference, each with its own seeded
generator of the same seed: both call the randomness primitives in the same
order, so they must agree exactly, slot by slot, on the release kind, the
estimate, who reported in each sub-mechanism (and with which budget and
oracle), every registered user's dissimilarity and publication charges and
the slot's communication (with the fast mechanism saved and restored at a
generated slot).  The reference checks its own per-user windows at
every slot (no window over ε; in population division no user twice in any
``w`` consecutive slots, spec TV-11b) and the project's privacy ledger must
find no violation in the fast mechanism's charges.

Mutation power: deliberate mistakes in subclasses of the fast mechanisms
(recycling one slot early, trap T6; LBA/LPA without the ``t_N = -1`` start,
trap T10; LPA skipping M_{t,1} at nullified slots, trap T7; LPD's publication
pool counting every user, trap T9; LBD's pool as a float ``(1-β)ε``) are
caught by the comparison, and the early recycling by the ledger too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanism_helpers import run_with_ledger
from reference_ldp_ids import BUDGET_METHODS, DIS, POPULATION_METHODS, Reference, ReferenceOverspent

from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION
from transforms.mechanisms.ldp.budget_division import LBA, LBD
from transforms.mechanisms.ldp.population_division import LPA, LPD
from transforms.mechanisms.ldp.stream import LocalParams
from transforms.mechanisms.noise import insecure_seeded_randomness

PLBU_WINDOWS = (1, 2, 3, 5, 8)
PLBU_EPSILONS = ("0.5", "1", "2")


@dataclass(frozen=True)
class Scenario:
    """A method, its parameters and a generated stream (``seed`` drives both the stream and the draws)."""

    method: str
    users: int
    bins: int
    slots: int
    window: int
    epsilon: str
    beta: str
    carry_forward: bool
    simulation: str
    oracle: str | None
    presence: float        # probability a joined user has a row in a slot (always at their join slot)
    blank: float           # probability a row only declares (value -1)
    join_spread: int       # users join at a uniform slot in [1, 1 + join_spread]
    min_publication_users: int = 1
    sampling_offset: int = 0
    seed: int = 0

    def rows(self) -> list[list[tuple[int, int, tuple[int, int]]]]:
        """Per slot, ``(user, value or -1, (w, E units))`` ascending by user."""
        gen = np.random.default_rng(self.seed)
        n = self.users
        joins = 1 + gen.integers(0, self.join_spread + 1, n)
        level = gen.integers(0, self.bins, n)
        if self.method == "plbu":
            requirements = [(int(gen.choice(PLBU_WINDOWS)), _units(str(gen.choice(PLBU_EPSILONS))))
                            for _ in range(n)]
        else:
            requirements = [(self.window, _units(self.epsilon))] * n
        slots = []
        for t in range(1, self.slots + 1):
            level = np.where(gen.random(n) < 0.25, gen.integers(0, self.bins, n), level)
            present = (joins <= t) & ((gen.random(n) < self.presence) | (joins == t))
            blank = gen.random(n) < self.blank
            slots.append([(u, -1 if blank[u] else int(level[u]), requirements[u]) for u in np.flatnonzero(present)])
        return slots

    def params(self) -> dict:
        common = {"bins": self.bins, "carry_forward": self.carry_forward, "simulation": self.simulation,
                  "oracle": self.oracle}
        if self.method == "plbu":
            return common
        return {**common, "epsilon": float(self.epsilon), "window": self.window, "beta": float(self.beta),
                "min_publication_users": self.min_publication_users, "sampling_offset": self.sampling_offset}

    def reference(self) -> Reference:
        return Reference(self.method, self.bins, None if self.method == "plbu" else self.epsilon, self.window,
                         self.beta, self.carry_forward, self.simulation, self.oracle,
                         min_publication_users=self.min_publication_users, sampling_offset=self.sampling_offset)


def _units(epsilon: str) -> int:
    return int(float(epsilon) * 10**12)


def batches(scenario: Scenario) -> list[SlotBatch]:
    out = []
    for rows in scenario.rows():
        users = [u for u, _, _ in rows]
        reqs = FixedRequirements(np.array([r[0] for _, _, r in rows], np.int64),
                                 np.array([r[1] for _, _, r in rows], np.int64))
        out.append(SlotBatch.of(users, [v for _, v, _ in rows], reqs))
    return out


def run_fast(scenario: Scenario, mechanism=None, resume_at: int | None = None) -> list[dict]:
    """Each slot of the fast mechanism as plain data, with the reports its users were asked for.

    With ``resume_at``, the mechanism is saved before that slot and the run continues from the restored copy.
    """
    mechanism = mechanism or make_mechanism(scenario.method, **scenario.params())
    asked = []

    def recorded(mechanism):
        simulate = mechanism.simulate

        def recording(reports, holders, rng):
            asked.append((reports.part, tuple(int(u) for u in reports.users), reports.oracle.epsilon_units,
                          reports.oracle.kind))
            return simulate(reports, holders, rng)

        mechanism.simulate = recording
        return mechanism

    mechanism = recorded(mechanism)
    rng = insecure_seeded_randomness(scenario.seed)
    out = []
    for t, batch in enumerate(batches(scenario), 1):
        if t == resume_at:
            mechanism = recorded(type(mechanism).from_bytes(mechanism.params, mechanism.to_bytes()))
        del asked[:]
        release = mechanism.step(batch, rng)
        charges = release.charges
        users = [int(u) for u in charges.users]
        out.append({"kind": release.kind.value, "estimate": release.estimate.copy(), "reports": list(asked),
                    "charges": dict(zip(users, zip(map(int, charges.part_units(DISSIMILARITY)),
                                                   map(int, charges.part_units(PUBLICATION))))),
                    "bits": mechanism.last_bits, "epsilon_units": release.epsilon_units})
    return out


def run_reference(scenario: Scenario, reference: Reference | None = None) -> list:
    reference = reference or scenario.reference()
    rng = insecure_seeded_randomness(scenario.seed)
    return [reference.step(rows, rng) for rows in scenario.rows()]


def first_difference(scenario: Scenario, mechanism=None, resume_at: int | None = None) -> str | None:
    """Where the fast mechanism first departs from the reference (None: nowhere)."""
    expected = run_reference(scenario)
    for ref, fast in zip(expected, run_fast(scenario, mechanism, resume_at)):
        where = f"{scenario.method} slot {ref.slot} ({ref.trace})"
        reports = [(r.part, r.users, r.units, r.kind) for r in ref.reports]
        checks = [("kind", fast["kind"], ref.kind), ("reports", fast["reports"], reports),
                  ("charges", fast["charges"], ref.charges), ("bits", fast["bits"], ref.bits)]
        if scenario.method != "plbu":  # PLBU's fresh budget is the fast code's own summary
            checks.append(("epsilon_units", fast["epsilon_units"], ref.epsilon_units))
        for name, got, want in checks:
            if got != want:
                return f"{where}: {name} {got} (fast) != {want} (reference)"
        if scenario.method == "plbu":  # the reference sums per-user estimators exactly
            if not np.allclose(fast["estimate"], ref.estimate, rtol=1e-9, atol=1e-9):
                return f"{where}: estimate {fast['estimate']} (fast) != {ref.estimate} (reference)"
        elif not np.array_equal(fast["estimate"], ref.estimate):
            return f"{where}: estimate {fast['estimate']} (fast) != {ref.estimate} (reference)"
    return None


def scenarios(method: str, max_users: int = 60, max_slots: int = 24):
    return st.builds(
        Scenario, method=st.just(method), users=st.integers(1, max_users), bins=st.integers(2, 5),
        slots=st.integers(1, max_slots), window=st.integers(1, 8), epsilon=st.sampled_from(["0.5", "1", "4"]),
        beta=st.sampled_from(["0.3", "0.5", "0.7"]), carry_forward=st.booleans(),
        simulation=st.sampled_from(["users", "aggregate"]), oracle=st.sampled_from([None, "grr", "oue"]),
        presence=st.sampled_from([1.0, 0.7, 0.3]), blank=st.sampled_from([0.0, 0.1]),
        join_spread=st.integers(0, 10), min_publication_users=st.sampled_from([1, 3]),
        sampling_offset=st.sampled_from([0, 2]), seed=st.integers(0, 2**32 - 1))


PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("method", BUDGET_METHODS + POPULATION_METHODS + ("plbu",))
def test_fast_equals_reference_on_generated_streams(method):
    @PROPERTY
    @given(scenarios(method), st.integers(1, 24))
    def check(scenario, resume_at):
        difference = first_difference(scenario, resume_at=resume_at)
        assert difference is None, difference
        _, ledger = run_with_ledger(make_mechanism(method, **scenario.params()), batches(scenario),
                                           seed=scenario.seed)
        assert ledger.violation_count == 0, ledger.violations[:3]

    check()


# ------------------------------------------------------------------ the reference itself
@pytest.mark.parametrize("method", ["lpd", "lpa"])
@pytest.mark.parametrize("n, w", [(200, 5), (120, 3), (1000, 10), (40, 20)])
def test_tv11b_no_user_twice_within_w_under_random_decisions(method, n, w):
    """Spec TV-11b: random publish decisions (probability 1/2), T = 150: the pool never lets a user report twice
    within ``w`` slots (the reference raises if it does) and never underflows."""
    gen = np.random.default_rng(n + w)
    decisions = gen.random(151) < 0.5
    reference = Reference(method, 2, "1", w, simulation="aggregate",
                          dis_override=lambda t: 1.0 if decisions[t] else -1.0)
    rng = insecure_seeded_randomness(w)
    publications = 0
    for t in range(1, 151):
        outcome = reference.step([(u, u % 2, None) for u in range(n)], rng)
        publications += outcome.kind == "fresh"
        assert outcome.reports[0].part == DIS and len(outcome.reports[0].users) == n // (2 * w)  # M1 never starves
        if outcome.kind == "fresh":
            assert len(outcome.reports[1].users) == outcome.trace["n_pp"]  # nor does a publication
    assert publications > 10


def test_reference_window_check_has_power():
    """The reference's own check catches a recycling one slot early (trap T6)."""

    class EarlyRecycling(Reference):
        def recycle(self):
            if self.t >= self.w - 1:
                first, second = self.used.pop(self.t - self.w + 2)
                self.U_A |= first | second

    reference = EarlyRecycling("lpd", 2, "1", 4, simulation="aggregate", dis_override=lambda t: 1.0)
    rng = insecure_seeded_randomness(1)
    with pytest.raises(ReferenceOverspent, match="in the window ending at|within 4 slots"):
        for _ in range(40):
            reference.step([(u, u % 2, None) for u in range(40)], rng)


# ------------------------------------------------------------------ mutation power
MUTATION_STREAM = Scenario("lpd", users=60, bins=2, slots=30, window=4, epsilon="1", beta="0.5",
                           carry_forward=False, simulation="aggregate", oracle=None, presence=1.0, blank=0.0,
                           join_spread=0, seed=7)


def _params(scenario: Scenario) -> LocalParams:
    return LocalParams(**scenario.params())


class RecyclesEarly(LPD):
    """Trap T6: a user used at ``s`` is available again at ``s + w - 1``."""

    def available(self, holders):
        super().available(holders)  # grows last_report to the registry's size
        users = holders.users
        last = self.last_report[users]
        return users[(last == 0) | (last <= self.slot - self.params.window + 1)]


def test_recycling_one_slot_early_is_caught_by_the_comparison_and_the_ledger():
    assert first_difference(MUTATION_STREAM) is None
    assert first_difference(MUTATION_STREAM, RecyclesEarly(_params(MUTATION_STREAM))) is not None
    _, ledger = run_with_ledger(RecyclesEarly(_params(MUTATION_STREAM)), batches(MUTATION_STREAM))
    assert ledger.violation_count > 0


class NoPhantomStart(LBA):
    """Trap T10 "fixed": ``t_N = 0`` before any publication, so the first publication absorbs one unit less."""

    def __init__(self, params):
        super().__init__(params)
        self.units_absorbed = 1


class PopulationNoPhantomStart(LPA):
    """Trap T10 "fixed" in LPA: the first publication takes one unit of users less."""

    def __init__(self, params):
        super().__init__(params)
        self.units_absorbed = 1


@pytest.mark.parametrize("method, mutant", [("lba", NoPhantomStart), ("lpa", PopulationNoPhantomStart)])
def test_absorption_without_the_minus_one_start_is_caught(method, mutant):
    scenario = replace(MUTATION_STREAM, method=method, users=400, epsilon="2", window=3)
    assert first_difference(scenario) is None
    assert run_reference(scenario)[0].kind == "fresh"  # the first publication is where they differ
    assert first_difference(scenario, mutant(_params(scenario))) is not None


class SkipsM1WhenNullified(LPA):
    """Trap T7: M_{t,1} not run at nullified slots (saves users, changes who is sampled afterwards)."""

    def dissimilarity_round(self, holders, rng):
        if self.slot <= self.last_publication + self.units_absorbed - 1:
            return -np.inf, self.available(holders)
        return (yield from super().dissimilarity_round(holders, rng))


class PoolFromEveryone(LPD):
    """Trap T9: n_rm counted from every registered user n, not from the publication pool P = floor((1-β)n)."""

    def rounds(self, holders, rng):
        dis, pool = yield from self.dissimilarity_round(holders, rng)
        potential = max(holders.registered - sum(self._history), 0) // 2
        decision, asked = yield from self.publish_or_not(pool, potential, dis, rng)
        self._history.appendleft(asked)
        return decision


@pytest.mark.parametrize("scenario, mutant", [
    (replace(MUTATION_STREAM, method="lpa", users=400, epsilon="2", window=3), SkipsM1WhenNullified),
    (replace(MUTATION_STREAM, users=400, epsilon="2", window=3), PoolFromEveryone),
])
def test_population_accounting_mistakes_are_caught(scenario, mutant):
    assert first_difference(scenario) is None
    assert first_difference(scenario, mutant(_params(scenario))) is not None


class FloatPool(LBD):
    """Float budget division: the publication pool as the float ``(1-β)ε`` instead of the integer units that
    ``w`` floored dissimilarity shares leave (5 units apart at β = 0.3, ε = 0.5, w = 7)."""

    @property
    def publication_pool(self) -> int:
        return to_units((1 - self.params.beta) * self.params.epsilon)


def test_float_budget_division_is_caught():
    scenario = replace(MUTATION_STREAM, method="lbd", users=400, beta="0.3", window=7, epsilon="0.5")
    assert FloatPool(_params(scenario)).publication_pool != LBD(_params(scenario)).publication_pool
    assert first_difference(scenario) is None
    assert any(outcome.kind == "fresh" for outcome in run_reference(scenario))
    assert first_difference(scenario, FloatPool(_params(scenario))) is not None
