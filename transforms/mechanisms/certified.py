"""Certified exact arithmetic for probabilities rounded to the safe side.

Randomized response and its relatives (the LDP frequency oracles, the Square Wave) use integer
probabilities ``P/D`` and ``Q/D`` whose largest ratio must not exceed ``e^eps``.  These helpers bracket
``exp`` and ``ln`` between exact rationals and raise the working precision until a rounded integer is the
same at both ends, so no float ever decides which side of a bound a probability lies on.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

from transforms.mechanisms.budget import UNITS_PER_EPSILON

if UNITS_PER_EPSILON != 10**12:  # exp_bracket writes eps as units scaled by 10^-12
    raise ImportError("certified.py assumes 10**12 budget units per epsilon")


def bracket(function: str, argument: decimal.Decimal, precision: int) -> tuple[Fraction, Fraction]:
    """Exact rationals around ``exp`` or ``ln`` of an exactly representable ``argument``.

    Python's ``Decimal.exp`` and ``Decimal.ln`` are correctly rounded (half an ulp); one ulp either side
    is a certain bracket.
    """
    with decimal.localcontext() as context:
        context.prec = precision
        value = getattr(+argument, function)()  # unary plus: the argument has fewer digits than `precision`
    ulp = Fraction(10) ** (value.adjusted() - precision + 1)
    return Fraction(value) - ulp, Fraction(value) + ulp


def certified(compute) -> int:
    """Run ``compute(precision) -> (low, high)`` with doubling precision until both give the same integer."""
    precision = 40
    while True:
        low, high = compute(precision)
        if low == high:
            return low
        precision *= 2


def exp_bracket(epsilon_units: int, precision: int) -> tuple[Fraction, Fraction]:
    """Exact rationals around ``e^eps`` for a budget of ``epsilon_units``."""
    return bracket("exp", decimal.Decimal(epsilon_units).scaleb(-12), precision)  # eps exactly


def log_ratio_units(p: int, q: int) -> int:
    """``ln(p/q)`` in budget units rounded up (the realised epsilon of a largest ratio ``p/q``), certified."""

    def units_bounds(precision: int) -> tuple[int, int]:
        p_low, p_high = bracket("ln", decimal.Decimal(p), precision)  # ln(P/Q) = ln P - ln Q, P and Q exact
        q_low, q_high = bracket("ln", decimal.Decimal(q), precision)
        low, high = p_low - q_high, p_high - q_low
        return math.ceil(low * UNITS_PER_EPSILON), math.ceil(high * UNITS_PER_EPSILON)

    return certified(units_bounds)
