"""Parsing raw records into events and dead letters (transforms/parsing.py, no Beam)."""

from __future__ import annotations

import json
import pickle
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import schemas
from transforms.parsing import (
    EVENT_RAW_LIMIT,
    MAX_TIME,
    FieldMapping,
    ParseConfig,
    plain_json_event,
    fast_path,
    parse_record,
    validated_record,
)
from transforms.records import NO_VALUE, Event

BINS = 100
JSONL = ParseConfig(bins=BINS)
CSV_COLUMNS = ("stream", "user", "time", "value", "w", "epsilon")
CSV = ParseConfig(bins=BINS, file_format="csv", csv_columns=CSV_COLUMNS)
RECORD = ParseConfig(bins=BINS, file_format="record")
INSTANT = 1201966568.0  # 2008-02-02 15:36:08 UTC
DEAD_LETTER_KEYS = {"stream", "user", "stage", "reason", "record"}


def line(**fields) -> str:
    """A JSON line with the given fields (NaN and infinities become the NaN/Infinity tokens)."""
    return json.dumps(fields)


def reason_of(raw, config: ParseConfig = JSONL) -> str:
    parsed = parse_record(raw, config)
    assert isinstance(parsed, dict), f"expected a dead letter, got {parsed!r}"
    return parsed["reason"]


def event_of(raw, config: ParseConfig = JSONL) -> Event:
    parsed = parse_record(raw, config)
    assert isinstance(parsed, Event), f"expected an event, got {parsed!r}"
    return parsed


# -- JSON lines ---------------------------------------------------------------------------------------------------

VALID = dict(user="alice", time=INSTANT, value=3)

