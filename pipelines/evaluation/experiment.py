"""The experiment: one run per :class:`Task` (a mechanism on a stream at one sweep point, one repeat), its seeds,
streams and ``results.csv`` row; the plan of every task a sweep needs, and running them on worker processes.

Noise comes from a SEEDED generator so that every run is reproducible: this is for evaluation only and is NOT
private.  Data, requirements and the noise seed depend on ``(seed, dataset, E, w, repeat)`` only, so every
mechanism, scenario and ratio o of one repeat runs on the same stream with the same noise seed (paired runs).
"""

from __future__ import annotations

import csv
import sys
import time
import zlib
import functools
import multiprocessing
import signal
from dataclasses import dataclass

import numpy as np

from pipelines.evaluation.sweeps import (BINS, DEFAULT_DRIFT_EVERY, RATIO_HIGH_EPSILON, RATIO_LOW_WINDOW,
                                         RATIO_SWEEPS, SWEEPS, SYNTHETIC, base_mechanism, is_dynamic, run_labels,
                                         scenario_of, takes_ratios)
from pipelines.evaluation_data import EventStream
from transforms.mechanisms import PrivacyLedger, ReleaseKind, SlotBatch
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.metrics import utility_report
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.registry import mechanism_for_setup
from transforms.mechanisms.scenarios import PaperSetup, redraw_every, two_types
from transforms.mechanisms.synthetic import binary_stream, stream_probabilities

NOISE_NOTE = "INSECURE seeded noise: reproducible, for evaluation only, NOT private"

COLUMNS = ["dataset", "mechanism", "scenario", "sweep", "epsilon", "window", "ratio", "repeat", "users", "slots",
           "bins", "seed", "segment_reset", "w_event_guarantee_across_segments", "amre", "ajsd", "mre", "mae",
           "fresh_fraction", "skipped_fraction", "nullified_fraction", "seconds_per_slot", "wall_seconds", "cpu_seconds",
           "max_window_usage_ratio", "ledger_violations", "cross_segment_max_window_usage_ratio", "noise"]
"""``results.csv`` columns.  ``amre`` is the papers' AMRE, which is a mean SQUARED error."""

TIMING_COLUMNS = ("seconds_per_slot", "wall_seconds", "cpu_seconds")
"""Measured times: ``seconds_per_slot`` is CPU time in ``step``, ``cpu_seconds`` the run's CPU time (data,
mechanism and ledger), so neither counts time spent waiting for a shared machine's cores."""


@dataclass(frozen=True)
class Task:
    """One run: a mechanism on a dataset at one point, one repeat (real streams: their own users and slots)."""

    dataset: str
    mechanism: str
    """A registered name, or ``name:scenario`` for a dynamic mechanism under a non-default requirement scenario."""
    epsilon: float
    window: int
    ratio: float | None
    repeat: int
    users: int
    slots: int
    seed: int
    segment_reset: int | None = None
    return_arrays: bool = False
    ratio_of: str = "epsilon"
    """Which requirement the ratio varies: ``epsilon`` (o users at E = 1.0) or ``window`` (o users at w = 40)."""
    drift_every: int = DEFAULT_DRIFT_EVERY


_STREAMS: dict[str, EventStream] = {}
"""Real streams of this process, by dataset name (installed once per worker)."""


def install_streams(streams: dict[str, EventStream]) -> None:
    """Make ``streams`` available to :func:`evaluate_point` in this process (a pool initializer)."""
    _STREAMS.clear()
    _STREAMS.update(streams)


def seed_sequence(*parts) -> np.random.SeedSequence:
    """A seed sequence from stable hashes of ``parts`` (Python's ``hash`` is salted per process)."""
    return np.random.SeedSequence([zlib.crc32(repr(p).encode()) for p in parts])


def _seeds(task: Task) -> tuple[np.random.Generator, np.random.Generator, int]:
    """(stream rng, requirements rng, noise seed), all shared by every mechanism, scenario and ratio o of a
    repeat at one ``(E, w)``: compared runs see the same data and the same noise seed (paired runs)."""
    point = (task.epsilon, task.window)
    data = seed_sequence(task.seed, "data", task.dataset, point, task.repeat, task.users, task.slots)
    stream, requirements = (np.random.default_rng(child) for child in data.spawn(2))
    noise = seed_sequence(task.seed, "noise", task.dataset, point, task.repeat)
    return stream, requirements, int(noise.generate_state(1, np.uint64)[0] >> 1)


