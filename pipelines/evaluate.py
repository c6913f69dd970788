"""Evaluation harness: every registered mechanism on the papers' synthetic streams, swept and repeated.

    python -m pipelines.evaluate --sweep epsilon,window --repeats 10 --output results/

runs the papers' experiments (spec/pwsm.md §5) in-process, without Beam:

* datasets ``sin``, ``log``, ``tlns`` (N users, d = 2 bins, T slots);
* every mechanism in ``MECHANISMS`` (or ``--mechanisms``), built by
  :func:`transforms.mechanisms.run.mechanism_for`: homogeneous ones run at the
  sweep point ``(E, w)``, personalized ones get the papers' ten user types around
  it, dynamic ones the per-type dynamic declarations;
* sweeps ``epsilon`` (E in 0.2..1.0 at w = 120), ``window`` (w in 40..200 at
  E = 0.6) and ``ratio`` (§6.5: a fraction o of users with E = 1.0, the rest
  E = 0.6, all w = 120; fixed-requirement mechanisms only, the homogeneous ones
  at (0.6, 120)).

Each run streams all T slots through one mechanism without resetting it, unless
``--segment-reset K`` re-creates it every K slots as the authors' code does (250);
such rows carry ``w_event_guarantee_across_segments=false``, their
``max_window_usage_ratio`` is checked per segment and
``cross_segment_max_window_usage_ratio`` shows what the whole stream really spent.

Noise comes from a SEEDED generator so that every run is reproducible: this is
for evaluation only and is NOT private.  Seeds are derived from
``(--seed, dataset, mechanism, point, repeat)``; the data and requirements
depend on ``(--seed, dataset, point, repeat)`` only, so all mechanisms of one
repeat see the same stream.  Results do not depend on ``--workers``.

Outputs in ``--output``: ``results.csv`` (one row per run), ``summary.md``
(mean ± std over repeats, with the papers' AMRE beside ours) and, when
matplotlib is installed, PNG plots.  AMRE is the papers' metric, which is a
mean *squared* error.  Exit code 1 (after writing the outputs) when a ledger
saw more than a requirement spent in some window; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms import MECHANISMS, PrivacyLedger, ReleaseKind, SlotBatch
from transforms.mechanisms.metrics import utility_report
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.requirements import DynamicRequirements
from transforms.mechanisms.run import mechanism_for
from transforms.mechanisms.scenarios import EPSILON_GRID, WINDOW_GRID, PaperSetup, two_types
from transforms.mechanisms.synthetic import binary_stream, stream_probabilities

BINS = 2
DATASETS = ("sin", "log", "tlns")
NOISE_NOTE = "INSECURE seeded noise: reproducible, for evaluation only, NOT private"

DEFAULT_EPSILON = 0.6
DEFAULT_WINDOW = 120
RATIO_HIGH_EPSILON = 1.0
"""§6.5: a fraction o of the users has E = 1.0; the others E = DEFAULT_EPSILON; all w = DEFAULT_WINDOW."""
RATIOS = (0.1, 0.3, 0.5, 0.7, 0.9)

SWEEPS = {
    "epsilon": [(e, DEFAULT_WINDOW, None) for e in EPSILON_GRID],
    "window": [(DEFAULT_EPSILON, w, None) for w in WINDOW_GRID],
    "ratio": [(DEFAULT_EPSILON, DEFAULT_WINDOW, o) for o in RATIOS],
}
"""Sweep name -> points ``(epsilon, window, ratio or None)``."""

# The papers' AMRE (S2 Tables 5-6, via spec/pwsm.md §5.4), synthetic datasets only.
# Table 5: E = 0.2, 0.4, 0.6, 0.8, 1.0 at w = 120.  Table 6: w = 40, 80, 120, 160, 200 at E = 0.6.
PAPER_AMRE = {
    ("tlns", "epsilon"): {
        "bd": (35214891.91, 26932213.28, 21900899.91, 19202732.21, 19317360.81),
        "ba": (72479.55, 13456.32, 5228.94, 2583.01, 1447.21),
        "pbd": (5625685.13, 5708081.90, 5761339.31, 5761668.46, 6168585.37),
        "pba": (15734.77, 7593.93, 4031.24, 2415.89, 1449.54),
        "dpbd": (4108894.40, 4001623.91, 4254805.65, 4059568.08, 4156445.29),
        "dpba": (3249.53, 2096.95, 1309.70, 1097.65, 860.35),
    },
    ("sin", "epsilon"): {
        "bd": (14809297.94, 3868423.13, 2822001.85, 2166052.12, 2875381.82),
        "ba": (61604.76, 21010.09, 9193.50, 4678.60, 2659.74),
        "pbd": (1065153.09, 891132.17, 796008.09, 753028.43, 689846.46),
        "pba": (26390.31, 12807.53, 7805.06, 4123.15, 2661.26),
        "dpbd": (376035.19, 331161.83, 321423.27, 315928.35, 312774.69),
        "dpba": (8258.50, 4668.58, 3350.10, 2269.24, 1974.88),
    },
    ("log", "epsilon"): {
        "bd": (12598827.10, 3106749.11, 1520101.37, 1159412.40, 912889.07),
        "ba": (25313.21, 7067.12, 3701.09, 2351.14, 1763.29),
        "pbd": (580200.16, 438397.59, 438337.35, 362035.74, 320952.59),
        "pba": (9856.66, 4316.13, 3365.33, 2339.70, 1837.17),
        "dpbd": (75571.46, 59450.90, 50179.75, 51748.11, 46332.37),
        "dpba": (1788.03, 1415.64, 1405.98, 1174.66, 1178.10),
    },
    ("tlns", "window"): {
        "bd": (10321505.61, 16427785.34, 21900899.91, 22192516.74, 22368956.59),
        "ba": (387.96, 1948.21, 5228.94, 9421.72, 16065.42),
        "pbd": (4177406.45, 4841586.74, 5761339.31, 5943316.00, 6268467.82),
        "pba": (381.45, 1835.74, 4031.24, 6285.94, 7870.36),
        "dpbd": (3579033.68, 3799459.12, 4254805.65, 4320520.18, 4344081.28),
        "dpba": (225.51, 846.94, 1309.70, 2073.61, 2985.93),
    },
    ("sin", "window"): {
        "bd": (769929.84, 1285735.11, 2822001.85, 3444317.33, 6933306.34),
        "ba": (611.27, 3322.22, 9193.50, 16455.49, 25231.48),
        "pbd": (378448.77, 572317.51, 796008.09, 1144032.83, 1339405.34),
        "pba": (649.14, 3298.99, 7805.06, 13784.27, 17342.63),
        "dpbd": (260132.70, 300682.17, 321423.27, 345762.45, 365804.39),
        "dpba": (445.32, 1764.71, 3350.10, 5505.09, 7833.50),
    },
    ("log", "window"): {
        "bd": (110158.58, 750581.32, 1520101.37, 3170285.91, 8658570.30),
        "ba": (770.17, 2006.90, 3701.09, 5943.62, 7973.24),
        "pbd": (47909.95, 207973.60, 438337.35, 582733.67, 759567.65),
        "pba": (820.44, 1946.36, 3365.33, 4270.21, 6007.43),
        "dpbd": (31028.42, 47844.35, 50179.75, 60542.04, 66902.55),
        "dpba": (633.30, 1162.11, 1405.98, 1617.49, 2122.58),
    },
}
PAPER_SOURCE = "S2 Tables 5-6, via spec/pwsm.md §5.4"
PAPER_NOTE = ("Papers' numbers: " + PAPER_SOURCE + ". Their BA/PBA/DPBA numbers come from code that does not "
              "record the last publication (not private, reference_impl §4.4) and ran with resets every 250 slots.")

COLUMNS = ["dataset", "mechanism", "sweep", "epsilon", "window", "ratio", "repeat", "users", "slots", "seed",
           "segment_reset", "w_event_guarantee_across_segments", "amre", "ajsd", "mre", "mae", "fresh_fraction",
           "skipped_fraction", "nullified_fraction", "seconds_per_slot", "wall_seconds", "max_window_usage_ratio",
           "ledger_violations", "cross_segment_max_window_usage_ratio", "noise"]
"""``results.csv`` columns.  ``amre`` is the papers' AMRE, which is a mean SQUARED error."""