JSONL_DEAD_LETTERS = [
    ("{not json", "malformed JSON"),
    ('{"user": "a", "time": 1, "value": 1', "malformed JSON"),
    ("[1, 2, 3]", "not a JSON object"),
    ('"just text"', "not a JSON object"),
    ("", "empty line"),
    ("   \n", "empty line"),
    (line(time=1, value=1), "missing field 'user'"),
    (line(user=None, time=1, value=1), "missing field 'user'"),
    (line(user="", time=1, value=1), "empty user"),
    (line(user="   ", time=1, value=1), "empty user"),
    (line(user=["a"], time=1, value=1), "field 'user' is not a string"),
    (line(user=True, time=1, value=1), "field 'user' is not a string"),
    (line(user="a", stream=7, time=1, value=1), "field 'stream' is not a string"),
    (line(user="a", value=1), "missing field 'time'"),
    (line(user="a", time="abc", value=1), "unparseable time 'abc'"),
    (line(user="a", time="2008-13-45 99:00:00", value=1), "unparseable time '2008-13-45 99:00:00'"),
    (line(user="a", time=[1], value=1), "field 'time' is not a number or ISO-8601 text"),
    (line(user="a", time=True, value=1), "field 'time' is not a number or ISO-8601 text"),
    (line(user="a", time=-1, value=1), "time out of range"),
    (line(user="a", time=MAX_TIME + 1, value=1), "time out of range"),
    (line(user="a", time=float("nan"), value=1), "time out of range"),
    (line(user="a", time=float("inf"), value=1), "time out of range"),
    (line(user="a", time="1e400", value=1), "time out of range"),
    (line(user="a", time="1969-12-31T23:59:59Z", value=1), "time out of range"),
    (line(user="a", time=1), "missing field 'value'"),
    (line(user="a", time=1, value=None), "missing field 'value'"),
    (line(user="a", time=1, value="three"), "value is not a number"),
    (line(user="a", time=1, value=True), "value is not a number"),
    (line(user="a", time=1, value=[3]), "value is not a number"),
    (line(user="a", time=1, value=float("nan")), "value is NaN"),
    (line(user="a", time=1, value=float("inf")), "value is infinite"),
    (line(user="a", time=1, value=float("-inf")), "value is infinite"),
    (line(user="a", time=1, value=BINS), "value out of domain [0, 100)"),
    (line(user="a", time=1, value=-1), "value out of domain [0, 100)"),
    (line(user="a", time=1, value=10**30), "value out of domain [0, 100)"),
    (line(user="a", time=1, value=2.5), "value is not an integer bin"),
    (line(user="a", time=1, value="2.5"), "value is not an integer bin"),
    (line(user="a", time=1, value=1, w=5, epsilon=0), "requirement: epsilon must be > 0"),
    (line(user="a", time=1, value=1, w=5, epsilon=-0.5), "requirement: epsilon must be > 0"),
    (line(user="a", time=1, value=1, w=5, epsilon="-1"), "requirement: epsilon must be > 0"),
    (line(user="a", time=1, value=1, w=5, epsilon=float("nan")), "requirement: epsilon must be a finite number"),
    (line(user="a", time=1, value=1, w=5, epsilon="1/2"), "requirement: epsilon must be a finite number"),
    (line(user="a", time=1, value=1, w=5, epsilon=10**5), "requirement: epsilon must be at most 10000"),
    (line(user="a", time=1, value=1, w=5, epsilon="1e-13"), "requirement: epsilon is below the budget resolution 1e-12"),
    (line(user="a", time=1, value=1, w=0, epsilon=1), "requirement: w must be a positive integer"),
    (line(user="a", time=1, value=1, w=2.5, epsilon=1), "requirement: w must be a positive integer"),
    (line(user="a", time=1, value=1, w="ten", epsilon=1), "requirement: w must be a positive integer"),
    (line(user="a", time=1, value=1, w=True, epsilon=1), "requirement: w must be a positive integer"),
    (line(user="a", time=1, value=1, w=10**7, epsilon=1), "requirement: w must be at most 1000000"),
    (line(user="a", time=1, value=1, w=5), "requirement: incomplete fixed declaration"),
    (line(user="a", time=1, value=1, w=5, epsilon=1, w_b=3), "requirement: both fixed and dynamic fields"),
    (line(user="a", time=1, value=1, w_b=3, epsilon_b=1, w_f=3), "requirement: incomplete dynamic declaration"),
    (line(user="a", time=1, value=1, w_b=3, epsilon_b=1, w_f=0, epsilon_f=1),
     "requirement: w_f must be a positive integer"),
    (line(user="a", time=1, value=1, level=""), "requirement: level must be a non-empty string"),
    (line(user="a", time=1, value=1, level=3), "requirement: level must be a non-empty string"),
    (line(user="a", time=1, value=1, level="gold", w=5, epsilon=1), "requirement: both level and explicit fields"),
    (line(user="a", time=1, value=1, lifetime=2, w=5, epsilon=1),
     "requirement: both a lifetime budget and other requirement fields"),
    (line(user="a", time=1, value=1, lifetime=2, level="gold"),
     "requirement: both a lifetime budget and other requirement fields"),
    (line(user="a", time=1, value=1, lifetime=0), "requirement: lifetime must be > 0"),
    (line(user="a", time=1, value=1, lifetime="inf"), "requirement: lifetime must be a finite number"),
    (line(user="\ud800", time=1, value=1), "field 'user' is not valid Unicode"),
    (line(stream="a\x1fb", user="u", time=1, value=1), "field 'stream' contains the reserved character U+001F"),
    ("x" * (JSONL.max_text_length + 1), "record too long"),
    (b"\xff\xfe{}", "not valid UTF-8"),
    (None, "not a text line"),
    (12, "not a text line"),
    ({"user": "a", "time": 1, "value": 1}, "not a text line"),
]


@pytest.mark.parametrize("raw, reason", JSONL_DEAD_LETTERS)
def test_jsonl_dead_letter_reasons(raw, reason):
    dead = parse_record(raw, JSONL)
    assert isinstance(dead, dict) and set(dead) == DEAD_LETTER_KEYS
    assert dead["reason"] == reason
    assert dead["stage"] == "parse"
    schemas.validate("dead_letter", dead)


def test_dead_letter_keeps_original_text_and_what_was_read():
    raw = line(stream="taxi", user="alice", time=1, value=500)
    assert parse_record(raw, JSONL) == {"stream": "taxi", "user": "alice", "stage": "parse",
                                        "reason": "value out of domain [0, 100)", "record": raw}
    assert parse_record('{"user": 1, "time": "x", "value": 1}\n', JSONL)["record"] == '{"user": 1, "time": "x", "value": 1}'
    assert parse_record(line(time=1, value=1), JSONL)["stream"] == "default"


def test_valid_jsonl_event():
    raw = line(stream="taxi", user="alice", time=INSTANT, value=3)
    assert event_of(raw + "\n") == Event("taxi", "alice", INSTANT, 3, None, raw)


