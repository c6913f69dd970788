"""Randomness and noise primitives for the differentially private histograms.

Secure by default: :class:`SecureRandomness` (a ChaCha20 keystream keyed by
the operating system's CSPRNG) is the only source meant for releases.
:class:`InsecureSeededRandomness` is a deterministic stream for tests and
reproducible replays only.

Noise on counts is discrete Laplace noise sampled *exactly* with integer
arithmetic, following Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020; CKS20), Algorithms 1 and 2.  No floating
point is involved, so the realised distribution is exactly the one the privacy
analysis assumes.  Drawing noise draw by draw in python was the largest cost
of the cheapest mechanisms, so for scales whose arithmetic fits 64 bits the
same algorithm also runs on numpy ``uint64`` arrays, a batch of candidates
at once (floats only choose a batch's size), and each generator keeps a
small pool of draws per recently used scale: a repeated scale, such as a
mechanism's per-slot draw, pops pre-drawn noise (see
:func:`discrete_laplace`).  Textbook floating-point Laplace sampling (``-b * log(U)``)
is avoided because its rounding leaks the input through the low-order bits of
the output (Mironov, "On Significance of the Least Significant Bits for
Differential Privacy", CCS 2012); when real-valued noise is needed,
:func:`grid_laplace` adds discrete noise on a power-of-two grid instead.

Subsampling coins (:func:`bernoulli_thresholds`, :func:`count_successes`)
compare uniform ``uint32`` draws with integer thresholds that are rounded
down, so a realised success probability never exceeds the requested one.
"""

from __future__ import annotations

import abc
import math
import os
import random
import weakref
from fractions import Fraction
from numbers import Integral, Rational

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

_TWO_32 = 1 << 32
_U64_16 = np.uint64(16)
_U64_TWO_32 = np.uint64(_TWO_32)
_U64_TWO_32_MINUS_1 = np.uint64(_TWO_32 - 1)
_THRESHOLD_SHRINK = 1.0 - 2.0**-40
_MAX_DISCRETE_SCALE = 1 << 53
_COUNTER_ZERO = bytes(4)


class Randomness(abc.ABC):
    """Source of uniform random integers for noise and sampling coins.

    The noise functions keep pre-drawn discrete Laplace noise in the
    attribute ``_noise_pool`` of the instance (created on first use; see
    :func:`discrete_laplace`): it is part of the generator's stream.
    """

    is_secure: bool = False
    """True only for sources fit for privacy-protecting releases."""

    @abc.abstractmethod
    def randbelow(self, n: int) -> int:
        """Uniform int in [0, n); n is a python int >= 1, possibly huge (bignum)."""

    @abc.abstractmethod
    def uint32(self, size: int) -> np.ndarray:
        """``size`` uniform uint32 values (dtype ``np.uint32``)."""


