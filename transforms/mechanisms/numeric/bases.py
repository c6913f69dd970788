"""Other base mechanisms for the clients of seed 003: Laplace, stochastic rounding (SR) and the Piecewise Mechanism.

The paper's §IV-C ("Extension to other mechanisms", Fig 9; spec ``ipp_app_capp.md`` §3.8.1) replaces the Square
Wave of SW-direct / IPP / APP by Laplace, SR or PM on data normalised to ``[-1, 1]``, the outputs mapped back by
``(v + 1)/2``.  That map is affine, so the clients keep working in ``[0, 1]`` units: a value ``v`` is ``t = 2v - 1``
for the mechanism, a deviation in ``[0, 1]`` units is half the deviation in ``t``, IPP/APP's clip to ``[-1, 1]``
is the clip to ``[0, 1]``, and every base here returns its report already mapped back, ``(t' + 1)/2``.  Each is
ε-LDP with every probability exact, sampled from the project's generator (secure by default), and says what one
report costs its sender (``realised_units``, certified, never above the nominal budget; the charges carry it),
computed as a ledger computes it from evidence: ``ln(keep/other)`` of a ``LocalReport`` for SR and PM (their exact
largest ratio of output probabilities), ``Δ/b`` of a discrete Laplace ``Statistic`` for Laplace:

* ``laplace``: ``t + Lap(2/ε)`` (spec §2.4) cannot be sampled exactly in floats (the low bits of
  ``t - (2/ε)·ln U`` leak ``t``, Mironov 2012), so it is discretised on the square wave's grid: the input is
  the grid index ``i`` of ``v`` (``v = i/m``, ``m = 2**grid_bits``), the report ``(i + Z)/m`` with ``Z`` the
  project's exact discrete Laplace of scale ``s = ceil(m/ε)`` grid steps.  Inputs differ by at most ``m``
  steps, so the largest ratio is ``e^{m/s} <= e^ε``; ``realised_units`` is the ledger's own least charge of a
  discrete Laplace statistic of sensitivity ``m`` and scale ``s``.  Unbiased for the grid value, variance
  ``Var(Z)/m²`` (≈ ``2/ε²`` in ``[0, 1]`` units, ``8/ε²`` in ``t``).
* ``sr``: Duchi et al.'s stochastic rounding as the paper reads it ("limited to outputs {−1, 1}"): ``t' = +1``
  with probability ``(1 + a·t)/2``, else ``-1``, ``a`` = ``tanh(ε/2)`` rounded down on the grid of the
  project's Hybrid Mechanism (:class:`~transforms.mechanisms.ldp.mean.HybridMechanism`, certified), one 64-bit
  draw per report; ratio ``(1 + a)/(1 - a) <= e^ε``.  The report is ``0`` or ``1`` in ``[0, 1]`` units, the raw
  (not rescaled) output: biased toward ``1/2`` with gain ``a``, like SW's raw average (the spec's recommended
  reading keeps raw averages; the rescaled ``±1/a`` would be unbiased).
* ``pm``: the Piecewise Mechanism (spec §2.4), the project's exact discretised PM
  (:class:`~transforms.mechanisms.ldp.mean.PiecewiseMechanism`, the square wave's band law with PM's
  half-band), reported unbiased: a cell midpoint ``c`` of the band law becomes ``t' = (2c - 1)/g`` (``g`` its
  exact gain, so ``E[t'] = t``), i.e. ``1/2 + (c - 1/2)/g`` in ``[0, 1]`` units.  The scaling is a fixed
  function of the cell (public), computed once in float64: it cannot leak the input.  Unlike the others' reports
  these are not dyadic rationals, so PM-IPP/APP's deviation sums are float sums (exact up to rounding, not bit
  for bit independent of their order).

CAPP is not offered for these bases: its bounds come from SW's moments (Eq. 11), and the paper omits the
mechanism-specific ones.  The formula does not transfer: for an unbiased base the "sensitivity error"
``e^{1 - E[X(1)]} - 1`` is 0 and ``δ = -sqrt(Var)`` is far below ``-1`` at the paper's budgets (``-28`` for Laplace
at ``ε_s = 0.05``), which widens CAPP's interval instead of shrinking it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.certified import log_ratio_units
from transforms.mechanisms.evidence import CERTAIN, least_charge_units
from transforms.mechanisms.ldp.mean import HybridMechanism, PiecewiseMechanism
from transforms.mechanisms.noise import Randomness, discrete_laplace, secure_randomness
from transforms.mechanisms.noise.variance import discrete_laplace_variance
from transforms.mechanisms.numeric.square_wave import DEFAULT_GRID_BITS, SquareWave

BASES = ("sw", "laplace", "sr", "pm")
LABELS = {"sw": "SW", "laplace": "Laplace", "sr": "SR", "pm": "PM"}
_HALF = 1 << 63


@dataclass(frozen=True)
class _OnGrid:
    """A base whose input is the square wave's grid ``i/m`` (the same rounding, refusals and clip)."""

    epsilon_units: int
    grid_bits: int = DEFAULT_GRID_BITS

    @property
    def steps(self) -> int:
        return 1 << self.grid_bits

    def grid_index(self, values, domain=None, clip: bool = False) -> np.ndarray:
        """:meth:`SquareWave.grid_index` (it reads only ``steps``): values to grid indices ``0..m``."""
        return SquareWave.grid_index(self, values, domain, clip)  # type: ignore[arg-type]  # reads only steps

    def perturb(self, values, rng: Randomness | None = None, domain=None, clip: bool = False) -> np.ndarray:
        """One report per value, in ``[0, 1]`` units (``(t' + 1)/2``), from ``rng`` (secure by default)."""
        indices = self.grid_index(values, domain, clip)
        return self.report(indices, rng or secure_randomness())

    def report(self, indices: np.ndarray, rng: Randomness) -> np.ndarray:
        """The reports of grid ``indices`` (each base draws its own way)."""
        raise NotImplementedError


