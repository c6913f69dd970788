"""The byte layout of every value that crosses a stage boundary or lives in a state cell (Beam-free, no pickle).

Pickled bytes tie a streaming job's state to Python class paths and the pickle
protocol, so Dataflow cannot update such a job in place or drain it into a new
version safely.  Every encoding here starts with a layout version byte
(``VERSION``); a decoder refuses a version it does not know, and a later one
reads every earlier version (``docs/state_layout.md``).

Values are written in one small self-describing format (:func:`encode_value`):
a tag byte, then None, bool, int (any size, zigzag varint), float (IEEE
double), str (UTF-8, lone surrogates kept), bytes, tuple, list, dict with str
keys, or a numpy array of int64, float64 or bool (dtype, shape,
little-endian bytes).  Anything else is refused with a TypeError: nothing
falls back to pickle.  Lists of many small rows (contributions, the release
stage's users) are written by columns (:class:`Rows`): one numpy call per column,
not one per value.  The Beam coders in ``transforms.coders`` wrap these.
"""

from __future__ import annotations

import itertools
import math
import struct
from operator import itemgetter

import numpy as np

VERSION = 1
"""The layout version every encoding here writes first."""

_DOUBLE = struct.Struct("<d")
_NONE, _FALSE, _TRUE, _INT, _FLOAT, _STR, _BYTES, _TUPLE, _LIST, _DICT, _ARRAY = b"NFTifsbtldA"
_I8, _F8 = np.dtype("<i8"), np.dtype("<f8")
_DTYPES = {"i8": _I8, "f8": _F8, "b1": np.dtype("?")}
_DTYPE_NAMES = {np.dtype(np.int64): "i8", np.dtype(np.float64): "f8", np.dtype(np.bool_): "b1"}


def write_varint(out: bytearray, n: int) -> None:
    """An unsigned integer, 7 bits a byte, least significant first."""
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


