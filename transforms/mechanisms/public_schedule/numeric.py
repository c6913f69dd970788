"""The numeric family's public schedule on the ledger's protocol: least charges and memory-aware windows.

:class:`NumericSchedule` serves seed 003's methods.  At each slot it reads the release's public record (one
:class:`~transforms.mechanisms.public_schedule.ReportRecord` per kind of report sent: its part, the law
``"sw"`` or ``"pm"``, the budget it was made at, who sent it; ``figures["segment"]``: the sampling methods'
segment length) and, from the rules of :mod:`.numeric_plan`:

* flags a report made at a budget the schedule does not name (``off_schedule``) and a law in the evidence other
  than the schedule's (``law_mismatch``: the integers rebuilt by :mod:`.numeric_laws`, compared, never used);
* gives each sender the least charge of what they sent (the law's cost at the larger of the schedule's and the
  recorded budget);
* checks the **memory-aware window** of every sender (``memory_window``): the least charges of the user's
  reports over ``w + reach`` slots ending at the report (``w`` the user's declared window, ``reach`` how far the
  report's deviation memory reaches back, :meth:`~.numeric_plan.NumericPlan.reach`) must fit the declared ``E``.
  A change within ``w`` slots moves those reports, so that sum, not the plain ``w``-slot one, is what the change
  costs (APP at ``ε/w`` with memory ``w`` spends ``2ε`` there).  Fixed requirements only (the numeric methods
  take one ``(w, E)``); a lifetime budget sums everything anyway.

Per user index it keeps the last ``K`` reports (slot, first value slot, least units) in rings, ``K`` at least the
widest declared window plus the memory plus one (a memory-aware window holds at most that many reports), and
how many reports the user sent: saved with the ledger (:meth:`state_arrays`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transforms.mechanisms.public_schedule import (LAW_MISMATCH, MEMORY_WINDOW, OFF_SCHEDULE, Finding, PublicSchedule,
                                                   ReportRecord, SlotFacts, SlotVerdict, least_of_reports)
from transforms.mechanisms.public_schedule.numeric_laws import law_pair
from transforms.mechanisms.public_schedule.numeric_plan import ABSORPTION, METHODS, NumericPlan

PUBLICATION, DISSIMILARITY = "publication", "dissimilarity"
SEGMENT = "segment"
"""The public figure naming the sampling methods' segment length ``L``."""