class SecureRandomness(Randomness):
    """Cryptographically secure randomness (the default): a ChaCha20 keystream keyed by the OS.

    The key comes from :func:`os.urandom` and is replaced every ``REKEY_BYTES``
    of output; a forked child drops the key and buffer it inherited (parent and
    child never share a stream).  This is the construction of the operating systems' own generators (Linux
    ``getrandom``, OpenBSD ``arc4random``); here it runs in user space because
    a system call per buffer made the sampling coins of large slots the
    slowest step (``os.urandom`` gave 60-100 MB/s on the 2-core machine,
    the keystream about 1 GB/s).  Its state is never pickled.
    """

    is_secure = True

    _BUFFER_BYTES = 1 << 16
    REKEY_BYTES = 1 << 32

    def __init__(self):
        self._forget()
        _LIVE_SECURE.add(self)

    def _forget(self) -> None:
        """Drop the key, the buffered words and the pooled noise (at creation and in a forked child)."""
        self._cipher = None
        self._produced = 0
        self._words: list[int] = []
        self._noise_pool: dict = {}  # pre-drawn discrete Laplace noise: never shared with a child

    def _keystream(self, size: int) -> bytes:
        if self._cipher is None or self._produced + size > self.REKEY_BYTES:
            # cryptography's 16-byte ChaCha20 "nonce" is a 4-byte little-endian block counter followed
            # by the 12-byte nonce.  The counter starts at 0, so 2**32 blocks (256 GiB) lie ahead and
            # REKEY_BYTES is reached long before it could overflow (which raises, it never wraps).
            self._cipher = Cipher(algorithms.ChaCha20(os.urandom(32), _COUNTER_ZERO + os.urandom(12)),
                                  mode=None).encryptor()
            self._produced = 0
        self._produced += size
        return self._cipher.update(bytes(size))

    def _word(self) -> int:
        """One uniform 64-bit word (python int) from the buffered keystream."""
        if not self._words:
            self._words = np.frombuffer(self._keystream(self._BUFFER_BYTES), "<u8").tolist()
        return self._words.pop()

    def randbelow(self, n: int) -> int:
        """Uniform int in [0, n): the top bits of 64-bit keystream words, rejection sampled."""
        if n < 1:
            raise ValueError(f"randbelow needs n >= 1, got {n}")
        bits = (n - 1).bit_length()
        if bits <= 64:  # every noise draw of realistic scales: one word per attempt
            shift = 64 - bits
            while True:
                candidate = self._word() >> shift
                if candidate < n:
                    return candidate
        words = (bits + 63) // 64
        while True:
            value = 0
            for _ in range(words):
                value = (value << 64) | self._word()
            candidate = value >> (64 * words - bits)
            if candidate < n:
                return candidate

    def uint32(self, size: int) -> np.ndarray:
        """``size`` uniform uint32 values (writable array)."""
        size = _check_size(size)
        return np.frombuffer(bytearray(self._keystream(4 * size)), dtype=np.uint32)

    def __getstate__(self):
        return {}  # never persist a key or buffered randomness with a checkpoint

    def __setstate__(self, state):
        self.__init__()

    def __repr__(self) -> str:
        return "SecureRandomness()"


_LIVE_SECURE: "weakref.WeakSet[SecureRandomness]" = weakref.WeakSet()


def _forget_after_fork() -> None:
    for rng in list(_LIVE_SECURE):
        rng._forget()


os.register_at_fork(after_in_child=_forget_after_fork)  # a child never reuses its parent's stream


class InsecureSeededRandomness(Randomness):
    """Deterministic, NOT secure: only for tests and reproducible replays.

    ``randbelow`` and ``uint32`` are two independent streams derived from the
    same seed (Python's Mersenne Twister and numpy's PCG64).  Pickling keeps
    the state, the pool of pre-drawn noise included (plain dicts, lists and
    ints, which the checkpoint loader accepts), so a pickled copy continues
    the identical sequence.
    """

    is_secure = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self._seed = int(seed)
        self._random = random.Random(self._seed)
        self._generator = np.random.Generator(np.random.PCG64(self._seed))

    def randbelow(self, n: int) -> int:
        """Uniform int in [0, n) from the seeded Python stream."""
        return self._random.randrange(n)

    def uint32(self, size: int) -> np.ndarray:
        """``size`` uniform uint32 values from the seeded numpy stream."""
        size = _check_size(size)
        return self._generator.integers(0, _TWO_32, size, dtype=np.uint32)

    def __repr__(self) -> str:
        return f"InsecureSeededRandomness(seed={self._seed})"


def secure_randomness() -> Randomness:
    """The default, cryptographically secure source."""
    return SecureRandomness()


def insecure_seeded_randomness(seed: int) -> Randomness:
    """A deterministic source for tests and replays; never use it for releases."""
    return InsecureSeededRandomness(seed)


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
    denominator below ``2**63``) the draws go through the generator's pool:
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
    size = _check_size(size)
    if size == 0:
        return np.zeros(0, np.int64)
    entry = _pool_entry(rng, num, den)
    if entry is None:  # a scale past the vector range, or a generator that cannot hold a pool
        return _draws(num, den, size, rng)
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
        return _one_discrete_laplace(num, den, rng.randbelow)
    pooled = entry[0]
    if pooled:
        return pooled.pop()
    return int(_refill(entry, num, den, 1, rng)[0])


