"""DPI's lifetime budget series in exact units, budget to learning rate, and Random Budget Allocation (spec §2.3-§2.5).

**Series (§2.3, corrected).**  With ``E = eps/2`` per distribution and
``C = Delta/(mu·zeta)`` the per-distribution term is ``C(1 - m^i)/i²``
(``m`` is the spec's ``m²``, the root of ``Li2(m) = pi²/6 - E/C``) and a slot
gets twice that; the exact series sums to ``eps``.  Here slot ``i`` gets
:meth:`BudgetSeries.slot_units` budget units, and **every prefix sum of those
units is at most ``eps`` (in units) for every length, forever**:

1. ``m`` is replaced by a rational ``m~ = M/2**128 >= m``.  The float root
   ``m_f`` satisfies ``Li2(m_f) >= v - err`` with ``err`` the float error of
   ``Li2`` and ``v`` (a few ulps, below ``1e-14``); ``Li2'(x) = -ln(1-x)/x >= 1``
   on ``(0, 1)``, so ``m_f + 2**-40`` (then rounded up to the grid) has
   ``Li2(m~) >= v``: a larger ``m`` only shrinks every term, so
   ``sum_i C(1 - m~^i)/i² = C(pi²/6 - Li2(m~)) <= E``.  When even ``m = 0``
   cannot spend ``E`` (spec I-7, checked exactly with an upper bound of pi)
   ``m~ = 0``, the terms are ``C/i²`` and the series sums to ``C·pi²/3 < eps``
   (a warning says so).
2. ``m~^i`` is bounded **above** in 128-bit fixed point by square-and-multiply
   with every product rounded up (integers only), so ``1 - bound`` is a lower
   bound of ``1 - m~^i``.
3. The slot's units are the floor of ``2·C·(1 - bound)/i²`` times
   ``UNITS_PER_EPSILON`` (integer arithmetic, ``C`` an exact fraction).

So ``slot_units(i) <= 2C(1 - m~^i)/i²`` term by term and
``sum_{i<=n} slot_units(i) <= eps`` for all ``n``.  RBA hands out each index
at most once (without replacement), so whatever it picks, the spent total is
a sum over distinct indices and stays below ``eps`` as well.

**Learning rate (§2.4).**  A per-distribution budget ``e`` gives
``L = mu·e/(2·Delta)``, ``alpha = L/2``, ``eta = tanh(alpha)/2`` (floats: they
steer the weights; what is charged is ``e`` in units).

**RBA (§2.5).**  :class:`ExponentialRBA` (Algorithm 3: ``S ~ Exp(rate
Lambda)``, the unused index whose budget is nearest to ``S``; exact nearest
search by bisection plus "next free" links both ways, spec T-5; ties go to the
smaller budget), :class:`RangesRBA` (Algorithm 4: FIFO queues of index ranges,
a uniformly chosen non-empty queue each slot, 0 once all are empty) and
:class:`SequentialRBA` (slot ``t`` gets index ``t``).  Their coins come from the
secure generator unless a test or replay passes a seeded one.  ``S`` is a
float: RBA reads no data, so its randomness decides only which public budget is
spent next, and the ledger charges that budget exactly.
"""

from __future__ import annotations

import itertools
import bisect
import math
import warnings
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_fraction, to_units
from transforms.mechanisms.noise import Randomness, secure_randomness

FIXED_BITS = 128
_ONE = 1 << FIXED_BITS
ROOT_MARGIN = 2.0**-40
"""Added to the float root of ``Li2(m) = v``: about 100 times the float error of ``Li2`` (see the module doc)."""
_PI_UP = Fraction("3.141592653589793238462643383280")  # > pi (pi = 3.14159265358979323846264338327950...)
PI2_6 = math.pi**2 / 6


def li2(x: float) -> float:
    """The dilogarithm ``Li2(x) = sum_j x^j/j²`` on ``[0, 1]`` (not scipy's ``spence``, which is ``Li2(1-x)``; T-1).

    The power series for ``x <= 1/2`` (terms below ``2**-j``), Euler's reflection
    ``Li2(x) = pi²/6 - ln(x)ln(1-x) - Li2(1-x)`` above.
    """
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"li2 is defined here on [0, 1], got {x!r}")
    if x > 0.5:
        return PI2_6 - (math.log(x) * math.log1p(-x) if x < 1.0 else 0.0) - li2(1.0 - x)
    total, power, j = 0.0, x, 1
    while power > 1e-18 * j * j:
        total += power / (j * j)
        j += 1
        power *= x
    return total


