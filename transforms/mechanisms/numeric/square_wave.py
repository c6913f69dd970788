"""The Square Wave (SW) mechanism of local DP for a numeric value, discretised so that it is sampled exactly.

SW (Li et al., SIGMOD 2020; spec ``ipp_app_capp.md`` §2) reports a value ``v``
in ``[0, 1]`` as a point of ``[-b, 1+b]`` with density ``p`` within ``b`` of
``v`` and ``q = p/e^eps`` elsewhere.  Its continuous law cannot be sampled
exactly: ``b``, ``p`` and the band's mass ``2bp`` are transcendental in
``eps``, and a float output ``v - b + 2b·u`` rounds differently for different
``v``, so the low bits of a report would leak the input (Mironov, CCS 2012).
Hence the **discretised** variant here, whose every probability is an exact
rational:

* Input: ``v`` is rounded to the nearest point ``i/m`` of a grid of
  ``m = 2**grid_bits`` steps (default 16 bits; half-way cases to even).  A
  deterministic function of the input, not a coin, so it costs no privacy; it
  moves ``v`` by at most ``1/(2m)``.  :class:`~transforms.mechanisms.domain.Interval`
  values are first mapped to ``[0, 1]`` by ``(x - low)/(high - low)``.
* Output: one of the ``m + 2B`` cells ``[j/m, (j+1)/m)``, ``-B <= j < m + B``,
  reported as its midpoint ``(j + 1/2)/m`` (an exact float).  ``B`` is
  ``b(eps)·m`` rounded to the nearest integer (at least 1), so the band
  ``[v - b, v + b]`` is exactly the ``2B`` cells ``i - B <= j < i + B`` and the
  low region is always ``m`` cells, as in the continuous law (length 1).
* Probabilities: each band cell has ``P/2**64``, each other cell ``Q/2**64``,
  with ``2B·P + m·Q = 2**64`` exactly.  One uniform 64-bit integer ``U``
  picks the cell: band cell ``U // P`` if ``U < 2B·P``, else low cell
  ``(U - 2B·P) // Q`` counted left to right.  No rejection loop, no float.
* Rounding to the safe side: ``Q`` is the least integer with
  ``P/Q <= e^eps`` (``Q >= 2**64/(m + 2B·e^eps)``) in the residue class that
  makes ``P`` an integer (``Q ≡ 2**(64 - grid_bits)`` modulo the odd part of
  ``2B``: a step of at most ``2B``).  Every output cell
  has probability ``P`` or ``Q`` under every input, so the largest ratio of
  one output's probabilities under two inputs is ``P/Q <= e^eps``.  ``B`` and
  ``Q`` are certified, not trusted to floats: ``e^eps`` is bracketed by the
  correctly rounded ``decimal`` exponential ± 1 ulp, with doubling precision
  until both ends give the same integer (as the frequency oracles do).

What the discretisation changes: the input moves to the grid (≤ ``1/(2m)``),
``b`` becomes ``B/m`` (≤ ``1/(2m)`` off), the output is a cell midpoint (the
continuous SW at the realised ``b, p, q`` is this law plus an independent
uniform offset within the cell: the mean is the same, the variance smaller by
``1/(12m²)``), and the realised epsilon ``ln(P/Q)`` (rounded up to budget units,
certified; ledgers charge it) is below the nominal one by the residue step of ``Q``: at most 3e-10 at the
default 16 bits on the evaluation grid, up to 2e-5 at 24 bits (a budget below the step is refused).
The spec's moment formulas (§2.3) hold exactly for the realised rational
``b = B/m``, ``p = P·m/2**64``, ``q = Q·m/2**64`` (they satisfy ``2bp + q = 1``).
Draws come from the project's generator, secure by default.  The device module
``device/wevent_client.py`` computes the same integers by another method (exact
Taylor bounds); a test asserts they agree.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.domain import Interval
from transforms.mechanisms.certified import certified, exp_bracket, log_ratio_units
from transforms.mechanisms.ldp.oracles import MAX_LDP_EPSILON_UNITS
from transforms.mechanisms.noise import Randomness, secure_randomness

DENOMINATOR = 1 << 64
"""Every cell probability is an integer over this (one uniform 64-bit draw per report)."""
DEFAULT_GRID_BITS = 16
GRID_BITS_RANGE = (4, 24)
"""Accepted ``grid_bits``: above 24 the residue step of ``Q`` would cost about 1e-4 of epsilon or more."""


# ------------------------------------------------------------------ the continuous law (spec §2.1, §2.3)


def sw_parameters(epsilon: float) -> tuple[float, float, float]:
    """``(b, p, q)`` of the continuous SW at ``epsilon`` (floats), in the stable form of spec §2.1.

    ``b = (eps·E - (E-1)) / (2E·(E-1-eps))`` with ``E - 1 = expm1(eps)``; below 1e-4 the series
    ``1/2 - eps/3``.  A utility and error model, never used to draw.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    em1 = math.expm1(epsilon)
    big = em1 + 1
    b = 0.5 - epsilon / 3 if epsilon < 1e-4 else (epsilon * big - em1) / (2 * big * (em1 - epsilon))
    return b, big / (2 * b * big + 1), 1 / (2 * b * big + 1)


