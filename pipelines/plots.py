"""``--evaluate --plot``: released against true counts of the busiest bins, on a wall-clock time axis (NOT private:
it draws true counts; ``pipelines.report`` writes it into ``OUTPUT/evaluation/``)."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import numpy as np


def plot_released_vs_true(utility: dict, slot_seconds: float, origin: float, mechanism: str, count: int = 4) -> bytes:
    """A PNG with one panel per busiest bin: counts per slot (users), true and released, against UTC time (a
    numeric stream: one panel of the released and true slot means, with the stated error band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    released, true = np.array(utility["released"]), np.array(utility["true"])
    numeric = "predicted" in utility  # a numeric stream's (pipelines.report.NumericUtility)
    times = [datetime.fromtimestamp(origin + slot * slot_seconds, tz=timezone.utc) for slot in utility["slots"]]
    busiest = np.argsort(true.sum(axis=0))[::-1][:count]
    fig, axes = plt.subplots(len(busiest), 1, figsize=(10, 2.2 * len(busiest) + 0.8), sharex=True, squeeze=False)
    for ax, b in zip(axes[:, 0], busiest):
        ax.step(times, true[:, b], where="post", label="true (not published)", color="black", linewidth=1)
        ax.step(times, released[:, b], where="post", label=f"released ({mechanism})", color="tab:red",
                linewidth=1, alpha=0.8)
        ax.set_ylabel("the slot's mean" if numeric else f"bin {b}\nusers per slot")
        if numeric:  # the stated error: the estimate ± sqrt(predicted_error)
            spread = np.sqrt(np.array(utility["predicted"]))
            ax.fill_between(times, released[:, b] - spread, released[:, b] + spread, step="post", color="tab:red",
                            alpha=0.15, label="± sqrt(predicted_error)")
    axes[0, 0].legend(loc="upper right")
    axes[-1, 0].set_xlabel(f"slot start (UTC), slots of {slot_seconds:g} s")
    axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(axes[-1, 0].xaxis.get_major_locator()))
    fig.suptitle(f"Released vs true slot means ({mechanism}: the releases' statistic, the holders' true mean)" if numeric
                 else f"Released vs true counts of the {len(busiest)} busiest bins ({mechanism})")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
