"""Exact Binomial and equal-probability Multinomial draws in sublinear time, from a :class:`Randomness`.

:func:`binomial` draws, per cell, exactly what counting ``trials`` independent
coins ``randbelow(b) < a`` would give, for any rational ``p = a/b`` with
``1 <= b <= 2**64``: cells of fewer than ``SMALL_TRIALS`` trials draw their
coins (one uint32 each), larger ones cost one or two vectorised rejection
rounds (``log2(trials/SMALL_TRIALS)`` rounds when the mode is within
``DIRECT_MIN`` of 0 or ``trials``), never a coin per trial;
:func:`multinomial_equal` splits trials uniformly over ``cells`` outcomes by
recursive halving into binomials.

Exactness argument.  *Rejection around the mode* (when ``c = floor((n+1)p)``
and ``y = n - c`` are both at least ``DIRECT_MIN``): ``J = X - c`` has the law
``f(j) = P(c+j)/P(c)`` on ``[-c, y]``.  A proposal is a sign, a geometric
``i`` (``P(i) = 2^-(i+1)``, trailing zero bits) and ``r`` uniform below
``w = 2^s ~ 0.69 sd``, ``|j| = i·w + r``; it is accepted with probability
``A(j) = f(j)·2^i·e^-Phi``, halved at ``j = 0`` (both signs propose it).
Proposal times acceptance is ``f(j)/(4w·e^Phi)``, proportional to ``f``, so an
accepted ``j`` has law ``f`` (each cell keeps its first accepted proposal of a
round, in order: sequential rejection).  ``A <= 1`` because ``c`` is a mode:
each ratio ``P(c+k)/P(c+k-1)`` is at most ``exp(-(k-1)/y - (k-1)/(c+k))``, so
``ln f(j) <= -j(j-1)/2·(1/y + 1/(c+j))`` (``1/c + 1/(y+k)`` for ``j = -k``),
and ``i·ln2 <= |j|·ln2/w``; the sup of the sum is bounded in closed form
(:func:`_envelope`: the slope split between the two curvatures, and
``sup x·z/2 - x²/(2(x0+x)) <= x0/2·(z/(2-z))²``), giving ``Phi``.
*The test ``U < A(j)`` is certified*: ``U``'s first 53 bits ``v`` are drawn;
``ln f(j)`` is bracketed with ``+ - × /`` only (IEEE, correctly rounded) from
Stirling's formula, its remainder ``μ(x)`` between ``1/(12x) - 1/(360x³)``
and that plus ``1/(1260x⁵)`` (for real ``x`` the series' remainder has the
sign of, and is smaller than, the first omitted term):
``-c·Gs(-j/c) - y·Gs(j/y) + (Lg(-j/c) + Lg(j/y))/2 + j·ln(1+delta) - Δμ``,
``Gs(z) = Σ z^k/(k(k-1))``, ``Lg(z) = Σ z^k/k`` truncated for ``|z| <= 1/2``
with geometric tail bounds, ``delta = (np - c)/(c(1-p))`` exact up to one
float rounding; a margin of ``2^-40`` of the terms' magnitude covers the
rounding (under ``2^-46`` of it); ``e^-γ`` is bracketed by Taylor bounds
squared 10 times with a ``2^-36`` margin over ``2^-39`` of rounding growth.
Only when ``[v, v+1)·2^-53`` straddles the bracket (about 1e-9 of proposals),
or ``|j| > min(c, y)/2`` (under 2^-22), does :func:`_accept_exactly` decide
with exact rationals (``math.perm``) and certified ``decimal`` brackets of
``e^Phi``, drawing 64 more bits of ``U`` until decided (probability 1).
*Explicit coins*: ``U < p`` compares ``U``'s first 32 bits with
``floor(2^32 p)``; a tie (2^-32) is decided by ``randbelow(b) < 2^32 a mod b``.
*Bit-level splits* (small mode side): a coin ``U < p`` compares ``U``'s bits
with ``p``'s (``r -> 2r mod b``); of the ``T`` trials still tied, the
Binomial(T, 1/2) whose next bit differs (the rejection above) succeed if
``p``'s bit is 1 and fail if 0; when ``p``'s remaining bits are 0 the tied
trials fail, and once fewer than ``SMALL_TRIALS`` are tied each succeeds with
the rest of ``p``, ``r/b``: explicit coins.  Floats only choose parameters
(``w``, ``Phi``, which any value keeps valid) and decide only where a
certified margin allows, so the law of every draw is exactly that of the
explicit coins.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from numbers import Integral

import numpy as np

from transforms.mechanisms.certified import bracket
from transforms.mechanisms.noise.generators import Randomness, secure_randomness
from transforms.mechanisms.noise.samplers import RandomWords

SMALL_TRIALS = 1 << 10
"""Cells of fewer trials draw explicit coins (one uint32 each); larger ones reject or split."""
DIRECT_MIN = SMALL_TRIALS // 2
"""Rejection around the mode ``c`` when ``min(c, n - c)`` is at least this; else bit-level splits."""
CANDIDATES = 10
"""Proposals per cell per rejection round when at most ``_FEW_CELLS`` cells are pending (about 55% are
accepted: 3e-4 of cells need another round); more cells take ``_CANDIDATES_MANY`` (9% go on), as the
arithmetic then costs more than a round's fixed cost."""
_FEW_CELLS = 256
_CANDIDATES_MANY = 3
MAX_TRIALS = (1 << 63) - 1
_TWO_64 = 1 << 64
_U64_ONE = np.uint64(1)
_ALL_ONES = np.uint64(_TWO_64 - 1)
_LN2 = math.log(2.0)  # float64 within one rounding of ln 2 (the margin covers it)
_LN2_UP = float(np.nextafter(_LN2, 1.0))  # >= ln 2
_TERMS = 12  # series terms of Gs and Lg
_GAMMA_MARGIN = 2.0**-40
_EXP_SQUARINGS = 10
_EXP_MARGIN = 2.0**-36
_EXP_CAP = 40.0
_HALF_ULP = 2.0**-53
_COIN_CHUNK = 1 << 20  # explicit coins drawn at once (4 MB)
_CELL_BLOCK = 1 << 14  # cells drawn at once (their proposals take a few tens of MB)
_PHI_GRID = 2.0**20  # Phi is rounded up to a multiple of 2^-20: a short exact decimal for the fallback
_LN2_BELOW = Fraction("0.6931471805599453094172321214581765680755")  # ln 2 = 0.6931...680755001344
_LN2_ABOVE = _LN2_BELOW + Fraction(1, 10**40)


