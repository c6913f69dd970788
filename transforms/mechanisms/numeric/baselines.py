"""The baselines of seed 003's evaluation: BA-SW (spec ``ipp_app_capp.md`` §3.7.1) and ToPL(PM) (§3.7.2).

**BA-SW** is budget absorption (Kellaris et al.) with the square wave, run by each user on their own stream:
half the window budget pays a noisy dissimilarity ``|SW(|x'_last - x_t|, e1)|`` at every slot
(``e1 = ε/(2w)``), the other half publications that absorb the budget of the slots skipped since the last
one (``e2 = e1·min(absorbed, w)``) and nullify as many slots after it.  A slot publishes when the
dissimilarity exceeds the square wave's half-band ``b(e2)``; otherwise the last publication is repeated.  The
window is the true ``w`` (the reference code passes its APP memory instead, trap T18).  The first slot always
publishes at ``e1``.  Every report depends on its own slot's value only (the last publication is public), so
the charges' window sums are the whole privacy check.

**ToPL(PM)** is what the reference code runs for ToPL: the Piecewise Mechanism per slot at ``ε/w`` on
``2x - 1``, mapped back by ``(t̂ + 1)/2`` (unbiased, very noisy at small budgets).  PM is the project's exact
discretised one (:class:`~transforms.mechanisms.ldp.mean.PiecewiseMechanism`), de-biased by its realised gain.

Draws: BA-SW takes two 64-bit draws per user per slot (dissimilarity, publication; the first slot's
dissimilarity draw is unused) so a user's draws do not depend on the others' decisions; ToPL one per user per
slot, in user order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp.mean import PiecewiseMechanism
from transforms.mechanisms.noise import Randomness, secure_randomness
from transforms.mechanisms.numeric.perturbation import Perturbed, positive_int
from transforms.mechanisms.numeric.square_wave import DEFAULT_GRID_BITS, SquareWave


class AbsorptionState(NamedTuple):
    """BA-SW's per-user state (one row per user): the last publication, when, and its budget in shares ``e1``."""

    published: np.ndarray  # (users,) float64: the last published value
    last_slot: np.ndarray  # (users,) int64: its slot (-1: none yet)
    shares: np.ndarray     # (users,) int64: its budget e2 / e1
    slot: np.ndarray       # (users,) int64: the user's next slot


@dataclass(frozen=True)
class _WindowBudget:
    """A window budget ``epsilon`` per ``window`` slots, split over :meth:`shares` reports of a window."""

    epsilon: float
    window: int
    grid_bits: int = DEFAULT_GRID_BITS

    def __post_init__(self):
        to_units(self.epsilon, "epsilon")
        positive_int("window (w)", self.window)
        if self.epsilon_units // self.shares() < 1:
            raise ValueError(f"epsilon={self.epsilon!r} is too small to split over {self.shares()} reports")
        self.randomizer()  # builds it: refuses a budget below its resolution

    @cached_property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")

    def shares(self) -> int:
        """How many reports of one window share the budget."""
        raise NotImplementedError

    def randomizer(self):
        """The randomizer of one share (built to validate the budget)."""
        raise NotImplementedError


@dataclass(frozen=True)
class AbsorptionParams(_WindowBudget):
    """BA-SW with window budget ``epsilon`` per ``window`` slots."""

    def shares(self) -> int:
        return 2 * self.window

    def randomizer(self) -> SquareWave:
        return self.wave(1)

    @property
    def share_units(self) -> int:
        """``e1 = ε/(2w)``, in budget units (rounded down)."""
        return self.epsilon_units // self.shares()

    def wave(self, shares: int) -> SquareWave:
        """The square wave at ``shares · e1``."""
        return SquareWave.create(shares * self.share_units, self.grid_bits)

    def initial_state(self, users: int) -> AbsorptionState:
        return AbsorptionState(np.zeros(users), np.full(users, -1, np.int64), np.ones(users, np.int64),
                               np.zeros(users, np.int64))


