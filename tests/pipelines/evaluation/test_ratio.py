"""The ratio experiments' OBS switch points (pipelines/evaluation/ratio.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.evaluation import ratio
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.obs import optimal_budget


@pytest.mark.parametrize("obs", ratio.OBSES)
def test_the_switch_point_is_where_obs_first_prefers_the_larger_budget(obs):
    users, first, second = 2_000, (120, 1.0), (120, 0.6)
    o = ratio.switch_point(users, first, second, obs)
    budgets = np.array([ratio.type_budgets(obs, *first), ratio.type_budgets(obs, *second)])
    assert budgets[0] > budgets[1]

    def chosen(fraction):
        split = int(round(users * fraction))
        return optimal_budget(budgets, np.array([split, users - split])).epsilon_units
    if o is None:
        assert all(chosen(f) == budgets[1] for f in ratio.FRACTIONS)
    else:
        assert chosen(o) == budgets[0]
        assert all(chosen(f) == budgets[1] for f in ratio.FRACTIONS if f < o)


def test_the_switch_point_moves_with_the_number_of_users_and_ties_never_switch():
    points = [ratio.switch_point(n, (120, 1.0), (120, 0.6), "dc") for n in (500, 2_000, 10_000)]
    assert len(set(points)) > 1
    # the w-ratio experiment: PBD's first publication is E/4 whatever the window, so nothing to switch to
    assert ratio.switch_point(2_000, (40, 0.6), (120, 0.6), "pbd") is None
    assert ratio.type_budgets("dc", 40, 0.6) == to_units(0.6) // 80


def test_the_dissimilarity_sample_misses_low_budget_users_only_after_the_switch():
    """The issue's explanation of the ratio experiment, in numbers: below the switch nobody is left out; at
    o = 0.9 with N = 10,000 the 1,000 users at E = 0.6 are kept with p = (e^0.0025 - 1)/(e^(1/240) - 1), about
    0.6, so about 400 are missed, more than the dissimilarity's noise scale 240 = 1/θ."""
    first, second = (120, 1.0), (120, 0.6)
    assert ratio.switch_point(10_000, first, second, "dc") == 0.89
    assert ratio.dc_sample_shortfall(10_000, first, second, 0.7) == (0.0, pytest.approx(400.0))
    missed, scale = ratio.dc_sample_shortfall(10_000, first, second, 0.9)
    p = np.expm1(0.0025) / np.expm1(1 / 240)
    assert missed == pytest.approx(1_000 * (1 - p), rel=1e-3) and scale == pytest.approx(240.0)
    assert missed > scale
