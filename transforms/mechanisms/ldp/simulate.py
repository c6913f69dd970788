"""Simulated users: the oracles' randomizers run for a batch of reporters, exactly, from the project's generator.

Two ways to get what a batch of reporters would send, equal in distribution
(spec §3.5; a test checks it):

* :func:`perturb_values`, user by user: each reporter's value in, each report
  out (GRR: the reported value from one 64-bit draw; OUE: the d bits, each an
  exact coin from :func:`~transforms.mechanisms.noise.coins.coins_below`, about
  2 bytes of keystream per bit).
* :func:`aggregate_counts`, the aggregate shortcut: the true counts in, the
  counts the reports would sum to out, without any user's report, by exact
  binomials (:mod:`transforms.mechanisms.noise.binomial`, expected cost
  a few vectorised rounds per call, not O(n')).  OUE draws
  ``C'[k] = Binomial(m[k], 1/2) + Binomial(n' - m[k], Q/2**32)``.  GRR draws,
  per true value k, the kept reports ``Binomial(m[k], P/2**64)`` and spreads
  the rest uniformly over the d - 1 other values
  (:func:`~transforms.mechanisms.noise.multinomial_equal`): a reporter who does
  not keep reports ``(U - P) // Q`` for ``U`` uniform on ``[P, 2**64)``, each
  other value with ``Q`` of the ``(d-1)·Q`` outcomes.  Batches below
  ``GRR_PER_REPORTER_MAX`` reporters (GRR) or ``OUE_PER_COIN_MAX`` coins (OUE)
  are drawn report by report, which is cheaper there.

For a synthetic stream whose values sit on a fresh uniformly random set of
users at every slot, a data-independent sample of users holds
multivariate-hypergeometric true counts (spec §3.5):
:func:`hypergeometric_counts` draws them from the slot's counts, so no user's
value need exist (``LocalMechanism.step_exchangeable``).

Every draw is exact: it compares uniform integers from a :class:`Randomness`
with the oracle's integer thresholds, or (the binomials) decides with a
certified margin, never on an unchecked float.  The generator defaults
to the secure one; a seeded one only when a test or replay passes it.
"""

from __future__ import annotations

import numpy as np

from transforms.mechanisms.ldp.choose import uniform_mask
from transforms.mechanisms.ldp.oracles import FrequencyOracle, oracle_for
from transforms.mechanisms.noise import Randomness, binomial, multinomial_equal, secure_randomness
from transforms.mechanisms.noise.coins import coins_below

CHUNK_COINS = 1 << 20
"""Largest number of coins (OUE bits) :func:`perturb_values` draws in one piece: bounds the memory of large batches."""
GRR_PER_REPORTER_MAX = 1 << 15
"""GRR batches of fewer reporters are drawn report by report (one 64-bit word each, as :func:`perturb_values`):
cheaper than the binomials' fixed cost below about 30,000 reporters (measured), and the same law."""
OUE_PER_COIN_MAX = 1 << 19
"""OUE batches of fewer coins (reporters times d) are drawn coin by coin, as :func:`perturb_values`: cheaper than
the binomials' fixed cost below about 500,000 coins (measured), and the same law."""


def _uint64(count: int, rng: Randomness) -> np.ndarray:
    """``count`` uniform 64-bit integers (two uniform 32-bit words each)."""
    return rng.uint32(2 * count).view(np.uint64)


def _check_values(values, d: int) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"values must be a 1-D integer array, got shape {array.shape} and dtype {array.dtype}")
    if array.size and (array.min() < 0 or array.max() >= d):
        raise ValueError(f"values must lie in [0, {d})")
    return array.astype(np.int64, copy=False)