def sw_moment(k: int, v, b, p, q, centre=0):
    """``E[(SW(v) - centre)^k]`` of the continuous SW with parameters ``b, p, q`` (floats or Fractions, exact
    for Fractions): density ``q`` on ``[-b, 1+b]`` plus ``p - q`` on the band ``[v-b, v+b]`` (spec §2.3)."""

    def integral(low, high):
        return ((high - centre) ** (k + 1) - (low - centre) ** (k + 1)) / (k + 1)

    return q * integral(-b, 1 + b) + (p - q) * integral(v - b, v + b)


def sw_mean(v, b, p, q):
    """``E[SW(v)] = q(1+2b)/2 + 2b(p-q)·v``, i.e. ``1/2 + g·(v - 1/2)`` with the gain ``g = 2b(p-q)``."""
    return q * (1 + 2 * b) / 2 + 2 * b * (p - q) * v


def sw_variance(v, b, p, q):
    """``Var(SW(v))`` by the integration formula."""
    return sw_moment(2, v, b, p, q, centre=sw_mean(v, b, p, q))


def deviation_mean(v, b, p, q):
    """``E[v - SW(v)] = q((1+2b)v - (b + 1/2)) = q(1+2b)(v - 1/2)`` (the paper's formula, spec §2.3)."""
    return q * (1 + 2 * b) * (2 * v - 1) / 2


def deviation_variance_at_one(b, p, q):
    """``Var(1 - SW(1))``: the paper's closed form ``2b³p/3 - b²q² + b²q - bq² + bq - q²/4 + q/3`` (verified)."""
    return 2 * b**3 * p / 3 - b**2 * q**2 + b**2 * q - b * q**2 + b * q - q**2 / 4 + q / 3


def moments_at_one(b, p, q) -> tuple:
    """``(mu, sigma², mu4)`` of ``SW(1)``: the mean and the 2nd and 4th central moments (CAPP, PP-S rules)."""
    mu = sw_mean(1, b, p, q)
    return mu, sw_moment(2, 1, b, p, q, centre=mu), sw_moment(4, 1, b, p, q, centre=mu)


# ------------------------------------------------------------------ the discretised mechanism


@functools.cache
def _sw_half_band(epsilon_units: int, grid_bits: int) -> int:
    """``B``: SW's half-band ``b(eps)`` in cells of ``1/m``, rounded to the nearest integer (at least 1), certified."""
    m = 1 << grid_bits
    eps = Fraction(epsilon_units, UNITS_PER_EPSILON)

    def half_band_bounds(precision: int) -> tuple[int, int]:
        low, high = exp_bracket(epsilon_units, precision)
        if low <= 1 + eps:  # the bracket must separate e^eps from 1 + eps (b's denominator)
            return 0, 1
        numerators = ((eps - 1) * low + 1, (eps - 1) * high + 1)  # positive for eps > 0
        b_low = min(numerators) / (2 * high * (high - eps - 1))  # the denominator grows with e^eps
        b_high = max(numerators) / (2 * low * (low - eps - 1))
        return math.floor(b_low * m + Fraction(1, 2)), math.floor(b_high * m + Fraction(1, 2))

    return max(1, certified(half_band_bounds))  # b·m is never a half-integer: e^eps is transcendental