def binomial(trials, numerators, denominators, rng: Randomness | None = None) -> np.ndarray:
    """Per cell, an exact Binomial(``trials``, ``numerators/denominators``) draw (int64, broadcast shape).

    ``trials`` are integers in ``[0, 2**63)``; ``denominators`` integers in ``[1, 2**64]`` and
    ``numerators`` in ``[0, denominator]`` (python ints beyond int64 are accepted, floats are refused:
    the probability must be an exact rational).  The law is exactly that of counting ``trials``
    independent coins ``randbelow(b) < a`` (see the module doc).  A call costs one or two vectorised
    rejection rounds, about ``log2(trials)`` when the mode is within ``DIRECT_MIN`` of 0 or ``trials``;
    never a coin per trial.  ``rng`` defaults to the secure generator.
    """
    rng = rng or secure_randomness()
    n = _integers(trials, "trials", 0, MAX_TRIALS).astype(np.int64)
    a = _integers(numerators, "numerators", 0, _TWO_64)
    whole = np.asarray(a == _TWO_64)  # a = b = 2**64 (past uint64): p = 1
    a = _uint64(np.where(whole, 0, a))
    b_minus_1 = _uint64(_integers(denominators, "denominators", 1, _TWO_64) - 1)
    try:
        n, a, b_minus_1, whole = np.broadcast_arrays(n, a, b_minus_1, whole)
    except ValueError:
        raise ValueError(f"trials, numerators and denominators must broadcast, got shapes "
                         f"{n.shape}, {a.shape} and {b_minus_1.shape}") from None
    shape = n.shape
    n, a, b_minus_1, whole = n.ravel(), a.ravel(), b_minus_1.ravel(), whole.ravel()
    above = a > b_minus_1  # a >= b
    if np.any((above & (a - b_minus_1 > _U64_ONE)) | (whole & (b_minus_1 != _ALL_ONES))):
        raise ValueError("numerators must not exceed their denominators (probabilities in [0, 1])")
    at_least_b = above | whole
    out = np.where(at_least_b, n, 0)  # p = 1: every trial succeeds; p = 0: none
    random = np.flatnonzero((a != 0) & ~at_least_b & (n > 0))
    words = RandomWords(rng, 4096)
    for block in range(0, random.size, _CELL_BLOCK):  # bounds the memory of the proposals
        cells = random[block:block + _CELL_BLOCK]
        out[cells] = _draw(n[cells], a[cells], b_minus_1[cells], words, rng)
    return out.reshape(shape)