@pytest.mark.parametrize("fields, expected", [
    (dict(user=42, time=1, value=0), ("default", "42", 1.0, 0)),
    (dict(user="a", time=1, value=3.0), ("default", "a", 1.0, 3)),
    (dict(user="a", time=1, value="7"), ("default", "a", 1.0, 7)),
    (dict(user="a", time=1, value=99), ("default", "a", 1.0, 99)),
    (dict(user="a", time=0, value=0, stream=None), ("default", "a", 0.0, 0)),
    (dict(user="a", time=0, value=0, stream=""), ("default", "a", 0.0, 0)),
    (dict(user="a", time=MAX_TIME, value=0), ("default", "a", float(MAX_TIME), 0)),
    (dict(user="a", time=1.5, value=0), ("default", "a", 1.5, 0)),
])
def test_valid_jsonl_fields(fields, expected):
    assert tuple(event_of(line(**fields))[:4]) == expected


@pytest.mark.parametrize("when", [
    INSTANT, int(INSTANT), str(int(INSTANT)), " 1201966568.0 ", "1.201966568e9",
    "2008-02-02 15:36:08", "2008-02-02T15:36:08", "2008-02-02T15:36:08Z", "2008-02-02T15:36:08.000z",
    "2008-02-02T16:36:08+01:00", "2008-02-02T10:36:08-05:00", "2008-02-02 15:36:08+00:00",
])
def test_iso_and_epoch_times_agree(when):
    assert event_of(line(user="u", time=when, value=1)).time == INSTANT


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="needs time.tzset")
def test_naive_times_are_utc_whatever_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert event_of(line(user="u", time="2008-02-02 15:36:08", value=1)).time == INSTANT
        assert event_of(avro(user="u", time=datetime(2008, 2, 2, 15, 36, 8), value=1), RECORD).time == INSTANT
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("requirement, expected", [
    (dict(w=10, epsilon=1), ("fixed", 10, "1.0")),
    (dict(w=10, epsilon=0.1), ("fixed", 10, "0.1")),
    (dict(w="10", epsilon="0.10"), ("fixed", 10, "0.10")),
    (dict(w=10.0, epsilon=" 0.3 "), ("fixed", 10, "0.3")),
    (dict(w=1_000_000, epsilon="10000"), ("fixed", 1_000_000, "10000")),
    (dict(w_b=5, epsilon_b=0.5, w_f=3, epsilon_f="0.25"), ("dynamic", 5, "0.5", 3, "0.25")),
    (dict(level="gold"), ("level", "gold")),
    (dict(level=" gold "), ("level", "gold")),
    (dict(w=None, epsilon=None, level="silver"), ("level", "silver")),
    (dict(lifetime=2), ("lifetime", "2.0")),
    (dict(lifetime="0.75", w=None), ("lifetime", "0.75")),
])
def test_requirement_encoding(requirement, expected):
    event = event_of(line(user="u", time=1, value=2, **requirement))
    assert event.requirement == expected
    assert event.value == 2


def test_declaration_only_record():
    event = event_of(line(user="u", time="2008-02-02 15:36:08", w=10, epsilon="0.5"))
    assert event == Event("default", "u", INSTANT, NO_VALUE, ("fixed", 10, "0.5"), event.raw)
    assert event_of(line(user="u", time=1, value=None, level="gold")).value == NO_VALUE
    # an invalid declaration without a value is still a dead letter, for the declaration's reason
    assert reason_of(line(user="u", time=1, w=0, epsilon=1)) == "requirement: w must be a positive integer"


def test_event_raw_is_truncated_but_dead_letters_keep_everything():
    padding = "p" * 20_000
    raw = line(user="u", time=1, value=1, padding=padding)
    assert event_of(raw).raw == raw[:EVENT_RAW_LIMIT]
    assert len(event_of(raw).raw) == EVENT_RAW_LIMIT
    too_long = line(user="u", time=1, value=1, padding="p" * 200)
    dead = parse_record(too_long, ParseConfig(bins=BINS, max_text_length=100))
    assert dead["reason"] == "record too long" and dead["record"] == too_long
    assert parse_record(too_long.encode(), ParseConfig(bins=BINS, max_text_length=100))["reason"] == "record too long"


def test_bytes_lines_are_decoded_as_utf8():
    raw = line(user="zoë", time=1, value=1)
    assert event_of(raw.encode("utf-8")).user == "zoë"


def test_custom_field_mapping():
    config = ParseConfig(bins=4, fields=FieldMapping(user="uid", time="ts", value="cell", stream=None, w="window"),
                         default_stream="taxis")
    event = event_of(line(uid="t1", ts=5, cell=2, stream="ignored", window=3, epsilon=1), config)
    assert event[:5] == ("taxis", "t1", 5.0, 2, ("fixed", 3, "1.0"))
    assert reason_of(line(user="t1", ts=5, cell=2), config) == "missing field 'uid'"


