"""PBD and PBA: personalized w-event mechanisms for fixed requirements (spec §2.6-2.7).

Each user i has a fixed ``(w_i, E_i)``.  Half of ``E_i`` pays for the
dissimilarity, ``E_i/(2w_i)`` every slot; the other half pays for
publications, distributed (PBD) or absorbed (PBA) over the window.  Users
with the same requirement form one cohort and share one trajectory; see
``population`` for joining users, absent users and changed requirements.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.base import MechanismParams, window_sums
from transforms.mechanisms.population import Column, Population, SlotData, read_only_copy
from transforms.mechanisms.pwsm import PersonalizedMechanism


def fixed_share(population: Population) -> np.ndarray:
    """``E_i/(2w_i)`` per cohort row, read-only; it changes only when the cohorts do."""
    t = population.table.data
    return population.cohorts.kept("share", lambda: read_only_copy(t["epsilon_units"] // (2 * t["window"])))


class PBD(PersonalizedMechanism):
    """Personalized Budget Distribution (Alg. 4).

    A publication at ``t`` spends half of what remains of ``E_i/2`` in the
    previous ``w_i - 1`` slots (the paper's window, spec A10; the authors'
    code sums ``w_i`` slots).
    """

    name = "pbd"

    def cohort_columns(self):
        return {"publication_history": Column(history=True)}  # column j: ε^(2) at slot t-1-j

    def dc_budgets(self, data: SlotData) -> np.ndarray:
        return fixed_share(self.population)                                       # line 2

    def publication_budgets(self, data: SlotData) -> np.ndarray:
        t = self.population.table.data
        spent = window_sums(t["publication_history"], t["window"] - 1)           # line 4
        remaining = np.maximum(t["epsilon_units"] // 2 - spent, 0)
        return remaining // 2                                                     # line 5

    def record(self, dc_units, publication_units, published):
        self.population.table.push("publication_history", publication_units)


class PBA(PersonalizedMechanism):
    """Personalized Budget Absorption (Alg. 5).

    A publication may absorb the shares ``E_i/(2w_i)`` of the slots skipped
    since the last publication ``l``; after using ``k`` shares it nullifies the
    next ``k - 1`` slots.  Share counts are integers (spec A4), and ``l`` and
    the shares used there are recorded after every publication: the authors'
    code never records them and is not private (reference_impl §4.4).
    Before any publication there is a virtual one-share publication at
    ``l = 0`` (spec A1, trap 10); a cohort created later starts the same way.
    A cohort with no members at a publication keeps counting down its own
    nullification (the spec has one population; here a cohort can be empty
    while its users wait for a change they may cancel).
    """

    name = "pba"

    def __init__(self, params: MechanismParams):
        super().__init__(params)
        self.last_publication = 0
        self._recorded_shares = None

    def cohort_columns(self):
        return {"shares_at_last_publication": Column(fill=1)}

    def extra_state(self):
        return {"last_publication": self.last_publication}

    def load_extra_state(self, state):
        self.last_publication = int(state["last_publication"])

    def dc_budgets(self, data: SlotData) -> np.ndarray:
        return fixed_share(self.population)                                       # line 2

    def publication_budgets(self, data: SlotData) -> np.ndarray | None:
        t = self.population.table.data
        nullified_after = t["shares_at_last_publication"] - 1                    # t_N, line 5
        live = data.sizes > 0
        longest = int(nullified_after[live].max(initial=0))                      # line 6
        since = self.slot - self.last_publication
        if since <= longest:                                                     # line 7
            return None
        absorbed = np.maximum(since - nullified_after, 0)                        # t_A, line 10
        shares = np.where(live, np.minimum(absorbed, t["window"]), 0)
        # A cohort without members spends nothing here, and its own nullification goes on: after a
        # publication at this slot it has t_N - since slots left (a member who cancels a change
        # rejoins the cohort's history, so forgetting them would let it absorb nullified slots).
        self._recorded_shares = np.where(live, shares, np.maximum(nullified_after - since, -1) + 1)
        return fixed_share(self.population) * shares                             # line 11

    def record(self, dc_units, publication_units, published):
        if published:
            self.last_publication = self.slot
            self.population.table.data["shares_at_last_publication"][:] = self._recorded_shares


PERSONALIZED = {PBD.name: PBD, PBA.name: PBA}
