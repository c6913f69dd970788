"""The LDP-IDS experiments (spec ``ldp_ids.md`` §8): one run of a registered local-DP method on one stream, its
streams, seeds and ``results.csv`` row, and running many on worker processes.

A run streams every slot through :class:`~transforms.mechanisms.engine.Engine` with a
:class:`~transforms.mechanisms.ledger.PrivacyLedger` that checks every window of every user; the users' reports
are simulated in aggregate (``simulation="aggregate"``, exact in distribution, spec §3.5).  Streams:

* ``lns``, ``sin``, ``log``: n users, d = 2, exactly ``round(p_t n)`` ones on a fresh uniform subset per slot
  (:func:`~transforms.mechanisms.synthetic.exact_count_stream`; LNS redrawn until ``p_t > floor``);
* ``lns-con``, ``sin-con``, ``log-con``: the continuous versions for mean estimation (Fig. 10, spec §8.1): each
  user's value is drawn afresh per slot from N(p_t, σ²) around the same ``p_t`` as the binary stream's (σ =
  ``con_sigma``; the paper's printed σ = 10 dwarfs p_t, ambiguity 12), reported by the ``*-mean`` methods (HM,
  spec §5.13) on the declared domain [0, ``con_high``], clipped by the mechanism; the truth is the mean of the
  clipped values;
* ``taxi``, ``foursquare``, ``gowalla``: the real files under ``--data-dir`` (:mod:`pipelines.evaluation.ldp_data`).

Data and noise seeds depend on ``(seed, dataset, n, T, fluctuation, repeat)`` only, so every method and every
``(ε, w, β)`` of one repeat sees the same stream and the same noise seed (paired runs); the probability path
does not depend on n either (the n sweep redraws only the subsets, §8.1).  The noise generator is SEEDED:
reproducible, for evaluation only, NOT private.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pipelines.evaluation.experiment import NOISE_NOTE, seed_sequence, run_in_pool
from pipelines.evaluation.ldp_data import LdpStream
from pipelines.evaluation.ldp_metrics import auc, event_labels, mae, mre, mse, reduce
from transforms.mechanisms import MECHANISMS, Estimate, PrivacyLedger, ReleaseKind, SlotBatch, TrustModel
from transforms.mechanisms.domain import NO_VALUE
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.registry import mechanism_class, params_from_options
from transforms.mechanisms.requirements import FixedRequirement, FixedRequirements
from transforms.mechanisms.synthetic import exact_count_stream, exact_counts, lns_probabilities, log_probabilities, \
    sin_probabilities

PAPER_METHODS = ("lbu", "lsp", "lbd", "lba", "lpu", "lpd", "lpa")
"""The seven methods of the paper's Section 7, in its order."""
ADAPTIVE = ("lbd", "lba", "lpd", "lpa")
LOCAL_METHODS = tuple(name for name, cls in MECHANISMS.items() if cls.trust is not TrustModel.CENTRAL)
"""Every registered local-DP method (any of them runs by name)."""
EXTENSIONS = tuple(name for name in LOCAL_METHODS if name not in PAPER_METHODS and name != "plbu"
                   and MECHANISMS[name].estimates is Estimate.FREQUENCIES)
"""The Fig. 11 adaptations registered so far (LB-/LP- DSATw, RescueDP, ...)."""

SYNTHETIC = ("lns", "sin", "log")
REAL = ("taxi", "foursquare", "gowalla")
DATASETS = SYNTHETIC + REAL
"""The frequency-estimation datasets."""
CON = ("lns-con", "sin-con", "log-con")
"""The continuous synthetic streams of mean estimation (Fig. 10)."""
ALL_DATASETS = DATASETS + CON
NAMES = {"lns": "LNS", "sin": "Sin", "log": "Log", "taxi": "Taxi", "foursquare": "Foursquare", "gowalla": "Gowalla",
         "lns-con": "LNS-Con", "sin-con": "Sin-Con", "log-con": "Log-Con"}
