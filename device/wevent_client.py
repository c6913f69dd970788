"""The device side of local differential privacy for event streams: one file, standard library only.

See ``device/README.md`` for how a device embeds it.

A phone (or any device) embeds this module as is.  It holds the user's value,
perturbs it with a frequency oracle (GRR or OUE, chosen by the LDP-IDS rule
``GRR iff d < 3e^eps + 2``), keeps the user's own w-event budget (what it spent
in every window of ``w`` consecutive slots, in exact integer units of
``10^-12`` epsilon) and answers the collector's requests with reports.  The
collector never sees a raw value, and a request the user's own budget cannot
pay, or a second request of one method for a slot already answered, is refused
(:class:`RequestRefused`).

Exact probabilities.  Every output probability is a rational with a power of
two denominator ``D`` (``2**64`` for GRR, ``2**32`` per OUE bit) and is drawn
by comparing uniform integers from :mod:`secrets`; no float decides a draw.
With ``x = e^eps``:

* GRR: ``Q = ceil(D / (x + d - 1))``, ``P = D - (d-1)·Q``; the true value is
  kept with probability ``P/D``, each other value has ``Q/D``.
* OUE: the true bit stays 1 with probability ``1/2``; every other bit becomes 1
  with ``Q/D``, ``Q = ceil(D / (x + 1))``, and stays 0 with ``P/D = (D-Q)/D``.

Rounding ``Q`` up can only lower the ratio: ``P/Q = D/Q - (d-1) <= x``, so the
realised privacy loss ``ln(P/Q)`` never exceeds eps.  The realised eps, in
budget units, is the smallest integer ``u`` with ``e^(u/10^12) >= P/Q`` (rounded
up); reports carry it and the budget is charged with it.  Both integers are
certified with exact rational bounds on ``e^x`` (Taylor partial sums and their
tail bound), so the result does not depend on any floating-point or decimal
rounding.  The collector's core (``transforms/mechanisms/ldp``) computes the
same integers independently; a test asserts they agree.

Numeric values: :class:`SquareWave` is the discretised Square Wave of
``transforms/mechanisms/numeric/square_wave.py`` with the same integers (``B``,
``P``, ``Q`` and the realised eps, certified here with the same Taylor bounds); its
report is an output cell, drawn with one 64-bit integer.  The numeric methods of
seed 003 that run on it (``NumericClient``) are in the sibling file
``numeric_client.py``.  :class:`HybridMechanism` is the
LDP-IDS mean randomizer (``transforms/mechanisms/ldp/mean.py``, the same certified
integers): a request with ``oracle`` ``sr`` or ``hm`` names the public interval
``[low, high]`` and grid, and the device reports ``[branch, value]``.

Requests and reports are plain dicts (JSON): see ``schemas/request.avsc`` and
``schemas/report.avsc``.

Refusals.  No refusal or error message ever holds the user's value (an app may
log or forward them): a value that does not fit a request is refused as
``invalid`` with the bounds it should lie in, never with what it was.
"""

from __future__ import annotations

import bisect
import decimal
import functools
import hashlib
import json
import math
import secrets
from fractions import Fraction

UNITS_PER_EPSILON = 10**12
"""One epsilon is this many budget units (as ``transforms/mechanisms/budget.py``)."""
GRR_DENOMINATOR = 1 << 64
OUE_DENOMINATOR = 1 << 32
MAX_LDP_EPSILON_UNITS = 20 * UNITS_PER_EPSILON
"""Largest per-report epsilon accepted (e^20 keeps OUE's 2**32 resolution meaningful)."""
ORACLES = ("grr", "oue")


