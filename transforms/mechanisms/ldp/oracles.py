"""Frequency oracles of local differential privacy (GRR, OUE) with exact, conservatively rounded probabilities.

LDP-IDS (spec ``ldp_ids.md`` §3) perturbs each user's value on the user's side
with Generalized Randomized Response or Optimized Unary Encoding, chosen by the
"Ada" rule ``GRR iff d < 3e^eps + 2``.  The paper's probabilities involve
``e^eps``; here they are rationals with a power-of-two denominator ``D`` so
that a draw is an integer comparison of uniform integers and the realised
privacy loss is known exactly:

* GRR (``D = 2**64``): ``Q = ceil(D / (e^eps + d - 1))``, ``P = D - (d-1)·Q``;
  keep the value with ``p = P/D``, report each other value with ``q = Q/D``.
* OUE (``D = 2**32`` per bit): the value's bit stays 1 with ``p = 1/2``; every
  other bit becomes 1 with ``q = Q/D``, ``Q = ceil(D / (e^eps + 1))``, and stays
  0 with ``P/D``, ``P = D - Q``.

Proof obligation: the largest ratio of one output's probabilities under two
inputs is ``P/Q`` for both oracles (for OUE because ``p = 1/2`` exactly), and
``P/Q = D/Q - others <= e^eps`` because ``Q >= D/(e^eps + others)``.  ``Q`` is
certified, not trusted: ``e^eps`` is bracketed by the correctly rounded
``decimal`` exponential plus and minus one unit in the last place, and the
precision doubles until both ends of the bracket give the same ``Q``.  The
realised epsilon ``ln(P/Q)``, rounded up to budget units, is certified the same
way; ledgers check it rather than the nominal eps.  The device module
``device/wevent_client.py`` computes the same integers by a different method
(exact Taylor bounds); a test asserts they agree.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.certified import certified, exp_bracket, log_ratio_units

GRR_DENOMINATOR = 1 << 64
OUE_DENOMINATOR = 1 << 32
MAX_LDP_EPSILON_UNITS = 20 * UNITS_PER_EPSILON
"""Largest per-report epsilon (20): beyond it OUE's 2**32 resolution would give up most of the budget."""
MAX_DOMAIN = 1 << 24
ORACLES = ("grr", "oue")
GRR_VARIANCE_MODES = ("exact", "paper_printed")


@functools.cache
def choose_oracle(epsilon_units: int, d: int) -> str:
    """The "Ada" rule of LDP-IDS (Algorithm 1): GRR iff ``d < 3e^eps + 2``, else OUE; decided exactly."""
    _check(epsilon_units, d)
    threshold = Fraction(d - 2, 3)

    def decide(precision: int) -> tuple[bool, bool]:
        low, high = exp_bracket(epsilon_units, precision)
        return low > threshold, high > threshold

    return "grr" if certified(decide) else "oue"


@functools.cache
def _exact_parameters(kind: str, epsilon_units: int, d: int) -> tuple[int, int, int, int]:
    """``(P, Q, D, realised units)`` of an oracle, each certified (see the module doc)."""
    denominator = GRR_DENOMINATOR if kind == "grr" else OUE_DENOMINATOR
    others = d - 1 if kind == "grr" else 1

    def q_bounds(precision: int) -> tuple[int, int]:
        low, high = exp_bracket(epsilon_units, precision)
        return math.ceil(denominator / (high + others)), math.ceil(denominator / (low + others))

    q = certified(q_bounds)
    p = denominator - others * q
    if p <= q:  # a ratio of 1 would be pure noise: refuse rather than report nothing
        raise ValueError(f"epsilon of {epsilon_units} units is below the resolution of {kind} with d={d}")

    return p, q, denominator, log_ratio_units(p, q)


