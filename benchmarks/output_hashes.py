"""Fingerprints of the jobs' outputs with seeded noise, to show a refactoring changed nothing.

    python -m benchmarks.output_hashes --work /tmp/hashes > before.json   # on the old commit
    python -m benchmarks.output_hashes --work /tmp/hashes > after.json    # on the new one
    python -m benchmarks.output_hashes --compare before.json after.json

runs the main job (``pipelines.local``), a T-Drive replay (when the shared
data is beside the repository), a quick evaluation and one replay per other
family on the main job's generated stream or a generated numeric stream
(LDP-IDS, PLBU, DPI, a numeric method simulated in the release stage and in
the per-user stage), each with an ``--insecure-seed`` (reproducible, not
private), and prints the SHA-256 of
every output file: line order as written, except that sharded outputs are
compared as sorted lines; ``report.json`` and ``results.csv`` without their
timing fields.  ``--compare`` prints the jobs and files that differ and
exits 1 if any does.  Pictures (``.png``, ``report.html``) and ``.md`` documents are not hashed.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import math
import subprocess
import sys

from benchmarks.compare_evaluation import read as read_results
from pipelines.evaluation.experiment import TIMING_COLUMNS
from pipelines.local import DATA as MAIN_STREAM
from pipelines.local import DAY_END, DAY_START, GRID
from transforms.loaders import TDRIVE_START

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
TDRIVE = os.path.join("tdrive_sample600", "taxi_log_2008_by_id.tar.xz")
SEED = "7"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_hash(path: str) -> str:
    name = os.path.basename(path)
    with open(path, "rb") as f:
        data = f.read()
    if name.endswith(".json"):
        report = {k: v for k, v in json.loads(data).items() if k not in TIMING_COLUMNS}
        return _digest(json.dumps(report, sort_keys=True).encode())
    if name.endswith(".csv"):
        return _digest(json.dumps(read_results(path)).encode())
    if "-of-" in name:  # a shard: records in any order
        return _digest(b"".join(sorted(data.splitlines(keepends=True))))
    return _digest(data)


def _hashes(directory: str) -> dict[str, str]:
    paths = sorted(p for p in glob.glob(os.path.join(directory, "**", "*"), recursive=True)
                   if os.path.isfile(p) and not p.endswith((".png", ".md", ".html")))
    return {os.path.relpath(p, directory): _file_hash(p) for p in paths}


def output_file_hashes(directory: str) -> dict[str, str]:
    """Every output file under ``directory`` (relative name) with its hash, as the fingerprints hash them."""
    return _hashes(directory)


def _run(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", *args], check=True, stdout=subprocess.DEVNULL)


FAMILY_JOBS: dict[str, list[str]] = {
    "ldp_replay": ["--binning", GRID, "--carry-forward", "--mechanism", "lpd", "--epsilon", "2", "--window", "6",
                   "--requirement", "fixed:6,2"],
    "plbu_replay": ["--binning", GRID, "--carry-forward", "--mechanism", "plbu",
                    "--levels", "hour=fixed:6,2.0;two_hours=fixed:12,1.0", "--level-ratios", "hour=0.5,two_hours=0.5"],
    "dpi_replay": ["--binning", GRID, "--mechanism", "dpi", "--epsilon", "4", "--requirement", "lifetime:4"],
    "numeric_replay": ["--mechanism", "capp", "--epsilon", "1", "--window", "6", "--requirement", "fixed:6,1"],
    "numeric_per_user": ["--mechanism", "capp", "--epsilon", "1", "--window", "6", "--requirement", "fixed:6,1",
                         "--per-user-clients"],
}
"""The other families' replays: each job's flags beyond input, range, seed and output."""

NUMERIC_USERS, NUMERIC_SLOTS, NUMERIC_LOW, NUMERIC_HIGH = 200, 48, 0.0, 70.0

JOBS = {"main_job": "main", "tdrive_replay": "tdrive", "evaluation_quick": "evaluation",
        **{job: job for job in FAMILY_JOBS}}
"""Each job's output directory under the work directory."""


def write_numeric_stream(path: str) -> None:
    """A deterministic numeric stream: ``NUMERIC_USERS`` sensors, one reading per 10-minute slot of the generated
    day's first ``NUMERIC_SLOTS`` slots (some missing, some outside the domain)."""
    with open(path, "w") as f:
        for slot in range(NUMERIC_SLOTS):
            for user in range(NUMERIC_USERS):
                if (user * 5 + slot * 3) % 11 == 0:
                    continue  # this sensor is silent in this slot
                value = 35.0 + 30.0 * math.sin((slot + user % 7) / 6.0) + ((user * 13 + slot * 7) % 17) * 0.5
                f.write(json.dumps({"user": f"s{user}", "time": TDRIVE_START + slot * 600 + user % 600,
                                    "value": round(value, 3)}) + "\n")


