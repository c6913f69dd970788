"""Declarations: levels, defaults, operator bounds, and what each mechanism accepts."""

from __future__ import annotations

import pytest

from transforms.declarations import DeclarationTranslator, RequirementPolicy
from transforms.mechanisms import FixedRequirement, LifetimeRequirement, make_mechanism
from transforms.mechanisms.budget import to_units

BOUNDED = RequirementPolicy(levels={"high": FixedRequirement(40, 0.5), "loose": FixedRequirement(10, 50.0)},
                            default=FixedRequirement(20, 1.0), min_epsilon=0.1, max_epsilon=10.0, max_window=100)


@pytest.mark.parametrize("declaration, row, reason", [
    (("fixed", 20, "0.6"), (20, to_units(0.6)), None),
    (None, (20, to_units(1.0)), None),
    (("level", "high"), (40, to_units(0.5)), None),
    (("level", "nope"), None, "unknown requirement level 'nope'"),
    (("level", "loose"), None, "exceeds the operator's maximum 10.0"),
    (("fixed", 20, "0.05"), None, "below the operator's minimum 0.1"),
    (("fixed", 500, "1.0"), None, "window 500 exceeds the operator's maximum 100"),
    (("fixed", 20, "0"), None, "epsilon must be in (0"),
    (("dynamic", 1, "5.0", 20, "1.0"), None, "takes fixed (w, epsilon) requirements"),
    (("lifetime", "2"), None, "pbd takes windowed requirements (w-event), not a lifetime budget"),
])
def test_fixed_mechanisms(declaration, row, reason):
    translator = DeclarationTranslator(make_mechanism("pbd", bins=2), BOUNDED)
    got_row, got_reason = translator.row(declaration)
    assert got_row == row
    assert (got_reason is None) if reason is None else (reason in got_reason), got_reason


def test_dynamic_mechanisms_take_fixed_as_both_directions_and_check_every_window():
    translator = DeclarationTranslator(make_mechanism("dpbd", bins=2, max_window=50), BOUNDED)
    assert translator.row(("fixed", 20, "0.6")) == ((20, to_units(0.6), 20, to_units(0.6)), None)
    assert "max_window=50" in translator.row(("dynamic", 1, "5.0", 60, "1.0"))[1]
    assert "below the operator's minimum" in translator.row(("dynamic", 1, "0.01", 20, "1.0"))[1]


def test_homogeneous_baselines_refuse_stricter_requirements():
    translator = DeclarationTranslator(make_mechanism("bd", bins=2, epsilon=0.5, window=30), RequirementPolicy())
    assert translator.row(("fixed", 20, "0.6"))[1] is None
    assert "stricter than bd's" in translator.row(("fixed", 40, "0.6"))[1]


@pytest.mark.parametrize("name", ["pbd", "dpbd", "bd"])
def test_windowed_mechanisms_refuse_a_lifetime_budget_in_one_line(name):
    """Power for the refusal: the same budget as a fixed declaration is accepted."""
    kwargs = {"epsilon": 4.0, "window": 10} if name == "bd" else {}
    policy = RequirementPolicy(default=LifetimeRequirement(2.0), levels={"forever": LifetimeRequirement(1.0)})
    translator = DeclarationTranslator(make_mechanism(name, bins=2, **kwargs), policy)
    for declaration in (("lifetime", "2"), None, ("level", "forever")):
        row, reason = translator.row(declaration)
        assert row is None and "\n" not in reason
        assert reason == f"requirement refused: {name} takes windowed requirements (w-event), not a lifetime budget"
    assert translator.row(("fixed", 10, "4"))[1] is None


@pytest.mark.parametrize("kwargs, message", [
    ({"min_epsilon": 0}, "min_epsilon"), ({"max_epsilon": float("inf")}, "max_epsilon"),
    ({"min_epsilon": 2.0, "max_epsilon": 1.0}, "must not exceed"), ({"max_window": 0}, "max_window"),
    ({"default": (20, 1.0)}, "default"), ({"levels": {"x": 3}}, "level 'x'"),
    ({"levels": {"a": FixedRequirement(4, 1.0)}, "level_shares": (("a", 0.4),)}, "sum to 1"),
    ({"levels": {"a": FixedRequirement(4, 1.0)}, "level_shares": (("b", 1.0),)}, "unknown level 'b'"),
    ({"levels": {"a": FixedRequirement(4, 1.0)}, "level_shares": (("a", 1.0),),
      "default": FixedRequirement(4, 1.0)}, "not both"),
])
def test_bad_policies_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RequirementPolicy(**kwargs)


def test_assigned_levels_are_a_deterministic_default_by_user():
    policy = RequirementPolicy(levels={"a": FixedRequirement(4, 1.0), "b": FixedRequirement(8, 1.0)},
                               level_shares=(("a", 0.5), ("b", 0.5)))
    assigned = [policy.assigned(f"user{i}") for i in range(400)]
    assert assigned == [policy.assigned(f"user{i}") for i in range(400)]
    share_a = assigned.count(("level", "a")) / 400
    assert set(assigned) == {("level", "a"), ("level", "b")} and 0.4 < share_a < 0.6  # binomial: P(fail) < 1e-4
    assert RequirementPolicy(default=FixedRequirement(4, 1.0)).assigned("user0") is None
