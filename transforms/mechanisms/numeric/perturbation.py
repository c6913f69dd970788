"""The per-user client algorithms of seed 003: SW-direct, IPP, APP and CAPP (spec ``ipp_app_capp.md`` §3.1-§3.4).

Each user perturbs their own numeric stream ``x_1, x_2, ...`` (values in ``[0, 1]``) with the Square Wave
mechanism, feeding the deviation ``d_t = x_t - x'_t`` of earlier reports back into the next input (§3.0: the
ORIGINAL value minus the RELEASED, denormalised value, trap T9):

* **SW-direct**: ``x'_t = SW(x_t)``;
* **IPP**: ``x'_t = SW(clip(x_t + d_{t-1}))``: the last deviation only;
* **APP**: ``x'_t = SW(clip(x_t + D))`` with ``D`` the sum of the remembered deviations;
* **CAPP**: APP whose SW runs on ``[l_in, u_in]`` and whose output is mapped onto ``[l, u]`` by the clip
  parameter ``δ = e_s(ε_s) - e_d(ε_s)`` (§3.4, :func:`capp_delta`).  The bounds follow the reference code by
  default (``bound_mode="ref"``: ``l = δ, u = 1 - δ``, input bounds ``[min(l, 0), max(u, 1)]``: the output is
  shrunk toward 1/2 for the paper's small budgets); ``"paper_literal"`` is Alg. 2 as printed (``l = -δ,
  u = 1 + δ``, trap T2) and ``"consistent_shrink"`` is Alg. 2 with the reference's sign.

**Where the strict reading differs from the paper (trap T1).**  The paper splits the window budget as
``ε_s = ε/w`` and lets APP/CAPP remember every past deviation.  A report then depends on every earlier value,
so a change inside one window moves every later report, and on a stream longer than ``w`` no per-slot split
is w-event private.  Here the deviation memory is **bounded** by default: APP and CAPP remember the last ``h``
deviations (default ``h = w``), IPP the last one (``h = 1``), SW-direct none, and a report at slot ``t``
depends on the values of slots ``t - h .. t`` only (earlier *reports* are public).  A change within ``w``
consecutive slots then touches at most ``w + h`` reports, hence the strict budget ``ε_s = ε/(w + h)``
(``budget="strict"``, the default).  The paper's unbounded memory (``unbounded=True``) is available only
with a periodic reset (``reset=R``: the state restarts every ``R`` slots, as the reference restarts every
query; the memory is then at most ``R - 1``) or behind the flag ``not_w_event_private=True``, which marks
every result as not w-event private.  The paper's ``ε_s = ε/w`` (``budget="paper"``) is accepted for
SW-direct (no memory), for the reference protocol (``reset <= w`` and each query run on its own,
:func:`perturb_queries`: a query of at most ``w`` reports spends at most ``ε``) or behind the same flag.

**Exactness.**  Values enter on the square wave's grid (``i/m``, ``m = 2**grid_bits``: a deterministic
rounding of at most ``1/(2m)``), reports are cell midpoints (``(j + 1/2)/m``) and CAPP's δ is snapped to the
grid (at most ``1/(2m)`` off the formula), so every deviation, every memory sum and every CAPP report is a
dyadic rational that float64 holds exactly: sums do not depend on their order, a run resumed from saved state
continues identically, and the slow per-user reference of the tests agrees bit for bit.  Draws come from the
project's generator (secure by default): per slot one 64-bit draw per reporting user, in user order.

**Other base mechanisms** (spec §3.8.1, Fig 9): ``base="laplace"``, ``"sr"`` or ``"pm"`` replaces the square
wave of SW-direct / IPP / APP (:mod:`.bases`: exact, ε-LDP, reports mapped back to ``[0, 1]`` units); the default
``base="sw"`` is the square wave.  CAPP is refused with another base (its bounds are SW's).

**State.**  A user's state is a row of :class:`ClientState`: the remembered deviations (a ring of ``h``
float64 cells, or one accumulating cell for unbounded memory) and the slots since the last reset.  Plain
numpy rows, so a Beam per-user stage can keep them in state cells (``docs/numeric_ldp.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_units
from transforms.mechanisms.noise import Randomness, secure_randomness
from transforms.mechanisms.numeric.bases import randomizer
from transforms.mechanisms.numeric.square_wave import (DEFAULT_GRID_BITS, SquareWave, deviation_variance_at_one,
                                                       sw_mean, sw_parameters)

METHODS = ("sw", "ipp", "app", "capp")
BUDGETS = ("strict", "paper")
BOUND_MODES = ("ref", "consistent_shrink", "paper_literal")
FIXED_MEMORY = {"sw": 0, "ipp": 1}
"""The deviations SW-direct and IPP remember (APP and CAPP: a parameter)."""


# ------------------------------------------------------------------ CAPP's clip parameter (spec §3.4)


def capp_delta(epsilon_s: float) -> float:
    """``δ = e_s - e_d`` at the per-slot budget ``epsilon_s`` (PAPER Eq. 11, worst case ``x = 1``).

    ``e_s = exp(1 - E[SW(1)]) - 1`` ("sensitivity error"), ``e_d = sqrt(Var(1 - SW(1)))`` ("discarding
    error").  A public function of the budget: the bounds leak nothing.  Positive below ``ε_s ≈ 0.40788``.
    """
    b, p, q = sw_parameters(epsilon_s)
    return math.expm1(1 - sw_mean(1, b, p, q)) - math.sqrt(deviation_variance_at_one(b, p, q))


def capp_bounds(delta: float, bound_mode: str = "ref") -> tuple[float, float, float, float]:
    """``(l, u, l_in, u_in)``: CAPP's output bounds and input normalisation bounds for clip parameter ``delta``."""
    if bound_mode == "paper_literal":
        low, high = -delta, 1 + delta
        low_in, high_in = low, high
    elif bound_mode == "ref":
        low, high = delta, 1 - delta
        low_in, high_in = min(low, 0.0), max(high, 1.0)
    elif bound_mode == "consistent_shrink":
        low, high = delta, 1 - delta
        low_in, high_in = low, high
    else:
        raise ValueError(f"bound_mode must be one of {BOUND_MODES}, got {bound_mode!r}")
    if not (high > low and high_in > low_in):
        raise ValueError(f"CAPP needs u > l: delta must be below 0.5 for bound_mode={bound_mode!r}, got {delta!r}")
    return low, high, low_in, high_in


# ------------------------------------------------------------------ the per-user client


class ClientState(NamedTuple):
    """Every user's client state, one row per user (plain arrays: a Beam state cell holds one row).

    ``deviations[u]``: the remembered deviations, a ring of ``h`` cells (cell ``age % h`` is the oldest; no
    cells for SW-direct or unbounded memory); ``accumulated[u]``: ``D``, their sum (every deviation since the
    last reset for unbounded memory), kept exactly; ``age[u]``: the user's slots so far.
    """

    deviations: np.ndarray   # (users, h) float64, exact dyadic rationals
    accumulated: np.ndarray  # (users,) float64, exact
    age: np.ndarray          # (users,) int64


@dataclass(frozen=True)
class Client:
    """One client algorithm at one per-report budget, resolved: what every user runs at each of their slots.

    ``memory`` is the ring of remembered deviations (0 SW-direct, 1 IPP, ``h`` APP/CAPP), ``accumulate``
    remembers every deviation instead (the paper's unbounded memory; no ring), ``reset`` restarts the state
    every so many steps, ``bounds`` are CAPP's ``(l, u, l_in, u_in)`` (``(0, 1, 0, 1)`` otherwise).  ``sw`` is
    the randomizer: the square wave, or another base of :mod:`.bases` (the same ``perturb``/``grid_index``).
    """

    sw: SquareWave
    memory: int
    accumulate: bool = False
    reset: int | None = None
    bounds: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 1.0)

    def __post_init__(self):
        if self.memory < 0 or (self.accumulate and self.memory):
            raise ValueError("memory must be >= 0 cells (none for unbounded memory, which accumulates)")
        if self.reset is not None and self.reset < 1:
            raise ValueError(f"reset must be a positive number of slots, got {self.reset!r}")

    @property
    def report_units(self) -> int:
        """What one report costs its sender: the square wave's realised epsilon, in budget units."""
        return self.sw.realised_units

    def initial_state(self, users: int) -> ClientState:
        return ClientState(np.zeros((users, self.memory)), np.zeros(users), np.zeros(users, np.int64))

    def on_grid(self, values) -> np.ndarray:
        """Values in ``[0, 1]`` rounded to the square wave's grid (refused outside, or when not finite)."""
        return self.sw.grid_index(values) / float(self.sw.steps)

    def step(self, state: ClientState, values, rng: Randomness, in_place: bool = False
             ) -> tuple[np.ndarray, ClientState]:
        """Every user of ``state`` reports one value (``values[u]`` in ``[0, 1]``); returns the reports and the
        new state (``in_place``: ``state``'s arrays updated, else copies).  One 64-bit draw per user, in order
        (the square wave, SR, PM; Laplace draws its exact discrete Laplace).

        ``x^I = x + D``; CAPP maps it by ``(x^I - l_in)/(u_in - l_in)`` and its report by ``l + (u - l)·v``
        (for the others both maps are the identity, exactly); the square wave clips its input to ``[0, 1]``.
        """
        x = self.on_grid(values)
        if x.shape != state.age.shape:
            raise ValueError(f"one value per user: {state.age.size} users, values of shape {x.shape}")
        deviations, accumulated, age = state if in_place else (array.copy() for array in state)
        remembers = self.accumulate or self.memory > 0
        if self.reset is not None and remembers:
            restart = age % self.reset == 0
            deviations[restart] = 0.0
            accumulated[restart] = 0.0
        low, high, low_in, high_in = self.bounds
        shifted = x + accumulated if remembers else x
        scaled = (low, high, low_in, high_in) != (0.0, 1.0, 0.0, 1.0)
        v = self.sw.perturb((shifted - low_in) / (high_in - low_in) if scaled else shifted, rng, clip=True)
        reports = low + (high - low) * v if scaled else v
        if self.accumulate:
            accumulated += x - reports
        elif self.memory:
            rows, oldest = np.arange(x.size), age % self.memory
            deviation = x - reports
            accumulated += deviation - deviations[rows, oldest]  # exact: every term is a dyadic rational
            deviations[rows, oldest] = deviation
        age += 1
        return reports, ClientState(deviations, accumulated, age)

    def run(self, values, rng: Randomness, state: ClientState | None = None) -> tuple[np.ndarray, ClientState]:
        """Reports for a block of streams ``values`` (users × slots), from ``state`` (fresh by default)."""
        x = np.asarray(values, np.float64)
        if x.ndim != 2:
            raise ValueError(f"values must be a (users, slots) array, got shape {x.shape}")
        state = self.initial_state(x.shape[0]) if state is None else state
        reports = np.empty_like(x)
        for t in range(x.shape[1]):
            reports[:, t], state = self.step(state, x[:, t], rng)
        return reports, state

    def first_dependency(self, slots: int, start_age: int = 0) -> np.ndarray:
        """For each of ``slots`` consecutive reports, the earliest slot (relative index) whose value it depends
        on: ``t - memory`` (everything since the last reset with unbounded memory), never before a reset."""
        t = np.arange(slots)
        age = start_age + t
        since_reset = age % self.reset if self.reset is not None else age
        span = since_reset if self.accumulate else np.minimum(since_reset, self.memory)
        return t - span


