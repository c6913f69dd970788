"""Least charges and structural checks from the public schedule (transforms/mechanisms/public_schedule).

Each broken variant is built through public extension points (a subclass overriding a public method or a
public class attribute) and is passed by the evidence-only ledger of before (a ``PrivacyLedger`` fed the same
charges without their public record: exactly the check that ran before the public schedule existed), and
flagged by the ledger that checks the public schedule.  Every shipped local and DPI method passes with 0
violations over a few hundred slots with joins, absences, requirement changes and a resume from saved state.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from streams import StreamSpec
from transforms.mechanisms import (FixedRequirements, LifetimeRequirements, PrivacyLedger, SlotBatch, make_mechanism,
                                   mechanism_class)
from transforms.mechanisms.dpi.stream import DPIParams, SoundDPI
from transforms.mechanisms.ldp.budget_division import LBU
from transforms.mechanisms.ldp.extensions import EXTENSIONS
from transforms.mechanisms.ldp.mean import MEAN_METHODS
from transforms.mechanisms.ldp.oracles import oracle_for
from transforms.mechanisms.ldp.population_division import LPD
from transforms.mechanisms.ldp.stream import LocalParams, SlotRounds
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.public_schedule import (ASKED_TWICE, LAW_MISMATCH, LIFETIME_PREFIX, OFF_SCHEDULE,
                                                   UNASKED_REPORT, Finding, PublicRecord, ReportRecord, SlotVerdict,
                                                   packed_least, registered_verdict, unpack_least)
from transforms.mechanisms.public_schedule.laws import ada_law, frequency_pair, hybrid_pair, pair_units, rounding_pair
from transforms.mechanisms.public_schedule.registry import SCHEDULES, schedule_for

ROOT = Path(__file__).resolve().parents[3]
LOCAL = ["lbu", "lsp", "lbd", "lba", "lpu", "lpd", "lpa", *sorted(EXTENSIONS), *sorted(MEAN_METHODS)]
U = 10**12


# ------------------------------------------------------------------------------------------------ helpers
def both_ledgers(mechanism, batches, max_window: int, seed: int = 0):
    """Run ``mechanism``; return (the evidence-only ledger of before, the public-schedule ledger)."""
    before, now = PrivacyLedger(max_window), PrivacyLedger(max_window)
    rng = insecure_seeded_randomness(seed)
    for batch in batches:
        release = mechanism.step(batch, rng)
        assert release.public_record is not None
        before.record(release.slot, dataclasses.replace(release.charges, public_record=None))
        now.record(release.slot, release.charges)
    before.close(), now.close()
    return before, now


def kinds(ledger) -> set[str]:
    return {v.kind for v in ledger.violations}


def fixed_stream(users: int, slots: int, window: int, epsilon: float, bins: int = 5, seed: int = 3):
    """Every user reports every slot, declaring ``(window, epsilon)`` at slot 1."""
    gen = np.random.default_rng(seed)
    reqs = FixedRequirements.of([window] * users, [epsilon] * users)
    return [SlotBatch.of(range(users), gen.integers(0, bins, users), reqs if t == 0 else None) for t in range(slots)]


def lifetime_stream(users: int, slots: int, budget: float, bins: int = 4, seed: int = 5):
    gen = np.random.default_rng(seed)
    return [SlotBatch.of(range(users), gen.integers(0, bins, users),
                         LifetimeRequirements.of(np.full(users, budget)) if t == 0 else None) for t in range(slots)]


# ------------------------------------------------------------------------------------------------ the laws
@pytest.mark.parametrize("epsilon_units", [U // 100, U // 4, U, 3 * U, 20 * U])
@pytest.mark.parametrize("d", [2, 5, 64, 1000])
def test_the_rebuilt_laws_are_the_oracles_integers(epsilon_units, d):
    """Rebuilt independently (no import of the oracles), the integers agree with the mechanism's; a difference would
    be a false alarm (or a missed one) on every report."""
    for kind in ("grr", "oue"):
        try:
            oracle = oracle_for(epsilon_units, d, kind)
        except ValueError:  # below the law's resolution: nothing to compare
            continue
        assert frequency_pair(kind, epsilon_units, d) == (oracle.keep, oracle.other)
        assert pair_units(oracle.keep, oracle.other) == oracle.realised_units
    assert ada_law(epsilon_units, d) == oracle_for(epsilon_units, d).kind


@pytest.mark.parametrize("grid_bits", [4, 16, 24])
def test_the_rebuilt_hybrid_law_is_hm_s_integers(grid_bits):
    """Stochastic rounding's pair, the Piecewise Mechanism's band and HM's larger ratio, rebuilt without the
    mean or square-wave modules, equal the mechanism's on both sides of eps = 0.61 and up to 20."""
    from transforms.mechanisms.ldp.mean import HybridMechanism
    for units in (U // 10, 61 * U // 100, 61 * U // 100 + 1, U, 3 * U + 7, 8 * U, 20 * U):
        hm = HybridMechanism(units, grid_bits)
        assert rounding_pair(units, grid_bits) == hm.sr_pair
        assert hybrid_pair(units, grid_bits) == (hm.keep, hm.other)
        assert pair_units(*hybrid_pair(units, grid_bits)) == hm.realised_units <= units


# ------------------------------------------------------------------------------------------------ independence
def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_public_schedule_imports_no_mechanism_module():
    """Every project module the package reaches, transitively (the ``transforms.mechanisms`` package's own
    ``__init__``, which only re-exports, aside), is below the mechanisms: a bug there cannot reach the check."""
    forbidden = ("transforms.mechanisms.ldp", "transforms.mechanisms.dpi", "transforms.mechanisms.numeric")
    todo = [p for p in (ROOT / "transforms/mechanisms/public_schedule").glob("*.py")]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imports(path):
            assert not module.startswith(forbidden), f"{path.relative_to(ROOT)} imports {module}"
            if module.startswith("transforms.") and module != "transforms.mechanisms":
                target = ROOT / (module.replace(".", "/") + ".py")
                todo.append(target if target.exists() else ROOT / module.replace(".", "/") / "__init__.py")
    assert len(seen) > 5  # the walk did reach evidence, budget, certified, ...


# ------------------------------------------------------------------------------------------------ broken variants
class LoudLBU(LBU):
    """Perturbs at 4x the budget it names: the request says eps/w, the oracle it builds is at 4 eps/w."""

    def oracle(self, units: int):
        return super().oracle(4 * units)


def test_a_randomizer_at_four_times_its_named_budget_is_flagged():
    window = 4
    mechanism = LoudLBU(LocalParams(bins=5, epsilon=1.0, window=window))
    batches = fixed_stream(30, 20, window, 4.0)  # users declare 4 eps: the 4x windows fit what they declared
    before, now = both_ledgers(mechanism, batches, window)
    assert before.violation_count == 0
    assert LAW_MISMATCH in kinds(now)
    flagged = [v for v in now.violations if v.kind == LAW_MISMATCH]
    assert flagged[0].window_units == U // window and flagged[0].bound_units == U  # named eps/w, drawn at 4x


class _Understated:
    """An oracle that perturbs with ``real`` and states ``stated``'s law and cost (what the evidence reads)."""

    def __init__(self, real, stated):
        self.real, self.stated = real, stated

    def __getattr__(self, name):
        return getattr(self.real, name)

    keep = property(lambda self: self.stated.keep)
    other = property(lambda self: self.stated.other)
    realised_units = property(lambda self: self.stated.realised_units)


class HalfChargedLBU(LBU):
    """Reports at eps/w; charges and evidence both state half of it."""

    def oracle(self, units: int):
        return _Understated(super().oracle(units), super().oracle(units // 2))

    def simulate(self, request, holders, rng):
        return super().simulate(request._replace(oracle=request.oracle.real), holders, rng)


def test_a_half_charge_whose_evidence_agrees_is_flagged():
    window = 3
    mechanism = HalfChargedLBU(LocalParams(bins=5, epsilon=1.2, window=window))
    before, now = both_ledgers(mechanism, fixed_stream(20, 15, window, 1.2), window)
    assert before.violation_count == 0
    assert {"undercharged", LAW_MISMATCH} <= kinds(now)
    short = next(v for v in now.violations if v.kind == "undercharged")
    assert short.window_units > short.bound_units  # the named law's cost vs the half charged


class PermissiveRounds(SlotRounds):
    """Slot rounds that accept answers from users who were not asked."""

    def check_answer(self, users: np.ndarray) -> None:
        return None


class NosyLPD(LPD):
    """LPD whose estimates also count the reports of two holders each request did not ask."""

    slot_rounds_type = PermissiveRounds

    def step(self, batch, rng):
        slot = self.start_slot(batch, rng)
        while slot.request is not None:
            request = slot.request
            extra = np.setdiff1d(slot.holders.users, request.users)[:2]
            everyone = np.union1d(request.users, extra)
            slot.answer(everyone, self.simulate(request._replace(users=everyone), slot.holders, rng))
        return slot.release


def test_an_estimate_counting_unasked_holders_is_flagged():
    window = 4
    mechanism = NosyLPD(LocalParams(bins=5, epsilon=1.0, window=window))
    # users declare 3w eps: up to three reports a slot fit what they declared, so only the schedule sees the extras
    before, now = both_ledgers(mechanism, fixed_stream(60, 30, window, 12.0), window)
    assert before.violation_count == 0
    assert UNASKED_REPORT in kinds(now)


class ForgetfulLPD(LPD):
    """LPD that never records who reported: its pool offers the same users again within w."""

    def sample(self, pool, count, rng):
        chosen, rest = super().sample(pool, count, rng)
        self.last_report[chosen] = 0
        return chosen, rest


def test_a_population_method_asking_a_user_twice_within_w_is_flagged():
    window = 5
    mechanism = ForgetfulLPD(LocalParams(bins=5, epsilon=1.0, window=window))
    before, now = both_ledgers(mechanism, fixed_stream(60, 40, window, 5.0), window)
    assert before.violation_count == 0
    assert ASKED_TWICE in kinds(now)


class GreedySoundDPI(SoundDPI):
    """dpi-sound drawing at 8x the per-slot budget it publishes (and stating so in its evidence and charges)."""

    def units_per_draw(self, slot_units: int) -> int:
        return 8 * super().units_per_draw(slot_units)


def test_dpi_sound_drawing_at_eight_times_its_slot_budget_is_flagged():
    mechanism = GreedySoundDPI(DPIParams(bins=4, epsilon=1.0, pool_size=30, draws=5, rba="sequential", zeta=2.0))
    before, now = both_ledgers(mechanism, lifetime_stream(10, 60, 16.0), 1)
    assert before.violation_count == 0  # the lifetime budgets declared cover the 8x
    assert OFF_SCHEDULE in kinds(now) and LIFETIME_PREFIX in kinds(now)


# ------------------------------------------------------------------------------------------------ shipped methods pass
def _spec(name: str) -> StreamSpec:
    return StreamSpec(seed=11, users=40, bins=4, slots=240, windows=(3, 5, 8), epsilons=(1.0, 2.0), presence=0.8,
                      change=0.02, join_spread=30).for_mechanism(name)


def _resumed_run(mechanism, batches, max_window: int, cut: int):
    """Run to ``cut``, save mechanism and ledger, resume both from bytes, run on: the public-schedule ledger."""
    rng = insecure_seeded_randomness(7)
    ledger = PrivacyLedger(max_window, schedule=schedule_for(mechanism.name, mechanism.params))
    for batch in batches[:cut]:
        release = mechanism.step(batch, rng)
        ledger.record(release.slot, release.charges)
    mechanism = type(mechanism).from_bytes(mechanism.params, mechanism.to_bytes())
    ledger = PrivacyLedger.from_bytes(ledger.to_bytes())
    assert ledger.schedule is not None and ledger.schedule.method == mechanism.name
    for batch in batches[cut:]:
        release = mechanism.step(batch, rng)
        ledger.record(release.slot, release.charges)
    ledger.close()
    return ledger


@pytest.mark.parametrize("name", LOCAL)
def test_every_shipped_local_method_passes_with_requirement_changes_and_a_resume(name):
    spec = _spec(name)
    mechanism = make_mechanism(name, **spec.mechanism_kwargs(name))
    ledger = _resumed_run(mechanism, spec.batches(dynamic=False), max(spec.windows), cut=117)
    assert ledger.violation_count == 0, [str(v) for v in ledger.violations[:3]]


def test_plbu_passes_with_personal_requirements_and_a_resume():
    spec = _spec("plbu")
    mechanism = make_mechanism("plbu", bins=spec.bins)
    ledger = _resumed_run(mechanism, spec.batches(dynamic=False), max(spec.windows), cut=101)
    assert ledger.violation_count == 0, [str(v) for v in ledger.violations[:3]]


@pytest.mark.parametrize("name, options", [
    ("dpi", {}), ("dpi-sound", {}),
    ("dpi", {"rba": "sequential", "zeta": 2.0, "restart": "epoch", "queries": "acc,inst", "sampled_queries": 2}),
    ("dpi", {"rba": "sequential", "zeta": 2.0, "restart": "epoch", "queries": "acc,inst"}),
    ("dpi-sound", {"rba": "sequential", "zeta": 2.0, "restart": "epoch", "queries": "acc,inst"}),
])
def test_both_dpi_variants_pass_across_epochs_and_a_resume(name, options):
    mechanism = make_mechanism(name, bins=4, epsilon=1.0, pool_size=30, draws=5, **options)
    ledger = _resumed_run(mechanism, lifetime_stream(12, 200, 200.0), 1, cut=77)
    assert ledger.violation_count == 0, [str(v) for v in ledger.violations[:3]]


def test_dpi_least_charges_are_the_charges_where_the_schedule_knows_every_rate():
    """With every query sampled the paper's sound bound is rebuilt exactly; dpi-sound's always is."""
    for name, options in (("dpi", {"queries": "acc,inst", "sampled_queries": 2}), ("dpi-sound", {})):
        mechanism = make_mechanism(name, bins=4, epsilon=1.0, pool_size=30, draws=5, rba="sequential", zeta=2.0,
                                   restart="epoch", **options)
        schedule = schedule_for(name, mechanism.params)
        rng = insecure_seeded_randomness(2)
        for batch in lifetime_stream(6, 80, 500.0):
            release = mechanism.step(batch, rng)
            verdict = registered_verdict(schedule, release.slot, release.charges, lambda users: None)
            charged = release.charges.units
            if verdict.users.size:
                assert np.array_equal(verdict.users, release.charges.users)
                assert np.array_equal(verdict.least, charged), release.slot
            else:
                assert not charged.any()


# ------------------------------------------------------------------------------------------------ the protocol
def test_the_registry_serves_every_local_and_dpi_method_in_one_place():
    for name in [*LOCAL, "plbu", "dpi", "dpi-sound"]:
        assert name in SCHEDULES, name
        assert mechanism_class(name).name == name


def test_a_ledger_given_a_schedule_refuses_a_release_without_its_public_record():
    mechanism = LBU(LocalParams(bins=3, epsilon=1.0, window=2))
    ledger = PrivacyLedger(2, schedule=schedule_for("lbu", mechanism.params))
    release = mechanism.step(fixed_stream(4, 1, 2, 1.0, bins=3)[0], insecure_seeded_randomness(0))
    with pytest.raises(ValueError, match="without its public record"):
        ledger.record(1, dataclasses.replace(release.charges, public_record=None))


def test_findings_and_least_pack_into_one_column_and_back():
    registered = np.array([0, 2, 5, 9])
    verdict = SlotVerdict(np.array([2, 9]), np.array([7, 3 * U]),
                          (Finding(UNASKED_REPORT, np.array([9]), 0, 0), Finding(ASKED_TWICE, np.array([0, 9]), 0, 0)))
    least, findings = unpack_least(packed_least(verdict, registered))
    assert least.tolist() == [0, 7, 0, 3 * U]
    assert findings == [(0, ASKED_TWICE), (3, ASKED_TWICE), (3, UNASKED_REPORT)]
    with pytest.raises(ValueError, match="without being registered"):
        packed_least(SlotVerdict(np.array([4]), np.array([1])), registered)


def test_a_report_record_names_users_as_index_arrays():
    with pytest.raises(ValueError, match="user indices"):
        PublicRecord("lbu", {}, (ReportRecord("publication", "grr", 3, U, np.array([0.5]), np.array([0])),))


def test_a_ledger_resumed_from_bytes_remembers_who_was_asked():
    """The schedule's memory is saved with the ledger: a user asked just before the cut and again just after it is
    flagged by the resumed ledger (a ledger that starts at the cut has no such memory and cannot see it)."""
    window, cut = 5, 6
    mechanism = ForgetfulLPD(LocalParams(bins=5, epsilon=1.0, window=window))
    batches = fixed_stream(60, cut + 1, window, 5.0)
    rng = insecure_seeded_randomness(4)
    ledger = PrivacyLedger(window, max_violations_kept=10**6)
    for batch in batches[:cut]:
        release = mechanism.step(batch, rng)
        ledger.record(release.slot, release.charges)
    resumed = PrivacyLedger.from_bytes(ledger.to_bytes())
    before = resumed.violation_count
    release = mechanism.step(batches[cut], rng)
    resumed.record(release.slot, release.charges)
    repeated = [v for v in resumed.violations if v.kind == ASKED_TWICE and v.slot == cut + 1]
    assert resumed.violation_count > before and repeated
    fresh = schedule_for("lpd", mechanism.params)
    verdict = registered_verdict(fresh, release.slot, release.charges, lambda users: None)
    assert not [f for f in verdict.findings if f.kind == ASKED_TWICE]
