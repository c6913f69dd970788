"""Mean estimation over a numeric domain for the LDP-IDS stream methods: the Hybrid Mechanism, made exact.

LDP-IDS estimates the mean of a numeric stream (spec ``ldp_ids.md`` §5.13,
§6.1) with the stream methods unchanged (the paper's claim 1: tasks are
orthogonal to the stream algorithms): only the users' randomizer, its
estimator and its variance ``V(eps, n) = Var*(eps)/n`` (d = 1) change.

**The randomizer.**  Each value is clipped to ``[low, top]`` (``top`` is the
truncation threshold θ, spec §6.1.2, or ``high``), mapped affinely to
``t in [-1, 1]`` and reported through the Hybrid Mechanism (HM, [42]):
Duchi's stochastic rounding (SR) at eps alone when ``eps <= 0.61``, else the
Piecewise Mechanism (PM) with probability ``alpha = 1 - e^{-eps/2}`` and SR
otherwise.  The collector de-biases each report and maps the mean back.

**Exact, discretised.**  Every probability is an integer over a power of two,
every draw an integer comparison of uniform integers from the project's
generator (secure by default):

* Input: ``t`` is rounded to the nearest point of the grid ``2i/m - 1``,
  ``i = 0..m``, ``m = 2**grid_bits`` (default 16 bits): a deterministic
  function of the value, so it costs no privacy; it moves a value by at most
  ``(top - low)/(2m)`` (7.6e-6 of the width at 16 bits).  The estimator is
  exactly unbiased for the mean of the grid values.
* SR: ``+1`` with probability ``(2**63 + G·(i - m/2)) / 2**64``, else ``-1``,
  where ``a' = G / 2**(64 - grid_bits)`` is ``tanh(eps/2) = (e^eps-1)/(e^eps+1)``
  rounded down (certified); the de-biased report is ``±1/a'``.  Its largest
  ratio is ``(2**63 + G·m/2)/(2**63 - G·m/2) = (1+a')/(1-a') <= e^eps``.
* PM: in the coordinates ``w = (y/C + 1)/2`` PM is square-wave shaped on
  ``[-b, 1+b]`` with half-band ``b = e^{-eps/2}/2`` around ``v = (t+1)/2``
  (band mass ``e^{eps/2}/(e^{eps/2}+1)``, density ratio ``e^eps``), so it is
  the discretised square wave of :mod:`transforms.mechanisms.numeric.square_wave`
  with ``B = round(m·e^{-eps/2}/2)`` cells (certified): ``m + 2B`` output cells
  of width ``1/m`` with probabilities ``P`` (band) or ``Q`` over ``2**64``,
  ``P/Q <= e^eps``, one 64-bit draw per report.  The report is the cell ``j``;
  its de-biased value ``(2j + 1 - m)/(m·g)`` with the exact gain ``g = 2b(p-q)``.
* The mixture: PM iff a uniform 32-bit draw is below ``A = floor(alpha·2**32)``
  (certified).  The branch is part of the report and independent of the
  input, so HM's largest ratio of one output's probabilities under two inputs
  is the larger of SR's and PM's: :attr:`HybridMechanism.keep` /
  :attr:`~HybridMechanism.other` are that pair of integers, and the realised
  epsilon is ``ln(keep/other)`` rounded up to budget units (what the charges
  and the ledgers use; never above the nominal budget).

**What the discretisation costs.**  The exact variance of a de-biased report
(:meth:`HybridMechanism.variance`) differs from the continuous law's by the
rounding of ``a'`` (relative 2^-47), of ``B`` (half a cell in ``b``), of ``A``
(2^-32) and the cell midpoint (the variance is lower by ``1/(3m²g²)``).
Measured at 16 bits, the worst case over the grid is within 1e-12 of the
corrected ``Var*`` for SR alone (eps <= 0.61), 2e-5 (relative) for eps in
(0.61, 4], 3e-4 at 8 and 3e-3 at 12; at 20 PM's band shrinks to one cell each
side (``b·m = 1.5``) and the variance is 1.5x the continuous one (9e-5 for
6e-5), so budgets above 12 should use ``grid_bits = 24`` (1e-4 at 20).  The
realised epsilon is below the nominal one by less than 1e-8 at 16 bits.  The
error model ``V`` uses the continuous corrected ``Var*`` (tests measure all of this).

**Var*.**  The paper's Eq. (10) for eps > 0.61 has ``(e^{eps/2}-1)^2`` where
the correct HM variance has ``(e^{eps/2}-1)`` (spec trap T3, TV-9): 4.2890 at
eps = 1, not 5.0735, and independent of ``t``.  :func:`hm_variance` gives the
corrected form (``printed=True``: Eq. (10) as printed, for the tests' power check).

**Values outside the domain** are refused when the batch is validated
(``out_of_range="refuse"``, the default) or clipped to ``[low, high]``
(``"clip"``); values above the truncation threshold θ (``threshold``, given
by the user: the paper's percentile thresholds are computed from the data and
are not private) are clipped to θ.  :attr:`MeanEstimation.last_clipped`
counts the values clipped at the last slot (computed from raw values: not
private, for evaluation only).

Simulation is user by user (``simulation="users"``; an exact aggregate of PM's
cell sums is not cheap).  Client devices run the same integers
(``wevent_client.HybridMechanism``, a test asserts they agree): a mean
request carries the public ``[low, top]`` and grid, a report is
``[branch, value]`` (``[0, ±1]`` SR, ``[1, 2j + 1 - m]`` PM), and the
collector sums them as :meth:`HybridMechanism.sums` does.
"""

