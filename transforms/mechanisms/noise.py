"""Randomness and noise primitives for the differentially private histograms.

Secure by default: :class:`SecureRandomness` (a ChaCha20 keystream keyed by
the operating system's CSPRNG) is the only source meant for releases.
:class:`InsecureSeededRandomness` is a deterministic stream for tests and
reproducible replays only.

Noise on counts is discrete Laplace noise sampled *exactly* with integer
arithmetic, following Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020; CKS20), Algorithms 1 and 2.  No floating
point is involved, so the realised distribution is exactly the one the privacy
analysis assumes.  Textbook floating-point Laplace sampling (``-b * log(U)``)
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
_THRESHOLD_SHRINK = 1.0 - 2.0**-40
_MAX_DISCRETE_SCALE = 1 << 53


class Randomness(abc.ABC):
    """Source of uniform random integers for noise and sampling coins."""

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
        """Drop the key and the buffered words (at creation and in a forked child)."""
        self._cipher = None
        self._produced = 0
        self._words: list[int] = []

    def _keystream(self, size: int) -> bytes:
        if self._cipher is None or self._produced + size > self.REKEY_BYTES:
            self._cipher = Cipher(algorithms.ChaCha20(os.urandom(32), os.urandom(16)), mode=None).encryptor()
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
    the state, so a pickled copy continues the identical sequence.
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
    Algorithm 1, using only ``rng.randbelow``.  ``scale`` must be a positive
    :class:`~fractions.Fraction` or int (floats are refused: convert them
    explicitly, e.g. ``Fraction(str(x))``) and at most ``2**53`` so that every
    draw fits int64 (exceeding 2**63 would take ~1000 scales, probability
    ~e^-1000); otherwise ``ValueError`` naming ``scale``.  Returns an
    ``np.int64`` array.
    """
    num, den = _discrete_scale(scale)
    size = _check_size(size)
    randbelow = rng.randbelow
    return np.array([_one_discrete_laplace(num, den, randbelow) for _ in range(size)], dtype=np.int64)


def discrete_laplace_draw(scale: Fraction, rng: Randomness) -> int:
    """One exact discrete Laplace draw as a python int (:func:`discrete_laplace` with size 1)."""
    num, den = _discrete_scale(scale)
    return _one_discrete_laplace(num, den, rng.randbelow)


def _discrete_scale(scale) -> tuple[int, int]:
    num, den = _check_scale(scale)
    if num > _MAX_DISCRETE_SCALE * den:
        raise ValueError(f"scale must be at most 2**53 for int64 output, got {scale!r}")
    return num, den


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
    while True:
        # Digits: sign coin b (Algorithm 2), u uniform in [0, num), and the
        # first coin of Bernoulli(exp(-u/num)) (Algorithm 1, k = 1).
        r = randbelow(two_num_sq)
        b = r & 1
        u, first = divmod(r >> 1, num)
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
    k = 9  # reached with probability 1/8!
    while not randbelow(k):
        k += 1
    return bool(k & 1)


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
    without drawing.  Each other coin compares a uniform 32-bit ``X`` with its
    threshold ``t`` lazily: ``X``'s top byte decides unless it equals ``t``'s
    (probability 1/256), and only then are ``X``'s low 24 bits drawn.  That is
    exactly ``X < t`` with about a quarter of the random bytes.  Memory is
    O(total coins).  Returns int64.
    """
    n = np.asarray(trials)
    t = np.asarray(thresholds)
    if n.ndim != 1 or t.shape != n.shape:
        raise ValueError(f"trials and thresholds must be 1-D of equal length, got {n.shape} and {t.shape}")
    if n.size == 0:
        return np.zeros(0, np.int64)
    if n.dtype.kind not in "iu" or t.dtype.kind not in "iu":
        raise ValueError(f"trials and thresholds must be integers, got dtypes {n.dtype} and {t.dtype}")
    if n.min() < 0 or t.min() < 0:
        raise ValueError("trials and thresholds must be non-negative")
    n = n.astype(np.int64, copy=False)
    t = t.astype(np.uint64, copy=False)

    result = np.where(t >= _TWO_32, n, 0)
    random_cells = np.flatnonzero((t - np.uint64(1) < np.uint64(_TWO_32 - 1)) & (n > 0))  # 0 < t < 2**32
    if random_cells.size == 0:
        return result
    cell_trials, cell_thresholds = n[random_cells], t[random_cells]
    total = int(cell_trials.sum())
    top_bytes = rng.uint32(-(-total // 4)).view(np.uint8)[:total]
    coin_top = np.repeat((cell_thresholds >> np.uint64(24)).astype(np.uint8), cell_trials)
    successes = (top_bytes < coin_top).view(np.uint8)
    ties = np.flatnonzero(top_bytes == coin_top)
    starts = np.cumsum(cell_trials) - cell_trials
    if ties.size:
        low_bits = (rng.uint32(ties.size) >> np.uint32(8)).astype(np.uint64)
        tie_cells = np.searchsorted(starts, ties, side="right") - 1
        successes[ties] = low_bits < (cell_thresholds[tie_cells] & np.uint64(0xFFFFFF))
    result[random_cells] = np.add.reduceat(successes, starts, dtype=np.int64)
    return result


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
    ``2 scale**2``.  Returns float64 with the shape of ``values``.
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
    randbelow = rng.randbelow
    out = np.empty(x.size, dtype=np.float64)
    for i, value in enumerate(x.ravel().tolist()):
        on_grid = round(Fraction(value) / g)  # exact, ties to even
        noisy = on_grid + _one_discrete_laplace(num, den, randbelow)
        out[i] = math.ldexp(float(noisy), e)  # float(noisy) is correctly rounded
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