TIMING_COLUMNS = ("seconds_per_slot", "wall_seconds")


@dataclass(frozen=True)
class Task:
    """One run: a mechanism on a dataset at one point, one repeat."""

    dataset: str
    mechanism: str
    epsilon: float
    window: int
    ratio: float | None
    repeat: int
    users: int
    slots: int
    seed: int
    segment_reset: int | None = None
    return_arrays: bool = False


def _seed_sequence(*parts) -> np.random.SeedSequence:
    """A seed sequence from stable hashes of ``parts`` (Python's ``hash`` is salted per process)."""
    return np.random.SeedSequence([zlib.crc32(repr(p).encode()) for p in parts])


def _seeds(task: Task) -> tuple[np.random.Generator, np.random.Generator, int]:
    """(stream rng, requirements rng, noise seed): data is shared by all mechanisms of a repeat and point."""
    point = (task.epsilon, task.window, task.ratio)
    data = _seed_sequence(task.seed, "data", task.dataset, point, task.repeat, task.users, task.slots)
    stream, requirements = (np.random.default_rng(child) for child in data.spawn(2))
    noise = _seed_sequence(task.seed, "noise", task.dataset, task.mechanism, point, task.repeat)
    return stream, requirements, int(noise.generate_state(1, np.uint64)[0] >> 1)


