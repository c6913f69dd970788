"""Records per second of ``benchmarks.pipeline`` (the private pipeline beside an exact, non-private one on the
same runner) on each runner, one JSON line a runner.

    python -m integration.bench_runners --records 200000 --targets in-process,multiprocess,portable,prism

Runs in a new loopback-only network namespace (Beam's servers listen on every interface); SDK workers of the
portable targets come from one external worker pool, as a cluster's would.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from integration.compare_runners import IN_NAMESPACE, ROOT, WorkerPool, loopback_namespace_prefix, runner_flags, \
    worker_environment

TARGETS = ("in-process", "multiprocess", "portable", "prism", "flink")


def bench_flags(target: str, pool: WorkerPool | None, flink_master: str, job_server_jar: str | None) -> list[str]:
    """``benchmarks.pipeline``'s flags for ``target`` (its own ``--workers 2`` for the multi-process FnApiRunner)."""
    if target == "in-process":
        return []
    if target == "multiprocess":
        return ["--workers", "2"]
    return runner_flags(target, pool, flink_master, job_server_jar)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m integration.bench_runners", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--targets", default="in-process,multiprocess,portable,prism")
    p.add_argument("--parallelism", type=int, default=2, help="the FlinkRunner's parallelism")
    p.add_argument("--flink-master", default="127.0.0.1:8081")
    p.add_argument("--job-server-jar")
    args = p.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not targets or set(targets) - set(TARGETS):
        print(f"bench_runners: --targets takes names among {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    if not os.environ.get(IN_NAMESPACE):
        prefix = loopback_namespace_prefix()
        if prefix is None:
            print("bench_runners: no loopback-only network namespace can be made here", file=sys.stderr)
            return 3
        os.environ[IN_NAMESPACE] = "1"
        os.execvp(prefix[0], [*prefix, sys.executable, "-m", "integration.bench_runners", *argv])
    work = tempfile.mkdtemp(prefix="bench_runners-")
    pool = WorkerPool(os.path.join(work, "worker_pool.log")) if {"portable", "prism", "flink"} & set(targets) else None
    try:
        for target in targets:
            flags = bench_flags(target, pool, args.flink_master, args.job_server_jar)
            if target == "flink":
                flags[flags.index("--parallelism") + 1] = str(args.parallelism)
            done = subprocess.run([sys.executable, "-m", "benchmarks.pipeline", "--records", str(args.records),
                                   "--json", *flags], cwd=ROOT, env=worker_environment(), capture_output=True,
                                  text=True, timeout=7200)
            if done.returncode != 0:
                print(json.dumps({"target": target, "error": done.stderr.strip().splitlines()[-1:]}), flush=True)
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps({"target": target, **{k: result[k] for k in (
                "records", "records_per_second", "private_seconds", "baseline_seconds", "ratio")}}), flush=True)
    finally:
        if pool is not None:
            pool.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