def li2_inverse(v: float) -> float:
    """The ``x`` in ``[0, 1]`` with ``Li2(x) = v`` (``Li2`` is increasing): bisection to the last float."""
    if not 0.0 <= v <= PI2_6:
        raise ValueError(f"li2_inverse needs v in [0, pi²/6], got {v!r}")
    low, high = 0.0, 1.0
    while True:
        middle = (low + high) / 2
        if middle in (low, high):
            return high
        if li2(middle) < v:
            low = middle
        else:
            high = middle


def fixed_power_up(base: int, exponent: int) -> int:
    """An upper bound of ``(base/2**128)**exponent`` as an integer over ``2**128`` (every product rounded up)."""
    result = _ONE
    while exponent:
        if exponent & 1:
            result = -(-result * base >> FIXED_BITS)
        exponent >>= 1
        if exponent:
            base = -(-base * base >> FIXED_BITS)
    return result


@dataclass(frozen=True)
class BudgetSeries:
    """The slot budgets of DPI for a lifetime ``epsilon`` in exact units (spec §2.3 as corrected; module doc).

    ``epsilon`` (as for :func:`~transforms.mechanisms.budget.to_units`), ``mu`` in
    ``(0, 1]`` and ``zeta > 0`` are read as decimals on the 1e-12 grid of budget
    units; ``delta`` is the sensitivity (2 for PDFs).  ``m_fixed`` is ``m~·2**128``;
    ``feasible`` is False when ``epsilon`` exceeds what the series can spend (I-7;
    it then sums to ``C·pi²/3``).
    """

    epsilon: float | str | Fraction | Decimal
    mu: float | str | Fraction | Decimal
    zeta: float | str | Fraction | Decimal
    delta: int = 2
    epsilon_units: int = field(init=False)
    c: Fraction = field(init=False)
    m_fixed: int = field(init=False)
    feasible: bool = field(init=False)

    def __post_init__(self):
        units = to_units(self.epsilon, "epsilon")
        # mu and zeta on the 1e-12 grid (exact for decimals with up to 12 places); C, m and every term
        # below use these same values, so the lifetime bound holds for them exactly
        mu, zeta = to_fraction(to_units(self.mu, "mu")), to_fraction(to_units(self.zeta, "zeta"))
        if not 0 < mu <= 1:
            raise ValueError(f"mu must be in (0, 1], got {self.mu!r}")
        if not zeta > 0:
            raise ValueError(f"zeta must be positive, got {self.zeta!r}")
        if isinstance(self.delta, bool) or not isinstance(self.delta, int) or self.delta < 1:
            raise ValueError(f"delta must be a positive int, got {self.delta!r}")
        c = self.delta / (mu * zeta)
        half = Fraction(units, 2 * UNITS_PER_EPSILON)  # E = eps/2 per distribution (I-6)
        feasible = not c * _PI_UP**2 / 6 <= half
        if feasible:
            root = li2_inverse(max(0.0, PI2_6 - float(half / c)))
            m_fixed = min(_ONE, math.ceil(Fraction(root + ROOT_MARGIN) * _ONE))
        else:
            warnings.warn(f"DPI budget series: epsilon={self.epsilon} exceeds what C={float(c):.6g} can spend; "
                          f"m=0, the series sums to C*pi^2/3 = {float(c) * math.pi**2 / 3:.6g} (spec I-7)",
                          stacklevel=2)
            m_fixed = 0
        for name, value in (("epsilon_units", units), ("c", c), ("m_fixed", m_fixed), ("feasible", feasible)):
            object.__setattr__(self, name, value)

    @property
    def m(self) -> float:
        """``m~`` as a float (the spec's ``m²``), for display."""
        return self.m_fixed / _ONE

    def slot_units(self, i: int) -> int:
        """Budget units of series index ``i >= 1``: the floor of a lower bound of ``2C(1 - m~^i)/i²``."""
        if isinstance(i, bool) or not isinstance(i, int) or i < 1:
            raise ValueError(f"series index must be an int >= 1, got {i!r}")
        numerator = 2 * self.c.numerator * (_ONE - fixed_power_up(self.m_fixed, i)) * UNITS_PER_EPSILON
        return numerator // (self.c.denominator * _ONE * i * i)

    def prefix_units(self, n: int) -> int:
        """``sum_{i<=n} slot_units(i)`` (exact; at most ``epsilon_units`` for every ``n``)."""
        return sum(self.slot_units(i) for i in range(1, n + 1))

    def crossing(self, s_units: float) -> int:
        """The largest index whose budget is at least ``s_units`` (0 if none): galloping, then bisection.

        Budgets are integers, so a target below one unit has the crossing of ``1/2``
        (the last index with a non-zero budget): the search always ends.
        """
        s_units = max(s_units, 0.5)
        if self.slot_units(1) < s_units:
            return 0
        low, high = 1, 2
        while self.slot_units(high) >= s_units:  # terminates: the budgets fall to 0 units, below s_units
            low, high = high, 2 * high
        while high - low > 1:
            middle = (low + high) // 2
            if self.slot_units(middle) >= s_units:
                low = middle
            else:
                high = middle
        return low


