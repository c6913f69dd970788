"""LDP-IDS extensions of two central-DP stream methods: LP-/LB-DSATw and LP-/LB-RescueDP (spec ``ldp_ids.md`` §5.10-§5.11).

The ``LP-`` (population) versions sample their reporters from the shared pool
of :mod:`.population_division` (a user who reported at ``s`` is available
again at ``s + w``), always with the full ``ε``: w-event ε-LDP holds by
construction, whatever the sizes below.  The ``LB-`` (budget) versions ask
every holder, with budgets they keep in a window of their own (the last
``w - 1`` slots' spends): a slot spends only what that window leaves of ``ε``,
so no user's ``w`` consecutive reports sum above ``ε``.  The charges, built
by the base from the reports, let the ledger confirm both.

**DSATw** (Algorithm 4).  ``n1 = floor(βn)`` users (LB: ``floor(βε)`` units)
are for the dissimilarity M1, ``n2 = floor((1-β)n)`` (LB: what M1's window
leaves of ``ε``) for at most ``C`` publications per window of
``floor(n2/C)`` each.  M1's ``dis`` (Eq. (3)) is compared with a threshold
``T_t`` that a PID controller moves so that the sampling rate approaches
``C/w``.  Chosen readings (spec §10 item 15, trap T19):

* (a) a slot is skipped, with no M1 and no controller update (§10 item 20,
  as printed), when the window's publication resources left,
  ``n_rm = n2 - Σ_{i=t-w+1}^{t-1} |U_{i,2}|``, are below one publication's
  ``floor(n2/C)`` (the printed ``n_rm <= 0`` would overspend on a remainder;
  it is not offered), or when ``floor(n2/C) = 0``.  Such a slot is
  ``NULLIFIED``: nothing can be published in it.
* (b) M1 takes ``floor(n1/w)`` per slot, mirroring LPD/LBD
  (``dissimilarity_sizing="window"``, the default); ``"cutoff"`` takes the
  printed ``floor(n1/C)`` with a capacity guard: never more than what the
  last ``w - 1`` slots' M1 left of ``n1``, so M1 and M2 together stay within
  ``n`` users (LB: ``ε``) per window and the pool cannot run dry.
* (c) the rate is ``count / min(t, w)``, ``count`` the publications of the
  last ``w - 1`` slots (counted, not ``Σ|U_{i,2}| / floor(n2/C)``, which is
  the same while ``n`` does not change); the update reads ``T_{t-1}`` on
  the right-hand side and clips ``T_t`` into ``[0, 2]``.
* ``E_t = |count/min(t,w) - C/w|``, ``e_t = |E_t - σ| / σ`` (as printed) and
  ``u_t`` is the PID of :meth:`ControlledParams.pid`; a publication needs
  ``dis >= T_t`` (Algorithm 4's test, not LPD's strict one).
* the window's spends are the sizes *asked for* (M1's planned size, a
  publication's sample; LB: the units requested), whether or not everyone
  answered: the guards can only be stricter than the reports sent.
* ``cutoff`` ``C`` defaults to ``max(1, w // 2)``; ``1 <= C < w`` (``C = 1``
  when ``w = 1``, the one value there).  Defaults ``σ = 0.1``, ``T = 0`` and the
  PID gains ``(K_p, K_i, K_d) = (0.9, 0.1, 0)`` are **unverified** (the
  paper's values are in an unavailable appendix; the gains are the spec's
  recollection of DSAT/FAST/RescueDP).
* LB-DSATw (not spelled out in the paper): M1 spends ``floor(floor(βε)/w)``
  per slot as LBD; the publication pool is what ``w`` such shares leave of
  ``ε`` (``"cutoff"`` sizing: ``ε - floor(βε)``); a publication spends
  ``floor(pool/C)``.

**RescueDP** (Algorithm 5).  No M1: at a sampling slot (``t >= l + I``,
``l`` the last sampling slot) ``n_t = min(floor(p·n_A), n_max)`` available
users report with ``ε``, ``p = min(φ·ln(I + 1), p_max)`` and ``n_A`` the
users the last ``w - 1`` slots did not use (LB: every holder reports with
``ε_t = min(floor(p·ε_rm), ε_max)``, ``ε_rm`` what the last ``w - 1`` slots
left of ``ε``).  Chosen readings (spec §10 item 16):

* a per-bin Kalman filter with a random-walk model: the prior variance grows
  by ``Q`` (``process_noise``) every slot, the measurement noise ``R`` is
  ``V(ε, n_t)`` of the oracle the reporters used (LB: ``V(ε_t, holders)``),
  the filter starts diffuse (infinite variance, so the printed ``x = 0``
  carries no weight): the first measurement is taken as it is, and every
  posterior is then a convex combination of estimates that sum to 1; the
  release is the posterior, and between sampling slots ``r_{t-1}``;
* the feedback error is the mean absolute difference over bins between the
  posterior and the last release; ``δ`` is the PID of the recent errors;
* the interval update divides ``δ`` by the standard deviation
  ``sqrt(V)``, not by the printed ``Var[c_t]`` (the two sides of the printed
  ratio differ in units: a variance against an absolute error), and rounds to
  the nearest integer, at least 1: ``I = max(1, round(I + θ(1 - (δ/sqrt(V))²)))``;
* a sampling slot whose sample is empty (``n_t = 0`` or no holder) repeats
  ``r_{t-1}`` and the next slot samples instead;
* defaults ``φ = 0.2``, ``p_max = 0.6``, ``Q = 1e-4``, ``θ = 2`` and the PID gains are
  **unverified**; ``n_max`` / ``ε_max`` default to no cap.

**PID** (both): ``u_t = K_p e_t + K_i · mean(e over the last integral_span
errors) + K_d (e_t - e_{t-1})`` (FAST's form: the integral is averaged so
that its gain does not scale with the span; no derivative at the first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from transforms.mechanisms.base import ReleaseKind
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp.budget_division import AdaptiveBudget
from transforms.mechanisms.ldp.population_division import AdaptivePopulation
from transforms.mechanisms.ldp.stream import Holders, HomogeneousLocalMechanism, LocalDecision, LocalParams, Rounds
from transforms.mechanisms.noise import Randomness

DISSIMILARITY_SIZINGS = ("window", "cutoff")
THRESHOLD_RANGE = (0.0, 2.0)
MAX_INTERVAL = 2**31
"""RescueDP's sampling interval never exceeds this (a bound only huge gains could reach)."""


