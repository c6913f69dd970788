"""The numeric evaluation's series (spec ``ipp_app_capp.md`` §6.1): Volume, C6H6, the T-Drive latitudes and
the synthetic Constant / Pulse / Sinusoidal series, min-max normalised; an absent dataset is reported, not faked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np




SYNTHETIC_LENGTH = 2000
TAXI_SLOT_SECONDS = 600


# ------------------------------------------------------------------ data (spec §6.1)


@dataclass(frozen=True)
class Series:
    """One dataset: a (users, slots) matrix in [0, 1] and how it was made."""

    name: str
    values: np.ndarray
    note: str


def min_max(x: np.ndarray) -> np.ndarray:
    """Global min-max normalisation over the whole matrix (spec §6.1, the non-sampling reading)."""
    low, high = float(np.min(x)), float(np.max(x))
    if not high > low:
        raise ValueError("a series needs two distinct values to normalise")
    return (x - low) / (high - low)


def synthetic(length: int = SYNTHETIC_LENGTH) -> list[Series]:
    """Constant 0.1, Pulse (a 1 every 5th slot), Sinusoidal ``(1 + sin(t/10))/2`` (spec §6.1, Fig 11's data)."""
    t = np.arange(length)
    return [Series("Constant", np.full((1, length), 0.1), f"0.1 for {length} slots"),
            Series("Pulse", (t % 5 == 4).astype(np.float64)[None, :], f"zeros with a 1 every 5th slot, {length}"),
            Series("Sinusoidal", ((1 + np.sin(t / 10)) / 2)[None, :], f"(1 + sin(t/10))/2, {length} slots")]


def uci(folder: Path) -> list[Series]:
    out = []
    for name, file in (("Volume", "volume.csv"), ("C6H6", "air.csv")):
        path = folder / file
        if path.exists():
            x = np.loadtxt(path, skiprows=1)
            out.append(Series(name, min_max(x)[None, :], f"{path.name}, {x.size} values, global min-max"))
    return out


def taxi_latitudes(archive: Path, slot_seconds: int = TAXI_SLOT_SECONDS, min_observed: float = 0.5
                   ) -> tuple[np.ndarray, str]:
    """T-Drive latitudes as (taxis, slots): 2-8 Feb 2008 in ``slot_seconds`` slots, each slot the taxi's last
    fix (in file order) inside the papers' Beijing box (lon [116, 116.8), lat [39.5, 40.3)), carried forward (backward before
    the first fix); taxis with fixes in fewer than ``min_observed`` of the slots are left out; global min-max."""
    from transforms.loaders import iter_tdrive

    start = datetime(2008, 2, 2).timestamp()
    slots = int(7 * 86400 // slot_seconds)
    rows: dict[str, np.ndarray] = {}
    for record in iter_tdrive(str(archive)):
        if "lat" not in record or not (116.0 <= record["lon"] < 116.8 and 39.5 <= record["lat"] < 40.3):
            continue
        try:
            moment = datetime.strptime(record["time"], "%Y-%m-%d %H:%M:%S").timestamp()
        except ValueError:
            continue
        slot = int((moment - start) // slot_seconds)
        if 0 <= slot < slots:
            rows.setdefault(record["user"], np.full(slots, np.nan))[slot] = record["lat"]
    kept = []
    for user in sorted(rows, key=int):
        row = rows[user]
        seen = ~np.isnan(row)
        if seen.mean() < min_observed:
            continue
        index = np.where(seen, np.arange(slots), 0)
        np.maximum.accumulate(index, out=index)
        filled = row[index]
        filled[:np.argmax(seen)] = row[np.argmax(seen)]
        kept.append(filled)
    if not kept:
        raise ValueError(f"no taxi has fixes in >= {min_observed:.0%} of the slots in {archive}")
    matrix = np.array(kept)
    note = (f"{len(rows)} taxis read, {matrix.shape[0]} with fixes in ≥ {min_observed:.0%} of the "
            f"{slots} slots of {slot_seconds // 60} min, last fix per slot (file order) carried forward, global min-max")
    return min_max(matrix), note


def load(data_dir: Path, taxi_users: int | None, synthetic_length: int = SYNTHETIC_LENGTH
         ) -> tuple[list[Series], list[str]]:
    """Every dataset found under ``data_dir`` plus the synthetic ones; the notes say what was absent."""
    found, missing = uci(data_dir / "uci_numeric_streams"), []
    if len(found) < 2:
        missing.append(f"UCI series absent under {data_dir / 'uci_numeric_streams'}")
    archive = data_dir / "tdrive_sample600" / "taxi_log_2008_by_id.tar.xz"
    if archive.exists():
        matrix, note = taxi_latitudes(archive)
        if taxi_users is not None and matrix.shape[0] > taxi_users:
            matrix = matrix[:taxi_users]
            note += f"; the first {taxi_users} taxis used"
        found.append(Series("T-Drive", matrix, note))
    else:
        missing.append(f"T-Drive absent: {archive}")
    return found + synthetic(synthetic_length), missing
