"""The 0-DP synopsis pool of DPI (spec §2.2, Algorithm 2 as specified there), generated lazily from a public seed.

Candidate ``j`` is the count vector ``c_j ~ Multinomial(n_units, uniform over k)``;
its distribution is ``A_j = c_j / n_units`` (sums to exactly 1, spec I-2).  The
counts are a deterministic function of ``(seed, j)`` alone: numpy's PCG64
seeded with the ``SeedSequence`` of entropy ``seed`` and spawn key ``(j,)``, so
any entry can be regenerated on demand and the pool is never stored (memory is
``O(k)`` per entry in use, never ``O(N·k)``; spec T-10).

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

from dataclasses import dataclass
from numbers import Integral

import numpy as np

from transforms.mechanisms.noise import Randomness, secure_randomness

MAX_SEED = (1 << 128) - 1


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

    def counts(self, j: int) -> np.ndarray:
        """Candidate ``j``'s counts (int64, length ``k``, summing to ``n_units``): a function of ``(seed, j)`` only."""
        if isinstance(j, bool) or not isinstance(j, Integral) or not 0 <= j < self.size:
            raise IndexError(f"pool index must be an int in [0, {self.size}), got {j!r}")
        generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(int(j),))))
        return generator.multinomial(self.n_units, np.full(self.k, 1.0 / self.k)).astype(np.int64)

    def counts_of(self, indices) -> np.ndarray:
        """Counts of several candidates, one row each (memory ``len(indices)·k``)."""
        rows = [self.counts(int(j)) for j in np.asarray(indices, dtype=np.int64).ravel()]
        return np.stack(rows) if rows else np.zeros((0, self.k), dtype=np.int64)

    def distribution(self, j: int) -> np.ndarray:
        """Candidate ``j`` as a float PDF (``counts / n_units``), for releases and display."""
        return self.counts(j) / self.n_units
