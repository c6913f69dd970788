"""Beam coders for every value that crosses a stage boundary or lives in a state cell: no pickle anywhere.

Each coder writes a layout of ``transforms.encoding`` (a version byte first,
see there and ``docs/state_layout.md``) and is deterministic, so any of them
may encode a key.  :data:`CODERS` maps each registered type to its coder;
importing this module registers them with Beam's registry, and the stages
declare their outputs' types so that Beam picks these coders at every stage
boundary.

Large state (the release stage's contributions and users) is kept in
``BytesCoder`` cells as the bytes :class:`ContributionsCoder` and
:class:`UsersCoder` make: the SDK's state cache measures every object it
holds, and one ``bytes`` object is cheap to measure.
"""

from __future__ import annotations

import io
import typing

import fastavro
import numpy as np
from apache_beam.coders import Coder, registry

from schemas import RELEASE_VERSION, avro_schema, earlier_avro_schema
from transforms.encoding import (CONTRIBUTION_ROWS, VERSION, decode_value, encode_value,
                                 get_objects, get_texts, open_reader, put_objects, put_texts, start, write_varint)
from transforms.engine import ChargeChunk, CheckpointSaved, EvaluationRow
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION
from transforms.numeric_records import AbsorptionRow, ClientRow, SampledRow, SlotSum
from transforms.records import Contribution, DeadLetterRecord, Event, ReleaseRecord


# ---------------------------------------------------------------------------------------------- coders
class _VersionedCoder(Coder):
    """A coder of this module: deterministic, equal when of the same class."""

    def is_deterministic(self) -> bool:
        return True

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class ValueCoder(_VersionedCoder):
    """Any value of the tagged format (the per-user stage's compact events, the ledger's tail, combiner totals)."""

    what = "value"

    def encode(self, value) -> bytes:
        return encode_value(value)

    def decode(self, encoded: bytes):
        return decode_value(encoded, self.what)

    def to_type_hint(self):
        return typing.Any


class DeclarationCoder(ValueCoder):
    """A requirement declaration tuple of str and int fields, or None (``transforms.records``)."""

    what = "declaration"

    def encode(self, value) -> bytes:
        if value is not None and not (isinstance(value, tuple) and value and isinstance(value[0], str)):
            raise TypeError(f"a declaration is None or a tuple starting with its kind, got {value!r}")
        return super().encode(value)


class _NamedTupleCoder(ValueCoder):
    """A NamedTuple written as its fields in the tagged format; decoded as the NamedTuple again."""

    named: typing.Any  # a NamedTuple class

    def __init__(self):
        self.what = self.named.__name__

    def encode(self, value) -> bytes:
        if len(value) != len(self.named._fields):
            raise TypeError(f"a {self.what} has {len(self.named._fields)} fields, got {len(value)}")
        return encode_value(tuple(value))

    def decode(self, encoded: bytes):
        return self.named._make(decode_value(encoded, self.what))

    def to_type_hint(self):
        return self.named


class EventCoder(_NamedTupleCoder):
    """``transforms.records.Event``: stream, user, time, value, declaration, raw."""

    named = Event


class ContributionCoder(_NamedTupleCoder):
    """One ``transforms.records.Contribution``; lists of them travel as :class:`ContributionsCoder` bytes."""

    named = Contribution


class EvaluationRowCoder(_NamedTupleCoder):
    """``transforms.engine.EvaluationRow``: stream, slot, released and true histograms."""

    named = EvaluationRow


class CheckpointSavedCoder(_NamedTupleCoder):
    """``transforms.engine.CheckpointSaved``: stream, next slot, checkpoint file bytes, the releases made since the
    previous one (an element written before that field existed decodes with none)."""

    named = CheckpointSaved

    def decode(self, encoded: bytes):
        fields = decode_value(encoded, self.what)
        return self.named._make(tuple(fields) + ((),) if len(fields) == 3 else fields)


class ChargeChunkCoder(_NamedTupleCoder):
    """``transforms.engine.ChargeChunk``: key, int64 table of any shape (shape + little-endian bytes), the requirement
    kind's name, the charge parts' names, two flags."""

    named = ChargeChunk

    def encode(self, value) -> bytes:
        table = value[1]
        if not isinstance(table, np.ndarray) or table.dtype != np.int64 or table.ndim != 2:
            raise TypeError(f"a ChargeChunk's table must be a 2-d int64 array, got {getattr(table, 'dtype', table)!r}")
        return super().encode((value[0], table, str(value[2]), tuple(map(str, value[3])), bool(value[4]),
                               bool(value[5])))

    def decode(self, encoded: bytes):
        fields = decode_value(encoded, self.what)
        if len(fields) == 5:  # written before named parts: (key, table, dynamic, final, complete), columns
            key, table, dynamic, final, complete = fields  # slot, dc, publication, least, requirement...
            table = np.concatenate([table[:, [0, 3, 1, 2]], table[:, 4:]], axis=1)
            return ChargeChunk(key, table, "dynamic" if dynamic else "fixed", (DISSIMILARITY, PUBLICATION), final,
                               complete)
        chunk = self.named._make(fields)
        return chunk._replace(parts=tuple(chunk.parts))


class ClientRowCoder(_NamedTupleCoder):
    """``transforms.numeric_records.ClientRow``: a user's numeric client state (float64 ring, float, int), the
    per-user client stage's ``client`` cell."""

    named = ClientRow

    def encode(self, value) -> bytes:
        deviations = value[0]
        if not isinstance(deviations, np.ndarray) or deviations.dtype != np.float64 or deviations.ndim != 1:
            raise TypeError(f"a ClientRow's deviations must be a 1-d float64 array, got {deviations!r}")
        return super().encode((deviations, float(value[1]), int(value[2])))


