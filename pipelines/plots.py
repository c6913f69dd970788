"""``--evaluate --plot``: released against true counts of the busiest bins, on a wall-clock time axis (NOT private:
it draws true counts; ``pipelines.report`` writes it into ``OUTPUT/evaluation/``)."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import numpy as np


def plot_released_vs_true(utility: dict, slot_seconds: float, origin: float, mechanism: str, count: int = 4) -> bytes:
    """A PNG with one panel per busiest bin: counts per slot (users), true and released, against UTC time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    released, true = np.array(utility["released"]), np.array(utility["true"])
    times = [datetime.fromtimestamp(origin + slot * slot_seconds, tz=timezone.utc) for slot in utility["slots"]]
    busiest = np.argsort(true.sum(axis=0))[::-1][:count]
    fig, axes = plt.subplots(len(busiest), 1, figsize=(10, 2.2 * len(busiest) + 0.8), sharex=True, squeeze=False)
    for ax, b in zip(axes[:, 0], busiest):
        ax.step(times, true[:, b], where="post", label="true (not published)", color="black", linewidth=1)
        ax.step(times, released[:, b], where="post", label=f"released ({mechanism})", color="tab:red",
                linewidth=1, alpha=0.8)
        ax.set_ylabel(f"bin {b}\nusers per slot")
    axes[0, 0].legend(loc="upper right")
    axes[-1, 0].set_xlabel(f"slot start (UTC), slots of {slot_seconds:g} s")
    axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(axes[-1, 0].xaxis.get_major_locator()))
    fig.suptitle(f"Released vs true counts of the {len(busiest)} busiest bins ({mechanism})")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
