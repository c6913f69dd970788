"""Are two evaluation runs the same, apart from their measured times?

    python -m benchmarks.compare_evaluation before/results.csv after/results.csv

compares two ``results.csv`` of ``python -m pipelines.evaluation`` (same options and seed), row by row and column
by column as written, without the timing columns (``seconds_per_slot``, ``wall_seconds``, ``cpu_seconds``), and
prints one JSON object ``{"identical": bool, "rows": n, "differences": [the first few]}``.  Exit code 1 when they
differ (a refactoring changed the results), 2 when a file cannot be read.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

from pipelines.evaluation.experiment import TIMING_COLUMNS

SHOWN = 10
"""Differences listed at most."""


def read(path: str) -> tuple[list[str], list[dict[str, str]]]:
    """The columns (timing ones dropped) and rows of a ``results.csv``, values as written."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = [c for c in reader.fieldnames or [] if c not in TIMING_COLUMNS]
        return columns, [{c: row[c] for c in columns} for row in reader]


def compare(before: str, after: str, shown: int = SHOWN) -> dict:
    """``{"identical", "rows", "differences"}`` of two ``results.csv`` without their timing columns."""
    (columns_a, rows_a), (columns_b, rows_b) = read(before), read(after)
    differences: list[dict] = []
    if columns_a != columns_b:
        differences.append({"columns": {"before": columns_a, "after": columns_b}})
    if len(rows_a) != len(rows_b):
        differences.append({"rows": {"before": len(rows_a), "after": len(rows_b)}})
    count = len(differences)
    for index, (a, b) in enumerate(zip(rows_a, rows_b)):
        for column in dict.fromkeys(columns_a + columns_b):
            if a.get(column) != b.get(column):
                count += 1
                if len(differences) < shown:
                    differences.append({"row": index, "column": column, "before": a.get(column),
                                        "after": b.get(column)})
    return {"identical": count == 0, "rows": len(rows_a), "differences": differences,
            **({"different_cells": count} if count else {})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_evaluation",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="results.csv of the reference run")
    parser.add_argument("after", help="results.csv of the run to check")
    args = parser.parse_args(argv)
    try:
        result = compare(args.before, args.after)
    except (OSError, KeyError, csv.Error) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
