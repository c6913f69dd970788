"""PLBU: personalized LDP budget uniform (spec ``pwsm.md`` §3.5, the local baseline of the PWSM papers).

Every holder ``i`` reports at every slot through the oracle of their own
budget ``E_i/w_i`` (rounded down to units), so each user's windows hold at
most ``E_i``.  Holders with the same budget form one group with one oracle;
each group's estimate ``(C'_g/n_g - q_g)/(p_g - q_g)`` is unbiased, and the
release is their average weighted by the group sizes, which is the sum of
every user's own unbiased estimator over the ``n'`` reporters (§3.5's
natural personalized version).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.base import MechanismParams, ReleaseKind
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.ldp.oracles import MAX_LDP_EPSILON_UNITS
from transforms.mechanisms.ldp.stream import (Holders, LocalDecision, LocalMechanism, Reports, Rounds,
                                              validate_local_options)
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.requirements import FixedRequirements


@dataclass(frozen=True, kw_only=True)
class PersonalizedLocalParams(MechanismParams):
    """Each user's own ``(w_i, E_i)``; the local options of :class:`~transforms.mechanisms.ldp.stream.LocalParams`."""

    oracle: str | None = None
    grr_variance: str = "exact"
    simulation: str = "users"

    def __post_init__(self):
        super().__post_init__()
        validate_local_options(self)


class PLBU(LocalMechanism):
    """Personalized LDP Budget Uniform: holder ``i`` reports with ``E_i/w_i`` at every slot."""

    name = "plbu"
    asks_on_schedule = True
    params_type = PersonalizedLocalParams
    params: PersonalizedLocalParams

    def validate_requirements(self, requirements: FixedRequirements, users: np.ndarray | None = None) -> None:
        per_slot = requirements.epsilon_units // requirements.window
        bad = (per_slot < 1) | (per_slot > MAX_LDP_EPSILON_UNITS)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{'a user' if users is None else f'user {int(users[i])}'}'s per-slot budget "
                             f"E/w = {units_to_decimal_string(int(requirements.epsilon_units[i]))}/"
                             f"{int(requirements.window[i])} is outside what a report can spend")

    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        table = self.population.table.data
        row_budgets = table["epsilon_units"] // table["window"]
        budgets = np.unique(row_budgets)
        small = np.int16 if budgets.size < 2**15 else np.int64  # 16 bits: numpy's stable sort is a radix sort
        code = np.searchsorted(budgets, row_budgets).astype(small)[self.population.cohort_of[holders.users]]
        order = np.argsort(code, kind="stable")  # users stay ascending within each budget
        sizes = np.bincount(code, minlength=budgets.size)
        answers = []
        for units, start, end in zip(budgets, np.cumsum(sizes) - sizes, np.cumsum(sizes)):
            if start == end:
                continue
            answer = yield Reports(holders.users[order[start:end]], self.oracle(int(units)), instruction=False,
                                   named_units=int(units))
            if answer.estimate is not None:  # one request per budget: its users share an oracle
                answers.append((int(units), answer))
        reporters = sum(answer.users.size for _, answer in answers)
        if reporters == 0:
            return LocalDecision(ReleaseKind.SKIPPED, None, np.inf)
        shares = [answer.users.size / reporters for _, answer in answers]  # each user's own unbiased estimator
        estimate = sum(share * answer.estimate for share, (_, answer) in zip(shares, answers))
        variance = sum(share ** 2 * self.variance(units, answer.users.size)
                       for share, (units, answer) in zip(shares, answers))
        return LocalDecision(ReleaseKind.FRESH, estimate, variance, min(units for units, _ in answers))
