"""Record values to histogram bins (transforms/binning.py)."""

from __future__ import annotations

import math
import pickle
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.binning import CategoryBins, GridBins, IntegerBins, binner_from_spec
from transforms.parse import ParseConfig, parse_record
from transforms.records import Event

TDRIVE = GridBins.tdrive()
OUTSIDE_TDRIVE = "outside the grid lon [116, 116.8) x lat [39.5, 40.3)"


def reason(binner, record: dict) -> str:
    with pytest.raises(ValueError) as error:
        binner(record)
    return str(error.value)


def point(lon, lat) -> dict:
    return {"lon": lon, "lat": lat}


# -- GridBins ------------------------------------------------------------------------------------------------------


def test_tdrive_grid_is_the_papers_10x10_box():
    assert (TDRIVE.lon_min, TDRIVE.lon_max, TDRIVE.lat_min, TDRIVE.lat_max) == (116.0, 116.8, 39.5, 40.3)
    assert (TDRIVE.rows, TDRIVE.cols, TDRIVE.bins) == (10, 10, 100)
    assert TDRIVE.describe() == "lon [116, 116.8) x lat [39.5, 40.3), 10x10"


@pytest.mark.parametrize("lon, lat, cell", [
    (116.0, 39.5, 0),                  # lower-left corner is inside
    (116.7999999, 39.5, 9),            # last column, first row
    (116.0, 40.2999999, 90),           # first column, last row
    (116.7999999, 40.2999999, 99),     # upper-right corner, just inside
    (116.08, 39.5, 1),                 # a written edge starts the next cell (not 116.0799...)
    (116.0799999, 39.5, 0),
    (116.0, 39.58, 10),                # row from latitude: the next row is 10 bins on
    (116.72, 40.22, 99),
    (116.4, 39.9, 55),                 # the middle edges meet at cell 55
    (116.51172, 39.92123, 56),         # the first point of taxi 1 in the T-Drive user guide
    (116.44457, 39.92157, 55),         # taxi 10
    (116.397, 39.909, 54),             # Tiananmen
    (116.587, 40.080, 77),             # Capital airport
])
def test_tdrive_cells(lon, lat, cell):
    assert TDRIVE(point(lon, lat)) == cell


@pytest.mark.parametrize("lon, lat", [
    (116.8, 39.9), (116.4, 40.3), (116.8, 40.3),           # the max edges are outside (half-open)
    (115.9999999, 39.9), (116.4, 39.4999999),
    (0.0, 0.0), (195.0, 68.0), (math.inf, 39.9), (116.4, -math.inf),
])
def test_points_outside_the_box(lon, lat):
    assert reason(TDRIVE, point(lon, lat)) == OUTSIDE_TDRIVE


@pytest.mark.parametrize("lon, lat", [
    (math.nan, 39.9), (116.4, math.nan), ("east", 39.9), (116.4, "north"), (True, 39.9), ([116.4], 39.9),
    ("nan", "39.9"),
])
def test_coordinates_that_are_not_numbers(lon, lat):
    assert reason(TDRIVE, point(lon, lat)) == "coordinates are not numbers"


def test_missing_coordinates():
    assert reason(TDRIVE, {"lon": 116.4}) == "missing coordinates"
    assert reason(TDRIVE, {"lat": 39.9, "lon": None}) == "missing coordinates"
    assert reason(TDRIVE, {}) == "missing coordinates"


def test_numeric_text_and_other_number_types_are_coordinates():
    """CSV records hand ``to_bin`` cell text; Avro/Parquet may give ints or Decimals."""
    assert TDRIVE(point("116.08", " 39.58 ")) == 11
    assert TDRIVE(point(Decimal("116.4"), Decimal("39.9"))) == 55
    grid = GridBins(0, 30, -20, 20, 4, 3)
    assert grid(point(10, 0)) == 2 * 3 + 1
    assert grid(point(29, 19)) == 11
    assert grid(point(0, -20)) == 0