def _slots(task: Task, stream_rng: np.random.Generator):
    """(bins, iterator of every user's value per slot (NO_VALUE = absent) with the slot's true histogram)."""
    if task.dataset in SYNTHETIC:
        values = binary_stream(stream_probabilities(task.dataset, task.slots, stream_rng), task.users, stream_rng)
        return BINS, _with_binary_histograms(values, task.users)
    stream = _STREAMS.get(task.dataset)
    if stream is None:
        raise ValueError(f"real dataset {task.dataset!r} is not loaded in this process")
    if (stream.users, stream.slots) != (task.users, task.slots):
        raise ValueError(f"{task.dataset}: task has {task.users} users x {task.slots} slots, the stream "
                         f"{stream.users} x {stream.slots}")
    return stream.bins, ((values, np.bincount(values[values >= 0], minlength=stream.bins))
                         for values in stream.values())


def _with_binary_histograms(slots, users: int):
    """Each slot's 0/1 values (nobody absent) with their true histogram ``[#zeros, #ones]``."""
    for values in slots:
        ones = np.count_nonzero(values)
        yield values, (users - ones, ones)


def evaluate_point(task: Task) -> dict:
    """Run ``task`` and return its ``results.csv`` row (plus ``released``/``truth`` arrays if asked)."""
    stream_rng, requirements_rng, noise_seed = _seeds(task)
    dynamic = is_dynamic(task.mechanism)
    if task.ratio is not None and dynamic:
        raise ValueError(f"the ratio sweep takes fixed-requirement mechanisms only, not {task.mechanism}")
    bins, slots = _slots(task, stream_rng)
    setup = PaperSetup(users=task.users, epsilon=task.epsilon, window=task.window)
    declarations = setup.dynamic_declarations(requirements_rng, task.slots, redraw_every(
        scenario_of(task.mechanism), task.drift_every)) if dynamic else None
    if dynamic:
        fixed = None
    elif task.ratio is not None and task.ratio_of == "window":
        fixed = two_types(task.users, task.ratio, (RATIO_LOW_WINDOW, task.epsilon), (task.window, task.epsilon))
    elif task.ratio is not None:
        fixed = two_types(task.users, task.ratio, (task.window, RATIO_HIGH_EPSILON), (task.window, task.epsilon))
    else:
        fixed = setup.fixed(requirements_rng)
    noise = insecure_seeded_randomness(noise_seed)
    wall, cpu = time.perf_counter(), time.process_time()
    run = run_task_stream(task, setup, bins, slots, declarations, fixed, noise)
    report = utility_report(run.released, run.truth)
    row = {"dataset": task.dataset, "mechanism": task.mechanism, "scenario": scenario_of(task.mechanism),
           "sweep": "", "epsilon": task.epsilon,
           "window": task.window, "ratio": "" if task.ratio is None else task.ratio, "repeat": task.repeat,
           "users": task.users, "slots": task.slots, "bins": bins, "seed": task.seed,
           "segment_reset": task.segment_reset or "",
           "w_event_guarantee_across_segments": "false" if task.segment_reset else "true",
           "amre": report.amre, "ajsd": report.ajsd, "mre": report.mre, "mae": report.mae,
           "fresh_fraction": run.kinds[ReleaseKind.FRESH] / task.slots,
           "skipped_fraction": run.kinds[ReleaseKind.SKIPPED] / task.slots,
           "nullified_fraction": run.kinds[ReleaseKind.NULLIFIED] / task.slots,
           "seconds_per_slot": run.step_seconds / task.slots, "wall_seconds": time.perf_counter() - wall,
           "cpu_seconds": time.process_time() - cpu,
           "max_window_usage_ratio": run.max_usage_ratio, "ledger_violations": run.violations,
           "cross_segment_max_window_usage_ratio": "" if run.cross_usage_ratio is None else run.cross_usage_ratio,
           "noise": NOISE_NOTE}
    if task.return_arrays:
        row["released"], row["truth"] = run.released, run.truth
    return row


