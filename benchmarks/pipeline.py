"""End-to-end cost of privacy: the private pipeline vs exact histograms, same source, slotting and sink.

    python -m benchmarks.pipeline --records 1000000 --json

generates ``records`` JSON lines (``users`` users reporting into ``bins``
bins over ``slots`` one-minute slots), then runs on FnApiRunner, one after the
other in this process:

* private: ReadLines -> ParseEvents -> PrivateStreamHistogram (PBD, per-user ledger) -> release files;
* baseline: ReadLines -> ParseEvents -> exact count per (slot, bin) -> one record per slot -> release files.

It prints ``{"records": N, "private_seconds": ..., "baseline_seconds": ..., "ratio": private/baseline,
"records_per_second": N/private}`` plus the sizes used and each run's CPU seconds (this process and its
workers): on a shared machine the CPU time moves less than the wall time.  With ``--repeats K`` both
pipelines run K times, alternating, and each one's fastest run is reported.  ``--workers 2`` runs
FnApiRunner with two worker processes (measured here: slower, the data crosses processes by gRPC).
Any other argument is a Beam option, e.g. ``--runner PrismRunner --prism_location PATH --environment_type
EXTERNAL --environment_config 127.0.0.1:PORT`` to run both pipelines on another runner (integration/bench_runners.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from transforms.declarations import RequirementPolicy
from transforms.lines import ReadLines
from transforms.mechanisms import FixedRequirement
from transforms.parse import ParseConfig, ParseEvents
from transforms.private_histogram import PrivateStreamHistogram
from transforms.sinks import WriteRecords

SLOT_SECONDS = 60.0


def write_input(path: str, records: int, users: int, bins: int, slots: int, seed: int = 0) -> None:
    """Random events, written in chunks (data generation is not timed)."""
    gen = np.random.default_rng(seed)
    with open(path, "w") as out:
        for start in range(0, records, 200_000):
            n = min(200_000, records - start)
            who = gen.integers(0, users, n)
            when = gen.uniform(0, slots * SLOT_SECONDS, n).round(3)
            what = (who * 7 + (when // 600).astype(np.int64)) % bins  # users drift slowly over the grid
            out.write("".join(f'{{"user": "u{u}", "time": {t}, "value": {v}}}\n' for u, t, v in zip(who, when, what)))


def histogram_record(key_counts, bins: int, slot_seconds: float) -> dict:
    (stream, slot), counts = key_counts
    histogram = [0] * bins
    for b, n in counts:
        histogram[b] = n
    return {"stream": stream, "slot": slot, "slot_start": slot * slot_seconds, "slot_end": (slot + 1) * slot_seconds,
            "mechanism": "exact", "mechanism_slot": slot + 1, "histogram": histogram, "kind": "fresh",
            "epsilon": "0", "predicted_error": 0.0, "registered_users": 0}


class ExactHistograms(beam.PTransform):
    """Events -> one exact (NOT private) release record per (stream, slot): the same job without privacy."""

    def __init__(self, slot_seconds: float, bins: int):
        super().__init__()
        self.slot_seconds, self.bins = slot_seconds, bins

    def expand(self, events):
        slot_seconds = self.slot_seconds
        return (events
                | "KeyBySlotAndBin" >> beam.Map(lambda e: ((e.stream, int(e.time // slot_seconds), e.value), 1))
                | "Count" >> beam.CombinePerKey(sum)
                | "KeyBySlot" >> beam.MapTuple(lambda key, n: ((key[0], key[1]), (key[2], n)))
                | "GroupBySlot" >> beam.GroupByKey()
                | "Record" >> beam.Map(histogram_record, self.bins, slot_seconds))


def pipeline(workers: int = 1, beam_args: tuple[str, ...] = ()) -> beam.Pipeline:
    """FnApiRunner in this process, or with ``workers`` worker processes (which import this checkout), or the
    runner that ``beam_args`` name."""
    if beam_args:
        return beam.Pipeline(options=PipelineOptions(list(beam_args)))
    if workers == 1:
        return beam.Pipeline(runner=FnApiRunner())
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(
        direct_num_workers=workers, direct_running_mode="multi_processing"))


def run_private(source: str, output: str, bins: int, workers: int = 1, beam_args: tuple[str, ...] = ()) -> float:
    start = time.perf_counter()
    with pipeline(workers, beam_args) as p:
        events = p | ReadLines(source) | ParseEvents(ParseConfig(bins=bins))
        outputs = events.events | PrivateStreamHistogram(
            "pbd", SLOT_SECONDS, bins, policy=RequirementPolicy(default=FixedRequirement(window=120, epsilon=1.0)))
        outputs["releases"] | WriteRecords(os.path.join(output, "private"), "release")
    return time.perf_counter() - start


def run_baseline(source: str, output: str, bins: int, workers: int = 1, beam_args: tuple[str, ...] = ()) -> float:
    start = time.perf_counter()
    with pipeline(workers, beam_args) as p:
        events = p | ReadLines(source) | ParseEvents(ParseConfig(bins=bins))
        events.events | ExactHistograms(SLOT_SECONDS, bins) | WriteRecords(os.path.join(output, "baseline"), "release")
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """CPU time of this process and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--bins", type=int, default=100)
    parser.add_argument("--slots", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=1, help="FnApiRunner worker processes (default: in process)")
    parser.add_argument("--repeats", type=int, default=1, help="run both pipelines this many times, alternating, "
                        "and report each one's fastest run (other processes on the machine slow single runs)")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args, beam_args = parser.parse_known_args(argv)
    times: dict = {"baseline": [], "private": []}
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "events.jsonl")
        write_input(source, args.records, args.users, args.bins, args.slots)
        for _ in range(args.repeats):  # alternating, so both see the same load from other processes
            for name, run in (("baseline", run_baseline), ("private", run_private)):
                cpu = cpu_seconds()
                wall = run(source, work, args.bins, args.workers, tuple(beam_args))
                times[name].append((wall, cpu_seconds() - cpu))
    (baseline, baseline_cpu), (private, private_cpu) = min(times["baseline"]), min(times["private"])
    result = {"records": args.records, "users": args.users, "bins": args.bins, "slots": args.slots,
              "workers": args.workers, "beam_args": beam_args, "repeats": args.repeats, "private_seconds": private,
              "baseline_seconds": baseline, "ratio": private / baseline, "records_per_second": args.records / private,
              "private_cpu_seconds": private_cpu, "baseline_cpu_seconds": baseline_cpu}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
