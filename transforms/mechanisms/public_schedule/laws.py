"""The local randomizers' laws rebuilt from public facts alone, with certified arithmetic.

A report's cost is the log of its randomizer's largest ratio of output probabilities.  The ledger must not
take that ratio from the mechanism (whose bug would hide behind its own numbers), so the integers are
recomputed here from what a device is told: the law's kind, the domain size ``d`` and the budget, exactly
as the project's probabilities are defined (``docs/local_dp.md``): GRR over ``2**64`` with
``Q = ceil(2**64/(e^eps + d - 1))``, ``P = 2**64 - (d-1)Q``; OUE over ``2**32`` with
``Q = ceil(2**32/(e^eps + 1))``, ``P = 2**32 - Q``; stochastic rounding's pair
``2**63 ± G·m/2`` with ``G = floor(tanh(eps/2)·2**(64-bits))``; the Piecewise Mechanism's square-wave band
of ``2B`` cells, ``B = round(m·e^{-eps/2}/2)``, over ``m + 2B`` cells of ``P`` or ``Q`` out of ``2**64``
(``Q`` the least with ``P/Q <= e^eps`` that makes ``P = (2**64 - m·Q)/2B`` whole); HM's largest ratio is
the larger of the two (stochastic rounding alone at or below eps = 0.61).  ``e^eps`` is bracketed by
:mod:`~transforms.mechanisms.certified` and the precision raised until both ends give the same integer.
Nothing here imports a mechanism module.
"""

from __future__ import annotations

import decimal
import functools
import math
from fractions import Fraction

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.certified import bracket, certified, exp_bracket, log_ratio_units

FREQUENCY_LAWS = ("grr", "oue")
MEAN_LAWS = ("sr", "hm")


@functools.lru_cache(maxsize=4096)
def ada_law(epsilon_units: int, d: int) -> str:
    """LDP-IDS's "Ada" rule: GRR iff ``d < 3e^eps + 2`` (decided on a certified bracket of ``e^eps``)."""
    bound = Fraction(d - 2, 3)

    def sides(precision: int) -> tuple[bool, bool]:
        low, high = exp_bracket(epsilon_units, precision)
        return bound < low, bound < high

    return "grr" if certified(sides) else "oue"


@functools.lru_cache(maxsize=4096)
def frequency_pair(law: str, epsilon_units: int, d: int) -> tuple[int, int]:
    """``(P, Q)``: the largest ratio of GRR's or OUE's output probabilities at this budget and domain."""
    if law == "grr":
        scale, spread = 1 << 64, d - 1
    elif law == "oue":
        scale, spread = 1 << 32, 1
    else:
        raise ValueError(f"no frequency law {law!r}")

    def other_bounds(precision: int) -> tuple[int, int]:
        low, high = exp_bracket(epsilon_units, precision)  # Q falls as e^eps grows
        return math.ceil(Fraction(scale) / (high + spread)), math.ceil(Fraction(scale) / (low + spread))

    other = certified(other_bounds)
    return scale - spread * other, other


@functools.lru_cache(maxsize=4096)
def rounding_pair(epsilon_units: int, grid_bits: int) -> tuple[int, int]:
    """Stochastic rounding's largest ratio ``(2**63 + G·m/2, 2**63 - G·m/2)`` (HM's lower bound)."""
    scale = 1 << (64 - grid_bits)

    def gain_bounds(precision: int) -> tuple[int, int]:
        low, high = exp_bracket(epsilon_units, precision)  # tanh(eps/2) = (e^eps - 1)/(e^eps + 1) grows with it
        return math.floor((low - 1) / (low + 1) * scale), math.floor((high - 1) / (high + 1) * scale)

    spread = certified(gain_bounds) << (grid_bits - 1)
    return (1 << 63) + spread, (1 << 63) - spread


ROUNDING_ONLY_UNITS = 61 * UNITS_PER_EPSILON // 100
"""HM is stochastic rounding alone at or below eps = 0.61 (spec §5.13)."""


@functools.lru_cache(maxsize=4096)
def piecewise_half_band(epsilon_units: int, grid_bits: int) -> int:
    """``B = round(m·e^{-eps/2}/2)`` (at least 1): the Piecewise Mechanism's half-band in cells, certified."""
    cells = 1 << grid_bits
    half = decimal.Decimal(5 * epsilon_units).scaleb(-13)  # eps/2, exactly

    def bounds(precision: int) -> tuple[int, int]:
        low, high = bracket("exp", half, precision)  # the half-band falls as e^{eps/2} grows
        return math.floor(Fraction(cells) / (2 * high) + Fraction(1, 2)), \
            math.floor(Fraction(cells) / (2 * low) + Fraction(1, 2))

    return max(1, certified(bounds))


@functools.lru_cache(maxsize=4096)
def band_pair(epsilon_units: int, grid_bits: int, half_band: int) -> tuple[int, int]:
    """``(P, Q)`` of a square-wave band of ``2·half_band`` cells over ``2**grid_bits + 2·half_band`` cells."""
    total, cells, band = 1 << 64, 1 << grid_bits, 2 * half_band

    def q_bounds(precision: int) -> tuple[int, int]:
        low, high = exp_bracket(epsilon_units, precision)  # Q >= 2**64/(m + 2B·e^eps)
        return math.ceil(Fraction(total) / (cells + band * high)), math.ceil(Fraction(total) / (cells + band * low))

    least = certified(q_bounds)
    odd = band
    while odd % 2 == 0:
        odd //= 2
    # P is whole iff m·Q = 2**64 modulo 2B: modulo its power of two always (2B <= m), modulo its odd part iff
    # Q = 2**64/m there (m is invertible): the next such Q, at most `odd - 1` above the least
    other = least + (total // cells - least) % odd
    if (total - cells * other) % band:
        raise ValueError(f"no whole band probability for 2B = {band} at grid_bits={grid_bits}")
    keep = (total - cells * other) // band
    if keep <= other:
        raise ValueError(f"{epsilon_units} units are below the band's resolution at grid_bits={grid_bits}")
    return keep, other


@functools.lru_cache(maxsize=4096)
def hybrid_pair(epsilon_units: int, grid_bits: int) -> tuple[int, int]:
    """HM's largest ratio: stochastic rounding's pair, or the Piecewise Mechanism's band pair when it is larger
    (SR alone at or below eps = 0.61)."""
    rounding = rounding_pair(epsilon_units, grid_bits)
    if epsilon_units <= ROUNDING_ONLY_UNITS:
        return rounding
    piecewise = band_pair(epsilon_units, grid_bits, piecewise_half_band(epsilon_units, grid_bits))
    return rounding if rounding[0] * piecewise[1] >= piecewise[0] * rounding[1] else piecewise


@functools.lru_cache(maxsize=4096)
def pair_units(keep: int, other: int) -> int:
    """``ln(keep/other)`` in budget units, rounded up (certified): what one report through that law costs."""
    if not 0 < other <= keep:
        raise ValueError(f"a law's largest ratio needs 0 < other <= keep, got {keep}/{other}")
    return log_ratio_units(keep, other)