def test_non_square_grid_and_custom_fields():
    grid = GridBins(0.0, 3.0, 0.0, 2.0, rows=2, cols=3, lon_field="x", lat_field="y")
    assert grid.bins == 6
    assert grid({"x": 2.5, "y": 1.5}) == 5
    assert grid({"x": 2.5, "y": 0.5}) == 2
    assert grid({"x": 0.5, "y": 1.0}) == 3
    assert reason(grid, {"lon": 1.0, "lat": 1.0}) == "missing coordinates"
    assert reason(grid, {"x": 3.0, "y": 1.0}) == "outside the grid lon [0, 3) x lat [0, 2)"


def test_single_cell_grid():
    grid = GridBins(-1, 1, -1, 1, 1, 1)
    assert grid(point(0.999, -1)) == 0
    assert reason(grid, point(1, 0)) == "outside the grid lon [-1, 1) x lat [-1, 1)"


def _reference_cell(value: float, low: float, high: float, count: int) -> int:
    """How many interior edges (on the decimal values) lie at or below ``value``."""
    exact, start, width = Fraction(repr(value)), Fraction(repr(low)), Fraction(repr(high)) - Fraction(repr(low))
    return sum(1 for k in range(1, count) if start + k * width / count <= exact)


@settings(max_examples=200, deadline=None)
@given(st.floats(116.0, 116.8, exclude_max=True), st.floats(39.5, 40.3, exclude_max=True),
       st.integers(1, 13), st.integers(1, 13))
def test_grid_cells_match_counting_edges(lon, lat, rows, cols):
    grid = GridBins(116.0, 116.8, 39.5, 40.3, rows, cols)
    expected = _reference_cell(lat, 39.5, 40.3, rows) * cols + _reference_cell(lon, 116.0, 116.8, cols)
    assert grid(point(lon, lat)) == expected
    assert 0 <= expected < grid.bins


@pytest.mark.parametrize("low, high, count", [(116.0, 116.8, 10), (39.5, 40.3, 7), (-125.0, -66.0, 13),
                                              (0.1, 0.7, 3), (-1e-3, 2e-3, 30)])
def test_points_on_and_next_to_every_edge(low, high, count):
    """The float fast path must agree with the exact edges for points within a few ulps of one."""
    grid = GridBins(low, high, 0.0, 1.0, 1, count)
    width = Fraction(repr(high)) - Fraction(repr(low))
    for k in range(count + 1):
        edge = float(Fraction(repr(low)) + k * width / count)
        for candidate in (edge, float(f"{edge:.12g}"), math.nextafter(edge, -math.inf),
                          math.nextafter(math.nextafter(edge, math.inf), math.inf)):
            if low <= candidate < high:
                assert grid(point(candidate, 0.5)) == _reference_cell(candidate, low, high, count), candidate
                assert grid(point(repr(candidate), "0.5")) == grid(point(candidate, 0.5))


def test_cells_with_wildly_different_magnitudes_stay_exact():
    grid = GridBins(-1e-300, 1.0, 0.0, 1e300, 2, 2)
    assert grid(point(0.5, 5e299)) == 3
    assert grid(point(0.4999999999999999, 4.999999999999999e299)) == 0


@pytest.mark.parametrize("arguments, parameter", [
    ((116, 116.8, 39.5, 40.3, 0, 10), "rows"),
    ((116, 116.8, 39.5, 40.3, 10, 0), "cols"),
    ((116, 116.8, 39.5, 40.3, -1, 10), "rows"),
    ((116, 116.8, 39.5, 40.3, 2.0, 10), "rows"),
    ((116, 116.8, 39.5, 40.3, True, 10), "rows"),
    ((116.8, 116, 39.5, 40.3, 10, 10), "lon_min"),
    ((116, 116, 39.5, 40.3, 10, 10), "lon_min"),
    ((116, 116.8, 40.3, 39.5, 10, 10), "lat_min"),
    ((math.nan, 116.8, 39.5, 40.3, 10, 10), "lon_min"),
    ((116, math.inf, 39.5, 40.3, 10, 10), "lon_max"),
    ((116, 116.8, "39.5", 40.3, 10, 10), "lat_min"),
    ((116, 116.8, 39.5, None, 10, 10), "lat_max"),
])
def test_grid_validation_names_the_parameter(arguments, parameter):
    with pytest.raises(ValueError, match=parameter):
        GridBins(*arguments)