def perturb_values(oracle: FrequencyOracle, values, rng: Randomness | None = None) -> np.ndarray:
    """The reports of reporters holding ``values`` (ints in ``[0, d)``), one row or entry per reporter.

    GRR returns the reported values (int64, shape ``(n,)``); OUE the reported bits (bool, shape ``(n, d)``).
    """
    rng = rng or secure_randomness()
    values = _check_values(values, oracle.d)
    if oracle.kind == "grr":
        return _grr(oracle, values, rng)
    rows = max(1, CHUNK_COINS // oracle.d)
    return np.concatenate([_oue(oracle, values[start:start + rows], rng) for start in range(0, values.size, rows)]
                          or [np.zeros((0, oracle.d), dtype=bool)])


def _oue(oracle: FrequencyOracle, values: np.ndarray, rng: Randomness) -> np.ndarray:
    """OUE bits: coin ``(i, k)`` is 1 iff a uniform 32-bit draw is below 2**31 (k = value) or ``Q`` (else)."""
    index = np.arange(values.size)
    high = np.full((values.size, oracle.d), oracle.other >> 16, dtype=np.uint16)
    high[index, values] = 1 << 15  # 2**31 = 0x8000 · 2**16 + 0

    def low_thresholds_of(ties: np.ndarray) -> np.ndarray:
        own = values[ties // oracle.d] == ties % oracle.d
        return np.where(own, 0, oracle.other & 0xFFFF).astype(np.uint32)

    return coins_below(high, low_thresholds_of, rng)


def _grr(oracle: FrequencyOracle, values: np.ndarray, rng: Randomness) -> np.ndarray:
    """GRR reports: a 64-bit draw ``U`` keeps the value if ``U < P``, else reports other ``(U-P)//Q``."""
    draws = _uint64(values.size, rng)
    keep = np.uint64(oracle.keep)
    moved = draws >= keep
    other = ((draws[moved] - keep) // np.uint64(oracle.other)).astype(np.int64)  # uniform on [0, d-1)
    reports = values.copy()
    reports[moved] = other + (other >= values[moved])  # skip the true value
    return reports


def report_counts(oracle: FrequencyOracle, reports: np.ndarray) -> np.ndarray:
    """The counts ``C'`` the collector sums from reports of :func:`perturb_values` (int64, length d)."""
    if oracle.kind == "grr":
        return np.bincount(reports, minlength=oracle.d).astype(np.int64)
    return reports.sum(axis=0, dtype=np.int64)


def aggregate_counts(oracle: FrequencyOracle, true_counts, rng: Randomness | None = None) -> np.ndarray:
    """The report counts ``C'`` of a batch whose true counts are ``true_counts`` (spec §3.5), exactly."""
    rng = rng or secure_randomness()
    m = np.asarray(true_counts)
    if m.shape != (oracle.d,) or m.dtype.kind not in "iu" or (m.size and m.min() < 0):
        raise ValueError(f"true_counts must be {oracle.d} non-negative integers, got {m!r}")
    m = m.astype(np.int64)
    d = oracle.d
    if oracle.kind == "grr":
        if m.sum() < GRR_PER_REPORTER_MAX:
            return np.bincount(_grr(oracle, np.repeat(np.arange(d), m), rng), minlength=d).astype(np.int64)
        kept = binomial(m, oracle.keep, oracle.denominator, rng)
        moved = multinomial_equal(m - kept, d - 1, rng)  # row k: the other values of reporters holding k
        others = np.arange(d - 1)
        reported = others + (others >= np.arange(d)[:, None])  # other index o of value k is value o + (o >= k)
        spread = np.zeros((d, d), np.int64)
        np.put_along_axis(spread, reported, moved, axis=1)
        return kept + spread.sum(axis=0)
    if m.sum() * d < OUE_PER_COIN_MAX:
        return report_counts(oracle, perturb_values(oracle, np.repeat(np.arange(d), m), rng))
    successes = binomial(np.concatenate([m, m.sum() - m]), np.repeat([1, oracle.other], d),
                         np.repeat([2, oracle.denominator], d), rng)
    return successes[:d] + successes[d:]


def hypergeometric_counts(remaining, k: int, rng: Randomness | None = None) -> np.ndarray:
    """The true counts of ``k`` users drawn without replacement from holders whose counts per value are
    ``remaining`` (multivariate hypergeometric), exactly: ``k`` uniform positions among the holders laid out
    value by value (:func:`~transforms.mechanisms.ldp.choose.uniform_mask`), counted per value."""
    rng = rng or secure_randomness()
    remaining = np.asarray(remaining)
    if remaining.ndim != 1 or remaining.dtype.kind not in "iu" or (remaining.size and remaining.min() < 0):
        raise ValueError(f"remaining must be non-negative integer counts, got {remaining!r}")
    ends = np.cumsum(remaining.astype(np.int64))
    total = int(ends[-1]) if ends.size else 0
    if not 0 <= k <= total:
        raise ValueError(f"cannot draw {k} of {total} holders")
    chosen = np.concatenate([[0], np.cumsum(uniform_mask(total, k, rng), dtype=np.int64)])
    return chosen[ends] - chosen[np.concatenate([[0], ends[:-1]])]


def locsan(value: int, epsilon_units: int, d: int, rng: Randomness | None = None,
           kind: str | None = None) -> tuple[FrequencyOracle, np.ndarray]:
    """LocSan (Algorithm 1): one user's report of ``value`` at budget ``epsilon_units`` over ``d`` values.

    The oracle follows the Ada rule unless ``kind`` forces one; it is returned with the report because the
    collector must estimate with the oracle the user used (spec trap T11).
    """
    oracle = oracle_for(epsilon_units, d, kind)
    return oracle, perturb_values(oracle, np.array([value], dtype=np.int64), rng)[0]
