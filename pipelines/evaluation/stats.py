"""Paired tests over repeats: a claim "A has a lower error than B" decided from paired runs, not from two means.

Runs are paired when they share dataset, sweep point and repeat, hence the same data, requirements and noise
seed.  The statistic is the mean over pairs of ``log(A/B)`` (scale-free, so points of different magnitude
weigh alike); the one-sided p-value is that of the sign-flip permutation test (under H0 each pair's log ratio
is symmetric about 0): exact by enumeration up to ``EXACT_PAIRS`` pairs, otherwise from ``DRAWS`` random sign
vectors of a fixed seed, counted with the ``(hits + 1)/(draws + 1)`` rule so that it is never below its
Monte-Carlo resolution.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

EXACT_PAIRS = 16
DRAWS = 20_000
SEED = 20_251_118
ALPHA = 0.05


@dataclass(frozen=True)
class PairedResult:
    """Pairs, how many A won, the geometric-mean ratio A/B and the one-sided p-value of "A < B"."""

    pairs: int
    wins: int
    ratio: float
    p_value: float


def sign_flip_p_value(differences: np.ndarray) -> float:
    """One-sided p-value of "mean(differences) < 0" under symmetric sign flips."""
    d = np.asarray(differences, np.float64)
    n = d.size
    if n == 0:
        return 1.0
    observed = d.mean()
    tolerance = 1e-12 * max(1.0, float(np.abs(d).max()))
    if n <= EXACT_PAIRS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        return float(np.mean(signs @ d / n <= observed + tolerance))
    signs = np.random.default_rng(SEED).choice((-1.0, 1.0), size=(DRAWS, n))
    hits = int(np.count_nonzero(signs @ d / n <= observed + tolerance))
    return (hits + 1) / (DRAWS + 1)


def paired_lower(better: np.ndarray, worse: np.ndarray) -> PairedResult:
    """Test "``better`` < ``worse``" over aligned pairs of positive errors."""
    a, b = np.asarray(better, np.float64), np.asarray(worse, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"pairs must align, got {a.shape} and {b.shape}")
    logs = np.log(np.maximum(a, 1e-300)) - np.log(np.maximum(b, 1e-300))
    return PairedResult(int(a.size), int(np.count_nonzero(a < b)), float(np.exp(logs.mean())) if a.size else 1.0,
                        sign_flip_p_value(logs))


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (family-wise error over every test listed), in the given order."""
    order = np.argsort(p_values, kind="stable")
    m, adjusted, running = len(p_values), [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
