"""DPI's theory formulas and the paper's metrics, for logging, evaluation and tests (spec §2.11, §4.2; TV9, TV12-TV14).

Nothing here decides a release: the bounds are the paper's (near-vacuous,
spec TV12) and are reported, never relied on.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from transforms.mechanisms.dpi.budgets import learning_rate, li2, li2_inverse

KL_SMOOTHING = 1e-10
"""``O <- (O + δ)/(1 + kδ)`` before KL, so a zero bin of a release gives a large finite value (spec T-6)."""


def pdf_mse(released, true) -> float:
    """Per-bin mean squared error between two distributions (spec §4.2, I-16)."""
    released, true = np.asarray(released, np.float64), np.asarray(true, np.float64)
    return float(np.mean((released - true) ** 2))


def kl_divergence(true, released, smoothing: float = KL_SMOOTHING) -> float:
    """``KL(true || released)`` in nats (I-17), the release smoothed (T-6); bins where ``true`` is 0 add nothing."""
    true, released = np.asarray(true, np.float64), np.asarray(released, np.float64)
    released = (released + smoothing) / (1 + released.size * smoothing)
    inside = true > 0
    return float(np.sum(true[inside] * np.log(true[inside] / released[inside])))


def utility_bound(epsilon: float, mu: float, zeta: float, delta: int = 2, terms: int = 200_000) -> float:
    """Theorem 5.2/B.1 with sequential rates ``eta_A = eta_Q``: ``prod_i sqrt((1-4eta_Q²)(1-4eta_A²))``.

    The learning rates come from the float series ``C(1 - m^i)/i²`` per distribution (the first
    ``terms`` of them; the rest change the product by less than 1e-9).
    """
    c = delta / (mu * zeta)
    m = li2_inverse(max(0.0, math.pi**2 / 6 - epsilon / 2 / c))
    log_bound = 0.0
    for i in range(1, terms + 1):
        _, _, eta = learning_rate(c * (1 - m**i) / i**2, mu, delta)
        log_bound += math.log1p(-4 * eta * eta)  # ½(ln(1-4eta_Q²) + ln(1-4eta_A²)) with eta_Q = eta_A
    return math.exp(log_bound)


def theorem_5_4_bound(epsilon: float, mu: float, zeta: float, delta: int = 2) -> tuple[float, float]:
    """``(m², |L|)`` of Theorem 5.4 as printed, the full ``epsilon`` in ``Li2^{-1}(pi²/6 - eps/C)`` (TV13)."""
    c = delta / (mu * zeta)
    m2 = li2_inverse(math.pi**2 / 6 - epsilon / c)
    return m2, abs(epsilon / c - 2 * math.pi**2 / 3 + 4 * li2(math.sqrt(m2))) / (4 * zeta)


def multinomial_entropy(n: int, k: int) -> float:
    """The exact entropy (nats) of ``Multinomial(n, uniform over k)``, summed over every outcome (small n, k)."""
    log_k = math.log(k)
    entropy = 0.0
    for head in itertools.product(range(n + 1), repeat=k - 1):
        rest = n - sum(head)
        if rest < 0:
            continue
        log_p = math.lgamma(n + 1) - sum(math.lgamma(c + 1) for c in (*head, rest)) - n * log_k
        entropy -= math.exp(log_p) * log_p
    return entropy


def multinomial_entropy_eq13(n: int, k: int) -> float:
    """The paper's large-n approximation (eq. 13): ``(k-1)/2·ln(2·pi·e·n) - (k/2)·ln k``."""
    return (k - 1) / 2 * math.log(2 * math.pi * math.e * n) - k / 2 * math.log(k)
