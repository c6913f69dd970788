"""Where every input record went, from the pipeline's Beam counters.

Each record read ends in exactly one of: used (its report or declaration
reached a mechanism), duplicate (another report of the same user and slot
won), late (its slot had closed), or a dead letter (with a reason).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from apache_beam.metrics.metric import MetricsFilter

from transforms.user_state import NAMESPACE

COUNTERS = ("records_read", "records_used", "duplicates", "late", "dead_letters", "slots_fresh", "slots_skipped",
            "slots_nullified", "ledger_violations")


@dataclass(frozen=True)
class RecordAccount:
    """The counters of one pipeline run."""

    records_read: int
    records_used: int
    duplicates: int
    late: int
    dead_letters: int
    slots_fresh: int
    slots_skipped: int
    slots_nullified: int
    ledger_violations: int

    @property
    def reconciles(self) -> bool:
        """True when every record read is accounted for exactly once."""
        return self.records_read == self.records_used + self.duplicates + self.late + self.dead_letters

    def as_dict(self) -> dict:
        return asdict(self)


def account(result) -> RecordAccount:
    """Read the counters of a finished ``PipelineResult``."""
    totals = dict.fromkeys(COUNTERS, 0)
    for counter in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        name = counter.key.metric.name
        if name in totals:
            totals[name] += counter.committed if counter.committed is not None else counter.attempted
    return RecordAccount(**totals)
