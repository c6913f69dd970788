"""What a numeric release's estimate is, and its predicted error: one definition for both paths.

Every numeric method releases, per slot, a number computed from the average ``ȳ`` of the slot's ``n`` reports
(``[0, 1]`` units; reports are square-wave or Piecewise-Mechanism cell midpoints, CAPP's mapped onto ``[l, u]``).
The registered streams (:mod:`.streams`, simulated users) and the per-user Beam stage
(``transforms.numeric_user_methods``) both ask :func:`estimator_for` and publish :meth:`MeanEstimator.unit_estimate`
and :meth:`MeanEstimator.predicted_error`, so the two paths write the same fields by construction.

Three statistics (the release's ``statistic`` field):

* ``mean`` (SW-direct, ToPL): each report's expectation is affine in the sender's value, ``E[y] = 1/2 +
  g·(x - 1/2)`` with the public gain ``g`` of the randomizer, so ``1/2 + (ȳ - 1/2)/g`` is an **unbiased** estimate
  of the mean of the reporters' grid-rounded values.  It is not clipped to the domain (clipping would bias it;
  an estimate outside ``[low, high]`` says the noise is large).  Predicted error: ``Var_max/(g²n) + r²`` with
  ``Var_max`` the largest report variance over the domain (at ``x = 1``) and ``r = 1/(2m)`` the grid rounding.
* ``segment_mean`` (Sampling: SW-direct on each user's mean over a segment of ``L`` slots): the same de-biasing,
  an unbiased estimate of the reporters' mean over the segment ending at the slot (not of the slot's own mean).
* ``report_mean`` (IPP, APP, CAPP, PP-S, APP-S, CAPP-S, BA-SW): the square wave's input is the value plus the
  user's remembered deviations (or, for BA-SW, an earlier publication is repeated), private state the collector
  cannot undo, so no affine map of ``ȳ`` is unbiased.  The raw average of the reports is released and named so.
  Its predicted error is an upper bound computable from public facts: every report's conditional expectation lies
  in ``[lo, hi] = l + (u - l)·[(1 - g)/2, (1 + g)/2]`` whatever the state, the true mean in ``[0, 1]``, so
  ``MSE <= max(hi, 1 - lo)² + Var_max/n`` (squared worst bias plus the largest variance of the average).  For the
  small per-report budgets of a strict window split ``g`` is tiny and the bound is near ``(1/2)²``: the release
  is then close to the domain's middle whatever the data, and says so.

``predicted_error`` is in squared domain units (times ``(high - low)²``) and is a mean squared error against
the mean of the slot's reporters' values (clipped to the domain, grid-rounded): the variance for ``mean`` and
``segment_mean`` (plus the rounding), the worst-case bound for ``report_mean``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from transforms.mechanisms.numeric.square_wave import SquareWave, moments_at_one

STATISTICS = ("mean", "segment_mean", "report_mean")


@dataclass(frozen=True)
class MeanEstimator:
    """How a slot's average report becomes its released estimate (module doc), in ``[0, 1]`` units.

    ``statistic``: one of :data:`STATISTICS`; ``gain``: the randomizer's ``g``; ``low``/``high``: the affine
    map of the randomizer's output onto the reports (CAPP's ``[l, u]``, else ``[0, 1]``); ``variance``: the
    largest variance of one report (``[0, 1]`` units squared); ``rounding``: the grid rounding of a value.
    """

    statistic: str
    gain: float
    low: float
    high: float
    variance: float
    rounding: float

    def __post_init__(self):
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {self.statistic!r}")
        if not (0.0 < self.gain <= 1.0 and self.high > self.low and self.variance >= 0.0 and self.rounding >= 0.0):
            raise ValueError("an estimator needs 0 < gain <= 1, high > low and non-negative variance and rounding")

    @property
    def debiased(self) -> bool:
        return self.statistic != "report_mean"

    def unit_estimate(self, average: float) -> float:
        """The released estimate in ``[0, 1]`` units from the average of the slot's reports."""
        if not self.debiased:
            return average
        return 0.5 + (average - 0.5) / self.gain  # the reports of these methods are on [0, 1] (low 0, high 1)

    @property
    def worst_bias(self) -> float:
        """The largest ``|E[estimate] - true mean|`` over every value and state, ``[0, 1]`` units (module doc)."""
        if self.debiased:
            return self.rounding
        lo = self.low + (self.high - self.low) * (1 - self.gain) / 2
        hi = self.low + (self.high - self.low) * (1 + self.gain) / 2
        return max(hi, 1 - lo) + self.rounding

    def unit_error(self, reporters: int) -> float:
        """The predicted mean squared error of the estimate from ``reporters`` reports, ``[0, 1]`` units."""
        if reporters < 1:
            raise ValueError("a predicted error needs at least one report")
        scale = 1.0 / self.gain ** 2 if self.debiased else (self.high - self.low) ** 2
        return self.worst_bias ** 2 + self.variance * scale / reporters

    def predicted_error(self, reporters: int, width: float) -> float:
        """:meth:`unit_error` in squared domain units (``width = high - low`` of the domain)."""
        return self.unit_error(reporters) * width * width


@functools.lru_cache(maxsize=256)
def _worst_report_variance(wave: SquareWave) -> float:
    return float(moments_at_one(wave.b, wave.p, wave.q)[1])


def wave_estimator(statistic: str, wave: SquareWave, bounds: tuple = (0.0, 1.0, 0.0, 1.0)) -> MeanEstimator:
    """The estimator of reports made by ``wave`` (a square wave or the Piecewise Mechanism), mapped onto
    ``bounds[:2]`` (CAPP's output bounds; ``(0, 1)`` otherwise)."""
    low, high = float(bounds[0]), float(bounds[1])
    if statistic != "report_mean" and (low, high) != (0.0, 1.0):
        raise ValueError("only reports on [0, 1] are de-biased here")
    return MeanEstimator(statistic, float(wave.gain), low, high, _worst_report_variance(wave), 0.5 / wave.steps)


def estimator_for(method: str, wave: SquareWave, bounds: tuple = (0.0, 1.0, 0.0, 1.0)) -> MeanEstimator:
    """The estimator of the registered numeric method ``method`` whose reports ``wave`` makes (module doc).

    BA-SW: :func:`absorption_estimator`."""
    if method == "ba-sw":
        raise ValueError("BA-SW's estimator is absorption_estimator (its reports come from several waves)")
    return wave_estimator(statistic_of(method), wave, bounds)


def statistic_of(method: str) -> str:
    """The ``statistic`` a registered numeric method's mean releases carry (module doc)."""
    return {"sw-direct": "mean", "topl": "mean", "sampling": "segment_mean"}.get(method.lower(), "report_mean")


def absorption_estimator(largest: SquareWave, smallest: SquareWave) -> MeanEstimator:
    """BA-SW's ``report_mean``: a user's released value is a fresh or repeated publication of one of the waves
    from ``smallest`` (``e1``) to ``largest`` (the whole window's budget).  Its expectation lies within the
    largest wave's gain of the middle, and, a repeated publication being a fixed earlier report, its variance
    is bounded by the squared half-range of the widest output ``[-b, 1 + b]`` (the smallest budget's)."""
    half_range = 0.5 + float(smallest.b)
    return MeanEstimator("report_mean", float(largest.gain), 0.0, 1.0, half_range ** 2, 0.5 / largest.steps)
