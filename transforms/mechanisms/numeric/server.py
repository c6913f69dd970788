"""The collector's side of seed 003 (spec ``ipp_app_capp.md`` §3.5, §3.8.3, §4, §6.3): post-processing only.

The collector takes the reports at face value, as the paper does (§4: no estimator inversion, trap T4):

* per-slot **population mean**: the average over users of ``x'_t`` (outside the paper; its natural analogue);
* per-user **subsequence mean** ``M̂_(i,j)``: the average of the user's *unsmoothed* reports (trap T7);
* **published series**: the reports smoothed by a simple moving average (:func:`sma`, §3.5; centred as the
  paper says by default, trailing as the reference code does);
* **crowd level** (§3.8.3): the distribution over users of the subsequence means, compared with the true one
  by the Wasserstein distance; :func:`crowd_distribution` bins it (the streams' ``crowd_window`` release).

SW's raw average is biased toward 1/2 (``E[x'] = 1/2 + g·(x - 1/2)``); :func:`debiased` is the extra, unbiased
SW-direct estimate ``1/2 + (x̄' - 1/2)/g`` (its variance is ``1/g²`` times larger).  Everything here reads
reports only, never true values; the metrics (:func:`mse`, :func:`cosine_distances`, :func:`wasserstein_w1`)
compare with true values and are for evaluation.
"""

from __future__ import annotations

import math

import numpy as np

from transforms.mechanisms.domain import Interval
from transforms.mechanisms.numeric.square_wave import SquareWave

SMA_MODES = ("centered", "trailing")


def to_domain(values, domain: Interval | None):
    """Values in ``[0, 1]`` units mapped onto ``domain`` (unchanged without one)."""
    v = np.asarray(values, np.float64)
    return v if domain is None else float(domain.low) + domain.width * v


def population_means(reports, domain: Interval | None = None) -> np.ndarray:
    """Per slot, the average over users (rows) of the reports (NaN where a user did not report)."""
    return to_domain(np.nanmean(np.asarray(reports, np.float64), axis=0), domain)


def subsequence_means(reports, start: int = 0, stop: int | None = None, domain: Interval | None = None
                      ) -> np.ndarray:
    """Per user (row), ``M̂_(start, stop-1)``: the average of the unsmoothed reports of slots ``start..stop-1``."""
    block = np.asarray(reports, np.float64)[..., start:stop]
    if block.shape[-1] == 0:
        raise ValueError("a subsequence needs at least one slot")
    return to_domain(block.mean(axis=-1), domain)


def crowd_distribution(means, bins: int) -> np.ndarray:
    """The fractions of ``means`` (``[0, 1]`` units, one per user) in each of ``bins`` equal bins of ``[0, 1]``:
    bin ``k`` is ``[k/bins, (k+1)/bins)``, the last one closed; means outside ``[0, 1]`` count in the end bins."""
    m = np.asarray(means, np.float64).ravel()
    if m.size == 0:
        raise ValueError("a crowd distribution needs at least one user's mean")
    index = np.clip(np.floor(m * bins), 0, bins - 1).astype(np.int64)
    return np.bincount(index, minlength=bins) / m.size


def debiased(means, sw: SquareWave, domain: Interval | None = None):
    """Unbiased estimates from averages of SW-direct reports: ``1/2 + (m - 1/2)/g`` (post-processing)."""
    return to_domain(sw.debias(means), domain)


