"""Avro schemas of every record that crosses the pipeline's boundary, and their Arrow twins.

The ``.avsc`` files next to this module are the single source of truth: the
Avro and Parquet sinks write with them, and :func:`validate` checks records
against them. Nothing is read at import time (workers import this package
cheaply); each schema is loaded once on first use.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json

import fastavro
import fastavro.validation
import pyarrow as pa

SCHEMA_NAMES = ("event", "requirement", "release", "ledger_entry", "user_usage", "dead_letter", "request", "report")

_ARROW_PRIMITIVES = {"long": pa.int64(), "double": pa.float64(), "string": pa.string()}


def _check_name(name: str) -> None:
    if name not in SCHEMA_NAMES:
        raise ValueError(f"unknown schema {name!r}; expected one of {', '.join(SCHEMA_NAMES)}")


@functools.cache
def _parsed_avro_schema(name: str) -> dict:
    text = importlib.resources.files(__package__).joinpath(f"{name}.avsc").read_text(encoding="utf-8")
    return fastavro.parse_schema(json.loads(text))


RELEASE_VERSION = 2
"""Layout version of the release record: 2 made ``registered_users`` nullable and added ``reporters``."""

_EARLIER_VERSIONS = {("release", 1)}
"""Earlier layouts kept as writer schemas (``<name>_v<version>.avsc``), for records encoded before a change."""


@functools.cache
def _parsed_earlier_schema(name: str, version: int) -> dict:
    text = importlib.resources.files(__package__).joinpath(f"{name}_v{version}.avsc").read_text(encoding="utf-8")
    return fastavro.parse_schema(json.loads(text))


def earlier_avro_schema(name: str, version: int) -> dict:
    """The parsed Avro schema ``name`` as it was at layout ``version`` (the writer schema of records encoded
    then; Avro schema resolution reads them into :func:`avro_schema`)."""
    if (name, version) not in _EARLIER_VERSIONS:
        raise ValueError(f"no earlier version {version} of schema {name!r} is kept")
    return copy.deepcopy(_parsed_earlier_schema(name, version))


def avro_schema(name: str) -> dict:
    """The fastavro-parsed Avro schema ``name`` (a private copy: callers may mutate it)."""
    _check_name(name)
    return copy.deepcopy(_parsed_avro_schema(name))


def _arrow_type(avro_type) -> tuple[pa.DataType, bool]:
    """Arrow type and nullability of a (parsed) Avro field type."""
    if isinstance(avro_type, list):  # union
        branches = [branch for branch in avro_type if branch != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) == 1:
            return _arrow_type(branches[0])[0], nullable
        if sorted(branches) == ["double", "string"]:
            return pa.string(), nullable  # a time: written as text
        raise ValueError(f"no Arrow type for the Avro union {avro_type}")
    if isinstance(avro_type, str) and avro_type in _ARROW_PRIMITIVES:
        return _ARROW_PRIMITIVES[avro_type], False
    if isinstance(avro_type, dict):
        if avro_type["type"] == "enum":
            return pa.string(), False
        if avro_type["type"] == "array":
            return pa.list_(_arrow_type(avro_type["items"])[0]), False
        if avro_type["type"] == "map":
            return pa.map_(pa.string(), _arrow_type(avro_type["values"])[0]), False
    raise ValueError(f"no Arrow type for the Avro type {avro_type}")


@functools.cache
def arrow_schema(name: str) -> pa.Schema:
    """The Arrow schema matching the Avro schema ``name`` (a double-or-string time becomes string)."""
    _check_name(name)
    fields = []
    for field in _parsed_avro_schema(name)["fields"]:
        arrow_type, nullable = _arrow_type(field["type"])
        fields.append(pa.field(field["name"], arrow_type, nullable=nullable))
    return pa.schema(fields)


def validate(name: str, record: dict) -> None:
    """Raise ValueError unless ``record`` follows the Avro schema ``name``."""
    _check_name(name)
    if not isinstance(record, dict):
        # A bad record like any other: ValueError, not TypeError, so callers catch one exception.
        raise ValueError(f"a {name!r} record must be a dict, not {type(record).__name__}")  # noqa: TRY004
    try:
        fastavro.validation.validate(record, _parsed_avro_schema(name), raise_errors=True)
    except fastavro.validation.ValidationError as error:
        raise ValueError(f"record does not follow schema {name!r}: {'; '.join(map(str, error.errors))}") from error
