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
  exponential mechanism's law (subtracting ``D_min`` multiplies every weight by
  the same constant).  Since ``gamma_min = 0`` a round accepts with probability
  at least ``1/M`` (``M`` candidates): at most ``M`` rounds expected.

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


def exponential_draw(numerators, denominator: int, epsilon_units: int, rng: Randomness,
                     sensitivity: int = SENSITIVITY, lowest: int | None = None) -> int:
    """A position ``p`` drawn with probability proportional to ``exp(-eps·(D_p/denominator)/(2·sensitivity))``.

    ``eps = epsilon_units/10**12``; exact rejection sampler of the module doc.  ``lowest`` is
    ``min(numerators)`` when the caller has it (many draws from the same numerators).
    """
    if len(numerators) == 0:
        raise ValueError("the exponential mechanism needs at least one candidate")
    if isinstance(epsilon_units, bool) or not isinstance(epsilon_units, Integral) or epsilon_units < 0:
        raise ValueError(f"epsilon_units must be a non-negative int, got {epsilon_units!r}")
    lowest = min(numerators) if lowest is None else lowest
    gamma_denominator = 2 * sensitivity * denominator * UNITS_PER_EPSILON
    randbelow = rng.randbelow
    while True:
        p = randbelow(len(numerators))
        if bernoulli_exp(int(epsilon_units) * (numerators[p] - lowest), gamma_denominator, randbelow):
            return p


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
    whole_pool = candidates is None
    candidates = list(range(pool.size)) if whole_pool else [int(j) for j in candidates]
    if len(np.asarray(histogram).ravel()) != pool.k:
        raise ValueError(f"histogram must have the pool's domain size {pool.k}")
    if whole_pool:  # block by block: memory one block, never the pool
        rows = (row for _, block in pool.blocks() for row in block)
    else:
        rows = (row for start in range(0, len(candidates), BLOCK)
                for row in pool.counts_of(candidates[start:start + BLOCK]))
    numerators, denominator = l1_numerators(histogram, rows, pool.n_units)
    per_draw = int(epsilon_units) // draws
    lowest = min(numerators)
    picks = tuple(candidates[exponential_draw(numerators, denominator, per_draw, rng, lowest=lowest)]
                  for _ in range(draws))
    return SynopsisDraw(picks, per_draw, per_draw * draws)
