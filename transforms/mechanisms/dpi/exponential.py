"""The exact exponential-mechanism draw of DPI's sound variant (spec §2.10.1, issue #16).

Each draw picks pool candidate ``j`` with probability proportional to
``exp(-eps·d_j/(2·Delta))``, where ``d_j = ||y - A_j||_1`` is the l1 distance of
the true PDF ``y`` to candidate ``A_j`` (utility ``-d_j``) and ``Delta = 2``.

**Exactness.**  No float decides a draw:

* ``d_j`` is an exact rational.  ``y = h/H`` (``h`` the integer histogram,
  ``H = sum(h)``; an empty histogram is uniform, spec I-14) and
  ``A_j = c_j/n`` (:mod:`.pool`), so ``d_j = D_j/(H·n)`` with the integer
  ``D_j = sum_i |h_i·n - c_ji·H|`` (:func:`l1_numerators`).
* ``eps = units/10**12`` exactly, so the exponent ``gamma_j =
  eps·(D_j - D_min)/(2·Delta·H·n)`` is an exact fraction ``a_j/b``.
* Rejection sampling: pick a position ``p`` uniformly (``randbelow``), accept it
  with probability exactly ``exp(-gamma_p)`` (CKS20 Algorithm 1, a Bernoulli
  factory whose coins are integer comparisons ``randbelow(b·k) < a``;
  :func:`bernoulli_exp`), else repeat.  Rounds are i.i.d., so the output is
  ``p`` with probability ``exp(-gamma_p)/sum_q exp(-gamma_q)``, exactly the
  exponential mechanism's law whatever floor ``F <= D_min`` is subtracted in
  ``gamma_p = eps·(D_p - F)/(2·Delta·H·n)`` (it multiplies every weight by the
  same constant).

**Measuring only what is proposed.**  The floor is chosen from public
quantities alone (:func:`measures_lazily`).  When a draw's budget is small
(``eps/Delta <= ln 8``) it is ``F = 0``, a bound that needs no distance: since
``d_p <= 2`` a round accepts with probability at least ``exp(-eps/Delta) >=
1/8``, so a draw measures a few proposed candidates instead of the pool
(:class:`PoolDistances` measures one block of the pool on first use).  Above
it ``F = D_min`` (every distance measured once): a round then accepts with
probability at least ``1/M`` (``M`` candidates).  Either way the law is the
same; only the time differs.

**Privacy.**  For neighbouring streams (one user's whole history added or
removed) ``||y - y'||_1 <= 2 = Delta``, hence ``|d_j - d'_j| <= 2`` for every
``j``, and ``P(j | y)/P(j | y') <= e^(eps/2)·e^(eps/2) = e^eps``.  The sampler
realises this law exactly, so a draw's realised epsilon is exactly its budget
in units; ``r`` draws compose to ``r`` times that (:func:`select_synopses`
splits a slot's units evenly, rounding down).  The candidate set must be
public (chosen without the data); the number of rejection rounds depends on
the data (a timing channel, out of scope as in spec §1.5).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.dpi.pool import BLOCK, SynopsisPool
from transforms.mechanisms.noise import Randomness, secure_randomness
from transforms.mechanisms.noise.coins import bernoulli_exp

SENSITIVITY = 2
"""l1 sensitivity of a PDF, hence of the utility ``-||y - A_j||_1`` (spec §2.1)."""
_INT64_SAFE = 1 << 62
LAZY_ROUNDS = 8
"""A draw whose expected rounds with the floor 0 are at most this many measures only what it proposes."""


def l1_numerators(histogram, candidate_counts, n_units: int) -> tuple[list[int], int]:
    """``(D, H·n)``: the exact l1 distances ``D_j/(H·n)`` of ``pdf(histogram)`` to candidates ``c_j/n_units``.

    ``histogram`` holds non-negative integer counts over the domain ``[0, k)``;
    an empty one stands for the uniform PDF (spec I-14).  ``candidate_counts``
    is an iterable of integer count vectors of length ``k`` summing to
    ``n_units`` (e.g. a generator over :meth:`SynopsisPool.counts`, so memory
    stays ``O(k)``).
    """
    h = np.asarray(histogram)
    if h.ndim != 1 or h.size == 0 or h.dtype.kind not in "iu":
        raise ValueError(f"histogram must be a non-empty 1-D integer array, got shape {h.shape} and dtype {h.dtype}")
    if h.min() < 0:
        raise ValueError("histogram counts must be non-negative")
    k, total = h.size, int(h.sum(dtype=object))
    if total == 0:
        h, total = np.ones(k, dtype=np.int64), k
    kind = np.int64 if 2 * total * n_units < _INT64_SAFE else object  # |h_i·n - c_i·H| sums to at most 2·H·n
    scaled = h.astype(kind) * n_units
    numerators = []
    for counts in candidate_counts:
        counts = np.asarray(counts)
        if counts.shape != (k,) or counts.dtype.kind not in "iu" or int(counts.sum()) != n_units:
            raise ValueError(f"a candidate must be {k} integer counts summing to n_units={n_units}")
        numerators.append(int(np.abs(scaled - counts.astype(kind) * total).sum()))
    return numerators, total * n_units


def l1_numerators_of_matrix(histogram, matrix: np.ndarray, n_units: int, chunk: int = 16) -> tuple[list[int], int]:
    """:func:`l1_numerators` for candidates given as the rows of one integer matrix, a chunk of rows at a time.

    The same integers (exact: int64 when ``2·H·n`` fits, Python ints otherwise), without a Python loop
    over the rows: DPI's sound variant measures every pool entry every slot.
    """
    h = np.asarray(histogram)
    if h.ndim != 1 or h.size == 0 or h.dtype.kind not in "iu" or h.min() < 0:
        raise ValueError("histogram must be a non-empty 1-D array of non-negative integer counts")
    if matrix.ndim != 2 or matrix.shape[1] != h.size or matrix.dtype.kind not in "iu":
        raise ValueError(f"candidates must be an integer matrix with {h.size} columns")
    total = int(h.sum(dtype=object))
    if total == 0:
        h, total = np.ones(h.size, np.int64), h.size
    if 2 * total * n_units >= _INT64_SAFE:
        return l1_numerators(h, iter(matrix), n_units)
    scaled = h.astype(np.int64) * n_units
    numerators = np.empty(matrix.shape[0], np.int64)
    for start in range(0, matrix.shape[0], chunk):
        block = matrix[start:start + chunk].astype(np.int64)
        block *= total
        np.subtract(block, scaled, out=block)
        np.abs(block, out=block)
        numerators[start:start + chunk] = block.sum(axis=1)
    return numerators.tolist(), total * n_units


def measures_lazily(epsilon_units: int, sensitivity: int = SENSITIVITY) -> bool:
    """Whether a draw at ``epsilon_units`` subtracts the floor 0, measuring only what it proposes (else
    ``D_min``): when ``exp(eps·2/(2·sensitivity)) <= LAZY_ROUNDS`` (module doc), a public condition."""
    return epsilon_units <= math.floor(math.log(LAZY_ROUNDS) * sensitivity * UNITS_PER_EPSILON)


def exponential_draw(numerators, denominator: int, epsilon_units: int, rng: Randomness,
                     sensitivity: int = SENSITIVITY) -> int:
    """A position ``p`` drawn with probability proportional to ``exp(-eps·(D_p/denominator)/(2·sensitivity))``.

    ``eps = epsilon_units/10**12``; exact rejection sampler of the module doc.  ``numerators`` is a
    sequence (``len``, indexing; iterating it measures every entry), e.g. a :class:`PoolDistances`, which
    measures a candidate only when it is proposed.
    """
    size = len(numerators)
    if size == 0:
        raise ValueError("the exponential mechanism needs at least one candidate")
    if isinstance(epsilon_units, bool) or not isinstance(epsilon_units, Integral) or epsilon_units < 0:
        raise ValueError(f"epsilon_units must be a non-negative int, got {epsilon_units!r}")
    floor = 0 if measures_lazily(int(epsilon_units), sensitivity) else min(numerators)
    gamma_denominator = 2 * sensitivity * denominator * UNITS_PER_EPSILON
    randbelow = rng.randbelow
    while True:
        p = randbelow(size)
        if bernoulli_exp(int(epsilon_units) * (numerators[p] - floor), gamma_denominator, randbelow):
            return p


class PoolDistances:
    """The exact l1 numerators of one histogram to every candidate of a pool (:func:`l1_numerators`), each
    block of :data:`~.pool.BLOCK` candidates measured when one of them is first read.

    ``block_rows(b)`` gives block ``b``'s counts (the pool's cache, or :meth:`SynopsisPool.block`); memory is
    the ``N`` numerators plus one block.  Indexing and ``len`` make it the ``numerators`` of
    :func:`exponential_draw`.
    """

    def __init__(self, histogram, pool: SynopsisPool, block_rows=None):
        h = np.asarray(histogram)
        if h.ndim != 1 or h.size != pool.k or h.dtype.kind not in "iu" or h.min() < 0:
            raise ValueError(f"histogram must be {pool.k} non-negative integer counts")
        total = int(h.sum(dtype=object))
        self.histogram = h if total else np.ones(pool.k, np.int64)  # the empty histogram is uniform (I-14)
        self.denominator = (total or pool.k) * pool.n_units
        self.pool, self.block_rows = pool, block_rows or pool.block
        self._numerators: list = [None] * pool.size
        self.measured_blocks = 0

    def __len__(self) -> int:
        return self.pool.size

    def __getitem__(self, j: int) -> int:
        value = self._numerators[j]
        if value is None:
            b = j // BLOCK
            start = b * BLOCK
            rows = self.block_rows(b)[:self.pool.size - start]
            self._numerators[start:start + len(rows)], _ = l1_numerators_of_matrix(self.histogram, rows,
                                                                                  self.pool.n_units)
            self.measured_blocks += 1
            value = self._numerators[j]
        return value

    def __iter__(self) -> Iterator[int]:
        for start in range(0, self.pool.size, BLOCK):  # every block measured once, then the plain list
            self[start]
        return iter(self._numerators)


@dataclass(frozen=True)
class SynopsisDraw:
    """The pool indices drawn for one slot, the budget of each draw and the realised total (units)."""

    indices: tuple[int, ...]
    per_draw_units: int
    realised_units: int


def select_synopses(histogram, pool: SynopsisPool, epsilon_units: int, draws: int = 1, candidates=None,
                    rng: Randomness | None = None) -> SynopsisDraw:
    """``draws`` independent exponential-mechanism draws from the public ``candidates`` (default: the whole pool).

    Each draw gets ``epsilon_units // draws``; the realised total
    ``draws·(epsilon_units // draws)`` never exceeds ``epsilon_units``.  The
    secure generator is used unless a test or replay passes ``rng``.
    """
    if isinstance(draws, bool) or not isinstance(draws, Integral) or draws < 1:
        raise ValueError(f"draws must be a positive int, got {draws!r}")
    if isinstance(epsilon_units, bool) or not isinstance(epsilon_units, Integral) or epsilon_units < 0:
        raise ValueError(f"epsilon_units must be a non-negative int, got {epsilon_units!r}")
    rng = rng or secure_randomness()
    if len(np.asarray(histogram).ravel()) != pool.k:
        raise ValueError(f"histogram must have the pool's domain size {pool.k}")
    per_draw = int(epsilon_units) // draws
    if candidates is None:  # the whole pool, measured as proposed: memory one block, never the pool
        distances = PoolDistances(histogram, pool)
        picks = tuple(exponential_draw(distances, distances.denominator, per_draw, rng) for _ in range(draws))
        return SynopsisDraw(picks, per_draw, per_draw * draws)
    candidates = [int(j) for j in candidates]
    rows = (row for start in range(0, len(candidates), BLOCK) for row in pool.counts_of(candidates[start:start + BLOCK]))
    numerators, denominator = l1_numerators(histogram, rows, pool.n_units)
    picks = tuple(candidates[exponential_draw(numerators, denominator, per_draw, rng)] for _ in range(draws))
    return SynopsisDraw(picks, per_draw, per_draw * draws)