class RequestRefused(ValueError):
    """A request the client will not answer; ``code`` is one of
    ``invalid``, ``wrong_user``, ``duplicate``, ``stale``, ``budget``."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


# ------------------------------------------------------------------ exact arithmetic


def _exp_bounds(units, terms: int) -> tuple[Fraction, Fraction]:
    """Rational ``lo <= e^(units/10^12) <= hi`` (``units`` an int or a Fraction): a Taylor partial sum and its
    geometric tail bound."""
    scale = UNITS_PER_EPSILON
    # sum_{k<=K} u^k / (scale^k k!) over the common denominator scale^K K!
    numerator = sum(units**k * scale ** (terms - k) * (_factorial(terms) // _factorial(k)) for k in range(terms + 1))
    lower = Fraction(numerator, scale**terms * _factorial(terms))
    ratio = Fraction(units, scale * (terms + 2))  # bounds t_{k+1}/t_k for every k > K
    next_term = Fraction(units ** (terms + 1), scale ** (terms + 1) * _factorial(terms + 1))
    return lower, lower + next_term / (1 - ratio)


@functools.cache
def _factorial(n: int) -> int:
    return 1 if n <= 1 else n * _factorial(n - 1)


def _exp_at_least(units: int, value: Fraction) -> bool:
    """Whether ``e^(units/10^12) >= value``, decided exactly (more Taylor terms until the bounds settle it)."""
    terms = 16 + 3 * units // UNITS_PER_EPSILON  # > eps, so the tail bound holds
    while True:
        lower, upper = _exp_bounds(units, terms)
        if lower >= value:
            return True
        if upper < value:
            return False
        terms *= 2  # e^x is irrational for rational x != 0: the bounds separate it from `value` eventually


def _decimal_exp(units: int) -> decimal.Decimal:
    with decimal.localcontext() as context:
        context.prec = 50
        return (decimal.Decimal(units) / UNITS_PER_EPSILON).exp()


@functools.cache
def oracle_parameters(oracle: str, epsilon_units: int, d: int) -> tuple[int, int, int]:
    """``(P, Q, D)`` of the oracle at eps = ``epsilon_units``/10^12 over ``d`` values (see the module doc)."""
    _check_oracle_arguments(oracle, epsilon_units, d)
    denominator = GRR_DENOMINATOR if oracle == "grr" else OUE_DENOMINATOR
    others = d - 1 if oracle == "grr" else 1

    def small_enough(q: int) -> bool:  # D/q - others <= e^eps, i.e. the ratio P/Q stays within e^eps
        return _exp_at_least(epsilon_units, Fraction(denominator, q) - others)

    # Q is the least q that is small_enough: a decimal guess, then exact steps to the certified least one.
    q = max(1, int(decimal.Decimal(denominator) / (_decimal_exp(epsilon_units) + others)) + 1)
    while q > 1 and small_enough(q - 1):
        q -= 1
    while not small_enough(q):
        q += 1
    p = denominator - others * q
    if p <= q:  # a ratio of 1 would be pure noise: refuse rather than report nothing
        raise ValueError(f"epsilon={units_to_decimal_string(epsilon_units)} is below the resolution of {oracle}"
                         f" with d={d}")
    return p, q, denominator


@functools.cache
def realised_epsilon_units(oracle: str, epsilon_units: int, d: int) -> int:
    """The realised eps ``ln(P/Q)`` in budget units, rounded up: the least u with ``e^(u/10^12) >= P/Q``."""
    p, q, _ = oracle_parameters(oracle, epsilon_units, d)
    return _log_ratio_units(p, q)


@functools.cache
def _log_ratio_units(p: int, q: int) -> int:
    """``ln(p/q)`` in budget units rounded up: the least u with ``e^(u/10^12) >= p/q``."""
    ratio = Fraction(p, q)
    with decimal.localcontext() as context:
        context.prec = 50
        units = max(1, int((decimal.Decimal(p) / q).ln() * UNITS_PER_EPSILON))  # a guess
    while not _exp_at_least(units, ratio):
        units += 1
    while units > 1 and _exp_at_least(units - 1, ratio):
        units -= 1
    return units


@functools.cache
def choose_oracle(epsilon_units: int, d: int) -> str:
    """The LDP-IDS "Ada" rule: GRR iff ``d < 3e^eps + 2``, else OUE (exact comparison)."""
    return "grr" if _exp_at_least(epsilon_units, Fraction(d - 2, 3)) else "oue"


def report_bits(oracle: str, d: int) -> int:
    """Size of one report: ``ceil(log2 d)`` bits for GRR, ``d`` for OUE."""
    return (d - 1).bit_length() if oracle == "grr" else d


def _check_oracle_arguments(oracle: str, epsilon_units: int, d: int) -> None:
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES}, got {oracle!r}")
    if type(epsilon_units) is not int or not 0 < epsilon_units <= MAX_LDP_EPSILON_UNITS:
        raise ValueError(f"epsilon units must be an int in (0, {MAX_LDP_EPSILON_UNITS}], got {epsilon_units!r}")
    if type(d) is not int or not 2 <= d <= 1 << 24:
        raise ValueError(f"domain size must be an int in [2, 2**24], got {d!r}")


def epsilon_units_from_string(text: str) -> int:
    """Exact budget units of a decimal string; ``ValueError`` unless it is a positive multiple of 10^-12."""
    if not isinstance(text, str):
        raise ValueError(f"epsilon must be a decimal string, got {text!r}")  # noqa: TRY004
    try:
        value = Fraction(decimal.Decimal(text.strip()))
    except (ArithmeticError, ValueError):
        raise ValueError(f"epsilon must be a decimal string, got {text!r}") from None
    units = value * UNITS_PER_EPSILON
    if units.denominator != 1 or units <= 0:
        raise ValueError(f"epsilon must be a positive multiple of 1e-12, got {text!r}")
    return int(units)


def units_to_decimal_string(units: int) -> str:
    """Exact decimal text of ``units`` epsilon, e.g. ``150000000000 -> '0.15'``."""
    whole, frac = divmod(int(units), UNITS_PER_EPSILON)
    return str(whole) if frac == 0 else f"{whole}.{frac:012d}".rstrip("0")


# ------------------------------------------------------------------ randomizers


def perturb(oracle: str, value: int, epsilon_units: int, d: int, randbits=secrets.randbits) -> list[int]:
    """One report of ``value`` in ``[0, d)``: ``[reported value]`` for GRR, the d bits for OUE.

    ``randbits(k)`` returns a uniform k-bit int; the default is :func:`secrets.randbits` (tests may pass the
    ``getrandbits`` of a seeded ``random.Random``, never a device).
    """
    if type(value) is not int or not 0 <= value < d:
        raise ValueError(f"value must be an int in [0, {d})")  # never the value (module doc, Refusals)
    p, q, _ = oracle_parameters(oracle, epsilon_units, d)
    if oracle == "grr":
        draw = randbits(64)
        if draw < p:
            return [value]
        other = (draw - p) // q
        return [other + (other >= value)]
    return [int(randbits(32) < (1 << 31)) if k == value else int(randbits(32) < q) for k in range(d)]


class SquareWave:
    """The discretised Square Wave for a numeric value (``transforms/mechanisms/numeric/square_wave.py``).

    The value is mapped to ``[0, 1]`` by ``(value - low)/(high - low)`` and rounded to the nearest of the
    grid points ``i/m`` (``m = 2**grid_bits``); the report is an output cell ``j`` in ``[-B, m + B)``, whose
    value is ``(j + 1/2)/m``.  Each of the ``2B`` band cells ``i - B <= j < i + B`` has probability
    ``P/2**64``, each of the ``m`` others ``Q/2**64`` (``2B·P + m·Q = 2**64``), so one uniform 64-bit draw
    picks the cell by integer comparison.  ``B`` is ``b(eps)·m`` rounded (at least 1), ``Q`` the least integer
    with ``P/Q <= e^eps`` that makes ``P`` an integer; both decided with exact Taylor bounds on ``e^eps``.
    """

    DENOMINATOR = 1 << 64

    def __init__(self, epsilon_units: int, grid_bits: int = 16, piecewise: bool = False):
        if type(epsilon_units) is not int or not 0 < epsilon_units <= MAX_LDP_EPSILON_UNITS:
            raise ValueError(f"epsilon units must be an int in (0, {MAX_LDP_EPSILON_UNITS}], got {epsilon_units!r}")
        if type(grid_bits) is not int or not 4 <= grid_bits <= 24:
            raise ValueError(f"grid_bits must be an int in [4, 24], got {grid_bits!r}")
        self.epsilon_units = epsilon_units
        self.steps = 1 << grid_bits
        if piecewise:  # the Piecewise Mechanism: the same band law with half-band B = round(m·e^{-eps/2}/2)
            self.half_band = piecewise_half_band(epsilon_units, grid_bits)
            self.keep, self.other = band_probabilities(epsilon_units, grid_bits, self.half_band)
        else:
            self.half_band, self.keep, self.other = square_wave_parameters(epsilon_units, grid_bits)
        self.realised_units = _log_ratio_units(self.keep, self.other)

    def grid_index(self, value: float, low: float = 0.0, high: float = 1.0, clip: bool = False) -> int:
        """The nearest grid point (half-way to even) of ``value`` in ``[low, high]``; outside raises unless
        ``clip``."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError("value must be a finite number")  # never the value itself (module doc, Refusals)
        v = (float(value) - float(low)) / (float(high) - float(low))
        if clip:
            v = min(max(v, 0.0), 1.0)
        elif not 0.0 <= v <= 1.0:
            raise ValueError(f"value must lie in [{low}, {high}]")
        return round(v * self.steps)

    def cell(self, index: int, draw: int) -> int:
        """The output cell that the uniform 64-bit ``draw`` picks at grid point ``index``."""
        band_mass = 2 * self.half_band * self.keep
        if draw < band_mass:
            return index - self.half_band + draw // self.keep
        other = (draw - band_mass) // self.other  # the low cells left to right, skipping the band
        return other - self.half_band if other < index else other + self.half_band

    def perturb(self, value: float, low: float = 0.0, high: float = 1.0, clip: bool = False,
                randbits=secrets.randbits) -> int:
        """One report of ``value``: an output cell (see :meth:`cell_value`)."""
        return self.cell(self.grid_index(value, low, high, clip), randbits(64))

    def cell_value(self, cell: int) -> float:
        """The reported value of ``cell`` in ``[0, 1]`` units: its midpoint."""
        return (cell + 0.5) / self.steps


