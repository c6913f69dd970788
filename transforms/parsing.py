"""Raw input records to :class:`~transforms.records.Event`, everything else to dead letters.

Input arrives as JSON lines, CSV lines or already-decoded dicts (from
``ReadFromAvro`` / ``ReadFromParquet``). Every record becomes exactly one of a
valid ``Event`` or a dead letter with a short, stable reason: nothing is
dropped silently and no input, however hostile, makes parsing raise.
"""

from __future__ import annotations

import csv
import json
import math
import numbers
import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from functools import cached_property
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from transforms.mechanisms.budget import MAX_EPSILON, UNITS_PER_EPSILON
from transforms.mechanisms.requirements import MAX_WINDOW
from transforms.records import KEY_SEPARATOR, NO_VALUE, Event, dead_letter

PARSE_NAMESPACE = "wevent"
"""Beam metrics namespace of the parse counters."""

PARSE_STAGE = "parse"
"""``stage`` of the dead letters written here."""

FILE_FORMATS = ("jsonl", "csv", "record")

MAX_TIME = 253402300799
"""Largest accepted event time: 9999-12-31T23:59:59Z, in epoch seconds."""

EVENT_RAW_LIMIT = 10_000
"""``Event.raw`` keeps at most this many characters (dead letters keep the whole record)."""

_EPSILON_RESOLUTION = Decimal(1) / Decimal(UNITS_PER_EPSILON)
_REASON_DETAIL_LIMIT = 40
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)",
                     re.IGNORECASE)
_FINITE_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class FieldMapping:
    """Names of the input fields (JSON keys, CSV columns, record keys); ``stream=None``: no stream field."""

    user: str = "user"
    time: str = "time"
    value: str = "value"
    stream: str | None = "stream"
    w: str = "w"
    epsilon: str = "epsilon"
    w_b: str = "w_b"
    epsilon_b: str = "epsilon_b"
    w_f: str = "w_f"
    epsilon_f: str = "epsilon_f"
    level: str = "level"
    lifetime: str = "lifetime"

    def __post_init__(self):
        seen: dict[str, str] = {}
        for attribute in dataclass_fields(self):
            name = getattr(self, attribute.name)
            if name is None and attribute.name == "stream":
                continue
            if not isinstance(name, str) or not name:
                raise ValueError(f"fields.{attribute.name} must be a non-empty string, got {name!r}")
            if name in seen:
                raise ValueError(f"fields.{attribute.name} reuses the field name {name!r} of fields.{seen[name]}")
            seen[name] = attribute.name


@dataclass(frozen=True)
class ParseConfig:
    """How to read raw records into events over ``bins`` histogram bins.

    ``to_bin`` optionally maps the record dict (for CSV: column name to cell
    text, empty cells ``None``) to a bin and raises ``ValueError(reason)`` for
    a record outside the domain; the reason becomes the dead-letter reason.
    It runs on Beam workers, so it must be picklable: a top-level function or
    an instance of a top-level (data)class, not a lambda or closure.
    """

    bins: int
    file_format: str = "jsonl"
    fields: FieldMapping = field(default_factory=FieldMapping)
    default_stream: str = "default"
    csv_columns: tuple[str, ...] | None = None
    csv_delimiter: str = ","
    to_bin: Callable[[dict], int] | None = None
    max_text_length: int = 1_000_000

    def __post_init__(self):
        if not _is_int(self.bins) or self.bins < 1:
            raise ValueError(f"bins must be an integer >= 1, got {self.bins!r}")
        if self.file_format not in FILE_FORMATS:
            raise ValueError(f"file_format must be one of {', '.join(FILE_FORMATS)}, got {self.file_format!r}")
        if not isinstance(self.fields, FieldMapping):
            raise ValueError(f"fields must be a FieldMapping, got {type(self.fields).__name__}")
        if not isinstance(self.default_stream, str) or not self.default_stream.strip():
            raise ValueError(f"default_stream must be a non-empty string, got {self.default_stream!r}")
        self._check_csv()
        if self.to_bin is not None:
            if not callable(self.to_bin):
                raise ValueError(f"to_bin must be callable, got {type(self.to_bin).__name__}")
            try:
                pickle.dumps(self.to_bin)
            except Exception as error:  # noqa: BLE001 -- any pickling failure means the same thing
                raise ValueError("to_bin must be picklable (a top-level function or dataclass instance): "
                                 f"{type(error).__name__}: {error}") from None
        if not _is_int(self.max_text_length) or self.max_text_length < 1:
            raise ValueError(f"max_text_length must be an integer >= 1, got {self.max_text_length!r}")

    @property
    def plain_json(self) -> bool:
        """Whether JSON lines may take the fast path (no ``to_bin``: the value field is the bin)."""
        return self.file_format == "jsonl" and self.to_bin is None

    @cached_property
    def plain_fields(self) -> tuple:
        """What the fast path reads, in one tuple: field names, default stream, bins, length limit, and the
        names of the requirement fields (a record with any of them takes the full path)."""
        f = self.fields
        return (f.stream, f.user, f.time, f.value, self.default_stream, self.bins, self.max_text_length,
                frozenset((f.w, f.epsilon, f.w_b, f.epsilon_b, f.w_f, f.epsilon_f, f.level, f.lifetime)))

    def _check_csv(self) -> None:
        if not isinstance(self.csv_delimiter, str) or len(self.csv_delimiter) != 1 or self.csv_delimiter in '"\r\n':
            raise ValueError(f"csv_delimiter must be one character other than a quote or newline, "
                             f"got {self.csv_delimiter!r}")
        if self.csv_columns is None:
            if self.file_format == "csv":
                raise ValueError("csv_columns must be given when file_format is 'csv'")
            return
        if isinstance(self.csv_columns, str) or not isinstance(self.csv_columns, (tuple, list)):
            raise ValueError(f"csv_columns must be a tuple of column names, got {self.csv_columns!r}")
        columns = tuple(self.csv_columns)
        object.__setattr__(self, "csv_columns", columns)
        if not columns or not all(isinstance(name, str) and name for name in columns):
            raise ValueError(f"csv_columns must be non-empty strings, got {columns!r}")
        if len(set(columns)) != len(columns):
            raise ValueError(f"csv_columns has duplicate names: {columns!r}")
        required = [self.fields.user, self.fields.time] + ([self.fields.value] if self.to_bin is None else [])
        missing = [name for name in required if name not in columns]
        if missing:
            raise ValueError(f"csv_columns lacks the column(s) {', '.join(map(repr, missing))}")


