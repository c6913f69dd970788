"""The numeric family's public schedule (``transforms.mechanisms.public_schedule.numeric*``) in the core ledger.

Every test here fails on the code before the schedule existed: the module did not exist, and the core ledger read
each numeric report's least charge from the mechanism's own evidence (a half charge was caught only because the
evidence told the truth; a mechanism reporting at ``ε/w`` with deviation memory ``w`` passed with 0 violations).
"""

from __future__ import annotations

import ast
import pathlib
import random
from collections import Counter
from functools import cached_property

import numpy as np
import pytest

from transforms.mechanisms import FixedRequirements, make_mechanism
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.evidence import Evidence
from transforms.mechanisms.ldp.mean import PiecewiseMechanism
from transforms.mechanisms.ledger import PrivacyLedger
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.numeric.perturbation import PerturbationParams, perturb_streams, worst_window_units
from transforms.mechanisms.numeric.square_wave import SquareWave
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS, APPStream, CAPPStream, NumericParams
from transforms.mechanisms.public_schedule import PublicRecord, ReportRecord, SlotFacts
from transforms.mechanisms.public_schedule import MEMORY_WINDOW
from transforms.mechanisms.public_schedule.numeric import NumericSchedule
from transforms.mechanisms.public_schedule.numeric_laws import half_band, law_pair, law_units
from transforms.mechanisms.public_schedule.numeric_plan import NumericPlan

USERS, SLOTS, WINDOW = 10, 24, 4
SCHEDULE_DIR = pathlib.Path(__file__).resolve().parents[2] / "transforms" / "mechanisms" / "public_schedule"


def test_the_numeric_schedule_imports_no_mechanism_module():
    """The schedule and its laws import nothing from the mechanisms they check (``numeric``, ``ldp``, ``dpi``)."""
    for name in ("numeric.py", "numeric_plan.py", "numeric_laws.py"):
        tree = ast.parse((SCHEDULE_DIR / name).read_text())
        imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        assert not [m for m in imported if m and m.startswith(("transforms.mechanisms.numeric",
                                                                "transforms.mechanisms.ldp",
                                                                "transforms.mechanisms.dpi"))], name


