"""PWSM, the generic personalized framework (spec/pwsm.md §2.5, Alg. 2).

At every slot each user's budget is split in two parts.  Part_DC spends
``ε^(1)`` on a private dissimilarity between the data and the last release;
Part_NOP decides whether to publish with ``ε^(2)``, and publishes with the
sampling mechanism at the OBS threshold when the dissimilarity exceeds the
predicted error of publishing.  The subclasses (PBD, PBA, DPBD, DPBA) only
say how ``ε^(1)`` and ``ε^(2)`` are allocated and what they record.
"""

from __future__ import annotations

import abc
import math

import numpy as np

from transforms.mechanisms.base import Decision, Mechanism, ReleaseKind, is_fresh_publication, same_for_every_row
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.obs import Selection, optimal_budget
from transforms.mechanisms.population import SlotData
from transforms.mechanisms.sampling import disturb, noisy_total_deviation, sample_histogram, sampled_statistic


class PersonalizedMechanism(Mechanism):
    """Alg. 2 with the budget allocation left to subclasses."""

    @abc.abstractmethod
    def dc_budgets(self, data: SlotData) -> np.ndarray:
        """``ε^(1)`` per cohort row, in units."""

    @abc.abstractmethod
    def publication_budgets(self, data: SlotData) -> np.ndarray | None:
        """``ε^(2)`` per cohort row, or ``None`` when the slot is nullified."""

    @abc.abstractmethod
    def record(self, dc_units: np.ndarray, publication_units: np.ndarray, published: bool) -> None:
        """Remember what was charged at this slot."""

    def publication_threshold(self, first: Selection, second: Selection) -> float:
        """Per-bin dissimilarity above which Part_NOP publishes: the predicted error's root (Alg. 2)."""
        return math.sqrt(second.error)

    def decide(self, data: SlotData, rng: Randomness) -> Decision:
        params, bins = self.params, self.params.bins
        dc = self.dc_budgets(data)
        nothing = same_for_every_row(dc.size, 0)
        # Part_DC (Alg. 3): OBS over ε^(1), sample, noisy dissimilarity.
        first = optimal_budget(dc, data.sizes, params.sensitivity, params.error_model)
        if not first.exists:  # nobody can afford DC: skip and charge nothing (spec A8)
            self.record(nothing, nothing, published=False)
            return Decision(ReleaseKind.SKIPPED, None, 0, math.inf, nothing, nothing)
        dissimilarity = sampled_statistic("dissimilarity", dc, first.epsilon_units, params.sensitivity)
        sampled = sample_histogram(data.cells, dissimilarity, bins, rng)
        scaled_dis = noisy_total_deviation(sampled, self.last_release, dissimilarity, rng)
        # Part_NOP.
        publication = self.publication_budgets(data)
        if publication is None:
            self.record(dc, nothing, published=False)
            return Decision(ReleaseKind.NULLIFIED, None, 0, math.nan, dc, nothing, (dissimilarity,))
        second = optimal_budget(publication, data.sizes, params.sensitivity, params.error_model)
        if second.exists and is_fresh_publication(scaled_dis, bins, self.publication_threshold(first, second)):
            published = sampled_statistic("publication", publication, second.epsilon_units, params.sensitivity)
            noisy = disturb(sample_histogram(data.cells, published, bins, rng), published, rng)
            self.record(dc, publication, published=True)
            return Decision(ReleaseKind.FRESH, noisy, second.epsilon_units, second.error, dc, publication,
                            (dissimilarity, published))
        self.record(dc, nothing, published=False)
        return Decision(ReleaseKind.SKIPPED, None, 0, second.error, dc, nothing, (dissimilarity,))
