"""Record values to histogram bins: the ``to_bin`` hooks of :class:`~transforms.parse.ParseConfig`.

Each binner is a picklable frozen dataclass called with the raw record dict; it
returns a bin in ``[0, bins)`` or raises ``ValueError(reason)``, and the parse
stage turns the reason into a dead letter. Reasons are short and stable (they
name the domain, not the offending value) so dead letters group well.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

_EXACT = decimal.Context(prec=80, traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow])
"""Grid arithmetic on the decimal values users write: 116.08 is the edge of a 0.08-wide cell, not 116.0799..."""

_DETAIL_LIMIT = 40


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _decimal(value: Any) -> Decimal | None:
    """``value`` as the decimal number it reads as (floats by their shortest repr); ``None`` if not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        return value
    if isinstance(value, numbers.Integral):
        return Decimal(int(value))
    if isinstance(value, numbers.Real):
        return Decimal(repr(float(value)))
    if isinstance(value, str):
        try:
            return Decimal(value.strip())
        except decimal.InvalidOperation:
            return None
    return None


def _shorten(text: str) -> str:
    return text if len(text) <= _DETAIL_LIMIT else text[:_DETAIL_LIMIT - 3] + "..."


def _cell(value: Decimal, low: Decimal, high: Decimal, count: int) -> int:
    """Index of the half-open cell of ``[low, high)`` cut into ``count`` equal cells that holds ``value``."""
    try:
        return int(_EXACT.divide_int(_EXACT.multiply(_EXACT.subtract(value, low), count),
                                     _EXACT.subtract(high, low)))
    except decimal.Inexact:  # wildly different magnitudes: exact rationals instead
        return math.floor((Fraction(value) - Fraction(low)) * count / (Fraction(high) - Fraction(low)))


def _format(number: float) -> str:
    return f"{number:g}" if float(f"{number:g}") == number else repr(number)