def _discrete_scale(scale) -> tuple[int, int]:
    num, den = _check_scale(scale)
    if num > _MAX_DISCRETE_SCALE * den:
        raise ValueError(f"scale must be at most 2**53 for int64 output, got {scale!r}")
    return num, den


# --------------------------------------------------------------------------
# Per-generator pool of pre-drawn noise
# --------------------------------------------------------------------------

_POOL_MAX_KEYS = 64
"""Scales a generator keeps draws for (least recently used evicted, its draws discarded)."""
_POOL_MAX_REFILL = 1024
"""Largest batch a refill draws beyond what the request needs (so a key holds at most this many)."""
_VECTOR_MIN_SIZE = 32
"""Batches at least this large use the vector sampler; smaller ones draw one by one."""


def _pool_entry(rng: Randomness, num: int, den: int) -> list | None:
    """``[pooled draws, next refill size]`` of scale ``num/den`` in ``rng``'s pool, marked most recently used.

    The pool is ``rng._noise_pool``: a plain dict (insertion ordered, so the
    first key is the least recently used) from ``(num, den)`` to a list of
    python ints (consumed from the end) and the size of the key's next refill.
    Plain containers so that a seeded generator pickles (and a checkpoint
    loads it) as before.  ``None`` for a scale past the vector range (not
    pooled) or if ``rng`` cannot carry the attribute.
    """
    if num > _VECTOR_MAX_NUM or den > _VECTOR_MAX_DEN:
        return None
    pool = getattr(rng, "_noise_pool", None)
    if pool is None:
        try:
            rng._noise_pool = pool = {}
        except AttributeError:
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
    drawn = _draws(num, den, max(missing, refill), rng)
    entry[1] = min(2 * refill, _POOL_MAX_REFILL)
    if drawn.size > missing:
        entry[0].extend(drawn[missing:].tolist())
        return drawn[:missing].copy()  # not a view: its base would hold the pooled draws
    return drawn


def _draws(num: int, den: int, size: int, rng: Randomness) -> np.ndarray:
    """``size`` fresh draws (int64), vectorized when the batch and the scale allow it."""
    if size >= _VECTOR_MIN_SIZE and num <= _VECTOR_MAX_NUM and den <= _VECTOR_MAX_DEN:
        return _discrete_laplace_vector(num, den, size, rng)
    return _scalar_draws(num, den, size, rng)


def _scalar_draws(num: int, den: int, size: int, rng: Randomness) -> np.ndarray:
    randbelow = rng.randbelow
    return np.array([_one_discrete_laplace(num, den, randbelow) for _ in range(size)], dtype=np.int64)


# --------------------------------------------------------------------------
# Scalar sampler (python ints; any scale)
# --------------------------------------------------------------------------


def _one_discrete_laplace(num: int, den: int, randbelow) -> int:
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

_VECTOR_MAX_NUM = 1 << 50
"""Largest numerator of the vector path: ``num * _VECTOR_MAX_FACTOR <= 2**62`` keeps uint64 margin."""
_VECTOR_MAX_DEN = (1 << 63) - 1
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


class _Words:
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


def _uniform_below(m, size: int, words: _Words) -> np.ndarray:
    """``size`` exact uniform integers below ``m`` (uint64), from top bits of 64-bit words plus rejection.

    ``m`` is a python int in ``[1, 2**64)`` or a uint64 array of length
    ``size`` (one bound per element, each >= 1).  A word's top
    ``bits(m - 1)`` bits are a uniform integer below ``2**bits``; values
    ``>= m`` are rejected and redrawn (acceptance >= 1/2).  No modulo, no
    floats.  For a scalar ``m`` the words are oversampled so that one pass
    usually suffices; the first ``size`` accepted values are kept in order.
    """
    if not isinstance(m, np.ndarray):
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
    bound = m.astype(np.uint64, copy=False)
    if bound.shape != (size,):
        raise ValueError(f"m must be a scalar or have shape ({size},), got {bound.shape}")
    # bits(m - 1): smear the highest set bit down, then count the ones.
    smeared = bound - _U64_ONE
    for step in (1, 2, 4, 8, 16, 32):
        smeared |= smeared >> np.uint64(step)
    # m == 1 (bits 0) uses one top bit: 0 is accepted, 1 rejected; a shift by 64 is undefined.
    shift = np.minimum(np.uint64(64) - np.bitwise_count(smeared).astype(np.uint64), np.uint64(63))
    out = np.empty(size, np.uint64)
    pending = np.arange(size)
    while pending.size:
        candidates = words.take(pending.size) >> shift[pending]
        ok = candidates < bound[pending]
        out[pending[ok]] = candidates[ok]
        pending = pending[~ok]
    return out


