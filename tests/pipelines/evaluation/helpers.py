"""Helpers shared by the evaluation harness's tests: reading a run's results.csv and making result rows."""

from __future__ import annotations

import csv

from pipelines.evaluation import experiment, sweeps


def read_rows(directory) -> list[dict]:
    with open(directory / "results.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in experiment.TIMING_COLUMNS} for row in rows]


def rows_with(amre: dict[str, list[float]], dataset="sin", sweep="epsilon", repeats=3, jitter=0.0) -> list[dict]:
    """Result rows whose AMRE per point is given (repeat k multiplied by 1 + k * jitter)."""
    points = [p[("epsilon", "window", "ratio").index(sweeps.SWEEP_COLUMN[sweep])] for p in sweeps.SWEEPS[sweep]]
    return [{"dataset": dataset, "sweep": sweep, "mechanism": m, sweeps.SWEEP_COLUMN[sweep]: p, "repeat": k,
             "amre": v * (1 + k * jitter)}
            for m, values in amre.items() for p, v in zip(points, values) for k in range(repeats)]


def claim_rows() -> list[dict]:
    """Sin, epsilon sweep, three repeats: PBD below BD in every pair, DPBA above PBA in every pair, PBA below
    PBD at three points and above at two, DPBD equal to PBD (redrawn) and below it (held)."""
    return rows_with({"pbd": [2, 2, 2, 2, 2], "bd": [4, 4, 4, 4, 4],          # PBD below BD in every pair
                      "pba": [1, 5, 1, 5, 1], "dpba": [9, 9, 9, 9, 9],         # DPBA above PBA in every pair
                      "dpbd": [2, 2, 2, 2, 2], "dpbd:held": [1, 1, 1, 1, 1]})  # redrawn equal, held below