def is_dynamic(name: str) -> bool:
    return MECHANISMS[name].requirement_kind is DynamicRequirements


def evaluate_point(task: Task) -> dict:
    """Run ``task`` and return its ``results.csv`` row (plus ``released``/``truth`` arrays if asked)."""
    stream_rng, requirements_rng, noise_seed = _seeds(task)
    dynamic = is_dynamic(task.mechanism)
    if task.ratio is not None and dynamic:
        raise ValueError(f"the ratio sweep takes fixed-requirement mechanisms only, not {task.mechanism}")
    setup = PaperSetup(users=task.users, epsilon=task.epsilon, window=task.window)
    declarations = setup.dynamic_declarations(requirements_rng, task.slots) if dynamic else None
    if dynamic:
        fixed = None
    elif task.ratio is not None:
        fixed = two_types(task.users, task.ratio, (task.window, RATIO_HIGH_EPSILON), (task.window, task.epsilon))
    else:
        fixed = setup.fixed(requirements_rng)
    noise = insecure_seeded_randomness(noise_seed)
    probabilities = stream_probabilities(task.dataset, task.slots, stream_rng)
    users = np.arange(task.users)
    released = np.empty((task.slots, BINS), np.int64)
    truth = np.empty((task.slots, BINS), np.int64)
    kinds = {kind: 0 for kind in ReleaseKind}
    cross = PrivacyLedger(max_window=setup.max_window) if task.segment_reset else None
    mechanism = book = None
    worst, violations, offset, seconds = 0.0, 0, 0, 0.0
    wall = time.perf_counter()
    for t, values in enumerate(binary_stream(probabilities, task.users, stream_rng)):
        new_segment = mechanism is None or (task.segment_reset and t % task.segment_reset == 0)
        if new_segment:
            if book is not None:
                book.close()
                worst, violations = max(worst, book.max_usage_ratio), violations + book.violation_count
            mechanism, book, offset = mechanism_for(task.mechanism, setup, BINS), PrivacyLedger(setup.max_window), t
        requirements = next(declarations) if dynamic else (fixed if new_segment else None)
        batch = SlotBatch.of(users, values, requirements)
        start = time.perf_counter()
        release = mechanism.step(batch, noise)
        seconds += time.perf_counter() - start
        book.record(release.slot, release.charges)
        if cross is not None:
            cross.record(offset + release.slot, release.charges)
        released[t] = release.histogram
        truth[t] = np.bincount(values, minlength=BINS)
        kinds[release.kind] += 1
    book.close()
    worst, violations = max(worst, book.max_usage_ratio), violations + book.violation_count
    if cross is not None:
        cross.close()
    report = utility_report(released, truth)
    row = {"dataset": task.dataset, "mechanism": task.mechanism, "sweep": "", "epsilon": task.epsilon,
           "window": task.window, "ratio": "" if task.ratio is None else task.ratio, "repeat": task.repeat,
           "users": task.users, "slots": task.slots, "seed": task.seed,
           "segment_reset": task.segment_reset or "",
           "w_event_guarantee_across_segments": "false" if task.segment_reset else "true",
           "amre": report.amre, "ajsd": report.ajsd, "mre": report.mre, "mae": report.mae,
           "fresh_fraction": kinds[ReleaseKind.FRESH] / task.slots,
           "skipped_fraction": kinds[ReleaseKind.SKIPPED] / task.slots,
           "nullified_fraction": kinds[ReleaseKind.NULLIFIED] / task.slots,
           "seconds_per_slot": seconds / task.slots, "wall_seconds": time.perf_counter() - wall,
           "max_window_usage_ratio": worst, "ledger_violations": violations,
           "cross_segment_max_window_usage_ratio": "" if cross is None else cross.max_usage_ratio,
           "noise": NOISE_NOTE}
    if task.return_arrays:
        row["released"], row["truth"] = released, truth
    return row