# ------------------------------------------------------------------ the parameters


@dataclass(frozen=True)
class PerturbationParams:
    """One of SW-direct / IPP / APP / CAPP with a window budget ``epsilon`` per ``window`` slots (module doc).

    ``memory``: deviation cells ``h`` of APP/CAPP (default ``window``; IPP has 1, SW-direct 0); ``unbounded``:
    the paper's memory of every past deviation; ``reset``: restart the state every ``reset`` slots (the
    reference's per-query protocol); ``budget``: ``"strict"`` ``ε/(w + h)`` or ``"paper"`` ``ε/w``;
    ``not_w_event_private``: accept a configuration that is not w-event private (the paper's, on long
    streams), marking its results so; ``bound_mode``/``delta``: CAPP's bounds and clip parameter (default
    :func:`capp_delta` of the per-slot budget); ``grid_bits``: the square wave's grid; ``base``: the randomizer
    (``"sw"``, or ``"laplace"``, ``"sr"``, ``"pm"`` of :mod:`.bases`, not with CAPP).
    """

    epsilon: float
    window: int
    method: str = "capp"
    memory: int | None = None
    unbounded: bool = False
    reset: int | None = None
    budget: str = "strict"
    bound_mode: str = "ref"
    delta: float | None = None
    grid_bits: int = DEFAULT_GRID_BITS
    not_w_event_private: bool = False
    base: str = "sw"

    def __post_init__(self):
        to_units(self.epsilon, "epsilon")
        positive_int("window (w)", self.window)
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {BUDGETS}, got {self.budget!r}")
        if self.reset is not None:
            positive_int("reset", self.reset)
        fixed = FIXED_MEMORY.get(self.method)
        if fixed is not None and (self.unbounded or self.memory not in (None, fixed)):
            raise ValueError(f"{self.method} remembers {fixed} deviation(s): memory and unbounded do not apply")
        if fixed is None and self.memory is not None:
            if self.unbounded:
                raise ValueError("give either a bounded memory h or unbounded=True, not both")
            positive_int("memory (h)", self.memory)
        if self.unbounded and self.reset is None and not self.not_w_event_private:
            raise ValueError("unbounded memory on an endless stream is not w-event private (trap T1): give reset "
                             "(the per-query protocol), a bounded memory, or not_w_event_private=True")
        if self.budget == "paper" and self.effective_memory != 0 and not self.not_w_event_private \
                and not (self.reset is not None and self.reset <= self.window):
            raise ValueError("budget='paper' (eps/w) with deviation memory is not w-event private on a stream "
                             "(trap T1): use budget='strict', reset <= window (per-query runs), or "
                             "not_w_event_private=True")
        if self.delta is not None and self.method != "capp":
            raise ValueError("delta is CAPP's clip parameter")
        if self.bound_mode not in BOUND_MODES:
            raise ValueError(f"bound_mode must be one of {BOUND_MODES}, got {self.bound_mode!r}")
        if self.report_units < 1:
            raise ValueError(f"epsilon={self.epsilon!r} is too small to split over {self.divisor} reports")
        _ = self.client  # builds the square wave and CAPP's bounds: refuses what they refuse

    @cached_property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")

    @property
    def memory_cells(self) -> int:
        """Deviation cells a client keeps."""
        if self.method in FIXED_MEMORY:
            return FIXED_MEMORY[self.method]
        return 0 if self.unbounded else (self.window if self.memory is None else self.memory)

    @property
    def effective_memory(self) -> int | None:
        """``h``: how many earlier slots' values a report depends on (None: all of them)."""
        cap = None if self.reset is None else self.reset - 1
        if self.unbounded:
            return cap
        return self.memory_cells if cap is None else min(self.memory_cells, cap)

    @property
    def divisor(self) -> int:
        """How many reports share the window budget: ``w + h`` (strict) or ``w`` (paper)."""
        if self.budget == "paper" or self.effective_memory is None:
            return self.window
        return self.window + self.effective_memory

    @property
    def report_units(self) -> int:
        """The nominal per-report budget ``ε_s``, in budget units (rounded down)."""
        return self.epsilon_units // self.divisor

    @property
    def w_event_private(self) -> bool:
        """Whether results are w-event private on a stream (per-query paper runs: see :func:`perturb_queries`)."""
        h = self.effective_memory
        return h is not None and (self.window + h) * self.client.report_units <= self.epsilon_units

    @cached_property
    def client(self) -> Client:
        return build_client(self.report_units, self.grid_bits, self.memory_cells, self.unbounded, self.reset,
                            self.method == "capp", self.bound_mode, self.delta, self.base)


