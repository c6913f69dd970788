"""The per-user Beam ledger (``check_windows`` on the release stage's charge rows) agrees with the core ledger.

Both ledgers are fed the same generated charges (cohort, reporter and sparse
shapes under fixed, dynamic and lifetime requirements): the core one slot by
slot, the per-user one as the stream engine sends them (one row per
registered user and slot: the least charge from the evidence, each named
part, the declared requirement in force), in chunks of random length so its
tail, and the lifetime spend the tail carries, cross chunk boundaries.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.transforms.mechanisms.charge_streams import KINDS, SHAPES, ChargeStream, U
from transforms.ledger import charge_chunk, check_windows, empty_tail
from transforms.mechanisms import DISSIMILARITY, PUBLICATION, PrivacyLedger
from transforms.mechanisms.declared import DeclaredRequirements, kind_name
from transforms.mechanisms.charges import least_charges_of_registered

PARTS = (DISSIMILARITY, PUBLICATION, "report")  # the generated streams name one of these sets at each slot


def stage_rows(stream: ChargeStream, slots: int, ledger: PrivacyLedger) -> dict[int, np.ndarray]:
    """Each user's charge rows as the stream engine builds them; ``ledger`` records the same charges."""
    declared = DeclaredRequirements(stream.kind)
    rows: dict[int, list] = {}
    for slot in range(1, slots + 1):
        charges = stream.next()
        ledger.record(slot, charges)
        batch = charges.declarations
        declared.declare(slot, batch.users, batch.requirements, charges.default_requirement)
        users = charges.users
        table = np.column_stack([np.full(users.size, slot), least_charges_of_registered(charges),
                                 *(charges.part_units(p) for p in PARTS), declared.matrix_of(users)])
        for user, row in zip(users.tolist(), table):
            rows.setdefault(user, []).append(row)
    return {user: np.array(r, np.int64) for user, r in rows.items()}


def per_user_verdicts(rows: dict[int, np.ndarray], kind: type, max_window: int, gen) -> tuple[list, float]:
    """Every user's rows through ``check_windows`` in random chunks; the violations and the worst usage."""
    found, worst = [], 0.0
    for user, table in sorted(rows.items()):
        tail = empty_tail()
        cuts = np.sort(gen.choice(np.arange(1, len(table)), min(len(table) - 1, int(gen.integers(0, 4))),
                                  replace=False)) if len(table) > 1 else []
        pieces = np.split(table, cuts)
        for i, piece in enumerate(pieces):
            chunk = charge_chunk(piece, kind_name(kind), PARTS, i == len(pieces) - 1, False)
            tail, ratio, violations = check_windows(tail, chunk, max_window)
            worst = max(worst, ratio)
            found += [(user, v["slot"], v["kind"], v["window_units"], v["bound_units"]) for v in violations]
    return sorted(found), worst


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**9), shape=st.sampled_from(SHAPES), kind=st.sampled_from(KINDS),
       slots=st.integers(1, 25), max_window=st.integers(1, 6))
def test_the_per_user_ledger_agrees_with_the_core_ledger(seed, shape, kind, slots, max_window):
    core = PrivacyLedger(max_window, max_violations_kept=10**6)
    rows = stage_rows(ChargeStream(seed, shape, kind, max_window), slots, core)
    core.close()
    found, worst = per_user_verdicts(rows, kind, max_window, np.random.default_rng(seed))
    assert found == sorted((v.user, v.slot, v.kind, v.window_units, v.bound_units) for v in core.violations)
    assert len(found) == core.violation_count
    assert worst == core.max_usage_ratio


def lifetime_chunk(slots, units, budget: int, final: bool = False) -> dict:
    slots = np.asarray(slots, np.int64)
    table = np.column_stack([slots, np.zeros(slots.size, np.int64), np.asarray(units, np.int64),
                             np.full(slots.size, budget)])
    return charge_chunk(table, "lifetime", ("report",), final, False)


def test_the_tail_carries_the_lifetime_spend_of_the_slots_it_drops():
    """Ten slots of 0.3 ε against 3 ε, one chunk per slot with a one-slot window depth: the tail drops the old
    slots but keeps their sum, so the prefix reaches exactly 3 ε (no violation) and one unit more is caught at
    slot 10, the first slot over; a tail that forgot the dropped slots would catch nothing."""
    for extra, expected in ((0, []), (1, [(10, 3 * U + 1)]), (-1, [])):
        tail, found = empty_tail(), []
        for slot in range(1, 11):
            units = 3 * U // 10 + (extra if slot == 4 else 0)
            tail, _, violations = check_windows(tail, lifetime_chunk([slot], [units], 3 * U), 1)
            found += [(v["slot"], v["window_units"]) for v in violations if v["kind"] == "lifetime"]
            assert tail["slots"].size == 1 and tail["before"] == sum(
                3 * U // 10 + (extra if s == 4 else 0) for s in range(1, slot))
        assert found == expected
    forgetful = {**check_windows(empty_tail(), lifetime_chunk(range(1, 10), [3 * U // 10 + 1] * 9, 3 * U), 1)[0],
                 "before": 0}
    assert check_windows(forgetful, lifetime_chunk([10], [3 * U // 10], 3 * U), 1)[2] == []  # the power check


def test_a_tail_from_before_lifetime_budgets_reads_as_nothing_dropped():
    """Tails saved before ``before`` existed (windowed requirements only) continue as if nothing was dropped."""
    old = {"slots": np.zeros(0, np.int64), "spent": np.zeros(0, np.int64), "dc": np.zeros(0, np.int64), "open": []}
    tail, _, violations = check_windows(old, lifetime_chunk([1, 2], [U, U], 2 * U), 1)
    assert violations == [] and tail["before"] == U
