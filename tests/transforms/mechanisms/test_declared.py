"""What users declared, kept by the ledgers under the public rules (transforms/mechanisms/declared.py)."""

from __future__ import annotations

import io

import numpy as np

from transforms.mechanisms import (DynamicRequirements, FixedRequirements, LifetimeRequirements, PrivacyLedger,
                                   ReporterCharges, SlotBatch)
from transforms.mechanisms.declared import DeclaredRequirements, rows_differ
from transforms.mechanisms.evidence import no_statistics


def fixed(*pairs):
    return FixedRequirements.of([w for w, _ in pairs], [e for _, e in pairs])


def in_force(register, users):
    return [tuple(int(x) for x in row) for row in register.matrix_of(np.array(users))]


U = 10**12


def test_a_fixed_change_takes_effect_w_new_minus_1_slots_later_and_declaring_the_old_one_cancels_it():
    register = DeclaredRequirements(FixedRequirements)
    register.declare(1, [0, 1], fixed((2, 1.0), (2, 1.0)), None)
    register.declare(3, [0, 1], fixed((4, 0.5), (4, 0.5)), None)  # in force from slot 3 + 4 - 1 = 6
    register.declare(4, [1], fixed((2, 1.0)), None)                # user 1 cancels
    register.declare(5, [0], fixed((4, 0.5)), None)                # repeating the pending change: still slot 6
    assert in_force(register, [0, 1]) == [(2, U), (2, U)]
    register.declare(6, [], None, None)
    assert in_force(register, [0, 1]) == [(4, U // 2), (2, U)]


def test_a_one_slot_window_takes_effect_at_once_and_users_never_declared_allow_nothing():
    register = DeclaredRequirements(FixedRequirements)
    register.declare(1, [0], fixed((3, 1.0)), None)
    register.declare(2, [0], fixed((1, 0.2)), None)
    assert in_force(register, [0, 7]) == [(1, U // 5), (1, 0)]


def test_new_users_without_a_declaration_get_the_default_and_known_ones_keep_theirs():
    register = DeclaredRequirements(FixedRequirements)
    register.declare(1, [0], fixed((3, 1.0)), None)
    register.declare(2, [0, 1], None, fixed((5, 2.0)))
    assert in_force(register, [0, 1]) == [(3, U), (5, 2 * U)]


def test_dynamic_declarations_hold_until_the_next_and_the_version_moves_only_on_change():
    register = DeclaredRequirements(DynamicRequirements)
    first = DynamicRequirements.of([2], [1.0], [3], [0.5])
    register.declare(1, [0], first, None)
    version = register.version
    register.declare(2, [0], first, None)   # the same declaration again: nothing in force changes
    register.declare(3, [], None, None)
    assert register.version == version
    register.declare(4, [0], DynamicRequirements.of([1], [2.0], [1], [2.0]), None)
    assert register.version > version and in_force(register, [0]) == [(1, 2 * U, 1, 2 * U)]


def test_the_register_round_trips_through_bytes():
    register = DeclaredRequirements(FixedRequirements)
    register.declare(1, [0, 3], fixed((2, 1.0), (5, 0.5)), None)
    register.declare(2, [0], fixed((4, 2.0)), None)
    copy = DeclaredRequirements.from_bytes(register.to_bytes())
    copy.declare(5, [], None, None)
    register.declare(5, [], None, None)
    assert in_force(copy, [0, 1, 3]) == in_force(register, [0, 1, 3]) == [(4, 2 * U), (1, 0), (5, U // 2)]


def test_a_lifetime_budget_holds_from_its_slot_until_the_next_and_round_trips():
    register = DeclaredRequirements(LifetimeRequirements)
    register.declare(1, [0, 2], LifetimeRequirements.of([1.0, 2.0]), None)
    register.declare(3, [0], LifetimeRequirements.of([4.0]), LifetimeRequirements.of([9.0]))
    register.declare(4, [5], None, LifetimeRequirements.of([3.0]))  # a new user without a declaration: the default
    copy = DeclaredRequirements.from_bytes(register.to_bytes())
    assert in_force(copy, [0, 1, 2, 5]) == in_force(register, [0, 1, 2, 5]) == [(4 * U,), (0,), (2 * U,), (3 * U,)]


def _rewritten(payload: bytes, drop: str, **add) -> bytes:
    """``payload`` as written before lifetime budgets: without key ``drop``, with ``add``."""
    with np.load(io.BytesIO(payload), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files if k != drop}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, **{k: np.array(v) for k, v in add.items()})
    return buffer.getvalue()


def test_registers_and_ledgers_saved_before_lifetime_budgets_still_load():
    """They stored a ``dynamic`` flag where they now store the kind's name; ledgers had no origins (all 0)."""
    register = DeclaredRequirements(DynamicRequirements)
    register.declare(1, [0], DynamicRequirements.of([2], [1.0], [3], [0.5]), None)
    old = DeclaredRequirements.from_bytes(_rewritten(register.to_bytes(), "kind", dynamic=True))
    assert old.kind is DynamicRequirements and in_force(old, [0]) == [(2, U, 3, U // 2)]
    ledger, users = PrivacyLedger(3), np.arange(2)
    for slot in (1, 2):
        ledger.record(slot, ReporterCharges(users, users[:1], {"report": U // 4}, DynamicRequirements,
                                            no_statistics(users), SlotBatch.of(users, [-1, -1], DynamicRequirements.of(
                                                [2, 2], [1.0, 1.0], [3, 3], [0.5, 0.5])) if slot == 1 else
                                            SlotBatch.of([], [], None)))
    payload = _rewritten(_rewritten(ledger.to_bytes(), "declared.kind", **{"declared.dynamic": True}), "origins")
    loaded = PrivacyLedger.from_bytes(payload)
    assert loaded._declared.kind is DynamicRequirements
    assert [loaded.window_sum(u, 1, 2) for u in users] == [U // 2, 0]


def test_rows_differ_is_any_over_each_row_for_every_width_and_layout():
    rng = np.random.default_rng(3)
    for width in (1, 2, 3, 4, 5, 8):
        a, b = rng.integers(0, 2, (50, width)), rng.integers(0, 2, (50, width))
        assert np.array_equal(rows_differ(a, b), (a != b).any(axis=1))
        assert np.array_equal(rows_differ(a[::2], b[::2]), (a[::2] != b[::2]).any(axis=1))
    assert rows_differ(np.zeros((0, 4)), np.zeros((0, 4))).shape == (0,)


def test_the_usual_slot_of_users_0_to_n_minus_1_gives_what_any_other_order_does():
    """Users 0..n-1 who all declared before are compared in place (a fast path); the same declarations given
    in another order, through the general path, leave the same requirements and move the version alike."""
    rng = np.random.default_rng(4)
    n, order = 40, rng.permutation(40)
    fast, general = DeclaredRequirements(DynamicRequirements), DeclaredRequirements(DynamicRequirements)
    draws = [[rng.integers(1, 4, n), rng.integers(1, 3, n) * 0.5, rng.integers(1, 4, n), rng.choice([0.5, 1.0], n)]
             for _ in range(4)]
    draws.insert(2, draws[1])  # slot 3 declares what slot 2 did: nothing changes, the version stays
    for slot, columns in enumerate(draws, start=1):
        before = fast.version, general.version
        fast.declare(slot, np.arange(n), DynamicRequirements.of(*columns), None)
        general.declare(slot, order, DynamicRequirements.of(*(c[order] for c in columns)), None)
        assert np.array_equal(fast.matrix_of(np.arange(n)), general.matrix_of(np.arange(n)))
        assert (fast.version > before[0]) == (general.version > before[1]) == (slot != 3)