@functools.cache
def square_wave_parameters(epsilon_units: int, grid_bits: int = 16) -> tuple[int, int, int]:
    """``(B, P, Q)`` of the discretised Square Wave (see :class:`SquareWave`)."""
    steps = 1 << grid_bits
    eps = Fraction(epsilon_units, UNITS_PER_EPSILON)
    terms = 16 + 3 * epsilon_units // UNITS_PER_EPSILON
    while True:  # b = ((eps-1)x + 1) / (2x(x - eps - 1)) over the bracket of x = e^eps, until B is decided
        lower, upper = _exp_bounds(epsilon_units, terms)
        if lower > 1 + eps:  # the numerator is monotone in x, the denominator increasing (and positive)
            numerators = ((eps - 1) * lower + 1, (eps - 1) * upper + 1)
            least = min(numerators) / (2 * upper * (upper - eps - 1))
            most = max(numerators) / (2 * lower * (lower - eps - 1))
            rounded = int(least * steps + Fraction(1, 2))
            if rounded == int(most * steps + Fraction(1, 2)):
                break
        terms *= 2
    half_band = max(1, rounded)
    return (half_band, *band_probabilities(epsilon_units, grid_bits, half_band))


@functools.cache
def band_probabilities(epsilon_units: int, grid_bits: int, half_band: int) -> tuple[int, int]:
    """``(P, Q)`` over ``2**64`` of a band of ``2B`` cells among ``m + 2B``: ``Q`` the least with ``P/Q <= e^eps``."""
    steps, band = 1 << grid_bits, 2 * half_band

    def small_enough(q: int) -> bool:  # P/Q <= e^eps with P = (2**64 - m·q) / 2B
        return _exp_at_least(epsilon_units, Fraction(SquareWave.DENOMINATOR - steps * q, band * q))

    q = int(decimal.Decimal(SquareWave.DENOMINATOR) / (steps + band * _decimal_exp(epsilon_units))) + 1
    while q > 1 and small_enough(q - 1):
        q -= 1
    while not small_enough(q):
        q += 1
    odd = band
    while odd % 2 == 0:
        odd //= 2
    q += (SquareWave.DENOMINATOR // steps - q) % odd  # P is an integer
    p, remainder = divmod(SquareWave.DENOMINATOR - steps * q, band)
    if remainder or p <= q:
        raise ValueError(f"epsilon={units_to_decimal_string(epsilon_units)} is below the resolution of the"
                         f" square wave with grid_bits={grid_bits}")
    return p, q


def _certified_floor(function, epsilon_units: int, half: bool = False) -> int:
    """``floor(function(x))`` for ``x = e^eps`` (or ``e^{eps/2}``) and ``function`` monotone in ``x``: more
    Taylor terms until both ends of the bracket floor alike."""
    units = Fraction(epsilon_units, 2) if half else epsilon_units
    terms = 16 + 3 * epsilon_units // UNITS_PER_EPSILON
    while True:
        lower, upper = _exp_bounds(units, terms)
        low, high = math.floor(function(lower)), math.floor(function(upper))
        if low == high:
            return low
        terms *= 2


@functools.cache
def piecewise_half_band(epsilon_units: int, grid_bits: int) -> int:
    """The Piecewise Mechanism's half-band ``B = round(m·e^{-eps/2}/2)`` cells (at least 1), certified."""
    steps = 1 << grid_bits
    return max(1, _certified_floor(lambda s: Fraction(steps) / (2 * s) + Fraction(1, 2), epsilon_units, half=True))


HM_PIECEWISE_ABOVE_UNITS = 61 * UNITS_PER_EPSILON // 100
"""The Hybrid Mechanism mixes in the Piecewise Mechanism only above eps = 0.61; at or below it, SR alone."""
MEAN_ORACLES = ("sr", "hm")


class HybridMechanism:
    """The Hybrid Mechanism for a mean (LDP-IDS §5.13), discretised as ``transforms/mechanisms/ldp/mean.py``.

    The value is clipped to ``[low, top]`` and rounded to the grid index ``i`` of ``t = 2i/m - 1``.  With
    probability ``A/2**32`` (0 when eps <= 0.61) it is reported through PM, a square wave of half-band
    ``B = round(m·e^{-eps/2}/2)`` cells (the report ``2j + 1 - m`` for the cell ``j``); otherwise through
    stochastic rounding (SR), ``+1`` when a uniform 64-bit draw is below ``2**63 + G·(i - m/2)``, else ``-1``,
    with ``G = floor(tanh(eps/2)·2**(64 - grid_bits))``.  Every integer is certified with the exact bounds
    above, the same as the collector's; the realised eps is the larger of SR's and PM's ``ln(P/Q)``.
    """

    def __init__(self, epsilon_units: int, grid_bits: int = 16):
        if type(epsilon_units) is not int or not 0 < epsilon_units <= MAX_LDP_EPSILON_UNITS:
            raise ValueError(f"epsilon units must be an int in (0, {MAX_LDP_EPSILON_UNITS}], got {epsilon_units!r}")
        if type(grid_bits) is not int or not 4 <= grid_bits <= 24:
            raise ValueError(f"grid_bits must be an int in [4, 24], got {grid_bits!r}")
        self.epsilon_units, self.grid_bits, self.steps = epsilon_units, grid_bits, 1 << grid_bits
        scale = 1 << (64 - grid_bits)
        self.sr_gain = _certified_floor(lambda x: (x - 1) / (x + 1) * scale, epsilon_units)
        if self.sr_gain == 0:
            raise ValueError(f"epsilon={units_to_decimal_string(epsilon_units)} is below the resolution of SR")
        spread = self.sr_gain * self.steps // 2
        pairs = [(1 << 63) + spread, (1 << 63) - spread]
        self.mix, self.half_band = 0, 0
        if epsilon_units > HM_PIECEWISE_ABOVE_UNITS:
            self.mix = _certified_floor(lambda s: (1 << 32) - Fraction(1 << 32) / s, epsilon_units, half=True)
            self.half_band = piecewise_half_band(epsilon_units, grid_bits)
            self.keep, self.other = band_probabilities(epsilon_units, grid_bits, self.half_band)
            if pairs[0] * self.other < self.keep * pairs[1]:
                pairs = [self.keep, self.other]
        else:
            self.keep = self.other = 0
        self.realised_units = _log_ratio_units(*pairs)

    @property
    def oracle(self) -> str:
        return "hm" if self.mix else "sr"

    def grid_index(self, value: float, low: float, top: float) -> int:
        """The grid index of ``value`` clipped to ``[low, top]`` (round half to even, as the collector's)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError("value must be a finite number")  # never the value itself (module doc, Refusals)
        unit = (min(max(float(value), float(low)), float(top)) - float(low)) / (float(top) - float(low))
        return round(unit * self.steps)

    def perturb(self, value: float, low: float, top: float, randbits=secrets.randbits) -> list[int]:
        """One report: ``[0, ±1]`` through SR or ``[1, 2j + 1 - m]`` through PM's cell ``j``."""
        index = self.grid_index(value, low, top)
        uses_pm = bool(self.mix) and randbits(32) < self.mix
        draw = randbits(64)
        if not uses_pm:
            return [0, 1 if draw < (1 << 63) + self.sr_gain * (index - self.steps // 2) else -1]
        band_mass = 2 * self.half_band * self.keep
        if draw < band_mass:
            cell = index - self.half_band + draw // self.keep
        else:
            other = (draw - band_mass) // self.other
            cell = other - self.half_band if other < index else other + self.half_band
        return [1, 2 * cell + 1 - self.steps]


def public_group(user: str, window: int) -> int:
    """This user's group under LPU with public groups: it reports at the slots t with (t - 1) mod window == group."""
    digest = hashlib.sha256(b"wevent-lpu-group\x00" + user.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % window


@functools.cache
def hybrid_mechanism(epsilon_units: int, grid_bits: int = 16) -> HybridMechanism:
    """The (cached) Hybrid Mechanism of a budget and grid."""
    return HybridMechanism(epsilon_units, grid_bits)


def _check_mean_request(request: dict, units: int) -> None:
    """A mean request names its domain ``[low, high]`` (high: the truncation θ where one is used), one value, and
    the oracle the budget implies."""
    low, high, grid_bits = request.get("low"), request.get("high"), request.get("grid_bits") or 16
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high)) \
            or not low < high:
        raise ValueError(f"a mean request needs finite low < high, got {low!r}, {high!r}")
    if request["domain_size"] != 1:
        raise ValueError(f"a mean request has domain_size 1, got {request['domain_size']!r}")
    if hybrid_mechanism(units, grid_bits).oracle != request["oracle"]:
        raise ValueError(f"at epsilon {request['epsilon']} the Hybrid Mechanism is "
                         f"{hybrid_mechanism(units, grid_bits).oracle!r}, not {request['oracle']!r}")


# ------------------------------------------------------------------ the client


class WEventClient:
    """One user's device: answers requests while every window of ``window`` slots spends at most ``budget``.

    ``value_of(slot)`` returns the user's value at a slot: an int in ``[0, d)`` for frequencies, a number for a
    mean request (clipped to the request's interval).  Slots may be answered out of
    order within one window: a request for a slot ``window`` or more before the latest answered one is refused
    as ``stale``, and the spent budget is kept for the slots a window of an acceptable request can contain
    (the last ``2·window - 1``).  :meth:`state` / :meth:`from_state` persist the
    bookkeeping (JSON) across restarts.
    """

    def __init__(self, user: str, window: int, budget: str, value_of, *, randbits=secrets.randbits):
        if not isinstance(user, str) or not user:
            raise ValueError(f"user must be a non-empty string, got {user!r}")
        if type(window) is not int or window < 1:
            raise ValueError(f"window must be an int >= 1, got {window!r}")
        self.user = user
        self.window = window
        self.budget_units = epsilon_units_from_string(budget)
        self._value_of = value_of
        self._randbits = randbits
        self._slots: list[int] = []  # answered slots, sorted
        self._spent: dict[int, int] = {}  # slot -> realised units charged (every method answered there)
        self._methods: dict[int, set[str]] = {}  # slot -> the methods answered there

    def window_spent(self, slot: int) -> int:
        """The most any window of ``window`` slots containing ``slot`` has spent (units)."""
        low = bisect.bisect_left(self._slots, slot - self.window + 1)
        high = bisect.bisect_right(self._slots, slot + self.window - 1)
        near = self._slots[low:high]
        # The fullest window containing `slot` can be taken to start at `slot` or at an answered slot before it.
        starts = [t for t in near if t <= slot] + [slot]
        return max(sum(self._spent[t] for t in near if start <= t < start + self.window) for start in starts)

    def respond(self, request: dict) -> dict:
        """The report answering ``request``; raises :class:`RequestRefused` (with a ``code``) otherwise."""
        slot, oracle, units, d = self._parse(request)
        self.check_slot(slot, request["method"])
        if oracle in MEAN_ORACLES:
            hybrid = hybrid_mechanism(units, request.get("grid_bits") or 16)
            charge = hybrid.realised_units

            def report_of(value):
                return hybrid.perturb(value, request["low"], request["high"], self._randbits)
        else:
            charge = realised_epsilon_units(oracle, units, d)

            def report_of(value):
                return perturb(oracle, value, units, d, self._randbits)
        self.check_budget(slot, charge)
        try:
            payload = report_of(self._value_of(slot))
        except ValueError as error:  # this device's value does not fit the request: refused, nothing charged
            raise RequestRefused("invalid", str(error)) from None
        self.record_charge(slot, request["method"], charge)
        return {"request_id": request.get("request_id"), "stream": request["stream"], "user": self.user,
                "slot": slot, "method": request["method"], "oracle": oracle, "epsilon": request["epsilon"],
                "realised_epsilon": units_to_decimal_string(charge), "domain_size": d, "report": payload}

    def check_slot(self, slot: int, method: str) -> None:
        """Refuse a second answer of ``method`` at ``slot``, or a slot older than the retained window."""
        if method in self._methods.get(slot, ()):
            raise RequestRefused("duplicate", f"slot {slot} was already answered for {method}")
        if self._slots and slot <= self._slots[-1] - self.window:
            raise RequestRefused("stale", f"slot {slot} is older than the retained window")

    def check_budget(self, slot: int, charge: int) -> None:
        """Refuse a charge that would take a window containing ``slot`` over the budget."""
        spent = self.window_spent(slot)
        if spent + charge > self.budget_units:
            raise RequestRefused("budget", f"a window containing slot {slot} has spent "
                                 f"{units_to_decimal_string(spent)} of {units_to_decimal_string(self.budget_units)};"
                                 f" this request needs {units_to_decimal_string(charge)}")

    def record_charge(self, slot: int, method: str, charge: int) -> None:
        """Charge ``slot`` for an answer of ``method`` and forget what no later window can reach."""
        if slot not in self._spent:
            bisect.insort(self._slots, slot)
        self._spent[slot] = self._spent.get(slot, 0) + charge
        self._methods.setdefault(slot, set()).add(method)
        # A later request is for a slot s > latest - window (else stale); its windows reach back to
        # s - window + 1 > latest - 2·window + 1, so older slots can go.
        horizon = self._slots[-1] - 2 * self.window + 1
        while self._slots[0] <= horizon:
            old = self._slots.pop(0)
            del self._spent[old]
            self._methods.pop(old, None)

    def _parse(self, request: dict) -> tuple[int, str, int, int]:
        if not isinstance(request, dict):
            raise RequestRefused("invalid", f"a request must be a dict, not {type(request).__name__}")
        missing = [k for k in ("stream", "user", "slot", "method", "epsilon", "domain_size") if k not in request]
        if missing:
            raise RequestRefused("invalid", f"missing fields {missing}")
        if request["user"] != self.user:
            raise RequestRefused("wrong_user", f"request for {request['user']!r}, this is {self.user!r}")
        if not all(isinstance(request[k], str) for k in ("stream", "method")) \
                or not isinstance(request.get("request_id", ""), (str, type(None))):
            raise RequestRefused("invalid", "stream and method must be strings, request_id a string or null")
        slot, d = request["slot"], request["domain_size"]
        if type(slot) is not int or slot < 0:
            raise RequestRefused("invalid", f"slot must be an int >= 0, got {slot!r}")
        try:
            units = epsilon_units_from_string(request["epsilon"])
            if request.get("oracle") in MEAN_ORACLES:
                _check_mean_request(request, units)
                return slot, request["oracle"], units, d
            _check_oracle_arguments(request.get("oracle") or "grr", units, d)
            oracle = request.get("oracle") or choose_oracle(units, d)
        except ValueError as error:
            raise RequestRefused("invalid", str(error)) from None
        return slot, oracle, units, d

    def state(self) -> str:
        """The budget bookkeeping as JSON (user, window, budget and the retained spent slots)."""
        return json.dumps({"user": self.user, "window": self.window,
                           "budget": units_to_decimal_string(self.budget_units),
                           "spent": [[t, units_to_decimal_string(self._spent[t]), sorted(self._methods.get(t, ()))]
                                     for t in self._slots]})

    @classmethod
    def from_state(cls, text: str, value_of, *, randbits=secrets.randbits) -> WEventClient:
        """A client continuing the bookkeeping saved by :meth:`state`."""
        data = json.loads(text)
        client = cls(data["user"], data["window"], data["budget"], value_of, randbits=randbits)
        for slot, spent, *methods in data["spent"]:  # states saved before methods were kept have none
            client._slots.append(int(slot))
            client._spent[int(slot)] = epsilon_units_from_string(spent)
            client._methods[int(slot)] = set(methods[0]) if methods else set()
        return client