def _check_number(name: str, value, low: float, high: float = math.inf, low_open: bool = False) -> None:
    """A finite real in ``[low, high]`` (``(low, high]`` with ``low_open``), or a one-line ValueError."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value > high or value < low or (low_open and value == low):
        bounds = f"{'(' if low_open else '['}{low}, {high}{']' if math.isfinite(high) else ')'}"
        raise ValueError(f"{name} must be a finite number in {bounds}, got {value!r}")


def _check_integer(name: str, value, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ControlledParams(LocalParams):
    """The PID controller's gains and the span of its integral term (defaults unverified: see the module)."""

    proportional_gain: float = 0.9
    integral_gain: float = 0.1
    derivative_gain: float = 0.0
    integral_span: int = 5

    def __post_init__(self):
        super().__post_init__()
        for name in ("proportional_gain", "integral_gain", "derivative_gain"):
            _check_number(name, getattr(self, name), 0.0)
        _check_integer("integral_span", self.integral_span, 1)

    def pid(self, errors: np.ndarray) -> float:
        """``u_t`` from the recent errors (oldest first, ``e_t`` last)."""
        derivative = errors[-1] - errors[-2] if errors.size > 1 else 0.0
        return float(self.proportional_gain * errors[-1] + self.integral_gain * errors[-self.integral_span:].mean()
                     + self.derivative_gain * derivative)


def remember(errors: np.ndarray, error: float, span: int) -> np.ndarray:
    """``errors`` with ``error`` appended, keeping what the PID reads (the last ``max(span, 2)``)."""
    return np.append(errors, error)[-max(span, 2):]