@dataclass(frozen=True)
class LaplaceBase(_OnGrid):
    """``t + Lap(2/ε)`` discretised on the grid: the report ``(i + Z)/m``, ``Z`` discrete Laplace (module doc)."""

    def __post_init__(self):
        if self.epsilon_units < 1:
            raise ValueError(f"epsilon units must be >= 1, got {self.epsilon_units!r}")
        if self.scale > 1 << 50:
            raise ValueError(f"epsilon of {self.epsilon_units} units is too small for Laplace on this grid")

    @cached_property
    def scale(self) -> int:
        """``s = ceil(m/ε)`` in grid steps (rounded up: the realised budget ``m/s`` is at most the nominal)."""
        return -(-self.steps * UNITS_PER_EPSILON // self.epsilon_units)

    @cached_property
    def realised_units(self) -> int:
        """``m/s`` rounded up to budget units: the ledger's least charge of sensitivity ``m`` at scale ``s``."""
        return least_charge_units(CERTAIN, Fraction(self.scale), self.steps)

    def report(self, indices: np.ndarray, rng: Randomness) -> np.ndarray:
        noise = discrete_laplace(Fraction(self.scale), indices.size, rng).reshape(indices.shape)
        return (indices + noise) / float(self.steps)  # exact: |i + Z| < 2**53

    def mean(self, index: int) -> Fraction:
        """Exact ``E[report]``: the grid value (unbiased)."""
        return Fraction(index, self.steps)

    def variance(self, index: int) -> float:
        """``Var(report) = Var(Z)/m²`` (the same for every input; a float: ``Var(Z)`` is transcendental)."""
        return discrete_laplace_variance(float(self.scale)) / self.steps ** 2


@dataclass(frozen=True)
class StochasticRounding(_OnGrid):
    """Raw SR: ``1`` with probability ``(1 + a·t)/2`` (``t = 2v - 1``), else ``0``, in ``[0, 1]`` units."""

    def __post_init__(self):
        _ = self.gain  # refuses a budget below SR's resolution

    @cached_property
    def gain(self) -> int:
        """``G``: ``a = G / 2**(64 - grid_bits)``, the Hybrid Mechanism's SR (certified, rounded down)."""
        return HybridMechanism(self.epsilon_units, self.grid_bits).sr_gain

    @property
    def a(self) -> Fraction:
        """``tanh(ε/2)`` rounded down: ``E[t'] = a·t``."""
        return Fraction(self.gain, 1 << (64 - self.grid_bits))

    @property
    def keep(self) -> int:
        """Numerator of the largest ratio of one output's probabilities under two inputs, over 2**64: ``1 + a``."""
        return _HALF + self.gain * self.steps // 2

    @property
    def other(self) -> int:
        """Its denominator: ``1 - a`` over 2**64 (a ledger's ``LocalReport`` takes the pair)."""
        return _HALF - self.gain * self.steps // 2

    @cached_property
    def realised_units(self) -> int:
        return log_ratio_units(self.keep, self.other)

    def report(self, indices: np.ndarray, rng: Randomness) -> np.ndarray:
        draws = rng.uint32(2 * indices.size).view(np.uint64).reshape(indices.shape)
        shift = (self.gain * (indices - self.steps // 2)).astype(np.uint64)  # |G·(i - m/2)| < 2**63: wraps back
        return (draws < np.uint64(_HALF) + shift).astype(np.float64)

    def mean(self, index: int) -> Fraction:
        """Exact ``E[report] = P(+1) = (2**63 + G·(i - m/2)) / 2**64``."""
        return Fraction(_HALF + self.gain * (index - self.steps // 2), 1 << 64)

    def variance(self, index: int) -> Fraction:
        p = self.mean(index)
        return p * (1 - p)


@dataclass(frozen=True)
class PiecewiseBase(_OnGrid):
    """PM reported unbiased: ``1/2 + (c - 1/2)/g`` for the band law's cell midpoint ``c`` (module doc)."""

    def __post_init__(self):
        _ = self.mechanism

    @cached_property
    def mechanism(self) -> SquareWave:
        """PM's band law (:class:`PiecewiseMechanism`, a square wave with PM's half-band)."""
        return PiecewiseMechanism.create(self.epsilon_units, self.grid_bits)

    @cached_property
    def inverse_gain(self) -> float:
        return float(1 / self.mechanism.gain)

    @property
    def keep(self) -> int:
        return self.mechanism.keep

    @property
    def other(self) -> int:
        return self.mechanism.other

    @property
    def realised_units(self) -> int:
        return self.mechanism.realised_units

    def report(self, indices: np.ndarray, rng: Randomness) -> np.ndarray:
        draws = rng.uint32(2 * indices.size).view(np.uint64).reshape(indices.shape)
        cells = self.mechanism.value_of(self.mechanism.cells_from_draws(indices, draws))
        return 0.5 + (cells - 0.5) * self.inverse_gain

    def mean(self, index: int) -> Fraction:
        """Exact ``E[report]`` (with the exact gain): the grid value."""
        return Fraction(1, 2) + (self.mechanism.mean(index) - Fraction(1, 2)) / self.mechanism.gain

    def variance(self, index: int) -> Fraction:
        return self.mechanism.variance(index) / self.mechanism.gain ** 2


def randomizer(base: str, epsilon_units: int, grid_bits: int = DEFAULT_GRID_BITS):
    """The base mechanism ``base`` at ``epsilon_units`` per report (``"sw"``: the square wave itself)."""
    if base == "sw":
        return SquareWave.create(epsilon_units, grid_bits)
    kinds = {"laplace": LaplaceBase, "sr": StochasticRounding, "pm": PiecewiseBase}
    if base not in kinds:
        raise ValueError(f"base must be one of {BASES}, got {base!r}")
    return kinds[base](epsilon_units, grid_bits)

