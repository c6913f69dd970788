"""LDP-IDS population division: LPU, LPD, LPA (spec ``ldp_ids.md`` §5.5, §5.7, §5.8; Theorem 5.2).

A user reports at most once in any ``w`` consecutive slots, always with the
full ``ε``, so the stream is w-event ε-LDP.  The collector keeps, per user,
the slot of their last report; a user is *available* at ``t`` when they hold
a value and last reported at ``t - w`` or earlier, which is the spec's pool
``U_A`` with its recycling at the end of every slot (§4.4, traps T5/T6).
Samples are exactly uniform among the available users (``choose``).

* **LPU**: users are split once into ``w`` groups of (nearly) equal size, in
  a uniformly random order as they register; group ``(t-1) mod w`` reports.
  With ``grouping="public"`` a user's group is instead the public hash
  :func:`~transforms.mechanisms.ldp.client.public_group` of their id, which a
  device computes itself: who reports when is then public, so recorded reports
  can be replayed (groups are balanced in expectation, not exactly: a
  deviation from the paper's equal split, chosen for devices that report on
  schedule without a request).
* **LPD** (Algorithm 2): ``n1 = floor(βn/w)`` available users estimate the
  dissimilarity; a publication takes half of what the last ``w-1``
  publications left of ``P = floor((1-β)n)`` users, when ``dis > V(ε, n_pp)``
  and ``n_pp >= u_min``.
* **LPA** (Algorithm 3): M_{t,1} as LPD; a publication takes
  ``unit = floor((1-β)n/w)`` users per absorbed slot, then nullifies.  ``t_N``
  counts the units the last publication *asked for* (``|U_{l,2}|/unit`` when
  everyone is present; with absent users the sample may be smaller and the
  literal reading would nullify fewer slots; privacy rests on the pool either way).

``n`` is the number of registered users (public).  Where fewer users are
available than a step asks for (users absent from a slot), it takes all of
them; an estimate is normalised by those who reported, and an empty M_{t,1}
sample means no publication.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.base import ReleaseKind
from transforms.mechanisms.charges import DISSIMILARITY
from transforms.mechanisms.ldp.choose import uniform_permutation, uniform_split
from transforms.mechanisms.ldp.stream import (Answer, Holders, HomogeneousLocalMechanism, LocalDecision, LocalParams,
                                              Reports, Rounds)
from transforms.mechanisms.noise import Randomness


GROUPINGS = ("random", "public")


@dataclass(frozen=True, kw_only=True)
class LPUParams(LocalParams):
    """LPU's parameters: ``grouping`` is ``"random"`` (the paper: drawn at registration) or ``"public"``
    (the hash of each user's id, known to their device; assigned with :meth:`LPU.assign_groups`)."""

    grouping: str = "random"

    def __post_init__(self):
        super().__post_init__()
        if self.grouping not in GROUPINGS:
            raise ValueError(f"grouping must be one of {GROUPINGS}, got {self.grouping!r}")


class LPU(HomogeneousLocalMechanism):
    """LDP Population Uniform (§5.5): group ``(t-1) mod w`` of ``w`` disjoint groups reports with ``ε``."""

    name = "lpu"
    params_type = LPUParams
    params: LPUParams

    def __init__(self, params: LPUParams):
        super().__init__(params)
        self.group_of_user = np.full(0, -1, np.int64)
        self.grouped = 0  # users given a group so far: the next ones continue the round

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        self._group_new_users(holders.capacity, rng)
        group = (self.slot - 1) % self.params.window
        users = holders.users[self.group_of_user[holders.users] == group]
        return (yield from self.publication_round(users, self.params.epsilon_units))

    @property
    def asks_on_schedule(self) -> bool:  # type: ignore[override]
        """With public groups who reports when follows from the users' ids alone."""
        return getattr(self.params, "grouping", "random") == "public"  # lpu-mean's parameters have no grouping

    def assign_groups(self, users, groups) -> None:
        """Give user indices ``users`` the public ``groups`` (``grouping="public"``), before their first slot."""
        if not self.asks_on_schedule:
            raise ValueError("groups are assigned only with grouping='public'; random groups are drawn here")
        users, groups = np.asarray(users, np.int64), np.asarray(groups, np.int64)
        if users.shape != groups.shape or (groups.size and (groups.min() < 0 or groups.max() >= self.params.window)):
            raise ValueError(f"one group in [0, {self.params.window}) per user is needed")
        self._grow(int(users.max()) + 1 if users.size else 0)
        self.group_of_user[users] = groups

    def _grow(self, capacity: int) -> None:
        if self.group_of_user.size < capacity:
            self.group_of_user = np.concatenate([self.group_of_user,
                                                 np.full(capacity - self.group_of_user.size, -1, np.int64)])

    def _group_new_users(self, capacity: int, rng: Randomness) -> None:
        """Give every newly registered user the next group of the round, the newcomers in a random order."""
        self._grow(capacity)
        new = np.flatnonzero((self.population.cohort_of[:capacity] != -1) & (self.group_of_user[:capacity] == -1))
        if new.size and self.asks_on_schedule:
            raise ValueError(f"{new.size} registered users have no public group (LPU.assign_groups from their ids)")
        if new.size:
            order = uniform_permutation(new.size, rng)
            self.group_of_user[new[order]] = (self.grouped + np.arange(new.size)) % self.params.window
            self.grouped += new.size

    def method_state(self):
        return {"group_of_user": self.group_of_user, "grouped": np.array(self.grouped)}

    def load_method_state(self, state):
        self.group_of_user = np.array(state["group_of_user"], np.int64)
        self.grouped = int(state["grouped"])


class AdaptivePopulation(HomogeneousLocalMechanism):
    """M_{t,1} of LPD and LPA, the available users and their sampling."""

    def __init__(self, params: LocalParams):
        super().__init__(params)
        self.last_report = np.zeros(0, np.int64)  # per user index, the slot of their last report (0: never)

    def available(self, holders: Holders) -> np.ndarray:
        """Holders whose last report is at least ``w`` slots old (the pool ``U_A``), ascending."""
        if self.last_report.size < holders.capacity:
            self.last_report = np.concatenate([self.last_report,
                                               np.zeros(holders.capacity - self.last_report.size, np.int64)])
        last = self.last_report[:holders.capacity]
        recycled = self.slot - self.params.window  # reported at this slot or before: back in the pool
        free = last <= recycled if recycled >= 0 else last == 0
        if holders.users.size == holders.capacity:  # every index holds a value (users ascending: all of them)
            return np.flatnonzero(free)
        return holders.users[free[holders.users]]

    def sample(self, pool: np.ndarray, count: int, rng: Randomness) -> tuple[np.ndarray, np.ndarray]:
        """``count`` users drawn uniformly from ``pool`` (all of it if smaller), and the rest of the pool."""
        chosen, rest = uniform_split(pool, count, rng)  # the pool is ascending: so are both parts
        self.last_report[chosen] = self.slot
        return chosen, rest

    def dissimilarity_round(self, holders: Holders, rng: Randomness, users: int | None = None
                            ) -> Generator[Reports, Answer, tuple]:
        """M_{t,1}: ``users`` (default ``floor(βn/w)``) available users report; returns ``dis`` and what is left of
        the pool."""
        p = self.params
        users = p.share_of(holders.registered) // p.window if users is None else users
        chosen, pool = self.sample(self.available(holders), users, rng)
        if chosen.size == 0:
            return -np.inf, pool
        answer = yield Reports(chosen, self.oracle(p.epsilon_units), DISSIMILARITY, named_units=p.epsilon_units)
        if answer.estimate is None:
            return -np.inf, pool
        return self.dissimilarity(answer.estimate, p.epsilon_units, answer.users.size), pool

    def publish_or_not(self, pool: np.ndarray, users: int, dis: float, rng: Randomness
                       ) -> Generator[Reports, Answer, tuple[LocalDecision, int]]:
        """Publish from ``users`` sampled users when ``dis > V(ε, users)``, else repeat ``r_{t-1}``; returns the
        decision and how many users were asked (an unanswered request still took them out of the pool)."""
        err = self.variance(self.params.epsilon_units, users)
        if not dis > err:
            return LocalDecision(ReleaseKind.SKIPPED, None, err), 0
        return (yield from self.publish(pool, users, rng))

    def publish(self, pool: np.ndarray, users: int, rng: Randomness
                ) -> Generator[Reports, Answer, tuple[LocalDecision, int]]:
        """``users`` users sampled from ``pool`` report with ``ε`` for a publication; returns the decision and how
        many were asked."""
        chosen, _ = self.sample(pool, users, rng)
        return (yield from self.publication_round(chosen, self.params.epsilon_units)), chosen.size

    def method_state(self):
        return {"last_report": self.last_report}

    def load_method_state(self, state):
        self.last_report = np.array(state["last_report"], np.int64)


class LPD(AdaptivePopulation):
    """LDP Population Distribution (Algorithm 2)."""

    name = "lpd"

    def __init__(self, params: LocalParams):
        super().__init__(params)
        self._history = deque([0] * (params.window - 1), maxlen=params.window - 1)  # |U_{t,2}| at t-1, t-2, ...

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        p = self.params
        dis, pool = yield from self.dissimilarity_round(holders, rng)
        publication_pool = p.rest_of(holders.registered)                   # P = floor((1-β)n)
        potential = max(publication_pool - sum(self._history), 0) // 2   # n_pp = floor(n_rm / 2)
        if potential < p.min_publication_users:
            decision, asked = LocalDecision(ReleaseKind.SKIPPED, None, self.variance(p.epsilon_units, potential)), 0
        else:
            decision, asked = yield from self.publish_or_not(pool, potential, dis, rng)
        if self._history.maxlen:
            self._history.appendleft(asked)
        return decision

    def method_state(self):
        return {**super().method_state(), "publication_history": np.array(self._history, np.int64)}

    def load_method_state(self, state):
        super().load_method_state(state)
        self._history = deque((int(u) for u in state["publication_history"]), maxlen=self.params.window - 1)


class LPA(AdaptivePopulation):
    """LDP Population Absorption (Algorithm 3)."""

    name = "lpa"

    def __init__(self, params: LocalParams):
        super().__init__(params)
        self.last_publication = 0   # l
        self.units_absorbed = 0     # |U_{l,2}|/unit at l (0 before any publication: t_N = -1)

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        p = self.params
        dis, pool = yield from self.dissimilarity_round(holders, rng)
        nullified_until = self.last_publication + self.units_absorbed - 1  # l + t_N
        if self.slot <= nullified_until:
            return LocalDecision(ReleaseKind.NULLIFIED, None, np.inf)
        absorbed = min(self.slot - nullified_until, p.window)
        unit = p.rest_of(holders.registered) // p.window  # floor((1-β)n/w)
        decision, _ = yield from self.publish_or_not(pool, absorbed * unit, dis, rng)
        if decision.kind is ReleaseKind.FRESH:
            self.last_publication, self.units_absorbed = self.slot, absorbed
        return decision

    def method_state(self):
        return {**super().method_state(), "last_publication": np.array(self.last_publication),
                "units_absorbed": np.array(self.units_absorbed)}

    def load_method_state(self, state):
        super().load_method_state(state)
        self.last_publication = int(state["last_publication"])
        self.units_absorbed = int(state["units_absorbed"])


POPULATION_DIVISION = {cls.name: cls for cls in (LPU, LPD, LPA)}