@functools.cache
def band_probabilities(epsilon_units: int, grid_bits: int, half_band: int) -> tuple[int, int, int]:
    """``(P, Q, realised units)`` of a band of ``2B`` cells at ratio ``<= e^eps`` over ``m + 2B`` cells (module doc).

    Shared by every square-wave-shaped randomizer (the SW here, the Piecewise Mechanism of
    :mod:`transforms.mechanisms.ldp.mean`): they differ only in ``B``."""
    m = 1 << grid_bits
    band = 2 * half_band

    def least_q_bounds(precision: int) -> tuple[int, int]:
        low, high = exp_bracket(epsilon_units, precision)
        return math.ceil(DENOMINATOR / (m + band * high)), math.ceil(DENOMINATOR / (m + band * low))

    odd = band >> ((band & -band).bit_length() - 1)
    least = certified(least_q_bounds)
    q = least + ((DENOMINATOR // m - least) % odd)  # P = (2**64 - m·Q) / 2B is then an integer
    p, remainder = divmod(DENOMINATOR - m * q, band)
    if remainder or p <= q:
        raise ValueError(f"epsilon of {epsilon_units} units is below the resolution of the square wave"
                         f" with grid_bits={grid_bits}")
    return p, q, log_ratio_units(p, q)


@dataclass(frozen=True)
class SquareWave:
    """The discretised SW at ``epsilon_units`` on a grid of ``2**grid_bits`` steps (see the module doc).

    ``half_band`` is ``B``, ``keep``/``other`` are ``P``/``Q`` over :data:`DENOMINATOR`; ``b``, ``p``, ``q``
    are the realised continuous parameters (exact Fractions).  Build with :meth:`create`.
    """

    epsilon_units: int
    grid_bits: int
    half_band: int
    keep: int
    other: int
    realised_units: int

    @classmethod
    def create(cls, epsilon_units: int, grid_bits: int = DEFAULT_GRID_BITS) -> SquareWave:
        """The square wave at ``epsilon_units`` budget units on a grid of ``2**grid_bits`` steps."""
        _check(epsilon_units, grid_bits)
        half_band = cls.half_band_of(epsilon_units, grid_bits)
        return cls(epsilon_units, grid_bits, half_band, *band_probabilities(epsilon_units, grid_bits, half_band))

    def __post_init__(self):
        _check(self.epsilon_units, self.grid_bits)
        half_band = self.half_band_of(self.epsilon_units, self.grid_bits)
        if (half_band, *band_probabilities(self.epsilon_units, self.grid_bits, half_band)) != (
                self.half_band, self.keep, self.other, self.realised_units):
            raise ValueError(f"{type(self).__name__} parameters must come from {type(self).__name__}.create")

    @classmethod
    def half_band_of(cls, epsilon_units: int, grid_bits: int) -> int:
        """``B``, the band's half-width in cells: SW's ``b(eps)·m`` rounded (a subclass shapes its own band)."""
        return _sw_half_band(epsilon_units, grid_bits)

    @property
    def steps(self) -> int:
        """``m``: the input grid is ``0, 1/m, ..., 1`` and the output has ``m + 2B`` cells of width ``1/m``."""
        return 1 << self.grid_bits

    @property
    def cells(self) -> int:
        return self.steps + 2 * self.half_band

    @property
    def b(self) -> Fraction:
        return Fraction(self.half_band, self.steps)

    @property
    def p(self) -> Fraction:
        """Density in the band (cell probability times ``m``)."""
        return Fraction(self.keep * self.steps, DENOMINATOR)

    @property
    def q(self) -> Fraction:
        """Density outside the band."""
        return Fraction(self.other * self.steps, DENOMINATOR)

    @property
    def ratio(self) -> Fraction:
        """The largest ratio of one output's probabilities under two inputs (``<= e^eps``)."""
        return Fraction(self.keep, self.other)

    @property
    def gain(self) -> Fraction:
        """``g = 2b(p - q)``: ``E[report] = 1/2 + g·(v - 1/2)`` for the grid value ``v``."""
        return 2 * self.b * (self.p - self.q)

    def grid_index(self, values, domain: Interval | None = None, clip: bool = False) -> np.ndarray:
        """The grid point ``i`` (int64 in ``[0, m]``) nearest each value, after mapping ``domain`` to ``[0, 1]``.

        Values outside the domain raise ``ValueError`` unless ``clip`` (the reference code clips); NaN and
        infinities always raise.
        """
        x = np.asarray(values, dtype=np.float64)
        if not np.isfinite(x).all():
            raise ValueError("square wave values must be finite")
        v = x if domain is None else (x - float(domain.low)) / (float(domain.high) - float(domain.low))
        if clip:
            v = np.clip(v, 0.0, 1.0)
        elif x.size and (v.min() < 0.0 or v.max() > 1.0):
            where = "[0, 1]" if domain is None else f"[{domain.low}, {domain.high}]"
            raise ValueError(f"square wave values must lie in {where} (or pass clip=True)")
        return np.rint(v * self.steps).astype(np.int64)  # v·m is exact: m is a power of two

    def cells_from_draws(self, indices: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """The output cells ``j`` (int64 in ``[-B, m+B)``) chosen by uniform 64-bit ``draws`` at grid ``indices``."""
        band_mass = np.uint64(2 * self.half_band * self.keep)
        band_cell = (draws // np.uint64(self.keep)).astype(np.int64) + (indices - self.half_band)
        low_cell = ((draws - band_mass) // np.uint64(self.other)).astype(np.int64)  # wraps in the band: unused
        low_cell += np.where(low_cell < indices, -self.half_band, self.half_band)  # skip the band
        return np.where(draws < band_mass, band_cell, low_cell)

    def value_of(self, cells) -> np.ndarray:
        """The reported value of each cell: its midpoint ``(j + 1/2)/m`` (exact float64)."""
        return (np.asarray(cells, dtype=np.float64) + 0.5) / self.steps

    def perturb(self, values, rng: Randomness | None = None, domain: Interval | None = None,
                clip: bool = False) -> np.ndarray:
        """One report per value (float64 on ``[-b, 1+b]`` in ``[0, 1]`` units), from ``rng`` (secure by default)."""
        indices = self.grid_index(values, domain, clip)
        rng = rng or secure_randomness()
        draws = rng.uint32(2 * indices.size).view(np.uint64).reshape(indices.shape)
        return self.value_of(self.cells_from_draws(indices, draws))

    def law(self, index: int) -> np.ndarray:
        """Exact probabilities (uint64 numerators over :data:`DENOMINATOR`) of the cells ``-B .. m+B-1`` at grid
        point ``index``."""
        if not 0 <= index <= self.steps:
            raise ValueError(f"grid index must be in [0, {self.steps}], got {index}")
        weights = np.full(self.cells, self.other, dtype=np.uint64)
        weights[index:index + 2 * self.half_band] = self.keep  # cell j sits at position j + B
        return weights

    def mean(self, index: int) -> Fraction:
        """Exact ``E[report]`` at grid point ``index``."""
        return sw_mean(Fraction(index, self.steps), self.b, self.p, self.q)

    def variance(self, index: int) -> Fraction:
        """Exact ``Var(report)`` at grid point ``index``: the continuous law's minus the in-cell ``1/(12m²)``."""
        return sw_variance(Fraction(index, self.steps), self.b, self.p, self.q) - Fraction(1, 12 * self.steps**2)

    def debias(self, reports) -> np.ndarray:
        """Unbiased per-report estimates ``1/2 + (y - 1/2)/g`` of the grid values (post-processing)."""
        return 0.5 + (np.asarray(reports, dtype=np.float64) - 0.5) / float(self.gain)

    def estimate_mean(self, reports, domain: Interval | None = None) -> float:
        """The de-biased SW-direct estimate of the mean of the reporters' (grid-rounded) values, in ``domain``
        units; unbiased, unlike the paper's raw average of reports (spec trap T4)."""
        y = np.asarray(reports, dtype=np.float64)
        if y.ndim != 1 or y.size == 0:
            raise ValueError("reports must be a non-empty 1-D array")
        mean = float(self.debias(y).mean())
        return mean if domain is None else float(domain.low) + domain.width * mean


def _check(epsilon_units: int, grid_bits: int) -> None:
    if isinstance(epsilon_units, bool) or not isinstance(epsilon_units, int) \
            or not 0 < epsilon_units <= MAX_LDP_EPSILON_UNITS:
        raise ValueError(f"epsilon units must be an int in (0, {MAX_LDP_EPSILON_UNITS}], got {epsilon_units!r}")
    low, high = GRID_BITS_RANGE
    if isinstance(grid_bits, bool) or not isinstance(grid_bits, int) or not low <= grid_bits <= high:
        raise ValueError(f"grid_bits must be an int in [{low}, {high}], got {grid_bits!r}")
