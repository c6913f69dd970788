"""The one-slot scenarios: neighbouring streams that differ in the target's report at one slot ``t*``.

Central methods: add/remove-one (the target reports at ``t*`` or not).  Local
methods protect the value a user reports, not whether they report: for them
the streams differ in the target's bin at ``t*`` (replace-one) and ``E*`` is
unchanged.  ``steady`` runs on every windowed mechanism; ``changes`` on the
mechanisms with fixed personalized requirements (module doc of
:mod:`pipelines.audit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from transforms.mechanisms import (NO_VALUE, DynamicRequirements, Family, FixedRequirements, Mechanism,
                                   MechanismParams, SlotBatch)
from transforms.mechanisms import domain as mechanism_domain

TARGET = 0
"""The target user's index in every scenario."""
TARGET_BIN = 0

@dataclass(frozen=True)
class UserPlan:
    """One user of a scenario.

    ``declared`` maps a slot to the fixed ``(w, E)`` the user declares there
    (the first one registers them); ``values`` is their bin per slot (``None``:
    no report).  ``sure`` lists the slots at which the auditor counts the
    report as certainly in the samples of a personalized mechanism (a member
    of the cohort whose budget OBS picks, not waiting); other reports count
    only for the homogeneous mechanisms, which never sample.
    """

    declared: dict[int, tuple[int, float]]
    values: tuple[int | None, ...]
    sure: frozenset[int]

    def requirement_at(self, slot: int) -> tuple[int, float] | None:
        """The user's latest declaration at or before ``slot``."""
        latest = [s for s in self.declared if s <= slot]
        return self.declared[max(latest)] if latest else None


@dataclass(frozen=True)
class Scenario:
    """Streams, the differing slot ``t*`` and the budget ``E*`` a leak there is compared with."""

    name: str
    description: str
    bins: int
    users: tuple[UserPlan, ...]
    target_slot: int
    bound: float                              # E*, in epsilon
    homogeneous: tuple[float, int]            # (E, w) the homogeneous baselines run with
    families: frozenset[Family]

    @property
    def slots(self) -> int:
        return len(self.users[0].values)

    @property
    def max_window(self) -> int:
        return max(w for user in self.users for w, _ in user.declared.values())

    def params_for(self, mechanism: type[Mechanism]) -> MechanismParams:
        """``mechanism``'s parameters in this scenario: the baselines at :attr:`homogeneous`, every declarable
        window up to the scenario's longest."""
        epsilon, window = self.homogeneous
        if mechanism.estimates is mechanism_domain.Estimate.MEAN:  # one mean of the bins taken as real values in [0, bins-1]
            return mechanism.params_type.from_options(1, epsilon=epsilon, window=window, low=0.0,
                                                      high=float(self.bins - 1))
        return mechanism.params_type.from_options(self.bins, epsilon=epsilon, window=window,
                                                  max_window=self.max_window)

    def _requirement(self, family: Family, window: int, epsilon: float) -> tuple[int, float]:
        if family is Family.HOMOGENEOUS:  # every user at least as loose as the baselines' (E, w)
            e, w = self.homogeneous
            return w, max(epsilon, e)
        return window, epsilon

    def streams(self, family: Family, replace: bool = False, numeric: bool = False
                ) -> tuple[list[SlotBatch], list[SlotBatch]]:
        """``(present, absent)``: identical except the target's report at ``t*`` (with ``replace``, the second
        stream's target reports the next bin there instead of nothing; ``numeric``: bins as real values)."""
        streams: tuple[list[SlotBatch], list[SlotBatch]] = ([], [])
        for slot in range(1, self.slots + 1):
            declaring = any(slot in user.declared for user in self.users)
            for which, batches in enumerate(streams):
                users, values, windows, epsilons = [], [], [], []
                for index, user in enumerate(self.users):
                    value = user.values[slot - 1]
                    if which == 1 and index == TARGET and slot == self.target_slot:
                        value = (value + 1) % self.bins if replace else None
                    requirement = user.requirement_at(slot)
                    if requirement is None or (value is None and not (declaring and slot in user.declared)):
                        continue
                    users.append(index)
                    values.append(NO_VALUE if value is None else value)
                    w, e = self._requirement(family, *requirement)
                    windows.append(w)
                    epsilons.append(e)
                requirements = None
                if declaring:
                    requirements = (DynamicRequirements.of(windows, epsilons, windows, epsilons)
                                    if family is Family.DYNAMIC else FixedRequirements.of(windows, epsilons))
                if numeric:
                    values = [math.nan if v == NO_VALUE else float(v) for v in values]
                batches.append(SlotBatch.of(users, values, requirements))
        return streams

    def expected_counts(self, family: Family) -> tuple[np.ndarray, np.ndarray]:
        """Per slot, the counts per bin the auditor expects in a sample, and whether bin 0 holds only sure reports.

        The target's own report counts at every slot but ``t*`` where it is sure.
        """
        counts = np.zeros((self.slots, self.bins))
        clean = np.ones(self.slots, bool)
        for index, user in enumerate(self.users):
            for slot, value in enumerate(user.values, start=1):
                if value is None or (index == TARGET and slot == self.target_slot):
                    continue
                if family is Family.HOMOGENEOUS or slot in user.sure:
                    counts[slot - 1, value] += 1
                elif value == TARGET_BIN:
                    clean[slot - 1] = False
        return counts, clean