def multinomial_equal(trials, cells: int, rng: Randomness | None = None) -> np.ndarray:
    """Exact Multinomial(``trials``; ``cells`` equally likely outcomes), one row per entry of ``trials``.

    Returns int64 of shape ``shape(trials) + (cells,)``.  Recursive halving: a group of ``s`` outcomes
    holding ``N`` trials gives ``Binomial(N, floor(s/2)/s)`` of them to its first ``floor(s/2)``
    outcomes (the conditional law of the multinomial), every group of a level in one :func:`binomial`
    call; ``ceil(log2 cells)`` levels.  ``rng`` defaults to the secure generator.
    """
    rng = rng or secure_randomness()
    n = _integers(trials, "trials", 0, MAX_TRIALS).astype(np.int64)
    if isinstance(cells, bool) or not isinstance(cells, Integral) or cells < 1:
        raise ValueError(f"cells must be a positive int, got {cells!r}")
    cells = int(cells)
    counts = n.reshape(-1, 1)
    sizes = [cells]
    while max(sizes) > 1:
        shares = [(size // 2 // math.gcd(size // 2, size), size // math.gcd(size // 2, size)) for size in sizes]
        halves, wholes = (np.array(column, dtype=np.int64) for column in zip(*shares))  # in lowest terms
        left = binomial(counts, halves, wholes, rng)
        columns, new_sizes = [], []
        for g, size in enumerate(sizes):
            if size == 1:  # a share of 0/1: the group keeps its trials
                columns.append(counts[:, g])
                new_sizes.append(1)
            else:
                columns += [left[:, g], counts[:, g] - left[:, g]]
                new_sizes += [size // 2, size - size // 2]
        counts, sizes = np.stack(columns, axis=1), new_sizes
    return counts.reshape(n.shape + (cells,))


# --------------------------------------------------------------------------
# Which path: explicit coins, rejection around the mode, or bit-level splits
# --------------------------------------------------------------------------


def _draw(n: np.ndarray, a: np.ndarray, b_minus_1: np.ndarray, words: RandomWords, rng: Randomness) -> np.ndarray:
    """Binomial(n, a/b) per cell, ``0 < a < b``, ``n > 0``: explicit coins below ``SMALL_TRIALS`` trials,
    rejection when both sides of the mode hold at least ``DIRECT_MIN`` values, else bit-level splits."""
    out = np.empty(n.size, np.int64)
    small = n < SMALL_TRIALS
    if small.any():
        out[small] = _explicit(n[small], a[small], b_minus_1[small], rng)
    if small.all():
        return out
    large = np.flatnonzero(~small)
    n, a, b_minus_1 = n[large], a[large], b_minus_1[large]
    c, delta = _modes(n, a, b_minus_1)
    direct = np.minimum(c, n - c) >= DIRECT_MIN
    if direct.any():
        out[large[direct]] = _rejection(n[direct], c[direct], delta[direct], a[direct], b_minus_1[direct], words,
                                        rng)
    if not direct.all():
        split = ~direct
        out[large[split]] = _binomial_rational(n[split], a[split], b_minus_1[split], words, rng)
    return out


def _explicit(n: np.ndarray, a: np.ndarray, b_minus_1: np.ndarray, rng: Randomness) -> np.ndarray:
    """Binomial(n, a/b) per cell as ``n > 0`` explicit coins ``U < a/b``, at most ``_COIN_CHUNK`` at a time.

    A coin compares ``U``'s first 32 bits (one uniform uint32) with ``floor(2^32 a/b)``; on a tie
    (probability 2^-32) the rest of ``U`` is below the rest of ``p``, ``(2^32 a mod b)/b``, with exactly
    the probability of ``randbelow(b) < 2^32 a mod b``.
    """
    scaled = a.astype(object) * (1 << 32)
    b = b_minus_1.astype(object) + 1
    high, rest = (scaled // b).astype(np.uint32), scaled % b
    out = np.zeros(n.size, np.int64)
    ends = np.cumsum(n)
    first = 0
    while first < n.size:
        last = max(first + 1, int(np.searchsorted(ends, ends[first] - n[first] + _COIN_CHUNK, side="right")))
        counts = n[first:last]
        starts = np.cumsum(counts) - counts
        draws = rng.uint32(int(counts.sum()))
        thresholds = np.repeat(high[first:last], counts)
        successes = draws < thresholds
        for coin in np.flatnonzero(draws == thresholds).tolist():
            cell = first + int(np.searchsorted(starts, coin, side="right")) - 1
            successes[coin] = bool(rest[cell]) and rng.randbelow(int(b[cell])) < rest[cell]
        out[first:last] = np.add.reduceat(successes.view(np.uint8), starts, dtype=np.int64)
        first = last
    return out


def _modes(n: np.ndarray, a: np.ndarray, b_minus_1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cell the mode ``c = floor((n+1)p)`` (exact) and ``delta = (np - c)/(c(1-p))`` as a float.

    ``delta`` makes ``ln(p(n-c)/((1-p)c)) = ln(1 + delta)``; ``|delta| <= 1/(c(1-p)) < 1/250`` on the
    rejection path (``c, n-c >= DIRECT_MIN`` make ``c(1-p) > npq - 1 > 254``).  p = 1/2 is vectorised;
    other p use python ints (``(n+1)a`` passes 64 bits).
    """
    if np.all((a == _U64_ONE) & (b_minus_1 == _U64_ONE)):
        c = (n >> 1) + (n & 1)  # floor((n+1)/2) without overflow
        with np.errstate(divide="ignore"):
            return c, np.where(n & 1, -1.0 / np.maximum(c, 1), 0.0)
    trials, numerator = n.astype(object), a.astype(object)  # python ints, element by element in C
    b = b_minus_1.astype(object) + 1
    mode = (trials + 1) * numerator // b
    excess = trials * numerator - mode * b
    positive = mode > 0
    delta = np.zeros(n.size)
    delta[positive] = (excess[positive] / (mode[positive] * (b[positive] - numerator[positive]))).astype(np.float64)
    return mode.astype(np.int64), delta


# --------------------------------------------------------------------------
# Bit-level splits (a side of the mode is small)
# --------------------------------------------------------------------------


def _binomial_rational(n: np.ndarray, a: np.ndarray, b_minus_1: np.ndarray, words: RandomWords,
                       rng: Randomness) -> np.ndarray:
    """Binomial(n, a/b) per cell, ``0 < a < b <= 2**64`` (uint64 ``a`` and ``b - 1``), ``n > 0``.

    Once fewer than ``SMALL_TRIALS`` trials of a cell are tied, each of them succeeds independently with the
    rest of ``p``'s expansion, ``rem/b``: explicit coins finish the cell.
    """
    successes = np.zeros(n.size, np.int64)
    tied = n.copy()
    rem = a.copy()  # p's expansion so far: p = 0.(bits drawn) + rem/b · 2^-level
    live = np.arange(n.size)
    while live.size:
        few = tied[live] < SMALL_TRIALS
        if few.any():
            done = live[few]
            successes[done] += _explicit(tied[done], rem[done], b_minus_1[done], rng)
            live = live[~few]
            if not live.size:
                break
        r, bm1 = rem[live], b_minus_1[live]
        upper = bm1 - r  # b - r - 1 (no overflow: r < b)
        bit = r > upper  # 2r >= b
        rem[live] = np.where(bit, r - upper - _U64_ONE, r + r)  # 2r - b, or 2r (< b)
        t, one = tied[live], np.ones(live.size, np.uint64)  # Binomial(t, 1/2): a = 1, b - 1 = 1
        differ = _rejection(t, *_modes(t, one, one), one, one, words, rng)
        successes[live] += np.where(bit, differ, 0)
        tied[live] -= differ
        live = live[(tied[live] > 0) & (rem[live] != 0)]  # rem = 0: p's later bits are 0, the tied fail
    return successes


# --------------------------------------------------------------------------
# Rejection around the mode
# --------------------------------------------------------------------------


def _rejection(n, c, delta, a, b_minus_1, words: RandomWords, rng: Randomness) -> np.ndarray:
    """Binomial(n, a/b) per cell as ``c + J``, ``J`` from proposals accepted with probability ``A(j)``."""
    cells = _Cells.of(n, c, delta, a, b_minus_1)
    result = np.zeros(n.size, np.int64)
    pending = np.arange(n.size)
    while pending.size:
        count = CANDIDATES if pending.size <= _FEW_CELLS else _CANDIDATES_MANY
        j, accepted = _propose_and_test(np.repeat(pending, count), cells, words, rng)
        accepted = accepted.reshape(pending.size, count)
        found = accepted.any(axis=1)
        first = accepted.argmax(axis=1)  # the first accepted proposal of the cell, in order
        result[pending[found]] = j.reshape(pending.size, count)[found, first[found]]
        pending = pending[~found]
    return c + result


class _Cells:
    """Per-cell constants of the rejection sampler (arrays indexed by cell)."""

    __slots__ = ("c", "y", "shift", "w", "phi", "lnd_lo", "lnd_hi", "abs_delta", "a", "b_minus_1")

    def __init__(self, *values):
        for name, value in zip(self.__slots__, values):
            setattr(self, name, value)

    @classmethod
    def of(cls, n, c, delta, a, b_minus_1) -> "_Cells":
        """The constants of cells of ``n`` trials with mode ``c`` and ``delta`` (:func:`_modes`), p = a/b."""
        y = n - c
        cf, yf = c.astype(np.float64), y.astype(np.float64)
        shift = np.clip(np.round(np.log2(0.69 * np.sqrt(cf * yf / (cf + yf)))), 0, 31).astype(np.uint64)
        w = np.left_shift(np.int64(1), shift.astype(np.int64))
        return cls(c, y, shift, w, _envelope(cf, yf, w), *_log1p_bracket(delta), np.abs(delta), a, b_minus_1)


def _envelope(cf: np.ndarray, yf: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``Phi >= sup_j (floor(|j|/w) ln 2 + ln f(j))``, rounded up to the ``2^-20`` grid (module doc)."""
    ell = _LN2_UP / w
    inv_c, inv_y = 1.0 / cf, 1.0 / yf
    total = inv_c + inv_y
    slope = ell + total / 2.0
    phi = np.maximum(_side(slope, inv_y, inv_c, cf, total), _side(slope, inv_c, inv_y, yf, total))
    return np.ceil(phi * (1.0 + _GAMMA_MARGIN) * _PHI_GRID) / _PHI_GRID


def _side(slope, s, t, x, total):
    """``sup_j (j·slope - s j²/2 - j²/(2(x+j)))`` bounded by splitting the slope in proportion to s and t = 1/x."""
    linear, z = slope * s / total, 2.0 * slope * t / total  # z < 1: w >= 8 keeps slope <= 0.09
    return linear * linear / (2.0 * s) + 0.5 * x * (z / (2.0 - z)) ** 2


def _log1p_bracket(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ln(1 + delta)`` bracketed (``|delta| < 1/250``): ``-Lg(-delta)`` and its tail bound."""
    value, width = _lg(-delta)
    width = width + _GAMMA_MARGIN * np.abs(delta)  # delta itself is a float within 3 ulps
    return -value - width, -value + width


def _propose_and_test(cell: np.ndarray, cells: _Cells, words: RandomWords, rng: Randomness):
    """One proposal per entry of ``cell`` (see the module doc) and whether ``U < A(j)`` accepts it."""
    size = cell.size
    c, y, shift, w = cells.c[cell], cells.y[cell], cells.shift[cell], cells.w[cell]
    first, second = words.take(size), words.take(size)
    v = first >> np.uint64(11)  # U's first 53 bits
    negative = (first & _U64_ONE).astype(bool)
    r = ((second >> np.uint64(32)) >> (np.uint64(32) - shift)).astype(np.int64)  # top bits: uniform below w
    low = second & np.uint64(0xFFFFFFFF)
    lowest = low & (~low + _U64_ONE)
    i = np.frexp(lowest.astype(np.float64))[1].astype(np.int64) - 1  # trailing zeros: P(i) = 2^-(i+1)
    limit = np.where(negative, c, y)  # j in [-c, y]
    out_of_range = np.zeros(size, bool)
    for k in np.flatnonzero(low == 0).tolist():  # 32 zero bits (2^-32): the geometric goes on
        geometric = 32 + _trailing_zeros(rng)
        out_of_range[k] = geometric * int(w[k]) + int(r[k]) > int(limit[k])
        i[k] = 0 if out_of_range[k] else geometric  # in range: geometric <= limit/w < 2^63
    magnitude = i * w + r
    inside = ~out_of_range & (magnitude <= limit)
    central = inside & (magnitude <= np.minimum(c, y) - magnitude)  # |j| <= min(c, y)/2: the float bracket
    j = np.where(negative, -magnitude, magnitude)
    accepted = np.zeros(size, bool)
    idx = np.flatnonzero(central)
    undecided = idx
    if idx.size:
        lo, hi = _acceptance_bracket(cell[idx], c[idx], y[idx], j[idx], i[idx], cells)
        vf = v[idx].astype(np.float64)  # exact: v < 2^53
        accepted[idx] = (vf + 1.0) * _HALF_ULP <= lo
        undecided = idx[(vf * _HALF_ULP < hi) & ~accepted[idx]]
    far = np.flatnonzero(inside & ~central)  # 2^-22 or less per proposal
    for k in np.concatenate((undecided, far)).tolist():
        g = cell[k]
        accepted[k] = _accept_exactly(int(c[k]), int(y[k]), int(j[k]), int(i[k]), float(cells.phi[g]), int(v[k]),
                                      int(cells.a[g]), int(cells.b_minus_1[g]) + 1, rng)
    return j, accepted


def _trailing_zeros(rng: Randomness) -> int:
    """Zero bits before the first 1 bit of a uniform bit stream (64-bit words from ``rng.randbelow``)."""
    zeros = 0
    while True:
        word = rng.randbelow(_TWO_64)
        if word:
            return zeros + (word & -word).bit_length() - 1
        zeros += 64


# --------------------------------------------------------------------------
# The acceptance test, certified
# --------------------------------------------------------------------------


def _acceptance_bracket(cell, c, y, j, i, cells: _Cells) -> tuple[np.ndarray, np.ndarray]:
    """Floats ``lo <= A(j) <= hi``, ``A(j) = f(j)·2^i·e^-Phi`` (halved at j = 0), for ``|j| <= min(c, y)/2``.

    ``ln f(j) = -c·Gs(-j/c) - y·Gs(j/y) + Lg(-j/c)/2 + Lg(j/y)/2 + j·ln(1+delta) - Δμ`` (Stirling's formula
    with its remainder ``μ`` bounded by :func:`_mu`), ``Gs(z) = Σ_k>=2 z^k/(k(k-1))`` and
    ``Lg(z) = Σ_k>=1 z^k/k`` truncated with tail bounds.
    """
    cf, yf, jf = c.astype(np.float64), y.astype(np.float64), j.astype(np.float64)
    phi = cells.phi[cell]
    z1, z2 = -jf / cf, jf / yf
    (gs1, gs2), (gs1_width, gs2_width) = _gs(np.stack((z1, z2)))
    (lg1, lg2), (lg1_width, lg2_width) = _lg(np.stack((z1, z2)))
    positive = j >= 0
    lnd_lo, lnd_hi = cells.lnd_lo[cell], cells.lnd_hi[cell]
    drift_lo = jf * np.where(positive, lnd_lo, lnd_hi)
    drift_hi = jf * np.where(positive, lnd_hi, lnd_lo)
    mu = [_mu(x) for x in (cf, yf, cf + jf, yf - jf)]  # (low, high) each
    dmu_hi = mu[0][1] + mu[1][1] - mu[2][0] - mu[3][0]  # mu(c) + mu(y) - mu(c+j) - mu(y-j)
    dmu_lo = mu[0][0] + mu[1][0] - mu[2][1] - mu[3][1]
    ln_f_hi = (-cf * (gs1 - gs1_width) - yf * (gs2 - gs2_width) + 0.5 * (lg1 + lg1_width + lg2 + lg2_width)
               + drift_hi + dmu_hi)
    ln_f_lo = (-cf * (gs1 + gs1_width) - yf * (gs2 + gs2_width) + 0.5 * (lg1 - lg1_width + lg2 - lg2_width)
               + drift_lo + dmu_lo)
    base = phi - i * _LN2 + np.where(j == 0, _LN2, 0.0)  # gamma = base - ln f(j) >= 0
    magnitude = (phi + i * _LN2 + cf * z1 * z1 + yf * z2 * z2 + np.abs(z1) + np.abs(z2)
                 + 2.0 * np.abs(jf) * cells.abs_delta[cell] + 2.0)
    margin = _GAMMA_MARGIN * magnitude
    return _exp_neg_bracket(base - ln_f_hi - margin, base - ln_f_lo + margin)


def _mu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of Stirling's remainder ``mu(x) = ln x! - (x+1/2)ln x + x - ln(2 pi)/2`` for ``x >= 1``.

    ``mu(x) = 1/(12x) - 1/(360x³) + 1/(1260x⁵) - ...``; for real ``x > 0`` the remainder after any term has
    the sign of the first omitted term and is smaller (DLMF 5.11(ii)), so the sums of two and three terms
    bound it.
    """
    inverse = 1.0 / x
    square = inverse * inverse
    low = inverse * (1.0 / 12.0 - square / 360.0)
    return low, low + inverse * square * square / 1260.0


_GS = [1.0 / ((m + 2) * (m + 1)) for m in range(_TERMS)]
_LG = [1.0 / (m + 1) for m in range(_TERMS)]


def _gs(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Σ_k>=2 z^k/(k(k-1)) = (1-z)ln(1-z) + z`` for ``|z| <= 1/2``: ``_TERMS`` terms and the tail's bound."""
    power = _power(np.abs(z), _TERMS + 2)
    return z * z * _horner(z, _GS), power * (2.0 / ((_TERMS + 2) * (_TERMS + 1)))


def _lg(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Σ_k>=1 z^k/k = -ln(1-z)`` for ``|z| <= 1/2``: ``_TERMS`` terms and the tail's bound."""
    power = _power(np.abs(z), _TERMS + 1)
    return z * _horner(z, _LG), power * (2.0 / (_TERMS + 1))


def _horner(z: np.ndarray, coefficients: list[float]) -> np.ndarray:
    """``Σ_m coefficients[m]·z^m`` (rounding error at most 2·len ulps of ``Σ |terms|``, Higham 5.1)."""
    total = np.full(z.shape, coefficients[-1])
    for coefficient in coefficients[-2::-1]:
        total *= z
        total += coefficient
    return total


def _power(x: np.ndarray, k: int) -> np.ndarray:
    """``x**k`` by repeated squaring and products (correctly rounded operations only)."""
    result, base = np.ones_like(x), x
    while k:
        if k & 1:
            result = result * base
        base, k = base * base, k >> 1
    return result


def _exp_neg_bracket(gamma_lo: np.ndarray, gamma_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Floats ``lo <= e^-gamma <= hi`` for ``0 <= gamma_lo <= gamma <= gamma_hi``, with only ``+ - ×``.

    For ``y = x/2^10``, ``x <= 40``, ``e^-y`` lies between the alternating Taylor sums of degree 5 and 4;
    squaring 10 times raises them to ``e^-x``.  Rounding (under 9 ulps before squaring) grows to at most
    ``2^10·9 ulp < 2^-39`` relative, inside the ``2^-36`` margin.  ``gamma > 40`` gives ``lo = 0`` and
    ``hi = e^-40`` (bounds still), which decide unless ``U < 2^-53``.
    """
    x = np.clip(np.stack((gamma_lo, gamma_hi)), 0.0, _EXP_CAP)
    y = np.ldexp(x, -_EXP_SQUARINGS)
    p = 1.0 + y * (-1.0 + y * (0.5 + y * (-1.0 / 6.0 + y * (1.0 / 24.0))))
    p[1] -= y[1] ** 5 / 120.0
    for _ in range(_EXP_SQUARINGS):
        p = p * p
    hi = np.minimum(p[0] * (1.0 + _EXP_MARGIN), 1.0)  # gamma >= 0 (Phi bounds the sup): A <= 1
    lo = np.where(gamma_hi <= _EXP_CAP, p[1] * (1.0 - _EXP_MARGIN), 0.0)
    return lo, hi


def _accept_exactly(c: int, y: int, j: int, i: int, phi: float, v: int, a: int, b: int, rng: Randomness) -> bool:
    """``U < A(j)`` decided exactly, where ``U``'s first 53 bits are ``v`` and its next bits are drawn as needed.

    First the cheap bound ``ln f(j) <= -k(k-1)/2·(1/y + 1/(c+k))`` (``k = j > 0``; ``1/c + 1/(y+k)`` for
    ``j = -k``), in logarithms, may reject; otherwise ``f(j)`` is the exact rational
    ``perm(y, k)/perm(c+k, k)·(p/q)^k`` (or ``perm(c, k)/perm(y+k, k)·(q/p)^k``) and ``e^Phi`` is bracketed by
    correctly rounded ``decimal`` (one ulp either side), the precision and ``U``'s bits growing until they decide.
    """
    k = abs(j)
    curvature = Fraction(1, y) + Fraction(1, c + k) if j >= 0 else Fraction(1, c) + Fraction(1, y + k)
    # ln A <= i·ln 2 - Phi - k(k-1)/2·curvature (- ln 2 at j = 0), with ln 2 rounded up: no 2^i is formed
    exponent = Fraction(phi) + Fraction(k * (k - 1), 2) * curvature - i * _LN2_ABOVE + (_LN2_BELOW if j == 0 else 0)
    num, bits = v, 53
    if exponent > 0:
        digits = 30
        x_down = Decimal(math.floor(exponent * 10**digits)).scaleb(-digits)  # <= exponent
        bound = bracket("exp", -x_down, 80)[1]  # >= e^-exponent >= A
        while True:
            if Fraction(num, 1 << bits) >= bound:
                return False
            if Fraction(num + 1, 1 << bits) <= bound:
                break
            num, bits = (num << 64) | rng.randbelow(_TWO_64), bits + 64
    scale = Fraction(1 << i, 2 if j == 0 else 1)
    if j >= 0:
        ratio = Fraction(math.perm(y, k) * a**k, math.perm(c + k, k) * (b - a) ** k)
    else:
        ratio = Fraction(math.perm(c, k) * (b - a) ** k, math.perm(y + k, k) * a**k)
    target = scale * ratio  # accept iff U·e^Phi < target
    precision = 80
    while True:
        e_lo, e_hi = bracket("exp", Decimal(phi), precision)  # Decimal(phi) is exact and short (2^-20 grid)
        if Fraction(num + 1, 1 << bits) * e_hi <= target:
            return True
        if Fraction(num, 1 << bits) * e_lo >= target:
            return False
        num, bits, precision = (num << 64) | rng.randbelow(_TWO_64), bits + 64, 2 * precision


# --------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------


def _integers(values, name: str, low: int, high: int) -> np.ndarray:
    """``values`` as an integer array (object dtype for python ints past int64), each in ``[low, high]``."""
    array = np.asarray(values)
    if array.dtype.kind == "O":
        flat = array.ravel().tolist()
        if not all(isinstance(x, Integral) and not isinstance(x, bool) for x in flat):
            raise ValueError(f"{name} must be integers (exact rationals; convert floats explicitly), "
                             f"got {values!r}")
        if flat and (min(flat) < low or max(flat) > high):
            raise ValueError(f"{name} must lie in [{low}, {high}]")
        return array
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers (exact rationals; convert floats explicitly), "
                         f"got dtype {array.dtype}")
    if array.size and (int(array.min()) < low or int(array.max()) > high):
        raise ValueError(f"{name} must lie in [{low}, {high}]")
    return array


def _uint64(values) -> np.ndarray:
    """Integers in ``[0, 2**64)`` (an int, uint or object array, or a python int) as uint64."""
    values = np.asarray(values)
    if values.dtype.kind == "O":
        return np.array(values.tolist(), dtype=np.uint64)
    return values.astype(np.uint64)
