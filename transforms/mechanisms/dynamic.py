"""DPBD and DPBA: dynamic personalized requirements (spec/pwsm.md §1.5-1.6, §2.8-2.9).

At every slot ``t`` each user declares a backward ``(w_B, E_B)`` and a
forward ``(w_F, E_F)`` requirement; a user who sends nothing repeats their
last declaration.  Forward declarations stay live for ``w_F`` slots, so the
budget at ``t`` is capped by every live declaration ``τ ∈ T_{B,t}``, which
always includes ``τ = t``.

Chosen readings (spec §2.10):

* a backward ``E_B`` below what the window already spent is *projected* to
  the minimal feasible value ``max(E_B, 2Σε^(1), 2Σε^(2))`` (§1.6); the
  projected value is the requirement in force that the release reports and
  the ledger checks, so the projection is recorded, never silent;
* every candidate budget is clamped at 0 (A7), skipped and nullified slots
  record 0 (A6);
* DPBA's "right borders" ``Σε^(2)/share + τ - 1`` are compared exactly, as
  integers: ``t <= border`` iff ``(t-τ+1)·share <= Σε^(2)`` (A5); the
  authors' ``ceil`` borders are available with ``ceil_borders=True``.

Windows are bounded by ``max_window`` (an operator bound), and each cohort
keeps exactly that many slots of history, so a longer window declared later
never reads a history that was cut short.

Arrays below are per cohort row.  Declaration histories have column ``j`` =
the declaration of slot ``t-j``; charge histories have column ``j`` = the
charge of slot ``t-1-j``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.base import MechanismParams, window_sums
from transforms.mechanisms.population import Column, SlotData
from transforms.mechanisms.requirements import DynamicRequirements
from transforms.mechanisms.pwsm import PersonalizedMechanism

_NEVER = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, kw_only=True)
class DynamicParams(MechanismParams):
    """Adds ``max_window``: the longest backward or forward window a user may declare."""

    max_window: int = 1000

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.max_window, bool) or not isinstance(self.max_window, (int, np.integer)) \
                or not 1 <= self.max_window <= 100_000:
            raise ValueError(f"max_window must be an integer in [1, 100000], got {self.max_window!r}")

    @classmethod
    def fitted(cls, *, epsilon: float | None, window: int | None, max_window: int | None) -> dict:
        return {} if max_window is None else {"max_window": max_window}

    @property
    def longest_declarable_window(self) -> int | None:
        return self.max_window


@dataclass(frozen=True, kw_only=True)
class DPBAParams(DynamicParams):
    """Adds ``ceil_borders``: round DPBA's right borders up, as the authors' code does."""

    ceil_borders: bool = False


class DynamicMechanism(PersonalizedMechanism):
    """The parts DPBD and DPBA share: live declarations, ε^(1) and the backward caps."""

    requirement_kind = DynamicRequirements
    params_type = DynamicParams
    params: DynamicParams

    def __init__(self, params: DynamicParams):
        super().__init__(params)
        self.population.table.widen(params.max_window)
        self._backward_in_force = np.zeros(0, np.int64)
        self._publication_spent_backward = np.zeros(0, np.int64)

    def cohort_columns(self):
        return {"dc_history": Column(history=True), "publication_history": Column(history=True)}

    def validate_requirements(self, reqs: DynamicRequirements, users: np.ndarray | None = None) -> None:
        if len(reqs):
            longest = int(max(reqs.backward_window.max(), reqs.forward_window.max()))
            if longest > self.params.max_window:
                raise ValueError(f"a declared window of {longest} slots exceeds max_window="
                                 f"{self.params.max_window}")

    def _live(self):
        """Which declarations cover ``t``, and each one's window, budget and share."""
        t = self.population.table.data
        windows, units = t["declared_forward_window"], t["declared_forward_units"]
        live = np.arange(windows.shape[1])[None, :] < windows          # τ = t-j covers t
        share = np.where(live, units // np.maximum(2 * windows, 1), _NEVER)
        return live, units, share

    def _publication_spent_since(self) -> np.ndarray:
        """Column j: Σ ε^(2) over slots t-j .. t-1 (so column 0 is 0)."""
        hist = self.population.table.data["publication_history"]
        spent = np.zeros_like(hist)
        np.cumsum(hist[:, :-1], axis=1, out=spent[:, 1:])
        return spent

    def dc_budgets(self, data: SlotData) -> np.ndarray:
        t = self.population.table.data
        live, _, share = self._live()
        forward = share.min(axis=1)                                              # ε1F
        lookback = t["backward_window"] - 1
        dc_spent = window_sums(t["dc_history"], lookback)
        self._publication_spent_backward = window_sums(t["publication_history"], lookback)
        # §1.6 projection of an infeasible backward budget to the minimal feasible one.
        self._backward_in_force = np.maximum.reduce(
            [t["backward_units"], 2 * dc_spent, 2 * self._publication_spent_backward])
        backward = self._backward_in_force // 2 - dc_spent                       # ε1B
        return np.maximum(np.minimum(forward, backward), 0)

    def publication_backward_cap(self) -> np.ndarray:
        """ε_UB: what the backward window leaves for publication (not halved)."""
        return self._backward_in_force // 2 - self._publication_spent_backward

    def in_force_requirements(self) -> DynamicRequirements:
        declared = super().in_force_requirements()
        return DynamicRequirements(declared.backward_window, self._backward_in_force.copy(),
                                   declared.forward_window, declared.forward_units)

    def record(self, dc_units, publication_units, published):
        self.population.table.push("dc_history", dc_units)
        self.population.table.push("publication_history", publication_units)


class DPBD(DynamicMechanism):
    """Dynamic Personalized Budget Distribution (Alg. 6).

    The forward candidate is halved like PBD's, the backward one is not
    (spec trap 7).  Under constant forward requirements and a backward
    requirement that never binds, DPBD equals PBD exactly.
    """

    name = "dpbd"

    def publication_budgets(self, data: SlotData) -> np.ndarray:
        live, units, _ = self._live()
        remaining = np.where(live, units // 2 - self._publication_spent_since(), _NEVER)
        forward = remaining.min(axis=1) // 2                                     # ε2F (halved)
        return np.maximum(np.minimum(forward, self.publication_backward_cap()), 0)


class DPBA(DynamicMechanism):
    """Dynamic Personalized Budget Absorption (Alg. 7).

    Privacy rests on the caps ``ε_UF`` and ``ε_UB``; the absorption ``ε_AF``
    and the nullification only shape utility (spec §2.9).  DPBA does not
    reduce to PBA under constant requirements.
    """

    name = "dpba"
    params_type = DPBAParams

    def publication_budgets(self, data: SlotData) -> np.ndarray | None:
        live, units, share = self._live()
        spent = self._publication_spent_since()
        slots_covered = np.arange(share.shape[1])[None, :] + 1                    # t - τ + 1
        counted = live & (share > 0)
        safe_share = np.where(counted, share, 1)
        if self.params.ceil_borders:
            shares_used = -(-spent // safe_share)                                # ceil(Σ/share)
            reached = counted & (slots_covered <= shares_used)
            absorbed = (slots_covered - shares_used) * safe_share
        else:
            reached = counted & (slots_covered * safe_share <= spent)             # t <= border
            absorbed = slots_covered * safe_share - spent                        # (t - border)·share
        if reached[data.sizes > 0].any():
            return None                                                          # nullified
        allocated = np.where(counted, absorbed, -_NEVER).max(axis=1)             # ε_AF
        forward_left = np.where(live, units // 2 - spent, _NEVER).min(axis=1)    # ε_UF
        budget = np.minimum.reduce([allocated, forward_left, self.publication_backward_cap()])
        return np.maximum(budget, 0)


DYNAMIC = {DPBD.name: DPBD, DPBA.name: DPBA}
