"""The portable path, as far as it runs offline: the replay graph through Beam's PortableRunner (embedded job
service, SDK workers in other processes started by a worker pool on loopback) gives the in-process runner's
outputs; the streaming graph, built with Dataflow's streaming options, translates to a runner pipeline proto
whose leaf transforms, keyed coders and windowing are all portable."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from apache_beam.portability import common_urns
from transforms.sinks import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def outputs(directory) -> dict:
    def rows(name):
        return sorted(json.dumps(r, sort_keys=True) for r in read_records(os.path.join(directory, f"{name}-*.jsonl"),
                                                                          "jsonl"))
    report = json.loads((directory / "report.json").read_text())
    counts = {k: report[k] for k in ("records_read", "records_used", "duplicates", "late", "dead_letters", "slots",
                                     "fresh", "ledger_violations")}
    return {"releases": rows("releases"), "usage": rows("usage"), "dead": rows("dead_letters"), "counts": counts}


@pytest.mark.slow
def test_replay_through_the_portable_runner_with_workers_in_other_processes_equals_the_in_process_runner(tmp_path):
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps({"user": f"u{i % 30}", "time": 1000 + 20 * i, "value": i % 7}) + "\n"
                              for i in range(600)) + "{not json\n")
    common = [sys.executable, "-m", "pipelines.replay", "--input", str(source), "--binning", "int:7",
              "--requirement", "fixed:10,1.0", "--insecure-seed", "11", "--max-rejected-fraction", "1", "--quiet"]
    env = {**os.environ, "PYTHONPATH": ROOT,  # the pool starts workers with `python`: this interpreter
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    port = free_port()
    pool = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             f"--service_port={port}"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(3)
        assert pool.poll() is None, "the worker pool did not start"
        portable = subprocess.run([*common, "--output", str(tmp_path / "portable"), "--runner", "PortableRunner",
                                   "--job_endpoint", "embed", "--environment_type", "EXTERNAL",
                                   "--environment_config", f"localhost:{port}"],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        os.killpg(pool.pid, signal.SIGTERM)  # the pool and the workers it started
        pool.wait(timeout=30)
    assert portable.returncode == 0, portable.stderr[-3000:]
    local = subprocess.run([*common, "--output", str(tmp_path / "local")], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-3000:]
    a, b = outputs(tmp_path / "portable"), outputs(tmp_path / "local")
    assert a["counts"]["records_read"] == 601 and a["counts"]["dead_letters"] == 1 and a["counts"]["fresh"] > 0
    assert a == b


PORTABLE_LEAVES = {common_urns.primitives.PAR_DO.urn, common_urns.primitives.GROUP_BY_KEY.urn,
                   common_urns.primitives.FLATTEN.urn, common_urns.primitives.ASSIGN_WINDOWS.urn,
                   common_urns.primitives.IMPULSE.urn, common_urns.composites.PUBSUB_READ.urn,
                   common_urns.composites.PUBSUB_WRITE.urn}
STANDARD_KEY_CODERS = {common_urns.coders.STRING_UTF8.urn, common_urns.coders.BYTES.urn,
                       common_urns.coders.VARINT.urn, common_urns.coders.LENGTH_PREFIX.urn}


def test_streaming_graph_translates_to_a_portable_pipeline_proto_with_dataflow_streaming_options():
    import apache_beam as beam

    from pipelines import cli, streaming

    args, beam_args = cli.strict_parse(streaming.parser(), [
        "--pubsub-subscription", "projects/my-project/subscriptions/events", "--binning", "int:10",
        "--requirement", "fixed:12,1.0", "--output", "gs://my-bucket/out", "--streaming", "--runner", "DataflowRunner",
        "--project", "my-project-123", "--region", "us-central1", "--temp_location", "gs://my-bucket/tmp",
        "--staging_location", "gs://my-bucket/staging", "--enable_streaming_engine", "--setup_file", "./setup.py"])
    options = cli.pipeline_options(beam_args)
    pipeline = beam.Pipeline(options=options)
    streaming.build(pipeline, args)
    proto = pipeline.to_runner_api()
    components = proto.components
    leaves = {t.unique_name: t.spec.urn for t in components.transforms.values() if not t.subtransforms}
    assert set(leaves.values()) <= PORTABLE_LEAVES, {n: u for n, u in leaves.items() if u not in PORTABLE_LEAVES}
    assert common_urns.composites.PUBSUB_READ.urn in leaves.values()
    # every grouping and every stateful step is keyed by a coder a runner can compare without Python
    keyed = [t for t in components.transforms.values()
             if t.spec.urn == common_urns.primitives.GROUP_BY_KEY.urn
             or (t.spec.urn == common_urns.primitives.PAR_DO.urn and _is_stateful(t))]
    assert len(keyed) >= 3  # the per-user state, the release controller, the ledger
    for transform in keyed:
        (pcollection,) = [components.pcollections[p] for k, p in transform.inputs.items()
                          if not k.startswith("side")][:1]
        coder = components.coders[pcollection.coder_id]
        assert coder.spec.urn == common_urns.coders.KV.urn, transform.unique_name
        key = coder.component_coder_ids[0]
        if transform.unique_name.startswith("Private/"):  # the project's own keys: standard coders, no Python
            assert _standard(components, key), transform.unique_name
        else:  # Beam's own file writes group by a deterministic Python coder
            assert _standard(components, key) or b"Deterministic" in components.coders[key].spec.payload
    assert {w.window_fn.urn for w in components.windowing_strategies.values()} <= {
        common_urns.global_windows.urn, common_urns.fixed_windows.urn}
    assert len(components.environments) == 1  # one Python SDK environment: the runner picks its container
    assert proto.requirements  # the stateful steps declare what they need from the runner
    assert options.view_as(beam.options.pipeline_options.StandardOptions).streaming


def _standard(components, coder_id: str) -> bool:
    """A key coder every runner can compare: a standard deterministic coder, or a KV of them."""
    coder = components.coders[coder_id]
    if coder.spec.urn == common_urns.coders.KV.urn:
        return all(_standard(components, c) for c in coder.component_coder_ids)
    return coder.spec.urn in STANDARD_KEY_CODERS


def _is_stateful(transform) -> bool:
    from apache_beam.portability.api import beam_runner_api_pb2

    payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
    return bool(payload.state_specs or payload.timer_family_specs)