def _acceptance(num: int, den: int) -> float:
    """Expected fraction of Algorithm 2's candidates that are accepted (only sizes batches; >= ~0.316).

    Bernoulli(exp(-u/num)) accepts with mean ``(1 - e^-1) / (num (1 - e^(-1/num)))``;
    then "-0" is rejected: a factor ``(1 + e^(-den/num)) / 2``.
    """
    return (-math.expm1(-1.0)) / (num * -math.expm1(-1.0 / num)) * (1.0 + math.exp(-den / num)) / 2.0


def _discrete_laplace_vector(num: int, den: int, size: int, rng: Randomness) -> np.ndarray:
    """``size`` exact discrete Laplace draws of scale ``num/den`` (int64): CKS20 Algorithm 2 on uint64 arrays.

    The same algorithm, and so the same distribution, as
    :func:`_one_discrete_laplace`, run on a batch of candidates at once with
    words from ``rng.uint32``; candidates are generated in rounds (sized by
    the expected acceptance rate) until ``size`` are accepted, and the first
    ``size`` accepted are returned in order.  Needs ``num <= 2**50`` and
    ``den < 2**63``: every intermediate (``2 num``, ``num k``, ``u + num v``)
    then stays below ``2**63``.
    """
    if not (0 < num <= _VECTOR_MAX_NUM and 0 < den <= _VECTOR_MAX_DEN):
        raise ValueError(f"the vector sampler needs num <= 2**50 and den < 2**63, got {num}/{den}")
    if size == 0:
        return np.zeros(0, np.int64)
    rate = _acceptance(num, den)
    candidates = min(size, _VECTOR_CHUNK) / rate
    # Words a candidate uses: about 2.4 for num == 1 (no Bernoulli(exp(-u/num)) coins), 4-5 otherwise.
    words = _Words(rng, int((3 if num == 1 else 6) * candidates + 20 * math.sqrt(candidates)) + 64)
    parts, have = [], 0
    while have < size:  # rounds of at most _VECTOR_CHUNK outputs: bounded memory
        expected = min(size - have, _VECTOR_CHUNK) / rate
        accepted = _vector_candidates(num, den, int(expected + 3 * math.sqrt(expected)) + 4, words, rng)
        parts.append(accepted)
        have += accepted.size
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out[:size]


def _vector_candidates(num: int, den: int, n: int, words: _Words, rng: Randomness) -> np.ndarray:
    """Run ``n`` candidates of Algorithm 2; return the accepted ones' values (int64, in candidate order)."""
    # Sign b and u uniform in [0, num): the two digits of one uniform below 2 num.
    r = _uniform_below(2 * num, n, words)
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
        success = _uniform_below(num * k, active.size, words) < u[active]
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


def _geometric_exp1(n: int, words: _Words, rng: Randomness) -> tuple[np.ndarray, dict[int, int]]:
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
        r = _uniform_below(_EXP1_RADIX_CUBED, active.size, words)
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


def discrete_laplace_variance(scale):
    """Variance of the discrete Laplace with this scale (a float or an array of them).

    Equals ``1/(2 sinh^2(1/(2 scale)))`` ``= 2e^{-1/s}/(1-e^{-1/s})^2``:
    tends to ``2 s^2`` for huge scales and to 0 for tiny ones.
    """
    if type(scale) is float and 0 < scale < math.inf:  # scalar path: no array round trip
        x = 1.0 / scale
        denominator = math.expm1(-x) ** 2
        return 2.0 * math.exp(-x) / denominator if denominator else math.inf
    s = _positive_scales(scale)
    x = 1.0 / s
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        variance = 2.0 * np.exp(-x) / np.expm1(-x) ** 2  # inf (not an error) past the float range
    return float(variance) if variance.ndim == 0 else variance


