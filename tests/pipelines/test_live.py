"""Hostile input through the stages: nothing crashes, every record ends in exactly one place."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipelines.live import LiveRelease
from transforms.declarations import RequirementPolicy
from transforms.mechanisms import FixedRequirement
from transforms.parse import ParseConfig
from transforms.private_histogram import PrivateStreamHistogram
from transforms.sinks import read_records

numbers = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1, 2, 3, -1, 1e300, -0.0]))
texts = st.text(max_size=40)
values = st.one_of(numbers, texts, st.none(), st.booleans(), st.lists(st.integers(), max_size=3))
events = st.fixed_dictionaries(
    {"user": st.one_of(st.sampled_from(["a", "b", "c", "ü", "x" * 500]), values),
     "time": st.one_of(st.floats(0, 3000), values), "value": st.one_of(st.integers(0, 3), values)},
    optional={"w": st.one_of(st.integers(-3, 20), values), "epsilon": st.one_of(st.floats(-1, 20), values),
              "level": st.one_of(st.sampled_from(["gold", "nope"]), values)})


def as_line(record) -> str:
    if isinstance(record, str):
        return record.replace("\n", " ")
    return json.dumps(record, allow_nan=True, default=str)


lines = st.lists(st.one_of(events.map(as_line), texts.map(as_line),
                           events.map(lambda e: as_line(e)[: len(as_line(e)) // 2])),  # truncated
                 min_size=1, max_size=40)


VALID_FIRST = [json.dumps({"user": "a", "time": 10, "value": 1}), json.dumps({"user": "a", "time": 20, "value": 2}),
               json.dumps({"user": "b", "time": 30, "value": 0, "level": "gold"})]
VALID_SECOND = [json.dumps({"user": "c", "time": 70, "value": 3}),  # c's first report: used
                json.dumps({"user": "a", "time": 40, "value": 3}),  # a's slot 0 already closed: late
                "{truncated"]                                        # dead letter


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=lines, second=lines)
@example(first=VALID_FIRST, second=VALID_SECOND)
def test_every_hostile_record_is_used_duplicate_late_or_a_dead_letter(tmp_path_factory, first, second):
    work = tmp_path_factory.mktemp("live")
    watch, out = work / "in", work / "out"
    watch.mkdir()
    policy = RequirementPolicy(levels={"gold": FixedRequirement(5, 2.0)}, default=FixedRequirement(4, 1.0),
                               max_epsilon=10.0, max_window=10)
    transform = PrivateStreamHistogram("pba", 60, 4, policy=policy, insecure_seed=1)
    live = LiveRelease(str(watch), str(out), ParseConfig(bins=4), transform)
    try:
        (watch / "a.jsonl").write_text("\n".join(first) + "\n")
        live.poll()
        live.release_due(1500.0)  # slots ending by t=1500 close; later records for them are late
        (watch / "b.jsonl").write_text("\n".join(second) + "\n")
        live.poll()
        live.release_due(math.inf)
    finally:
        live.close()
    counts = live.counts
    assert counts["records_read"] == len(first) + len(second)
    assert counts["records_read"] == (counts["records_used"] + counts["duplicates"] + counts["late"]
                                      + counts["dead_letters"]), counts
    assert counts["ledger_violations"] == 0
    dead = read_records(str(out / "dead_letters-*.jsonl"), "jsonl") if counts["dead_letters"] + counts["late"] else []
    assert len(dead) == counts["dead_letters"] + counts["late"]
    assert all(d["reason"] for d in dead)
    if first == VALID_FIRST and second == VALID_SECOND:  # the pinned example exercises every outcome
        assert (counts["records_used"], counts["duplicates"], counts["late"], counts["dead_letters"]) == (3, 1, 1, 1)
