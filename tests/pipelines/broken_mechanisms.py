"""Deliberately broken mechanisms, to show that the privacy audit has power (test code, never shipped).

``python -m pipelines.audit --mechanism M --broken V`` loads this file from a
source checkout (``pipelines.audit.load_broken_variants``); the tests import
it directly.  Each variant is an explicit subclass of a registered mechanism,
so it stays broken whatever the core fixes:

* ``noiseless-dissimilarity``: the dissimilarity gets no noise.
* ``reused-noise``: one noise vector, drawn at the first release, is added to
  every release.
* ``half-scale-noise``: every noise draw at half the scale; charges,
  requirements and the release's evidence are reported as if the scale were right.
* ``waiting-user-used`` (issue 12, finding 1): a user who starts waiting for a
  changed fixed requirement has that slot's report sampled and noised in their
  old cohort, while charged 0.
* ``dead-cohort-absorbs`` (finding 2): PBA's released budget code, whose cohort
  that is empty during a publication records 0 shares there and later absorbs
  slots it should have left nullified.
* ``forgotten-slot``: PBD's remaining budget sums the previous ``w - 2``
  slots instead of ``w - 1`` (an off-by-one that forgets the window's oldest slot).
* ``authors-bookkeeping``: PBA (or BA) that never records its last
  publication, as the authors' code (reference_impl §4.4).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms import MECHANISMS, Mechanism
from transforms.mechanisms import sampling
from transforms.mechanisms.base import window_sums
from transforms.mechanisms.homogeneous import BA
from transforms.mechanisms.personalized import PBA, PBD, fixed_share
from transforms.mechanisms.population import WAITING, SlotData
from transforms.mechanisms.sampling import Cells


@contextmanager
def _replaced(module, **replacements):
    """Module attributes replaced while the block runs (the audit and tests are single-threaded)."""
    saved = {name: getattr(module, name) for name in replacements}
    for name, value in replacements.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


class NoiselessDissimilarity:
    """Mixin: the dissimilarity is computed without noise."""

    def decide(self, data, rng):
        with _replaced(sampling, discrete_laplace_draw=lambda scale, rng: 0):
            return super().decide(data, rng)


class ReusedNoise:
    """Mixin: the noise vector of the first release is added again to every later release."""

    def decide(self, data, rng):
        draw = sampling.discrete_laplace

        def reused(scale, size, rng):
            if getattr(self, "_reused_noise", None) is None:
                self._reused_noise = draw(scale, size, rng)
            return self._reused_noise

        with _replaced(sampling, discrete_laplace=reused):
            return super().decide(data, rng)


class HalfScaleNoise:
    """Mixin: every noise draw (dissimilarity and release) at half the scale the budget asks for.

    The draws are halved where they are made, so what the release reports (charges, the noise scale in
    its evidence) is what a correct mechanism would report: only the empirical audit can see it.
    """

    def decide(self, data, rng):
        vector, draw = sampling.discrete_laplace, sampling.discrete_laplace_draw
        with _replaced(sampling, discrete_laplace=lambda scale, size, rng: vector(scale / 2, size, rng),
                       discrete_laplace_draw=lambda scale, rng: draw(scale / 2, rng)):
            return super().decide(data, rng)


class WaitingUserUsed:
    """Mixin for PBD/PBA: a user who starts waiting at this slot is still sampled in their old cohort."""

    def step(self, batch, rng):
        self._rows_before = self.population.cohort_of.copy()
        self._batch = batch
        return super().step(batch, rng)

    def decide(self, data: SlotData, rng):
        before, batch = self._rows_before, self._batch
        now = self.population.cohort_of
        users, values = batch.users, batch.values
        known = users < before.size
        users, values = users[known], values[known]
        started = (values >= 0) & (now[users] == WAITING) & (before[users] >= 0)
        if started.any():
            cells = data.cells
            data = dataclasses.replace(data, cells=Cells(
                np.concatenate([cells.cohort, before[users[started]]]),
                np.concatenate([cells.bin, values[started]]),
                np.concatenate([cells.count, np.ones(int(started.sum()), np.int64)])))
        return super().decide(data, rng)


class DeadCohortAbsorbs(PBA):
    """PBA's publication budgets as released before the fix of finding 2 (kept here on purpose)."""

    def publication_budgets(self, data: SlotData):
        t = self.population.table.data
        nullified_after = t["shares_at_last_publication"] - 1
        longest = int(nullified_after[data.sizes > 0].max(initial=0))  # empty cohorts are skipped ...
        since = self.slot - self.last_publication
        if since <= longest:
            return None
        self._shares = np.minimum(np.maximum(since - nullified_after, 0), t["window"])
        return fixed_share(self.population) * self._shares

    def record(self, dc_units, publication_units, published):
        if published:  # ... yet record the 0 shares of this publication, so absorb one slot too many later
            self.last_publication = self.slot
            self.population.table.data["shares_at_last_publication"][:] = self._shares


