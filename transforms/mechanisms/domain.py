"""What a slot's values may be: categorical bins, or a numeric interval.

The central histogram mechanisms take categorical values (a bin in
``[0, d)``, or :data:`NO_VALUE` for a row that only declares); the numeric
local-DP streams take real values in a declared interval ``[low, high]`` (NaN
for a row that only declares).  A batch is validated against its mechanism's
domain before anything changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Union

import numpy as np

NO_VALUE = -1
"""A categorical value meaning "this row only declares a requirement, it reports no bin"."""


@dataclass(frozen=True)
class Categorical:
    """Bins ``0 .. bins-1``; values are int64."""

    bins: int
    dtype: ClassVar[type] = np.int64

    def __post_init__(self):
        if isinstance(self.bins, bool) or not isinstance(self.bins, (int, np.integer)) or self.bins < 1:
            raise ValueError(f"bins (d) must be an integer >= 1, got {self.bins!r}")

    def all_report(self, values: np.ndarray) -> bool:
        """Whether no value is NO_VALUE, after checking every value is a bin or NO_VALUE."""
        if np.maximum.reduce(values.view(np.uint64)) < self.bins:  # one pass: negatives wrap to the top
            return True
        if values.min() < NO_VALUE or values.max() >= self.bins:
            raise ValueError(f"values must be bins in [0, {self.bins}) or NO_VALUE (-1)")
        return False

    def no_values(self, count: int) -> np.ndarray:
        """``count`` rows that only declare (NO_VALUE): what client devices' registrations carry."""
        return np.full(count, NO_VALUE, np.int64)


@dataclass(frozen=True)
class Interval:
    """Real values in ``[low, high]``; values are float64, NaN for a row that reports none."""

    low: float
    high: float
    dtype: ClassVar[type] = np.float64

    def __post_init__(self):
        for name in ("low", "high"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(value):
                raise ValueError(f"domain {name} must be a finite number, got {value!r}")
        if not self.low < self.high:
            raise ValueError(f"domain LOW,HIGH must have LOW below HIGH, got {self.low!r},{self.high!r}")

    @property
    def width(self) -> float:
        return float(self.high) - float(self.low)

    def all_report(self, values: np.ndarray) -> bool:
        """Whether no value is NaN, after checking every other value lies in the interval."""
        missing = np.isnan(values)
        present = values[~missing]
        if np.isinf(present).any():
            raise ValueError("values must be finite (NaN marks a row that reports nothing)")
        if present.size and (present.min() < self.low or present.max() > self.high):
            raise ValueError(f"values must lie in [{self.low}, {self.high}]")
        return not missing.any()

    def no_values(self, count: int) -> np.ndarray:
        """``count`` rows that only declare (NaN)."""
        return np.full(count, np.nan)


Domain = Union[Categorical, Interval]


def as_domain(domain: Domain | int) -> Domain:
    """A domain, given one or a number of bins."""
    if isinstance(domain, (Categorical, Interval)):
        return domain
    return Categorical(domain)


class TrustModel(str, Enum):
    """Who sees raw values: the trust model a mechanism is built for, carried by every release."""

    CENTRAL = "central"                  # a trusted collector sees the raw events
    LOCAL_SIMULATED = "local_simulated"  # the collector runs the users' randomizers (replay, evaluation)
    LOCAL_CLIENT = "local_client"        # users' devices randomize; the collector only aggregates reports


class Estimate(str, Enum):
    """What a release's estimate estimates."""

    COUNTS = "counts"                    # users per bin (the central histogram mechanisms)
    FREQUENCIES = "frequencies"          # fraction of users per bin
    MEAN = "mean"                        # the population mean of a numeric stream
    DISTRIBUTION = "distribution"        # a distribution over the bins (sums to 1)
