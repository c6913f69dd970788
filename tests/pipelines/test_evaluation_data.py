"""Real streams for the evaluation: the pipeline's parse and slot rules, carry-forward, absence, caps."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from pipelines import evaluation_data
from pipelines.evaluation_data import DataUnavailable, EventSource, build_stream
from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.records import NO_VALUE

ORIGIN = 1_699_999_800  # a multiple of 600


def write_jsonl(path, records) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
    return str(path)


# user, seconds after ORIGIN, value; slots of 600 s
EVENTS = [
    ("u10", 1_250, 2),                                  # slot 2: u10's first value
    ("u2", 30, 1), ("u2", 500, 3),                      # slot 0: the later event wins, one duplicate
    ("u2", 1_300, 0),                                   # slot 2
    ("u1", 650, 1), ("u1", 650, 1),                     # slot 1: an exact repeat is a duplicate
    ("u1", 3_000, 2),                                   # slot 5 (slots 3-4 have no event)
]


@pytest.fixture
def stream_file(tmp_path):
    records = [{"user": u, "time": ORIGIN + s, "value": v} for u, s, v in EVENTS]
    records += [{"user": "u3", "time": ORIGIN + 1_100, "value": 9},    # out of the domain: dead letter
                "not json",                                              # dead letter
                {"user": "u3", "time": ORIGIN + 1_200, "w": 5, "epsilon": 0.5}]  # a declaration: ignored
    return write_jsonl(tmp_path / "events.jsonl", records)


def source(path, **overrides) -> EventSource:
    arguments = dict(name="events", description="test", inputs=(path,), input_format="jsonl", binning="int:4",
                     slot_seconds=600.0)
    return EventSource(**{**arguments, **overrides})


def test_slots_follow_the_pipeline_rules_and_carry_values_forward(stream_file):
    stream = build_stream(source(stream_file))
    # slot 0 starts at the first valid event floored to the slot length: ORIGIN + 30 -> ORIGIN
    assert stream.origin == ORIGIN and stream.slot_seconds == 600
    assert stream.user_ids == ("u1", "u2", "u10")            # natural order
    assert stream.slots == 6 and stream.bins == 4
    values = np.array(list(stream.values()))
    absent = NO_VALUE
    assert values.tolist() == [
        [absent, 3, absent],     # slot 0: u2's later event (3), u1 and u10 not seen yet: absent
        [1, 3, absent],          # slot 1: u1 arrives, u2 carried forward
        [1, 0, 2],               # slot 2
        [1, 0, 2],               # slots 3-4: no event, everything carried forward
        [1, 0, 2],
        [2, 0, 2],               # slot 5
    ]
    assert stream.counts["records_read"] == 10
    assert stream.counts["dead_letters"] == 2 and stream.counts["declarations_ignored"] == 1
    assert stream.counts["duplicates"] == 2 and stream.counts["contributions"] == 5
    truth = stream.true_histograms()
    assert truth.tolist() == [[0, 0, 0, 1], [0, 1, 0, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [1, 0, 2, 0]]


def test_carry_forward_equals_the_mechanisms_own(stream_file):
    """Full carried-forward batches (the harness) and sparse batches with ``carry_forward`` (the Beam job) agree."""
    stream = build_stream(source(stream_file))
    requirements = FixedRequirements.of([3] * stream.users, [1.0] * stream.users)
    harness = make_mechanism("pbd", bins=stream.bins)
    pipeline = make_mechanism("pbd", bins=stream.bins, carry_forward=True)
    noise_a, noise_b = insecure_seeded_randomness(5), insecure_seeded_randomness(5)
    users = np.arange(stream.users)
    for t, values in enumerate(stream.values()):
        first = t == 0
        a = harness.step(SlotBatch.of(users, values, requirements if first else None), noise_a)
        reporting = stream.user[stream.slot == t]
        if first:
            sparse = SlotBatch.of(users, np.full(stream.users, NO_VALUE), requirements)
            sparse.values[reporting] = stream.value[stream.slot == t]
        else:
            sparse = SlotBatch.of(reporting, stream.value[stream.slot == t])
        b = pipeline.step(sparse, noise_b)
        assert np.array_equal(harness.exact_histogram_for_evaluation(), pipeline.exact_histogram_for_evaluation())
        assert np.array_equal(a.histogram, b.histogram) and a.kind == b.kind


def test_caps_keep_the_first_users_and_slots(stream_file):
    capped = build_stream(source(stream_file), max_users=2, max_slots=2)
    # lines are read in file order: u10 then u2; u1 comes later and is left out
    assert capped.counts["beyond_max_users"] == 3
    # u10's only value is in slot 2, beyond the cap, so u10 never appears
    assert capped.user_ids == ("u2",) and capped.slots == 2
    assert np.array(list(capped.values())).tolist() == [[3], [3]]
    assert capped.counts["beyond_max_slots"] == 2   # u2's and u10's slot 2


def test_csv_with_a_grid_and_field_names(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("taxi,time,lon,lat\n"                        # a header line is a dead letter, as in replay
                    f"a,{ORIGIN},116.05,39.55\n"                   # cell 0 of the T-Drive grid
                    f"b,{ORIGIN + 700},116.79,40.29\n"             # cell 99
                    f"a,{ORIGIN + 800},120.0,39.55\n")             # outside: dropped, 'a' keeps cell 0
    stream = build_stream(source(str(path), input_format="csv", binning="tdrive", csv_columns=("taxi", "time", "lon", "lat"),
                                 fields=evaluation_data.FieldMapping(user="taxi")))
    assert stream.bins == 100 and stream.user_ids == ("a", "b")
    assert np.array(list(stream.values())).tolist() == [[0, NO_VALUE], [0, 99]]
    assert stream.counts["dead_letters"] == 2
    assert any("outside the grid" in reason for reason in stream.counts["dead_letter_reasons"])


def test_missing_real_data_is_a_reason_not_a_crash(tmp_path):
    for name, make in evaluation_data.REAL_SOURCES.items():
        with pytest.raises(DataUnavailable, match=f"{name}: .* is not on this machine"):
            make(str(tmp_path))


def test_bad_sources_fail_with_one_message(tmp_path):
    with pytest.raises(ValueError, match="input format"):
        source("x", input_format="xml")
    with pytest.raises(ValueError, match="slot seconds"):
        source("x", slot_seconds=0.0)
    with pytest.raises(ValueError, match="matches no file"):
        build_stream(source(str(tmp_path / "none-*.jsonl")))
    empty = write_jsonl(tmp_path / "bad.jsonl", ["nothing valid"])
    with pytest.raises(ValueError, match="no valid event"):
        build_stream(source(empty))


FOURSQUARE = os.path.join(evaluation_data.DEFAULT_DATA_DIR, "foursquare_us5k", "Foursquare_checkins.txt.xz")


@pytest.mark.skipif(not os.path.exists(FOURSQUARE), reason=f"{FOURSQUARE} is not on this machine (the data stays "
                    "outside the repository)")
def test_foursquare_subset_on_the_10x10_grid():
    stream = build_stream(evaluation_data.foursquare_source(), max_users=40)
    assert stream.bins == 100 and stream.slot_seconds == 6000 and stream.users <= 40
    # 100-minute slots within the data's span, 2012-04-03 10:00:08 to 2013-09-16 15:23:08 UTC (the README)
    assert stream.origin >= 1333447208 - 6000 and stream.origin + 6000 * (stream.slots - 1) <= 1379344988
    assert stream.counts["dead_letters"] == 0      # every check-in lies inside the US grid
    truth = stream.true_histograms()
    present = truth.sum(axis=1)
    assert np.all(np.diff(present) >= 0) and present[-1] == stream.users   # carried forward: nobody leaves
