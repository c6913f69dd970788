"""A slow per-slot reference of DPI written straight from the spec (§2.7 pseudocode, §2.10.1), in plain Python.

Lists and loops, no numpy arithmetic: softmax by ``math.exp``, inverse-CDF
draws by a linear scan, distances as sums over bins, the sound figure in
:class:`~fractions.Fraction`.  It reuses only the separately tested
foundations: the pool's counts (``SynopsisPool.counts``), the series and RBA
(``budgets``) and the exact exponential draw (``exponential_draw``).  It
consumes the randomness in the order the spec lists the steps (RBA, query
sampling, each query's ``r`` draws), so with the same seeded generator it
must produce the mechanism's releases.  It handles ``restart="stop"`` only.
"""

from __future__ import annotations

import math
from fractions import Fraction

from transforms.mechanisms.dpi.budgets import (
    ExponentialRBA,
    RangesRBA,
    SequentialRBA,
    learning_rate,
)
from transforms.mechanisms.dpi.exponential import exponential_draw

U = 10**12
TWO53 = 1 << 53


def _rba(params, rng):
    if params.rba == "exponential":
        return ExponentialRBA(params.series, params.rate, rng)
    if params.rba == "ranges":
        return RangesRBA(params.series, params.ranges, rng)
    return SequentialRBA(params.series)


def _pdf(counts):
    total = sum(counts)
    return [1 / len(counts)] * len(counts) if total == 0 else [c / total for c in counts]


def _score(d, lam, mu):
    return min(1.0, max(-1.0, 1.0 - 2.0 * (d - lam) / mu))


def _draw(log_weights, rng):
    top = max(log_weights)
    weights = [math.exp(w - top) for w in log_weights]
    total = 0.0
    cumulative = []
    for w in weights:
        total += w
        cumulative.append(total)
    target = rng.randbelow(TWO53) / TWO53 * total
    for j, c in enumerate(cumulative):
        if c > target:
            return j
    return len(log_weights) - 1


def _per_draw_units(params, rate_units, per):
    """2·s_a·alpha in units, alpha = (mu/(4·2))·rate/per, with the mechanism's stated float margin."""
    if rate_units == 0:
        return 0
    mu = Fraction(round(params.mu * U), U)
    s_a = min(Fraction(2), 4 / mu)
    return math.ceil(2 * s_a * mu / 8 * Fraction(rate_units, U) / per * (1 + Fraction(1, 1 << 30)) * U) + 1


def paper(params, histograms, rng):
    """Per slot: ``(counts per query, charged units, claimed units)``, or None once exhausted."""
    pool, queries = params.pool, list(params.queries)
    n, big_n, r, sq = pool.n_units, pool.size, params.draws, params.sampled_queries
    a_counts = [[int(c) for c in pool.counts(j)] for j in range(big_n)]
    rba = _rba(params, rng)
    w_a = [[0.0] * big_n for _ in queries]
    w_q = [0.0] * len(queries)
    rate_a, rate_q = [0] * len(queries), 0
    cumulative = [0] * pool.k
    spent, exhausted, out = 0, False, []
    for x in histograms:
        x = [int(v) for v in x]
        cumulative = [a + b for a, b in zip(cumulative, x)]
        if exhausted:
            out.append(None)
            continue
        _, units = rba.next()
        charge = sum(_per_draw_units(params, rate_a[i], sq) * r for i in range(len(queries)))
        if sq < len(queries):
            charge += _per_draw_units(params, rate_q, 1) * sq
        if units == 0 or spent + charge > params.epsilon_units:
            exhausted = True
            out.append(None)
            continue
        e_a = e_q = units // 2
        remaining, sampled = list(range(len(queries))), []
        for _ in range(sq):
            sampled.append(remaining.pop(_draw([w_q[i] for i in remaining], rng)))
        drawn = [[_draw(w_a[i], rng) for _ in range(r)] for i in range(len(queries))]
        outputs = [[sum(a_counts[j][b] for j in drawn[i]) for b in range(pool.k)] for i in range(len(queries))]
        alpha_a = learning_rate(e_a / U / len(sampled), params.mu)[1]
        alpha_q = learning_rate(e_q / U, params.mu)[1]
        for i in sampled:
            y = _pdf(cumulative if queries[i] == "acc" else x)
            for j in (sorted(set(drawn[i])) if params.update == "sampled" else range(big_n)):
                d = sum(abs(a_counts[j][b] / n - y[b]) for b in range(pool.k))
                w_a[i][j] += alpha_a * _score(d, params.lam, params.mu)
            release = [c / (r * n) for c in outputs[i]]
            w_q[i] -= alpha_q * _score(sum(abs(release[b] - y[b]) for b in range(pool.k)), params.lam, params.mu)
            rate_a[i] += e_a
        rate_q += e_q
        spent += charge
        out.append((outputs, charge, units))
    return out


def sound(params, histograms, rng):
    """Per slot of ``dpi-sound``: ``(counts per query, charged units, claimed units)``, or None once exhausted."""
    pool, queries = params.pool, list(params.queries)
    n, r = pool.n_units, params.draws
    a_counts = [[int(c) for c in pool.counts(j)] for j in range(pool.size)]
    rba = _rba(params, rng)
    cumulative = [0] * pool.k
    exhausted, out = False, []
    for x in histograms:
        x = [int(v) for v in x]
        cumulative = [a + b for a, b in zip(cumulative, x)]
        if exhausted:
            out.append(None)
            continue
        _, units = rba.next()
        if units == 0:
            exhausted = True
            out.append(None)
            continue
        per_draw = units // (len(queries) * r)
        outputs = []
        for q in queries:
            h = cumulative if q == "acc" else x
            if sum(h) == 0:
                h = [1] * pool.k  # the uniform distribution (I-14)
            total = sum(h)
            numerators = [sum(abs(h[b] * n - c[b] * total) for b in range(pool.k)) for c in a_counts]
            picks = [exponential_draw(numerators, total * n, per_draw, rng) for _ in range(r)]
            outputs.append([sum(a_counts[j][b] for j in picks) for b in range(pool.k)])
        out.append((outputs, per_draw * r * len(queries), units))
    return out
