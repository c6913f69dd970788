"""`./run_local.sh flink` at small scale (integration/run.sh --small): Flink set up from PyPI, a JobManager and two
TaskManagers started on 127.0.0.1 and stopped by pid, the seeded replay compared across runners, a Kafka broker
(KRaft) fed at a steady rate; where Beam's Flink job-server jar or its Kafka expansion service cannot be fetched
the run says so and does not count that part as run."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from integration.compare_runners import loopback_namespace_prefix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="no java on this machine: Flink needs Java 11 or later")
@pytest.mark.skipif(shutil.which("mvn") is None, reason="no mvn: the Beam job-server jar is fetched with Maven")
def test_the_flink_command_starts_a_two_taskmanager_cluster_on_loopback_and_compares_the_replay(tmp_path):
    if loopback_namespace_prefix() is None:
        pytest.skip("no loopback-only network namespace here (unshare -n and unshare -rn refused)")
    home = os.environ.get("WEVENT_INTEGRATION_HOME", os.path.join(ROOT, ".integration"))
    env = {**os.environ, "PYTHONPATH": ROOT, "PROJECT_PYTHON": sys.executable, "WEVENT_INTEGRATION_HOME": home}
    done = subprocess.run(["integration/run.sh", "--small", "--targets", "flink,portable"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "Flink 2.2.1 up: http://127.0.0.1:8081, 2 TaskManagers" in out
    assert '"taskmanagers":2,"slots-total":2' in out
    assert re.search(r"^central on portable: \d+ files identical", out, re.MULTILINE), out
    assert re.search(r"^central on flink: \d+ files identical", out, re.MULTILINE) or \
        "FlinkRunner: not run: job-server missing" in out
    assert all(f"stopped {name}" in out for name in ("jobmanager", "taskmanager-1", "taskmanager-2"))
    # a KRaft broker on loopback took 2,000 events of the stream, produced at a steady rate, into its two partitions
    assert "broker (KRaft) up: 127.0.0.1:19092" in out and "stopped the Kafka broker" in out
    offsets = [int(n) for n in re.findall(r"^wevent-events:\d+:(\d+)$", out, re.MULTILINE)]
    assert len(offsets) == 2 and sum(offsets) % 2000 == 0 and sum(offsets) > 0  # 2,000 more on each run
    assert "streaming job on Kafka: not run: expansion-service missing" in out or "streaming job on Kafka" not in out
    assert not glob.glob(os.path.join(home, "run", "flink", "*.pid"))  # every JVM it started is gone
    assert not glob.glob(os.path.join(home, "run", "kafka", "*.pid"))
