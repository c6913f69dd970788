"""Random populations and requirement streams for property tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transforms.mechanisms import (MECHANISMS, DynamicRequirements, Estimate, Family, FixedRequirements, SlotBatch,
                                   TrustModel, names_of, params_from_options)
from transforms.mechanisms.ldp.oracles import MAX_LDP_EPSILON_UNITS

HOMOGENEOUS = tuple(names_of(Family.HOMOGENEOUS))
DYNAMIC = tuple(names_of(Family.DYNAMIC))


@dataclass(frozen=True)
class StreamSpec:
    """A random stream: who reports, what, and which requirements they declare."""

    seed: int
    users: int
    bins: int
    slots: int
    windows: tuple[int, ...]
    epsilons: tuple[float, ...]
    presence: float = 1.0          # probability a registered user reports in a slot
    change: float = 0.0            # probability a user declares a new requirement in a slot
    join_spread: int = 0           # users join at a uniform slot in [1, 1 + join_spread]
    dynamic: bool = False
    numeric: bool = False          # real values in [0, bins] (a mean-estimating method) instead of bins

    def for_mechanism(self, name: str) -> "StreamSpec":
        """This stream as mechanism ``name`` takes it: a local-DP method needs two bins or more, and a per-report
        budget it can spend (at most 20: the budgets above become 4); a mean-estimating one takes real values."""
        if MECHANISMS[name].trust is TrustModel.CENTRAL:
            return self
        largest = MAX_LDP_EPSILON_UNITS // 10**12
        epsilons = tuple(dict.fromkeys(e if e <= largest else 4.0 for e in self.epsilons))
        return StreamSpec(**{**self.__dict__, "bins": max(self.bins, 2), "epsilons": epsilons,
                             "numeric": MECHANISMS[name].estimates is Estimate.MEAN})

    def mechanism_kwargs(self, name: str, **common) -> dict:
        """``name``'s parameters for this stream (``common`` ones as given): the baselines at (min E_i, max w_i)."""
        if self.numeric:  # one mean over the values' interval
            return params_from_options(name, 1, epsilon=min(self.epsilons), window=max(self.windows),
                                       low=0.0, high=float(self.bins), **common).kwargs()
        return params_from_options(name, self.bins, epsilon=min(self.epsilons), window=max(self.windows),
                                   max_window=max(self.windows), **common).kwargs()

    def batches(self, dynamic: bool | None = None) -> list[SlotBatch]:
        dynamic = self.dynamic if dynamic is None else dynamic
        gen = np.random.default_rng(self.seed)
        n = self.users
        joins = 1 + gen.integers(0, self.join_spread + 1, n)
        windows, epsilons = np.array(self.windows), np.array(self.epsilons)
        current = gen.integers(0, len(windows), (n, 4)), gen.integers(0, len(epsilons), (n, 4))
        level = gen.integers(0, 3, n)  # a slowly moving value per user, so data drift and repeat
        batches = []
        for t in range(1, self.slots + 1):
            level = np.where(gen.random(n) < 0.2, gen.integers(0, self.bins, n), level) % self.bins
            changes = gen.random(n) < self.change
            current[0][changes] = gen.integers(0, len(windows), (changes.sum(), 4))
            current[1][changes] = gen.integers(0, len(epsilons), (changes.sum(), 4))
            present = (joins <= t) & ((gen.random(n) < self.presence) | (joins == t))
            users = np.flatnonzero(present)
            w, e = windows[current[0][users]], epsilons[current[1][users]]
            if dynamic:
                reqs = DynamicRequirements.of(w[:, 0], e[:, 0], w[:, 1], e[:, 1])
            else:
                reqs = FixedRequirements.of(w[:, 0], e[:, 0])
            every = users.size == n  # then say so, as a caller whose users all report would
            values = level[users] + gen.random(users.size) if self.numeric else level[users]
            batches.append(SlotBatch.of(range(n) if every else users, values, reqs))
        return batches


def stream_specs(max_slots: int = 40, max_join_spread: int = 10, dynamic=None):
    """A hypothesis strategy of small streams with joins, absences and requirement changes."""
    from hypothesis import strategies as st

    return st.builds(
        StreamSpec,
        seed=st.integers(0, 2**32 - 1),
        users=st.integers(1, 25),
        bins=st.integers(1, 5),
        slots=st.integers(1, max_slots),
        windows=st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True).map(tuple),
        epsilons=st.lists(st.sampled_from([0.05, 0.3, 0.6, 1.0, 4.0, 50.0]), min_size=1, max_size=3,
                          unique=True).map(tuple),
        presence=st.sampled_from([1.0, 0.7, 0.2]),
        change=st.sampled_from([0.0, 0.05, 0.3]),
        join_spread=st.integers(0, max_join_spread),
        **({} if dynamic is None else {"dynamic": dynamic}),
    )
