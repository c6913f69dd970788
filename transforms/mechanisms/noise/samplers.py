"""Exact discrete Laplace sampling: CKS20 Algorithms 1 and 2, scalar and vectorized.

Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy"
(NeurIPS 2020; CKS20).  Integer arithmetic only, so the realised
distribution is exactly the one the privacy analysis assumes.  The scalar
sampler (python ints) takes any scale.  Drawing noise draw by draw in python
was the largest cost of the cheapest mechanisms, so for scales whose
arithmetic fits 64 bits the same algorithm also runs on numpy ``uint64``
arrays, a batch of candidates at once (floats only choose a batch's size).
:func:`laplace_draws` picks the path for a batch.
"""

from __future__ import annotations

import math

import numpy as np

from transforms.mechanisms.noise.generators import Randomness

_VECTOR_MIN_SIZE = 32
"""Batches at least this large use the vector sampler; smaller ones draw one by one."""


def laplace_draws(num: int, den: int, size: int, rng: Randomness) -> np.ndarray:
    """``size`` fresh draws (int64), vectorized when the batch and the scale allow it."""
    if size >= _VECTOR_MIN_SIZE and num <= VECTOR_MAX_NUM and den <= VECTOR_MAX_DEN:
        return _discrete_laplace_vector(num, den, size, rng)
    return _scalar_draws(num, den, size, rng)


def _scalar_draws(num: int, den: int, size: int, rng: Randomness) -> np.ndarray:
    randbelow = rng.randbelow
    return np.array([one_discrete_laplace(num, den, randbelow) for _ in range(size)], dtype=np.int64)


# --------------------------------------------------------------------------
# Scalar sampler (python ints; any scale)
# --------------------------------------------------------------------------


def one_discrete_laplace(num: int, den: int, randbelow) -> int:
    """One exact discrete Laplace draw with scale ``num/den`` (a python int).

    CKS20 Algorithm 2 outputs scale ``t/s``; here ``t = num`` and ``s = den``.
    Bernoulli(a/b) coins are integer comparisons ``randbelow(b) < a``.  Each
    ``randbelow`` call costs a python call and a keystream word, so
    independent uniforms are drawn together where possible: the digits of a
    uniform integer below ``b1*b2*...`` in mixed radix ``(b1, b2, ...)`` are
    independent uniforms below ``b1``, ``b2``, ... (exact, no bias).
    """
    two_num_sq = 2 * num * num
    joint = two_num_sq <= 1 << 64  # else two one-word draws beat one multi-word uniform
    while True:
        # Digits: sign coin b (Algorithm 2), u uniform in [0, num), and the
        # first coin of Bernoulli(exp(-u/num)) (Algorithm 1, k = 1).
        if joint:
            r = randbelow(two_num_sq)
            b = r & 1
            u, first = divmod(r >> 1, num)
        else:
            r = randbelow(2 * num)
            b, u = r & 1, r >> 1
            first = randbelow(num)
        # Bernoulli(exp(-u/num)) with u/num < 1: count k while Bernoulli(u/(num*k))
        # succeeds; accept iff k is odd.  u == 0 always accepts.
        if first < u:
            k = 2
            while randbelow(num * k) < u:
                k += 1
            if not k & 1:
                continue
        # v ~ Geometric: successes of Bernoulli(exp(-1)) before the first failure.
        v = 0
        while _bernoulli_exp1(randbelow):
            v += 1
        y = (u + num * v) // den
        if b:
            if y:
                return -y
            continue  # reject "-0" so that 0 is not counted twice
        return y


_RADIX_2_TO_8 = 2 * 3 * 4 * 5 * 6 * 7 * 8


def _bernoulli_exp1(randbelow) -> bool:
    """Exact Bernoulli(exp(-1)) (CKS20 Algorithm 1 with gamma = 1).

    Count k while Bernoulli(1/k) succeeds (the k = 1 coin always does) and
    return whether the final k is odd.  The coins for k = 2..8 are the mixed
    radix digits of one uniform draw below 8!; Bernoulli(1/k) is digit == 0.
    """
    r = randbelow(_RADIX_2_TO_8)
    for k in range(2, 9):
        r, digit = divmod(r, k)
        if digit:
            return bool(k & 1)
    return _bernoulli_exp1_from_9(randbelow)  # reached with probability 1/8!


def _bernoulli_exp1_from_9(randbelow) -> bool:
    """The end of :func:`_bernoulli_exp1` once the coins k = 2..8 all succeeded."""
    k = 9
    while not randbelow(k):
        k += 1
    return bool(k & 1)


# --------------------------------------------------------------------------
# Vector sampler (numpy uint64; numerator <= 2**50)
# --------------------------------------------------------------------------

