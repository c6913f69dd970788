"""The (eps, d) grids the LDP-IDS evaluation uses, and an exact check of ``e^x`` (imported as ``ldp_grid``).

Budgets: the headline eps of Fig. 3 and the task's grid, TV-1's 0.05, and the per-slot budgets of the budget
division methods (eps/w for LBU, eps/(2w) for M1 of LBD/LBA) at every w of spec §8.4.
"""

from __future__ import annotations

from fractions import Fraction

from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_units

HEADLINE_EPSILONS = ("0.5", "1", "1.5", "2", "2.5", "3")
WINDOWS = (20, 30, 40, 50)
DOMAINS = (2, 5, 10, 100, 1000)
EPSILON_UNITS = sorted({to_units(e) for e in HEADLINE_EPSILONS} | {to_units("0.05")}
                       | {to_units(e) // (k * w) for e in HEADLINE_EPSILONS for w in WINDOWS for k in (1, 2)})
GRID = [(units, d) for units in EPSILON_UNITS for d in DOMAINS]


def exp_taylor(units: int, terms: int = 120) -> tuple[Fraction, Fraction]:
    """``lo <= e^(units/10^12) <= hi``: the Taylor partial sum (every term is positive) and its tail bound."""
    x = Fraction(units, UNITS_PER_EPSILON)
    assert x < (terms + 2) / 2
    term, total = Fraction(1), Fraction(1)
    for k in range(1, terms + 1):
        term = term * x / k
        total += term
    tail = term * x / (terms + 1) * 2  # the later terms shrink by at least half each
    return total, total + tail