def build_client(units: int, grid_bits: int, memory: int, accumulate: bool = False, reset: int | None = None,
                 capp: bool = False, bound_mode: str = "ref", delta: float | None = None, base: str = "sw"
                 ) -> Client:
    """A client whose randomizer (the square wave, or ``base``) spends ``units`` per report (CAPP's bounds when
    ``capp``; module doc)."""
    if capp and base != "sw":
        raise ValueError("CAPP's bounds are derived for the square wave only (the paper omits other bases')")
    sw = randomizer(base, units, grid_bits)
    bounds = capp_bounds(snapped_delta(units, grid_bits, delta), bound_mode) if capp else (0.0, 1.0, 0.0, 1.0)
    return Client(sw, memory, accumulate, reset, bounds)


def snapped_delta(report_units: int, grid_bits: int, delta: float | None = None) -> float:
    """CAPP's δ (given, or :func:`capp_delta` of the per-report budget) on the grid ``k/2**grid_bits``."""
    value = capp_delta(report_units / UNITS_PER_EPSILON) if delta is None else delta
    if not math.isfinite(value):
        raise ValueError(f"delta must be finite, got {value!r}")
    steps = 1 << grid_bits
    return round(value * steps) / steps


def positive_int(name: str, value) -> None:
    """ValueError naming ``name`` unless ``value`` is an integer >= 1 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


# ------------------------------------------------------------------ runs


class Perturbed(NamedTuple):
    """A block of users' reports and what each report cost (budget units), with what it depended on.

    ``first_dependency[u, t]``: the earliest slot whose value report ``(u, t)`` is a function of (given the
    public earlier reports); the exact window check (:func:`worst_window_units`) reads it.
    """

    reports: np.ndarray           # (users, slots) float64, in [0, 1] units
    charges: np.ndarray           # (users, slots) int64 budget units (0: no report)
    first_dependency: np.ndarray  # (users, slots) int64
    state: ClientState
    w_event_private: bool


def perturb_streams(params: PerturbationParams, values, rng: Randomness | None = None,
                    state: ClientState | None = None) -> Perturbed:
    """Every user's stream (rows of ``values``, in ``[0, 1]``) perturbed by ``params``'s client, continuing from
    ``state``; randomness from ``rng`` (secure by default)."""
    client = params.client
    x = np.asarray(values, np.float64)
    reports, final = client.run(x, rng or secure_randomness(), state)
    start = None if state is None else state.age
    return Perturbed(reports, np.full(x.shape, client.report_units, np.int64),
                     _dependencies(client, x.shape, start), final, params.w_event_private)


def perturb_queries(params: PerturbationParams, queries, rng: Randomness | None = None) -> Perturbed:
    """The reference protocol (spec §6.2.1): each row is one query perturbed from scratch, nothing else reported.

    With ``reset`` at least the query length every row is its own run; a query of ``q <= w`` reports costs at
    most ``q·ε_s``, so ``budget="paper"`` is w-event private here (checked, not assumed: the result says)."""
    x = np.asarray(queries, np.float64)
    if params.reset is None or x.shape[-1] > params.reset:
        raise ValueError("per-query runs need reset >= the query length (each query starts from a fresh state)")
    result = perturb_streams(params, x, rng)
    spent = x.shape[-1] * params.client.report_units
    private = params.w_event_private or (x.shape[-1] <= params.window and spent <= params.epsilon_units)
    return result._replace(w_event_private=private)


def _dependencies(client: Client, shape: tuple[int, int], start_age: np.ndarray | None) -> np.ndarray:
    if start_age is None or not start_age.any():
        return np.broadcast_to(client.first_dependency(shape[1]), shape).copy()
    return np.stack([client.first_dependency(shape[1], int(age)) for age in start_age])


def worst_window_units(charges, first_dependency, window: int) -> np.ndarray:
    """Per user, the most budget a change confined to ``window`` consecutive slots can cost (exact units).

    A change in slots ``[a, a + w - 1]`` moves every report ``r`` that depends on one of them
    (``first_dependency[r] <= a + w - 1`` and ``r >= a``); its cost is the sum of those reports' charges.
    Every span that meets the stream is tried.  The w-event check of the tests and evaluations: it must not
    exceed the window budget.
    """
    charges = np.asarray(charges, np.int64)
    first = np.asarray(first_dependency, np.int64)
    slots = charges.shape[-1]
    reported_at = np.arange(slots)
    worst = np.zeros(charges.shape[:-1], np.int64)
    for start in range(-window + 1, slots):
        touched = (first <= start + window - 1) & (reported_at >= start)
        worst = np.maximum(worst, np.where(touched, charges, 0).sum(axis=-1))
    return worst