def continuous_laplace_variance(scale):
    """Variance ``2 scale^2`` of the continuous Laplace distribution (float or array)."""
    s = _positive_scales(scale)
    with np.errstate(over="ignore"):
        variance = 2.0 * s * s
    return float(variance) if variance.ndim == 0 else variance


def bernoulli_thresholds(probabilities: np.ndarray) -> np.ndarray:
    """Per-coin thresholds for exact Bernoulli coins from uint32 draws.

    A coin succeeds when ``draw < threshold``.  The threshold is
    ``floor(p * 2**32 * (1 - 2**-40))`` as ``np.uint64``: it always rounds
    DOWN, so the realised probability ``threshold / 2**32`` never exceeds
    ``p`` (conservative for privacy amplification by subsampling).  ``p >= 1``
    gives ``2**32`` (always succeeds) and ``p <= 0`` gives 0 (never).
    Probabilities must be finite, ``ValueError`` otherwise.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if not np.all(np.isfinite(p)):
        raise ValueError("probabilities must be finite (no NaN or infinity)")
    clipped = np.clip(p, 0.0, 1.0)
    # clipped * 2**32 is exact; the shrink factor keeps the product below it.
    thresholds = np.floor(clipped * float(_TWO_32) * _THRESHOLD_SHRINK).astype(np.uint64)
    return np.where(p >= 1.0, np.uint64(_TWO_32), thresholds)


def count_successes(trials: np.ndarray, thresholds: np.ndarray, rng: Randomness) -> np.ndarray:
    """Number of successes among ``trials[i]`` exact coins of probability ``thresholds[i]/2**32``.

    A Binomial draw per cell, realised with explicit coins: ``trials`` is a
    non-negative int64 array and ``thresholds`` a uint64 array of the same
    length (from :func:`bernoulli_thresholds`).  Cells with threshold
    ``>= 2**32`` return ``trials[i]`` and cells with threshold 0 return 0
    without drawing.  Each other coin compares a uniform 32-bit
    ``X = H·2**16 + L`` with its threshold ``t`` lazily: the high half ``H``
    decides unless it equals ``t``'s (probability 2**-16), and only then is
    ``L`` drawn.  That is exactly ``X < t`` with half the random bytes, and
    a slot of ten thousand coins almost never needs the second draw.  Memory
    is O(total coins).  Returns int64.
    """
    n = np.asarray(trials)
    t = np.asarray(thresholds)
    if n.ndim != 1 or t.shape != n.shape:
        raise ValueError(f"trials and thresholds must be 1-D of equal length, got {n.shape} and {t.shape}")
    if n.size == 0:
        return np.zeros(0, np.int64)
    if n.dtype.kind not in "iu" or t.dtype.kind not in "iu":
        raise ValueError(f"trials and thresholds must be integers, got dtypes {n.dtype} and {t.dtype}")
    if (n.dtype.kind == "i" and n.min() < 0) or (t.dtype.kind == "i" and t.min() < 0):
        raise ValueError("trials and thresholds must be non-negative")
    n = n.astype(np.int64, copy=False)
    t = t.astype(np.uint64, copy=False)

    random_cells = np.flatnonzero((t - _U64_ONE < _U64_TWO_32_MINUS_1) & (n > 0))  # 0 < t < 2**32
    if random_cells.size == n.size:  # the usual call: every cell draws
        return _count_random_coins(n, t, rng)
    result = np.where(t >= _U64_TWO_32, n, 0)
    if random_cells.size:
        result[random_cells] = _count_random_coins(n[random_cells], t[random_cells], rng)
    return result


def _count_random_coins(trials: np.ndarray, thresholds: np.ndarray, rng: Randomness) -> np.ndarray:
    """:func:`count_successes` for cells with at least one coin and ``0 < threshold < 2**32``."""
    total = int(np.add.reduce(trials))
    high = rng.uint32(-(-total // 2)).view(np.uint16)[:total]
    coin_high = np.repeat((thresholds >> _U64_16).astype(np.uint16), trials)
    successes = (high < coin_high).view(np.uint8)
    ties = np.flatnonzero(high == coin_high)
    starts = np.cumsum(trials) - trials
    if ties.size:
        low = rng.uint32(ties.size) >> np.uint32(16)
        tie_cells = np.searchsorted(starts, ties, side="right") - 1
        successes[ties] = low < (thresholds[tie_cells] & np.uint64(0xFFFF))
    return np.add.reduceat(successes, starts, dtype=np.int64)


def grid_laplace(
    values: np.ndarray, scale: Fraction, rng: Randomness, granularity_exponent: int = -30
) -> np.ndarray:
    """Floating-point-safe real-valued Laplace noise on a power-of-two grid.

    The "snapping"/grid approach of Google's and OpenDP's libraries: each
    value is rounded to the grid ``g = 2**granularity_exponent`` and
    ``g * discrete_laplace(scale / g)`` is added in exact integer arithmetic.
    The noisy integer is only then converted to float (post-processing), so
    the output lies on the grid and its low bits carry no information about
    the input (Mironov 2012).

    This is epsilon-DP (epsilon = sensitivity/scale) for a sensitivity that
    is a multiple of ``g``; otherwise only approximately so, because rounding
    to the grid can move each value by up to ``g/2`` (use sensitivity + g to
    be safe).  Noise is discrete Laplace, whose variance
    ``g**2 * discrete_laplace_variance(scale/g)`` is slightly below
    ``2 scale**2``.  Returns float64 with the shape of ``values``.  Noise
    comes from the vector sampler when the scale allows it (not pooled).
    """
    num, den = _check_scale(scale)
    if isinstance(granularity_exponent, bool) or not isinstance(granularity_exponent, Integral):
        raise ValueError(f"granularity_exponent must be an int, got {granularity_exponent!r}")
    e = int(granularity_exponent)
    if not -1000 <= e <= 1000:
        raise ValueError(f"granularity_exponent must be in [-1000, 1000], got {e}")
    x = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite (no NaN or infinity)")
    # scale / g as an exact fraction.
    if e <= 0:
        num <<= -e
    else:
        den <<= e
    g = Fraction(2) ** e
    if x.size >= _VECTOR_MIN_SIZE and num <= _VECTOR_MAX_NUM and den <= _VECTOR_MAX_DEN:
        draws = _discrete_laplace_vector(num, den, x.size, rng).tolist()
    else:  # python ints: scale / g may exceed the int64 range of discrete_laplace
        randbelow = rng.randbelow
        draws = [_one_discrete_laplace(num, den, randbelow) for _ in range(x.size)]
    out = np.empty(x.size, dtype=np.float64)
    for i, (value, draw) in enumerate(zip(x.ravel().tolist(), draws)):
        on_grid = round(Fraction(value) / g)  # exact, ties to even
        out[i] = math.ldexp(float(on_grid + draw), e)  # float() of an int is correctly rounded
    return out.reshape(x.shape)


def _check_scale(scale) -> tuple[int, int]:
    """Numerator and denominator of a positive rational scale."""
    if type(scale) is Fraction and scale.numerator > 0:  # the usual case, without the ABC checks
        return scale.numerator, scale.denominator
    if isinstance(scale, bool) or not isinstance(scale, Rational):
        raise ValueError(
            f"scale must be a positive Fraction or int (convert floats explicitly), got {scale!r}"
        )
    exact = Fraction(scale)
    if exact <= 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    return exact.numerator, exact.denominator


def _check_size(size) -> int:
    if type(size) is int and size >= 0:  # the usual case, without the ABC checks
        return size
    if isinstance(size, bool) or not isinstance(size, Integral) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    return int(size)


def _positive_scales(scale) -> np.ndarray:
    if scale is None or isinstance(scale, (bool, np.bool_, str, bytes)) or np.asarray(scale).dtype.kind in "bUSV":
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    values = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    return values