@dataclass(frozen=True, eq=False)
class StreamRun:
    """What :func:`run_task_stream` measured over one task's slots."""

    released: np.ndarray
    """(slots, bins) published histograms."""
    truth: np.ndarray
    """(slots, bins) true histograms (NOT private: for the metrics)."""
    kinds: dict[ReleaseKind, int]
    """Slots of each release kind."""
    max_usage_ratio: float
    """The largest share of a requirement spent in any window (per segment with ``segment_reset``)."""
    violations: int
    step_seconds: float
    """CPU seconds spent in the mechanism's ``step``."""
    cross_usage_ratio: float | None
    """With ``segment_reset``: the largest share over the whole stream, across segments; else ``None``."""


def run_task_stream(task: Task, setup: PaperSetup, bins: int, slots, declarations, fixed, noise) -> StreamRun:
    """Step ``task``'s mechanism through every slot, each release checked by a ledger.

    ``slots`` yields (every user's value, true histogram) per slot; ``declarations`` yields each slot's dynamic
    requirements (``None`` for fixed ones, which ``fixed`` holds and every new segment declares).  The mechanism
    and its ledger are re-created every ``task.segment_reset`` slots; a cross-segment ledger then measures what
    the whole stream spent."""
    dynamic = declarations is not None
    users = range(task.users)  # every user reports: SlotBatch.of knows them as 0..n-1 without a scan
    released = np.empty((task.slots, bins), np.int64)
    truth = np.empty((task.slots, bins), np.int64)
    kinds = {kind: 0 for kind in ReleaseKind}
    cross = PrivacyLedger(max_window=setup.max_window) if task.segment_reset else None
    engine: Engine | None = None
    worst, violations, offset, seconds = 0.0, 0, 0, 0.0

    def end_segment(engine: Engine) -> tuple[float, int, float]:
        engine.close()
        book = engine.ledger
        return max(worst, book.max_usage_ratio), violations + book.violation_count, seconds + engine.mechanism_seconds

    for t, (values, true_histogram) in enumerate(slots):
        new_segment = engine is None or (task.segment_reset and t % task.segment_reset == 0)
        if new_segment:
            if engine is not None:
                worst, violations, seconds = end_segment(engine)
            engine = Engine(mechanism_for_setup(base_mechanism(task.mechanism), setup, bins), noise,
                            PrivacyLedger(setup.max_window), clock=time.process_time)
            offset = t
        requirements = next(declarations) if dynamic else (fixed if new_segment else None)
        release = engine.step(SlotBatch.of(users, values, requirements))
        if cross is not None:
            cross.record(offset + release.slot, release.charges)
        released[t] = release.histogram
        truth[t] = true_histogram
        kinds[release.kind] += 1
    worst, violations, seconds = end_segment(engine)
    if cross is not None:
        cross.close()
    return StreamRun(released, truth, kinds, worst, violations, seconds,
                     None if cross is None else cross.max_usage_ratio)


def plan(args, streams: dict[str, EventStream] | None = None) -> list[tuple[str, Task]]:
    """Every (sweep, task) to report; a point shared by two sweeps is one task (it gets identical seeds)."""
    streams = streams or {}
    runs = []
    for dataset in args.datasets:
        if dataset not in SYNTHETIC and dataset not in streams:
            continue
        users, slots = (args.users, args.slots) if dataset in SYNTHETIC else \
            (streams[dataset].users, streams[dataset].slots)
        for sweep in args.sweeps:
            for mechanism in run_labels(args.mechanisms, args.scenarios):
                if sweep in RATIO_SWEEPS and not takes_ratios(mechanism):
                    continue
                for epsilon, window, ratio in SWEEPS[sweep]:
                    for repeat in range(args.repeats[sweep]):
                        runs.append((sweep, Task(dataset, mechanism, epsilon, window, ratio, repeat, users, slots,
                                                 args.seed, args.segment_reset,
                                                 ratio_of="window" if sweep == "wratio" else "epsilon",
                                                 drift_every=args.drift_every)))
    return runs


