"""Numeric events (a real ``value`` in a declared interval) for seed 003's mechanisms in the Beam pipeline.

The per-user and release stages carry integer values (``transforms.records.Event.value``,
``transforms.encoding.CONTRIBUTION_ROWS``).  A numeric value enters as its index on the square wave's grid
over ``[low, high]``: ``k = rint((clip(v) - low)/(high - low) · 2**grid_bits)``, the same float arithmetic as
the mechanisms' own ``NumericStream.counted``, so the clients see exactly the grid value they would see in the
Beam-free core.  The mechanism then runs in grid units (``low = 0``, ``high = 2**grid_bits``): its grid index
of ``k`` is ``k`` again, its reports are the core's, and :meth:`NumericDomain.in_domain_units` turns a release
back into the declared interval (exact: the scale is a power of two).

Values outside ``[low, high]`` are clipped (``out_of_range="clip"``, counted in the ``clipped`` counter) or
refused (``"dead-letter"``: a dead letter naming the interval); values that are not finite numbers are always
dead letters.  A bad interval or policy fails at construction with one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from apache_beam.metrics import Metrics

from transforms.mechanisms.numeric.estimates import statistic_of
from transforms.mechanisms.numeric.square_wave import DEFAULT_GRID_BITS
from transforms.user_state import NAMESPACE

OUT_OF_RANGE_POLICIES = ("clip", "dead-letter")
CLIPPED = "clipped"
"""The Beam counter (namespace ``wevent``) of values clipped into the interval; they are used, not dead letters."""


@dataclass(frozen=True)
class NumericDomain:
    """The declared interval ``[low, high]`` of numeric events, what happens outside it, and the value grid."""

    low: float
    high: float
    out_of_range: str = "dead-letter"
    grid_bits: int = DEFAULT_GRID_BITS

    def __post_init__(self):
        for name in ("low", "high"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"--domain {name.upper()} must be a finite number, got {value!r}")
        if not self.low < self.high:
            raise ValueError(f"--domain LOW,HIGH needs LOW < HIGH, got {self.low!r},{self.high!r}")
        if not math.isfinite(float(self.high) - float(self.low)):
            raise ValueError(f"--domain {self.low!r},{self.high!r} is wider than a float holds")
        if self.out_of_range not in OUT_OF_RANGE_POLICIES:
            raise ValueError(f"--out-of-range must be one of {', '.join(OUT_OF_RANGE_POLICIES)}, "
                             f"got {self.out_of_range!r}")
        if isinstance(self.grid_bits, bool) or not isinstance(self.grid_bits, int) or not 1 <= self.grid_bits <= 30:
            raise ValueError(f"grid_bits must be an integer in [1, 30], got {self.grid_bits!r}")

    @classmethod
    def parse(cls, text: str, out_of_range: str = "dead-letter", grid_bits: int = DEFAULT_GRID_BITS
              ) -> "NumericDomain":
        """``LOW,HIGH`` (the command line's ``--domain``)."""
        parts = [part.strip() for part in str(text).split(",")]
        if len(parts) != 2:
            raise ValueError(f"--domain must be LOW,HIGH, got {text!r}")
        try:
            low, high = float(parts[0]), float(parts[1])
        except ValueError:
            raise ValueError(f"--domain must be two numbers LOW,HIGH, got {text!r}") from None
        return cls(low, high, out_of_range, grid_bits)

    @property
    def steps(self) -> int:
        """``2**grid_bits``: grid indices run from 0 (``low``) to ``steps`` (``high``)."""
        return 1 << self.grid_bits

    @property
    def width(self) -> float:
        return float(self.high) - float(self.low)

    def grid_index(self, value: float) -> int:
        """``value``'s grid index; clips or raises ``ValueError(reason)`` outside the interval (module doc)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("value is not a number")
        value = float(value)
        if math.isnan(value):
            raise ValueError("value is NaN")
        if math.isinf(value):
            raise ValueError("value is infinite")
        low, high = float(self.low), float(self.high)
        if not low <= value <= high:
            if self.out_of_range == "dead-letter":
                raise ValueError(f"value outside the domain [{self.low:g}, {self.high:g}]")
            value = min(max(value, low), high)
        return round((value - low) / self.width * self.steps)  # round half to even, as np.rint in the core

    def value_of(self, index: int) -> float:
        """The grid value of ``index`` in the interval's units (what the clients see)."""
        return float(self.low) + self.width * (index / self.steps)

    def mechanism_params(self) -> dict:
        """The numeric mechanism's domain parameters: grid units (values arrive as grid indices)."""
        return {"low": 0.0, "high": float(self.steps), "grid_bits": self.grid_bits, "out_of_range": "refuse"}

    def in_domain_units(self, record: dict) -> dict:
        """A release record of a mechanism run in grid units, in the interval's units (a new dict), with the
        fields the per-user stage writes: the method's ``statistic`` (``estimates.statistic_of``) and the
        estimate times the reporters as ``histogram``; a crowd distribution's fractions are unit-free (its bins
        are the same equal parts of the grid and the interval)."""
        if record.get("statistic") == "distribution":
            return dict(record)
        scale = self.width / self.steps
        estimate = [float(self.low) + scale * value for value in record["estimate"]]
        error = record.get("predicted_error")
        reporters = record["reporters"] or 0
        return {**record, "estimate": estimate, "statistic": statistic_of(record["mechanism"]),
                "histogram": [round(value * reporters) for value in estimate],
                "predicted_error": None if error is None else error * scale * scale}

    def evaluation_in_domain_units(self, row) -> tuple:
        """An evaluation row of a numeric stream (``transforms.engine.evaluation_row``: the estimate and predicted
        error, the true mean, in grid units) in the interval's units (NOT private: ``--evaluate`` only)."""
        scale = self.width / self.steps
        (estimate, error), (truth,) = row[2], row[3]
        return (row[0], row[1], [float(self.low) + scale * estimate, error * scale * scale],
                [float(self.low) + scale * truth])


@dataclass(frozen=True)
class ValueToGrid:
    """``ParseConfig.to_bin`` for numeric events: the record's ``field`` as its grid index (clipped ones counted)."""

    domain: NumericDomain
    field: str = "value"

    def __call__(self, record: dict) -> int:
        raw = record.get(self.field)
        if raw is None or raw == "":
            raise ValueError(f"missing field {self.field!r}")
        value = raw
        if isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                raise ValueError("value is not a number") from None
        index = self.domain.grid_index(value)
        if self.domain.out_of_range == "clip" and not self.domain.low <= float(value) <= self.domain.high:
            Metrics.counter(NAMESPACE, CLIPPED).inc()
        return index


def clipped_count(result) -> int:
    """How many values a finished pipeline clipped into their interval (the ``clipped`` counter)."""
    from apache_beam.metrics.metric import MetricsFilter

    counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(CLIPPED))["counters"]
    return sum(c.committed if c.committed is not None else c.attempted for c in counters)