class SampledRowCoder(_NamedTupleCoder):
    """``transforms.numeric_records.SampledRow``: a user's PP-S family state (the client row's fields, the open
    segment's index, sum and count, the requirement row), the per-user client stage's ``client`` cell for the
    sampling methods."""

    named = SampledRow

    def encode(self, value) -> bytes:
        ClientRowCoder().encode(value[:3])  # refuses what the client row refuses
        return super().encode((value[0], float(value[1]), int(value[2]), int(value[3]), float(value[4]),
                               int(value[5]), tuple(int(v) for v in value[6])))

    def decode(self, encoded: bytes):
        row = super().decode(encoded)
        return row._replace(requirement=tuple(row.requirement))


class AbsorptionRowCoder(_NamedTupleCoder):
    """``transforms.numeric_records.AbsorptionRow``: a user's BA-SW state (float, three ints), the per-user client
    stage's ``client`` cell for BA-SW."""

    named = AbsorptionRow

    def encode(self, value) -> bytes:
        return super().encode((float(value[0]), int(value[1]), int(value[2]), int(value[3])))


class SlotSumCoder(_NamedTupleCoder):
    """``transforms.numeric_records.SlotSum``: count, exact scaled sum (any size), units."""

    named = SlotSum


class ContributionsCoder(_VersionedCoder):
    """A list of contribution tuples, by columns (what the per-user stage sends and the release stage's bag holds).

    Decodes to plain tuples in ``Contribution`` field order."""

    def encode(self, value: list) -> bytes:
        return CONTRIBUTION_ROWS.encode(value)

    def decode(self, encoded: bytes) -> list:
        return CONTRIBUTION_ROWS.decode(encoded)

    def to_type_hint(self):
        return typing.List[Contribution]


class UsersCoder(_VersionedCoder):
    """The release stage's users: ``(user ids in index order, {user: last declaration})``.

    Ids as one text column; the declarations as users (text column) and declarations (dictionary-encoded)."""

    def encode(self, value: tuple) -> bytes:
        user_ids, declared = value
        out = start()
        write_varint(out, len(user_ids))
        put_texts(out, list(user_ids))
        write_varint(out, len(declared))
        put_texts(out, list(declared))
        put_objects(out, list(declared.values()))
        return bytes(out)

    def decode(self, encoded: bytes) -> tuple:
        reader = open_reader(encoded, "users state")
        user_ids = get_texts(reader, reader.varint())
        n = reader.varint()
        users = get_texts(reader, n)
        declared = dict(zip(users, get_objects(reader, n)))
        reader.end()
        return user_ids, declared

    def to_type_hint(self):
        return typing.Tuple[typing.List[str], typing.Dict[str, tuple]]


class _AvroRecordCoder(_VersionedCoder):
    """A dict record written with fastavro's schemaless writer against ``schemas/<schema>.avsc``."""

    schema: str
    record_type: type
    version: int = VERSION  # the layout written
    earlier: tuple[int, ...] = ()  # layouts still read: each .avsc kept as a writer schema (earlier_avro_schema)

    def _parsed(self):
        parsed = getattr(self, "_schema", None)
        if parsed is None:
            parsed = self._schema = avro_schema(self.schema)
        return parsed

    def encode(self, value: dict) -> bytes:
        buffer = io.BytesIO()
        buffer.write(bytes((self.version,)))
        fastavro.schemaless_writer(buffer, self._parsed(), value)
        return buffer.getvalue()

    def decode(self, encoded: bytes) -> dict:
        buffer = io.BytesIO(encoded)
        version = buffer.read(1)
        if version == bytes((self.version,)):
            record = fastavro.schemaless_reader(buffer, self._parsed(), None)
        elif version and version[0] in self.earlier:  # Avro schema resolution: new fields take their defaults
            record = fastavro.schemaless_reader(buffer, earlier_avro_schema(self.schema, version[0]), self._parsed())
        else:
            raise ValueError(f"encoded {self.schema} record has layout version {version!r}; this code reads "
                             f"{', '.join(map(str, (*self.earlier, self.version)))}")
        if buffer.read(1):
            raise ValueError(f"bytes left over after an encoded {self.schema} record")
        return self.record_type(record)

    def to_type_hint(self):
        return self.record_type

    def __getstate__(self):  # the parsed schema is rebuilt where the coder is used
        return {}


class ReleaseRecordCoder(_AvroRecordCoder):
    """A release record (``schemas/release.avsc``, Avro binary); doubles and longs decode as the schema says."""

    schema, record_type = "release", ReleaseRecord
    version, earlier = RELEASE_VERSION, (1,)  # 2: registered_users nullable, reporters added


class DeadLetterCoder(_AvroRecordCoder):
    """A dead letter (``schemas/dead_letter.avsc``, Avro binary)."""

    schema, record_type = "dead_letter", DeadLetterRecord


CODERS = {Event: EventCoder, Contribution: ContributionCoder, EvaluationRow: EvaluationRowCoder,
          CheckpointSaved: CheckpointSavedCoder, ChargeChunk: ChargeChunkCoder, ReleaseRecord: ReleaseRecordCoder,
          DeadLetterRecord: DeadLetterCoder, ClientRow: ClientRowCoder, SlotSum: SlotSumCoder,
          SampledRow: SampledRowCoder, AbsorptionRow: AbsorptionRowCoder}
"""Each registered type and its coder."""


def register() -> None:
    """Register every coder of :data:`CODERS` with Beam's registry (idempotent)."""
    for value_type, coder in CODERS.items():
        registry.register_coder(value_type, coder)


register()