def split_units(slot_units: int) -> tuple[int, int]:
    """A slot's budget halved for the synopsis and the query distribution (I-6), each rounded down."""
    return slot_units // 2, slot_units // 2


def learning_rate(per_pdf_epsilon: float, mu: float, delta: int = 2) -> tuple[float, float, float]:
    """``(L, alpha, eta)`` for one distribution's slot budget ``e`` (spec §2.4): ``(2Δ/μ)·L = e``."""
    if not per_pdf_epsilon >= 0 or not 0 < mu <= 1 or delta < 1:
        raise ValueError(f"need e >= 0, mu in (0, 1], delta >= 1; got {per_pdf_epsilon!r}, {mu!r}, {delta!r}")
    log_ratio = mu * per_pdf_epsilon / (2 * delta)
    alpha = log_ratio / 2
    return log_ratio, alpha, 0.5 * math.tanh(alpha)


class _FreeIndices:
    """Series indices ``>= 1`` not yet handed out: the used ones as sorted, disjoint, maximal runs ``[start, end]``.

    Algorithm 3 must never hand an index out twice, so the record grows with the slots; its picks cluster
    around the typical target, so the runs grow far slower than the picks (20,753 runs after 50,000 slots at
    the default rate): two ints per run, and no per-index links.
    """

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []

    def _run_before(self, i: int) -> int:
        """The position of the last run starting at or before ``i`` (-1: none)."""
        return bisect.bisect_right(self.starts, i) - 1

    def __contains__(self, i: int) -> bool:
        k = self._run_before(i)
        return k >= 0 and self.ends[k] >= i

    def __len__(self) -> int:
        return sum(self.ends) - sum(self.starts) + len(self.starts)

    def nearest(self, i: int, step: int) -> int:
        """The first free index from ``i`` in direction ``step`` (0 when there is none down to 1)."""
        k = self._run_before(i)
        if k < 0 or self.ends[k] < i:
            return max(i, 0)
        return self.ends[k] + 1 if step > 0 else max(self.starts[k] - 1, 0)  # runs are maximal: free

    def take(self, i: int) -> None:
        """Mark the free index ``i`` used, merging it with the runs it touches."""
        k = self._run_before(i)
        joins_left = k >= 0 and self.ends[k] == i - 1
        joins_right = k + 1 < len(self.starts) and self.starts[k + 1] == i + 1
        if joins_left and joins_right:
            self.ends[k] = self.ends.pop(k + 1)
            del self.starts[k + 1]
        elif joins_left:
            self.ends[k] = i
        elif joins_right:
            self.starts[k + 1] = i
        else:
            self.starts.insert(k + 1, i)
            self.ends.insert(k + 1, i)

    def runs(self) -> np.ndarray:
        """The runs as an int64 array of shape ``(runs, 2)``."""
        return np.array([self.starts, self.ends], np.int64).T.reshape(-1, 2)

    @classmethod
    def from_runs(cls, runs: np.ndarray) -> "_FreeIndices":
        free = cls()
        runs = np.asarray(runs, np.int64).reshape(-1, 2)
        free.starts, free.ends = runs[:, 0].tolist(), runs[:, 1].tolist()
        return free


ZERO_PICK_RETRIES = 64
"""Targets Algorithm 3 draws before a pick of zero units ends the epoch (:meth:`ExponentialRBA.next`)."""