def test_grid_field_validation():
    with pytest.raises(ValueError, match="lon_field and lat_field must differ"):
        GridBins(0, 1, 0, 1, 1, 1, lon_field="p", lat_field="p")
    with pytest.raises(ValueError, match="lat_field"):
        GridBins(0, 1, 0, 1, 1, 1, lat_field="")


def test_binners_are_frozen_picklable_and_comparable():
    for binner in (TDRIVE, CategoryBins(("a", "b")), IntegerBins(7)):
        copy = pickle.loads(pickle.dumps(binner))
        assert copy == binner and hash(copy) == hash(binner)
        with pytest.raises(AttributeError):
            binner.field = "other"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(TDRIVE))(point(116.4, 39.9)) == 55
    assert GridBins.tdrive() == GridBins(116, 116.8, 39.5, 40.3, 10, 10)


def test_grid_as_parse_to_bin():
    config = ParseConfig(bins=TDRIVE.bins, file_format="record", to_bin=TDRIVE)
    event = parse_record({"user": "1", "time": "2008-02-02 15:36:08", "lon": 116.51172, "lat": 39.92123}, config)
    assert isinstance(event, Event)
    assert (event.user, event.time, event.value) == ("1", 1201966568.0, 56)
    dead = parse_record({"user": "1", "time": "2008-02-02 15:36:08", "lon": 0.0, "lat": 0.0}, config)
    assert dead["reason"] == OUTSIDE_TDRIVE and dead["user"] == "1"
    dead = parse_record({"user": "1", "time": "2008-02-02 15:36:08", "lon": math.nan, "lat": 39.9}, config)
    assert dead["reason"] == "coordinates are not numbers"


# -- CategoryBins -------------------------------------------------------------------------------------------------


def test_category_bins_from_a_sequence():
    binner = CategoryBins(["red", "green", "blue"])
    assert binner.categories == ("red", "green", "blue") and binner.bins == 3
    assert [binner({"value": name}) for name in ("red", "green", "blue")] == [0, 1, 2]
    assert reason(binner, {"value": "mauve"}) == "unknown category 'mauve'"
    assert reason(binner, {"other": "red"}) == "missing field 'value'"


def test_category_bins_compare_the_text_of_the_value():
    binner = CategoryBins(("0", "20", "79"), field="poi")
    assert binner({"poi": 20}) == 1
    assert binner({"poi": "79"}) == 2
    assert reason(binner, {"poi": 20.0}) == "unknown category '20.0'"


def test_category_bins_from_a_mapping():
    binner = CategoryBins({"b": 1, "c": 2, "a": 0})
    assert binner.categories == ("a", "b", "c")
    assert binner({"value": "c"}) == 2
    assert binner == CategoryBins(("a", "b", "c"))


def test_unknown_category_reason_is_shortened():
    assert reason(CategoryBins(("a",)), {"value": "x" * 100}) == f"unknown category '{'x' * 37}...'"


@pytest.mark.parametrize("categories, message", [
    (("a", "b", "a"), "duplicates: 'a'"),
    ((), "must not be empty"),
    ([], "must not be empty"),
    (("a", ""), "non-empty strings"),
    (("a", 1), "non-empty strings"),
    ("abc", "sequence or mapping"),
    ({"a": 0, "b": 2}, "bins 0..1"),
    ({"a": 0, "b": 0}, "bins 0..1"),
    ({"a": "0"}, "bins 0..0"),
])
def test_category_validation(categories, message):
    with pytest.raises(ValueError, match=f"categor.*{message}"):
        CategoryBins(categories)


def test_category_field_validation():
    with pytest.raises(ValueError, match="field"):
        CategoryBins(("a",), field="")


# -- IntegerBins --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [(0, 0), (99, 99), (5.0, 5), ("7", 7), (" 8 ", 8), (Decimal("9.0"), 9)])
def test_integer_bins_accept_integral_values(value, expected):
    assert IntegerBins(100)({"value": value}) == expected


