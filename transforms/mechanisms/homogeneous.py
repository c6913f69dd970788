"""Homogeneous w-event baselines: BD, BA, Uniform and Sample (spec/pwsm.md §3).

Every user gets the same ``(ε, w)``, which is private for user i only when
``w >= w_i`` and ``ε <= E_i``; a row whose requirement is stricter is
rejected before anything changes.  The papers run them with
``(min E_i, max w_i)``.  BD and BA (Kellaris et al. 2014) publish the true
counts (no sampling) and compare the dissimilarity with the Laplace scale
``Δ/ε₂`` rather than PWSM's ``sqrt(err)``.
"""

from __future__ import annotations

import functools
import math
from collections import deque

import numpy as np

from transforms.mechanisms.base import (Decision, HomogeneousParams, Mechanism, ReleaseKind, is_fresh_publication,
                                        same_for_every_row)
from transforms.mechanisms.budget import UNITS_PER_EPSILON, units_to_decimal_string
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.population import SlotData
from transforms.mechanisms.requirements import FixedRequirement, FixedRequirements
from transforms.mechanisms.evidence import Statistic
from transforms.mechanisms.sampling import certain_statistic, disturb, noisy_total_deviation


class HomogeneousMechanism(Mechanism):
    """One budget trajectory for everyone."""

    params_type = HomogeneousParams
    params: HomogeneousParams
    samples_cohorts = False

    def __init__(self, params: HomogeneousParams):
        super().__init__(params)
        if isinstance(params.default_requirement, FixedRequirement):
            self._check_covered(FixedRequirements.uniform(params.default_requirement, 1))

    def _check_covered(self, reqs: FixedRequirements, users: np.ndarray | None = None) -> None:
        p = self.params
        stricter = (reqs.window > p.window) | (reqs.epsilon_units < p.epsilon_units)
        if stricter.any():
            i = int(np.argmax(stricter))
            raise ValueError(
                f"{'a user' if users is None else f'user {int(users[i])}'} requires (w={int(reqs.window[i])}, "
                f"E={units_to_decimal_string(int(reqs.epsilon_units[i]))}), stricter than {self.name}'s "
                f"(w={p.window}, epsilon={p.epsilon}); run it with (min E_i, max w_i)")

    def validate_requirements(self, requirements: FixedRequirements, users: np.ndarray | None = None) -> None:
        self._check_covered(requirements, users)

    def charges(self, data: SlotData, dc: int, publication: int) -> tuple[np.ndarray, np.ndarray]:
        rows = self.population.table.rows
        return same_for_every_row(rows, dc), same_for_every_row(rows, publication)

    def variance(self, units: int) -> float:
        return _noise_variance(units, self.params.sensitivity, self.params.error_model)

    def statistic(self, name: str, units: int) -> Statistic:
        """A statistic every registered user enters, with noise of scale ``Δ/ε``."""
        return certain_statistic(name, self.population.table.rows, units, self.params.sensitivity)


@functools.lru_cache(maxsize=1024)
def _noise_variance(units: int, sensitivity: int, model) -> float:
    return model.noise_variance(units / UNITS_PER_EPSILON, sensitivity)


