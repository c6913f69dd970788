"""The boundary schemas parse, accept well-formed records, reject bad ones, and have the intended Arrow twins."""

from __future__ import annotations

import pyarrow as pa
import pytest

from schemas import SCHEMA_NAMES, arrow_schema, avro_schema, validate

SAMPLES = {
    "event": {"stream": "taxi", "user": "u1", "time": 1700000000.5, "value": 3, "w": None, "epsilon": None,
              "w_b": None, "epsilon_b": None, "w_f": None, "epsilon_f": None, "level": None,
              "lifetime": None},
    "requirement": {"stream": "taxi", "user": "u1", "time": "2023-11-14T22:13:20Z", "kind": "dynamic", "w": None,
                    "epsilon": None, "w_b": 10, "epsilon_b": 1.0, "w_f": 5, "epsilon_f": 0.5, "level": None,
                    "lifetime": None},
    "release": {"stream": "taxi", "slot": 42, "slot_start": 1700000000.0, "slot_end": 1700000060.0,
                "mechanism": "PBD", "mechanism_slot": 1, "histogram": [0, 5, 2], "kind": "fresh",
                "epsilon": "0.25", "predicted_error": 12.5, "registered_users": 7, "reporters": None,
                "statistic": "counts",
                "estimate": [0.0, 5.0, 2.0], "trust": "central", "figures": {}},
    "ledger_entry": {"stream": "taxi", "user": "u1", "slot": 42, "charge": "0.25",
                     "parts": {"dissimilarity": "0.05", "publication": "0.2"}, "least": "0.2"},
    "user_usage": {"stream": "taxi", "user": "u1", "slots": 10, "max_window_usage_ratio": 0.9, "violations": 0},
    "dead_letter": {"stream": None, "user": None, "stage": "parse", "reason": "not JSON", "record": "{oops"},
    "request": {"request_id": "r1", "stream": "taxi", "user": "u1", "slot": 42, "method": "lpd/m2",
                "epsilon": "0.5", "domain_size": 5, "oracle": None},
    "report": {"request_id": "r1", "stream": "taxi", "user": "u1", "slot": 42, "method": "lpd/m2", "oracle": "grr",
               "epsilon": "0.5", "realised_epsilon": "0.5", "domain_size": 5, "report": [3]},
}


def test_every_schema_has_a_sample():
    assert set(SAMPLES) == set(SCHEMA_NAMES)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_parses_in_the_wevent_namespace(name):
    schema = avro_schema(name)
    assert schema["type"] == "record"
    assert schema["name"].startswith("wevent.")
    assert [field.name for field in arrow_schema(name)] == [field["name"] for field in schema["fields"]]


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_sample_record_validates(name):
    validate(name, SAMPLES[name])


def test_event_time_may_be_text_and_value_null():
    validate("event", {**SAMPLES["event"], "time": "2023-11-14T22:13:20Z", "value": None, "w": 5, "epsilon": 1.0})


@pytest.mark.parametrize("name, change", [
    ("event", {"time": None}),
    ("event", {"value": "3"}),
    ("requirement", {"kind": "static"}),
    ("release", {"kind": "published"}),
    ("release", {"histogram": [1, 2.5]}),
    ("release", {"slot": True}),
    ("ledger_entry", {"charge": 0.25}),
    ("user_usage", {"user": None}),
    ("dead_letter", {"stage": None}),
    ("request", {"epsilon": 0.5}),
    ("report", {"oracle": "rappor"}),
    ("report", {"report": [True, 0.5]}),
])
def test_bad_record_raises_value_error_naming_the_schema(name, change):
    with pytest.raises(ValueError, match=f"schema '{name}'"):
        validate(name, {**SAMPLES[name], **change})


def test_a_numeric_devices_report_validates():
    from device import numeric_client
    device = numeric_client.NumericClient("u1", "capp", 4, "1", 0.0, 10.0, randbits=lambda bits: 12345)
    validate("report", {"request_id": None, **device.report("taxi", 0, 3.5)})


def test_non_dict_record_raises_value_error():
    with pytest.raises(ValueError, match="must be a dict"):
        validate("release", [SAMPLES["release"]])


@pytest.mark.parametrize("function", [avro_schema, arrow_schema])
def test_unknown_schema_name_lists_the_known_ones(function):
    with pytest.raises(ValueError, match="unknown schema 'releases'.*dead_letter"):
        function("releases")