CON_SIGMA = 0.1
"""σ of the -Con values N(p_t, σ²) (the paper prints 10, which dwarfs p_t = 0.05-0.25: spec §8.1, ambiguity 12)."""
CON_HIGH = 1.0
"""The -Con streams' declared domain is [0, CON_HIGH] (the binary streams' range); values outside are clipped."""
MEAN_SUFFIX = "-mean"

DEFAULT_FLUCTUATION = {"lns": 0.0025, "sin": 0.01}
"""LNS's sqrt(Q) and Sin's b (spec §8.1)."""
LNS_FLOOR = 0.01
"""LNS paths are redrawn until every p_t exceeds this (trap T14; the spec's re-simulation used 0.01)."""

COLUMNS = ["experiment", "dataset", "method", "epsilon", "window", "beta", "users", "slots", "bins", "fluctuation",
           "repeat", "seed", "path_attempts", "mre", "mse", "mae", "mre_floor", "auc", "events", "reduction",
           "bits_per_user_slot", "fresh_fraction", "skipped_fraction", "nullified_fraction", "ledger_violations",
           "max_window_usage_ratio", "cpu_seconds", "noise"]


def method_name(name: str) -> str:
    return name.upper()


def dataset_name(name: str) -> str:
    return NAMES.get(name, name)


@dataclass(frozen=True)
class LdpTask:
    """One run: a local method on a stream at ``(ε, w, β)``, one repeat.  ``users``/``slots`` are the synthetic n
    and T (a real stream's own otherwise); ``fluctuation`` is LNS's sqrt(Q) or Sin's b (None: the default)."""

    dataset: str
    method: str
    epsilon: float
    window: int
    beta: float
    users: int
    slots: int
    repeat: int
    seed: int
    fluctuation: float | None = None
    mre_floor: float | None = None
    """The MRE's sanity bound in frequency units (None: 1/n)."""
    reduction: str | None = None
    """Event monitoring's statistic (None: ``one`` for binary data, ``value`` for a mean, ``index`` otherwise)."""
    con_sigma: float = CON_SIGMA
    con_high: float = CON_HIGH
    exchangeable: bool = False
    """Synthetic binary streams from their counts alone (spec §3.5: hypergeometric true counts of each sample,
    ``Engine.step_exchangeable``), no user's value built; the same law as the users' values."""


_STREAMS: dict[str, LdpStream] = {}


def install_streams(streams: dict[str, LdpStream]) -> None:
    """Make the real ``streams`` available to :func:`run_task` in this process (a pool initializer)."""
    _STREAMS.clear()
    _STREAMS.update(streams)


def base_dataset(name: str) -> str:
    """The binary stream whose ``p_t`` a -Con stream shares (``lns-con`` -> ``lns``); other names unchanged."""
    return name.removesuffix("-con")


def is_mean(method: str) -> bool:
    """Whether ``method`` estimates a mean (HM, spec §5.13) rather than frequencies."""
    return MECHANISMS[method].estimates is Estimate.MEAN


def mean_version(method: str) -> str | None:
    """The registered mean-estimating version of a local method (``lpa`` -> ``lpa-mean``), if any."""
    if method in MECHANISMS and is_mean(method):
        return method
    name = method + MEAN_SUFFIX
    return name if name in MECHANISMS and is_mean(name) else None


def bins_of(dataset: str, streams: dict[str, LdpStream] | None = None) -> int:
    """d of a dataset: 1 (one mean) for a -Con stream, 2 for a binary one, a loaded real stream's own."""
    if dataset in CON:
        return 1
    if dataset in SYNTHETIC:
        return 2
    return (streams or _STREAMS)[dataset].bins


def fluctuation_of(task: LdpTask) -> float | None:
    return DEFAULT_FLUCTUATION.get(base_dataset(task.dataset)) if task.fluctuation is None else task.fluctuation


