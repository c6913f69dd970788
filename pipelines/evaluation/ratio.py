"""Where OBS switches to the larger budget in the two-type ratio experiments (spec/pwsm.md §5.2, §6.5).

A fraction ``o`` of ``users`` has one requirement, the rest another.  OBS (Alg. 1, ``obs.optimal_budget``)
chooses the budget a sampled release is calibrated to; its choice depends on ``o`` and on ``users`` only (not
on the data), so the switch point is computed here, with the mechanisms' own OBS and error model, for the budgets
each OBS of PBD and PBA sees:

* ``dc``: the dissimilarity's ``E_i/(2 w_i)`` (every slot, both mechanisms);
* ``pbd``: PBD's first publication, half of the window's publication half, ``E_i/4``;
* ``pba``: PBA's publication after ``ABSORBED`` skipped slots, ``min(k, w_i) E_i/(2 w_i)``.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.obs import optimal_budget
from transforms.mechanisms.sampling import inclusion_probabilities, laplace_scale

ABSORBED = 40
FRACTIONS = tuple(round(0.01 * k, 2) for k in range(1, 100))
OBSES = ("dc", "pbd", "pba")


def type_budgets(obs: str, window: int, epsilon: float) -> int:
    """The budget (units) a user with ``(window, epsilon)`` offers to one of the ``OBSES``."""
    units = to_units(epsilon)
    share = units // (2 * window)
    return {"dc": share, "pbd": units // 2 // 2, "pba": min(ABSORBED, window) * share}[obs]


def switch_point(users: int, first: tuple[int, float], second: tuple[int, float], obs: str) -> float | None:
    """Smallest ``o`` (on a 0.01 grid) at which ``obs`` picks the larger budget when a fraction ``o`` of ``users``
    has requirement ``first = (w, E)`` and the rest ``second``; ``None`` when it never does, or the budgets tie."""
    a, b = type_budgets(obs, *first), type_budgets(obs, *second)
    if a == b:
        return None
    higher = max(a, b)
    for o in FRACTIONS:
        split = int(round(users * o))
        chosen = optimal_budget(np.array([a, b]), np.array([split, users - split])).epsilon_units
        if chosen == higher:
            return o
    return None


def dc_sample_shortfall(users: int, first: tuple[int, float], second: tuple[int, float], o: float
                        ) -> tuple[float, float]:
    """(expected users the dissimilarity's sample leaves out, the dissimilarity's Laplace scale) at ratio ``o``.

    The dissimilarity compares the sampled histogram with the last release; every user the sample misses moves
    it by one, so a shortfall well above the noise scale reads as a change of the data and triggers publications
    (the explanation of the ratio experiment's rise after the switch, issue #18)."""
    split = int(round(users * o))
    budgets, counts = np.array([type_budgets("dc", *first), type_budgets("dc", *second)]), np.array(
        [split, users - split])
    theta = optimal_budget(budgets, counts).epsilon_units
    kept = inclusion_probabilities(budgets, theta)
    return float(np.sum(counts * (1 - kept))), float(laplace_scale(theta, 1))
