"""Runs seeded replays on two Beam runners and compares every output file's hash.

    python -m integration.compare_runners --target portable --loopback-namespace
    python -m integration.compare_runners --target flink --jobs central,ldp,numeric

Each job (a central PWSM replay with checkpoints and the ledger's charges, an LDP-IDS replay, a numeric replay)
runs once in-process on the FnApiRunner and once on the target runner, with the same ``--insecure-seed``; the
releases, usage, dead letters, ledger, checkpoints and ``report.json`` (without its timing fields) are hashed as
``benchmarks.output_hashes`` hashes them. Prints one line per job and exits 1 when any file differs.

Targets: ``multiprocess`` (FnApiRunner with SDK workers in two other processes), ``portable`` (PortableRunner,
an embedded job service and SDK workers started by a separate worker pool), ``bundle-direct`` (Beam's
BundleBasedDirectRunner) and ``flink`` (FlinkRunner against the cluster of ``integration/flink/start.sh``, SDK
workers from a worker pool; needs the job-server jar ``integration/flink/setup.sh`` fetches).
``--loopback-namespace`` runs everything in a new network namespace whose only interface is loopback, so that
Beam's gRPC servers, which listen on every interface, can be reached from nowhere else.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from benchmarks.output_hashes import DATA, FAMILY_JOBS, NUMERIC_HIGH, NUMERIC_LOW, SEED, TDRIVE, \
    output_file_hashes, write_numeric_stream
from pipelines.local import DATA as MAIN_STREAM
from pipelines.local import DAY_END, DAY_START, GRID

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ("multiprocess", "portable", "bundle-direct", "prism", "flink")
CENTRAL_FLAGS = ["--binning", GRID, "--carry-forward", "--mechanism", "pbd",
                 "--levels", "hour=fixed:6,2.0;two_hours=fixed:12,1.0", "--level-ratios", "hour=0.5,two_hours=0.5",
                 "--ledger-detail"]
JOB_FLAGS = {"central": CENTRAL_FLAGS, "ldp": FAMILY_JOBS["ldp_replay"], "numeric": FAMILY_JOBS["numeric_replay"],
             "tdrive": CENTRAL_FLAGS}
"""Each job's flags beyond input, range, seed and output: one mechanism of each family the comparison covers, and
the central one on the T-Drive sample (``tdrive``, when the shared data is beside the repository)."""
TDRIVE_RANGE = ("2008-02-02T00:00:00Z", "2008-02-04T00:00:00Z")
IN_NAMESPACE = "WEVENT_IN_LOOPBACK_NAMESPACE"


@dataclass(frozen=True)
class Comparison:
    """One job's outcome: the files whose hashes differ between the two runners (empty when identical)."""

    job: str
    target: str
    files: int
    differing: tuple[str, ...]
    seconds_baseline: float
    seconds_target: float

    def __post_init__(self) -> None:
        if self.files < 0 or self.seconds_baseline < 0 or self.seconds_target < 0:
            raise ValueError("counts and durations are non-negative")


def loopback_namespace_prefix() -> list[str] | None:
    """The command prefix that runs a command in a new network namespace with ``lo`` up, or None if this
    machine allows none (neither as root nor in a user namespace)."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        return None
    for unshare in (["unshare", "-n"], ["unshare", "-r", "-n"]):
        probe = subprocess.run([*unshare, "sh", "-c", "ip link set lo up"], capture_output=True)
        if probe.returncode == 0:
            return [*unshare, "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    return None


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_environment() -> dict[str, str]:
    """The environment of jobs and workers: this checkout importable, this interpreter first on PATH (the worker
    pool starts SDK workers with ``python``)."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    return {**os.environ, "PYTHONPATH": ROOT, "PATH": path}


class WorkerPool:
    """Beam's external SDK worker pool on a loopback port, stopped with every worker it started."""

    def __init__(self, log_path: str) -> None:
        self.port = free_loopback_port()
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={self.port}"],
            cwd=ROOT, env=worker_environment(), stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the worker pool exited; see {log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the worker pool did not listen within 30 s; see {log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def runner_flags(target: str, pool: WorkerPool | None, flink_master: str, job_server_jar: str | None) -> list[str]:
    """The Beam flags that send a job to ``target``."""
    if target == "multiprocess":
        return ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    if target == "bundle-direct":
        return ["--runner", "BundleBasedDirectRunner"]
    assert pool is not None
    workers = ["--environment_type", "EXTERNAL", "--environment_config", f"127.0.0.1:{pool.port}"]
    if target == "portable":
        return ["--runner", "PortableRunner", "--job_endpoint", "embed", *workers]
    if target == "prism":
        return ["--runner", "PrismRunner", "--prism_location", prism_binary(), *workers]
    assert job_server_jar is not None
    return ["--runner", "FlinkRunner", "--flink_master", flink_master, "--flink_version", "2.2",
            "--flink_job_server_jar", job_server_jar, "--parallelism", "2", *workers]


def job_command(job: str, source: list[str], output: str) -> list[str]:
    """The replay command of ``job`` reading ``source`` (``--input`` and its flags) into ``output``."""
    checkpoints = ["--checkpoint-dir", os.path.join(output, "checkpoints")] if job in ("central", "tdrive") else []
    start, end = TDRIVE_RANGE if job == "tdrive" else (DAY_START, DAY_END)
    return [sys.executable, "-m", "pipelines.replay", *source, *JOB_FLAGS[job], *checkpoints, "--slot-seconds", "600",
            "--start", start, "--end", end, "--insecure-seed", SEED, "--output", output, "--overwrite",
            "--quiet"]


def run_job(command: list[str], log_path: str) -> float:
    started = time.monotonic()
    with open(log_path, "w") as log:
        finished = subprocess.run(command, cwd=ROOT, env=worker_environment(), stdout=log, stderr=subprocess.STDOUT,
                                  timeout=3600)
    if finished.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:4])} failed (exit {finished.returncode}); see {log_path}")
    return time.monotonic() - started


