"""The evaluation's PNG plots: one per sweep and metric, one panel per dataset, log y (as the papers' figures).
The released-against-true plot of a replay is :mod:`pipelines.plots`; the useful-regime map is in
:mod:`pipelines.evaluation.regimes`."""

from __future__ import annotations

import os

import numpy as np

from pipelines.evaluation.sweeps import (RATIO_SWEEPS, SWEEP_COLUMN, SWEEP_LABELS, base_mechanism, dataset_name,
                                         label_name, run_labels, sweep_points)

STYLE = {"bd": ("tab:blue", "o"), "ba": ("tab:orange", "s"), "uniform": ("tab:gray", "x"),
         "sample": ("tab:brown", "+"), "pbd": ("tab:green", "^"), "pba": ("tab:red", "v"),
         "dpbd": ("tab:purple", "D"), "dpba": ("tab:olive", "P"), "adaptive": ("black", "*"),
         "dadaptive": ("tab:cyan", "*")}
LINESTYLE = {"": "-", "redrawn": "-", "held": "--", "drifting": ":"}
PLOT_METRICS = (("amre", "AMRE (mean squared error)", 1.0), ("ajsd", "AJSD", 1.0),
                ("seconds_per_slot", "ms per slot", 1e3))


def write_plots(rows: list[dict], args, directory: str, datasets: list[str]) -> list[str] | None:
    """One PNG per sweep and metric, one panel per dataset (log y); ``None`` when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    written = []
    for sweep in args.sweeps:
        for metric, ylabel, scale in PLOT_METRICS:
            if metric == "seconds_per_slot" and sweep in RATIO_SWEEPS:
                continue
            present = [d for d in datasets if any(r["dataset"] == d and r["sweep"] == sweep for r in rows)]
            if not present:
                continue
            name = f"{'time' if metric == 'seconds_per_slot' else metric}_vs_{sweep}.png"
            _panels(plt, rows, args, present, sweep, metric, ylabel, scale, os.path.join(directory, name))
            written.append(name)
    return written


def _panels(plt, rows, args, datasets, sweep, metric, ylabel, scale, path) -> None:
    columns = min(len(datasets), 3)
    count = -(-len(datasets) // columns)
    figure, axes = plt.subplots(count, columns, figsize=(4.2 * columns, 3.4 * count + 0.6), squeeze=False)
    points = sweep_points(sweep)
    for axis, dataset in zip(axes.flat, datasets):
        for mechanism in run_labels(args.mechanisms, args.scenarios):
            mine = [r for r in rows if r["dataset"] == dataset and r["sweep"] == sweep and r["mechanism"] == mechanism]
            column = SWEEP_COLUMN[sweep]
            xs = [p for p in points if any(r[column] == p for r in mine)]
            ys = [scale * float(np.mean([r[metric] for r in mine if r[column] == p])) for p in xs]
            keep = [(x, y) for x, y in zip(xs, ys) if y > 0]
            if keep:
                color, marker = STYLE.get(base_mechanism(mechanism), (None, "o"))
                axis.plot(*zip(*keep), marker=marker, color=color, label=label_name(mechanism), linewidth=1.2,
                          linestyle=LINESTYLE.get(mechanism.partition(":")[2], "-"))
        axis.set(yscale="log", xlabel=SWEEP_LABELS[sweep].split(" (")[0], xticks=points, title=dataset_name(dataset))
        axis.grid(True, which="major", alpha=0.3)
    for axis in axes.flat[len(datasets):]:
        axis.set_visible(False)
    for axis in axes[:, 0]:
        axis.set_ylabel(ylabel)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize="small", frameon=False)
    figure.suptitle(f"{ylabel.split(' (')[0]} vs {SWEEP_LABELS[sweep]}", fontsize="medium")
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