VECTOR_MAX_NUM = 1 << 50
"""Largest numerator of the vector path: ``num * _VECTOR_MAX_FACTOR <= 2**62`` keeps uint64 margin."""
VECTOR_MAX_DEN = (1 << 63) - 1
_VECTOR_MAX_FACTOR = 1 << 12
"""Largest k (Algorithm 1's counter) and v (the geometric) the vector path handles; an element going
further (probabilities about 1/4096! and e^-4095) finishes with python ints."""
_VECTOR_CHUNK = 1 << 16
"""Outputs per round of candidates (their words and arrays take a few MB)."""
_SCALAR_TAIL = 8
"""When at most this many candidates are still in a loop of the vector sampler, they finish with python ints
(a numpy round costs about as much as a few scalar coins)."""
_U64_ONE = np.uint64(1)
_EXP1_RADIX = np.uint64(_RADIX_2_TO_8)
_EXP1_RADIX_CUBED = _RADIX_2_TO_8**3  # < 2**46: three Bernoulli(exp(-1)) coins from one 46-bit uniform


def _exp1_table() -> np.ndarray:
    """Bernoulli(exp(-1)) decided by one uniform ``r`` below 8!, exactly as :func:`_bernoulli_exp1` decodes it.

    Entry ``r`` is 1 (success: the first nonzero mixed-radix digit is at an
    odd k), 0 (failure) or 2 (``r == 0``: the coins k = 2..8 all succeeded,
    continue at k = 9).
    """
    r = np.arange(_RADIX_2_TO_8, dtype=np.int64)
    table = np.full(_RADIX_2_TO_8, 2, dtype=np.uint8)
    undecided = np.ones(_RADIX_2_TO_8, dtype=bool)
    for k in range(2, 9):
        r, digit = np.divmod(r, k)
        decided = undecided & (digit != 0)
        table[decided] = k & 1
        undecided &= ~decided
    return table


_EXP1_TABLE = _exp1_table()


class RandomWords:
    """Uniform 64-bit words for one vector call, fetched from ``rng.uint32`` in large blocks.

    A fetch costs a few microseconds whatever its size, so words are taken
    from a block; the unused rest of a block is discarded (never reused).
    """

    __slots__ = ("_rng", "_block", "_pos", "_hint")

    def __init__(self, rng: Randomness, hint: int) -> None:
        self._rng = rng
        self._block = np.zeros(0, np.uint64)
        self._pos = 0
        self._hint = hint

    def take(self, n: int) -> np.ndarray:
        start, end = self._pos, self._pos + n
        if end > self._block.size:
            self._block = self._rng.uint32(2 * max(n, self._hint)).view("<u8")
            start, end = 0, n
        self._pos = end
        return self._block[start:end]