class Reader:
    """Reads what the writers here wrote, from ``data`` at ``pos``."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("encoded value is truncated")
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("encoded value is truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def array(self, dtype: np.dtype, n: int) -> np.ndarray:
        """``n`` values of ``dtype`` (little-endian) as a new, writable array in native byte order."""
        raw = self.take(n * dtype.itemsize)
        return np.frombuffer(raw, dtype, n).astype(dtype.newbyteorder("="))

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{len(self.data) - self.pos} bytes left over after the encoded value")


def _text(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def _put(out: bytearray, value) -> None:
    """Append ``value`` in the tagged format (see the module docstring)."""
    kind = type(value)
    if value is None:
        out.append(_NONE)
    elif kind is bool or kind is np.bool_:
        out.append(_TRUE if value else _FALSE)
    elif kind is int or isinstance(value, np.integer):
        value = int(value)
        out.append(_INT)
        magnitude = (value << 1) if value >= 0 else ((-value << 1) - 1)  # zigzag: any size, small stays short
        write_varint(out, magnitude)
    elif kind is float or kind is np.float64:
        out.append(_FLOAT)
        out += _DOUBLE.pack(value)
    elif kind is str:
        data = _text(value)
        out.append(_STR)
        write_varint(out, len(data))
        out += data
    elif kind is bytes:
        out.append(_BYTES)
        write_varint(out, len(value))
        out += value
    elif kind is tuple or kind is list or isinstance(value, tuple):  # a NamedTuple is written as its tuple
        out.append(_LIST if kind is list else _TUPLE)
        write_varint(out, len(value))
        for item in value:
            _put(out, item)
    elif isinstance(value, dict):
        out.append(_DICT)
        write_varint(out, len(value))
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"dict keys must be str to be encoded, got {type(key).__name__}")
            _put(out, key)
            _put(out, item)
    elif kind is np.ndarray:
        name = _DTYPE_NAMES.get(value.dtype)
        if name is None:
            raise TypeError(f"cannot encode a numpy array of {value.dtype} (int64, float64 or bool only)")
        out.append(_ARRAY)
        out += name.encode("ascii")
        write_varint(out, value.ndim)
        for n in value.shape:
            write_varint(out, n)
        out += np.ascontiguousarray(value, _DTYPES[name]).tobytes()
    else:
        raise TypeError(f"cannot encode a value of type {type(value).__name__} (no pickle fallback: "
                        f"add the type to transforms.coders)")


def _get(reader: Reader):
    """Inverse of :func:`_put`."""
    tag = reader.byte()
    if tag == _NONE:
        return None
    if tag == _TRUE or tag == _FALSE:
        return tag == _TRUE
    if tag == _INT:
        magnitude = reader.varint()
        return (magnitude >> 1) if not magnitude & 1 else -((magnitude + 1) >> 1)
    if tag == _FLOAT:
        return _DOUBLE.unpack(reader.take(8))[0]
    if tag == _STR:
        return reader.take(reader.varint()).decode("utf-8", "surrogatepass")
    if tag == _BYTES:
        return reader.take(reader.varint())
    if tag == _TUPLE or tag == _LIST:
        items = [_get(reader) for _ in range(reader.varint())]
        return items if tag == _LIST else tuple(items)
    if tag == _DICT:
        return {_get(reader): _get(reader) for _ in range(reader.varint())}
    if tag == _ARRAY:
        dtype = _DTYPES.get(reader.take(2).decode("ascii", "replace"))
        if dtype is None:
            raise ValueError("encoded array has an unknown dtype")
        shape = tuple(reader.varint() for _ in range(reader.varint()))
        return reader.array(dtype, math.prod(shape)).reshape(shape)
    raise ValueError(f"unknown tag {tag!r} in an encoded value")


def start() -> bytearray:
    """A new encoding: the version byte."""
    return bytearray((VERSION,))


def open_reader(data: bytes, what: str) -> Reader:
    """A reader past the version byte of ``data`` (an encoded ``what``), refusing unknown versions."""
    reader = Reader(data)
    if not data:
        raise ValueError(f"empty bytes are not an encoded {what}")
    version = reader.byte()
    if version != VERSION:
        raise ValueError(f"encoded {what} has layout version {version}; this code reads version {VERSION}")
    return reader


def encode_value(value) -> bytes:
    """``value`` in the tagged format, after the version byte."""
    out = start()
    _put(out, value)
    return bytes(out)


def decode_value(data: bytes, what: str = "value"):
    """Inverse of :func:`encode_value`."""
    reader = open_reader(data, what)
    value = _get(reader)
    reader.end()
    return value


# ---------------------------------------------------------------------------------------------- columns
_INT_WIDTHS = (np.dtype("<i1"), np.dtype("<i2"), np.dtype("<i4"), _I8)


def put_int_array(out: bytearray, column: np.ndarray) -> None:
    """An integer array's values in the narrowest little-endian width that holds them (width byte first)."""
    low, high = (int(column.min()), int(column.max())) if column.size else (0, 0)
    for width in _INT_WIDTHS:
        info = np.iinfo(width)
        if info.min <= low and high <= info.max:
            break
    else:
        raise TypeError("integer column does not fit in int64")
    out.append(width.itemsize)
    out += column.astype(width, copy=False).tobytes()


def get_int_array(reader: Reader, n: int) -> np.ndarray:
    """Inverse of :func:`put_int_array`: ``n`` values as int64."""
    size = reader.byte()
    width = next((w for w in _INT_WIDTHS if w.itemsize == size), None)
    if width is None:
        raise ValueError(f"encoded integer column has an unknown width {size}")
    return reader.array(width, n).astype(np.int64, copy=False)


def _put_ints(out: bytearray, values: list) -> None:
    """int64 column (refuses floats, bools and ints that do not fit)."""
    column = np.array(values)
    if column.dtype.kind not in "iu":
        raise TypeError(f"expected an int64 column, got values of dtype {column.dtype}")
    put_int_array(out, column)


def _get_ints(reader: Reader, n: int) -> list:
    return get_int_array(reader, n).tolist()


_SEPARATED, _COUNTED = 0, 1


def put_texts(out: bytearray, values: list) -> None:
    """Optional str column as one UTF-8 text: joined by NUL when none holds one (split back in one call), else
    each length in code points (-1: None) first."""
    if None not in values:
        joined = "\x00".join(values)
        if joined.count("\x00") == max(len(values) - 1, 0):
            out.append(_SEPARATED)
            data = _text(joined)
            write_varint(out, len(data))
            out += data
            return
        lengths = np.fromiter(map(len, values), np.int64, len(values))
    else:
        lengths = np.fromiter((-1 if v is None else len(v) for v in values), np.int64, len(values))
        values = [v for v in values if v is not None]
    out.append(_COUNTED)
    put_int_array(out, lengths)
    data = _text("".join(values))
    write_varint(out, len(data))
    out += data