class ExponentialRBA:
    """Algorithm 3: ``S ~ Exp(rate)`` (in epsilon), then the unused index with budget nearest to ``S`` (spec §2.5).

    ``rate`` is the paper's Lambda (default ``1e8``; note T-4: the budgets it picks are
    about ``1/rate`` whatever epsilon is).  Returns ``(index, units)`` per slot.
    """

    def __init__(self, series: BudgetSeries, rate: float = 1e8, rng: Randomness | None = None):
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"rate (Lambda) must be a positive finite number, got {rate!r}")
        self.series, self.rate = series, float(rate)
        self.rng = rng or secure_randomness()
        self.spent_units = 0
        self._free = _FreeIndices()

    def draw_target(self) -> float:
        """``S`` in budget units: ``-ln(U)/rate`` with ``U`` uniform on the 2**53-grid's midpoints in (0, 1)."""
        uniform = (self.rng.randbelow(1 << 53) + 0.5) / (1 << 53)
        return -math.log(uniform) / self.rate * UNITS_PER_EPSILON

    def next_for(self, s_units: float) -> tuple[int, int]:
        """The pick for a given target ``S`` (in units): nearest free index below vs above the crossing, by value."""
        crossing = self.series.crossing(s_units)
        above = self._free.nearest(crossing + 1, 1)
        below = self._free.nearest(crossing, -1)
        pick = above
        if below and self.series.slot_units(below) - s_units < s_units - self.series.slot_units(above):
            pick = below  # ties go to the smaller budget (above)
        self._free.take(pick)
        units = self.series.slot_units(pick)
        self.spent_units += units
        return pick, units

    def next(self) -> tuple[int, int]:
        """A pick with at least one unit.  A target below one unit (``U > 1 - 1e-4`` at the default rate: once
        in about 10,000 slots) picks an index whose budget floors to 0; that is a chance draw, not the end of the
        series, so a new target is drawn (RBA reads no data).  ``(index, 0)`` only after ``ZERO_PICK_RETRIES``
        zero picks in a row: the series has no positive budget left near the targets."""
        for _ in range(ZERO_PICK_RETRIES):
            index, units = self.next_for(self.draw_target())
            if units > 0:
                break
        return index, units

    def state(self) -> dict[str, np.ndarray]:
        """The runs of indices handed out and the spent total."""
        return {"used_runs": self._free.runs(), "spent_units": np.array(self.spent_units)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self._free = _FreeIndices.from_runs(state["used_runs"])
        self.spent_units = int(state["spent_units"])


DEFAULT_RANGES = ((1, 10_000), (10_000, 20_000), (20_000, 30_000))
"""The authors' code's queues of series indices ``[start, stop)`` (spec §2.5, I-13)."""


class RangesRBA:
    """Algorithm 4: FIFO queues of series indices; each slot a uniformly chosen non-empty queue gives its next index.

    Ranges ``[start, stop)`` must be disjoint (an index must never be handed out
    twice).  Once every queue is empty a slot gets ``(0, 0)``: no budget, no
    update (spec §2.8), instead of the reference code's endless loop.
    """

    def __init__(self, series: BudgetSeries, ranges=DEFAULT_RANGES, rng: Randomness | None = None):
        ranges = tuple((int(a), int(b)) for a, b in ranges)
        if not ranges or any(not 1 <= a < b for a, b in ranges):
            raise ValueError(f"ranges must be non-empty [start, stop) with 1 <= start < stop, got {ranges!r}")
        ordered = sorted(ranges)
        if any(prev[1] > nxt[0] for prev, nxt in itertools.pairwise(ordered)):
            raise ValueError(f"ranges must be disjoint, got {ranges!r}")
        self.series, self.ranges = series, ranges
        self.rng = rng or secure_randomness()
        self.spent_units = 0
        self._next = [a for a, _ in ranges]

    def next(self) -> tuple[int, int]:
        open_queues = [q for q, (_, stop) in enumerate(self.ranges) if self._next[q] < stop]
        if not open_queues:
            return 0, 0
        queue = open_queues[self.rng.randbelow(len(open_queues))]
        index = self._next[queue]
        self._next[queue] += 1
        units = self.series.slot_units(index)
        self.spent_units += units
        return index, units

    def state(self) -> dict[str, np.ndarray]:
        """Each queue's next index and the spent total."""
        return {"next": np.array(self._next, np.int64), "spent_units": np.array(self.spent_units)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self._next = [int(i) for i in np.asarray(state["next"]).tolist()]
        self.spent_units = int(state["spent_units"])


class SequentialRBA:
    """The naive order the paper argues against: slot ``t`` gets index ``t``."""

    def __init__(self, series: BudgetSeries, rng: Randomness | None = None):
        self.series, self.spent_units, self._index = series, 0, 0
        self.rng = rng  # unused: the order is fixed (kept so every RBA is built and driven alike)

    def next(self) -> tuple[int, int]:
        self._index += 1
        units = self.series.slot_units(self._index)
        self.spent_units += units
        return self._index, units

    def state(self) -> dict[str, np.ndarray]:
        return {"index": np.array(self._index), "spent_units": np.array(self.spent_units)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self._index, self.spent_units = int(state["index"]), int(state["spent_units"])
