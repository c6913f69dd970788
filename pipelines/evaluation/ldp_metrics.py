"""The LDP-IDS evaluation's metrics (spec ``ldp_ids.md`` §8.5): MRE, MSE, MAE over frequency histograms, and the
event-monitoring ROC curve and its AUC.

Everything here compares released frequencies ``r_t`` with true ones ``c_t`` (both ``(T, d)``, rows summing to
about 1); nothing is post-processed (trap T22).
"""

from __future__ import annotations

import numpy as np

REDUCTIONS = ("one", "index", "value")
"""How a histogram becomes the scalar event monitoring watches: ``one`` is the frequency of value 1 (binary data),
``index`` the mean category index ``sum_k k c_t[k]`` (the spec's reading of the paper's "mean value", §8.5),
``value`` the one entry of a mean estimate (d = 1)."""
EVENT_QUANTILE = 0.75
"""An event is a slot whose statistic exceeds ``min + 0.75 (max - min)`` of the true series (§8.5)."""


def _pair(released, truth) -> tuple[np.ndarray, np.ndarray]:
    r, c = np.asarray(released, np.float64), np.asarray(truth, np.float64)
    if r.shape != c.shape or r.ndim != 2 or r.size == 0:
        raise ValueError(f"released and true histograms must be equal non-empty (T, d) arrays, got {r.shape} and "
                         f"{c.shape}")
    return r, c


def mre(released, truth, floor: float) -> float:
    """``(1/T) sum_t (1/d) sum_k |r_t[k] - c_t[k]| / max(c_t[k], floor)``: every bin, the sanity bound ``floor``
    (spec §8.5, trap T15; ``1/n`` by default in the harness)."""
    if not floor > 0:
        raise ValueError(f"the MRE's sanity bound must be > 0, got {floor!r}")
    r, c = _pair(released, truth)
    return float(np.mean(np.abs(r - c) / np.maximum(c, floor)))


def mse(released, truth) -> float:
    """``(1/T) sum_t (1/d) sum_k (r_t[k] - c_t[k])^2``."""
    r, c = _pair(released, truth)
    return float(np.mean((r - c) ** 2))


def mae(released, truth) -> float:
    """``(1/T) sum_t (1/d) sum_k |r_t[k] - c_t[k]|``."""
    r, c = _pair(released, truth)
    return float(np.mean(np.abs(r - c)))


def reduce(histograms, reduction: str) -> np.ndarray:
    """The scalar series event monitoring watches (see ``REDUCTIONS``)."""
    h = np.asarray(histograms, np.float64)
    if reduction == "one":
        if h.shape[1] < 2:
            raise ValueError("the 'one' reduction needs at least 2 bins")
        return h[:, 1]
    if reduction == "index":
        return h @ np.arange(h.shape[1], dtype=np.float64)
    if reduction == "value":
        if h.shape[1] != 1:
            raise ValueError(f"the 'value' reduction is for a mean (1 bin), got {h.shape[1]} bins")
        return h[:, 0]
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def event_labels(true_series) -> np.ndarray:
    """``1[c_t > min + 0.75 (max - min)]`` of the true series."""
    c = np.asarray(true_series, np.float64)
    threshold = EVENT_QUANTILE * (c.max() - c.min()) + c.min()
    return c > threshold


def roc_curve(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of flagging ``score >= s`` for every distinct score ``s``, from (0, 0) to (1, 1)."""
    y, s = np.asarray(labels, bool), np.asarray(scores, np.float64)
    positives, negatives = int(y.sum()), int((~y).sum())
    if positives == 0 or negatives == 0:
        raise ValueError("a ROC curve needs both events and non-events")
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # the last index of each run of equal scores
    tpr = np.r_[0.0, np.cumsum(y)[last] / positives]
    fpr = np.r_[0.0, np.cumsum(~y)[last] / negatives]
    return fpr, tpr


def auc(labels, scores) -> float:
    """Area under the ROC curve (the probability that an event outscores a non-event, ties counting half);
    NaN when the true series has no event or no non-event."""
    y = np.asarray(labels, bool)
    if y.all() or not y.any():
        return float("nan")
    fpr, tpr = roc_curve(y, scores)
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