# ---------------------------------------------------------------------------------------------- arguments
class ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ArgumentError(message)


def _names(text: str, valid, what: str) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise ArgumentError(f"no {what} given")
    for name in names:
        if name not in valid:
            raise ArgumentError(f"unknown {what} {name!r}; choose from {', '.join(valid)}")
    return list(dict.fromkeys(names))


def parse_args(argv=None) -> argparse.Namespace:
    parser = _Parser(prog="python -m pipelines.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma list of sin, log, tlns")
    parser.add_argument("--mechanisms", default="all", help=f"comma list of {', '.join(MECHANISMS)} (default all)")
    parser.add_argument("--sweep", default="epsilon,window,ratio", help="comma list of epsilon, window, ratio")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="base seed of data, requirements and (insecure) noise")
    parser.add_argument("--segment-reset", type=int, default=None, metavar="K",
                        help="re-create the mechanism every K slots (the authors' code: 250); breaks w-event "
                             "privacy across segments")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", default="evaluation", help="output directory (created if missing)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    args = parser.parse_args(argv)
    args.datasets = _names(args.datasets, DATASETS, "dataset")
    args.mechanisms = list(MECHANISMS) if args.mechanisms.strip().lower() == "all" else \
        _names(args.mechanisms, list(MECHANISMS), "mechanism")
    args.sweeps = _names(args.sweep, list(SWEEPS), "sweep")
    for name in ("users", "slots", "repeats", "workers"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.seed < 0:
        raise ArgumentError(f"--seed must be >= 0, got {args.seed}")
    if args.segment_reset is not None and args.segment_reset < 1:
        raise ArgumentError(f"--segment-reset must be >= 1, got {args.segment_reset}")
    if args.sweeps == ["ratio"] and all(is_dynamic(m) for m in args.mechanisms):
        raise ArgumentError("the ratio sweep needs at least one fixed-requirement mechanism")
    return args


def plan(args) -> list[tuple[str, Task]]:
    """Every (sweep, task) to report; a point shared by two sweeps is one task (it gets identical seeds)."""
    runs = []
    for dataset in args.datasets:
        for sweep in args.sweeps:
            for mechanism in args.mechanisms:
                if sweep == "ratio" and is_dynamic(mechanism):
                    continue
                for epsilon, window, ratio in SWEEPS[sweep]:
                    for repeat in range(args.repeats):
                        runs.append((sweep, Task(dataset, mechanism, epsilon, window, ratio, repeat, args.users,
                                                 args.slots, args.seed, args.segment_reset)))
    return runs


# ---------------------------------------------------------------------------------------------- running
def execute(tasks: list[Task], workers: int, quiet: bool) -> dict[Task, dict]:
    results: dict[Task, dict] = {}
    started = time.perf_counter()

    def progress():
        if not quiet:
            print(f"\r[evaluate] {len(results)}/{len(tasks)} runs done, {time.perf_counter() - started:.1f} s elapsed",
                  end="", file=sys.stderr, flush=True)

    progress()
    # slow (dynamic) runs first so the pool does not end on one long run
    ordered = sorted(tasks, key=lambda task: not is_dynamic(task.mechanism))
    if workers == 1:
        for task in ordered:
            results[task] = evaluate_point(task)
            progress()
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(evaluate_point, task): task for task in ordered}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                progress()
    if not quiet:
        print(file=sys.stderr)
    return results