def execute(tasks: list[Task], workers: int, quiet: bool, streams: dict[str, EventStream] | None = None,
            on_result=None) -> dict[Task, dict]:
    """Run every task on ``workers`` processes; real streams go to each worker once.

    Repeat by repeat (within one, slow dynamic runs first), so that a run cut short has whole repeats of every
    point; ``on_result(task, row)`` sees each result as it arrives."""
    streams = streams or {}
    results: dict[Task, dict] = {}
    started = time.perf_counter()

    def progress():
        if not quiet:
            print(f"\r[evaluate] {progress_text(len(results), len(tasks), time.perf_counter() - started)}",
                  end="", file=sys.stderr, flush=True)

    progress()
    ordered = sorted(tasks, key=lambda task: (task.repeat, not is_dynamic(task.mechanism), -task.users * task.slots))

    def done(task, row):
        results[task] = row
        if on_result is not None:
            on_result(task, row)
        progress()
    run_in_pool(ordered, workers, evaluate_point, install_streams, streams, done)
    if not quiet:
        print(file=sys.stderr)
    return results


def progress_text(done: int, total: int, elapsed: float) -> str:
    """``3/10 runs done, 12.0 s elapsed, about 28 s left``: the time left is the mean time of the runs done so far
    times the runs left (the slow dynamic runs go first, so it errs long early on); none before the first run."""
    text = f"{done}/{total} runs done, {elapsed:.1f} s elapsed"
    if not done or done >= total:
        return text
    left = elapsed / done * (total - done)
    return text + (f", about {left / 60:.0f} min left" if left >= 120 else f", about {left:.0f} s left") + "   "


def run_in_pool(ordered: list, workers: int, run, install, streams, done) -> None:
    """``done(task, run(task))`` for every task, in ``ordered``'s order of submission, on ``workers`` processes
    (in this one for 1), each of which first calls ``install(streams)``.

    The workers ignore SIGINT (a Ctrl-C reaches the whole process group: only this process answers it) and die of
    SIGTERM whatever handler this process has; any
    exception here, a KeyboardInterrupt or the one a SIGTERM handler raises included, terminates them before it
    propagates (``multiprocessing.Pool.terminate``), so a stopped evaluation leaves no worker running."""
    if workers == 1:
        install(streams)
        for task in ordered:
            done(task, run(task))
        return
    with multiprocessing.Pool(workers, initializer=_quiet_worker, initargs=(install, streams)) as pool:
        for task, row in pool.imap_unordered(functools.partial(_paired, run), ordered, chunksize=1):
            done(task, row)  # (leaving the block terminates the workers, on an error too)


def _quiet_worker(install, streams) -> None:
    """A worker: deaf to Ctrl-C, ended by SIGTERM (``Pool.terminate``) without the parent's handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    install(streams)


def _paired(run, task):
    return task, run(task)


def run_labelled(runs: list[tuple[str, object]], path: str, columns: list[str], label: str, execute_tasks
                 ) -> list[dict]:
    """Every task of ``runs`` (``(name, task)`` pairs; a task may carry several names) once, by
    ``execute_tasks(tasks, on_result)``, each finished run written at once to ``path`` (one row per name, the name
    in column ``label``) so that a run cut short can still be rendered; the rows, one per pair of ``runs``."""
    tasks = list(dict.fromkeys(task for _, task in runs))
    names_of: dict = {}
    for name, task in runs:
        names_of.setdefault(task, []).append(name)
    with open(path, "w", newline="", encoding="utf-8") as partial:
        writer = csv.DictWriter(partial, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()

        def keep(task, row):
            writer.writerows({**row, label: name} for name in names_of[task])
            partial.flush()
        results = execute_tasks(tasks, keep)
    return [{**results[task], label: name} for name, task in runs]


_CSV_TYPES = {"epsilon": float, "window": int, "repeat": int, "users": int, "slots": int, "bins": int, "seed": int,
              "amre": float, "ajsd": float, "mre": float, "mae": float, "fresh_fraction": float,
              "skipped_fraction": float, "nullified_fraction": float, "seconds_per_slot": float,
              "wall_seconds": float, "cpu_seconds": float, "max_window_usage_ratio": float, "ledger_violations": int}


def read_csv(path: str) -> list[dict]:
    """The rows of a ``results.csv``, typed as :func:`evaluate_point` returns them."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for name, kind in _CSV_TYPES.items():
            if name in row:  # results from before a column existed (cpu_seconds) lack it
                row[name] = kind(row[name])
        row["ratio"] = float(row["ratio"]) if row["ratio"] else ""
    return rows


def write_csv(path: str, rows: list[dict], columns: list[str] = COLUMNS) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
