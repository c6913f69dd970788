"""Which windows a requirement covers, and their bounds: the rules every ledger applies.

Both ledgers (the core's class-based one and the per-user Beam stage) keep
running totals their own way and hand these functions a way to sum charges
over a range of slots; the rules are written once:

* fixed ``(w, E)``: the window ``[t-w+1, t]`` is at most ``E``;
* dynamic ``(w_B, E_B, w_F, E_F)`` declared at ``t``: ``[t-w_B+1, t]`` is at
  most ``E_B``, or, when the charges of ``[t-w_B+1, t-1]`` had already passed
  it, the least feasible bound ``max(E_B, 2Σε^(1), 2Σε^(2))`` of those slots
  (spec §1.6, computed from the ledger's own sums; ε^(1) is the charges'
  ``"dissimilarity"`` part, ε^(2) the rest); ``[t, t+w_F-1]`` is at most
  ``E_F``, checked when it closes (or when a bounded stream ends);
* lifetime ``E``: every charge from the user's first slot up to ``t`` is at
  most ``E``, at every slot (nobody is charged before registering).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from transforms.mechanisms.requirements import DynamicRequirements, FixedRequirements, LifetimeRequirements

Sums = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``sums(first, last)``: the charges of each row over the slots ``[first, last]`` (0 when empty)."""
Spent = Callable[[np.ndarray | int], np.ndarray]
"""``spent(last)``: every charge of each row up to slot ``last``, since the row's first slot."""


def closing_windows(kind: type, ends: np.ndarray | int, requirements: np.ndarray, total: Sums,
                    dissimilarity: Sums, spent: Spent) -> tuple[str, np.ndarray, np.ndarray]:
    """The window each row closes at slot ``ends``: ``(kind, window sums, bounds)``.

    ``requirements`` holds one declared requirement per row of ``kind``, ``(w, E)``,
    ``(w_B, E_B, w_F, E_F)`` or ``(E,)`` in budget units; ``total`` sums every charge,
    ``dissimilarity`` only the dissimilarity part, and ``spent`` everything since the start.
    """
    if kind is LifetimeRequirements:
        return "lifetime", spent(ends), requirements[:, 0]
    window, bound = requirements[:, 0], requirements[:, 1]
    first = ends - window + 1
    if kind is FixedRequirements:
        return "fixed", total(first, ends), bound
    if kind is not DynamicRequirements:
        raise ValueError(f"unknown requirement kind {kind!r}")
    past, past_dissimilarity = total(first, ends - 1), dissimilarity(first, ends - 1)
    projected = np.maximum.reduce([bound, 2 * past_dissimilarity, 2 * (past - past_dissimilarity)])
    return "backward", total(first, ends), projected


def forward_end(start: np.ndarray | int, forward_window: np.ndarray | int) -> np.ndarray | int:
    """The last slot of the forward window ``w_F`` a dynamic declaration opens at ``start``."""
    return start + forward_window - 1


def usage_ratios(sums: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Window sums as fractions of their bounds (a bound of 0: infinite if anything was spent)."""
    sums, bounds = np.asarray(sums), np.asarray(bounds)
    if bounds.min(initial=1) > 0:  # the usual case: every bound is a real budget
        return sums / bounds
    return np.divide(sums, bounds, out=np.where(sums > 0, np.inf, 0.0), where=bounds > 0)
