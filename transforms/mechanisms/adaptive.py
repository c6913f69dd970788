"""Adaptive personalized budget allocation: distribute or absorb, decided per slot (docs/adaptive.md).

PBD and PBA (``personalized``) fix one policy for the whole stream: PBD
spends half of what the window has left at every publication, PBA absorbs
the shares of the slots skipped since the last publication and then
nullifies.  Neither wins everywhere (docs/results.md).  ``adaptive`` chooses
at every slot, per cohort, from information that is already public or paid
for, and keeps each user's spending inside every window by a cap alone.

Specification, per cohort row ``i`` with fixed ``(w_i, E_i)`` at slot ``t``
(integer budget units throughout; ``s_i = E_i // (2 w_i)``):

1. **Dissimilarity** (as PBD/PBA, Alg. 3): ``ε^(1)_i = s_i``; OBS over
   ``ε^(1)``, sample, noisy ``dis`` with discrete Laplace noise of scale
   ``Δ/θ_1``.
2. **Cap**: ``R_i = E_i // 2 - Σ_{j=1}^{w_i-1} ε^(2)_{i,t-j}`` (what the
   current window leaves for publications).
3. **Candidates**: distribute ``D_i = R_i // 2`` (PBD's choice) and absorb
   ``A_i = min(R_i, k · s_i)`` with ``k = min(t - l, w_i)``, ``l`` the last
   fresh publication (0 before any), PBA's choice without nullification.
4. **Mix**: ``C_i = max(D_i, A_i)``: absorb when enough slots were
   skipped for absorption to beat distribution, distribute otherwise.  A
   cohort whose cap is below one share (``R_i < s_i``) offers 0 (crumbs
   would only buy noise); when that holds for every cohort with a user
   present, earlier publications absorbed the slot: it is *nullified* (DC
   still runs and is charged, as in PBA).
5. **Enough**: ``ε^(2) = ⌊C · k/64⌋`` for the smallest integer ``k`` in
   ``1..64`` (found by bisection, which takes the error to fall as the
   budgets grow; whatever ``k`` it returns, ``ε^(2) <= C``) whose OBS error
   is below
   ``(r · σ_1)²``, where ``σ_1`` is the standard deviation of the per-bin
   noise on ``dis`` (the DC noise at ``θ_1`` divided by ``d``) and ``r`` is
   ``resolution`` (default 1/2); ``k = 64`` (``ε^(2) = C``) when none is.
   The publish test cannot tell changes much below ``σ_1`` from noise, so
   a release more precise than that buys nothing the next slots can use,
   while the budget it spends stays in the window: absorbing the whole
   ``E_i/2`` for a 2-bin publication whose error is a hundredth of
   ``σ_1`` nullifies the next ``w_i - 1`` slots.  ``r = 0`` turns the step
   off; it never raises a budget.
6. **Decide**: publish when ``dis > sqrt(err(θ_2)) + m · σ_1``, where
   ``θ_2`` and ``err`` are OBS over ``ε^(2)`` (Alg. 1) and ``m`` is
   ``margin`` (default 1).  PBD and PBA use ``m = 0``
   and so publish on noise alone whenever ``σ_1`` dwarfs the error of a
   publication, which is the common case (``s_i`` is small): each such
   publication spends budget for nothing.  The margin asks for evidence.
7. **Charge**: ``(ε^(1), ε^(2))`` per cohort row when fresh, ``(ε^(1), 0)``
   when skipped, nothing when nobody can afford the dissimilarity (A8).

Dynamic requirements (:class:`DynamicAdaptive`, ``dadaptive``): ``ε^(1)`` is DPBD's (the forward and
backward caps of every live declaration, ``dynamic``); the cap ``R_i`` is
the smaller of the unhalved forward remainder over every live declaration
(``ε_UF``) and the backward remainder (``ε_UB``); ``s_i`` is the smallest
live forward share.  Steps 3-7 are unchanged.

Privacy.  Every charge is in ``Decision(dc_units, publication_units)``, so
the ledger sees it.  Fixed requirements: in any ``w_i`` consecutive slots
``Σ ε^(1) <= w_i s_i <= E_i/2`` and, because ``ε^(2)_t <= C_t <= R_t``
(step 5 only lowers ``C``), ``Σ ε^(2) <= E_i/2``; so the window spends at
most ``E_i``.  Dynamic: the caps are exactly DPBD's (``ε^(2) <= min(ε_UF,
ε_UB)``, not halved), which is the bound DPBD's proof uses.  Everything the
choices read other than the charged dissimilarity is either public (cohort
sizes and requirements, as for every personalized mechanism, and the error
model's predictions from them: ``σ_1`` and the OBS errors of step 5), a past
decision (fresh or not, itself a function of charged outputs) or a past
charge: post-processing, free.  Step 5 reads no user's value.  The
publication is the sampling mechanism at the OBS threshold over ``ε^(2)``,
as in PBD/PBA, so each user's ``ε^(2)`` bounds its loss at that slot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.base import MechanismParams, window_sums
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.dynamic import DynamicMechanism, DynamicParams
from transforms.mechanisms.obs import Selection, optimal_budget
from transforms.mechanisms.personalized import fixed_share
from transforms.mechanisms.population import Column, SlotData
from transforms.mechanisms.pwsm import PersonalizedMechanism


def _check_choice(margin, resolution) -> None:
    for name, value in (("margin", margin), ("resolution", resolution)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                                    and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


SCALE_STEPS = 64
"""Step 5 scales the candidate budgets by ``k / SCALE_STEPS`` for an integer ``k`` (a 1/64 grid)."""


@dataclass(frozen=True, kw_only=True)
class AdaptiveParams(MechanismParams):
    """Adds ``margin``: how many DC-noise standard deviations ``dis`` must clear to publish, and ``resolution``:
    the publication error (its standard deviation, in DC-noise standard deviations) worth paying for."""

    margin: float = 1.0
    resolution: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        _check_choice(self.margin, self.resolution)


@dataclass(frozen=True, kw_only=True)
class DynamicAdaptiveParams(DynamicParams):
    """:class:`AdaptiveParams` for dynamic requirements."""

    margin: float = 1.0
    resolution: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        _check_choice(self.margin, self.resolution)


class _AdaptiveChoice:
    """Steps 3-5 of the specification, shared by the fixed and the dynamic variant."""

    last_publication: int

    def window_cap(self) -> np.ndarray:
        """``R_i``: what the windows leave for a publication now, per cohort row."""
        raise NotImplementedError

    def absorbable_share(self) -> np.ndarray:
        """``s_i``: the share one skipped slot lets a publication absorb, per cohort row."""
        raise NotImplementedError

    def window_lengths(self) -> np.ndarray:
        """``w_i``: the most shares a publication may absorb, per cohort row."""
        raise NotImplementedError

    def publication_budgets(self, data: SlotData) -> np.ndarray | None:
        cap, share = self.window_cap(), self.absorbable_share()
        open_ = cap >= np.maximum(share, 1)
        if not open_[data.sizes > 0].any():
            return None  # earlier publications absorbed every present user's budget: nullified
        skipped = np.minimum(self.slot - self.last_publication, self.window_lengths())
        absorbed = np.minimum(cap, skipped * share)
        return self._enough(np.where(open_, np.maximum(cap // 2, absorbed), 0), data)

    def _enough(self, candidate: np.ndarray, data: SlotData) -> np.ndarray:
        """Step 5: ``candidate`` scaled by the smallest ``k / SCALE_STEPS`` whose predicted publication error is
        below ``(resolution · σ_1)²``; ``candidate`` itself when no scale is (nothing is ever raised)."""
        params = self.params  # dc_budgets again: the same tables give the same ε^(1) within a slot
        first = optimal_budget(self.dc_budgets(data), data.sizes, params.sensitivity, params.error_model)
        target = (params.resolution * self._dc_std(first)) ** 2

        whole, rest = np.divmod(candidate, SCALE_STEPS)

        def scaled(k: int) -> np.ndarray:  # ⌊candidate · k / SCALE_STEPS⌋ without overflowing int64
            return whole * k + rest * k // SCALE_STEPS

        def fine(k: int) -> bool:
            chosen = optimal_budget(scaled(k), data.sizes, params.sensitivity, params.error_model)
            return chosen.exists and chosen.error < target

        low, high = 0, SCALE_STEPS  # invariant: k = high is the full candidate or meets the target
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if fine(middle) else (middle, high)
        return scaled(high)

    def _dc_std(self, first: Selection) -> float:
        """``σ_1``: the standard deviation of the noise on ``dis`` (per bin) at the dissimilarity's threshold."""
        params = self.params
        return math.sqrt(params.error_model.noise_variance(first.epsilon_units / UNITS_PER_EPSILON,
                                                           params.sensitivity)) / params.bins

    def publication_threshold(self, first: Selection, second: Selection) -> float:
        return math.sqrt(second.error) + self.params.margin * self._dc_std(first)

    def extra_state(self):
        return {"last_publication": self.last_publication}

    def load_extra_state(self, state):
        self.last_publication = int(state["last_publication"])


