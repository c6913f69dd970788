"""The numeric family's randomizer laws rebuilt from public facts alone: the Square Wave and the Piecewise Mechanism.

A numeric report's cost is ``ln(P/Q)`` of its randomizer: the discretised square-wave law (``docs/local_dp.md``)
puts ``P/2**64`` on each of the ``2B`` band cells and ``Q/2**64`` on each of the ``m`` other cells
(``m = 2**grid_bits``), with

* ``B`` the half-band in cells: ``round(b(eps)·m)`` for the Square Wave, ``b(eps) = (eps·e^eps - e^eps + 1) /
  (2e^eps(e^eps - eps - 1))``; ``round(m·e^{-eps/2}/2)`` for the Piecewise Mechanism; at least 1;
* ``Q`` the least integer with ``P/Q <= e^eps`` for which ``P = (2**64 - m·Q)/(2B)`` is an integer.

These integers are recomputed here without importing any mechanism module, by a different route from the
mechanism's: a float guess of ``B`` is *verified* (or moved) by exact comparisons of ``b`` with the rounding
boundaries ``(k ± 1/2)/m`` on a certified bracket of ``e^eps`` (:mod:`~transforms.mechanisms.certified`,
precision doubled until the comparison is decided), and ``Q`` is the least admissible integer found by a
modular inverse, checked by exact integer tests.  The ledger charges :func:`law_units` of what the public
schedule says a report was made with; a mechanism whose law differs is caught by the comparison of charges.
"""

from __future__ import annotations

import decimal
import functools
import math
from fractions import Fraction

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.certified import bracket, exp_bracket, log_ratio_units

DENOMINATOR = 1 << 64
"""Every cell probability of the square-wave law is an integer over this."""
LAWS = ("sw", "pm")
"""``sw``: the Square Wave; ``pm``: the Piecewise Mechanism (the square-wave law with PM's half-band)."""
_START_PRECISION = 40


def _decided(compare) -> bool:
    """``compare(precision) -> (verdict at the low end, verdict at the high end)``, precision doubled until equal."""
    precision = _START_PRECISION
    while True:
        low, high = compare(precision)
        if low == high:
            return low
        precision *= 2


def _sw_b_exceeds(epsilon_units: int, threshold: Fraction) -> bool:
    """Whether ``b(eps) > threshold``, decided exactly.

    With ``x = e^eps > 1 + eps`` the denominator of ``b`` is positive, so ``b > c`` iff
    ``f(x) = 2c·x² - (2c(1 + eps) + eps - 1)·x - 1 < 0``; ``f`` is convex, so on a bracket ``[lo, hi]`` it is
    negative throughout when negative at both ends, and positive throughout when positive at both ends with its
    vertex outside the bracket.  Otherwise the bracket is narrowed.
    """
    eps = Fraction(epsilon_units, UNITS_PER_EPSILON)
    c = threshold
    if c <= 0:
        return True  # b > 0 for every eps > 0

    def f(x: Fraction) -> Fraction:
        return 2 * c * x * x - (2 * c * (1 + eps) + eps - 1) * x - 1

    vertex = (2 * c * (1 + eps) + eps - 1) / (4 * c)

    def compare(precision: int) -> tuple[bool, bool]:
        low, high = exp_bracket(epsilon_units, precision)
        if low <= 1 + eps:
            return False, True  # undecided: the bracket must clear b's pole
        at_low, at_high = f(low), f(high)
        if at_low < 0 and at_high < 0:
            return True, True
        if at_low > 0 and at_high > 0 and not low <= vertex <= high:
            return False, False
        return False, True

    return _decided(compare)


def _half_exp_bracket(epsilon_units: int, precision: int) -> tuple[Fraction, Fraction]:
    """Exact rationals around ``e^{eps/2}`` (``eps/2 = 5·units·10^-13``, exact in decimal)."""
    return bracket("exp", decimal.Decimal(5 * epsilon_units).scaleb(-13), precision)


def _pm_half_band_exceeds(epsilon_units: int, grid_bits: int, threshold: Fraction) -> bool:
    """Whether ``m·e^{-eps/2}/2 > threshold`` (i.e. ``e^{eps/2} < m/(2·threshold)``), decided exactly."""
    m = 1 << grid_bits
    if threshold <= 0:
        return True
    limit = Fraction(m) / (2 * threshold)

    def compare(precision: int) -> tuple[bool, bool]:
        low, high = _half_exp_bracket(epsilon_units, precision)
        return high < limit, low < limit

    return _decided(compare)


