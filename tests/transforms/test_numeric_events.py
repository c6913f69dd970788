"""Numeric events: a value's grid index is the one the numeric mechanisms compute themselves, and back."""

from __future__ import annotations

import re

import numpy as np
import pytest

from transforms.mechanisms import SlotBatch, make_mechanism
from transforms.numeric_events import NumericDomain, ValueToGrid


@pytest.mark.parametrize("low, high", [(0.0, 1.0), (-5.0, 15.0), (1e6, 1e6 + 3.7), (-0.3, 0.2)])
def test_the_grid_index_is_the_mechanisms_own(low, high):
    rng = np.random.default_rng(4)
    width = high - low
    values = np.concatenate([rng.uniform(low - width / 4, high + width / 4, 5000), [low, high],
                             low + width * (np.arange(0, 65537, 997) + 0.5) / 65536])  # half-way points: ties
    domain = NumericDomain(low, high, "clip")
    mechanism = make_mechanism("capp", bins=1, epsilon=1.0, window=4, low=low, high=high, out_of_range="clip")
    theirs = mechanism.counted(SlotBatch.of(np.arange(values.size), values)).values
    ours = np.array([domain.grid_index(float(v)) for v in values])
    assert np.array_equal(ours, theirs)
    assert ours.min() == 0 and ours.max() == domain.steps


def test_releases_in_grid_units_map_back_exactly():
    domain = NumericDomain(-5.0, 15.0)
    record = {"estimate": [0.0, 32768.0, 65536.0, 12345.5], "predicted_error": 65536.0 ** 2, "registered_users": 9,
              "reporters": 4, "mechanism": "capp", "statistic": "mean"}
    back = domain.in_domain_units(record)
    assert back["estimate"] == [-5.0, 5.0, 15.0, -5.0 + 20.0 * 12345.5 / 65536]
    # the estimate times the reporters (not the registered users), the method's statistic: the per-user stage's
    assert back["predicted_error"] == 400.0 and back["histogram"] == [-20, 20, 60, round(back["estimate"][3] * 4)]
    assert back["statistic"] == "report_mean"
    assert record["estimate"][0] == 0.0  # a new dict: the input is not changed
    assert domain.value_of(domain.grid_index(3.0)) == pytest.approx(3.0, abs=20 / 65536)


def test_values_outside_or_not_numbers_are_refused_with_a_reason():
    strict = ValueToGrid(NumericDomain(0.0, 10.0))
    assert strict({"value": "5"}) == 32768 and strict({"value": 10}) == 65536
    for raw, reason in [(10.5, "value outside the domain [0, 10]"), (-1e-9, "outside"), ("abc", "not a number"),
                        (float("nan"), "NaN"), ("inf", "infinite"), (True, "not a number"), (None, "missing")]:
        with pytest.raises(ValueError, match=re.escape(reason)):
            strict({"value": raw})
    clipping = ValueToGrid(NumericDomain(0.0, 10.0, "clip"), field="reading")
    assert clipping({"reading": 99.0}) == 65536 and clipping({"reading": "-3"}) == 0


@pytest.mark.parametrize("args, message", [
    (("1,1",), "LOW < HIGH"), (("2,1",), "LOW < HIGH"), (("a,1",), "two numbers"), (("0,1,2",), "LOW,HIGH"),
    (("nan,1",), "finite"), (("-1e308,1e308",), "wider than a float"), (("0,1", "wrap"), "--out-of-range"),
])
def test_a_bad_domain_fails_with_one_line(args, message):
    with pytest.raises(ValueError, match=message) as error:
        NumericDomain.parse(*args)
    assert "\n" not in str(error.value)