def plan_of(values, declared, sure=None) -> UserPlan:
    values = tuple(values)
    return UserPlan(declared, values, frozenset(range(1, len(values) + 1) if sure is None else sure))


ONE_SLOT_FAMILIES = frozenset(Family) - {Family.LIFETIME}
"""The windowed families these scenarios audit; DPI's lifetime budgets have their own scenario
(:mod:`pipelines.audit.lifetime`)."""


def steady_scenario() -> Scenario:
    """Every mechanism: the target's report at slot 3 of 4 carries a whole (w = 1, E = 2) budget.

    Cohort T (w = 1, E = 2): the target and three others in bin 0, twelve users
    moving between bins 1 and 2 every slot (so most slots publish), a user who
    declares (w = 1, E = 3) at slot 3 (a cohort of their own) and one who joins
    at slot 3.  Cohort S (w = 4, E = 0.08): two users in bin 2 whose budget is
    far below T's, so OBS picks T's and samples S with probability below 2%.
    The baselines run with (E, w) = (2, 1), everyone declaring at least that.
    """
    slots, t = 4, 3
    t_cohort = {1: (1, 2.0)}
    users = [plan_of([0] * slots, t_cohort)]                                        # the target
    users += [plan_of([0] * slots, t_cohort) for _ in range(3)]
    users += [plan_of([1 + s % 2 for s in range(slots)], t_cohort) for _ in range(12)]
    users += [plan_of([2] * slots, {1: (4, 0.08)}, sure=()) for _ in range(2)]
    users.append(plan_of([1] * slots, {1: (1, 2.0), t: (1, 3.0)}))                # changes requirement at t*
    users.append(plan_of([None] * (t - 1) + [1] * (slots - t + 1), {t: (1, 2.0)}))  # joins at t*
    return Scenario("steady", "target in force (w=1, E=2), reports at t*=3 of 4 slots; several cohorts, "
                    "subsampling, a joiner and a requirement change at t*", 3, tuple(users), t, 2.0, (2.0, 1),
                    ONE_SLOT_FAMILIES)


def changes_scenario() -> Scenario:
    """Fixed personalized mechanisms: the target starts waiting at t* = 5 of 7; a leak there is charged nothing.

    The target (w = 1, E = 4) declares (w = 3, E = 1) at slot 5, which takes
    effect at slot 7: a window of the new requirement holds slot 5, so
    ``E* = 1``, and a correct mechanism uses none of the target's report at
    slot 5.  At slot 5 another user cancels a change declared at slot 4 (so
    cohort sizes and the number of waiting users are what they were) and a
    registered user with a small index reports nothing (the circumstances of
    issue 12's finding 1).  User C alone has (w = 3, E = 3): slots
    2-4 repeat the data so skip, slot 5 publishes with three of C's shares,
    C starts waiting at slot 6 (a publication while C's cohort is empty) and
    cancels at slot 7, when C's cohort may not publish for them again yet.
    """
    slots, t = 7, 5
    big = {1: (1, 4.0)}
    users = [plan_of([0] * slots, {1: (1, 4.0), t: (3, 1.0)}, sure={1, 2, 3, 4})]   # the target
    users += [plan_of([0] * slots, big) for _ in range(3)]
    movers = [1, 1, 1, 1, 2, 1, 2]
    users.append(plan_of(movers[:4] + [None] + movers[5:], big))  # reports nothing at t*, so the batch has a gap
    users += [plan_of(movers, big) for _ in range(15)]
    users.append(plan_of([2] * slots, {1: (1, 4.0), 4: (3, 4.0), t: (1, 4.0)}, sure={1, 2, 3, 5, 6, 7}))
    users.append(plan_of([2] * slots, {1: (1, 0.02)}, sure=()))                      # a subsampled cohort
    users.append(plan_of([None] * slots, {1: (3, 3.0), 6: (3, 2.0), 7: (3, 3.0)}, sure=()))  # user C
    return Scenario("changes", "target (w=1, E=4) starts waiting for (w=3, E=1) at t*=5 of 7 while another user "
                    "cancels; a lone cohort empties and refills around a 3-share publication", 3, tuple(users), t,
                    1.0, (4.0, 1), frozenset({Family.FIXED}))


SCENARIOS: dict[str, Callable[[], Scenario]] = {"steady": steady_scenario, "changes": changes_scenario}

