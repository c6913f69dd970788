"""DPI's public schedule, both variants (spec ``dpi.md`` §2.7-§2.10): draws against the published slot budgets.

Every registered user enters every draw of a fresh slot (a query over all data touches everyone), so a
slot's least charge is the same for all of them, rebuilt from what the release publishes: its epoch, its
series index and slot budget ``e_t`` (the RBA's), and its draws (name, units each, how many).

* ``dpi-sound``: each of the ``r`` draws of each configured query is the exact exponential mechanism on
  ``-||y - A_j||_1`` (score sensitivity 2, the law's ``2Δ`` with ``Δ = 2``), so a draw at ``u`` units costs
  ``u``; the schedule names ``u = floor(e_t/(queries·r))`` and ``r`` draws per query.
* ``dpi`` (the paper's loop): a draw from a distribution whose log-weights moved by the cumulative learning
  rate costs ``2·s_a·alpha`` (``s_a = min(2, 2Δ/mu)``, ``alpha = mu/(4Δ)·rate/s_q``, with the stated margin
  ``1 + 2**-30`` and one unit, rounded up); the rates are the sums of the halves ``e_t // 2`` of the epoch's
  earlier slots, rebuilt here from the published budgets.  With every query sampled each slot (the
  default) this is exact; otherwise which query was sampled is not published and the least is the bound
  from the rates' known total (a sum of round-ups is at least the round-up of the sum).

Both: the draws may not cost more than the slot's published budget (``dpi-sound``), a series index is handed
out at most once per epoch, and every prefix of an epoch's rebuilt charges stays within its budget
``epsilon`` (``lifetime_prefix``).  The series' own values are not rebuilt (its root is found in floats by
the mechanism): the published ``e_t`` is read, and the prefix check bounds what any ``e_t`` can do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_units
from transforms.mechanisms.public_schedule import (LAW_MISMATCH, LIFETIME_PREFIX, OFF_SCHEDULE, DrawRecord,
                                                   Finding, PublicSchedule, SlotFacts, SlotVerdict)

SCORE_SENSITIVITY = 2
"""The l1 distance of two PDFs changes by at most 2 when one user's records change (spec §1.3)."""
SOUND_MARGIN = Fraction(1, 1 << 30)
"""The paper variant's stated relative margin on its sound figure (float weight sums)."""


class DPISchedule(PublicSchedule):
    """The public schedule of ``dpi`` and ``dpi-sound`` (module doc)."""

    methods = ("dpi", "dpi-sound")

    def __init__(self, method: str, params: Mapping[str, Any]):
        super().__init__(method, params)
        p = self.params
        self.epsilon = to_units(p["epsilon"], "epsilon")
        queries = p.get("queries", ["acc"])
        self.queries = tuple(queries.split(",") if isinstance(queries, str) else queries)
        self.draws = int(p.get("draws", 20))
        self.sampled = int(p.get("sampled_queries", 1))
        mu = Fraction(to_units(p.get("mu", 0.1), "mu"), UNITS_PER_EPSILON)
        s_a = min(Fraction(2), 2 * SCORE_SENSITIVITY / mu)
        self.per_rate_unit = 2 * s_a * mu / (4 * SCORE_SENSITIVITY) / UNITS_PER_EPSILON  # cost per rate unit
        self.epoch = 0
        self.rate = 0      # paper: the epoch's sum of e_t // 2 before this slot
        self.spent = 0     # the epoch's rebuilt least charges so far
        self.indices: set[int] = set()

    def verdict(self, facts: SlotFacts) -> SlotVerdict:
        record, everyone = facts.record, facts.registered
        draws, figures = record.draws, record.figures
        if not draws:
            return SlotVerdict(np.zeros(0, np.int64), np.zeros(0, np.int64))
        findings: list[Finding] = []
        epoch, index, slot_units = (int(figures.get(k, -1)) for k in ("epoch", "series_index", "slot_units"))
        if epoch != self.epoch:
            if epoch < self.epoch:
                findings.append(Finding(OFF_SCHEDULE, everyone, self.epoch, epoch))
            self.epoch, self.rate, self.spent, self.indices = epoch, 0, 0, set()
        if index < 1 or index in self.indices or slot_units < 1:
            findings.append(Finding(OFF_SCHEDULE, everyone, 1, index))
        self.indices.add(index)
        if self.method == "dpi-sound":
            least = self._sound(draws, slot_units, everyone, findings)
        else:
            least = self._paper(draws, slot_units, everyone, findings)
        findings += self._law_findings(facts, draws)
        self.spent += least
        if self.spent > self.epsilon:
            findings.append(Finding(LIFETIME_PREFIX, everyone, self.epsilon, self.spent))
        return SlotVerdict(everyone, np.full(everyone.size, least, np.int64), tuple(findings))

    def _sound(self, draws: tuple[DrawRecord, ...], slot_units: int, everyone: np.ndarray,
               findings: list[Finding]) -> int:
        named = max(slot_units, 0) // (len(self.queries) * self.draws)
        least = sum(d.units_per_draw * d.draws for d in draws)
        expected = {f"synopses:{q}" for q in self.queries}
        if {d.name for d in draws} != expected or any(d.draws != self.draws for d in draws) \
                or any(d.units_per_draw != named for d in draws) or least > slot_units:
            findings.append(Finding(OFF_SCHEDULE, everyone, named, max(d.units_per_draw for d in draws)))
        return least

    def _paper(self, draws: tuple[DrawRecord, ...], slot_units: int, everyone: np.ndarray,
               findings: list[Finding]) -> int:
        half = max(slot_units, 0) // 2
        rate, self.rate = self.rate, self.rate + half
        queries = len(self.queries)
        least = 0
        if rate:
            synopses = self.per_rate_unit * rate * (1 + SOUND_MARGIN) * UNITS_PER_EPSILON
            if self.sampled == queries:  # every query's rate is the epoch's sum: exact
                least += queries * self.draws * (math.ceil(synopses / self.sampled) + 1)
            else:  # the per-query rates sum to sampled · rate: the round-up of the sum bounds the sum of round-ups
                least += self.draws * (math.ceil(synopses) + 1)
                least += self.sampled * (math.ceil(synopses) + 1)  # the query draws: rate = the same sum
        names = {d.name for d in draws}
        expected = {f"synopses:{q}" for q in self.queries} | ({"queries"} if self.sampled < queries else set())
        if names != expected:
            findings.append(Finding(OFF_SCHEDULE, everyone, len(expected), len(names)))
        return least

    @staticmethod
    def _law_findings(facts: SlotFacts, draws: tuple[DrawRecord, ...]) -> list[Finding]:
        """The evidence's draws must be the published ones (compared, never used for a budget)."""
        stated = [(getattr(s, "name", None), getattr(s, "units_per_draw", None), getattr(s, "draws", None))
                  for s in facts.evidence.statistics]
        if stated != [tuple(d) for d in draws]:
            return [Finding(LAW_MISMATCH, facts.registered, len(draws), len(stated))]
        return []

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"counters": np.array([self.epoch, self.rate, self.spent], np.int64),
                "indices": np.array(sorted(self.indices), np.int64)}

    def load_state_arrays(self, arrays: Mapping[str, np.ndarray]) -> None:
        if "counters" in arrays:
            self.epoch, self.rate, self.spent = (int(v) for v in arrays["counters"])
            self.indices = {int(i) for i in arrays["indices"]}