def shift_in(history: np.ndarray, *spent: int) -> np.ndarray:
    """The per-slot spends of the last ``w - 1`` slots (newest first, one row per kind) after this slot's."""
    if history.shape[-1] == 0:
        return history
    return np.concatenate([np.array(spent, np.int64).reshape(history.shape[:-1] + (1,)), history[..., :-1]], axis=-1)


# -- DSATw ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class DSATwParams(ControlledParams):
    """DSATw: the cutoff ``C``, the error scale ``σ``, the prior threshold ``T`` and M1's sizing (module docstring)."""

    cutoff: int | None = None
    sigma: float = 0.1
    prior_threshold: float = 0.0
    dissimilarity_sizing: str = "window"

    def __post_init__(self):
        super().__post_init__()
        if self.cutoff is not None:
            c = self.cutoff
            if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c < max(self.window, 2):
                raise ValueError(f"cutoff (C) must be an integer with 1 <= C < window={self.window} "
                                 f"(C = 1 when window = 1), got {c!r}")
        _check_number("sigma", self.sigma, 0.0, low_open=True)
        _check_number("prior_threshold", self.prior_threshold, *THRESHOLD_RANGE)
        if self.dissimilarity_sizing not in DISSIMILARITY_SIZINGS:
            raise ValueError(f"dissimilarity_sizing must be one of {DISSIMILARITY_SIZINGS}, "
                             f"got {self.dissimilarity_sizing!r}")

    @property
    def c(self) -> int:
        """The cutoff ``C`` in force (default ``max(1, w // 2)``)."""
        return default_cutoff(self.window) if self.cutoff is None else self.cutoff


