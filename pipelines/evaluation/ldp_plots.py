"""The LDP-IDS evaluation's figure: Fig. 10 (mean estimation), MRE against the fluctuation of LNS-Con and Sin-Con
(the paper's panels (a), (b)) and against ε on every -Con stream, the mean over repeats with ± one standard
deviation as error bars, one line per method, log y."""

from __future__ import annotations

import os

import numpy as np

from pipelines.evaluation.ldp import EPSILONS, EXPERIMENTS, FLUCTUATIONS, base_dataset, dataset_name, method_name

FIG10 = "fig10_mean.png"
STYLE = {"lbu": ("tab:gray", "x"), "lsp": ("tab:brown", "+"), "lbd": ("tab:blue", "o"), "lba": ("tab:orange", "s"),
         "lpu": ("tab:purple", "D"), "lpd": ("tab:green", "^"), "lpa": ("tab:red", "v")}
X_LABELS = {"lns-con": "sqrt(Q)", "sin-con": "b"}


def fig10_panels(rows: list[dict]) -> list[tuple[str, str, list, dict[str, list[tuple[float, float, float]]]]]:
    """Per panel (title, x label, x points, method -> [(x, mean MRE, std MRE)]) for the mean experiments' rows;
    panels without runs are left out."""
    panels = []
    for experiment in ("mean", "mean-epsilon"):
        column = EXPERIMENTS[experiment].column
        for dataset in EXPERIMENTS[experiment].datasets:
            mine = [r for r in rows if r["experiment"] == experiment and r["dataset"] == dataset]
            if not mine:
                continue
            points = FLUCTUATIONS[base_dataset(dataset)] if experiment == "mean" else EPSILONS
            lines: dict = {}
            for method in dict.fromkeys(r["method"] for r in mine):
                for x in points:
                    values = [float(r["mre"]) for r in mine if r["method"] == method and r[column] == x]
                    if values:
                        lines.setdefault(method, []).append(
                            (x, float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0))
            label = X_LABELS[dataset] if experiment == "mean" else "ε"
            panels.append((f"{dataset_name(dataset)}: MRE vs {label}", label, list(points), lines))
    return panels


def write_plots(rows: list[dict], directory: str) -> list[str] | None:
    """Fig. 10 as a PNG in ``directory``: the names written ([] without mean runs; None without matplotlib)."""
    panels = fig10_panels(rows)
    if not panels:
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    columns = min(len(panels), 3)
    count = -(-len(panels) // columns)
    figure, axes = plt.subplots(count, columns, figsize=(4.4 * columns, 3.5 * count + 0.6), squeeze=False)
    for axis, (title, label, points, lines) in zip(axes.flat, panels):
        for method, series in lines.items():
            xs, means, stds = (np.array(v) for v in zip(*series))
            color, marker = STYLE.get(method.split("-")[0], (None, "o"))
            axis.errorbar(xs, means, yerr=np.minimum(stds, means * 0.999), marker=marker, color=color,
                          label=method_name(method), linewidth=1.2, capsize=2)
        scale = "log" if label != "ε" else "linear"
        axis.set(yscale="log", xscale=scale, xlabel=label, title=title)
        axis.set_xticks(points)
        axis.set_xticklabels([f"{p:g}" for p in points], fontsize="small")
        axis.minorticks_off()
        axis.grid(True, which="major", alpha=0.3)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for axis in axes[:, 0]:
        axis.set_ylabel("MRE")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 7), fontsize="small", frameon=False)
    figure.suptitle("Fig. 10: mean estimation with HM (ε = 1, w = 20 unless varied); mean ± std over repeats",
                    fontsize="medium")
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    os.makedirs(directory, exist_ok=True)
    figure.savefig(os.path.join(directory, FIG10), dpi=110)
    plt.close(figure)
    return [FIG10]