def compare_job(job: str, source: list[str], work: str, targets: dict[str, list[str]]) -> list[Comparison]:
    """Runs ``job`` in-process, then on each target (name: its Beam flags), into ``work``; one comparison a target."""
    os.makedirs(os.path.join(work, job), exist_ok=True)
    baseline = os.path.join(work, job, "in_process")
    seconds_baseline = run_job(job_command(job, source, baseline), baseline + ".log")
    expected = output_file_hashes(baseline)
    comparisons = []
    for name, flags in targets.items():
        output = os.path.join(work, job, name)
        seconds = run_job(job_command(job, source, output) + flags, output + ".log")
        found = output_file_hashes(output)
        differing = tuple(f for f in sorted(set(expected) | set(found)) if expected.get(f) != found.get(f))
        comparisons.append(Comparison(job, name, len(expected), differing, seconds_baseline, seconds))
    return comparisons


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m integration.compare_runners", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help=f"comma-separated, of {', '.join(TARGETS)}")
    p.add_argument("--jobs", default="central,ldp,numeric",
                   help=f"comma-separated, of {', '.join(JOB_FLAGS)} (default: central,ldp,numeric)")
    p.add_argument("--input", default=os.path.join(ROOT, MAIN_STREAM),
                   help="the taxi stream of the central and LDP jobs (default: the main job's generated stream)")
    p.add_argument("--data-dir", default=DATA, help="the shared data folder (for --jobs tdrive)")
    p.add_argument("--work", help="where outputs and logs go (default: a new temporary folder)")
    p.add_argument("--flink-master", default="127.0.0.1:8081")
    p.add_argument("--job-server-jar", help="Beam's Flink job-server jar (default: the one setup.sh fetched)")
    p.add_argument("--loopback-namespace", action="store_true",
                   help="run in a new network namespace that has only loopback (root or user namespaces)")
    return p


def integration_home() -> str:
    return os.environ.get("WEVENT_INTEGRATION_HOME", os.path.join(ROOT, ".integration"))


def default_job_server_jar() -> str | None:
    jars = sorted(glob.glob(os.path.join(integration_home(), "lib", "jars", "beam-runners-flink-*-job-server-*.jar")))
    return jars[-1] if jars else None


def prism_binary() -> str:
    """$WEVENT_PRISM, or the Prism runner integration/prism/setup.sh built for this Beam SDK."""
    import apache_beam

    return os.environ.get("WEVENT_PRISM") or os.path.join(integration_home(), "lib", f"prism-{apache_beam.__version__}",
                                                          "prism")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if not jobs or set(jobs) - set(JOB_FLAGS):
        print(f"compare_runners: --jobs takes names among {', '.join(JOB_FLAGS)}", file=sys.stderr)
        return 2
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    if not targets or set(targets) - set(TARGETS):
        print(f"compare_runners: --target takes names among {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    if args.loopback_namespace and not os.environ.get(IN_NAMESPACE):
        prefix = loopback_namespace_prefix()
        if prefix is None:
            print("compare_runners: no loopback-only network namespace can be made here (unshare -n refused)",
                  file=sys.stderr)
            return 3
        os.environ[IN_NAMESPACE] = "1"
        os.execvp(prefix[0], [*prefix, sys.executable, "-m", "integration.compare_runners", *argv])
    tdrive = os.path.join(args.data_dir, TDRIVE)
    if "tdrive" in jobs and not os.path.exists(tdrive):
        print(f"compare_runners: no T-Drive sample at {tdrive}: the tdrive job is left out", file=sys.stderr)
        jobs.remove("tdrive")
    if not os.path.exists(args.input) and any(job in ("central", "ldp") for job in jobs):
        print(f"compare_runners: no stream at {args.input} (run python -m pipelines.local once to generate it)",
              file=sys.stderr)
        return 2
    work = args.work or tempfile.mkdtemp(prefix="compare_runners-")
    os.makedirs(work, exist_ok=True)
    numeric_stream = os.path.join(work, "numeric_stream.jsonl")
    write_numeric_stream(numeric_stream)
    jar = args.job_server_jar or default_job_server_jar()
    if "prism" in targets and not os.access(prism_binary(), os.X_OK):
        print(f"compare_runners: no Prism runner at {prism_binary()} (run integration/prism/setup.sh)", file=sys.stderr)
        return 2
    if "flink" in targets and not jar:
        print("compare_runners: no Beam Flink job-server jar (integration/flink/setup.sh says why)", file=sys.stderr)
        return 2
    pool = WorkerPool(os.path.join(work, "worker_pool.log")) if {"portable", "prism", "flink"} & set(targets) else None
    try:
        flags = {t: runner_flags(t, pool, args.flink_master, jar) for t in targets}
        results: list[Comparison] = []
        for job in jobs:
            source = {"numeric": ["--input", numeric_stream, f"--domain={NUMERIC_LOW},{NUMERIC_HIGH}",
                                  "--out-of-range", "clip"],
                      "tdrive": ["--input", tdrive, "--input-format", "tdrive"]}.get(job, ["--input", args.input])
            for result in compare_job(job, source, work, flags):
                results.append(result)
                verdict = "identical" if not result.differing else f"DIFFER: {', '.join(result.differing)}"
                print(f"{job} on {result.target}: {result.files} files {verdict} (in-process "
                      f"{result.seconds_baseline:.1f} s, {result.target} {result.seconds_target:.1f} s)", flush=True)
    finally:
        if pool is not None:
            pool.stop()
    print(f"outputs and logs in {work}")
    return 1 if any(r.differing for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