def _rounded(exceeds, guess: int) -> int:
    """The integer ``k`` with ``k - 1/2 < value < k + 1/2`` where ``exceeds(t)`` decides ``value > t``; moved from
    ``guess`` one step at a time (the float guess is at most a step or two off)."""
    k = max(guess, 0)
    while exceeds(Fraction(2 * k + 1, 2)):
        k += 1
    while k > 0 and not exceeds(Fraction(2 * k - 1, 2)):
        k -= 1
    return k


@functools.lru_cache(maxsize=4096)
def half_band(law: str, epsilon_units: int, grid_bits: int) -> int:
    """``B`` of ``law`` at ``epsilon_units`` on a grid of ``2**grid_bits`` steps (module doc), at least 1."""
    _check(law, epsilon_units, grid_bits)
    m = 1 << grid_bits
    eps = epsilon_units / UNITS_PER_EPSILON
    if law == "sw":
        em1 = math.expm1(eps)
        b = 0.5 - eps / 3 if eps < 1e-4 else (eps * (em1 + 1) - em1) / (2 * (em1 + 1) * (em1 - eps))
        k = _rounded(lambda t: _sw_b_exceeds(epsilon_units, t / m), int(round(b * m)))
    else:
        k = _rounded(lambda t: _pm_half_band_exceeds(epsilon_units, grid_bits, t),
                     int(round(m * math.exp(-eps / 2) / 2)))
    return max(1, k)


def _ratio_within(epsilon_units: int, keep: int, other: int) -> bool:
    """Whether ``keep/other <= e^eps``, decided exactly."""
    ratio = Fraction(keep, other)

    def compare(precision: int) -> tuple[bool, bool]:
        low, high = exp_bracket(epsilon_units, precision)
        return ratio <= low, ratio <= high

    return _decided(compare)


@functools.lru_cache(maxsize=4096)
def band_pair(epsilon_units: int, grid_bits: int, half: int) -> tuple[int, int]:
    """``(P, Q)``: the least admissible ``Q`` with ``P/Q <= e^eps`` and ``P = (2**64 - m·Q)/(2B)`` (module doc)."""
    m, band = 1 << grid_bits, 2 * half
    power_of_two = band & -band
    odd = band // power_of_two
    if m % power_of_two:  # 2B <= m in every law here: 2**64 - m·Q is then a multiple of 2B's power of two
        raise ValueError(f"no square-wave law with half-band {half} on a grid of {m} steps")
    residue = (DENOMINATOR * pow(m, -1, odd)) % odd if odd > 1 else 0  # Q ≡ 2**64/m (mod odd)
    estimate = int(Fraction(DENOMINATOR) / (m + band * Fraction(math.exp(epsilon_units / UNITS_PER_EPSILON))))
    other = max(1, estimate - 2 * odd)
    other += (residue - other) % odd if odd > 1 else 0

    def keep_of(q: int) -> int:
        return (DENOMINATOR - m * q) // band

    while other > odd and _ratio_within(epsilon_units, keep_of(other - odd), other - odd):
        other -= odd
    while not _ratio_within(epsilon_units, keep_of(other), other):
        other += odd
    keep = keep_of(other)
    if keep * band + m * other != DENOMINATOR or keep <= other:
        raise ValueError(f"epsilon of {epsilon_units} units is below the resolution of the square-wave law on "
                         f"{grid_bits} grid bits")
    return keep, other


@functools.lru_cache(maxsize=4096)
def law_pair(law: str, epsilon_units: int, grid_bits: int) -> tuple[int, int]:
    """``(P, Q)`` of ``law`` at ``epsilon_units`` (its largest ratio of one output's probabilities)."""
    return band_pair(epsilon_units, grid_bits, half_band(law, epsilon_units, grid_bits))


@functools.lru_cache(maxsize=4096)
def law_units(law: str, epsilon_units: int, grid_bits: int) -> int:
    """What one report through ``law`` at ``epsilon_units`` costs its sender: ``ln(P/Q)`` rounded up (certified)."""
    keep, other = law_pair(law, epsilon_units, grid_bits)
    return log_ratio_units(keep, other)


def _check(law: str, epsilon_units: int, grid_bits: int) -> None:
    if law not in LAWS:
        raise ValueError(f"law must be one of {LAWS}, got {law!r}")
    if isinstance(epsilon_units, bool) or not isinstance(epsilon_units, int) or epsilon_units < 1:
        raise ValueError(f"epsilon units must be a positive int, got {epsilon_units!r}")
    if isinstance(grid_bits, bool) or not isinstance(grid_bits, int) or not 1 <= grid_bits <= 62:
        raise ValueError(f"grid_bits must be an int in [1, 62], got {grid_bits!r}")
