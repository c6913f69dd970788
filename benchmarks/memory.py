"""Peak memory of the T-Drive replay against a non-private pipeline over the same input.

    python -m benchmarks.memory --input /work/shared/data/tdrive_sample600/taxi_log_2008_by_id.tar.xz --json

Runs, each in its own process (one after the other, FnApiRunner in process):

* private: ``python -m pipelines.replay`` as the README runs it on T-Drive (tdrive grid, 10-minute slots,
  ``--carry-forward``, PBD with two levels), writing every output and ``report.json``;
* baseline: the same reader (``ReadTDrive``), parser and grid, then an exact count per (slot, bin) written
  as one record per slot: what the job costs without privacy.

Prints ``{"private_peak_mib": ..., "baseline_peak_mib": ..., "ratio": private/baseline, ...}`` (peak resident
set size of each process, from ``wait4``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SLOT_SECONDS = 600.0
PRIVATE_FLAGS = ["--input-format", "tdrive", "--binning", "tdrive", "--slot-seconds", str(SLOT_SECONDS),
                 "--carry-forward", "--levels", "short=fixed:40,1.0;long=fixed:120,0.6",
                 "--level-ratios", "short=0.5,long=0.5", "--quiet", "--max-rejected-fraction", "1"]


def baseline(source: str, output: str) -> None:
    """The non-private pipeline: read, parse and bin as the replay does, count exactly, write per slot."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from benchmarks.pipeline import ExactHistograms
    from transforms.binning import GridBins
    from transforms.loaders import ReadTDrive
    from transforms.parse import ParseConfig, ParseEvents
    from transforms.sinks import WriteRecords

    grid = GridBins.tdrive()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        parsed = p | ReadTDrive(source) | ParseEvents(ParseConfig(bins=grid.bins, file_format="record", to_bin=grid))
        (parsed.events | ExactHistograms(SLOT_SECONDS, grid.bins)
         | WriteRecords(os.path.join(output, "baseline"), "release"))


def measure(command: list[str]) -> tuple[float, float]:
    """Peak RSS (MiB) and wall seconds of one child process; raises when it fails."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {child.returncode}: {child.stderr.read().decode()[-2000:]}")
    child.stderr.close()
    return usage.ru_maxrss / 1024, seconds  # Linux reports KiB


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="T-Drive archive, directory or glob")
    parser.add_argument("--baseline-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    if args.baseline_only:
        baseline(args.input, args.output)
        return 0
    with tempfile.TemporaryDirectory() as work:
        base_mib, base_s = measure([sys.executable, "-m", "benchmarks.memory", "--baseline-only", "--input",
                                    args.input, "--output", os.path.join(work, "baseline")])
        private_mib, private_s = measure([sys.executable, "-m", "pipelines.replay", "--input", args.input,
                                          *PRIVATE_FLAGS, "--output", os.path.join(work, "private")])
        with open(os.path.join(work, "private", "report.json")) as f:
            records = json.load(f)["records_read"]
    result = {"records": records, "private_peak_mib": round(private_mib, 1), "baseline_peak_mib": round(base_mib, 1),
              "ratio": round(private_mib / base_mib, 3), "private_seconds": round(private_s, 1),
              "baseline_seconds": round(base_s, 1)}
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