# -- CSV ----------------------------------------------------------------------------------------------------------

CSV_CASES = [
    ("taxi,alice,2008-02-02 15:36:08,3,,", Event("taxi", "alice", INSTANT, 3, None, "")),
    ("taxi,alice,1201966568,3,10,0.5\r\n", Event("taxi", "alice", INSTANT, 3, ("fixed", 10, "0.5"), "")),
    (",7,1201966568,0,,", Event("default", "7", INSTANT, 0, None, "")),
    ('"taxi","bob, jr",1201966568,"99",,', Event("taxi", "bob, jr", INSTANT, 99, None, "")),
    ("taxi,alice,1201966568,,10,0.5", Event("taxi", "alice", INSTANT, NO_VALUE, ("fixed", 10, "0.5"), "")),
]


@pytest.mark.parametrize("raw, expected", CSV_CASES)
def test_csv_events(raw, expected):
    assert event_of(raw, CSV) == expected._replace(raw=raw.rstrip("\r\n"))


@pytest.mark.parametrize("raw, reason", [
    ("stream,user,time,value,w,epsilon", "header"),
    (" stream , user ,time,value,w,epsilon\n", "header"),
    ("taxi,alice,1,3", "wrong number of CSV columns"),
    ("taxi,alice,1,3,,,", "wrong number of CSV columns"),
    ('taxi,"alice"x,1,3,,', "malformed CSV"),
    ('taxi,"alice,1,3,,', "malformed CSV"),
    ("", "empty line"),
    ("taxi,,1,3,,", "missing field 'user'"),
    ("taxi, ,1,3,,", "missing field 'user'"),
    ("taxi,alice,,3,,", "missing field 'time'"),
    ("taxi,alice,yesterday,3,,", "unparseable time 'yesterday'"),
    ("taxi,alice,1,,,", "missing field 'value'"),
    ("taxi,alice,1,abc,,", "value is not a number"),
    ("taxi,alice,1,nan,,", "value is NaN"),
    ("taxi,alice,1,-inf,,", "value is infinite"),
    ("taxi,alice,1,100,,", "value out of domain [0, 100)"),
    ("taxi,alice,1,1.5,,", "value is not an integer bin"),
    ("taxi,alice,1,1,10,", "requirement: incomplete fixed declaration"),
    ("taxi,alice,1,1,10,0", "requirement: epsilon must be > 0"),
    ("taxi,alice,1,1,-3,1", "requirement: w must be a positive integer"),
])
def test_csv_dead_letters(raw, reason):
    dead = parse_record(raw, CSV)
    assert isinstance(dead, dict) and dead["reason"] == reason
    assert dead["record"] == raw.rstrip("\r\n")


def test_csv_without_header_and_other_delimiter():
    config = ParseConfig(bins=BINS, file_format="csv", csv_columns=("user", "time", "value"), csv_delimiter=";")
    assert event_of("u1;1201966568;4", config) == Event("default", "u1", INSTANT, 4, None, "u1;1201966568;4")
    assert reason_of("user;time;value", config) == "header"
    assert reason_of("u1,1201966568,4", config) == "wrong number of CSV columns"


# -- dict records (Avro / Parquet) ---------------------------------------------------------------------------------

AVRO_NULLS = dict(stream="default", w=None, epsilon=None, w_b=None, epsilon_b=None, w_f=None, epsilon_f=None,
                  level=None, value=None)


def avro(**fields) -> dict:
    """A record as ReadFromAvro yields it for schemas/event.avsc: every optional field present, null by default."""
    return {**AVRO_NULLS, **fields}


@pytest.mark.parametrize("record, expected", [
    (avro(user="a", time=INSTANT, value=3), ("default", "a", INSTANT, 3, None)),
    (avro(user="a", time="2008-02-02T15:36:08Z", value=3), ("default", "a", INSTANT, 3, None)),
    (avro(user="a", time=datetime(2008, 2, 2, 15, 36, 8), value=3), ("default", "a", INSTANT, 3, None)),
    (avro(user="a", time=datetime(2008, 2, 2, 16, 36, 8, tzinfo=timezone(timedelta(hours=1))), value=3),
     ("default", "a", INSTANT, 3, None)),
    (avro(user="a", time=1.0, w=4, epsilon=0.2), ("default", "a", 1.0, NO_VALUE, ("fixed", 4, "0.2"))),
    (avro(user="a", time=1.0, value=1, w_b=4, epsilon_b=Decimal("0.20"), w_f=2, epsilon_f=1.5),
     ("default", "a", 1.0, 1, ("dynamic", 4, "0.20", 2, "1.5"))),
    ({"user": "a", "time": 1, "value": 5}, ("default", "a", 1.0, 5, None)),
])
def test_dict_records(record, expected):
    event = event_of(record, RECORD)
    assert tuple(event[:5]) == expected
    assert event.raw == json.dumps(record, sort_keys=True, default=str)