def get_texts(reader: Reader, n: int) -> list:
    """Inverse of :func:`put_texts`."""
    mode = reader.byte()
    if mode == _SEPARATED:
        text = reader.take(reader.varint()).decode("utf-8", "surrogatepass")
        values = text.split("\x00") if n else []
        if len(values) != n:
            raise ValueError(f"encoded text column holds {len(values)} values, not {n}")
        return values
    if mode != _COUNTED:
        raise ValueError(f"encoded text column has an unknown mode {mode}")
    lengths = get_int_array(reader, n)
    text = reader.take(reader.varint()).decode("utf-8", "surrogatepass")
    missing = lengths < 0
    ends = np.cumsum(np.maximum(lengths, 0) if missing.any() else lengths).tolist()
    values = list(map(text.__getitem__, map(slice, [0, *ends[:-1]], ends)))
    for i in np.flatnonzero(missing).tolist():
        values[i] = None
    return values


def put_objects(out: bytearray, values: list) -> None:
    """Column of tagged values, dictionary-encoded: the distinct ones, then each row's index.

    Values equal in Python share one entry (in one column ``1`` and ``1.0`` both decode as the first)."""
    index = dict.fromkeys(values)
    for code, value in enumerate(index):
        index[value] = code
    write_varint(out, len(index))
    for value in index:
        _put(out, value)
    put_int_array(out, np.fromiter(map(index.__getitem__, values), np.int64, len(values)))


def get_objects(reader: Reader, n: int) -> list:
    """Inverse of :func:`put_objects`."""
    distinct = [_get(reader) for _ in range(reader.varint())]
    return list(map(distinct.__getitem__, get_int_array(reader, n).tolist()))


def _put_text_tuples(out: bytearray, values: list) -> None:
    """Column of tuples of str: each tuple's length, then every str as one text column."""
    put_int_array(out, np.fromiter(map(len, values), np.int64, len(values)))
    flat = list(itertools.chain.from_iterable(values))
    write_varint(out, len(flat))
    put_texts(out, flat)


def _get_text_tuples(reader: Reader, n: int) -> list:
    counts = get_int_array(reader, n)
    flat = get_texts(reader, reader.varint())
    if len(flat) == n and (counts == 1).all():  # one text each, the common case
        return list(zip(flat))
    ends = np.cumsum(counts).tolist()
    return list(map(tuple, map(flat.__getitem__, map(slice, [0, *ends[:-1]], ends))))


_COLUMN_WRITERS = {"int": _put_ints, "text": put_texts, "object": put_objects, "texts": _put_text_tuples}
_COLUMN_READERS = {"int": _get_ints, "text": get_texts, "object": get_objects, "texts": _get_text_tuples}


class Rows:
    """A list of equal-length tuples written column by column (``kinds``: one of ``_COLUMN_WRITERS`` each)."""

    def __init__(self, what: str, kinds: tuple[str, ...]):
        self.what, self.kinds = what, kinds

    def encode(self, rows: list) -> bytes:
        out = start()
        write_varint(out, len(rows))
        if rows:
            if len(set(map(len, rows))) != 1 or len(rows[0]) != len(self.kinds):
                raise TypeError(f"every {self.what} must have {len(self.kinds)} fields")
            for k, kind in enumerate(self.kinds):  # (one pass per column: zip(*rows) is slower)
                _COLUMN_WRITERS[kind](out, list(map(itemgetter(k), rows)))
        return bytes(out)

    def decode(self, data: bytes) -> list:
        reader = open_reader(data, self.what)
        n = reader.varint()
        if not n:
            reader.end()
            return []
        columns = [_COLUMN_READERS[kind](reader, n) for kind in self.kinds]
        reader.end()
        return list(zip(*columns))


CONTRIBUTION_ROWS = Rows("list of contributions", ("int", "text", "int", "object", "texts"))
"""``Contribution`` fields: slot, user, value, declaration (tagged, dictionary-encoded), the records' texts."""
