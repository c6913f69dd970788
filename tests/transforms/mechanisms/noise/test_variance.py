"""Tests for transforms.mechanisms.noise.variance (the closed forms; the empirical variance of
the draws is checked in ``test_samplers.py``)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from noise_helpers import dlap_pmf
from transforms.mechanisms.noise import continuous_laplace_variance, discrete_laplace_variance


@pytest.mark.parametrize("scale", [1e-3, 0.01, 0.3, 0.5, 1.0, 2.0, 7.5, 100.0, 1e4])
def test_discrete_laplace_variance_closed_form(scale):
    q = math.exp(-1.0 / scale)
    closed = 2 * q / (1 - q) ** 2
    assert discrete_laplace_variance(scale) == pytest.approx(closed, rel=1e-9)
    if scale > 0.01:  # sinh^2 overflows below
        sinh_form = 1 / (2 * math.sinh(1 / (2 * scale)) ** 2)
        assert discrete_laplace_variance(scale) == pytest.approx(sinh_form, rel=1e-9)
    # Direct summation of the pmf.
    xs = np.arange(-int(80 * scale) - 10, int(80 * scale) + 11)
    assert discrete_laplace_variance(scale) == pytest.approx(float(np.sum(xs**2 * dlap_pmf(xs, scale))), rel=1e-9, abs=1e-300)


def test_discrete_laplace_variance_limits():
    for s in (1e3, 1e6, 1e9, 1e15, 1e100):
        # Exact expansion: 2s^2 - 1/6 + O(1/s^2).
        assert discrete_laplace_variance(s) == pytest.approx(2 * s * s, rel=1e-12 + 1 / (10 * s * s))
        assert discrete_laplace_variance(s) == pytest.approx(continuous_laplace_variance(s), rel=1e-6)
    assert discrete_laplace_variance(1e200) == math.inf  # true value exceeds the float range
    assert discrete_laplace_variance(1e-3) == pytest.approx(2 * math.exp(-1000), rel=1e-9)
    assert discrete_laplace_variance(1e-5) == 0.0
    assert discrete_laplace_variance(1e-300) == 0.0
    assert discrete_laplace_variance(Fraction(1, 2)) == discrete_laplace_variance(0.5)
    assert continuous_laplace_variance(3.0) == 18.0
    # Discrete noise never has more variance than the continuous one.
    for s in (0.1, 1.0, 10.0, 1e4):
        assert discrete_laplace_variance(s) < continuous_laplace_variance(s)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "2", None, True])
def test_variance_functions_reject_bad_scale(bad):
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace_variance(bad)
    with pytest.raises(ValueError, match="scale"):
        continuous_laplace_variance(bad)