@pytest.mark.parametrize("record, reason", [
    (avro(user="a", time=1.0), "missing field 'value'"),
    (avro(time=1.0, value=1), "missing field 'user'"),
    (avro(user=b"a", time=1.0, value=1), "field 'user' is not a string"),
    (avro(user="a", time=1.0, value=b"\x01"), "value is not a number"),
    (avro(user="a", time=1.0, value=1, w=3, epsilon=1.0, w_f=2), "requirement: both fixed and dynamic fields"),
    (avro(user="a", time=datetime(1960, 1, 1, tzinfo=timezone.utc), value=1), "time out of range"),
    ("not a dict", "not a record"),
    (["user", "a"], "not a record"),
    (None, "not a record"),
])
def test_dict_record_dead_letters(record, reason):
    dead = parse_record(record, RECORD)
    assert isinstance(dead, dict) and dead["reason"] == reason
    schemas.validate("dead_letter", dead)


def test_dict_record_text_is_canonical_json():
    record = {"value": 1, "user": "a", "time": 1, "stream": "s"}
    dead = parse_record({**record, "value": 1000}, RECORD)
    assert dead["record"] == '{"stream": "s", "time": 1, "user": "a", "value": 1000}'


# -- to_bin --------------------------------------------------------------------------------------------------------

CATEGORIES = {"bike": 0, "bus": 1, "taxi": 2}


def category_bin(record: dict) -> int:
    """Map the ``mode`` column to a bin; unknown modes are outside the domain."""
    mode = record.get("mode")
    if mode not in CATEGORIES:
        raise ValueError(f"unknown mode {mode!r}")
    return CATEGORIES[mode]


@dataclass(frozen=True)
class GridCell:
    """Map (x, y) in a unit square to one of ``side * side`` cells."""

    side: int

    def __call__(self, record: dict) -> int:
        x, y = float(record["x"]), float(record["y"])
        if not (0 <= x < 1 and 0 <= y < 1):
            raise ValueError("outside the grid")
        return int(y * self.side) * self.side + int(x * self.side)


def out_of_range_bin(record: dict) -> int:
    return 99


def test_to_bin_maps_records_and_its_reason_surfaces():
    config = ParseConfig(bins=3, to_bin=category_bin)
    assert event_of(line(user="u", time=1, mode="bus"), config).value == 1
    assert event_of(line(user="u", time=1, mode="taxi", value="ignored"), config).value == 2
    assert reason_of(line(user="u", time=1, mode="plane"), config) == "unknown mode 'plane'"
    # a declaration without a value does not go through to_bin
    assert event_of(line(user="u", time=1, level="gold"), config).value == NO_VALUE


def test_to_bin_dataclass_on_csv_and_failures():
    config = ParseConfig(bins=16, file_format="csv", csv_columns=("user", "time", "x", "y"), to_bin=GridCell(4))
    assert event_of("u,1,0.3,0.6", config).value == 2 * 4 + 1
    assert reason_of("u,1,1.5,0.6", config) == "outside the grid"
    assert reason_of("u,1,,0.6", config) == "to_bin failed: TypeError"
    assert reason_of(line(user="u", time=1), ParseConfig(bins=3, to_bin=out_of_range_bin)) == \
        "to_bin returned a value outside [0, 3)"
    assert pickle.loads(pickle.dumps(config)) == config