class BD(HomogeneousMechanism):
    """Budget Distribution: each publication spends half of what the window has left."""

    name = "bd"

    def __init__(self, params: HomogeneousParams):
        super().__init__(params)
        self._load_history([0] * (params.window - 1))

    def _load_history(self, newest_first) -> None:
        self.publication_history = deque(newest_first, maxlen=self.params.window - 1)  # ε^(2) at t-1, t-2, ...
        self.history_total = sum(self.publication_history)

    def extra_state(self):
        return {"publication_history": np.array(self.publication_history, np.int64)}

    def load_extra_state(self, state):
        self._load_history(int(units) for units in state["publication_history"])

    def decide(self, data: SlotData, rng: Randomness) -> Decision:
        p = self.params
        dc = p.epsilon_units // (2 * p.window)
        truth = data.cells.histogram(p.bins)
        dissimilarity = self.statistic("dissimilarity", dc)
        scaled_dis = noisy_total_deviation(truth, self.last_release, dissimilarity, rng)
        publication = max(p.epsilon_units // 2 - self.history_total, 0) // 2
        error = self.variance(publication)
        fresh = publication > 0 and is_fresh_publication(
            scaled_dis, p.bins, p.sensitivity * UNITS_PER_EPSILON / publication)
        spent = publication if fresh else 0
        history = self.publication_history
        if history.maxlen:
            self.history_total += spent - history[-1]
            history.appendleft(spent)
        dc_units, pub_units = self.charges(data, dc, spent)
        if fresh:
            published = self.statistic("publication", publication)
            noisy = disturb(truth, published, rng)
            return Decision(ReleaseKind.FRESH, noisy, publication, error, dc_units, pub_units,
                            (dissimilarity, published))
        return Decision(ReleaseKind.SKIPPED, None, 0, error, dc_units, pub_units, (dissimilarity,))


class BA(HomogeneousMechanism):
    """Budget Absorption: publications absorb skipped shares, then nullify as many slots.

    Unlike the authors' code, ``l`` and the shares used there are recorded
    after every publication (reference_impl §4.4).
    """

    name = "ba"

    def __init__(self, params: HomogeneousParams):
        super().__init__(params)
        self.last_publication = 0
        self.shares_at_last_publication = 1  # virtual publication at l = 0

    def extra_state(self):
        return {"last_publication": self.last_publication,
                "shares_at_last_publication": self.shares_at_last_publication}

    def load_extra_state(self, state):
        self.last_publication = int(state["last_publication"])
        self.shares_at_last_publication = int(state["shares_at_last_publication"])

    def decide(self, data: SlotData, rng: Randomness) -> Decision:
        p = self.params
        share = p.epsilon_units // (2 * p.window)
        truth = data.cells.histogram(p.bins)
        dissimilarity = self.statistic("dissimilarity", share)
        scaled_dis = noisy_total_deviation(truth, self.last_release, dissimilarity, rng)
        nullified_after = self.shares_at_last_publication - 1
        since = self.slot - self.last_publication
        if since <= nullified_after:
            dc_units, pub_units = self.charges(data, share, 0)
            return Decision(ReleaseKind.NULLIFIED, None, 0, math.nan, dc_units, pub_units, (dissimilarity,))
        shares = min(since - nullified_after, p.window)
        publication = share * shares
        error = self.variance(publication)
        fresh = publication > 0 and is_fresh_publication(
            scaled_dis, p.bins, p.sensitivity * UNITS_PER_EPSILON / publication)
        dc_units, pub_units = self.charges(data, share, publication if fresh else 0)
        if not fresh:
            return Decision(ReleaseKind.SKIPPED, None, 0, error, dc_units, pub_units, (dissimilarity,))
        self.last_publication, self.shares_at_last_publication = self.slot, shares
        published = self.statistic("publication", publication)
        noisy = disturb(truth, published, rng)
        return Decision(ReleaseKind.FRESH, noisy, publication, error, dc_units, pub_units,
                        (dissimilarity, published))


class Uniform(HomogeneousMechanism):
    """Publish every slot with ``ε/w``."""

    name = "uniform"
    publishes_on_schedule = True

    def decide(self, data: SlotData, rng: Randomness) -> Decision:
        p = self.params
        budget = p.epsilon_units // p.window
        published = self.statistic("publication", budget)
        noisy = disturb(data.cells.histogram(p.bins), published, rng)
        dc_units, pub_units = self.charges(data, 0, budget)
        return Decision(ReleaseKind.FRESH, noisy, budget, self.variance(budget), dc_units, pub_units, (published,))


class Sample(HomogeneousMechanism):
    """Publish with the whole ``ε`` at slots ``1, w+1, 2w+1, ...``; repeat in between."""

    name = "sample"
    publishes_on_schedule = True

    def decide(self, data: SlotData, rng: Randomness) -> Decision:
        p = self.params
        error = self.variance(p.epsilon_units)
        if (self.slot - 1) % p.window:
            dc_units, pub_units = self.charges(data, 0, 0)
            return Decision(ReleaseKind.SKIPPED, None, 0, error, dc_units, pub_units)
        published = self.statistic("publication", p.epsilon_units)
        noisy = disturb(data.cells.histogram(p.bins), published, rng)
        dc_units, pub_units = self.charges(data, 0, p.epsilon_units)
        return Decision(ReleaseKind.FRESH, noisy, p.epsilon_units, error, dc_units, pub_units, (published,))


HOMOGENEOUS = {m.name: m for m in (BD, BA, Uniform, Sample)}
