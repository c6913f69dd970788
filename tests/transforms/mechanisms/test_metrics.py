"""Tests of the utility metrics (AMRE, MAE, MRE, AJSD) on released histograms."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.spatial.distance import jensenshannon

from transforms.mechanisms.metrics import UtilityReport, ajsd, amre, mae, mre, utility_report

LN2 = math.log(2.0)

# Running example: two slots, two bins.
RELEASED = [[1, 2], [3, 4]]
TRUE = [[1, 1], [5, 4]]


# --- hand-computed values ---------------------------------------------------


def test_amre_hand_computed():
    # slot 1: ((1-1)^2 + (2-1)^2) / 2 = 0.5;  slot 2: ((3-5)^2 + (4-4)^2) / 2 = 2
    assert amre(RELEASED, TRUE) == pytest.approx((0.5 + 2.0) / 2, abs=1e-15)
    assert amre(RELEASED, TRUE) == pytest.approx(1.25, abs=1e-15)


def test_mae_hand_computed():
    # |0|, |1|, |-2|, |0| -> 3 / 4
    assert mae(RELEASED, TRUE) == pytest.approx(0.75, abs=1e-15)


def test_mre_hand_computed():
    # gamma_1 = 0.001 * 2 = 0.002, gamma_2 = 0.001 * 9 = 0.009, both below
    # every count, so the denominators are the counts themselves:
    # 0/1, 1/1, 2/5, 0/4 -> (0 + 1 + 0.4 + 0) / 4
    assert mre(RELEASED, TRUE) == pytest.approx(0.35, abs=1e-15)


def test_ajsd_hand_computed():
    # slot 1: r = (1/3, 2/3), c = (1/2, 1/2), v = (5/12, 7/12)
    slot_1 = 0.5 * (
        (1 / 3) * math.log(4 / 5)
        + (2 / 3) * math.log(8 / 7)
        + 0.5 * math.log(6 / 5)
        + 0.5 * math.log(6 / 7)
    )
    # slot 2: r = (3/7, 4/7), c = (5/9, 4/9), v = (31/63, 32/63)
    slot_2 = 0.5 * (
        (3 / 7) * math.log(27 / 31)
        + (4 / 7) * math.log(9 / 8)
        + (5 / 9) * math.log(35 / 31)
        + (4 / 9) * math.log(7 / 8)
    )
    assert ajsd(RELEASED, TRUE) == pytest.approx((slot_1 + slot_2) / 2, rel=1e-12)
    # = (0.0143625916 + 0.0080863583) / 2
    assert ajsd(RELEASED, TRUE) == pytest.approx(0.0112244749341, abs=1e-12)


def test_mre_sanity_bound_replaces_small_true_counts():
    # gamma = 0.001 * (0.5 + 999.5) = 1 exceeds the first count 0.5:
    # |2.5 - 0.5| / 1 = 2 and |999.5 - 999.5| / 999.5 = 0 -> mean 1
    assert mre([[2.5, 999.5]], [[0.5, 999.5]]) == pytest.approx(1.0, abs=1e-12)
    # a zero true count is divided by gamma = 1: 5 / 1, 0 / 1000 -> 2.5
    assert mre([[5, 1000]], [[0, 1000]]) == pytest.approx(2.5, abs=1e-12)


def test_all_zero_true_slot():
    released, true = [[3, -1]], [[0, 0]]
    assert amre(released, true) == pytest.approx((9 + 1) / 2, abs=1e-15)
    assert mae(released, true) == pytest.approx(2.0, abs=1e-15)
    # gamma = 0 and c = 0: the denominator is 1, so MRE equals MAE here
    assert mre(released, true) == pytest.approx(2.0, abs=1e-15)
    # r clipped to (3, 0) -> (1, 0); c is uniform (1/2, 1/2); v = (3/4, 1/4)
    expected = 0.5 * (math.log(4 / 3) + 0.5 * math.log(2 / 3) + 0.5 * math.log(2))
    assert ajsd(released, true) == pytest.approx(expected, rel=1e-12)


def test_all_zero_slots_on_both_sides_are_uniform_and_agree():
    assert ajsd([[0, 0, 0]], [[0, 0, 0]]) == 0.0
    # released counts all negative clip to zero and also become uniform
    assert ajsd([[-1, -2, -3]], [[0, 0, 0]]) == 0.0
    assert ajsd([[-1, -2]], [[4, 4]]) == pytest.approx(0.0, abs=1e-15)
    assert mre([[0, 0]], [[0, 0]]) == 0.0


def test_negative_released_counts_are_clipped_for_ajsd_only():
    released, true = [[-5, 10]], [[0, 10]]
    # r clipped to (0, 10) has the same distribution as c
    assert ajsd(released, true) == pytest.approx(0.0, abs=1e-15)
    # the error metrics use the raw released values
    assert amre(released, true) == pytest.approx(25 / 2, abs=1e-15)
    assert mae(released, true) == pytest.approx(5 / 2, abs=1e-15)
    # gamma = 0.01: 5 / 0.01 = 500 and 0 / 10 -> 250
    assert mre(released, true) == pytest.approx(250.0, rel=1e-12)


def test_ajsd_identical_and_disjoint():
    assert ajsd([[3, 1, 0]], [[3, 1, 0]]) == pytest.approx(0.0, abs=1e-15)
    assert ajsd([[6, 2, 0]], [[3, 1, 0]]) == pytest.approx(0.0, abs=1e-15)  # scale-free
    assert ajsd([[1, 0]], [[0, 1]]) == pytest.approx(LN2, rel=1e-15)
    assert ajsd([[7, 0, 0]], [[0, 0, 3]]) == pytest.approx(LN2, rel=1e-15)
    # averaged over slots: one disjoint slot and one identical slot
    assert ajsd([[1, 0], [1, 0]], [[0, 1], [1, 0]]) == pytest.approx(LN2 / 2, rel=1e-15)


def test_ajsd_agrees_with_scipy_on_random_histograms():
    rng = np.random.default_rng(0)
    true = rng.integers(1, 100, size=(50, 4))
    released = true + rng.normal(0, 20, size=true.shape)
    clipped = np.clip(released, 0, None)
    expected = np.mean(
        [jensenshannon(r, c) ** 2 for r, c in zip(clipped, true) if r.sum() > 0]
    )
    assert np.all(clipped.sum(axis=1) > 0)
    assert ajsd(released, true) == pytest.approx(expected, rel=1e-10)


def test_integer_and_float_inputs_agree():
    as_int = np.array(RELEASED, dtype=np.int64), np.array(TRUE, dtype=np.int64)
    as_float = np.array(RELEASED, dtype=np.float64), np.array(TRUE, dtype=np.float64)
    assert utility_report(*as_int) == utility_report(*as_float)


def test_utility_report_bundles_all_metrics():
    report = utility_report(RELEASED, TRUE)
    assert isinstance(report, UtilityReport)
    assert report.amre == amre(RELEASED, TRUE)
    assert report.ajsd == ajsd(RELEASED, TRUE)
    assert report.mre == mre(RELEASED, TRUE)
    assert report.mae == mae(RELEASED, TRUE)
    assert all(isinstance(value, float) for value in dataclasses.astuple(report))
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.amre = 0.0


# --- validation -------------------------------------------------------------

METRICS = [amre, mae, mre, ajsd, utility_report]


@pytest.mark.parametrize("metric", METRICS)
def test_shape_mismatch_raises(metric):
    with pytest.raises(ValueError, match="same shape"):
        metric([[1, 2, 3]], [[1, 2]])
    with pytest.raises(ValueError, match="same shape"):
        metric([[1, 2], [3, 4]], [[1, 2]])


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize(
    ("released", "true", "name"),
    [
        ([1, 2], [1, 2], "released"),  # one-dimensional
        ([[1, 2]], [[[1, 2]]], "true"),  # three-dimensional
        (np.zeros((0, 2)), np.zeros((0, 2)), "released"),  # no slot
        (np.zeros((2, 0)), np.zeros((2, 0)), "released"),  # no bin
        ([[1, np.nan]], [[1, 2]], "released"),
        ([[1, 2]], [[np.inf, 2]], "true"),
        ([[1, 2]], [[-1, 2]], "true"),  # true counts cannot be negative
        ([["a", "b"]], [[1, 2]], "released"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(metric, released, true, name):
    with pytest.raises(ValueError, match=name):
        metric(released, true)


# --- properties -------------------------------------------------------------

SHAPES = hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6)
RELEASED_VALUES = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
TRUE_VALUES = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def histogram_pairs(draw):
    shape = draw(SHAPES)
    released = draw(hnp.arrays(np.float64, shape, elements=RELEASED_VALUES))
    true = draw(hnp.arrays(np.float64, shape, elements=TRUE_VALUES))
    return released, true


@given(histogram_pairs())
def test_error_metrics_are_non_negative(pair):
    released, true = pair
    assert amre(released, true) >= 0.0
    assert mae(released, true) >= 0.0
    assert mre(released, true) >= 0.0
    # mean |e| <= sqrt(mean e^2)
    assert mae(released, true) <= math.sqrt(amre(released, true)) * (1 + 1e-12) + 1e-12


@given(histogram_pairs())
def test_ajsd_is_between_zero_and_ln2(pair):
    released, true = pair
    assert 0.0 <= ajsd(released, true) <= LN2


@given(hnp.arrays(np.float64, SHAPES, elements=TRUE_VALUES))
def test_metrics_vanish_on_identical_histograms(histograms):
    assert amre(histograms, histograms) == 0.0
    assert mae(histograms, histograms) == 0.0
    assert mre(histograms, histograms) == 0.0
    assert ajsd(histograms, histograms) == pytest.approx(0.0, abs=1e-12)