# -- configuration -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(bins=0), "bins"),
    (dict(bins=True), "bins"),
    (dict(bins=2.0), "bins"),
    (dict(bins=2, file_format="xml"), "file_format"),
    (dict(bins=2, fields={"user": "u"}), "fields"),
    (dict(bins=2, default_stream=""), "default_stream"),
    (dict(bins=2, default_stream=None), "default_stream"),
    (dict(bins=2, file_format="csv"), "csv_columns"),
    (dict(bins=2, file_format="csv", csv_columns="user,time,value"), "csv_columns"),
    (dict(bins=2, file_format="csv", csv_columns=("user", "time")), "csv_columns"),
    (dict(bins=2, file_format="csv", csv_columns=("user", "time", "value", "user")), "csv_columns"),
    (dict(bins=2, file_format="csv", csv_columns=("user", "time", "value", "")), "csv_columns"),
    (dict(bins=2, csv_delimiter=",,"), "csv_delimiter"),
    (dict(bins=2, csv_delimiter='"'), "csv_delimiter"),
    (dict(bins=2, to_bin="value"), "to_bin"),
    (dict(bins=2, to_bin=lambda record: 0), "to_bin"),
    (dict(bins=2, max_text_length=0), "max_text_length"),
])
def test_bad_config_names_the_parameter(kwargs, parameter):
    with pytest.raises(ValueError, match=rf"^{parameter}\b"):
        ParseConfig(**kwargs)


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(user=""), "fields.user"),
    (dict(time=None), "fields.time"),
    (dict(w_b="w"), "fields.w_b"),
])
def test_bad_field_mapping_names_the_parameter(kwargs, parameter):
    with pytest.raises(ValueError, match=rf"^{parameter}\b"):
        FieldMapping(**kwargs)


def test_csv_columns_list_is_frozen_to_a_tuple():
    config = ParseConfig(bins=2, file_format="csv", csv_columns=["user", "time", "value"])
    assert config.csv_columns == ("user", "time", "value")
    hash(config)


# -- never raises -------------------------------------------------------------------------------------------------


class HostileRepr:
    def __repr__(self):
        raise RuntimeError("no")

    def __str__(self):
        raise RuntimeError("no")


FIELD_NAMES = ["user", "time", "value", "stream", "w", "epsilon", "w_b", "epsilon_b", "w_f", "epsilon_f", "level",
               "lifetime"]
scalars = (st.none() | st.booleans() | st.integers() | st.integers(-5, 120) | st.floats() | st.text(max_size=20)
           | st.binary(max_size=10) | st.decimals() | st.datetimes(timezones=st.none() | st.timezones())
           | st.sampled_from(["2008-02-02 15:36:08", "1e999", "nan", "0.5", "-0", "gold", "\ud800", "", " "]))
json_scalars = (st.none() | st.booleans() | st.integers() | st.integers(-5, 120) | st.floats() | st.text(max_size=20)
                | st.sampled_from(["2008-02-02T15:36:08Z", "1e999", "NaN", "0.10", "1e-999999999", "\ud800"]))
nested = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
records = st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=5), nested, max_size=8)
json_nested = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
json_records = st.dictionaries(st.sampled_from(FIELD_NAMES), json_nested, max_size=11)
csv_lines = st.lists(st.text(max_size=12) | json_scalars.map(str), max_size=8).map(",".join)

windows = st.integers(1, 50) | st.sampled_from([0, -1, 2.0, 2.5, "3", 2_000_000, None])
epsilons = (st.floats(0.001, 10) | st.decimals("0.001", "10", places=3).map(str)
            | st.sampled_from([0, -1, "0.10", 1e-13, 1e5, float("nan"), "x", None]))
requirements = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"w": windows, "epsilon": epsilons}),
    st.fixed_dictionaries({"w_b": windows, "epsilon_b": epsilons, "w_f": windows, "epsilon_f": epsilons}),
    st.fixed_dictionaries({"level": st.text(max_size=4) | st.integers()}),
    st.dictionaries(st.sampled_from(FIELD_NAMES[4:]), json_scalars, max_size=4),
)
plausible_records = st.builds(
    lambda base, requirement: {**base, **requirement},
    st.fixed_dictionaries(
        {"user": st.text(min_size=1, max_size=6) | st.integers(0, 10**6) | st.sampled_from([None, "", " "]),
         "time": (st.integers(0, MAX_TIME) | st.floats(0, MAX_TIME)
                  | st.datetimes(min_value=datetime(1970, 1, 2)).map(datetime.isoformat)
                  | st.sampled_from([None, -1, MAX_TIME + 1, "noon", "2008-02-02T15:36:08Z"])),
         "value": (st.integers(0, BINS - 1) | st.integers(0, BINS - 1).map(str) | st.floats(-1, BINS + 1)
                   | st.sampled_from([None, -1, BINS, 3.0, "4.0", "nan", "inf", "x"]))},
        optional={"stream": st.none() | st.text(max_size=4)}),
    requirements)
