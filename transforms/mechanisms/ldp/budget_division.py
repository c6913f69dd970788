"""LDP-IDS budget division: LBU, LSP, LBD, LBA (spec ``ldp_ids.md`` §5.1-§5.4).

Every holder reports at every slot it is asked, each time with a small
share of the window budget ε; Theorem 4.1 makes the method w-event ε-LDP
when each user's budgets sum to at most ε over any ``w`` consecutive slots.

* **LBU**: every slot, every holder reports with ``ε/w``.
* **LSP**: every holder reports with ``ε`` at slots ``t ≡ 1 + offset (mod w)``;
  the other slots repeat the last estimate.
* **LBD**: M_{t,1} (every holder, ``βε/w``) estimates the dissimilarity of
  Eq. (3); M_{t,2} would spend half of what the last ``w-1`` publications
  left of the publication pool, and publishes when ``dis > err = V(ε_{t,2}, n)``.
* **LBA**: M_{t,1} as LBD; a publication absorbs the units ``(1-β)ε/w`` of
  the slots skipped since the last one (at most ``w``) and nullifies as many
  slots after it as it absorbed beyond one (``l = 0`` and no units at the
  start give the spec's ``t_N = -1``, trap T10).

Budgets are integer units, rounded down: ``ε_{t,1} = floor(βε/w)``; the
publication pool is what ``w`` dissimilarity shares leave of ``ε``, so a
window never holds more than ``ε`` even where ``βε/w`` is not whole.  The
decisions use the nominal budgets (the paper's); the charges are each
oracle's realised epsilon, never above them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator

import numpy as np

from transforms.mechanisms.base import ReleaseKind
from transforms.mechanisms.charges import DISSIMILARITY
from transforms.mechanisms.ldp.stream import (Answer, Holders, HomogeneousLocalMechanism, LocalDecision, LocalParams,
                                              Reports, Rounds)
from transforms.mechanisms.noise import Randomness


class LBU(HomogeneousLocalMechanism):
    """LDP Budget Uniform (§5.1): every holder reports with ``ε/w`` at every slot."""

    name = "lbu"
    asks_on_schedule = True

    def largest_report_units(self) -> int:
        return self.params.epsilon_units // self.params.window

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        units = self.largest_report_units()
        return (yield from self.publication_round(holders.users, units, False))


class LSP(HomogeneousLocalMechanism):
    """LDP Sampling (§5.2): every holder reports with ``ε`` once per window, at ``t ≡ 1 + offset (mod w)``."""

    name = "lsp"
    asks_on_schedule = True

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        p = self.params
        if (self.slot - 1 - p.sampling_offset) % p.window:
            return LocalDecision(ReleaseKind.SKIPPED, None, self.variance(p.epsilon_units, holders.users.size))
        return (yield from self.publication_round(holders.users, p.epsilon_units, True))


class AdaptiveBudget(HomogeneousLocalMechanism):
    """M_{t,1} of LBD and LBA: every holder reports with ``floor(βε/w)``; ``dis`` of Eq. (3)."""

    @property
    def dissimilarity_units(self) -> int:
        p = self.params
        return p.share_of(p.epsilon_units) // p.window

    def largest_report_units(self) -> int:
        return max(self.dissimilarity_units, self.publication_pool)

    @property
    def publication_pool(self) -> int:
        """What ``w`` dissimilarity shares leave of ``ε`` (``(1-β)ε`` when ``βε/w`` is whole)."""
        return self.params.epsilon_units - self.params.window * self.dissimilarity_units

    def dissimilarity_round(self, holders: Holders, units: int | None = None) -> Generator[Reports, Answer, float]:
        """M_{t,1}: every holder reports with ``units`` (default ``floor(βε/w)``); returns ``dis`` (``-inf`` when
        nobody answered or ``units`` is 0)."""
        units = self.dissimilarity_units if units is None else units
        if holders.users.size == 0 or units == 0:
            return -np.inf
        answer = yield Reports(holders.users, self.oracle(units), DISSIMILARITY, instruction=False, named_units=units)
        if answer.estimate is None:
            return -np.inf
        return self.dissimilarity(answer.estimate, units, answer.users.size)

    def publish_or_not(self, holders: Holders, units: int, dis: float) -> Rounds:
        """Publish with ``units`` when ``dis > V(units, n)``; otherwise repeat ``r_{t-1}``."""
        err = self.variance(units, holders.users.size)
        if not dis > err:
            return LocalDecision(ReleaseKind.SKIPPED, None, err)
        return (yield from self.publication_round(holders.users, units, True))


class LBD(AdaptiveBudget):
    """LDP Budget Distribution (§5.3): a publication spends half of what the last ``w-1`` left of the pool."""

    name = "lbd"

    def __init__(self, params: LocalParams):
        super().__init__(params)
        self._history = deque([0] * (params.window - 1), maxlen=params.window - 1)  # ε_{t,2} at t-1, t-2, ...

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        dis = yield from self.dissimilarity_round(holders)
        units = (self.publication_pool - sum(self._history)) // 2
        decision = yield from self.publish_or_not(holders, units, dis)
        if self._history.maxlen:
            self._history.appendleft(decision.epsilon_units)
        return decision

    def method_state(self):
        return {"publication_history": np.array(self._history, np.int64)}

    def load_method_state(self, state):
        self._history = deque((int(u) for u in state["publication_history"]), maxlen=self.params.window - 1)


class LBA(AdaptiveBudget):
    """LDP Budget Absorption (§5.4): a publication absorbs skipped units, then nullifies as many slots."""

    name = "lba"

    def __init__(self, params: LocalParams):
        super().__init__(params)
        self.last_publication = 0   # l
        self.units_absorbed = 0     # ε_{l,2}/unit at l (0 before any publication: t_N = -1)

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        dis = yield from self.dissimilarity_round(holders)
        nullified_until = self.last_publication + self.units_absorbed - 1  # l + t_N
        if self.slot <= nullified_until:
            return LocalDecision(ReleaseKind.NULLIFIED, None, np.inf)
        absorbed = min(self.slot - nullified_until, self.params.window)  # min(t_A, w)
        decision = yield from self.publish_or_not(holders, absorbed * self.unit, dis)
        if decision.kind is ReleaseKind.FRESH:
            self.last_publication, self.units_absorbed = self.slot, absorbed
        return decision

    @property
    def unit(self) -> int:
        """``(1-β)ε/w``: the publication share of one slot."""
        return self.publication_pool // self.params.window

    def method_state(self):
        return {"last_publication": np.array(self.last_publication), "units_absorbed": np.array(self.units_absorbed)}

    def load_method_state(self, state):
        self.last_publication = int(state["last_publication"])
        self.units_absorbed = int(state["units_absorbed"])


BUDGET_DIVISION = {cls.name: cls for cls in (LBU, LSP, LBD, LBA)}