def test_avro_schema_returns_a_private_copy():
    avro_schema("release")["fields"].clear()
    assert len(avro_schema("release")["fields"]) == len(SAMPLES["release"])


def test_release_arrow_types():
    schema = arrow_schema("release")
    expected = {
        "stream": (pa.string(), False), "slot": (pa.int64(), False), "slot_start": (pa.float64(), False),
        "slot_end": (pa.float64(), False), "mechanism": (pa.string(), False), "mechanism_slot": (pa.int64(), False),
        "histogram": (pa.list_(pa.int64()), False), "kind": (pa.string(), False), "epsilon": (pa.string(), False),
        "predicted_error": (pa.float64(), True), "registered_users": (pa.int64(), True),
        "reporters": (pa.int64(), True),
        "statistic": (pa.string(), False), "estimate": (pa.list_(pa.float64()), False), "trust": (pa.string(), False),
        "figures": (pa.map_(pa.string(), pa.float64()), False),
    }
    assert {field.name: (field.type, field.nullable) for field in schema} == expected


def test_event_and_requirement_times_are_text_in_arrow():
    for name in ("event", "requirement"):
        time = arrow_schema(name).field("time")
        assert (time.type, time.nullable) == (pa.string(), False)
    event = arrow_schema("event")
    assert (event.field("value").type, event.field("value").nullable) == (pa.int64(), True)
    assert (event.field("epsilon").type, event.field("epsilon").nullable) == (pa.float64(), True)
    assert arrow_schema("requirement").field("kind").type == pa.string()
    dead_letter = arrow_schema("dead_letter")
    assert [field.nullable for field in dead_letter] == [True, True, False, False, False]


@pytest.mark.parametrize("name, added", [("release", {"statistic": "counts", "estimate": [], "trust": "central",
                                                     "figures": {}, "reporters": None}),
                                         ("ledger_entry", {"least": "", "parts": {}})])
def test_records_written_before_the_schema_evolved_still_read(name, added):
    """Fields added later have defaults: an old writer's records read with the new schema."""
    import io

    import fastavro

    old_schema = avro_schema(name)
    old_schema["fields"] = [f for f in old_schema["fields"] if f["name"] not in added]
    old_record = {k: v for k, v in SAMPLES[name].items() if k not in added}
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(old_schema), [old_record])
    buffer.seek(0)
    (read,) = list(fastavro.reader(buffer, reader_schema=avro_schema(name)))
    assert read == {**old_record, **added}


def test_ledger_entries_written_with_dc_and_publication_still_read():
    """Before charges had named parts an entry carried ``dc`` and ``publication``: the new schema skips them."""
    import io

    import fastavro

    old_schema = avro_schema("ledger_entry")
    fields = [f for f in old_schema["fields"] if f["name"] not in ("parts", "least")]
    at = [f["name"] for f in fields].index("charge") + 1
    old_schema["fields"] = fields[:at] + [{"name": "dc", "type": "string"},
                                          {"name": "publication", "type": "string"}] + fields[at:]
    old_record = {"stream": "taxi", "user": "u1", "slot": 42, "charge": "0.25", "dc": "0.05", "publication": "0.2"}
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(old_schema), [old_record])
    buffer.seek(0)
    (read,) = list(fastavro.reader(buffer, reader_schema=avro_schema("ledger_entry")))
    assert read == {"stream": "taxi", "user": "u1", "slot": 42, "charge": "0.25", "parts": {}, "least": ""}


def test_release_records_of_layout_1_read_into_today_s_schema():
    """Files written with release schema version 1 (``release_v1.avsc``: ``registered_users`` a long, no
    ``reporters``) read with today's schema: the count is kept, ``reporters`` is null."""
    import io

    import fastavro

    from schemas import earlier_avro_schema

    old_record = {k: v for k, v in SAMPLES["release"].items() if k != "reporters"}
    buffer = io.BytesIO()
    fastavro.writer(buffer, earlier_avro_schema("release", 1), [old_record])
    buffer.seek(0)
    (read,) = list(fastavro.reader(buffer, reader_schema=avro_schema("release")))
    assert read == {**old_record, "reporters": None}
    with pytest.raises(ValueError, match="no earlier version"):
        earlier_avro_schema("event", 1)


def test_registered_users_and_reporters_may_be_null_but_not_negative_text():
    validate("release", {**SAMPLES["release"], "registered_users": None, "reporters": 12})
    with pytest.raises(ValueError, match="schema 'release'"):
        validate("release", {**SAMPLES["release"], "reporters": "12"})