class _Rejected(Exception):
    """Internal: the record is a dead letter for ``reason`` (``text``: its text, when decoding failed)."""

    def __init__(self, reason: str, text: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.text = text


def parse_record(raw: Any, config: ParseConfig) -> Event | dict:
    """One raw record to an ``Event``, or to a dead-letter dict naming why not. Never raises."""
    if config.plain_json and type(raw) is str:
        event = plain_json_event(raw, config)
        if event is not None:
            return event
    return _validated(raw, config)


_raw_decode = json.JSONDecoder().raw_decode
_new_event = tuple.__new__


def fast_path(config: ParseConfig) -> Callable[[str, ParseConfig], Event | None]:
    """The plain-JSON-line parser for ``config``: an ``Event``, or None when the line needs :func:`validated_record`.

    ``fast_path(config)(line, config) or validated_record(line, config)`` is :func:`parse_record` for a text
    line, without a call per line more than it needs (the per-line loop of a parse stage).
    """
    return plain_json_event if config.plain_json else _none


def validated_record(raw: Any, config: ParseConfig) -> Event | dict:
    """:func:`parse_record` without the fast path."""
    return _validated(raw, config)


def plain_json_event(raw: str, config: ParseConfig) -> Event | None:
    """Fast path: the ``Event`` of a plain, valid JSON line, or ``None`` for anything else.

    Accepts only what the validating path would accept and turn into the same
    event: an ASCII (or valid UTF-8) object with a non-blank text or integer
    user, a text or absent stream, a number time in range, an integer bin and
    no requirement field. Everything else, valid or not, takes the full path,
    which alone decides dead letters and their reasons.
    """
    stream_field, user_field, time_field, value_field, default_stream, bins, max_length, declaring = \
        config.plain_fields
    try:
        if len(raw) > max_length or not (raw.isascii() or _printable(raw) is raw):
            return None
        text = raw.rstrip("\r\n")
        record, end = _raw_decode(text)
        if end != len(text) or type(record) is not dict or not declaring.isdisjoint(record):
            return None
        get = record.get
        stream = get(stream_field)  # JSON keys are text: get(None) is None
        if stream is None:
            stream = default_stream
        elif type(stream) is not str or not _plain_text(stream) or KEY_SEPARATOR in stream:
            return None
        user = get(user_field)
        if type(user) is str:
            if not (user.isascii() or _printable(user) is user) or not user or user.isspace():
                return None
        elif type(user) is int:
            user = str(user)
        else:
            return None
        time = get(time_field)
        if (type(time) is not float and type(time) is not int) or not 0 <= time <= MAX_TIME:
            return None
        value = get(value_field)
        if type(value) is float and value.is_integer():
            value = int(value)
        if type(value) is not int or not 0 <= value < bins:
            return None
        return _new_event(Event, (stream, user, float(time), value, None, text[:EVENT_RAW_LIMIT]))
    except Exception:  # noqa: BLE001 -- anything odd is the full path's to judge
        return None


def _plain_text(text: str) -> bool:
    """Non-blank and valid Unicode (no lone surrogates from JSON escapes)."""
    return (text.isascii() or _printable(text) is text) and not text.isspace() and text != ""


def _validated(raw: Any, config: ParseConfig) -> Event | dict:
    """The full validating path of :func:`parse_record`."""
    stream = user = None
    text = ""
    try:
        text, record = _decode(raw, config)
        stream = _read_stream(record, config)
        user = _read_user(record, config.fields)
        time = _read_time(record, config.fields)
        requirement = _read_requirement(record, config.fields)
        value = _read_value(record, config, requirement)
        return Event(stream, user, time, value, requirement, text[:EVENT_RAW_LIMIT])
    except _Rejected as rejected:
        text = text if rejected.text is None else rejected.text
        return dead_letter(rejected.reason, text, stage=PARSE_STAGE, stream=stream, user=user)
    except Exception as error:  # noqa: BLE001 -- last resort: an unforeseen input must not fail the bundle
        return dead_letter(f"unexpected parse error: {type(error).__name__}", text or _safe_text(raw),
                           stage=PARSE_STAGE, stream=stream, user=user)


# -- decoding: raw input to (text, record dict) ------------------------------------------------------------------


def _decode(raw: Any, config: ParseConfig) -> tuple[str, Mapping]:
    """The record's text (for dead letters and ``Event.raw``) and its fields; rejects undecodable input."""
    if config.file_format == "record":
        if not isinstance(raw, Mapping):
            raise _Rejected("not a record", _safe_text(raw))
        text = _record_text(raw)
        if len(text) > config.max_text_length:
            raise _Rejected("record too long", text)
        return text, raw
    text = _line_text(raw, config.max_text_length)
    if config.file_format == "jsonl":
        return text, _json_record(text)
    return text, _csv_record(text, config)


def _line_text(raw: Any, max_text_length: int) -> str:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        data = bytes(raw)
        if len(data) > 4 * max_text_length:  # more bytes than any accepted line can encode to
            raise _Rejected("record too long", _safe_text(data))
        try:
            raw = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _Rejected("not valid UTF-8", _safe_text(data)) from None
    if not isinstance(raw, str):
        raise _Rejected("not a text line", _safe_text(raw))
    text = _printable(raw)
    if len(raw) > max_text_length:
        raise _Rejected("record too long", text)
    if text is not raw:
        raise _Rejected("not valid Unicode", text)
    return raw.rstrip("\r\n")


def _json_record(text: str) -> Mapping:
    if not text.strip():
        raise _Rejected("empty line", text)
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        raise _Rejected("malformed JSON", text) from None
    if not isinstance(record, dict):
        raise _Rejected("not a JSON object", text)
    return record


def _csv_record(text: str, config: ParseConfig) -> Mapping:
    if not text.strip():
        raise _Rejected("empty line", text)
    try:
        cells = next(csv.reader([text], delimiter=config.csv_delimiter, strict=True))
    except (csv.Error, StopIteration):
        raise _Rejected("malformed CSV", text) from None
    columns = config.csv_columns
    if [cell.strip() for cell in cells] == list(columns):
        raise _Rejected("header", text)
    if len(cells) != len(columns):
        raise _Rejected("wrong number of CSV columns", text)
    return {name: (cell if cell.strip() else None) for name, cell in zip(columns, cells)}


def _record_text(record: Mapping) -> str:
    """Canonical JSON text of a dict record (falls back to ``repr`` for what JSON cannot show)."""
    for dump in (lambda: json.dumps(record, sort_keys=True, default=str),
                 lambda: json.dumps(record, default=str)):
        try:
            return dump()
        except Exception:  # noqa: BLE001 -- unsortable keys, cycles, deep nesting, hostile __str__
            continue
    return _safe_text(record)


def _safe_text(raw: Any) -> str:
    """Some printable, UTF-8-encodable text for any object."""
    try:
        if isinstance(raw, (bytes, bytearray, memoryview)):
            return bytes(raw).decode("utf-8", "backslashreplace")
        if isinstance(raw, str):
            return _printable(raw)
        return _printable(repr(raw))
    except Exception:  # noqa: BLE001 -- a hostile __repr__ must not fail parsing
        return f"<unprintable {type(raw).__name__}>"


def _printable(text: str) -> str:
    """``text`` itself when it encodes as UTF-8, else with lone surrogates escaped (sinks need UTF-8)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


# -- fields ------------------------------------------------------------------------------------------------------


def _present(record: Mapping, name: str | None) -> Any:
    """The field's value, ``None`` when missing or null."""
    if name is None:
        return None
    try:
        return record.get(name)
    except Exception:  # noqa: BLE001 -- exotic mappings
        return None


def _read_stream(record: Mapping, config: ParseConfig) -> str:
    stream = _present(record, config.fields.stream)
    if stream is None or (isinstance(stream, str) and not stream.strip()):
        return config.default_stream
    stream = _text_field(stream, config.fields.stream)
    if KEY_SEPARATOR in stream:
        raise _Rejected(f"field {config.fields.stream!r} contains the reserved character U+001F")
    return stream


def _read_user(record: Mapping, fields: FieldMapping) -> str:
    user = _present(record, fields.user)
    if user is None:
        raise _Rejected(f"missing field {fields.user!r}")
    if _is_int(user):
        try:
            return str(int(user))
        except ValueError:  # more digits than int-to-text conversion allows
            raise _Rejected(f"field {fields.user!r} is too long") from None
    user = _text_field(user, fields.user)
    if not user.strip():
        raise _Rejected(f"empty {fields.user}")
    return user


def _text_field(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _Rejected(f"field {name!r} is not a string")
    if _printable(value) is not value:
        raise _Rejected(f"field {name!r} is not valid Unicode")
    return value


def _read_time(record: Mapping, fields: FieldMapping) -> float:
    raw_time = _present(record, fields.time)
    if raw_time is None:
        raise _Rejected(f"missing field {fields.time!r}")
    if isinstance(raw_time, datetime):
        seconds = _datetime_seconds(raw_time)
    elif isinstance(raw_time, str):
        seconds = _text_seconds(raw_time)
    else:
        number = _as_number(raw_time)
        if number is None:
            raise _Rejected(f"field {fields.time!r} is not a number or ISO-8601 text")
        seconds = number
    if not _is_finite(seconds) or not 0 <= seconds <= MAX_TIME:
        raise _Rejected("time out of range")
    return float(seconds)


def time_seconds(text: str, name: str = "time") -> float:
    """Epoch seconds of ``text``: a number, or ISO 8601 (naive times are UTC); ValueError naming ``name``."""
    try:
        seconds = float(_text_seconds(text))
    except _Rejected as error:
        raise ValueError(f"{name}: {error}") from None
    if not (_is_finite(seconds) and 0 <= seconds <= MAX_TIME):
        raise ValueError(f"{name}: time {text!r} out of range")
    return seconds


def _text_seconds(text: str) -> int | float | Decimal:
    stripped = text.strip()
    if _NUMBER.fullmatch(stripped):
        return Decimal(stripped)
    iso = stripped[:-1] + "+00:00" if stripped[-1:] in ("Z", "z") else stripped
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise _Rejected(f"unparseable time {_shorten(text)!r}") from None
    return _datetime_seconds(moment)


def _datetime_seconds(moment: datetime) -> float:
    """Epoch seconds of ``moment``; naive times are UTC."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()


def _read_value(record: Mapping, config: ParseConfig, requirement: tuple | None) -> int:
    fields = config.fields
    raw_value = _present(record, fields.value)
    if raw_value is None and requirement is not None:
        return NO_VALUE
    if config.to_bin is not None:
        return _mapped_bin(record, config)
    if raw_value is None:
        raise _Rejected(f"missing field {fields.value!r}")
    number = _as_number(raw_value)
    if number is None:
        raise _Rejected("value is not a number")
    if _is_nan(number):
        raise _Rejected("value is NaN")
    if not _is_finite(number):
        raise _Rejected("value is infinite")
    if not 0 <= number < config.bins:
        raise _Rejected(f"value out of domain [0, {config.bins})")
    if not _is_integral(number):
        raise _Rejected("value is not an integer bin")
    return int(number)


def _mapped_bin(record: Mapping, config: ParseConfig) -> int:
    try:
        mapped = config.to_bin(dict(record))
    except ValueError as error:
        raise _Rejected(_shorten(str(error), 200) or "to_bin rejected the record") from None
    except Exception as error:  # noqa: BLE001 -- a mapper failing on odd input rejects that input
        raise _Rejected(f"to_bin failed: {type(error).__name__}") from None
    if not _is_int(mapped) or not 0 <= mapped < config.bins:
        raise _Rejected(f"to_bin returned a value outside [0, {config.bins})")
    return int(mapped)


# -- requirements ------------------------------------------------------------------------------------------------


def _read_requirement(record: Mapping, fields: FieldMapping) -> tuple | None:
    """The declared requirement as a ``records`` declaration tuple, or ``None`` when none is declared."""
    fixed = {name: _present(record, name) for name in (fields.w, fields.epsilon)}
    dynamic = {name: _present(record, name) for name in (fields.w_b, fields.epsilon_b, fields.w_f, fields.epsilon_f)}
    level = _present(record, fields.level)
    lifetime = _present(record, fields.lifetime)
    has_fixed = any(value is not None for value in fixed.values())
    has_dynamic = any(value is not None for value in dynamic.values())
    if has_fixed and has_dynamic:
        raise _Rejected("requirement: both fixed and dynamic fields")
    if lifetime is not None:
        if has_fixed or has_dynamic or level is not None:
            raise _Rejected("requirement: both a lifetime budget and other requirement fields")
        return ("lifetime", _epsilon(lifetime, fields.lifetime))
    if level is not None:
        if has_fixed or has_dynamic:
            raise _Rejected("requirement: both level and explicit fields")
        if not isinstance(level, str) or not level.strip():
            raise _Rejected(f"requirement: {fields.level} must be a non-empty string")
        return ("level", _text_field(level, fields.level).strip())
    if has_fixed:
        if any(value is None for value in fixed.values()):
            raise _Rejected("requirement: incomplete fixed declaration")
        return ("fixed", _window(fixed[fields.w], fields.w), _epsilon(fixed[fields.epsilon], fields.epsilon))
    if has_dynamic:
        if any(value is None for value in dynamic.values()):
            raise _Rejected("requirement: incomplete dynamic declaration")
        return ("dynamic",
                _window(dynamic[fields.w_b], fields.w_b), _epsilon(dynamic[fields.epsilon_b], fields.epsilon_b),
                _window(dynamic[fields.w_f], fields.w_f), _epsilon(dynamic[fields.epsilon_f], fields.epsilon_f))
    return None


def _window(raw: Any, name: str) -> int:
    number = _as_number(raw)
    if number is None or not _is_finite(number) or number < 1 or not _is_integral(number):
        raise _Rejected(f"requirement: {name} must be a positive integer")
    if number > MAX_WINDOW:
        raise _Rejected(f"requirement: {name} must be at most {MAX_WINDOW}")
    return int(number)


def _epsilon(raw: Any, name: str) -> str:
    """Exact decimal text of a positive, finite epsilon within the budget's range and resolution."""
    if isinstance(raw, str):
        text = raw.strip()
        if not _FINITE_DECIMAL.fullmatch(text):
            raise _Rejected(f"requirement: {name} must be a finite number")
        exact = Decimal(text)
    else:
        number = _as_number(raw)
        if number is None or not _is_finite(number):
            raise _Rejected(f"requirement: {name} must be a finite number")
        if isinstance(number, Decimal):
            text, exact = str(number), number
        else:
            try:
                text = repr(float(number))
            except OverflowError:
                raise _Rejected(f"requirement: {name} must be at most {MAX_EPSILON}") from None
            exact = Decimal(text)
    if exact <= 0:
        raise _Rejected(f"requirement: {name} must be > 0")
    if exact > MAX_EPSILON:
        raise _Rejected(f"requirement: {name} must be at most {MAX_EPSILON}")
    if exact < _EPSILON_RESOLUTION:
        raise _Rejected(f"requirement: {name} is below the budget resolution 1e-12")
    return text


# -- numbers -----------------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _as_number(value: Any) -> int | float | Decimal | None:
    """``value`` as an exact-enough number (numeric text becomes ``Decimal``), ``None`` if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Decimal):
        return value
    if isinstance(value, str):
        stripped = value.strip()
        if _NUMBER.fullmatch(stripped):
            try:
                return Decimal(stripped)
            except InvalidOperation:
                return None
    return None


def _is_nan(number: float | Decimal) -> bool:
    if isinstance(number, Decimal):
        return number.is_nan()
    return isinstance(number, float) and math.isnan(number)


def _is_finite(number: float | Decimal) -> bool:
    if isinstance(number, Decimal):
        return number.is_finite()
    return isinstance(number, int) or math.isfinite(number)


def _is_integral(number: float | Decimal) -> bool:
    if isinstance(number, Decimal):
        return number == number.to_integral_value()
    return isinstance(number, int) or number.is_integer()


def _shorten(text: str, limit: int = _REASON_DETAIL_LIMIT) -> str:
    text = _safe_text(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# -- Beam --------------------------------------------------------------------------------------------------------


def _none(*_) -> None:
    return None
