"""The papers' requirement assignments (spec/pwsm.md §5.2)."""

import numpy as np
import pytest

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.scenarios import BACKWARD_EPSILON, EPSILON_GRID, WINDOW_GRID, PaperSetup, two_types


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