anything = (st.text() | st.binary() | nested | records | json_records.map(json.dumps) | csv_lines | plausible_records
            | plausible_records.map(json.dumps)
            | st.just(HostileRepr()) | st.just({1: "a", "b": 2}) | st.just({"user": HostileRepr(), "time": 1}))
CONFIGS = [JSONL, CSV, RECORD, ParseConfig(bins=3, to_bin=category_bin, max_text_length=500),
           ParseConfig(bins=16, file_format="csv", csv_columns=("user", "time", "x", "y"), to_bin=GridCell(4))]


def check_exactly_one_outcome(parsed, config: ParseConfig) -> None:
    if isinstance(parsed, Event):
        assert isinstance(parsed.user, str) and parsed.user.strip()
        assert isinstance(parsed.stream, str) and parsed.stream
        assert isinstance(parsed.time, float) and 0 <= parsed.time <= MAX_TIME
        assert isinstance(parsed.value, int)
        assert 0 <= parsed.value < config.bins or (parsed.value == NO_VALUE and parsed.requirement is not None)
        assert parsed.requirement is None or parsed.requirement[0] in ("fixed", "dynamic", "level", "lifetime")
        assert len(parsed.raw) <= EVENT_RAW_LIMIT
        (parsed.stream + parsed.user + parsed.raw).encode("utf-8")
    else:
        assert isinstance(parsed, dict) and set(parsed) == DEAD_LETTER_KEYS
        assert isinstance(parsed["reason"], str) and parsed["reason"]
        schemas.validate("dead_letter", parsed)
        parsed["record"].encode("utf-8")


@settings(max_examples=400, deadline=None)
@given(raw=anything, config_index=st.integers(0, len(CONFIGS) - 1))
def test_parse_record_never_raises(raw, config_index):
    config = CONFIGS[config_index]
    check_exactly_one_outcome(parse_record(raw, config), config)


@settings(max_examples=300, deadline=None)
@given(record=json_records | plausible_records)
def test_json_records_never_raise_and_agree_with_dict_records(record):
    text = json.dumps(record)
    from_line = parse_record(text, JSONL)
    check_exactly_one_outcome(from_line, JSONL)
    from_dict = parse_record(json.loads(text), RECORD)
    check_exactly_one_outcome(from_dict, RECORD)
    # the same fields give the same outcome whichever way they arrive
    if isinstance(from_line, Event):
        assert from_line[:5] == from_dict[:5]
    else:
        assert from_line["reason"] == from_dict["reason"]


@pytest.mark.parametrize("raw", [
    "[" * 100_000, '{"user": ' + "[" * 100_000, "\x00" * 10, '{"user": "a", "time": 1, "value": 1' + "9" * 5000 + "}",
    line(user="a", time="9" * 5000, value=1), line(user="a", time=1, value="9" * 5000),
    line(user="a", time=1, value=1, w="9" * 5000, epsilon="1e-999999999"),
])
def test_hostile_text(raw):
    check_exactly_one_outcome(parse_record(raw, JSONL), JSONL)


def test_hostile_dicts():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    circular: dict = {"user": "a", "time": 1, "value": 1}
    circular["self"] = circular
    for record in ({"user": 10**5000, "time": 1, "value": 1}, {"user": "a", "time": 1, "value": deep},
                   circular, {"user": HostileRepr(), "time": HostileRepr()}, {"user": "a", "time": float("nan")}):
        check_exactly_one_outcome(parse_record(record, RECORD), RECORD)
    assert parse_record(circular, RECORD).value == 1


# -- the fast path for plain JSON lines ------------------------------------------------------------------------

FAST_CONFIGS = [JSONL, ParseConfig(bins=7, fields=FieldMapping(user="taxi", time="ts", value="cell", stream=None),
                                   default_stream="city", max_text_length=60)]
renamed = plausible_records.map(lambda r: {{"user": "taxi", "time": "ts", "value": "cell"}.get(k, k): v
                                           for k, v in r.items()})
plain_values = st.fixed_dictionaries(
    {"user": st.text(min_size=1, max_size=4) | st.integers(-10**20, 10**20)
     | st.sampled_from(["", " ", "\ud800", True, None]),
     "time": (st.floats(0, MAX_TIME) | st.integers(0, MAX_TIME)
              | st.sampled_from([-0.0, -1, MAX_TIME + 1, float("nan"), float("inf"), 1e-300, True, "5"])),
     "value": (st.integers(0, 6) | st.integers(0, 6).map(float)
               | st.sampled_from([-1, 7, BINS, -0.0, 0.5, 1e300, False, "3", None]))},
    optional={"stream": st.none() | st.text(max_size=3) | st.sampled_from(["s", "", " ", "\u00e9", 1]),
              "w": st.none() | st.integers(1, 5), "level": st.none() | st.just("gold")})
