"""The 0-DP synopsis pool of DPI (spec §2.2, Algorithm 2 as specified there), generated lazily from a public seed.

Candidate ``j`` is the count vector ``c_j ~ Multinomial(n_units, uniform over k)``;
its distribution is ``A_j = c_j / n_units`` (sums to exactly 1, spec I-2).  The
counts are a deterministic function of ``(seed, j)`` alone.  Candidates come in
fixed blocks of :data:`BLOCK` (a constant, independent of the pool size N):
block ``b = j // BLOCK`` is drawn by numpy's PCG64 seeded with the
``SeedSequence`` of entropy ``seed`` and spawn key ``(b,)``, and ``j`` is its
row ``j % BLOCK``.  Any entry can be regenerated on demand (at the cost of its
block) and the pool is never stored: memory is ``O(BLOCK·max(k, n_units))``,
never ``O(N·k)`` (spec T-10).

**The law is exact.**  When ``n_units <= CATEGORICAL_RATIO·k`` (the default
``n_units = k``) a row is ``n_units`` independent uniform draws from ``[0, k)``
(numpy's bounded integers: rejection, no modulo bias) counted per item, which is
``Multinomial(n_units, uniform)`` by definition; one vectorised call draws a
whole block, about ten times faster than one multinomial per candidate.  Above
that ratio the block is drawn by numpy's multinomial (``k`` binomials a row, so
the cost does not grow with ``n_units``).

**The seed is public.**  It is one of the mechanism's public parameters, with
``k``, ``n_units`` and ``N`` (spec §1.5: the adversary knows the pool).  The
pool is 0-DP because it reads none of these from the data: ``k`` is the public
domain size (never the number of distinct values seen, I-3/T-9) and
``n_units`` a public constant (default ``k``, I-1).  A non-cryptographic
generator is therefore right here: the pool's privacy does not rest on its
randomness being secret, and a replay must regenerate it bit for bit.  A
deployment that wants an unpredictable pool draws the seed with
:func:`new_public_seed` (the secure generator) and publishes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from transforms.mechanisms.noise import Randomness, secure_randomness

MAX_SEED = (1 << 128) - 1
BLOCK = 16
"""Candidates drawn together from one generator (part of how a candidate derives from ``(seed, j)``)."""
CATEGORICAL_RATIO = 8
"""Up to ``n_units = 8·k`` a block is drawn as categorical draws and counted; above, by multinomial."""


def new_public_seed(rng: Randomness | None = None) -> int:
    """A fresh 128-bit pool seed from the secure generator (to be published with the other parameters)."""
    return (rng or secure_randomness()).randbelow(MAX_SEED + 1)


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class SynopsisPool:
    """``size`` candidate distributions over the public domain ``[0, k)``, each regenerated from ``(seed, j)``.

    ``n_units`` is the multinomial trial count (default ``k``, as in the authors' code).
    """

    k: int
    size: int
    seed: int
    n_units: int | None = None

    def __post_init__(self):
        _positive_int(self.k, "k (domain size)")
        _positive_int(self.size, "size (pool size N)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, Integral) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be an int in [0, 2**128), got {self.seed!r}")
        object.__setattr__(self, "n_units", self.k if self.n_units is None else _positive_int(self.n_units, "n_units"))

    def block(self, b: int) -> np.ndarray:
        """The counts of candidates ``b·BLOCK ..`` (int64, ``BLOCK x k`` rows summing to ``n_units``), drawn from
        ``(seed, b)`` alone; rows past the pool's end are drawn too (so a row never depends on N), callers drop them."""
        generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(int(b),))))
        k, n = self.k, self.n_units
        if n > CATEGORICAL_RATIO * k:
            return generator.multinomial(n, np.full(k, 1.0 / k), size=BLOCK).astype(np.int64)
        draws = generator.integers(0, k, (BLOCK, n), dtype=np.uint16 if k <= 1 << 16 else np.int64)
        keys = draws + (np.arange(BLOCK, dtype=np.int64) * k)[:, None]
        return np.bincount(keys.ravel(), minlength=BLOCK * k).reshape(BLOCK, k)

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first index, counts)`` of every block in order, the last one cut at the pool's end (memory: one block)."""
        for start in range(0, self.size, BLOCK):
            yield start, self.block(start // BLOCK)[:self.size - start]

    def counts(self, j: int) -> np.ndarray:
        """Candidate ``j``'s counts (int64, length ``k``, summing to ``n_units``): a function of ``(seed, j)`` only."""
        if isinstance(j, bool) or not isinstance(j, Integral) or not 0 <= j < self.size:
            raise IndexError(f"pool index must be an int in [0, {self.size}), got {j!r}")
        return self.block(int(j) // BLOCK)[int(j) % BLOCK]

    def counts_of(self, indices) -> np.ndarray:
        """Counts of several candidates, one row each, each block drawn once (memory ``len(indices)·k``)."""
        indices = np.asarray(indices, dtype=np.int64).ravel()
        if indices.size and (indices.min() < 0 or indices.max() >= self.size):
            raise IndexError(f"pool indices must be in [0, {self.size})")
        rows = np.empty((indices.size, self.k), np.int64)
        for b in np.unique(indices // BLOCK):
            chosen = indices // BLOCK == b
            rows[chosen] = self.block(int(b))[indices[chosen] % BLOCK]
        return rows

    def distribution(self, j: int) -> np.ndarray:
        """Candidate ``j`` as a float PDF (``counts / n_units``), for releases and display."""
        return self.counts(j) / self.n_units
