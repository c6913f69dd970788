"""The numeric family's public rules: what each report must have cost, and how far back it reaches.

Seed 003's methods (``sw-direct``, ``ipp``, ``app``, ``capp``, ``pp-s``, ``app-s``, ``capp-s``, ``sampling``,
``ba-sw``, ``topl``) are public: from the method, its public parameters (the window budget ``ε``, the window
``w``, the square wave's grid, the deviation memory ``h``, the reset period ``R``, the segment length ``L``,
the accounting) anyone can say at what budget each report is made and which earlier values it depends on.
This module says it without importing a mechanism module (``transforms.mechanisms.numeric``): the randomizers'
laws are rebuilt by :mod:`.numeric_laws`.

**Least charge.**  A report made through the square wave (ToPL: the Piecewise Mechanism) at ``ε_r`` units
costs ``ln(P/Q)`` of that law.  The schedule's budget per report is

* SW-direct / IPP / APP / CAPP: ``ε/(w + h)`` with ``h`` = 0, 1, or the memory (default ``w``), capped at
  ``R - 1`` by a reset every ``R`` reports;
* PP-S / APP-S / CAPP-S / Sampling: ``ε/(n_w + h)`` with ``n_w = ceil((w - 1)/L) + 1`` segments a window can
  touch and ``h`` = 1 (PP-S), 0 (Sampling) or the memory (default ``ceil(w/L)``); the paper's accounting
  (an explicit opt-in that is not w-event private) ``ε/ceil(w/L)``;
* BA-SW: dissimilarities at ``e1 = ε/(2w)``, a publication at ``k·e1`` for the ``k`` shares it absorbed;
* ToPL: the Piecewise Mechanism at ``ε/w``.

A report's record names the budget each of its parts was made at; the least charge of a part is the larger of
the law's cost at the schedule's budget and at the recorded one (a report made above its schedule costs what
it cost; one recorded below it is still charged the schedule's).  Never the mechanism's own charge.

**Memory-aware windows.**  A report depends on its own values and on the values of the ``h`` reports before
it (deviation memory), never before the last reset: report ``k`` (the user's ``k``-th report, 0-based, since
the client's state began) depends on reports ``d(k) = max(k - h, R·floor(k/R))`` to ``k``, i.e. on values at
slots ``fvs(d(k)) .. slot(k)``, where ``fvs(j) = slot(j) - L + 1`` is the first slot whose value report ``j``
summarises (``L = 1`` for the per-slot methods).  A change of one user's values within ``w`` consecutive slots
therefore moves every report of that span and the reports of the following ``h``; the most it can move, for
the spans that reach report ``k`` last, is every report in the slots
``fvs(d(k)) - w + 1 .. slot(k)``.  So the exact w-event check of report ``k`` is the ordinary window check
over a window of ``w + reach(k)`` slots ending at ``slot(k)``, with ``reach(k) = slot(k) - fvs(d(k))``
(:func:`reach`): ``h`` for APP reporting every slot, ``(h + 1)·L - 1`` for the sampling methods.  This is
what makes APP at ``ε/w`` with memory ``w`` cost ``2ε`` per window, and the paper's PP-S accounting
``(n_w + h)/n_w`` times the budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.public_schedule.numeric_laws import law_units

CLIENT_MEMORY = {"sw-direct": 0, "ipp": 1, "app": None, "capp": None}
"""The per-slot client methods and the deviations they remember (None: the memory parameter, default ``w``)."""
SAMPLED_MEMORY = {"pp-s": 1, "app-s": None, "capp-s": None, "sampling": 0}
"""The segment methods and the samples they remember (None: the memory parameter, default ``ceil(w/L)``)."""
ABSORPTION, TOPL = "ba-sw", "topl"
METHODS = (*CLIENT_MEMORY, *SAMPLED_MEMORY, ABSORPTION, TOPL)
ACCOUNTINGS = ("strict", "paper")


def _positive(name: str, value, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class NumericPlan:
    """One numeric method's public rules (module doc); ``segment`` is the resolved ``L`` of the sampling
    methods (a public function of the other parameters), ``accounting`` their ``n_w`` reading."""

    method: str
    epsilon_units: int
    window: int
    grid_bits: int = 16
    memory: int | None = None
    reset: int | None = None
    segment: int | None = None
    accounting: str = "strict"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"no numeric schedule for method {self.method!r} (one of {', '.join(METHODS)})")
        _positive("epsilon_units", self.epsilon_units, optional=False)
        _positive("window", self.window, optional=False)
        _positive("grid_bits", self.grid_bits, optional=False)
        for name in ("memory", "reset", "segment"):
            _positive(name, getattr(self, name))
        if self.sampled and self.segment is None:
            raise ValueError(f"{self.method}: the schedule needs the resolved segment length")
        if self.accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {self.accounting!r}")
        if self.accounting != "strict" and not self.sampled:
            raise ValueError(f"accounting applies to the sampling methods, not {self.method}")
        if self.report_units < 1:
            raise ValueError(f"{self.method}: epsilon of {self.epsilon_units} units is too small to split")

    @classmethod
    def of(cls, method: str, params: Mapping, segment: int | None = None, accounting: str = "strict"
           ) -> NumericPlan:
        """The schedule of ``method`` with public ``params`` (a mapping with ``epsilon``, ``window`` and the
        optional ``grid_bits``, ``memory``, ``reset``; e.g. a mechanism's ``params.to_json()`` read back)."""
        return cls(method, to_units(params["epsilon"], "epsilon"), int(params["window"]),
                   int(params.get("grid_bits") or 16), params.get("memory"), params.get("reset"), segment,
                   accounting)

    # ------------------------------------------------------------------ the public facts
    @property
    def sampled(self) -> bool:
        return self.method in SAMPLED_MEMORY

    @property
    def law(self) -> str:
        return "pm" if self.method == TOPL else "sw"

    @property
    def memory_reports(self) -> int:
        """``h``: how many earlier reports' values a report depends on (before any reset)."""
        fixed = {**CLIENT_MEMORY, **SAMPLED_MEMORY}.get(self.method, 0)
        if fixed is not None:
            return fixed
        if self.memory is not None:
            return self.memory
        return self.window if self.method in CLIENT_MEMORY else -(-self.window // self.value_span)

    @property
    def value_span(self) -> int:
        """``L``: how many slots' values one report summarises (1 but for the sampling methods)."""
        return self.segment if self.sampled and self.segment is not None else 1

    @property
    def touched_segments(self) -> int:
        """``n_w``: the segments one window can touch (the paper's accounting: ``ceil(w/L)``)."""
        length = self.value_span
        if self.accounting == "paper":
            return min(self.window, -(-self.window // length))
        return min(self.window, -(-(self.window - 1) // length) + 1)

    @property
    def report_units(self) -> int:
        """The schedule's budget of one report (BA-SW: of one share ``e1``), in budget units (rounded down)."""
        e, w = self.epsilon_units, self.window
        if self.method in CLIENT_MEMORY:
            h = self.memory_reports if self.reset is None else min(self.memory_reports, self.reset - 1)
            return e // (w + h)
        if self.sampled:
            return e // (self.touched_segments + (self.memory_reports if self.accounting == "strict" else 0))
        return e // (2 * w) if self.method == ABSORPTION else e // w

    # ------------------------------------------------------------------ least charges
    def cost(self, units: int) -> int:
        """What one report through the method's law at ``units`` costs (certified, rounded up)."""
        return law_units(self.law, int(units), self.grid_bits) if units > 0 else 0

    def least_units(self, publication_units, dissimilarity_units=None) -> np.ndarray:
        """Each report's least charge from its record: the budgets its publication (every row is one report
        through the method's law) and its dissimilarity part (BA-SW; 0: none) were made at (module doc)."""
        recorded = np.asarray(publication_units, np.int64).reshape(-1)
        scheduled = self.report_units
        if self.method == ABSORPTION:  # a publication absorbs k shares of e1: k = ceil(recorded / e1)
            shares = -(-recorded // scheduled)
            least = np.array([self.cost(int(k) * scheduled) for k in shares.tolist()], np.int64)
            if dissimilarity_units is not None:
                dissimilarity = np.asarray(dissimilarity_units, np.int64).reshape(-1)
                least += np.array([max(self.cost(scheduled), self.cost(int(u))) if u > 0 else 0
                                   for u in dissimilarity.tolist()], np.int64)
            return least
        floor = self.cost(scheduled)
        return np.array([max(floor, self.cost(int(u))) if u != scheduled else floor for u in recorded.tolist()],
                        np.int64)

    def off_schedule(self, publication_units, dissimilarity_units) -> np.ndarray:
        """Which reports were made at a budget the schedule does not name: a publication other than the report
        budget (BA-SW: other than ``k·e1`` for ``1 <= k <= w``), a dissimilarity other than ``e1`` (BA-SW) or any
        (the others)."""
        publication = np.asarray(publication_units, np.int64).reshape(-1)
        dissimilarity = np.asarray(dissimilarity_units, np.int64).reshape(-1)
        share = self.report_units
        if self.method == ABSORPTION:
            shares = publication // share
            bad_publication = (publication != 0) & ((publication % share != 0) | (shares > self.window))
            return bad_publication | ((dissimilarity != 0) & (dissimilarity != share))
        return (publication != share) | (dissimilarity != 0)

    # ------------------------------------------------------------------ memory-aware windows
    def first_dependency(self, ages: np.ndarray) -> np.ndarray:
        """``d(k)``: the earliest report (by the user's report count) report ``k`` depends on (module doc)."""
        ages = np.asarray(ages, np.int64)
        first = ages - self.memory_reports
        if self.reset is not None:
            first = np.maximum(first, ages // self.reset * self.reset)
        return np.maximum(first, 0)

    def reach(self, slots, history: ReportHistory | None = None) -> tuple[np.ndarray, ReportHistory]:
        """Each of one user's next reports (at ``slots``, ascending) and how many slots before its own its
        dependency reaches (``reach(k) = slot(k) - fvs(d(k))``), after the reports of ``history``; the new history.

        The memory-aware window of report ``k`` is ``w + reach(k)`` slots ending at ``slot(k)`` (module doc).
        """
        slots = np.asarray(slots, np.int64).reshape(-1)
        history = history or ReportHistory.empty()
        span = self.value_span
        firsts = np.concatenate([history.first_slots, slots - span + 1])
        start = history.count - history.first_slots.size  # the report count of firsts[0]
        ages = history.count + np.arange(slots.size)
        dependency = self.first_dependency(ages)
        if dependency.size and dependency.min() < start:
            raise ValueError("the report history kept is shorter than the memory")
        reach = slots - firsts[dependency - start]
        keep = self.memory_reports
        kept = firsts[max(firsts.size - keep, 0):] if keep else firsts[:0]
        return reach, ReportHistory(history.count + slots.size, kept)


@dataclass(frozen=True)
class ReportHistory:
    """What the memory-aware check keeps of one user: how many reports they sent since their client's state began,
    and the first value slot of the last ``h`` of them."""

    count: int
    first_slots: np.ndarray

    @classmethod
    def empty(cls) -> ReportHistory:
        return cls(0, np.zeros(0, np.int64))

    def to_tuple(self) -> tuple:
        """A plain form (a checkpoint's or a state cell's)."""
        return int(self.count), tuple(int(s) for s in self.first_slots)

    @classmethod
    def of_tuple(cls, saved) -> ReportHistory:
        count, first_slots = saved
        return cls(int(count), np.asarray(first_slots, np.int64))


def memory_aware_windows(windows, reach) -> np.ndarray:
    """The windows (in slots) the ledger checks: each report's requirement window ``w`` plus its reach."""
    return np.asarray(windows, np.int64) + np.asarray(reach, np.int64)