def default_cutoff(window: int) -> int:
    """DSATw's default cutoff ``C`` for a window ``w``."""
    return max(1, window // 2)


class _DSATw(HomogeneousLocalMechanism):
    """The window of spends and the PID-steered threshold that LP- and LB-DSATw share (users or budget units)."""

    params_type = DSATwParams
    params: DSATwParams

    def __init__(self, params: DSATwParams):
        super().__init__(params)
        self.spent = np.zeros((2, self.params.window - 1), np.int64)  # M1 and M2 at t-1, t-2, ...
        self.threshold = float(self.params.prior_threshold)
        self.errors = np.zeros(0)

    def plan(self, total1: int, total2: int) -> tuple[int, int] | None:
        """M1's and one publication's resources at this slot, or None when no publication fits (skip, reading a)."""
        p = self.params
        publication = total2 // p.c
        if publication == 0 or total2 - int(self.spent[1].sum()) < publication:
            return None
        per_slot = total1 // (p.window if p.dissimilarity_sizing == "window" else p.c)
        return max(0, min(per_slot, total1 - int(self.spent[0].sum()))), publication  # the capacity guard

    def steer(self) -> float:
        """``T_t`` from ``T_{t-1}``: lowered while the window's rate is below ``C/w``, raised otherwise."""
        p = self.params
        gap = np.count_nonzero(self.spent[1]) / min(self.slot, p.window) - p.c / p.window
        self.errors = remember(self.errors, abs(abs(gap) - p.sigma) / p.sigma, p.integral_span)
        u = p.pid(self.errors)
        self.threshold = float(np.clip(self.threshold - u if gap < 0 else self.threshold + u, *THRESHOLD_RANGE))
        return self.threshold

    def record(self, dissimilarity: int, publication: int) -> None:
        self.spent = shift_in(self.spent, dissimilarity, publication)

    def method_state(self) -> dict[str, np.ndarray]:
        return {**super().method_state(), "spent": self.spent, "threshold": np.array(self.threshold),
                "errors": self.errors}

    def load_method_state(self, state: dict[str, np.ndarray]) -> None:
        super().load_method_state(state)
        self.spent = np.array(state["spent"], np.int64).reshape(2, self.params.window - 1)
        self.threshold = float(state["threshold"])
        self.errors = np.array(state["errors"], np.float64)


class LPDSATw(_DSATw, AdaptivePopulation):
    """LP-DSATw (Algorithm 4): M1 and at most ``C`` publications per window from the shared pool of users."""

    name = "lp-dsatw"

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        p = self.params
        plan = self.plan(p.share_of(holders.registered), p.rest_of(holders.registered))
        if plan is None:
            self.record(0, 0)
            return LocalDecision(ReleaseKind.NULLIFIED, None, math.inf)
        dissimilarity_users, publication_users = plan
        dis, pool = yield from self.dissimilarity_round(holders, rng, dissimilarity_users)
        asked = 0
        if dis >= self.steer():
            decision, asked = yield from self.publish(pool, publication_users, rng)
        else:
            decision = LocalDecision(ReleaseKind.SKIPPED, None, self.variance(p.epsilon_units, publication_users))
        self.record(dissimilarity_users, asked)  # the sizes asked for (M1's: at most that many were available)
        return decision


class LBDSATw(_DSATw, AdaptiveBudget):
    """LB-DSATw: every holder reports for M1 at every slot, and at most ``C`` publications per window."""

    name = "lb-dsatw"

    def totals(self) -> tuple[int, int]:
        """M1's and the publications' budget units per window (together at most ``ε``)."""
        p = self.params
        if p.dissimilarity_sizing == "window":
            return p.share_of(p.epsilon_units), self.publication_pool
        return p.share_of(p.epsilon_units), p.epsilon_units - p.share_of(p.epsilon_units)

    def largest_report_units(self) -> int:
        p, (total1, total2) = self.params, self.totals()
        return max(total1 // (p.window if p.dissimilarity_sizing == "window" else p.c), total2 // p.c)

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        plan = self.plan(*self.totals())
        if plan is None:
            self.record(0, 0)
            return LocalDecision(ReleaseKind.NULLIFIED, None, math.inf)
        dissimilarity_units, publication_units = plan
        dis = yield from self.dissimilarity_round(holders, dissimilarity_units)
        publishing = dis >= self.steer()  # False when nobody holds a value (dis = -inf)
        if publishing:
            decision = yield from self.publication_round(holders.users, publication_units)
        else:
            decision = LocalDecision(ReleaseKind.SKIPPED, None, self.variance(publication_units, holders.users.size))
        self.record(dissimilarity_units if holders.users.size else 0, publication_units if publishing else 0)
        return decision


# -- RescueDP ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RescueDPParams(ControlledParams):
    """RescueDP: ``p_max``, ``φ`` (``scale``), the filter's ``Q`` and the interval gain ``θ`` (module docstring)."""

    max_portion: float = 0.6
    scale: float = 0.2
    process_noise: float = 1e-4
    interval_gain: float = 2.0

    def __post_init__(self):
        super().__post_init__()
        _check_number("max_portion (p_max)", self.max_portion, 0.0, 1.0, low_open=True)
        _check_number("scale (phi)", self.scale, 0.0, low_open=True)
        _check_number("process_noise (Q)", self.process_noise, 0.0, low_open=True)
        _check_number("interval_gain (theta)", self.interval_gain, 0.0, low_open=True)

    def portion(self, interval: int) -> Fraction:
        """``p = min(φ·ln(I + 1), p_max)``, as the exact value of that float."""
        return Fraction(min(self.scale * math.log(interval + 1), self.max_portion))


@dataclass(frozen=True, kw_only=True)
class LPRescueDPParams(RescueDPParams):
    """LP-RescueDP's parameters: ``max_users`` is ``n_max`` (None: no cap)."""

    max_users: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.max_users is not None:
            _check_integer("max_users (n_max)", self.max_users, 1)


@dataclass(frozen=True, kw_only=True)
class LBRescueDPParams(RescueDPParams):
    """LB-RescueDP's parameters: ``max_report_epsilon`` is ``ε_max`` (None: no cap)."""

    max_report_epsilon: float | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.max_report_epsilon is not None:
            to_units(self.max_report_epsilon, "max_report_epsilon")

    @property
    def max_report_units(self) -> int:
        cap = self.epsilon_units if self.max_report_epsilon is None else to_units(self.max_report_epsilon)
        return min(cap, self.epsilon_units)


class _RescueDP(HomogeneousLocalMechanism):
    """The sampling interval, the Kalman filter and the window of spends that LP- and LB-RescueDP share."""

    params: RescueDPParams

    def __init__(self, params: RescueDPParams):
        super().__init__(params)
        self.spent = np.zeros(self.params.window - 1, np.int64)  # users (LP) or units (LB) at t-1, t-2, ...
        self.interval = 1                 # I
        self.last_sample = 0              # l
        self.prior_variance = math.inf    # the filter's variance of x (the last release is its mean)
        self.errors = np.zeros(0)

    def due(self) -> bool:
        """Predict one slot ahead (the variance grows by ``Q``); True when this slot samples."""
        self.prior_variance += self.params.process_noise
        return self.slot >= self.last_sample + self.interval

    def correct(self, decision: LocalDecision) -> LocalDecision:
        """Filter a fresh measurement (``R`` = its ``predicted_error``), feed the error back, move ``I``."""
        p, measurement_noise = self.params, decision.predicted_error
        diffuse = math.isinf(self.prior_variance)  # before the first measurement
        gain = 1.0 if diffuse else self.prior_variance / (self.prior_variance + measurement_noise)
        posterior = self.last_estimate + gain * (decision.estimate - self.last_estimate)
        self.prior_variance = gain * measurement_noise  # (1 - K)·P = K·R
        self.errors = remember(self.errors, float(np.mean(np.abs(posterior - self.last_estimate))), p.integral_span)
        delta = p.pid(self.errors)
        moved = self.interval + p.interval_gain * (1 - (delta / math.sqrt(measurement_noise)) ** 2)
        self.interval = max(1, math.floor(min(moved, MAX_INTERVAL) + 0.5))
        self.last_sample = self.slot
        return replace(decision, estimate=posterior)

    def method_state(self) -> dict[str, np.ndarray]:
        return {**super().method_state(), "spent": self.spent, "interval": np.array(self.interval),
                "last_sample": np.array(self.last_sample), "prior_variance": np.array(self.prior_variance),
                "errors": self.errors}

    def load_method_state(self, state: dict[str, np.ndarray]) -> None:
        super().load_method_state(state)
        self.spent = np.array(state["spent"], np.int64)
        self.interval = int(state["interval"])
        self.last_sample = int(state["last_sample"])
        self.prior_variance = float(state["prior_variance"])
        self.errors = np.array(state["errors"], np.float64)


class LPRescueDP(_RescueDP, AdaptivePopulation):
    """LP-RescueDP (Algorithm 5): at sampling slots, a portion of the users the window left reports with ``ε``."""

    name = "lp-rescuedp"
    params_type = LPRescueDPParams
    params: LPRescueDPParams

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        p = self.params
        asked, decision = 0, LocalDecision(ReleaseKind.SKIPPED, None, math.inf)
        if self.due():
            left = max(holders.registered - int(self.spent.sum()), 0)  # n_A
            users = math.floor(p.portion(self.interval) * left)
            users = users if p.max_users is None else min(users, p.max_users)
            decision, asked = yield from self.publish(self.available(holders), users, rng)
        self.spent = shift_in(self.spent, asked)
        return self.correct(decision) if decision.kind is ReleaseKind.FRESH else decision


class LBRescueDP(_RescueDP, AdaptiveBudget):
    """LB-RescueDP: at sampling slots every holder reports with a portion of what the window left of ``ε``."""

    name = "lb-rescuedp"
    params_type = LBRescueDPParams
    params: LBRescueDPParams

    def largest_report_units(self) -> int:
        p = self.params
        return min(math.floor(Fraction(p.max_portion) * p.epsilon_units), p.max_report_units)  # p <= p_max

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        p = self.params
        units, decision = 0, LocalDecision(ReleaseKind.SKIPPED, None, math.inf)
        if self.due() and holders.users.size:
            left = p.epsilon_units - int(self.spent.sum())  # ε_rm
            units = min(math.floor(p.portion(self.interval) * left), p.max_report_units, left)
            if units:
                decision = yield from self.publication_round(holders.users, units)
        self.spent = shift_in(self.spent, units)
        return self.correct(decision) if decision.kind is ReleaseKind.FRESH else decision


EXTENSIONS = {cls.name: cls for cls in (LPDSATw, LBDSATw, LPRescueDP, LBRescueDP)}
