"""Reading text files as batches of lines (transforms/lines.py): exactly ReadFromText's records."""

from __future__ import annotations

import gzip
import os

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_helpers import batch_pipeline
from transforms.lines import LineBatch, ReadLines, file_ranges, read_range
from transforms.parse import ParseConfig, ParseEvents


def reference_lines(data: bytes) -> list:
    """ReadFromText's records: split at \\n, one \\r before it dropped, no empty record after a final newline."""
    pieces = data.split(b"\n")
    last = pieces.pop()
    lines = [piece[:-1] if piece.endswith(b"\r") else piece for piece in pieces] + ([last] if last else [])
    return [_text_or_bytes(line) for line in lines]


def _text_or_bytes(line: bytes):
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return line


def read_all(path: str, split_bytes: int, block_bytes: int) -> list:
    lines = []
    for element in file_ranges(path, split_bytes):
        for batch in read_range(element, block_bytes):
            assert type(batch) is LineBatch
            lines.extend(batch)
    return lines


pieces = st.sampled_from([b"\n", b"\r\n", b"\r", b"a", b"bc", b"{}", b"\xc3\xa9", b"\xff", b" ", b"\n\n"])


@settings(max_examples=300, deadline=None)
@given(content=st.lists(pieces, max_size=40).map(b"".join), split_bytes=st.integers(1, 30),
       block_bytes=st.integers(1, 12))
def test_every_line_once_whatever_the_ranges_and_blocks(tmp_path_factory, content, split_bytes, block_bytes):
    path = os.path.join(tmp_path_factory.mktemp("lines"), "events.jsonl")
    with open(path, "wb") as f:
        f.write(content)
    assert read_all(path, split_bytes, block_bytes) == reference_lines(content)


def test_compressed_files_are_read_whole(tmp_path):
    content = b'{"a": 1}\r\n\n{"b": 2}\nlast'
    path = str(tmp_path / "events.jsonl.gz")
    with gzip.open(path, "wb") as f:
        f.write(content)
    assert file_ranges(path, 4) == [(path, 0, None)]
    assert read_all(path, 4, 3) == reference_lines(content)


def test_no_matching_file_fails_at_construction(tmp_path):
    with pytest.raises(OSError, match="No files found"):
        ReadLines(str(tmp_path / "*.jsonl"))


def test_same_records_as_read_from_text_and_bad_utf8_becomes_a_dead_letter(tmp_path):
    lines = ['{"user": "u%d", "time": %d, "value": %d}' % (i, i, i % 3) for i in range(500)] + ["", "zoë", "\r", "\r"]
    expected = []
    for i in range(4):
        content = ("\r\n".join(lines[i::4]) + ("\n" if i % 2 else "")).encode("utf-8")
        (tmp_path / f"part-{i}.jsonl").write_bytes(content)
        expected.extend(reference_lines(content))
    (tmp_path / "bad.txt").write_bytes(b'{"user": "\xff"}\n')
    pattern = str(tmp_path / "*.jsonl")
    assert "\r" in expected and "" in expected and "zoë" in expected
    with batch_pipeline() as p:
        text = p | "Text" >> beam.io.ReadFromText(pattern)
        lines = p | "Lines" >> ReadLines(pattern, split_bytes=1000, block_bytes=300) | beam.FlatMap(lambda b: b)
        assert_that(lines, equal_to(expected), label="lines")
        assert_that(text, equal_to(expected), label="text")
    with batch_pipeline() as p:
        parsed = p | ReadLines(str(tmp_path / "bad.txt")) | ParseEvents(ParseConfig(bins=3))
        assert_that(parsed.dead_letters | beam.Map(lambda d: d["reason"]), equal_to(["not valid UTF-8"]))