from __future__ import annotations

import decimal
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.certified import bracket, certified, exp_bracket, log_ratio_units
from transforms.mechanisms.domain import NO_VALUE, Estimate, Interval
from transforms.mechanisms.ldp.budget_division import LBA, LBD, LBU, LSP
from transforms.mechanisms.ldp.oracles import MAX_LDP_EPSILON_UNITS
from transforms.mechanisms.ldp.population_division import LPA, LPD, LPU
from transforms.mechanisms.ldp.stream import Holders, LocalParams, Reports
from transforms.mechanisms.noise import Randomness, secure_randomness
from transforms.mechanisms.numeric.square_wave import DEFAULT_GRID_BITS, GRID_BITS_RANGE, SquareWave

PIECEWISE_ABOVE_UNITS = 61 * UNITS_PER_EPSILON // 100
"""HM mixes in PM only above eps = 0.61 (spec §5.13); at or below it HM is SR alone."""
MIX_DENOMINATOR = 1 << 32
OUT_OF_RANGE = ("refuse", "clip")
_HALF = 1 << 63


# ------------------------------------------------------------------ the continuous law (the error model)


def hm_variance(epsilon: float, printed: bool = False) -> float:
    """``Var*``: the worst-case variance of one de-biased HM report of ``t in [-1, 1]`` (spec §5.13, Eq. (10)).

    ``eps <= 0.61``: ``((e^eps+1)/(e^eps-1))^2`` (SR at ``t = 0``); above:
    ``e^{-eps/2}·[((e^eps+1)/(e^eps-1))^2 + (e^{eps/2}+3)/(3(e^{eps/2}-1))]`` (the same for every ``t``).
    ``printed=True`` gives Eq. (10) as printed, with ``(e^{eps/2}-1)^2`` (wrong: trap T3).  Floats, an error model.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    sr = (1 / math.tanh(epsilon / 2)) ** 2  # ((e^eps+1)/(e^eps-1))^2
    if epsilon <= 0.61:
        return sr
    s = math.exp(epsilon / 2)
    return (sr + (s + 3) / (3 * (s - 1) ** (2 if printed else 1))) / s


# ------------------------------------------------------------------ exact parameters, certified


def _half_exp_bracket(epsilon_units: int, precision: int) -> tuple[Fraction, Fraction]:
    """Exact rationals around ``e^{eps/2}``."""
    with decimal.localcontext() as context:
        context.prec = 60
        half = decimal.Decimal(epsilon_units).scaleb(-12) / 2  # exact: at most 15 significant digits
    return bracket("exp", half, precision)


@functools.cache
def _sr_gain(epsilon_units: int, grid_bits: int) -> int:
    """``G = floor(tanh(eps/2) · 2**(64 - grid_bits))``, certified (``tanh(eps/2)`` grows with ``e^eps``)."""
    scale = 1 << (64 - grid_bits)

    def bounds(precision: int) -> tuple[int, int]:
        low, high = exp_bracket(epsilon_units, precision)
        return math.floor((low - 1) / (low + 1) * scale), math.floor((high - 1) / (high + 1) * scale)

    gain = certified(bounds)
    if gain == 0:
        raise ValueError(f"epsilon of {epsilon_units} units is below the resolution of stochastic rounding")
    return gain


@functools.cache
def _mix_threshold(epsilon_units: int) -> int:
    """``A = floor((1 - e^{-eps/2}) · 2**32)``, certified: PM iff a uniform 32-bit draw is below ``A``."""

    def bounds(precision: int) -> tuple[int, int]:
        low, high = _half_exp_bracket(epsilon_units, precision)
        return (math.floor(MIX_DENOMINATOR - MIX_DENOMINATOR / low),
                math.floor(MIX_DENOMINATOR - MIX_DENOMINATOR / high))

    return certified(bounds)


@functools.cache
def _pm_half_band(epsilon_units: int, grid_bits: int) -> int:
    """``B = round(m · e^{-eps/2} / 2)`` (at least 1), certified (it falls as ``e^{eps/2}`` grows)."""
    m = 1 << grid_bits

    def bounds(precision: int) -> tuple[int, int]:
        low, high = _half_exp_bracket(epsilon_units, precision)
        return math.floor(m / (2 * high) + Fraction(1, 2)), math.floor(m / (2 * low) + Fraction(1, 2))

    return max(1, certified(bounds))  # never a half-integer: e^{eps/2} is transcendental


class PiecewiseMechanism(SquareWave):
    """PM on the square wave's grid: the same exact band law, with PM's half-band ``e^{-eps/2}/2`` (module doc).

    Inputs are grid indices ``i`` (``v = i/m``, ``t = 2v - 1``); a report is a cell ``j`` in ``[-B, m+B)``;
    ``E[2w - 1] = g·t`` for the cell midpoint ``w = (j + 1/2)/m``.
    """

    @classmethod
    def half_band_of(cls, epsilon_units: int, grid_bits: int) -> int:
        return _pm_half_band(epsilon_units, grid_bits)


@dataclass(frozen=True)
class HybridMechanism:
    """HM at ``epsilon_units`` for inputs on the grid ``t = 2i/m - 1`` (module doc); exact and certified."""

    epsilon_units: int
    grid_bits: int = DEFAULT_GRID_BITS

    def __post_init__(self):
        if isinstance(self.epsilon_units, bool) or not isinstance(self.epsilon_units, int) \
                or not 0 < self.epsilon_units <= MAX_LDP_EPSILON_UNITS:
            raise ValueError(f"epsilon units must be an int in (0, {MAX_LDP_EPSILON_UNITS}], "
                             f"got {self.epsilon_units!r}")
        low, high = GRID_BITS_RANGE
        if isinstance(self.grid_bits, bool) or not isinstance(self.grid_bits, int) \
                or not low <= self.grid_bits <= high:
            raise ValueError(f"grid_bits must be an int in [{low}, {high}], got {self.grid_bits!r}")
        _sr_gain(self.epsilon_units, self.grid_bits)  # refuses a budget below SR's resolution

    @property
    def steps(self) -> int:
        """``m``: inputs are the grid indices ``0..m``."""
        return 1 << self.grid_bits

    @cached_property
    def sr_gain(self) -> int:
        """``G``: SR's ``a' = G / 2**(64 - grid_bits)``."""
        return _sr_gain(self.epsilon_units, self.grid_bits)

    @property
    def sr_a(self) -> Fraction:
        """``a'``: ``tanh(eps/2)`` rounded down; ``E[SR report] = a'·t``."""
        return Fraction(self.sr_gain, 1 << (64 - self.grid_bits))

    @property
    def sr_pair(self) -> tuple[int, int]:
        """SR's largest ratio ``(2**63 + G·m/2, 2**63 - G·m/2)`` (over 2**64)."""
        spread = self.sr_gain * self.steps // 2
        return _HALF + spread, _HALF - spread

    @cached_property
    def piecewise(self) -> PiecewiseMechanism | None:
        """PM at the same budget, or None when HM is SR alone (``eps <= 0.61``)."""
        if self.epsilon_units <= PIECEWISE_ABOVE_UNITS:
            return None
        return PiecewiseMechanism.create(self.epsilon_units, self.grid_bits)

    @cached_property
    def mix(self) -> int:
        """``A``: a report uses PM with probability ``A / 2**32`` (0 when SR alone)."""
        return 0 if self.piecewise is None else _mix_threshold(self.epsilon_units)

    @cached_property
    def _largest(self) -> tuple[int, int]:
        sr = self.sr_pair
        pm = self.piecewise
        if pm is None or sr[0] * pm.other >= pm.keep * sr[1]:
            return sr
        return pm.keep, pm.other

    @property
    def keep(self) -> int:
        """Numerator of HM's largest ratio of one output's probabilities under two inputs (``<= e^eps``)."""
        return self._largest[0]

    @property
    def other(self) -> int:
        """Its denominator."""
        return self._largest[1]

    @cached_property
    def realised_units(self) -> int:
        """``ln(keep/other)`` rounded up to budget units: what a report costs its sender."""
        return log_ratio_units(self.keep, self.other)

    @property
    def kind(self) -> str:
        return "sr" if self.piecewise is None else "hm"

    @property
    def bits(self) -> int:
        """Size of one report: SR's sign; with PM, a branch bit and a cell index of ``ceil(log2(m + 2B))`` bits."""
        return 1 if self.piecewise is None else 1 + (self.piecewise.cells - 1).bit_length()

    # -- reports ----------------------------------------------------------------------------------------------
    def perturb(self, indices, rng: Randomness | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Each reporter's report of grid index ``indices``: ``(uses_pm, value)`` with SR's ``±1`` or PM's
        ``2j + 1 - m`` for cell ``j`` (int64; de-biased by :meth:`debias`)."""
        rng = rng or secure_randomness()
        i = np.asarray(indices, np.int64)
        if i.ndim != 1 or (i.size and (i.min() < 0 or i.max() > self.steps)):
            raise ValueError(f"grid indices must be a 1-D array in [0, {self.steps}]")
        uses_pm = (rng.uint32(i.size) < np.uint32(self.mix)) if self.mix else np.zeros(i.size, bool)
        draws = rng.uint32(2 * i.size).view(np.uint64)
        shift = (self.sr_gain * (i - self.steps // 2)).astype(np.uint64)  # |G·(i - m/2)| < 2**63: wraps back
        reports = np.where(draws < np.uint64(_HALF) + shift, 1, -1).astype(np.int64)
        if uses_pm.any():
            cells = self.piecewise.cells_from_draws(i[uses_pm], draws[uses_pm])
            reports[uses_pm] = 2 * cells + 1 - self.steps
        return uses_pm, reports

    def sums(self, indices, rng: Randomness | None = None) -> np.ndarray:
        """What the collector sums from the reports: ``[Σ SR signs, Σ PM (2j + 1 - m)]`` (int64, exact)."""
        uses_pm, reports = self.perturb(indices, rng)
        return np.array([reports[~uses_pm].sum(), reports[uses_pm].sum()], np.int64)

    @cached_property
    def _scales(self) -> tuple[float, float]:
        pm = self.piecewise
        return float(1 / self.sr_a), (0.0 if pm is None else float(1 / (self.steps * pm.gain)))

    def debias(self, uses_pm, reports) -> np.ndarray:
        """Per-report unbiased estimates of ``t``: ``s/a'`` (SR), ``(2j + 1 - m)/(m·g)`` (PM)."""
        sr, pm = self._scales
        return np.asarray(reports, np.float64) * np.where(uses_pm, pm, sr)

    def estimate(self, sums, reporters: int) -> float:
        """The unbiased estimate of the reporters' mean ``t`` from :meth:`sums`."""
        if reporters <= 0:
            raise ValueError(f"reporters must be positive, got {reporters}")
        sums = np.asarray(sums)
        if sums.shape != (2,):
            raise ValueError(f"sums must have shape (2,), got {sums.shape}")
        sr, pm = self._scales
        return (float(sums[0]) * sr + float(sums[1]) * pm) / reporters

    # -- exact moments --------------------------------------------------------------------------------------
    def t(self, index: int) -> Fraction:
        """The grid value ``2i/m - 1``."""
        return Fraction(2 * index, self.steps) - 1

    def mean(self, index: int) -> Fraction:
        """Exact ``E[de-biased report]`` at grid index ``index`` (it is ``t``: unbiased)."""
        sr = 2 * Fraction(_HALF + self.sr_gain * (index - self.steps // 2), 1 << 64) - 1  # E[sign]
        pm = self.piecewise
        if pm is None:
            return sr / self.sr_a
        alpha = Fraction(self.mix, MIX_DENOMINATOR)
        return (1 - alpha) * sr / self.sr_a + alpha * (2 * pm.mean(index) - 1) / pm.gain

    def variance(self, index: int) -> Fraction:
        """Exact ``Var[de-biased report]`` at grid index ``index`` (PM's reports are cell midpoints)."""
        second = 1 / self.sr_a ** 2  # E[(±1/a')^2]
        pm = self.piecewise
        if pm is not None:
            alpha = Fraction(self.mix, MIX_DENOMINATOR)
            w = pm.mean(index)
            second = (1 - alpha) * second + alpha * 4 * (pm.variance(index) + (w - Fraction(1, 2)) ** 2) / pm.gain ** 2
        return second - self.mean(index) ** 2

    def worst_variance(self) -> Fraction:
        """The largest :meth:`variance` over the grid: at ``t = 0`` or ``t = ±1`` (it is even and quadratic in t)."""
        return max(self.variance(0), self.variance(self.steps // 2))


# ------------------------------------------------------------------ the mean task of the stream methods


@dataclass(frozen=True)
class MeanTask:
    """What a mean request's users run: HM at one budget, with the map of ``[low, top]`` onto ``[-1, 1]``.

    It has the interface :class:`~transforms.mechanisms.ldp.stream.LocalMechanism` uses of a frequency
    oracle (``kind``, ``epsilon_units``, ``d``, ``keep``/``other``, ``realised_units``, ``bits``,
    ``estimate(sums, n)``), so the stream methods run it unchanged.
    """

    mechanism: HybridMechanism
    low: float
    top: float
    d = 1

    kind = property(lambda self: self.mechanism.kind)
    epsilon_units = property(lambda self: self.mechanism.epsilon_units)
    keep = property(lambda self: self.mechanism.keep)
    other = property(lambda self: self.mechanism.other)
    realised_units = property(lambda self: self.mechanism.realised_units)
    bits = property(lambda self: self.mechanism.bits)

    @property
    def half_width(self) -> float:
        return (float(self.top) - float(self.low)) / 2

    def sums(self, indices: np.ndarray, rng: Randomness) -> np.ndarray:
        """The sums the reports of users at grid ``indices`` add up to (see :meth:`HybridMechanism.sums`)."""
        return self.mechanism.sums(indices, rng)

    def estimate(self, sums, reporters: int) -> np.ndarray:
        """The mean of the reporters' (clipped, grid-rounded) values, in the domain's units: length-1 float64."""
        return np.array([float(self.low) + self.half_width * (1 + self.mechanism.estimate(sums, reporters))])


@functools.cache
def mean_task(epsilon_units: int, grid_bits: int, low: float, top: float) -> MeanTask:
    """The (cached) task of a budget: built once per budget a method uses."""
    return MeanTask(HybridMechanism(epsilon_units, grid_bits), low, top)


@dataclass(frozen=True)
class ClippedInterval(Interval):
    """Real values clipped to ``[low, high]`` by the mechanism: every finite value is accepted (NaN: none)."""

    def all_report(self, values: np.ndarray) -> bool:
        missing = np.isnan(values)
        if np.isinf(values).any():
            raise ValueError("values must be finite (NaN marks a row that reports nothing)")
        return not missing.any()


@dataclass(frozen=True, kw_only=True)
class MeanParams(LocalParams):
    """A local stream method estimating the mean of real values in ``[low, high]`` with HM (spec §5.13).

    ``out_of_range``: values outside ``[low, high]`` are refused (``"refuse"``: the batch fails validation)
    or clipped (``"clip"``); ``threshold``: the truncation θ of spec §6.1.2 (values above it are clipped to
    it; chosen by the user, not from the data); ``grid_bits``: the input grid and PM's cells (module doc).
    ``bins`` is 1 (one mean); the frequency-oracle options keep their defaults.
    """

    low: float | None = None
    high: float | None = None
    bins: int = 1
    out_of_range: str = "refuse"
    threshold: float | None = None
    grid_bits: int = DEFAULT_GRID_BITS

    def validate_options(self) -> None:
        if self.bins != 1:
            raise ValueError(f"a mean estimate has one bin: bins must be 1, got {self.bins!r}")
        if self.oracle is not None or self.grr_variance != "exact":
            raise ValueError("mean estimation uses the Hybrid Mechanism: oracle and grr_variance do not apply")
        if self.simulation != "users":
            raise ValueError(f"mean estimation simulates users one by one: simulation must be 'users', "
                             f"got {self.simulation!r}")
        if self.low is None or self.high is None:
            raise ValueError("mean estimation needs the values' domain: give low and high")
        if self.out_of_range not in OUT_OF_RANGE:
            raise ValueError(f"out_of_range must be one of {OUT_OF_RANGE}, got {self.out_of_range!r}")
        interval = Interval(self.low, self.high)  # validates low < high, both finite
        if self.threshold is not None and (isinstance(self.threshold, bool) or not isinstance(self.threshold, (
                int, float)) or not interval.low < self.threshold <= interval.high):
            raise ValueError(f"threshold (θ) must lie in ({self.low}, {self.high}], got {self.threshold!r}")
        HybridMechanism(self.epsilon_units, self.grid_bits)  # validates grid_bits

    @cached_property
    def domain(self) -> Interval:
        """Real values in ``[low, high]`` (any finite value when they are clipped)."""
        return (ClippedInterval if self.out_of_range == "clip" else Interval)(self.low, self.high)

    @property
    def top(self) -> float:
        """The upper end of what is reported: θ, or ``high``."""
        return self.high if self.threshold is None else self.threshold


class TrueMeanForEvaluation:
    """What a mean-estimating mechanism keeps of the truth for evaluations: the last slot's true mean (NOT private)."""

    _true_mean: float = math.nan

    def exact_mean_for_evaluation(self) -> float:
        """The TRUE mean of the last slot's holders' (clipped, grid-rounded) values: NOT private (NaN: none)."""
        return self._true_mean

    def exact_histogram_for_evaluation(self) -> np.ndarray:
        """The counts view of the true mean (as the release's: the mean times the registered users): NOT private."""
        registered = int(np.count_nonzero(self.population.cohort_of >= 0))
        mean = self._true_mean if math.isfinite(self._true_mean) else 0.0
        return np.array([round(mean * registered)], np.int64)


class MeanEstimation(TrueMeanForEvaluation):
    """Mixin making a local stream method estimate a mean with HM: the method's rounds run unchanged.

    The population records each value's grid index (so ``carry_forward`` keeps it); holders are users with
    one; requests are answered by :meth:`simulate` user by user; estimates are in the domain's units.
    """

    params_type = MeanParams
    params: MeanParams
    estimates = Estimate.MEAN

    def __init__(self, params: MeanParams):
        super().__init__(params)
        self.last_clipped = 0  # values clipped at the last slot (raw data: not private, evaluation only)
        self._true_mean = math.nan

    def counted(self, batch: SlotBatch) -> SlotBatch:
        """Each value as its grid index (NaN: NO_VALUE), after clipping to ``[low, top]``."""
        p = self.params
        values = batch.values.astype(np.float64, copy=False)
        missing = np.isnan(values)
        unit = (np.clip(values, p.low, p.top) - p.low) / (float(p.top) - float(p.low))
        indices = np.rint(np.where(missing, 0.0, unit) * (1 << p.grid_bits)).astype(np.int64)
        return SlotBatch(batch.users, np.where(missing, NO_VALUE, indices), batch.requirements)

    def _holders(self, batch: SlotBatch, groups: np.ndarray) -> Holders:
        values = batch.values.astype(np.float64, copy=False)
        self.last_clipped = int(np.count_nonzero((values < self.params.low) | (values > self.params.top)))
        holders = super()._holders(self.counted(batch), groups)
        grid = holders.value_of[holders.users] / (1 << self.params.grid_bits)
        low, top = float(self.params.low), float(self.params.top)
        self._true_mean = low + float(grid.mean()) * (top - low) if grid.size else math.nan
        return holders

    def oracle(self, units: int) -> MeanTask:
        p = self.params
        return mean_task(units, p.grid_bits, float(p.low), float(p.top))

    def variance(self, units: int, reporters: int) -> float:
        """``V(eps, n) = Var*(eps) · ((top - low)/2)^2 / n``: the mean's variance in the domain's units."""
        if units <= 0 or reporters <= 0:
            return math.inf
        half_width = (float(self.params.top) - float(self.params.low)) / 2
        return hm_variance(units / UNITS_PER_EPSILON) * half_width ** 2 / reporters

    def simulate(self, request: Reports, holders: Holders, rng: Randomness) -> np.ndarray:
        """The sums of the reports of ``request``'s users, each user's HM run on their grid index."""
        indices = holders.value_of[request.users]
        if indices.size and indices.min() < 0:
            raise ValueError("only holders can report")
        return request.oracle.sums(indices, rng)



def _mean_method(base: type, name: str) -> type:
    return type(f"{base.__name__}Mean", (MeanEstimation, base),
                {"name": name, "__doc__": f"{base.__name__} estimating a mean with HM (spec §5.13).",
                 "__module__": __name__})


LBUMean = _mean_method(LBU, "lbu-mean")
LSPMean = _mean_method(LSP, "lsp-mean")
LBDMean = _mean_method(LBD, "lbd-mean")
LBAMean = _mean_method(LBA, "lba-mean")
LPUMean = _mean_method(LPU, "lpu-mean")
LPDMean = _mean_method(LPD, "lpd-mean")
LPAMean = _mean_method(LPA, "lpa-mean")

MEAN_METHODS = {cls.name: cls for cls in (LBUMean, LSPMean, LBDMean, LBAMean, LPUMean, LPDMean, LPAMean)}
"""The LDP-IDS stream methods estimating a mean, by registered name."""
