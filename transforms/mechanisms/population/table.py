"""Per-cohort state: one row per cohort, one column per quantity a mechanism keeps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNREGISTERED = -1
WAITING = -2  # registered, waiting for a changed fixed requirement to take effect


@dataclass(frozen=True)
class Column:
    """A per-cohort state column: ``history`` columns grow with the widest window."""

    dtype: type = np.int64
    fill: int = 0
    history: bool = False


class CohortTable:
    """Rows of per-cohort state, all columns indexed by cohort row.

    ``version`` changes whenever rows are added, copied, dropped or widened
    (or state is loaded), so what is derived from the rows can be kept until it does.
    """

    def __init__(self, columns: dict[str, Column]) -> None:
        self.columns = dict(columns)
        self.width = 1
        self.rows = 0
        self.data = {name: self._blank(col, 0) for name, col in self.columns.items()}
        self.size = np.zeros(0, np.int64)
        self.version = 0

    def _blank(self, col: Column, rows: int) -> np.ndarray:
        shape = (rows, self.width) if col.history else (rows,)
        return np.full(shape, col.fill, dtype=col.dtype)

    def add(self, count: int) -> np.ndarray:
        """Append ``count`` rows filled with defaults; returns their indices."""
        self.version += 1
        new = np.arange(self.rows, self.rows + count)
        for name, col in self.columns.items():
            self.data[name] = np.concatenate([self.data[name], self._blank(col, count)])
        self.size = np.concatenate([self.size, np.zeros(count, np.int64)])
        self.rows += count
        return new

    def copy_rows(self, sources: np.ndarray) -> np.ndarray:
        """Append copies of rows ``sources`` (sizes start at 0); returns the new indices."""
        self.version += 1
        new = np.arange(self.rows, self.rows + sources.size)
        for name in self.columns:
            self.data[name] = np.concatenate([self.data[name], self.data[name][sources]])
        self.size = np.concatenate([self.size, np.zeros(sources.size, np.int64)])
        self.rows += sources.size
        return new

    def widen(self, width: int) -> None:
        """Make history columns at least ``width`` slots deep (older slots read as fill)."""
        if width <= self.width:
            return
        self.version += 1
        for name, col in self.columns.items():
            if col.history:
                pad: np.ndarray = np.full((self.rows, width - self.width), col.fill, dtype=col.dtype)
                self.data[name] = np.concatenate([self.data[name], pad], axis=1)
        self.width = width

    def push(self, name: str, newest: np.ndarray) -> None:
        """Shift history column ``name`` one slot back and store ``newest`` as slot 0."""
        hist = self.data[name]
        hist[:, 1:] = hist[:, :-1].copy()
        hist[:, 0] = newest

    def keep(self, rows: np.ndarray) -> np.ndarray:
        """Drop every row not in ``rows`` (in order); returns old-row -> new-row map."""
        self.version += 1
        remap = np.full(self.rows + 1, UNREGISTERED, np.int64)
        remap[rows] = np.arange(rows.size)
        for name in self.columns:
            self.data[name] = self.data[name][rows]
        self.size = self.size[rows]
        self.rows = rows.size
        return remap

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, np.ndarray]:
        """The table as named arrays (``width``, ``rows``, ``size``, ``data.<column>``)."""
        arrays = {"width": np.array(self.width), "rows": np.array(self.rows), "size": self.size}
        arrays.update({f"data.{name}": values for name, values in self.data.items()})
        return arrays

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`state_arrays` (for the same columns)."""
        self.version += 1
        self.width, self.rows = int(arrays["width"]), int(arrays["rows"])
        self.size = np.array(arrays["size"])
        for name in list(self.data):
            self.data[name] = np.array(arrays[f"data.{name}"])


def read_only_copy(values: np.ndarray) -> np.ndarray:
    """A copy nobody can write to by accident (it is shared between releases)."""
    copy = values.copy()
    copy.flags.writeable = False
    return copy
