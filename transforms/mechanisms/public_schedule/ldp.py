"""The LDP-IDS methods' and PLBU's public schedules (spec ``ldp_ids.md`` §5, ``pwsm.md`` §3.5).

What each method may ask at a slot follows from its public parameters:

* LBU: one publication request at ``floor(E/w)``; LSP: one at ``E`` at slots ``t ≡ 1 + offset (mod w)``,
  none otherwise;
* LBD, LBA: the dissimilarity request at ``floor(βE)/w`` (β as the decimal written), a publication at most
  what ``w`` dissimilarity shares leave of ``E``; LB-DSATw and LB-RescueDP: every request at most ``E``;
* LPU, LPD, LPA, LP-DSATw, LP-RescueDP (population division): every request at ``E``, and no user asked
  twice within ``w`` slots (from who was asked and who reported, not from the method's pool);
* PLBU: every request at ``floor(E_i/w_i)`` of each of its users' declared requirement;

and every method: the law is the forced oracle or the Ada rule's at that budget over the method's ``d``
(mean methods: stochastic rounding at or below eps = 0.61, HM above, ``d = 1``), and an estimate counts only
reports of users its request asked.  A report's least charge is the log-ratio of the law the request names,
rebuilt in :mod:`.laws` (HM: the larger of stochastic rounding's and the Piecewise Mechanism's band ratio).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_units
from transforms.mechanisms.public_schedule import (ASKED_TWICE, LAW_MISMATCH, OFF_SCHEDULE, UNASKED_REPORT, Finding,
                                                   PublicSchedule, ReportRecord, SlotFacts, SlotVerdict,
                                                   least_of_reports, outside)
from transforms.mechanisms.public_schedule.laws import (FREQUENCY_LAWS, ROUNDING_ONLY_UNITS, ada_law, frequency_pair,
                                                        hybrid_pair, pair_units)

DISSIMILARITY, PUBLICATION = "dissimilarity", "publication"  # the charge parts' public names
PARTS = (DISSIMILARITY, PUBLICATION)
DEFAULT_GRID_BITS = 16

BUDGET_EXACT = ("lbu", "lsp", "lbd", "lba")
BUDGET_CAPPED = ("lb-dsatw", "lb-rescuedp")
POPULATION = ("lpu", "lpd", "lpa", "lp-dsatw", "lp-rescuedp")
MEAN = tuple(f"{name}-mean" for name in ("lbu", "lsp", "lbd", "lba", "lpu", "lpd", "lpa"))


class LocalSchedule(PublicSchedule):
    """The public schedule of an LDP-IDS method or PLBU (module doc)."""

    methods = BUDGET_EXACT + BUDGET_CAPPED + POPULATION + MEAN + ("plbu",)

    def __init__(self, method: str, params: Mapping[str, Any]):
        super().__init__(method, params)
        p = self.params
        self.base = method[:-5] if method.endswith("-mean") else method
        self.mean = method.endswith("-mean")
        self.bins = 1 if self.mean else int(p["bins"])
        self.forced = p.get("oracle")
        self.grid_bits = int(p.get("grid_bits") or DEFAULT_GRID_BITS)
        self.personalized = self.base == "plbu"
        if not self.personalized:
            self.epsilon = to_units(p["epsilon"], "epsilon")
            self.window = int(p["window"])
            beta = Fraction(repr(float(p.get("beta", 0.5))))
            self.dissimilarity_units = self.epsilon * beta.numerator // beta.denominator // self.window
        self.population = self.base in POPULATION
        self.last_asked = np.zeros(0, np.int64)  # population: per user index, the last slot they were asked (0: never)

    # -------------------------------------------------------------------------------------------- the rules
    def allowed_units(self, slot: int, part: str) -> tuple[int, int] | None:
        """The budgets a request of ``part`` may name at ``slot``: ``(lowest, highest)``; None: no such request."""
        base, e = self.base, getattr(self, "epsilon", 0)
        if part not in PARTS:
            return None
        if base == "lbu":
            return (e // self.window,) * 2 if part == PUBLICATION else None
        if base == "lsp":
            offset = int(self.params.get("sampling_offset", 0))
            return (e, e) if part == PUBLICATION and (slot - 1 - offset) % self.window == 0 else None
        if base in ("lbd", "lba"):
            if part == DISSIMILARITY:
                return (self.dissimilarity_units,) * 2
            pool = e - self.window * self.dissimilarity_units
            return (1, pool if base == "lbd" else pool // self.window * self.window)
        if base in BUDGET_CAPPED:
            return 1, e
        return e, e  # population division: always the whole budget

    def law_of(self, units: int) -> str:
        """The law a request at ``units`` must use."""
        if self.mean:
            return "sr" if units <= ROUNDING_ONLY_UNITS else "hm"
        return self.forced or ada_law(units, self.bins)

    def report_units(self, report: ReportRecord) -> int:
        """Least units of one report through the law the request names (rebuilt)."""
        return _report_units(report.law, report.epsilon_units, report.domain, self.grid_bits)

    # -------------------------------------------------------------------------------------------- a slot
    def verdict(self, facts: SlotFacts) -> SlotVerdict:
        findings: list[Finding] = []
        reports = facts.record.reports
        for report in reports:
            findings += self._request_findings(facts, report)
        findings += self._law_findings(facts, reports)
        if self.population:
            findings += self._asked_twice(facts.slot, reports)
        sane = [r for r in reports if _rebuildable(r, self.mean)]
        users, least = least_of_reports(sane, self.report_units)
        return SlotVerdict(users, least, tuple(findings))

    def _request_findings(self, facts: SlotFacts, report: ReportRecord) -> list[Finding]:
        findings = []
        unasked = outside(report.entered, report.asked)
        touched = _touched(report, unasked)
        if unasked.size:
            findings.append(Finding(UNASKED_REPORT, unasked, report.asked.size, report.entered.size))
        units = report.epsilon_units
        if self.personalized:
            declared = facts.declared(touched)
            named = declared[:, 1] // np.maximum(declared[:, 0], 1) if declared.shape[1] == 2 else \
                np.full(touched.size, -1)
            off = touched[named != units]
            if off.size:
                findings.append(Finding(OFF_SCHEDULE, off, int(named[named != units][0]), units))
        else:
            allowed = self.allowed_units(facts.slot, report.part)
            if allowed is None or not allowed[0] <= units <= allowed[1]:
                findings.append(Finding(OFF_SCHEDULE, touched, 0 if allowed is None else allowed[1], units))
                return findings
        if not _rebuildable(report, self.mean) or report.law != self.law_of(units) or report.domain != self.bins:
            findings.append(Finding(OFF_SCHEDULE, touched, self.bins, report.domain))
        return findings

    def _law_findings(self, facts: SlotFacts, reports: tuple[ReportRecord, ...]) -> list[Finding]:
        """The evidence's laws, report by report, must be the schedule's (compared, never used for a budget)."""
        statistics = facts.evidence.statistics
        findings = []
        for i, report in enumerate(reports):
            statistic = statistics[i] if i < len(statistics) else None
            keep, other = getattr(statistic, "keep", None), getattr(statistic, "other", None)
            if keep is None or other is None or not _rebuildable(report, self.mean):
                findings.append(Finding(LAW_MISMATCH, report.entered, 0, 0))
                continue
            if not _law_agrees(report, int(keep), int(other), self.grid_bits):
                seen = pair_units(int(keep), int(other)) if 0 < int(other) <= int(keep) else -1
                findings.append(Finding(LAW_MISMATCH, report.entered, report.epsilon_units, seen))
        return findings

    def _asked_twice(self, slot: int, reports: tuple[ReportRecord, ...]) -> list[Finding]:
        findings = []
        for report in reports:
            touched = _touched(report, outside(report.entered, report.asked))
            if not touched.size:
                continue
            capacity = int(touched[-1]) + 1
            if self.last_asked.size < capacity:
                self.last_asked = np.concatenate([self.last_asked, np.zeros(capacity - self.last_asked.size,
                                                                            np.int64)])
            before = self.last_asked[touched]
            again = (before > 0) & (slot - before < self.window)
            if again.any():
                findings.append(Finding(ASKED_TWICE, touched[again], self.window, int(slot - before[again].max())))
            self.last_asked[touched] = slot
        return findings

    # -------------------------------------------------------------------------------------------- state
    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"last_asked": self.last_asked} if self.population else {}

    def load_state_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        if "last_asked" in arrays:
            self.last_asked = np.array(arrays["last_asked"], np.int64)


def _touched(report: ReportRecord, unasked: np.ndarray) -> np.ndarray:
    """Everyone a request concerns: those asked, and those whose reports entered without being asked."""
    return report.asked if not unasked.size else np.union1d(report.asked, unasked)


def _rebuildable(report: ReportRecord, mean: bool) -> bool:
    """Whether the record names a law this module rebuilds, at a budget it can (at most 20 epsilon)."""
    laws = ("sr", "hm") if mean else FREQUENCY_LAWS
    return (report.law in laws and 0 < report.epsilon_units <= 20 * UNITS_PER_EPSILON
            and (report.domain == 1 if mean else 2 <= report.domain <= 1 << 24))


@functools.lru_cache(maxsize=4096)
def _report_units(law: str, units: int, domain: int, grid_bits: int) -> int:
    if law in FREQUENCY_LAWS:
        return pair_units(*frequency_pair(law, units, domain))
    return pair_units(*hybrid_pair(units, grid_bits))


@functools.lru_cache(maxsize=4096)
def _law_agrees_cached(law: str, units: int, domain: int, grid_bits: int, keep: int, other: int) -> bool:
    if law in FREQUENCY_LAWS:
        return (keep, other) == frequency_pair(law, units, domain)
    return (keep, other) == hybrid_pair(units, grid_bits)  # SR's pair alone at or below 0.61 (law "sr")


def _law_agrees(report: ReportRecord, keep: int, other: int, grid_bits: int) -> bool:
    return _law_agrees_cached(report.law, report.epsilon_units, report.domain, grid_bits, keep, other)
