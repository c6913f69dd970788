"""The registry (transforms/mechanisms/registry.py): mechanisms built from the requirements they must honour."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.mechanisms import (MECHANISMS, DynamicRequirements, Estimate, Family, FixedRequirements, SlotBatch,
                                   mechanism_for_requirements)
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.requirements import LifetimeRequirements

FIXED = FixedRequirements.of([3, 8, 5], [1.0, 0.5, 2.0])
DYNAMIC = DynamicRequirements.of([2, 9, 4], [1.0, 3.0, 2.0], [6, 3, 4], [0.5, 1.0, 2.0])
LIFETIME = LifetimeRequirements.of([1.0, 0.5, 2.0])


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_a_mechanism_built_from_requirements_accepts_every_one_of_them(name):
    requirements = {Family.DYNAMIC: DYNAMIC, Family.LIFETIME: LIFETIME}.get(Family.of(name), FIXED)
    if MECHANISMS[name].estimates is Estimate.MEAN:  # one mean of real values in a declared interval
        mechanism = mechanism_for_requirements(name, requirements, bins=1, low=0.0, high=1.0)
        batch = SlotBatch.of([0, 1, 2], [0.0, 1.0, 0.25], requirements)
    else:
        mechanism = mechanism_for_requirements(name, requirements, bins=2)
        batch = SlotBatch.of([0, 1, 2], [0, 1, 0], requirements)
    mechanism.step(batch, insecure_seeded_randomness(0))
    params = mechanism.params
    if Family.of(name) is Family.HOMOGENEOUS:
        assert (params.epsilon, params.window) == (0.5, 8)  # (min E_i, max w_i)
    if Family.of(name) is Family.DYNAMIC:
        assert params.max_window == 9  # the longest backward or forward window
    if Family.of(name) is Family.LIFETIME:
        assert params.epsilon == 0.5  # the smallest lifetime budget


def test_a_lifetime_budget_builds_no_windowed_mechanism():
    with pytest.raises(ValueError, match="lifetime"):
        mechanism_for_requirements("bd", LifetimeRequirements.of(np.array([1.0])), bins=2)


def test_sw_is_an_alias_of_sw_direct_not_a_second_entry():
    from transforms.mechanisms.registry import ALIASES, mechanism_class
    assert mechanism_class("sw") is mechanism_class("SW") is MECHANISMS["sw-direct"]
    assert "sw" not in MECHANISMS and set(ALIASES.values()) <= set(MECHANISMS)
    with pytest.raises(ValueError, match="unknown mechanism 'swx'"):
        mechanism_class("swx")
