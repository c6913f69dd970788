"""Exact privacy budgets as integer units of 10^-12 epsilon.

Every budget that is charged, summed or compared is an ``int64`` count of
:data:`UNITS_PER_EPSILON`-ths of one epsilon.  Integer arithmetic is exact,
vectorizes with numpy, and never drifts over an infinite stream, which is why
it is used instead of floats (the papers) or ``Fraction`` (too slow for a
million users per slot).

Conversions always round *down*: a user who asks for ``E = 0.6`` is given
``600_000_000_000`` units, and any derived per-slot budget (``E/(2w)``, the
halving of PBD, ...) is floored.  Rounding down can only spend less than
allowed, never more.

Floats are read as the shortest decimal that round-trips them (``0.6`` means
6/10, not the binary double nearest to it), so that requirements typed as
decimals are honoured exactly.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from numbers import Real

import numpy as np

UNITS_PER_EPSILON = 10**12
"""One epsilon is this many budget units."""

MAX_EPSILON = 10**4
"""Largest accepted epsilon; keeps every window sum far inside int64."""


def to_units(epsilon: float | str | Fraction | Decimal, name: str = "epsilon") -> int:
    """Convert a positive epsilon to budget units, rounding down.

    Raises ``ValueError`` naming ``name`` when the value is not a finite
    number in ``(0, MAX_EPSILON]`` or rounds to zero units.
    """
    exact = _exact(epsilon, name)
    if not 0 < exact <= MAX_EPSILON:
        raise ValueError(f"{name} must be in (0, {MAX_EPSILON}], got {epsilon!r}")
    units = math.floor(exact * UNITS_PER_EPSILON)
    if units <= 0:
        raise ValueError(f"{name}={epsilon!r} is below the budget resolution 1e-12")
    return units


def to_units_array(epsilons, name: str = "epsilon") -> np.ndarray:
    """Vector form of :func:`to_units` (one conversion per distinct value)."""
    values = np.asarray(epsilons, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    distinct, inverse = np.unique(values, return_inverse=True)
    converted = np.array([to_units(float(v), name) for v in distinct], dtype=np.int64)
    return converted[inverse].reshape(values.shape)


def to_epsilon(units):
    """Budget units back to (float) epsilon, for display and error models only."""
    if isinstance(units, (int, np.integer)):
        return int(units) / UNITS_PER_EPSILON
    return np.asarray(units, dtype=np.float64) / UNITS_PER_EPSILON


def to_fraction(units: int) -> Fraction:
    """The exact epsilon that ``units`` stands for."""
    return Fraction(int(units), UNITS_PER_EPSILON)


def units_to_decimal_string(units: int) -> str:
    """Exact decimal text of ``units`` epsilon, e.g. ``150000000000 -> '0.15'``."""
    whole, frac = divmod(int(units), UNITS_PER_EPSILON)
    if frac == 0:
        return str(whole)
    return f"{whole}.{frac:012d}".rstrip("0")


def _exact(value, name: str) -> Fraction:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{name} must be finite, got {value!r}")
        return Fraction(value)
    if isinstance(value, str):
        try:
            parsed = Decimal(value.strip())
        except ArithmeticError:
            raise ValueError(f"{name} must be a decimal number, got {value!r}") from None
        return _exact(parsed, name)
    if isinstance(value, (Real, np.floating, np.integer)):
        as_float = float(value)
        if not math.isfinite(as_float):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return Fraction(Decimal(repr(as_float)))
    raise ValueError(f"{name} must be a number, got {type(value).__name__}")