def fingerprints_of(work: str) -> dict[str, dict[str, str]]:
    """The hashes of outputs already in ``work`` (e.g. written by an older commit's run of this script)."""
    return {job: _hashes(os.path.join(work, folder)) if os.path.isdir(os.path.join(work, folder))
            else {"skipped": f"no {folder}/ output"} for job, folder in JOBS.items()}


def fingerprints(work: str, data_dir: str = DATA) -> dict[str, dict[str, str]]:
    """Run every job into ``work`` and hash its outputs (the T-Drive sample read from ``data_dir``)."""
    tdrive = os.path.join(data_dir, TDRIVE)
    jobs: dict[str, dict[str, str]] = {}
    main_out = os.path.join(work, JOBS["main_job"])
    _run(["pipelines.local", "--insecure-seed", SEED, "--output", main_out])
    jobs["main_job"] = _hashes(main_out)
    if os.path.exists(tdrive):
        tdrive_out = os.path.join(work, JOBS["tdrive_replay"])
        _run(["pipelines.replay", "--input", tdrive, "--input-format", "tdrive",
              "--binning", "grid:116,116.8,39.5,40.3,5x5", "--slot-seconds", "600", "--carry-forward",
              "--start", "2008-02-02T00:00:00Z", "--end", "2008-02-04T00:00:00Z",
              "--levels", "hour=fixed:6,2.0;two_hours=fixed:12,1.0", "--level-ratios", "hour=0.5,two_hours=0.5",
              "--ledger-detail", "--insecure-seed", SEED, "--output", tdrive_out, "--overwrite", "--quiet"])
        jobs["tdrive_replay"] = _hashes(tdrive_out)
    else:
        jobs["tdrive_replay"] = {"skipped": f"no T-Drive sample ({TDRIVE} in --data-dir)"}
    evaluation_out = os.path.join(work, JOBS["evaluation_quick"])
    _run(["pipelines.evaluate", "--datasets", "sin,log,tlns", "--users", "2000", "--slots", "300",
          "--repeats", "1", "--sweep", "epsilon,ratio",
          "--mechanisms", "bd,ba,uniform,sample,pbd,pba,dpbd,dpba,adaptive", "--seed", SEED, "--workers", "1", "--no-plots",
          "--quiet", "--output", evaluation_out])
    jobs["evaluation_quick"] = _hashes(evaluation_out)
    numeric_stream = os.path.join(work, "numeric_stream.jsonl")
    write_numeric_stream(numeric_stream)
    for job, flags in FAMILY_JOBS.items():
        out = os.path.join(work, JOBS[job])
        source = (["--input", numeric_stream, f"--domain={NUMERIC_LOW},{NUMERIC_HIGH}", "--out-of-range", "clip"]
                  if job.startswith("numeric") else ["--input", MAIN_STREAM])
        _run(["pipelines.replay", *source, *flags, "--slot-seconds", "600", "--start", DAY_START, "--end", DAY_END,
              "--insecure-seed", SEED, "--output", out, "--overwrite", "--quiet"])
        jobs[job] = _hashes(out)
    return jobs


def compare(before: dict, after: dict) -> list[str]:
    """The job/file names whose hashes differ (or exist on one side only)."""
    return [f"{job}/{name}" for job in sorted(set(before) | set(after))
            for name in sorted(set(before.get(job, {})) | set(after.get(job, {})))
            if before.get(job, {}).get(name) != after.get(job, {}).get(name)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.output_hashes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="output/hashes", help="where the jobs write (overwritten)")
    parser.add_argument("--data-dir", default=DATA, help="the shared datasets (the T-Drive sample)")
    parser.add_argument("--hash-only", action="store_true",
                        help="run nothing: hash the outputs already in --work (an older commit's run)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE.json", "AFTER.json"))
    args = parser.parse_args(argv)
    if args.compare:
        with open(args.compare[0]) as f, open(args.compare[1]) as g:
            before, after = json.load(f), json.load(g)
        differing = compare(before, after)
        print(json.dumps({"identical": not differing, "jobs": sorted(after),
                          "files": sum(len(v) for v in after.values()), "differing": differing}, indent=2))
        return 1 if differing else 0
    hashes = fingerprints_of(args.work) if args.hash_only else fingerprints(args.work, args.data_dir)
    print(json.dumps(hashes, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