def _data_parts(task: LdpTask, dataset: str | None = None) -> tuple:
    return (task.seed, dataset or task.dataset, task.slots, fluctuation_of(task), task.repeat)


def probability_path(task: LdpTask) -> tuple[np.ndarray, int]:
    """The synthetic stream's ``p_t`` (t = 1..T) and how many LNS walks it took (1 for Sin and Log); a -Con
    stream's is its binary stream's at the same (seed, T, fluctuation, repeat)."""
    dataset = base_dataset(task.dataset)
    rng = np.random.default_rng(seed_sequence("path", *_data_parts(task, dataset)))
    if dataset == "lns":
        path = lns_probabilities(task.slots, rng, sigma=fluctuation_of(task), floor=LNS_FLOOR)
        return path.probabilities, path.attempts
    if dataset == "sin":
        return sin_probabilities(task.slots, frequency=fluctuation_of(task)), 1
    if dataset == "log":
        return log_probabilities(task.slots), 1
    raise ValueError(f"{task.dataset!r} is not a synthetic stream")


def con_values(probabilities: np.ndarray, users: int, sigma: float, high: float, rng: np.random.Generator
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per slot, every user's value drawn afresh from N(p_t, σ²) (not clipped: the mechanism clips to its declared
    [0, high]) and the true mean of the clipped values (length 1)."""
    if not (sigma >= 0 and high > 0):
        raise ValueError(f"-Con streams need sigma >= 0 and high > 0, got {sigma!r} and {high!r}")
    for p in probabilities:
        values = rng.normal(p, sigma, users)
        yield values, np.array([np.clip(values, 0.0, high).mean()])


def _slots(task: LdpTask) -> tuple[int, int, int, Iterator[tuple[np.ndarray, np.ndarray]]]:
    """(bins, users, path attempts, per slot: every user's value (-1: absent) and the true frequencies)."""
    if task.exchangeable and task.dataset not in SYNTHETIC:
        raise ValueError(f"{task.dataset}: exchangeable counts are for the synthetic binary streams "
                         f"({', '.join(SYNTHETIC)})")
    if task.dataset in CON:
        probabilities, attempts = probability_path(task)
        rng = np.random.default_rng(seed_sequence("values", *_data_parts(task), task.users))
        return 1, task.users, attempts, con_values(probabilities, task.users, task.con_sigma, task.con_high, rng)
    if task.dataset in SYNTHETIC:
        probabilities, attempts = probability_path(task)
        rng = np.random.default_rng(seed_sequence("subsets", *_data_parts(task), task.users))
        n = task.users

        def binary():
            for values in exact_count_stream(probabilities, n, rng):
                ones = int(np.count_nonzero(values))
                yield values, np.array([n - ones, ones], np.float64) / n

        def counts():  # the same stream's counts, for step_exchangeable
            for ones in exact_counts(probabilities, n).tolist():
                held = np.array([n - ones, ones])
                yield held, held / n
        return 2, n, attempts, counts() if task.exchangeable else binary()
    stream = _STREAMS.get(task.dataset)
    if stream is None:
        raise ValueError(f"real dataset {task.dataset!r} is not loaded in this process")
    return stream.bins, stream.users, 1, stream.slots_with_frequencies()


def build_method(task: LdpTask, bins: int):
    """The registered method ``task.method`` at ``(ε, w, β)``, its reports simulated in aggregate (a mean method:
    user by user, on the declared domain [0, ``con_high``], values outside clipped)."""
    fields = {f.name for f in dataclasses.fields(mechanism_class(task.method).params_type)}
    if is_mean(task.method):
        common = {"beta": task.beta, "low": 0.0, "high": task.con_high, "out_of_range": "clip"}
    else:
        common = {"simulation": "aggregate", "beta": task.beta}
    common = {name: value for name, value in common.items() if name in fields}
    return mechanism_class(task.method)(params_from_options(task.method, bins, epsilon=task.epsilon,
                                                            window=task.window, max_window=task.window, **common))


@dataclass(frozen=True, eq=False)
class Run:
    """What one run released, against the truth (NOT private), and what it cost."""

    released: np.ndarray
    truth: np.ndarray
    bits: np.ndarray
    """Bits sent per slot (``last_bits``: reports plus request bits, spec §6.3)."""
    kinds: dict
    violations: int
    max_usage_ratio: float
    users: int
    attempts: int


def run_stream(task: LdpTask) -> Run:
    """Step the task's method through every slot via the engine, every charge checked by a ledger."""
    bins, n, attempts, slots = _slots(task)
    noise = seed_sequence("noise", *_data_parts(task), task.users)
    mechanism = build_method(task, bins)
    engine = Engine(mechanism, insecure_seeded_randomness(int(noise.generate_state(1, np.uint64)[0] >> 1)),
                    PrivacyLedger(max_window=task.window), clock=time.process_time)
    requirements = FixedRequirements.uniform(FixedRequirement(task.window, task.epsilon), n)
    users = range(n)
    released, truth, bits = [], [], []
    kinds = {kind: 0 for kind in ReleaseKind}
    for t, (values, frequencies) in enumerate(slots):
        if task.exchangeable:  # `values` are the slot's counts; the users register without values
            batch = SlotBatch.of(users, np.full(n, NO_VALUE), requirements) if t == 0 else SlotBatch.empty()
            release = engine.step_exchangeable(batch, values)
        else:
            release = engine.step(SlotBatch.of(users, values, requirements if t == 0 else None))
        released.append(release.estimate)
        truth.append(frequencies)
        bits.append(mechanism.last_bits)
        kinds[release.kind] += 1
    engine.close()
    ledger = engine.ledger
    return Run(np.array(released), np.array(truth), np.array(bits, np.int64), kinds, ledger.violation_count,
               ledger.max_usage_ratio, n, attempts)


def run_task(task: LdpTask) -> dict:
    """Run ``task``; its ``results.csv`` row (without ``experiment``)."""
    cpu = time.process_time()
    run = run_stream(task)
    slots = run.released.shape[0]
    floor = 1.0 / run.users if task.mre_floor is None else task.mre_floor
    reduction = task.reduction or {1: "value", 2: "one"}.get(run.truth.shape[1], "index")
    labels = event_labels(reduce(run.truth, reduction))
    return {"dataset": task.dataset, "method": task.method, "epsilon": task.epsilon, "window": task.window,
            "beta": task.beta, "users": run.users, "slots": slots, "bins": run.truth.shape[1],
            "fluctuation": "" if fluctuation_of(task) is None else fluctuation_of(task), "repeat": task.repeat,
            "seed": task.seed, "path_attempts": run.attempts,
            "mre": mre(run.released, run.truth, floor), "mse": mse(run.released, run.truth),
            "mae": mae(run.released, run.truth), "mre_floor": floor,
            "auc": auc(labels, reduce(run.released, reduction)), "events": int(labels.sum()), "reduction": reduction,
            "bits_per_user_slot": float(run.bits.sum()) / (run.users * slots),
            "fresh_fraction": run.kinds[ReleaseKind.FRESH] / slots,
            "skipped_fraction": run.kinds[ReleaseKind.SKIPPED] / slots,
            "nullified_fraction": run.kinds[ReleaseKind.NULLIFIED] / slots,
            "ledger_violations": run.violations, "max_window_usage_ratio": run.max_usage_ratio,
            "cpu_seconds": time.process_time() - cpu, "noise": NOISE_NOTE}


def execute(tasks: list[LdpTask], workers: int, quiet: bool, streams: dict[str, LdpStream],
            on_result=None) -> dict[LdpTask, dict]:
    """Run every task on ``workers`` processes, repeat by repeat (the largest first within one), so that a run cut
    short has whole repeats; ``on_result(task, row)`` sees each result as it arrives."""
    results: dict[LdpTask, dict] = {}
    started = last = time.perf_counter()
    ordered = sorted(tasks, key=lambda task: (task.repeat, -task.users * task.slots))

    def done(task, row):
        nonlocal last
        results[task] = row
        if on_result is not None:
            on_result(task, row)
        if not quiet and (time.perf_counter() - last > 10 or len(results) == len(tasks)):
            last = time.perf_counter()
            print(f"\r[ldp-ids] {len(results)}/{len(tasks)} runs done, {time.perf_counter() - started:.0f} s elapsed",
                  end="", file=sys.stderr, flush=True)
    run_in_pool(ordered, workers, run_task, install_streams, streams, done)
    if not quiet:
        print(file=sys.stderr)
    return results


_TYPES = {"epsilon": float, "window": int, "beta": float, "users": int, "slots": int, "bins": int, "repeat": int,
          "seed": int, "path_attempts": int, "mre": float, "mse": float, "mae": float, "mre_floor": float,
          "auc": float, "events": int, "bits_per_user_slot": float, "fresh_fraction": float,
          "skipped_fraction": float, "nullified_fraction": float, "ledger_violations": int,
          "max_window_usage_ratio": float, "cpu_seconds": float}


def read_csv(path: str) -> list[dict]:
    """The rows of an LDP-IDS ``results.csv``, typed as :func:`run_task` returns them."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for name, kind in _TYPES.items():
            row[name] = kind(row[name])
        row["fluctuation"] = float(row["fluctuation"]) if row["fluctuation"] else ""
    return rows


EPSILONS = (0.5, 1.0, 1.5, 2.0, 2.5)
WINDOWS = (10, 20, 30, 40, 50)
BETAS = (0.1, 0.3, 0.5, 0.7, 0.9)
USER_FACTORS = (0.25, 0.5, 1.0, 2.0)
FLUCTUATIONS = {"lns": (0.001, 0.002, 0.0025, 0.003, 0.004), "sin": (0.005, 0.01, 0.02, 0.04, 0.08)}
DEFAULT_EPSILON, DEFAULT_WINDOW, DEFAULT_BETA = 1.0, 20, 0.5
ROC_WINDOW = 50
EXTENSION_WINDOW = 30


@dataclass(frozen=True)
class Experiment:
    """One of the paper's figures or tables: the ``results.csv`` column it varies and its datasets (its points and
    methods: :func:`pipelines.evaluation.ldp_cli.plan`)."""

    name: str
    figure: str
    column: str
    datasets: tuple[str, ...]


EXPERIMENTS = {
    "epsilon": Experiment("epsilon", "Fig. 3", "epsilon", DATASETS),
    "window": Experiment("window", "Figs. 4, 5", "window", DATASETS),
    "users": Experiment("users", "Fig. 6 (n)", "users", SYNTHETIC),
    "fluctuation": Experiment("fluctuation", "Fig. 6 (sqrt(Q), b)", "fluctuation", ("lns", "sin")),
    "beta": Experiment("beta", "Fig. 8", "beta", DATASETS),
    "table2": Experiment("table2", "Table 2, Fig. 7", "epsilon", SYNTHETIC),
    "extensions": Experiment("extensions", "Fig. 11", "epsilon", SYNTHETIC),
    "mean": Experiment("mean", "Fig. 10 (a, b)", "fluctuation", ("lns-con", "sin-con")),
    "mean-epsilon": Experiment("mean-epsilon", "Fig. 10 (ε)", "epsilon", CON),
}
"""Experiment name -> what it varies (Fig. 5's ROC is the window experiment at w = 50; Fig. 7's bits come from
every experiment's LNS rows and Table 2's; ``mean`` and ``mean-epsilon`` run the ``*-mean`` versions of the
methods)."""
MEAN_EXPERIMENTS = ("mean", "mean-epsilon")