@dataclass(frozen=True)
class FrequencyOracle:
    """GRR or OUE at one budget over a domain of ``d`` values, with its exact probabilities.

    ``keep``/``other`` are the integers ``P``/``Q`` of the module doc over ``denominator``; ``p``/``q`` are
    the spec's probabilities (for OUE ``p = 1/2``).  Build with :meth:`create` (or :func:`oracle_for`).
    """

    kind: str
    epsilon_units: int
    d: int
    keep: int
    other: int
    denominator: int
    realised_units: int

    @classmethod
    def create(cls, kind: str, epsilon_units: int, d: int) -> "FrequencyOracle":
        """The oracle ``kind`` ("grr" or "oue") at ``epsilon_units`` budget units over ``d`` values."""
        if kind not in ORACLES:
            raise ValueError(f"oracle must be one of {ORACLES}, got {kind!r}")
        _check(epsilon_units, d)
        return cls(kind, epsilon_units, d, *_exact_parameters(kind, epsilon_units, d))

    def __post_init__(self):
        expected = _exact_parameters(self.kind, self.epsilon_units, self.d) if self.kind in ORACLES else None
        if expected != (self.keep, self.other, self.denominator, self.realised_units):
            raise ValueError("FrequencyOracle parameters must come from FrequencyOracle.create")

    @property
    def p(self) -> Fraction:
        """Probability that the true value (GRR) or its bit (OUE) is reported."""
        return Fraction(self.keep, self.denominator) if self.kind == "grr" else Fraction(1, 2)

    @property
    def q(self) -> Fraction:
        """Probability that a given other value (GRR) or other bit (OUE) is reported."""
        return Fraction(self.other, self.denominator)

    @property
    def ratio(self) -> Fraction:
        """The largest ratio of an output's probabilities under two inputs (``<= e^eps``)."""
        return Fraction(self.keep, self.other)

    @property
    def bits(self) -> int:
        """Size of one report: ``ceil(log2 d)`` for GRR, ``d`` for OUE (spec §6.3)."""
        return (self.d - 1).bit_length() if self.kind == "grr" else self.d

    def estimate(self, counts, reporters: int) -> np.ndarray:
        """Unbiased frequency estimates ``(C'/n' - q) / (p - q)`` from the report counts of ``n'`` reporters.

        ``counts[k]`` is the number of reports equal to k (GRR) or with bit k set (OUE); ``reporters`` is the
        number of users whose reports were counted (spec trap T1), not the population.
        """
        if reporters <= 0:
            raise ValueError(f"reporters must be positive, got {reporters}")
        values = np.asarray(counts, dtype=np.float64)
        if values.shape != (self.d,):
            raise ValueError(f"counts must have shape ({self.d},), got {values.shape}")
        q = float(self.q)
        return (values / reporters - q) / float(self.p - self.q)


def oracle_for(epsilon_units: int, d: int, kind: str | None = None) -> FrequencyOracle:
    """The oracle LocSan uses at this budget and domain (the Ada rule unless ``kind`` forces one)."""
    return FrequencyOracle.create(kind or choose_oracle(epsilon_units, d), epsilon_units, d)


def ldp_variance(epsilon: float, d: int, n: float, kind: str | None = None, grr_mode: str = "exact") -> float:
    """V(eps, n) of spec §3.4: the estimate's variance averaged over the d items, for n reporters.

    GRR: ``(d-2+e^eps)/(n(e^eps-1)^2) + (d-2)/(d·n(e^eps-1))`` (``grr_mode="paper_printed"`` drops the 1/d,
    the paper's §4.2.2 form); OUE: ``4e^eps/(n(e^eps-1)^2) + 1/(d·n)``.  ``kind=None`` applies the Ada rule
    to the nominal ``epsilon``.  A float error model (the nominal eps), not a privacy quantity.
    """
    if not (epsilon > 0 and n > 0 and d >= 2):
        raise ValueError(f"need epsilon > 0, n > 0 and d >= 2, got {epsilon}, {n}, {d}")
    if grr_mode not in GRR_VARIANCE_MODES:
        raise ValueError(f"grr_mode must be one of {GRR_VARIANCE_MODES}, got {grr_mode!r}")
    x = math.exp(epsilon)
    kind = kind or ("grr" if d < 3 * x + 2 else "oue")
    if kind == "oue":
        return 4 * x / (n * (x - 1) ** 2) + 1 / (d * n)
    average = 1 / d if grr_mode == "exact" else 1
    return (d - 2 + x) / (n * (x - 1) ** 2) + average * (d - 2) / (n * (x - 1))


def _check(epsilon_units: int, d: int) -> None:
    if isinstance(epsilon_units, bool) or not isinstance(epsilon_units, int) \
            or not 0 < epsilon_units <= MAX_LDP_EPSILON_UNITS:
        raise ValueError(f"epsilon units must be an int in (0, {MAX_LDP_EPSILON_UNITS}], got {epsilon_units!r}")
    if isinstance(d, bool) or not isinstance(d, int) or not 2 <= d <= MAX_DOMAIN:
        raise ValueError(f"domain size d must be an int in [2, {MAX_DOMAIN}], got {d!r}")