@dataclass(frozen=True)
class GridBins:
    """A ``rows`` x ``cols`` grid over a lon/lat box: bin ``row * cols + col``, row 0 on the ``lat_min`` side.

    Cells are half-open, ``[min, max)`` in both axes, so ``lon_max`` and
    ``lat_max`` themselves are outside. Edges are computed exactly on the
    decimal values of the coordinates, so a point on a written edge (116.08 in
    a 0.08-wide grid from 116) lands in the cell that starts there.
    """

    lon_min: float
    lon_max: float
    lat_min: float
    lat_max: float
    rows: int
    cols: int
    lon_field: str = "lon"
    lat_field: str = "lat"
    _bounds: tuple = dataclasses.field(init=False, repr=False, compare=False)
    _outside: str = dataclasses.field(init=False, repr=False, compare=False)
    _tolerances: tuple = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in ("rows", "cols"):
            count = getattr(self, name)
            if not _is_int(count) or count < 1:
                raise ValueError(f"{name} must be an integer >= 1 (a grid needs at least one cell), got {count!r}")
            object.__setattr__(self, name, int(count))
        for name in ("lon_min", "lon_max", "lat_min", "lat_max"):
            bound = getattr(self, name)
            if isinstance(bound, bool) or not isinstance(bound, numbers.Real) or not math.isfinite(bound):
                raise ValueError(f"{name} must be a finite number, got {bound!r}")
            object.__setattr__(self, name, float(bound))
        for axis in ("lon", "lat"):
            low, high = getattr(self, f"{axis}_min"), getattr(self, f"{axis}_max")
            if not low < high:
                raise ValueError(f"{axis}_min must be < {axis}_max, got {low!r} and {high!r}")
        for name in ("lon_field", "lat_field"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        if self.lon_field == self.lat_field:
            raise ValueError(f"lon_field and lat_field must differ, both are {self.lon_field!r}")
        object.__setattr__(self, "_bounds", tuple(_decimal(getattr(self, name))
                                                  for name in ("lon_min", "lon_max", "lat_min", "lat_max")))
        object.__setattr__(self, "_outside", f"outside the grid lon [{_format(self.lon_min)}, "
                                             f"{_format(self.lon_max)}) x lat [{_format(self.lat_min)}, "
                                             f"{_format(self.lat_max)})")
        object.__setattr__(self, "_tolerances", (_float_tolerance(self.lon_min, self.lon_max, self.cols),
                                                 _float_tolerance(self.lat_min, self.lat_max, self.rows)))

    @classmethod
    def tdrive(cls) -> GridBins:
        """The papers' 10 x 10 grid over Beijing for T-Drive: lon [116, 116.8), lat [39.5, 40.3)."""
        return cls(116.0, 116.8, 39.5, 40.3, 10, 10)

    @property
    def bins(self) -> int:
        return self.rows * self.cols

    def describe(self) -> str:
        """The grid as one line, e.g. ``lon [116, 116.8) x lat [39.5, 40.3), 10x10``."""
        return (f"lon [{_format(self.lon_min)}, {_format(self.lon_max)}) x "
                f"lat [{_format(self.lat_min)}, {_format(self.lat_max)}), {self.rows}x{self.cols}")

    def __call__(self, record: Mapping) -> int:
        raw_lon, raw_lat = record.get(self.lon_field), record.get(self.lat_field)
        if raw_lon is None or raw_lat is None:
            raise ValueError("missing coordinates")
        if type(raw_lon) is float and type(raw_lat) is float:  # the common case, ~10x faster than decimals
            cell = self._float_cell(raw_lon, raw_lat)
            if cell is not None:
                return cell
        lon, lat = _decimal(raw_lon), _decimal(raw_lat)
        if lon is None or lat is None or lon.is_nan() or lat.is_nan():
            raise ValueError("coordinates are not numbers")
        lon_min, lon_max, lat_min, lat_max = self._bounds
        if not (lon_min <= lon < lon_max and lat_min <= lat < lat_max):
            raise ValueError(self._outside)
        return _cell(lat, lat_min, lat_max, self.rows) * self.cols + _cell(lon, lon_min, lon_max, self.cols)

    def _float_cell(self, lon: float, lat: float) -> int | None:
        """The cell computed in floats, ``None`` when a point is too close to an edge to trust them.

        Float order equals the order of the floats' decimal reprs, so the box
        test is exact; only the division can round across an edge.
        """
        if math.isnan(lon) or math.isnan(lat):
            raise ValueError("coordinates are not numbers")
        if not (self.lon_min <= lon < self.lon_max and self.lat_min <= lat < self.lat_max):
            raise ValueError(self._outside)
        lon_tolerance, lat_tolerance = self._tolerances
        col = _trusted_float_cell(lon, self.lon_min, self.lon_max, self.cols, lon_tolerance)
        row = _trusted_float_cell(lat, self.lat_min, self.lat_max, self.rows, lat_tolerance)
        if col is None or row is None:
            return None
        return row * self.cols + col


def _float_tolerance(low: float, high: float, count: int) -> float:
    """A bound, in cell units and with a wide margin, on the rounding error of :func:`_trusted_float_cell`."""
    return 1e-9 * (1 + count * max(abs(low), abs(high)) / (high - low))


def _trusted_float_cell(value: float, low: float, high: float, count: int, tolerance: float) -> int | None:
    position = (value - low) / (high - low) * count
    index = math.floor(position)
    if tolerance < position - index < 1 - tolerance and 0 <= index < count:
        return index
    return None


@dataclass(frozen=True)
class CategoryBins:
    """Bin = position of ``str(record[field])`` in ``categories``.

    ``categories`` may be a sequence of names or a mapping name -> bin whose
    bins are exactly ``0 .. n-1``; it is stored as a tuple in bin order.
    """

    categories: tuple[str, ...]
    field: str = "value"
    _index: dict = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        categories = self.categories
        if isinstance(categories, Mapping):
            categories = _ordered_by_bin(categories)
        elif isinstance(categories, (str, bytes)) or not isinstance(categories, (tuple, list)):
            raise ValueError(f"categories must be a sequence or mapping of names, got {type(categories).__name__}")
        categories = tuple(categories)
        if not categories:
            raise ValueError("categories must not be empty")
        bad = [name for name in categories if not isinstance(name, str) or not name]
        if bad:
            raise ValueError(f"categories must be non-empty strings, got {bad[0]!r}")
        duplicates = sorted({name for name in categories if categories.count(name) > 1})
        if duplicates:
            raise ValueError(f"categories has duplicates: {', '.join(map(repr, duplicates))}")
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        object.__setattr__(self, "categories", categories)
        object.__setattr__(self, "_index", {name: index for index, name in enumerate(categories)})

    @property
    def bins(self) -> int:
        return len(self.categories)

    def __call__(self, record: Mapping) -> int:
        value = record.get(self.field)
        if value is None:
            raise ValueError(f"missing field {self.field!r}")
        text = str(value)
        try:
            return self._index[text]
        except KeyError:
            raise ValueError(f"unknown category {_shorten(text)!r}") from None


def _ordered_by_bin(mapping: Mapping) -> list:
    """The names of a name -> bin mapping in bin order; the bins must be exactly 0 .. n-1."""
    bins = list(mapping.values())
    if not all(_is_int(b) for b in bins) or sorted(bins) != list(range(len(bins))):
        raise ValueError(f"categories mapping must map names to the bins 0..{len(bins) - 1}, each once")
    return [name for name, _ in sorted(mapping.items(), key=lambda item: item[1])]


@dataclass(frozen=True)
class IntegerBins:
    """Bin = the integer ``record[field]`` itself, which must lie in ``[0, bins)`` (integral floats accepted)."""

    bins: int
    field: str = "value"

    def __post_init__(self):
        if not _is_int(self.bins) or self.bins < 1:
            raise ValueError(f"bins must be an integer >= 1, got {self.bins!r}")
        object.__setattr__(self, "bins", int(self.bins))
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")

    def __call__(self, record: Mapping) -> int:
        raw = record.get(self.field)
        if raw is None:
            raise ValueError(f"missing field {self.field!r}")
        number = _decimal(raw)
        if number is None:
            raise ValueError("value is not a number")
        if number.is_nan():
            raise ValueError("value is NaN")
        if number.is_infinite():
            raise ValueError("value is infinite")
        if not 0 <= number < self.bins:
            raise ValueError(f"value out of domain [0, {self.bins})")
        if number != number.to_integral_value():
            raise ValueError("value is not an integer bin")
        return int(number)


Binner = GridBins | CategoryBins | IntegerBins

SPEC_FORMS = ("grid:LON_MIN,LON_MAX,LAT_MIN,LAT_MAX,ROWSxCOLS", "tdrive", "categories:A,B,...", "int:BINS")


def binner_from_spec(spec: str) -> Binner:
    """The binner a command-line spec names (see ``SPEC_FORMS``); a bad spec is one ValueError line."""
    if not isinstance(spec, str):
        raise ValueError(f"bin spec must be a string, got {type(spec).__name__}")
    kind, colon, arguments = spec.strip().partition(":")
    kind = kind.strip().lower()
    try:
        if kind == "tdrive":
            if colon:
                raise ValueError("tdrive takes no arguments")
            return GridBins.tdrive()
        if kind == "grid" and colon:
            return _grid_from_spec(arguments)
        if kind == "categories" and colon:
            return CategoryBins(tuple(name.strip() for name in arguments.split(",")))
        if kind == "int" and colon:
            return IntegerBins(_spec_int(arguments, "bins"))
    except ValueError as error:
        raise ValueError(f"bad bin spec {spec!r}: {error}") from None
    raise ValueError(f"bad bin spec {spec!r}: expected one of {', '.join(SPEC_FORMS)}")


def _grid_from_spec(arguments: str) -> GridBins:
    parts = [part.strip() for part in arguments.split(",")]
    if len(parts) != 5:
        raise ValueError(f"grid needs 5 comma-separated parts LON_MIN,LON_MAX,LAT_MIN,LAT_MAX,ROWSxCOLS, "
                         f"got {len(parts)}")
    bounds = []
    for name, text in zip(("lon_min", "lon_max", "lat_min", "lat_max"), parts):
        try:
            bounds.append(float(text))
        except ValueError:
            raise ValueError(f"{name} is not a number: {text!r}") from None
    rows, x, cols = parts[4].lower().partition("x")
    if not x:
        raise ValueError(f"grid size must be ROWSxCOLS, got {parts[4]!r}")
    return GridBins(*bounds, _spec_int(rows, "rows"), _spec_int(cols, "cols"))


def _spec_int(text: str, name: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{name} is not an integer: {text.strip()!r}") from None