def test_the_laws_rebuilt_from_public_facts_are_the_mechanisms_integers():
    """B, P, Q and the realised units of the square wave and PM, rebuilt by another route (a float guess verified by
    exact comparisons), equal the mechanism's on the evaluation grid and at random budgets."""
    rng = random.Random(5)
    budgets = [10**12 // 10, 10**12 // 60, 5 * 10**11, 10**12, 3 * 10**12, 20 * 10**12, 2 * 10**12 // 21]
    budgets += [rng.randrange(10**9, 20 * 10**12) for _ in range(25)]
    checked = 0
    for grid_bits in (16, 8, 12):
        for units in budgets:
            for cls, law in ((SquareWave, "sw"), (PiecewiseMechanism, "pm")):
                wave = cls.create(units, grid_bits)
                assert (half_band(law, units, grid_bits), *law_pair(law, units, grid_bits)) == \
                    (wave.half_band, wave.keep, wave.other), (law, units, grid_bits)
                assert law_units(law, units, grid_bits) == wave.realised_units
                checked += 1
    assert checked == 3 * len(budgets) * 2


def _run(mechanism, gaps: bool, declared_window: int = WINDOW, seed: int = 3) -> PrivacyLedger:
    """``mechanism`` through Engine + PrivacyLedger: USERS users for SLOTS slots, each holding a value at a slot with
    probability 0.6 when ``gaps`` (every user at slot 1, where all declare ``(declared_window, ε)``)."""
    ledger = PrivacyLedger(200)
    engine = Engine(mechanism, insecure_seeded_randomness(seed), ledger)
    rng = np.random.default_rng(seed)
    epsilon = float(mechanism.params.epsilon)
    for slot in range(SLOTS):
        users = np.flatnonzero(rng.random(USERS) < 0.6) if gaps and slot else np.arange(USERS)
        declared = FixedRequirements.of([declared_window] * USERS, [epsilon] * USERS) if slot == 0 else None
        engine.step(SlotBatch.of(users.astype(np.int64), rng.random(users.size), declared))
    engine.close()
    return ledger


@pytest.mark.parametrize("name, options", [(name, {}) for name in NUMERIC_STREAMS] + [
    (name, {"memory": 2, "reset": 3}) for name in ("app", "capp", "app-s", "capp-s")])
def test_every_shipped_numeric_method_passes_its_public_schedule(name, options):
    """Each registered numeric method (defaults; APP/CAPP/APP-S/CAPP-S also with memory 2 and a reset every 3
    reports), with and without gaps in the users' values: the ledger derives every report's least charge from the
    public schedule and checks the memory-aware windows; nothing is flagged and no window exceeds its budget."""
    for gaps in (False, True):
        mechanism = make_mechanism(name, bins=1, epsilon=1.0, window=WINDOW, low=0.0, high=1.0, **options)
        ledger = _run(mechanism, gaps)
        assert ledger.violation_count == 0, ledger.violations[:3]
        assert 0 < ledger.max_usage_ratio <= 1.0
        assert isinstance(ledger.schedule, NumericSchedule)


class PaperBudgetAPP(APPStream):
    """APP at the paper's ``ε/w`` with deviation memory ``w``: a public extension (the client built by the
    evaluation's ``PerturbationParams`` with ``budget="paper"``), not w-event private on a stream."""

    @cached_property
    def client(self):
        p = self.params
        return PerturbationParams(p.epsilon, p.window, "app", budget="paper", not_w_event_private=True,
                                  grid_bits=p.grid_bits).client


def test_app_at_eps_over_w_with_deviation_memory_w_is_flagged():
    """Its reports cost ``ε/w`` each and every one is charged in full, so the plain ``w``-slot windows fit ``ε``
    (what the ledger saw before: 0 violations); a change within ``w`` slots moves ``2w`` reports (memory ``w``),
    ``2ε``: flagged as memory_window (and off_schedule: the schedule names ``ε/(2w)``)."""
    ledger = _run(PaperBudgetAPP(NumericParams(epsilon=1.0, window=WINDOW, low=0.0, high=1.0)), gaps=False)
    kinds = Counter(v.kind for v in ledger.violations)
    assert kinds[MEMORY_WINDOW] > 0 and kinds["off_schedule"] > 0
    assert "undercharged" not in kinds and "fixed" not in kinds  # charged in full; plain windows within ε


class HalfPrice:
    """A randomizer that reports its law's keep/other but says it costs half (what a buggy client would charge)."""

    def __init__(self, wave):
        self.wave = wave

    def __getattr__(self, name):
        return getattr(self.wave, name)

    @property
    def realised_units(self) -> int:
        return self.wave.realised_units // 2


class HalfChargedCAPP(CAPPStream):
    """CAPP whose reports are charged half of what their square wave costs (through ``run_users``, public)."""

    def run_users(self, users, x, rng):
        reporters, released, reports = super().run_users(users, x, rng)
        return reporters, released, [(part, HalfPrice(wave), mask) for part, wave, mask in reports]


def test_a_capp_charging_half_of_its_square_wave_is_flagged_undercharged():
    ledger = _run(HalfChargedCAPP(NumericParams(epsilon=1.0, window=WINDOW, low=0.0, high=1.0)), gaps=True)
    kinds = Counter(v.kind for v in ledger.violations)
    assert kinds["undercharged"] > 0
    first = next(v for v in ledger.violations if v.kind == "undercharged")
    assert first.window_units == 2 * first.bound_units or first.window_units == 2 * first.bound_units + 1


@pytest.mark.parametrize("method, budget, memory", [("app", "paper", 3), ("app", "strict", 2), ("ipp", "strict", None),
                                                    ("capp", "strict", None), ("sw", "strict", None)])
def test_the_memory_aware_window_is_the_exact_worst_w_slot_change(method, budget, memory):
    """On gapless streams, the largest sum of charges over the windows ``w + reach(k)`` ending at each report is
    exactly the evaluation's worst change of ``w`` consecutive slots (``perturbation.worst_window_units``, from
    each report's first dependency): the reach is the memory, no more, no less."""
    params = PerturbationParams(1.0, WINDOW, method, memory=memory, budget=budget, not_w_event_private=True)
    run = perturb_streams(params, np.random.default_rng(2).random((3, 15)), insecure_seeded_randomness(1))
    expected = worst_window_units(run.charges, run.first_dependency, WINDOW)
    name = {"sw": "sw-direct"}.get(method, method)
    plan = NumericPlan(name, to_units(1.0), WINDOW, memory=memory)
    slots = np.arange(1, 16)
    reach, _ = plan.reach(slots)
    for user in range(3):
        sums = [run.charges[user][(slots > slot - WINDOW - r) & (slots <= slot)].sum()
                for slot, r in zip(slots, reach)]
        assert max(sums) == expected[user]


def test_the_reach_follows_the_users_reports_not_the_slots():
    """Memory counts reports: with gaps the window reaches back to the slot of the ``h``-th earlier report; a reset
    every ``R`` reports cuts it; the sampling methods add their segment."""
    plan = NumericPlan("app", to_units(1.0), 3, memory=2)
    reach, history = plan.reach([1, 5, 6, 20])
    assert reach.tolist() == [0, 4, 5, 15]  # 1 -> itself; 5 -> 1; 6 -> 1; 20 -> 5
    more, _ = plan.reach([21], history)
    assert more.tolist() == [15]  # 21 -> 6 (two reports back), across the chunk boundary
    reset = NumericPlan("app", to_units(1.0), 3, memory=2, reset=2)
    assert reset.reach([1, 5, 6, 20])[0].tolist() == [0, 4, 0, 14]  # reports 2, 3 restart at 2
    sampled = NumericPlan("app-s", to_units(1.0), 4, segment=2, memory=1)
    assert sampled.reach([1, 3, 5])[0].tolist() == [1, 3, 3]  # (h + 1)L - 1 = 3


def _facts(schedule_record: PublicRecord, slot: int, users: np.ndarray, declared: np.ndarray) -> SlotFacts:
    wave = SquareWave.create(schedule_record.reports[0].epsilon_units)
    from transforms.mechanisms.evidence import CERTAIN, LocalReport

    evidence = Evidence(np.zeros(users.size, np.int64), (LocalReport("publication:sw", wave.keep, wave.other,
                                                                     np.array([CERTAIN], np.uint64)),))
    return SlotFacts(slot, schedule_record, users, lambda asked: declared[asked], evidence)


def test_a_window_over_budget_only_through_the_memory_is_flagged_memory_window():
    """On schedule (APP, ``ε/(w + h)``, w = h = 4, every report at the schedule's budget): a user who declared
    ``(6, ε)`` has plain 6-slot windows of ``6ε/8`` but a change within 6 slots moves 10 reports, ``10ε/8``:
    memory_window from the 7th report on, nothing else; a user who declared ``(4, ε)`` never."""
    epsilon = to_units(1.0)
    schedule = NumericSchedule("app", {"epsilon": 1.0, "window": 4})
    units = epsilon // 8
    users = np.array([0, 1], np.int64)
    declared = np.array([[6, epsilon], [4, epsilon]], np.int64)
    flagged = []
    for slot in range(1, 13):
        record = PublicRecord("app", {"epsilon": 1.0, "window": 4},
                              (ReportRecord("publication", "sw", 1, units, users, users),))
        verdict = schedule.verdict(_facts(record, slot, users, declared))
        assert verdict.least.tolist() == [SquareWave.create(units).realised_units] * 2
        flagged += [(slot, finding.kind, finding.users.tolist()) for finding in verdict.findings]
    assert flagged == [(slot, MEMORY_WINDOW, [0]) for slot in range(9, 13)]  # 9+ reports in 6 + 4 slots > 8


def test_the_ledger_resumes_the_numeric_schedule_exactly():
    """The schedule's per-user rings are saved with the ledger: a ledger saved at slot 10 and restored checks the
    rest of an APP-at-ε/w run exactly as the uninterrupted one (the memory windows across the restart included)."""
    def stream(ledger_at):
        mechanism = PaperBudgetAPP(NumericParams(epsilon=1.0, window=WINDOW, low=0.0, high=1.0))
        ledger = PrivacyLedger(200)
        engine = Engine(mechanism, insecure_seeded_randomness(4), ledger)
        rng = np.random.default_rng(4)
        for slot in range(SLOTS):
            users = np.flatnonzero(rng.random(USERS) < 0.7) if slot else np.arange(USERS)
            declared = FixedRequirements.of([WINDOW] * USERS, [1.0] * USERS) if slot == 0 else None
            if slot == ledger_at:
                engine.ledger = PrivacyLedger.from_bytes(engine.ledger.to_bytes())
            engine.step(SlotBatch.of(users.astype(np.int64), rng.random(users.size), declared))
        return engine.ledger

    whole, resumed = stream(-1), stream(10)
    assert whole.violation_count == resumed.violation_count > 0
    assert [(v.user, v.slot, v.kind) for v in whole.violations] == [(v.user, v.slot, v.kind) for v in resumed.violations]


@pytest.mark.parametrize("method, options", [("app", {"memory": 3}), ("app-s", {"memory": 2}), ("ipp", {}),
                                             ("capp", {"memory": 2, "reset": 4})])
def test_the_schedules_memory_windows_equal_a_brute_force_over_each_users_whole_history(method, options):
    """Random reporters per slot (gaps), windows declared growing mid-stream (the rings re-seated): a user is flagged
    at a report exactly when the least charges of their reports in slots ``fvs(d(k)) - w + 1 .. slot(k)``, summed
    from their whole history, exceed ``E`` (E chosen so that some windows do)."""
    rng = np.random.default_rng(9)
    params = {"epsilon": 1.0, "window": 3, **options}
    segment = 2 if method == "app-s" else None
    schedule = NumericSchedule(method, params)
    plan = NumericPlan.of(method, params, segment)
    units = plan.report_units
    cost = plan.cost(units)
    users = np.arange(6, dtype=np.int64)
    history: dict = {int(u): [] for u in users}  # user -> [(slot, least)]
    flagged_by_schedule, flagged_by_brute = [], []
    for slot in range(1, 41):
        if segment and slot % segment:
            continue
        senders = np.flatnonzero(rng.random(users.size) < 0.7).astype(np.int64)
        windows = np.where(users < 3, 2, 5) if slot < 20 else np.where(users < 3, 4, 6)
        declared = np.column_stack([windows, np.full(users.size, 4 * cost)]).astype(np.int64)
        record = PublicRecord(method, params, (ReportRecord("publication", "sw", 1, units, senders, senders),),
                              figures={"segment": segment} if segment else {})
        verdict = schedule.verdict(_facts(record, slot, senders, declared))
        flagged_by_schedule += [(slot, int(u)) for f in verdict.findings if f.kind == MEMORY_WINDOW for u in f.users]
        for u in senders.tolist():
            history[u].append((slot, cost))
            slots = np.array([s for s, _ in history[u]])
            reach = plan.reach(slots)[0][-1]
            window = int(declared[u, 0]) + int(reach)
            spent = sum(c for s, c in history[u] if s > slot - window)
            if spent > declared[u, 1]:
                flagged_by_brute.append((slot, u))
    assert flagged_by_schedule == flagged_by_brute and flagged_by_brute


def test_off_schedule_budgets_are_named_for_every_method():
    """The per-user ledger's structural check: a report at any budget but the schedule's is off schedule (BA-SW: a
    publication at k·e1 with 1 <= k <= w and a dissimilarity at e1 are on it)."""
    app = NumericPlan("app", to_units(1.0), 4)
    assert app.off_schedule([app.report_units, 2 * app.report_units, app.report_units], [0, 0, 5]).tolist() == \
        [False, True, True]
    ba = NumericPlan("ba-sw", to_units(1.0), 4)
    e1 = ba.report_units
    assert ba.off_schedule([e1, 4 * e1, 5 * e1, e1 + 1, 0], [0, e1, e1, e1, 2 * e1]).tolist() == \
        [False, False, True, True, True]
