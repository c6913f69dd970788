"""The papers' requirement assignments (spec/pwsm.md §5.2)."""

import numpy as np
import pytest

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.scenarios import (BACKWARD_EPSILON, EPSILON_GRID, SCENARIOS, WINDOW_GRID, PaperSetup,
                                            redraw_every, two_types)


def test_fixed_requirements_come_from_the_grids_around_the_static_point():
    setup = PaperSetup(users=1000, epsilon=0.6, window=120)
    reqs = setup.fixed(np.random.default_rng(3))
    types = setup.user_types()
    assert set(np.unique(reqs.window)) <= {40, 80, 120}
    assert set(np.unique(reqs.epsilon_units)) <= {to_units(e) for e in (0.6, 0.8, 1.0)}
    for k in range(setup.types):  # one requirement per type
        assert np.unique(reqs.window[types == k]).size == 1
        assert np.unique(reqs.epsilon_units[types == k]).size == 1


def test_dynamic_declarations_redraw_within_each_types_candidates():
    setup = PaperSetup(users=500, epsilon=0.4, window=160)
    declarations = list(setup.dynamic_declarations(np.random.default_rng(7), 400))
    types = setup.user_types()
    forward_units = np.stack([d.forward_units for d in declarations])
    forward_window = np.stack([d.forward_window for d in declarations])
    assert all((d.backward_window == 1).all() and (d.backward_units == to_units(BACKWARD_EPSILON)).all()
               for d in declarations)
    for k in range(setup.types):
        units_k, windows_k = forward_units[:, types == k], forward_window[:, types == k]
        assert (units_k == units_k[:, :1]).all() and (windows_k == windows_k[:, :1]).all()  # a type moves as one
        floor_units, ceiling_window = units_k.min(), windows_k.max()
        # the type's E_k is one of the grid values >= E; its draws are {E_k..1.0}: all of them show up in 400 slots
        expected_units = {to_units(e) for e in EPSILON_GRID if to_units(e) >= floor_units}
        expected_windows = {w for w in WINDOW_GRID if w <= ceiling_window}
        assert set(np.unique(units_k)) == expected_units
        assert set(np.unique(windows_k)) == expected_windows
        assert floor_units >= to_units(0.4) and ceiling_window <= 160


def test_two_types_splits_by_ratio():
    reqs = two_types(10, 0.3, (120, 1.0), (120, 0.6))
    assert list(reqs.epsilon_units) == [to_units(1.0)] * 3 + [to_units(0.6)] * 7
    with pytest.raises(ValueError, match="ratio"):
        two_types(10, 1.5, (120, 1.0), (120, 0.6))


def _forward(declarations):
    return (np.stack([d.forward_units for d in declarations]), np.stack([d.forward_window for d in declarations]))


def test_redrawn_is_the_default_and_redraws_every_slot():
    setup = PaperSetup(users=200, epsilon=0.4, window=160)
    default = list(setup.dynamic_declarations(np.random.default_rng(5), 50))
    redrawn = list(setup.dynamic_declarations(np.random.default_rng(5), 50, every=redraw_every("redrawn", 7)))
    for a, b in zip(_forward(default), _forward(redrawn)):
        assert np.array_equal(a, b)
    assert len({tuple(row) for row in _forward(default)[0]}) > 40          # a new draw (almost) every slot


def test_held_keeps_the_first_draw_and_drifting_changes_only_every_k_slots():
    setup = PaperSetup(users=200, epsilon=0.2, window=200)
    redrawn_units, redrawn_windows = _forward(list(setup.dynamic_declarations(np.random.default_rng(9), 60)))
    held_units, held_windows = _forward(list(setup.dynamic_declarations(np.random.default_rng(9), 60, every=None)))
    assert (held_units == held_units[0]).all() and (held_windows == held_windows[0]).all()
    assert np.array_equal(held_units[0], redrawn_units[0])                  # the same first draw
    drift_units, drift_windows = _forward(list(setup.dynamic_declarations(np.random.default_rng(9), 60, every=20)))
    for start in (0, 20, 40):
        block = slice(start, start + 20)
        assert (drift_units[block] == drift_units[start]).all() and (drift_windows[block] == drift_windows[start]).all()
    # with 10 types and 5 x 5 candidates the three blocks' draws differ (probability of equality below 1e-13)
    assert len({drift_units[s].tobytes() + drift_windows[s].tobytes() for s in (0, 20, 40)}) == 3


def test_scenario_names_and_periods():
    assert [redraw_every(s, 25) for s in SCENARIOS] == [1, None, 25]
    with pytest.raises(ValueError, match="unknown requirement scenario"):
        redraw_every("weekly", 7)
    with pytest.raises(ValueError, match="drift_every"):
        redraw_every("drifting", 0)
    with pytest.raises(ValueError, match="every"):
        next(PaperSetup(users=10).dynamic_declarations(np.random.default_rng(0), 5, every=0))