fast_lines = st.builds(
    lambda record, ascii_only, suffix: json.dumps(record, ensure_ascii=ascii_only) + suffix,
    st.one_of(plain_values, plain_values, plain_values, plausible_records, json_records, renamed), st.booleans(),
    st.sampled_from(["", "", "", "", "\n", "\r\n", " ", "\t", "x", "\u00a0"]))

plain_lines = st.builds(
    lambda record, ascii_only, suffix: json.dumps(record, ensure_ascii=ascii_only) + suffix,
    st.fixed_dictionaries({"user": st.text(min_size=1, max_size=4).filter(str.strip) | st.integers(),
                           "time": st.floats(0, MAX_TIME) | st.integers(0, MAX_TIME),
                           "value": st.integers(0, 6) | st.integers(0, 6).map(float)},
                          optional={"stream": st.none() | st.text(min_size=1, max_size=3)}),
    st.booleans(), st.sampled_from(["", "\n", "\r\n"]))


@settings(max_examples=600, deadline=None)
@given(raw=plain_lines | fast_lines | anything, config_index=st.integers(0, len(FAST_CONFIGS) - 1))
def test_fast_path_gives_exactly_what_the_validating_path_gives(raw, config_index):
    """Valid or hostile: the fast path yields the full path's event or steps aside, never another outcome."""
    config = FAST_CONFIGS[config_index]
    fast = plain_json_event(raw, config) if isinstance(raw, str) else None
    full = validated_record(raw, config)
    if fast is not None:
        assert fast == full and isinstance(full, Event)
        assert [type(x) for x in fast] == [type(x) for x in full]
    assert parse_record(raw, config) == full


@pytest.mark.parametrize("raw, taken", [
    (line(user="u1", time=12.5, value=3), True),
    (line(stream="taxi", user=7, time=INSTANT, value=99.0) + "\r\n", True),
    (json.dumps({"user": "zoë", "time": 1, "value": 1}, ensure_ascii=False), True),
    (line(user="u1", time=12.5, value=3, w=4, epsilon=1), False),       # declarations: full path
    (line(user="u1", time="2008-02-02T15:36:08Z", value=3), False),     # text time: full path
    (line(user="u1", time=12.5, value="3"), False),                      # text value: full path
    (" " + line(user="u1", time=12.5, value=3), False),                 # leading blank: full path
    (line(user="\ud800", time=1, value=1), False),                       # escaped lone surrogate: full path
])
def test_the_fast_path_takes_plain_lines_only(raw, taken):
    assert (plain_json_event(raw, JSONL) is not None) == taken
    assert parse_record(raw, JSONL) == validated_record(raw, JSONL)


def csv_cell(value) -> str:
    return "" if value is None else str(value)


@settings(max_examples=300, deadline=None)
@given(record=plausible_records)
def test_csv_lines_agree_with_json_lines(record):
    cells = [csv_cell(record.get(column)) for column in CSV_COLUMNS]
    assume(not any(set(cell) & set(',"\r\n') for cell in cells))
    assume([cell.strip() for cell in cells] != list(CSV_COLUMNS))
    assume("\ud800" not in "".join(cells))  # a text line with a lone surrogate is "not valid Unicode" as a whole
    from_csv = parse_record(",".join(cells), CSV)
    check_exactly_one_outcome(from_csv, CSV)
    # CSV cells are text: compare with the same fields sent as JSON text (blank text is a missing field)
    from_json = parse_record(json.dumps({column: cell if cell.strip() else None
                                         for column, cell in zip(CSV_COLUMNS, cells)}), JSONL)
    if isinstance(from_json, Event):
        assert from_csv[:5] == from_json[:5]
    else:
        assert from_csv["reason"] == from_json["reason"]


@settings(max_examples=200, deadline=None)
@given(raw=plain_lines | anything, config_index=st.integers(0, len(FAST_CONFIGS) - 1))
def test_the_public_fast_path_and_validated_record_make_parse_record(raw, config_index):
    config = FAST_CONFIGS[config_index]
    expected = parse_record(raw, config)
    assert ((type(raw) is str and fast_path(config)(raw, config)) or validated_record(raw, config)) == expected
