"""Budget units: exact, rounded down, validated."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transforms.mechanisms.budget import (UNITS_PER_EPSILON, to_fraction, to_units, to_units_array,
                                          units_to_decimal_string)


def test_decimals_are_read_as_decimals():
    assert to_units(0.6) == 600_000_000_000
    assert to_units("0.6") == to_units(Decimal("0.6")) == to_units(Fraction(3, 5)) == 600_000_000_000
    assert to_units(2.4) == 2_400_000_000_000  # not 2.39999999...


def test_rounds_down_to_the_resolution():
    assert to_units(Fraction(1, 3)) == 333_333_333_333
    assert to_units("1.0000000000019") == UNITS_PER_EPSILON + 1


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "abc", 1e-13, 10**5, True, None])
def test_bad_epsilons_name_the_parameter(bad):
    with pytest.raises(ValueError, match="my_eps"):
        to_units(bad, "my_eps")


@given(st.floats(min_value=1e-12, max_value=1e4))
def test_never_rounds_up(epsilon):
    assert to_fraction(to_units(epsilon)) <= Fraction(Decimal(repr(epsilon)))


@given(st.integers(1, 10**16))
def test_decimal_string_is_exact(units):
    assert Fraction(Decimal(units_to_decimal_string(units))) == to_fraction(units)


def test_array_conversion_validates():
    assert list(to_units_array([0.5, 0.5, 1.0])) == [500_000_000_000] * 2 + [UNITS_PER_EPSILON]
    with pytest.raises(ValueError, match="finite"):
        to_units_array(np.array([1.0, np.nan]))