class NumericSchedule(PublicSchedule):
    """The public schedule of one of seed 003's numeric methods (module doc)."""

    methods = METHODS

    def __init__(self, method: str, params: Mapping[str, Any]):
        super().__init__(method, params)
        self._plan: NumericPlan | None = None if method in ("pp-s", "app-s", "capp-s", "sampling") else \
            NumericPlan.of(method, self.params)
        self.count = np.zeros(0, np.int64)               # per user index: reports (slots with one) so far
        self.ring_slot = np.zeros((0, 1), np.int64)      # [user, count % K]: the report's slot
        self.ring_first = np.zeros((0, 1), np.int64)     # ... the first slot its values came from
        self.ring_least = np.zeros((0, 1), np.int64)     # ... its least units

    def plan(self, figures: Mapping[str, int]) -> NumericPlan:
        """The rules, the sampling methods' built once their public segment length is known."""
        segment = figures.get(SEGMENT)
        if self._plan is None:
            if segment is None:
                raise ValueError(f"{self.method}: the public record must name the segment length")
            self._plan = NumericPlan.of(self.method, self.params, int(segment))
        elif segment is not None and int(segment) != self._plan.segment:
            raise ValueError(f"{self.method}: the segment length changed from {self._plan.segment} to {segment}")
        return self._plan

    # -------------------------------------------------------------------------------------------- a slot
    def verdict(self, facts: SlotFacts) -> SlotVerdict:
        plan = self.plan(facts.record.figures)
        findings: list[Finding] = []
        reports = facts.record.reports
        for i, report in enumerate(reports):
            findings += self._report_findings(plan, facts, i, report)
        users, least = least_of_reports(reports, lambda report: self.report_least(plan, report))
        findings += self._memory_windows(plan, facts, users, least)
        return SlotVerdict(users, least, tuple(findings))

    def scheduled_units(self, plan: NumericPlan, report: ReportRecord) -> int:
        """The budget the schedule names for ``report``'s part (BA-SW's publication: the multiple of ``e1`` at or
        above the recorded budget, at most ``w`` shares)."""
        if plan.method == ABSORPTION and report.part == PUBLICATION:
            shares = min(max(-(-report.epsilon_units // plan.report_units), 1), plan.window)
            return shares * plan.report_units
        return plan.report_units

    def report_least(self, plan: NumericPlan, report: ReportRecord) -> int:
        """One report's least units: the law's cost at the schedule's budget, or at the recorded one if larger."""
        scheduled = self.scheduled_units(plan, report)
        recorded = int(report.epsilon_units)
        return max(plan.cost(scheduled), plan.cost(recorded) if recorded > 0 else 0)

    def _report_findings(self, plan: NumericPlan, facts: SlotFacts, i: int, report: ReportRecord) -> list[Finding]:
        findings = []
        parts = (PUBLICATION, DISSIMILARITY) if plan.method == ABSORPTION else (PUBLICATION,)
        scheduled = self.scheduled_units(plan, report)
        if report.part not in parts or report.law != plan.law or report.domain != 1 \
                or report.epsilon_units != scheduled:
            findings.append(Finding(OFF_SCHEDULE, report.entered, scheduled, int(report.epsilon_units)))
        statistics = facts.evidence.statistics
        keep, other = (getattr(statistics[i], name, None) for name in ("keep", "other")) if i < len(statistics) \
            else (None, None)
        if report.epsilon_units > 0 and (keep, other) != law_pair(plan.law, int(report.epsilon_units),
                                                                   plan.grid_bits):
            findings.append(Finding(LAW_MISMATCH, report.entered, int(report.epsilon_units), -1))
        return findings

    # -------------------------------------------------------------------------------------------- memory
    def _grow(self, users: int, depth: int) -> None:
        have, width = self.count.size, self.ring_slot.shape[1]
        if users <= have and depth <= width:
            return
        users, depth = max(users, have), max(depth, width)
        rings = []
        for ring in (self.ring_slot, self.ring_first, self.ring_least):
            grown = np.zeros((users, depth), np.int64)
            if depth == width:
                grown[:have] = ring
            else:  # re-seat each user's entries at count % depth
                for age in range(width):
                    positions = (self.count - 1 - age)
                    valid = positions >= 0
                    grown[np.flatnonzero(valid), positions[valid] % depth] = \
                        ring[np.flatnonzero(valid), positions[valid] % width]
            rings.append(grown)
        self.ring_slot, self.ring_first, self.ring_least = rings
        self.count = np.concatenate([self.count, np.zeros(users - have, np.int64)])

    def _memory_windows(self, plan: NumericPlan, facts: SlotFacts, users: np.ndarray, least: np.ndarray
                        ) -> list[Finding]:
        """Record this slot's reports and check each sender's memory-aware window (module doc)."""
        if users.size == 0:
            return []
        declared = facts.declared(users)
        fixed = declared.shape[1] == 2
        windows = declared[:, 0] if fixed else np.ones(users.size, np.int64)
        h = plan.memory_reports
        self._grow(int(users.max()) + 1, int(windows.max()) + h + 1)
        depth = self.ring_slot.shape[1]
        ages = self.count[users]
        at = ages % depth
        self.ring_slot[users, at] = facts.slot
        self.ring_first[users, at] = facts.slot - plan.value_span + 1
        self.ring_least[users, at] = least
        self.count[users] = ages + 1
        if not fixed:
            return []
        first_value = self.ring_first[users, plan.first_dependency(ages) % depth]
        earliest = first_value - windows + 1  # the window w + reach ends here at facts.slot
        column = np.arange(depth)
        filled = ages[:, None] - (at[:, None] - column[None, :]) % depth >= 0  # the column holds a report
        inside = filled & (self.ring_slot[users] >= earliest[:, None])
        sums = np.where(inside, self.ring_least[users], 0).sum(axis=1)
        over = np.flatnonzero(sums > declared[:, 1])
        if not over.size:
            return []
        return [Finding(MEMORY_WINDOW, users[over], int(declared[over[0], 1]), int(sums[over].max()))]

    # -------------------------------------------------------------------------------------------- state
    def state_arrays(self) -> dict[str, np.ndarray]:
        arrays = {"count": self.count, "ring_slot": self.ring_slot, "ring_first": self.ring_first,
                  "ring_least": self.ring_least}
        if self._plan is not None and self._plan.segment is not None:
            arrays["segment"] = np.array(self._plan.segment, np.int64)
        return arrays

    def load_state_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        if "count" in arrays:
            self.count = np.array(arrays["count"], np.int64)
            self.ring_slot, self.ring_first, self.ring_least = (np.array(arrays[name], np.int64) for name in
                                                                ("ring_slot", "ring_first", "ring_least"))
        if "segment" in arrays:
            self.plan({SEGMENT: int(arrays["segment"])})
