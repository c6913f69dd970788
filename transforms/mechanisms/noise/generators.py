"""Sources of randomness: the secure default and a seeded one for tests and replays.

:class:`SecureRandomness` (a ChaCha20 keystream keyed by the operating
system's CSPRNG) is the only source meant for releases; a forked child never
reuses its parent's stream.  :class:`InsecureSeededRandomness` is a
deterministic stream for tests and reproducible replays only.
"""

from __future__ import annotations

import abc
import os
import random
import weakref
from numbers import Integral

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

_TWO_32 = 1 << 32
_COUNTER_ZERO = bytes(4)


class Randomness(abc.ABC):
    """Source of uniform random integers for noise and sampling coins.

    A source may keep a pool of pre-drawn discrete Laplace noise (see
    :mod:`transforms.mechanisms.noise.pool`): part of its stream, so it is
    created with the source, never shared with another one and, for a seeded
    source, pickled with it.  A source without one (``None``) draws every
    value when it is asked for.
    """

    is_secure: bool = False
    """True only for sources fit for privacy-protecting releases."""

    _noise_pool: dict | None = None
    """Pre-drawn noise per scale (``noise.pool`` reads and refills it), or None: this source does not pool."""

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
        size = check_size(size)
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
        self._noise_pool = {}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_noise_pool", {})  # pickled before it drew noise by an older release

    def randbelow(self, n: int) -> int:
        """Uniform int in [0, n) from the seeded Python stream."""
        return self._random.randrange(n)

    def uint32(self, size: int) -> np.ndarray:
        """``size`` uniform uint32 values from the seeded numpy stream."""
        size = check_size(size)
        return self._generator.integers(0, _TWO_32, size, dtype=np.uint32)

    def __repr__(self) -> str:
        return f"InsecureSeededRandomness(seed={self._seed})"


def secure_randomness() -> Randomness:
    """The default, cryptographically secure source."""
    return SecureRandomness()


def insecure_seeded_randomness(seed: int) -> Randomness:
    """A deterministic source for tests and replays; never use it for releases."""
    return InsecureSeededRandomness(seed)


def check_size(size) -> int:
    """``size`` as an int, or ValueError unless it is a non-negative integer (not a bool)."""
    if type(size) is int and size >= 0:  # the usual case, without the ABC checks
        return size
    if isinstance(size, bool) or not isinstance(size, Integral) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    return int(size)