class Adaptive(_AdaptiveChoice, PersonalizedMechanism):
    """Adaptive budget allocation for fixed requirements (registered as ``adaptive``)."""

    name = "adaptive"
    params_type = AdaptiveParams

    def __init__(self, params: AdaptiveParams):
        super().__init__(params)
        self.last_publication = 0

    def cohort_columns(self):
        return {"publication_history": Column(history=True)}  # column j: ε^(2) at slot t-1-j

    def dc_budgets(self, data: SlotData) -> np.ndarray:
        return fixed_share(self.population)

    def window_cap(self) -> np.ndarray:
        t = self.population.table.data
        return t["epsilon_units"] // 2 - window_sums(t["publication_history"], t["window"] - 1)

    def absorbable_share(self) -> np.ndarray:
        return fixed_share(self.population)

    def window_lengths(self) -> np.ndarray:
        return self.population.table.data["window"]

    def record(self, dc_units, publication_units, published):
        self.population.table.push("publication_history", publication_units)
        if published:
            self.last_publication = self.slot


class DynamicAdaptive(_AdaptiveChoice, DynamicMechanism):
    """Adaptive budget allocation for dynamic requirements (registered as ``dadaptive``)."""

    name = "dadaptive"
    params_type = DynamicAdaptiveParams

    def __init__(self, params: DynamicAdaptiveParams):
        super().__init__(params)
        self.last_publication = 0

    def window_cap(self) -> np.ndarray:
        live, units, _ = self._live()
        forward_left = np.where(live, units // 2 - self._publication_spent_since(), np.iinfo(np.int64).max)
        return np.minimum(forward_left.min(axis=1), self.publication_backward_cap())

    def absorbable_share(self) -> np.ndarray:
        _, _, share = self._live()
        return share.min(axis=1)

    def window_lengths(self) -> np.ndarray:
        live, _, _ = self._live()
        windows = self.population.table.data["declared_forward_window"]
        return np.where(live, windows, np.iinfo(np.int64).max).min(axis=1)

    def record(self, dc_units, publication_units, published):
        super().record(dc_units, publication_units, published)
        if published:
            self.last_publication = self.slot

