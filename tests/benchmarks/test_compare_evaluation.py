"""benchmarks/compare_evaluation.py: two results.csv are the same apart from their timing columns, or the first
differences are listed and the exit code is 1."""

from __future__ import annotations

import csv
import json

from benchmarks import compare_evaluation
from pipelines.evaluation.experiment import COLUMNS


def write(path, rows: list[dict]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


ROWS = [{"dataset": "sin", "mechanism": m, "amre": str(a), "seconds_per_slot": "0.001", "wall_seconds": "1.0",
         "cpu_seconds": "0.9"} for m, a in (("bd", 10.5), ("pbd", 3.25))]


def test_timing_columns_are_ignored(tmp_path, capsys):
    slower = [{**row, "seconds_per_slot": "0.5", "wall_seconds": "9", "cpu_seconds": "8"} for row in ROWS]
    assert compare_evaluation.main([write(tmp_path / "a.csv", ROWS), write(tmp_path / "b.csv", slower)]) == 0
    assert json.loads(capsys.readouterr().out) == {"identical": True, "rows": 2, "differences": []}


def test_a_changed_value_or_a_missing_row_is_reported_and_exits_1(tmp_path, capsys):
    changed = [ROWS[0], {**ROWS[1], "amre": "3.2500001"}]
    assert compare_evaluation.main([write(tmp_path / "a.csv", ROWS), write(tmp_path / "b.csv", changed)]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["identical"] is False and result["different_cells"] == 1
    assert result["differences"] == [{"row": 1, "column": "amre", "before": "3.25", "after": "3.2500001"}]
    assert compare_evaluation.main([str(tmp_path / "a.csv"), write(tmp_path / "c.csv", ROWS[:1])]) == 1
    assert json.loads(capsys.readouterr().out)["differences"] == [{"rows": {"before": 2, "after": 1}}]


def test_an_unreadable_file_exits_2(tmp_path, capsys):
    assert compare_evaluation.main([write(tmp_path / "a.csv", ROWS), str(tmp_path / "missing.csv")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