@pytest.mark.parametrize("value, message", [
    (100, "value out of domain [0, 100)"),
    (-1, "value out of domain [0, 100)"),
    (100.0, "value out of domain [0, 100)"),
    (5.5, "value is not an integer bin"),
    ("5.5", "value is not an integer bin"),
    (math.nan, "value is NaN"),
    (math.inf, "value is infinite"),
    ("seven", "value is not a number"),
    (True, "value is not a number"),
    ([1], "value is not a number"),
])
def test_integer_bins_reasons(value, message):
    assert reason(IntegerBins(100), {"value": value}) == message


def test_integer_bins_field_and_validation():
    assert IntegerBins(3, field="slot")({"slot": 2}) == 2
    assert reason(IntegerBins(3, field="slot"), {"value": 2}) == "missing field 'slot'"
    for bins in (0, -3, 2.0, True, None):
        with pytest.raises(ValueError, match="bins"):
            IntegerBins(bins)


# -- specs --------------------------------------------------------------------------------------------------------


def test_specs():
    assert binner_from_spec("grid:116,116.8,39.5,40.3,10x10") == TDRIVE
    assert binner_from_spec("tdrive") == TDRIVE
    assert binner_from_spec(" TDrive ") == TDRIVE
    assert binner_from_spec("grid: -125, -66, 24, 50, 4X8") == GridBins(-125, -66, 24, 50, 4, 8)
    assert binner_from_spec("categories:a,b,c") == CategoryBins(("a", "b", "c"))
    assert binner_from_spec("categories: a , b") == CategoryBins(("a", "b"))
    assert binner_from_spec("int:100") == IntegerBins(100)


@pytest.mark.parametrize("spec, problem", [
    ("", "expected one of"),
    ("hexgrid:1,2", "expected one of"),
    ("grid", "expected one of"),
    ("categories", "expected one of"),
    ("int", "expected one of"),
    ("tdrive:10x10", "tdrive takes no arguments"),
    ("grid:", "5 comma-separated parts"),
    ("grid:116,116.8,39.5,40.3", "got 4"),
    ("grid:116,116.8,39.5,40.3,10x10,extra", "got 6"),
    ("grid:east,116.8,39.5,40.3,10x10", "lon_min is not a number: 'east'"),
    ("grid:116,116.8,39.5,north,10x10", "lat_max is not a number: 'north'"),
    ("grid:116,116.8,39.5,40.3,10by10", "ROWSxCOLS"),
    ("grid:116,116.8,39.5,40.3,100", "ROWSxCOLS"),
    ("grid:116,116.8,39.5,40.3,tenx10", "rows is not an integer"),
    ("grid:116,116.8,39.5,40.3,10x", "cols is not an integer"),
    ("grid:116,116.8,39.5,40.3,0x10", "rows must be an integer >= 1"),
    ("grid:116,116.8,39.5,40.3,10x0", "cols must be an integer >= 1"),
    ("grid:116.8,116,39.5,40.3,10x10", "lon_min must be < lon_max"),
    ("grid:116,116.8,40.3,40.3,10x10", "lat_min must be < lat_max"),
    ("grid:116,inf,39.5,40.3,10x10", "lon_max must be a finite number"),
    ("grid:nan,116.8,39.5,40.3,10x10", "lon_min must be a finite number"),
    ("categories:", "non-empty strings"),
    ("categories:a,,b", "non-empty strings"),
    ("categories:a,b,a", "duplicates: 'a'"),
    ("int:", "bins is not an integer"),
    ("int:ten", "bins is not an integer: 'ten'"),
    ("int:2.5", "bins is not an integer"),
    ("int:0", "bins must be an integer >= 1"),
    ("int:-4", "bins must be an integer >= 1"),
])
def test_bad_specs_are_one_clear_line(spec, problem):
    with pytest.raises(ValueError) as error:
        binner_from_spec(spec)
    message = str(error.value)
    assert message.startswith(f"bad bin spec {spec!r}: ")
    assert problem in message
    assert "\n" not in message


def test_spec_must_be_text():
    with pytest.raises(ValueError, match="bin spec must be a string"):
        binner_from_spec(None)  # type: ignore[arg-type]