def uniform_below(m: int, size: int, words: RandomWords) -> np.ndarray:
    """``size`` exact uniform integers below ``m`` (uint64), from top bits of 64-bit words plus rejection.

    ``m`` is a python int in ``[1, 2**64)``.  A word's top ``bits(m - 1)``
    bits are a uniform integer below ``2**bits``; values ``>= m`` are
    rejected (acceptance >= 1/2).  No modulo, no floats.  The words are
    oversampled so that one pass usually suffices; the first ``size``
    accepted values are kept in order.
    """
    if m == 1 or size == 0:
        return np.zeros(size, np.uint64)
    bits = (m - 1).bit_length()
    shift, bound = np.uint64(64 - bits), np.uint64(m)
    parts, have = [], 0
    while have < size:
        want = size - have
        count = ((want << bits) // m) + 3 * math.isqrt(want) + 4
        candidates = words.take(count) >> shift
        accepted = candidates[candidates < bound]
        parts.append(accepted)
        have += accepted.size
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out[:size]


def _acceptance(num: int, den: int) -> float:
    """Expected fraction of Algorithm 2's candidates that are accepted (only sizes batches; >= ~0.316).

    Bernoulli(exp(-u/num)) accepts with mean ``(1 - e^-1) / (num (1 - e^(-1/num)))``;
    then "-0" is rejected: a factor ``(1 + e^(-den/num)) / 2``.
    """
    return (-math.expm1(-1.0)) / (num * -math.expm1(-1.0 / num)) * (1.0 + math.exp(-den / num)) / 2.0


def _discrete_laplace_vector(num: int, den: int, size: int, rng: Randomness) -> np.ndarray:
    """``size`` exact discrete Laplace draws of scale ``num/den`` (int64): CKS20 Algorithm 2 on uint64 arrays.

    The same algorithm, and so the same distribution, as
    :func:`one_discrete_laplace`, run on a batch of candidates at once with
    words from ``rng.uint32``; candidates are generated in rounds (sized by
    the expected acceptance rate) until ``size`` are accepted, and the first
    ``size`` accepted are returned in order.  Needs ``num <= 2**50`` and
    ``den < 2**63``: every intermediate (``2 num``, ``num k``, ``u + num v``)
    then stays below ``2**63``.
    """
    if not (0 < num <= VECTOR_MAX_NUM and 0 < den <= VECTOR_MAX_DEN):
        raise ValueError(f"the vector sampler needs num <= 2**50 and den < 2**63, got {num}/{den}")
    if size == 0:
        return np.zeros(0, np.int64)
    rate = _acceptance(num, den)
    candidates = min(size, _VECTOR_CHUNK) / rate
    # Words a candidate uses: about 2.4 for num == 1 (no Bernoulli(exp(-u/num)) coins), 4-5 otherwise.
    words = RandomWords(rng, int((3 if num == 1 else 6) * candidates + 20 * math.sqrt(candidates)) + 64)
    parts, have = [], 0
    while have < size:  # rounds of at most _VECTOR_CHUNK outputs: bounded memory
        expected = min(size - have, _VECTOR_CHUNK) / rate
        accepted = _vector_candidates(num, den, int(expected + 3 * math.sqrt(expected)) + 4, words, rng)
        parts.append(accepted)
        have += accepted.size
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out[:size]


def _vector_candidates(num: int, den: int, n: int, words: RandomWords, rng: Randomness) -> np.ndarray:
    """Run ``n`` candidates of Algorithm 2; return the accepted ones' values (int64, in candidate order)."""
    # Sign b and u uniform in [0, num): the two digits of one uniform below 2 num.
    r = uniform_below(2 * num, n, words)
    negative = (r & _U64_ONE).astype(bool)
    u = r >> _U64_ONE
    # Bernoulli(exp(-u/num)) (Algorithm 1): count k while Bernoulli(u/(num k))
    # succeeds, accept iff the final k is odd.  All still-active candidates are
    # at the same k, so each round is one uniform below the scalar num k.
    # u == 0 stops at k = 1 (odd) without a draw.
    keep = np.ones(n, bool)
    active = np.flatnonzero(u)
    k = 1
    while active.size:
        if active.size <= _SCALAR_TAIL or k > _VECTOR_MAX_FACTOR:  # a few stragglers: python ints
            randbelow = rng.randbelow
            for i in active.tolist():
                u_i, k_i = int(u[i]), k
                while randbelow(num * k_i) < u_i:
                    k_i += 1
                keep[i] = bool(k_i & 1)
            break
        success = uniform_below(num * k, active.size, words) < u[active]
        if not k & 1:
            keep[active[~success]] = False
        active = active[success]
        k += 1
    kept = np.flatnonzero(keep)
    u, negative = u[kept], negative[kept]
    v, large = _geometric_exp1(kept.size, words, rng)
    y = (u + v * np.uint64(num)) // np.uint64(den)
    values = y.astype(np.int64)
    np.negative(values, out=values, where=negative)
    for i, v_i in large.items():  # v beyond the vector range: python ints (OverflowError past int64)
        y_i = (int(u[i]) + num * v_i) // den
        y[i] = min(y_i, 1)  # only y == 0 matters below
        values[i] = -y_i if negative[i] else y_i
    return values[~(negative & (y == 0))]  # reject "-0" so that 0 is not counted twice


def _geometric_exp1(n: int, words: RandomWords, rng: Randomness) -> tuple[np.ndarray, dict[int, int]]:
    """``n`` draws of v = successes of Bernoulli(exp(-1)) before the first failure (uint64).

    Each round gives every still-active element three coins: the three
    base-8! digits of one uniform below ``(8!)**3``, each decoded by
    ``_EXP1_TABLE`` (a digit 0 continues Algorithm 1 at k = 9 with
    ``rng.randbelow``).  All active elements have succeeded every coin so far,
    so they share v.  The last few active elements finish with
    :func:`_bernoulli_exp1`; one whose v would pass ``_VECTOR_MAX_FACTOR`` is
    returned in the dict (index -> v, a python int) with its array entry 0.
    """
    v = np.zeros(n, np.uint64)
    large: dict[int, int] = {}
    active = np.arange(n)
    done = 0  # the shared v of the active elements
    while active.size:
        if active.size <= _SCALAR_TAIL or done + 3 > _VECTOR_MAX_FACTOR:
            randbelow = rng.randbelow
            for i in active.tolist():
                v_i = done
                while _bernoulli_exp1(randbelow):
                    v_i += 1
                if v_i <= _VECTOR_MAX_FACTOR:
                    v[i] = v_i
                else:
                    large[i] = v_i
            break
        r = uniform_below(_EXP1_RADIX_CUBED, active.size, words)
        high, d0 = np.divmod(r, _EXP1_RADIX)
        d2, d1 = np.divmod(high, _EXP1_RADIX)
        coins = _EXP1_TABLE[np.stack((d0, d1, d2), axis=1)]
        undecided = np.flatnonzero(coins == 2)
        if undecided.size:
            flat, randbelow = coins.reshape(-1), rng.randbelow
            for j in undecided.tolist():
                flat[j] = _bernoulli_exp1_from_9(randbelow)
        leading = np.logical_and.accumulate(coins.astype(bool), axis=1)  # coins are 0 or 1 now
        v[active] = np.uint64(done) + leading.sum(axis=1, dtype=np.uint64)
        active = active[leading[:, 2]]
        done += 3
    return v, large
