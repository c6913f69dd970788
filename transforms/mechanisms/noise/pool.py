"""The public discrete Laplace entry points and each generator's pool of pre-drawn noise.

:func:`discrete_laplace` and :func:`discrete_laplace_draw` validate a scale
and serve its draws from a small pool per recently used scale, kept on the
generator: a repeated scale, such as a mechanism's per-slot draw, pops noise
the samplers drew earlier.
"""

from __future__ import annotations

from fractions import Fraction
from numbers import Rational

import numpy as np

from transforms.mechanisms.noise.generators import Randomness, check_size
from transforms.mechanisms.noise.samplers import VECTOR_MAX_DEN, VECTOR_MAX_NUM, laplace_draws, one_discrete_laplace

_MAX_DISCRETE_SCALE = 1 << 53


def discrete_laplace(scale: Fraction, size: int, rng: Randomness) -> np.ndarray:
    """``size`` i.i.d. exact draws of the discrete Laplace distribution.

    The discrete Laplace (two-sided geometric) distribution puts mass
    ``P(x) ∝ exp(-|x|/scale)`` on every integer ``x``.  Draws are exact (no
    floating point): CKS20 Algorithm 2, with Bernoulli(exp(-gamma)) coins from
    Algorithm 1.  ``scale`` must be a positive :class:`~fractions.Fraction`
    or int (floats are refused: convert them explicitly, e.g.
    ``Fraction(str(x))``) and at most ``2**53`` so that every draw fits int64
    (exceeding 2**63 would take ~1000 scales, probability ~e^-1000);
    otherwise ``ValueError`` naming ``scale``.  Returns an ``np.int64`` array.

    Speed: when the scale's numerator is at most ``2**50`` (and its
    denominator below ``2**63``) the draws go through the generator's pool (if it keeps one):
    ``rng`` keeps, per recently used scale (at most 64), values it drew
    earlier, and a repeated scale pops them.  Noise does not depend on the
    data, so drawing it earlier changes nothing as long as each value is used
    once.  The first request of a scale draws exactly what it needs; each
    further refill of that scale draws at least twice as many as the last
    (at most 1024 beyond the request).  Batches of 32 or more come from
    :func:`_discrete_laplace_vector` (the same algorithm on ``uint64``
    arrays, a batch at once), smaller ones and other scales draw one by one
    with ``rng.randbelow``.
    """
    num, den = _discrete_scale(scale)
    size = check_size(size)
    if size == 0:
        return np.zeros(0, np.int64)
    entry = _pool_entry(rng, num, den)
    if entry is None:  # a scale past the vector range, or a generator without a pool
        return laplace_draws(num, den, size, rng)
    pooled = entry[0]
    have = len(pooled)
    if have >= size:
        out = np.array(pooled[-size:], dtype=np.int64)
        del pooled[-size:]
        return out
    if have == 0:
        return _refill(entry, num, den, size, rng)
    old = np.array(pooled, dtype=np.int64)
    pooled.clear()
    return np.concatenate((old, _refill(entry, num, den, size - have, rng)))


def discrete_laplace_draw(scale: Fraction, rng: Randomness) -> int:
    """One exact discrete Laplace draw as a python int (:func:`discrete_laplace` with size 1).

    Meant for one draw per time slot with a scale that repeats: it usually
    pops a value from the generator's pool (see :func:`discrete_laplace`),
    which refills in batches that double per refill of that scale (up to
    1024), so a repeated scale costs a fraction of a scalar draw.
    """
    num, den = _discrete_scale(scale)
    entry = _pool_entry(rng, num, den)
    if entry is None:
        return one_discrete_laplace(num, den, rng.randbelow)
    pooled = entry[0]
    if pooled:
        return pooled.pop()
    return int(_refill(entry, num, den, 1, rng)[0])


def _discrete_scale(scale) -> tuple[int, int]:
    """Numerator and denominator of a positive rational scale of at most ``2**53``."""
    if type(scale) is Fraction and scale.numerator > 0:  # the usual case, without the ABC checks
        num, den = scale.numerator, scale.denominator
    else:
        if isinstance(scale, bool) or not isinstance(scale, Rational):
            raise ValueError(
                f"scale must be a positive Fraction or int (convert floats explicitly), got {scale!r}"
            )
        exact = Fraction(scale)
        if exact <= 0:
            raise ValueError(f"scale must be positive, got {scale!r}")
        num, den = exact.numerator, exact.denominator
    if num > _MAX_DISCRETE_SCALE * den:
        raise ValueError(f"scale must be at most 2**53 for int64 output, got {scale!r}")
    return num, den


_POOL_MAX_KEYS = 64
"""Scales a generator keeps draws for (least recently used evicted, its draws discarded)."""
_POOL_MAX_REFILL = 1024
"""Largest batch a refill draws beyond what the request needs (so a key holds at most this many)."""


def _pool_entry(rng: Randomness, num: int, den: int) -> list | None:
    """``[pooled draws, next refill size]`` of scale ``num/den`` in ``rng``'s pool, marked most recently used.

    The pool is ``rng._noise_pool``: a plain dict (insertion ordered, so the
    first key is the least recently used) from ``(num, den)`` to a list of
    python ints (consumed from the end) and the size of the key's next refill.
    Plain containers so that a seeded generator pickles (and a checkpoint
    loads it) as before.  ``None`` for a scale past the vector range (not
    pooled) or a generator without a pool.
    """
    pool = rng._noise_pool
    if pool is None or num > VECTOR_MAX_NUM or den > VECTOR_MAX_DEN:
        return None
    key = (num, den)
    entry = pool.pop(key, None)
    if entry is None:
        if len(pool) >= _POOL_MAX_KEYS:
            del pool[next(iter(pool))]
        entry = [[], 1]
    pool[key] = entry
    return entry


def _refill(entry: list, num: int, den: int, missing: int, rng: Randomness) -> np.ndarray:
    """Draw ``max(missing, next refill)`` values; return the first ``missing`` and pool the rest.

    The next refill of the key doubles, up to ``_POOL_MAX_REFILL``; it starts
    at 1, so the first request of a scale draws exactly what it needs.
    """
    refill = entry[1]
    drawn = laplace_draws(num, den, max(missing, refill), rng)
    entry[1] = min(2 * refill, _POOL_MAX_REFILL)
    if drawn.size > missing:
        entry[0].extend(drawn[missing:].tolist())
        return drawn[:missing].copy()  # not a view: its base would hold the pooled draws
    return drawn
