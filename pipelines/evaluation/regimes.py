"""Where a mechanism publishes something useful: the error model's map, checked on T-Drive.

Two conditions, both from the mechanisms' own error model (``obs.ErrorModel``, discrete Laplace, one cohort so
no sampling error), decide whether a personalized mechanism publishes anything worth having:

1. **A publication beats the empty histogram.**  At the first slot the last release is all zeros, so the true
   per-bin dissimilarity is the mean count ``N/d``; PWSM publishes only when it exceeds the publication's
   predicted error ``sqrt(err(θ))``, and a publication is only useful when its error is below the counts.  Both
   read ``N/d > sqrt(Var(noise(θ)))``: the *relative error* ``sqrt(Var)/(N/d)`` must be below 1.  The largest
   ``θ`` a mechanism can spend on one publication is ``E/4`` for distribution (PBD, BD: half of the window's
   publication half) and ``E/2`` for absorption (PBA, BA, adaptive, after a window of skipped slots).
2. **The decision sees the data.**  The dissimilarity costs ``E/(2w)`` per slot; its noise, per bin, has
   standard deviation ``sqrt(Var(noise(E/(2w))))/d``, which relative to ``N/d`` is
   ``sqrt(Var(noise(E/(2w))))/N``: above 1 the publish/skip decision is a coin flip whatever the data do.

The slot length enters through ``w`` (a window protecting a fixed time spans ``time/slot`` slots) and through
how far the data move per slot; the grid through ``d``.  :func:`tdrive_checks` runs PBD, PBA and adaptive on the
real T-Drive sample for the README's example and for proposed settings, and reports fresh slots and the error
against the carried-forward truth beside the error of releasing nothing (the all-zero histogram).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from pipelines.evaluation_data import DataUnavailable, EventSource, build_stream, taxi_source
from transforms.binning import GridBins
from transforms.mechanisms import FixedRequirements, PrivacyLedger, ReleaseKind, SlotBatch, make_mechanism
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.metrics import utility_report
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.obs import ErrorModel

DISTRIBUTION_SHARE = 0.25
"""PBD/BD: the largest single publication spends E/4."""
ABSORPTION_SHARE = 0.5
"""PBA/BA/adaptive: the largest single publication spends E/2 (a whole window absorbed)."""


def noise_std(epsilon: float | np.ndarray) -> np.ndarray:
    """Per-bin standard deviation of the discrete Laplace noise of budget ``epsilon`` (sensitivity 1)."""
    return np.sqrt(ErrorModel.DISCRETE.noise_variance(np.asarray(epsilon, np.float64), 1))


def publication_relative_error(users_per_bin, epsilon, share: float) -> np.ndarray:
    """Condition 1: predicted per-bin error of a publication at ``share * E`` over the mean count ``N/d``."""
    return noise_std(share * np.asarray(epsilon, np.float64)) / np.asarray(users_per_bin, np.float64)


def decision_relative_noise(users, epsilon, window) -> np.ndarray:
    """Condition 2: the dissimilarity's noise per bin over the mean count (``d`` cancels)."""
    return noise_std(np.asarray(epsilon, np.float64) / (2 * np.asarray(window, np.float64))) / \
        np.asarray(users, np.float64)


@dataclass(frozen=True)
class Regime:
    """A T-Drive setting: grid, slot length and two user levels ``(w, E)`` splitting the taxis half and half."""

    label: str
    rows: int
    cols: int
    slot_seconds: float
    levels: tuple[tuple[int, float], tuple[int, float]]

    @property
    def grid(self) -> GridBins:
        return GridBins(116.0, 116.8, 39.5, 40.3, self.rows, self.cols)

    @property
    def binning(self) -> str:
        return f"grid:116,116.8,39.5,40.3,{self.rows}x{self.cols}"


README_TDRIVE = Regime("README example today: 10x10, 10-min slots, (40, 1.0) / (120, 0.6)", 10, 10, 600.0,
                       ((40, 1.0), (120, 0.6)))
REGIMES = (
    README_TDRIVE,
    Regime("10x10, 10-min slots, (6, 2.0) / (12, 1.0)", 10, 10, 600.0, ((6, 2.0), (12, 1.0))),
    Regime("5x5, 10-min slots, (6, 2.0) / (12, 1.0)", 5, 5, 600.0, ((6, 2.0), (12, 1.0))),
    Regime("5x5, 30-min slots, (2, 1.0) / (4, 1.0)", 5, 5, 1800.0, ((2, 1.0), (4, 1.0))),
    Regime("5x5, 10-min slots, (40, 1.0) / (120, 0.6)", 5, 5, 600.0, ((40, 1.0), (120, 0.6))),
)
"""The README's T-Drive example and candidate settings (windows: 1 and 2 hours, or 1 and 2 hours of 30-min slots)."""
CHECKED_MECHANISMS = ("pbd", "pba", "adaptive")