class ForgottenSlotPBD(PBD):
    """PBD whose remaining budget forgets the oldest slot of the window (sums ``w - 2`` slots)."""

    def publication_budgets(self, data: SlotData) -> np.ndarray:
        t = self.population.table.data
        spent = window_sums(t["publication_history"], t["window"] - 2)
        return np.maximum(t["epsilon_units"] // 2 - spent, 0) // 2


class ForgetfulBA(BA):
    """BA that never records its last publication (reference_impl §4.4)."""

    def decide(self, data, rng):
        saved = self.last_publication, self.shares_at_last_publication
        decision = super().decide(data, rng)
        self.last_publication, self.shares_at_last_publication = saved
        return decision


class ForgetfulPBA(PBA):
    """PBA that never records its last publication (reference_impl §4.4)."""

    def record(self, dc_units, publication_units, published):
        pass


DISSIMILARITY = ("bd", "ba", "pbd", "pba", "dpbd", "dpba")


def _mixed(mixin: type, names) -> dict[str, type[Mechanism]]:
    return {name: type(f"{mixin.__name__}{MECHANISMS[name].__name__}", (mixin, MECHANISMS[name]), {})
            for name in names}


@dataclass(frozen=True)
class Variant:
    """A broken variant: its class per registered mechanism it applies to, and the one tests use."""

    classes: dict[str, type[Mechanism]]
    default: str
    description: str


VARIANTS: dict[str, Variant] = {
    "noiseless-dissimilarity": Variant(_mixed(NoiselessDissimilarity, DISSIMILARITY), "pbd",
                                       "the dissimilarity gets no noise"),
    "reused-noise": Variant(_mixed(ReusedNoise, MECHANISMS), "pbd",
                            "one noise vector, drawn once, added to every release"),
    "half-scale-noise": Variant(_mixed(HalfScaleNoise, MECHANISMS), "pbd",
                                "all noise at half the scale, charges reported for the full scale"),
    "waiting-user-used": Variant(_mixed(WaitingUserUsed, ("pbd", "pba")), "pbd",
                                 "a user starting to wait is sampled in their old cohort, charged 0 (finding 1)"),
    "dead-cohort-absorbs": Variant({"pba": DeadCohortAbsorbs}, "pba",
                                   "a cohort empty during a publication later absorbs a nullified slot (finding 2)"),
    "forgotten-slot": Variant({"pbd": ForgottenSlotPBD}, "pbd",
                              "the remaining budget sums w - 2 slots instead of w - 1"),
    "authors-bookkeeping": Variant({"pba": ForgetfulPBA}, "pba",
                                   "never records the last publication, as the authors' code"),
}


def broken_class(variant: str, mechanism: str) -> type[Mechanism]:
    """The class of broken ``variant`` of registered ``mechanism``; ``ValueError`` naming the choices."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown broken variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    classes = VARIANTS[variant].classes
    if mechanism not in classes:
        raise ValueError(f"{variant} applies to {', '.join(classes)}, not {mechanism}")
    return classes[mechanism]


__all__ = ["VARIANTS", "DeadCohortAbsorbs", "ForgetfulBA", "ForgetfulPBA", "ForgottenSlotPBD", "HalfScaleNoise",
           "NoiselessDissimilarity", "ReusedNoise", "Variant", "WaitingUserUsed", "broken_class"]