def sma(values, size: int = 3, mode: str = "centered") -> np.ndarray:
    """Simple moving average along the last axis, windows shrinking at the ends (spec §3.5).

    ``centered`` (paper): the mean of ``x'_{t-k..t+k}`` with ``size = 2k + 1``; ``trailing`` (the reference's
    ``movmean(x, [size-1 0])``): the mean of ``x'_{t-size+1..t}``; only the available values are averaged.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}")
    if mode not in SMA_MODES:
        raise ValueError(f"mode must be one of {SMA_MODES}, got {mode!r}")
    if mode == "centered" and size % 2 == 0:
        raise ValueError(f"a centred window has an odd size, got {size}")
    x = np.asarray(values, np.float64)
    n = x.shape[-1]
    before, after = ((size - 1) // 2, (size - 1) // 2) if mode == "centered" else (size - 1, 0)
    t = np.arange(n)
    low, high = np.maximum(t - before, 0), np.minimum(t + after, n - 1) + 1
    cumulative = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)], axis=-1)
    return (cumulative[..., high] - cumulative[..., low]) / (high - low)


# ------------------------------------------------------------------ metrics (evaluation: they read true values)


def mse(estimates, truth) -> float:
    """Mean squared error of estimates (e.g. per-user means) against the true values."""
    e, x = np.asarray(estimates, np.float64), np.asarray(truth, np.float64)
    if e.shape != x.shape:
        raise ValueError(f"estimates and truth must have the same shape, got {e.shape} and {x.shape}")
    return float(np.mean((e - x) ** 2))


def cosine_distances(truth, released) -> tuple[np.ndarray, int]:
    """Per row, ``1 - u·v/(|u||v|)`` (spec §6.3), and how many rows were dropped because a norm is 0 (T14)."""
    u, v = np.asarray(truth, np.float64), np.asarray(released, np.float64)
    if u.shape != v.shape:
        raise ValueError(f"truth and released must have the same shape, got {u.shape} and {v.shape}")
    norms = np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1)
    defined = norms > 0
    similarity = np.sum(u * v, axis=-1)[defined] / norms[defined]
    return 1 - similarity, int(np.count_nonzero(~defined))


def wasserstein_w1(a, b) -> float:
    """The exact 1-Wasserstein distance between the empirical distributions of samples ``a`` and ``b``:
    ``∫ |F_a(x) - F_b(x)| dx`` over the merged support."""
    a, b = np.sort(np.asarray(a, np.float64).ravel()), np.sort(np.asarray(b, np.float64).ravel())
    if a.size == 0 or b.size == 0:
        raise ValueError("both samples must be non-empty")
    points = np.concatenate([a, b])
    points.sort()
    cdf_a = np.searchsorted(a, points[:-1], side="right") / a.size
    cdf_b = np.searchsorted(b, points[:-1], side="right") / b.size
    return float(np.sum(np.abs(cdf_a - cdf_b) * np.diff(points)))


def wasserstein_binned(p, q, width: float = 1.0) -> float:
    """W1 between two distributions over the same equal bins of an interval of ``width`` (mass at the bins'
    centres): ``width/B · Σ_k |P_k - Q_k|`` over the cumulative sums."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.shape != q.shape or p.ndim != 1 or p.size == 0:
        raise ValueError(f"p and q must be 1-D over the same bins, got {p.shape} and {q.shape}")
    return float(np.abs(np.cumsum(p - q))[:-1].sum() * width / p.size)


def wasserstein_grid_sum(a, b, points: int = 100) -> float:
    """The paper's ``Σ_k |F_a(g_k) - F_b(g_k)|`` on ``points`` evenly spaced points over both samples' range
    (its grid is unspecified, trap T10: reported beside :func:`wasserstein_w1`)."""
    a, b = np.sort(np.asarray(a, np.float64).ravel()), np.sort(np.asarray(b, np.float64).ravel())
    grid = np.linspace(min(a[0], b[0]), max(a[-1], b[-1]), points)
    return float(np.sum(np.abs(np.searchsorted(a, grid, side="right") / a.size
                               - np.searchsorted(b, grid, side="right") / b.size)))


def dkw_users(confidence_delta: float, margin: float) -> int:
    """Thm 5 (DKW): the users needed for ``sup|F_N - F| <= η`` with probability ``1 - δ`` when every user's
    mean is within ``β`` (``margin = η - β > 0``): ``ceil(ln(2/δ) / (2·margin²))``."""
    if not (0 < confidence_delta < 1 and margin > 0):
        raise ValueError("need 0 < delta < 1 and eta - beta > 0")
    return math.ceil(math.log(2 / confidence_delta) / (2 * margin * margin))
