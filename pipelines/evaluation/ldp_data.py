"""The LDP-IDS evaluation's real streams (spec ``ldp_ids.md`` §8.2), built with the central evaluation's reader
(:func:`pipelines.evaluation_data.build_stream`: parse, bin, slot, carry each user's last bin forward; a user is
absent before their first event).

* ``taxi``: the T-Drive sample (599 taxis of the paper's 10,357), 10-minute slots (889, the paper's 886), d = 5:
  five longitude strips, 0.06° wide, over the dense centre lon [116.25, 116.55) x lat [39.8, 40.05) (about 67%
  of the points; the paper's layout is unspecified).  A point outside is a dead letter: the taxi keeps its
  last cell.
* ``foursquare`` (the US subset, 4,969 users of the paper's 266,909) and ``gowalla`` (1,000 users): daily slots
  (532 and 627; the paper had 447 for Foursquare), bins the cells of the 10 x 10 grid over the contiguous US
  (lat [24, 50) x lon [-125, -66)) that hold at least one check-in of the file, in grid order (d = 39 and 55;
  the paper's 77 countries cannot be rebuilt from a US subset).  Both are above the Ada threshold at every
  ε of the sweeps, so every report is OUE, as for the paper's Foursquare (TV-2).

The true frequencies of a slot are over the users holding a value then; the mechanisms register every user at
the first slot (the population size n is public) and only holders report.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pipelines.evaluation_data import FOURSQUARE_GRID, DataUnavailable, EventSource, EventStream, build_stream
from transforms.binning import GridBins

TAXI_GRID = GridBins(116.25, 116.55, 39.8, 40.05, 1, 5)
"""Five 0.06°-wide longitude strips over T-Drive's dense centre."""
DAY = 86_400.0


@dataclass(frozen=True, eq=False)
class LdpStream:
    """A real stream whose grid cells are renumbered to the occupied ones (``cells[k]`` is bin k's grid cell)."""

    name: str
    description: str
    stream: EventStream
    cells: np.ndarray

    @property
    def bins(self) -> int:
        return int(self.cells.size)

    @property
    def users(self) -> int:
        return self.stream.users

    @property
    def slots(self) -> int:
        return self.stream.slots

    def slots_with_frequencies(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Per slot, every user's bin (-1: no value yet) and the true frequencies over the holders."""
        renumber = np.full(self.stream.bins, -1, np.int64)
        renumber[self.cells] = np.arange(self.cells.size)
        for values in self.stream.values():
            held = values >= 0
            binned = np.where(held, renumber[np.maximum(values, 0)], -1)
            counts = np.bincount(binned[held], minlength=self.bins).astype(np.float64)
            yield binned, counts / max(int(held.sum()), 1)


def _source(data_dir: str, name: str) -> EventSource:
    if name == "taxi":
        path = os.path.join(data_dir, "tdrive_sample600", "taxi_log_2008_by_id.tar.xz")
        _require(path, name)
        return EventSource(name, "T-Drive sample (taxi ids 1-600), Beijing, 2-8 Feb 2008; 10-minute slots; d = 5 "
                           "longitude strips 0.06° wide over lon [116.25, 116.55) x lat [39.8, 40.05)", (path,),
                           "tdrive", TAXI_GRID, 600.0)
    folder, prefix, what = {"foursquare": ("foursquare_us5k", "Foursquare", "Foursquare check-ins, US subset of "
                                           "the TIST2015 period (Apr 2012 - Sep 2013)"),
                            "gowalla": ("gowalla_1k", "Gowalla", "Gowalla check-ins, SNAP toy subset "
                                        "(Feb 2009 - Oct 2010)")}[name]
    checkins = os.path.join(data_dir, folder, f"{prefix}_checkins.txt.xz")
    poi = os.path.join(data_dir, folder, f"{prefix}_poi_coos.txt.xz")
    _require(checkins, name)
    _require(poi, name)
    return EventSource(name, f"{what}; daily slots; the occupied cells of the 10x10 grid over lon [-125, -66) x "
                       "lat [24, 50)", (checkins,), "checkins", FOURSQUARE_GRID, DAY, poi=poi)


def _require(path: str, name: str) -> None:
    if not os.path.isfile(path):
        raise DataUnavailable(f"{name}: {path} is not on this machine (the data stays outside the repository)")


def load_stream(data_dir: str, name: str, max_users: int | None = None, max_slots: int | None = None
                ) -> LdpStream:
    """Read real dataset ``name`` (raises :class:`DataUnavailable`, saying why, when its files are absent)."""
    source = _source(data_dir, name)
    stream = build_stream(source, max_users=max_users, max_slots=max_slots)
    cells = np.arange(stream.bins) if name == "taxi" else np.unique(stream.value)
    if cells.size < 2:
        raise ValueError(f"{name}: fewer than 2 occupied cells")
    return LdpStream(name, source.description, stream, cells)