def _report(wave: SquareWave, values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    return wave.value_of(wave.cells_from_draws(wave.grid_index(values, clip=True), draws))


def absorption_shares(state: AbsorptionState, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Per user at their next slot: whether it is nullified (absorbed by the last publication:
    ``slot - last <= e2_last/e1 - 1``) and the shares ``min(absorbed, w)`` a publication would use (1 at the
    first slot)."""
    first = state.last_slot < 0
    nullified = ~first & (state.slot - state.last_slot <= state.shares - 1)
    absorbed = state.slot - (state.last_slot + state.shares - 1)
    return nullified, np.where(first, 1, np.clip(absorbed, 1, window))


def absorption_step(params: AbsorptionParams, state: AbsorptionState, values, rng: Randomness
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, AbsorptionState]:
    """One slot of BA-SW for every user of ``state``: the released values, whether each user sent a
    dissimilarity report (at ``e1``), the shares of the publication each sent (0: none) and the new state."""
    x = np.asarray(values, np.float64)
    draws = rng.uint32(4 * x.size).view(np.uint64)
    dis_draws, pub_draws = draws[:x.size], draws[x.size:]
    first = state.last_slot < 0
    dissimilarity = np.abs(_report(params.wave(1), np.abs(state.published - x), dis_draws))
    nullified, shares = absorption_shares(state, params.window)
    published = np.zeros(x.size, np.int64)
    released = state.published.copy()
    for k in np.unique(shares[~nullified]):
        wave = params.wave(int(k))
        chosen = ~nullified & (shares == k) & (first | (dissimilarity > float(wave.b)))
        if chosen.any():
            released[chosen] = _report(wave, x[chosen], pub_draws[chosen])
            published[chosen] = k
    publish = published > 0
    new = AbsorptionState(released, np.where(publish, state.slot, state.last_slot),
                          np.where(publish, published, state.shares), state.slot + 1)
    return released, ~first, published, new


def absorption_charges(params: AbsorptionParams, sent: np.ndarray, published: np.ndarray) -> np.ndarray:
    """Each user's charge for a slot (units): the dissimilarity wave's realised epsilon if they sent one, plus
    the publication wave's."""
    charges = np.where(sent, params.wave(1).realised_units, 0).astype(np.int64)
    for k in np.unique(published[published > 0]):
        charges[published == k] += params.wave(int(k)).realised_units
    return charges


def ba_sw(params: AbsorptionParams, values, rng: Randomness | None = None,
          state: AbsorptionState | None = None) -> Perturbed:
    """BA-SW over a block of streams (users × slots, values in ``[0, 1]``); the released sequences (repeated
    values included) and every slot's charges."""
    x = np.asarray(values, np.float64)
    rng = rng or secure_randomness()
    state = params.initial_state(x.shape[0]) if state is None else state
    released = np.empty_like(x)
    charges = np.empty(x.shape, np.int64)
    for t in range(x.shape[1]):
        released[:, t], sent, published, state = absorption_step(params, state, x[:, t], rng)
        charges[:, t] = absorption_charges(params, sent, published)
    first = np.broadcast_to(np.arange(x.shape[1]), x.shape).copy()
    return Perturbed(released, charges, first, state, True)


@dataclass(frozen=True)
class ToplParams(_WindowBudget):
    """ToPL(PM): the Piecewise Mechanism at ``ε/w`` per slot."""

    def shares(self) -> int:
        return self.window

    def randomizer(self) -> PiecewiseMechanism:
        return self.piecewise

    @cached_property
    def piecewise(self) -> PiecewiseMechanism:
        return PiecewiseMechanism.create(self.epsilon_units // self.shares(), self.grid_bits)


def topl_step(params: ToplParams, values, rng: Randomness) -> np.ndarray:
    """One slot of ToPL(PM) for every user: ``(t̂ + 1)/2`` with ``t̂ = (2w - 1)/g`` the de-biased PM report."""
    pm = params.piecewise
    cells = pm.perturb(values, rng, clip=True)  # cell midpoints w in PM's square-wave coordinates
    return (1 + (2 * cells - 1) / float(pm.gain)) / 2


def topl(params: ToplParams, values, rng: Randomness | None = None) -> Perturbed:
    """ToPL(PM) over a block of streams (users × slots, values in ``[0, 1]``)."""
    x = np.asarray(values, np.float64)
    rng = rng or secure_randomness()
    reports = np.empty_like(x)
    for t in range(x.shape[1]):
        reports[:, t] = topl_step(params, x[:, t], rng)
    charges = np.full(x.shape, params.piecewise.realised_units, np.int64)
    first = np.broadcast_to(np.arange(x.shape[1]), x.shape).copy()
    return Perturbed(reports, charges, first, None, True)