def tdrive_checks(data_dir: str, seed: int = 0, regimes=REGIMES) -> tuple[list[dict], str | None]:
    """Each regime's measured behaviour on the T-Drive sample (rows), or why it could not run."""
    try:
        base = taxi_source(data_dir)
    except DataUnavailable as reason:
        return [], str(reason)
    rows = []
    for regime in regimes:
        stream = build_stream(EventSource("taxi", base.description, base.inputs, base.input_format, regime.grid,
                                          regime.slot_seconds))
        truth = stream.true_histograms()
        half = stream.users // 2
        (w1, e1), (w2, e2) = regime.levels
        reqs = FixedRequirements.of(np.where(np.arange(stream.users) < half, w1, w2),
                                    np.where(np.arange(stream.users) < half, e1, e2))
        present = truth.sum(axis=1)
        for name in CHECKED_MECHANISMS:
            engine = Engine(make_mechanism(name, bins=stream.bins), insecure_seeded_randomness(seed),
                            PrivacyLedger(max_window=max(w1, w2)))
            released, kinds = [], {kind: 0 for kind in ReleaseKind}
            for t, values in enumerate(stream.values()):
                release = engine.step(SlotBatch.of(np.arange(stream.users), values, reqs if t == 0 else None))
                released.append(release.histogram)
                kinds[release.kind] += 1
            engine.close()
            ledger = engine.ledger
            report = utility_report(np.array(released), truth)
            zero = float(np.mean(truth.astype(np.float64) ** 2))
            rows.append({"regime": regime.label, "mechanism": name, "users": stream.users, "bins": stream.bins,
                         "slots": stream.slots, "mean_present": float(present.mean()),
                         "fresh": kinds[ReleaseKind.FRESH], "amre": report.amre, "zero_amre": zero,
                         "ajsd": report.ajsd, "ledger_violations": ledger.violation_count,
                         "predicted_relative_error": float(publication_relative_error(
                             present.mean() / stream.bins, min(e1, e2),
                             DISTRIBUTION_SHARE if name == "pbd" else ABSORPTION_SHARE)),
                         "binning": regime.binning, "slot_seconds": regime.slot_seconds, "levels": regime.levels})
    return rows, None


def write_map(path: str, examples: list[tuple[str, float, float, float, int]]) -> bool:
    """The two conditions as a two-panel PNG; ``examples`` are ``(label, users, bins, E, w)`` points to mark.

    Returns False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2))
    per_bin = np.logspace(-1, 4, 300)
    epsilons = np.logspace(-1, 1, 300)
    x, y = np.meshgrid(per_bin, epsilons)
    for share, style, name in ((DISTRIBUTION_SHARE, "-", "distribution (PBD, BD): θ = E/4"),
                               (ABSORPTION_SHARE, "--", "absorption (PBA, BA, adaptive): θ = E/2")):
        contour = left.contour(x, y, publication_relative_error(x, y, share), levels=[0.2, 1.0], colors="black",
                               linestyles=style)
        left.clabel(contour, fmt={0.2: "20%", 1.0: "100%"}, fontsize="small")
        left.plot([], [], "k" + style, label=name)
    left.set(xscale="log", yscale="log", xlabel="users per bin N/d", ylabel="E (the user's budget per window)",
             title="(1) publication error / mean count", xlim=(0.1, 10_000), ylim=(0.1, 10))
    windows = np.logspace(0, 3, 300)
    users = np.logspace(1, 5, 300)
    wx, uy = np.meshgrid(windows, users)
    for epsilon, style in ((0.6, ":"), (1.0, "--"), (2.0, "-")):
        right.contour(wx, uy, decision_relative_noise(uy, epsilon, wx), levels=[1.0], colors="black",
                      linestyles=style)
        right.plot([], [], "k" + style, label=f"E = {epsilon}")
    right.set(xscale="log", yscale="log", xlabel="w (slots per protected window = time / slot length)",
              ylabel="users N", title="(2) decision noise = mean count (above a line: informed)")
    markers = "osD^vP*Xh"
    for index, (label, n, d, epsilon, window) in enumerate(examples):
        marker = markers[index % len(markers)]
        left.plot(n / d, epsilon, marker, markersize=6, label=label)
        right.plot(window, n, marker, markersize=6, color=left.lines[-1].get_color())
    left.legend(loc="lower left", fontsize="x-small")
    right.legend(loc="lower right", fontsize="x-small")
    figure.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


MAP_EXAMPLES = (
    ("README T-Drive today", 580, 100, 0.6, 120),
    ("README T-Drive proposed (5x5, w = 12)", 580, 25, 1.0, 12),
    ("main job before (10x10)", 1000, 100, 1.0, 12),
    ("main job now (5x5)", 1000, 25, 1.0, 12),
    ("papers' Taxi", 10_357, 100, 0.6, 120),
    ("Foursquare here", 4_913, 100, 0.6, 120),
    ("synthetic, N = 5,000", 5_000, 2, 0.6, 120),
)
"""``(label, users, bins, smallest E, largest w)`` marked on the map."""