def write_csv(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------------------------------------- summary
def _number(value: float) -> str:
    if not np.isfinite(value):
        return str(value)
    return f"{value:,.2f}" if abs(value) >= 100 else f"{value:.4g}"


def _mean_std(values: list[float]) -> str:
    mean = float(np.mean(values))
    if len(values) < 2:
        return _number(mean)
    return f"{_number(mean)} ± {_number(float(np.std(values, ddof=1)))}"


def _point(row: dict, sweep: str):
    """The swept value of ``row`` (each sweep is named after its column)."""
    return row[sweep]


def summary_markdown(rows: list[dict], args, plots: list[str] | None) -> str:
    lines = ["# Evaluation summary", "",
             (f"N = {args.users:,} users, T = {args.slots:,} slots, d = {BINS}, {args.repeats} repeat(s), "
              f"seed {args.seed}. Cells are mean ± sample std over repeats."),
             f"Noise: {NOISE_NOTE}.",
             "AMRE is the papers' metric, which is a mean SQUARED error: (1/T) Σ_t (1/d) ||r_t − c_t||².",
             ("Mechanisms run over the whole stream without resets (w-event guarantee over the whole stream)."
              if not args.segment_reset else
              f"Mechanisms re-created every {args.segment_reset} slots: NO w-event guarantee across segments; "
              "max usage is per segment."), ""]
    for dataset in args.datasets:
        for sweep in args.sweeps:
            chosen = [r for r in rows if r["dataset"] == dataset and r["sweep"] == sweep]
            if not chosen:
                continue
            paper = PAPER_AMRE.get((dataset, sweep))
            points = [p[("epsilon", "window", "ratio").index(sweep)] for p in SWEEPS[sweep]]  # sweep = column
            header = f"| mechanism | {sweep} | AMRE (ours) |" + (" AMRE (papers) |" if paper else "") + \
                " AJSD | fresh / skipped / nullified | ms per slot | max window usage |"
            lines += [f"## {dataset}, {sweep} sweep", "", header,
                      "|" + "---|" * (header.count("|") - 1)]
            for mechanism in args.mechanisms:
                for index, point in enumerate(points):
                    group = [r for r in chosen if r["mechanism"] == mechanism and _point(r, sweep) == point]
                    if not group:
                        continue
                    cells = [mechanism, str(point), _mean_std([r["amre"] for r in group])]
                    if paper:
                        cells.append(_number(paper[mechanism][index]) if mechanism in paper else "–")
                    kinds = " / ".join(f"{np.mean([r[k + '_fraction'] for r in group]):.3f}"
                                       for k in ("fresh", "skipped", "nullified"))
                    cells += [_mean_std([r["ajsd"] for r in group]), kinds,
                              f"{1e3 * np.mean([r['seconds_per_slot'] for r in group]):.3f}",
                              f"{max(r['max_window_usage_ratio'] for r in group):.4f}"]
                    lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
            if paper:
                lines += [PAPER_NOTE, ""]
    if plots is None:
        lines += ["Plots skipped: matplotlib is not installed; plots need `pip install -e .[plot]`.", ""]
    elif plots:
        lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
    return "\n".join(lines)


def write_plots(rows: list[dict], args, directory: str) -> list[str] | None:
    """PNG plots (log-scale y); ``None`` when matplotlib is not importable."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    written = []
    for dataset in args.datasets:
        for sweep in args.sweeps:
            chosen = [r for r in rows if r["dataset"] == dataset and r["sweep"] == sweep]
            if not chosen:
                continue
            figure, axes = plt.subplots(figsize=(6, 4))
            for mechanism in args.mechanisms:
                mine = [r for r in chosen if r["mechanism"] == mechanism]
                points = sorted({_point(r, sweep) for r in mine})
                if not points:
                    continue
                values = [[r["amre"] for r in mine if _point(r, sweep) == p] for p in points]
                axes.errorbar(points, [np.mean(v) for v in values], yerr=[np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in values],
                              marker="o", capsize=3, label=mechanism)
            axes.set(yscale="log", xlabel=sweep, ylabel="AMRE (mean squared error)",
                     title=f"{dataset}: error vs {sweep}")
            axes.legend(fontsize="small")
            name = f"{dataset}_{sweep}_amre.png"
            figure.tight_layout()
            figure.savefig(os.path.join(directory, name), dpi=120)
            plt.close(figure)
            written.append(name)
    figure, axes = plt.subplots(figsize=(6, 4))
    means = [1e3 * np.mean([r["seconds_per_slot"] for r in rows if r["mechanism"] == m]) for m in args.mechanisms]
    axes.bar(args.mechanisms, means)
    axes.set(yscale="log", ylabel="ms per slot", title=f"time per slot (N = {args.users:,})")
    figure.tight_layout()
    figure.savefig(os.path.join(directory, "time_per_slot.png"), dpi=120)
    plt.close(figure)
    return written + ["time_per_slot.png"]


# ---------------------------------------------------------------------------------------------- entry point
def run(argv=None) -> int:
    try:
        args = parse_args(argv)
    except ArgumentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs = plan(args)
    tasks = list(dict.fromkeys(task for _, task in runs))
    if not args.quiet:
        print(f"[evaluate] {len(tasks)} runs ({len(runs)} rows); {NOISE_NOTE}", file=sys.stderr)
    results = execute(tasks, args.workers, args.quiet)
    rows = [{**results[task], "sweep": sweep} for sweep, task in runs]
    os.makedirs(args.output, exist_ok=True)
    write_csv(os.path.join(args.output, "results.csv"), rows)
    plots = write_plots(rows, args, args.output)
    with open(os.path.join(args.output, "summary.md"), "w", encoding="utf-8") as handle:
        handle.write(summary_markdown(rows, args, plots))
    if plots is None and not args.quiet:
        print("[evaluate] plots skipped: matplotlib is not installed (pip install -e .[plot])", file=sys.stderr)
    over = [r for r in rows if r["max_window_usage_ratio"] > 1]
    if over:
        print("!" * 78, file=sys.stderr)
        print(f"WARNING: PRIVACY VIOLATION: {len(over)} run(s) spent more than a user's requirement in some window "
              f"(max window usage ratio up to {max(r['max_window_usage_ratio'] for r in over):.4f}), e.g. "
              f"{over[0]['mechanism']} on {over[0]['dataset']} at E={over[0]['epsilon']}, w={over[0]['window']}",
              file=sys.stderr)
        print("!" * 78, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run())
