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

The local and lifetime families (issue 26), each through a public extension
point (a public method or property overridden, public parameters passed):

* ``over-budget-randomizer``: the users' randomizer perturbs at 4× the budget
  the request names (LDP-IDS ``simulate``, PLBU; the numeric ``client`` while
  ``run_users`` names the square wave of the stated budget).
* ``unasked-reports-counted``: a population method's estimate also counts
  the reports of holders it did not ask (``simulate`` adds them).
* ``memory-ignored``: APP/CAPP at ``ε/w`` per report with deviation memory
  ``w`` (public ``PerturbationParams(budget="paper", not_w_event_private=True)``):
  a change within a window moves ``2w`` reports, ``2E``.
* ``dpi-over-draw``: ``dpi-sound`` draws at 8× its stated per-slot budget
  (its public ``distances`` scaled by 8).
* ``half-charge``: every release's charges halved (``step`` returns the
  release with its charges rebuilt from their public fields), evidence unchanged.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from functools import cached_property

from transforms.mechanisms import MECHANISMS, Mechanism
from transforms.mechanisms import sampling
from transforms.mechanisms.base import window_sums
from transforms.mechanisms.charges import PUBLICATION, GroupCharges
from transforms.mechanisms.homogeneous import BA
from transforms.mechanisms.ldp.oracles import MAX_LDP_EPSILON_UNITS, FrequencyOracle
from transforms.mechanisms.numeric.perturbation import PerturbationParams
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


class OverBudgetRandomizer:
    """Mixin for an LDP-IDS method or PLBU: each report perturbed at ``FACTOR`` × the budget its request names
    (and charges); the estimate de-biases with the named oracle."""

    FACTOR = 4

    def simulate(self, request, holders, rng):
        named = request.oracle
        used = FrequencyOracle.create(named.kind, min(named.epsilon_units * self.FACTOR, MAX_LDP_EPSILON_UNITS),
                                      named.d)
        return super().simulate(request._replace(oracle=used), holders, rng)


class OverBudgetSquareWave:
    """Mixin for SW-direct/IPP/APP/CAPP: the client's square wave at ``FACTOR`` × the stated budget, while the
    reports name (and are charged) the square wave of the stated budget."""

    FACTOR = 4

    def stated(self, epsilon: float) -> PerturbationParams:
        p = self.params
        return PerturbationParams(epsilon, p.window, self.method, memory=p.memory, reset=p.reset,
                                  bound_mode=p.bound_mode, delta=p.delta, grid_bits=p.grid_bits)

    @cached_property
    def client(self):
        return self.stated(self.params.epsilon * self.FACTOR).client

    def run_users(self, users, x, rng):
        named = self.stated(self.params.epsilon).client.sw
        return users, self.step_clients(users, x, rng), [(PUBLICATION, named, np.ones(users.size, bool))]


class UnaskedReportsCounted:
    """Mixin for a population-division method: each request's counts also hold the reports of the holders it did
    not ask (at the request's budget), so every holder's value reaches every estimate; only the asked are charged."""

    def simulate(self, request, holders, rng):
        asked = super().simulate(request, holders, rng)
        unasked = np.setdiff1d(holders.users, request.users)
        if unasked.size == 0:
            return asked
        return asked + super().simulate(request._replace(users=unasked), holders, rng)


class MemoryIgnored:
    """Mixin for APP/CAPP: ``ε/w`` per report with deviation memory ``w`` (the paper's budget on a stream), the
    reports named for what they spend: each window's charges sum to ``E`` while a change within it moves
    ``w + h`` reports."""

    @cached_property
    def client(self):
        p = self.params
        return PerturbationParams(p.epsilon, p.window, self.method, memory=p.memory, reset=p.reset,
                                  bound_mode=p.bound_mode, delta=p.delta, grid_bits=p.grid_bits, budget="paper",
                                  not_w_event_private=True).client


class ScaledDistances:
    """The exact distances times ``factor``: an exponential-mechanism draw from them spends ``factor`` × its budget."""

    def __init__(self, distances, factor: int):
        self.distances, self.factor = distances, factor
        self.denominator = distances.denominator

    def __len__(self) -> int:
        return len(self.distances)

    def __getitem__(self, j: int) -> int:
        return self.factor * self.distances[j]

    def __iter__(self):
        return (self.factor * value for value in self.distances)


class OverDraw:
    """Mixin for ``dpi-sound``: every draw at ``FACTOR`` × the per-slot budget it states and is charged."""

    FACTOR = 8

    def distances(self, truth):
        return ScaledDistances(super().distances(truth), self.FACTOR)


class HalfCharge:
    """Mixin for any mechanism: each release's charges halved (rebuilt from their public fields), the evidence of
    what was computed unchanged."""

    def step(self, batch, rng):
        release = super().step(batch, rng)
        c = release.charges
        halved = GroupCharges(c.group_of, {part: units // 2 for part, units in c.group_parts.items()},
                              c.requirement_kind, c.evidence, c.declarations, c.default_requirement)
        return dataclasses.replace(release, charges=halved)


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
    "over-budget-randomizer": Variant({**_mixed(OverBudgetRandomizer, ("lbu", "lsp", "lpd", "plbu")),
                                       **_mixed(OverBudgetSquareWave, ("sw-direct", "app", "capp"))}, "lbu",
                                      "the randomizer perturbs at 4x the budget its reports name and are charged"),
    "unasked-reports-counted": Variant(_mixed(UnaskedReportsCounted, ("lpd", "lpu", "lpa")), "lpd",
                                       "the estimate also counts the reports of holders it did not ask"),
    "memory-ignored": Variant(_mixed(MemoryIgnored, ("app", "capp")), "app",
                              "eps/w per report with deviation memory w: 2E per window, charges sum to E"),
    "dpi-over-draw": Variant(_mixed(OverDraw, ("dpi-sound",)), "dpi-sound",
                             "draws at 8x the per-slot budget it states and is charged"),
    "half-charge": Variant(_mixed(HalfCharge, ("pbd", "lbu", "plbu", "sw-direct", "app", "dpi-sound")), "lbu",
                           "every release charged half of what its evidence costs"),
}


def broken_class(variant: str, mechanism: str) -> type[Mechanism]:
    """The class of broken ``variant`` of registered ``mechanism``; ``ValueError`` naming the choices."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown broken variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    classes = VARIANTS[variant].classes
    if mechanism not in classes:
        raise ValueError(f"{variant} applies to {', '.join(classes)}, not {mechanism}")
    return classes[mechanism]


__all__ = ["VARIANTS", "DeadCohortAbsorbs", "ForgetfulBA", "ForgetfulPBA", "ForgottenSlotPBD", "HalfCharge",
           "HalfScaleNoise", "MemoryIgnored", "NoiselessDissimilarity", "OverBudgetRandomizer", "OverBudgetSquareWave",
           "OverDraw", "ReusedNoise", "UnaskedReportsCounted", "Variant", "WaitingUserUsed", "broken_class"]
