"""``PrivateStreamHistogram``: the whole private release graph as one PTransform.

    outputs = events | PrivateStreamHistogram("pbd", slot_seconds=60, bins=100,
                                              policy=RequirementPolicy(default=FixedRequirement(120, 0.6)))
    outputs["releases"]      # one record per stream and slot (schemas/release.avsc)
    outputs["dead_letters"]  # late events and refused contributions, each with its reason
    outputs["usage"]         # per user: largest fraction of a requirement spent in any window
    outputs["violations"]    # must stay empty
    outputs["ledger_entries"]  # every charge, when ledger_detail=True
    outputs["accounting"]    # (counter, n): records_used, duplicates, late, dead_letters (release stage)
    outputs["accounting_totals"]  # bounded input: one dict of those four totals (zeros included)
    outputs["evaluation"]    # with evaluate=True: (stream, slot, released, TRUE histogram) -- not private
    outputs["checkpoints"]   # with checkpoint_every=K: (stream, next_slot, checkpoint bytes), see transforms.checkpoint

``release_range=(start, end)`` (epoch seconds) fixes the released slots: every slot meeting
``[start, end)`` and no other (``transforms.release_range``); without it they follow the data.

Input: a PCollection of ``transforms.records.Event`` (see ``transforms.parse``).  With
``numeric=NumericDomain(low, high)`` (the numeric mean mechanisms, seed 003) each event's value is its grid
index on ``[low, high]`` (``transforms.numeric_events``) and the releases are in the interval's units.
Bounded or streaming is read from the pipeline's ``--streaming`` option.

``policy`` is required: it says whose requirements apply (a default for
users who declare nothing, named levels, the operator's bounds).  Without a
default, every event that does not carry its own declaration is refused, so
``RequirementPolicy()`` must be given explicitly when all events declare.
"""

from __future__ import annotations

import typing

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.window import TimestampedValue

from transforms.coders import ValueCoder
from transforms.declarations import RequirementPolicy
from transforms.ledger import ENTRIES, VIOLATIONS, CompleteChunkLedgerFn, UserLedgerFn
from transforms.engine import ChargeChunk, ReleaseConfig
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS
from transforms.numeric_events import NumericDomain
from transforms.records import Event, ReleaseRecord
from transforms.release import CHARGES, CHECKPOINTS, DEAD_LETTERS, EVALUATION, release_stage
from transforms.release_range import ReleaseRange
from transforms.slotting import SlotClock
from transforms.user_state import (ACCOUNTING, LATE, NAMESPACE, CloseUserSlots, GroupUserEvents, Packed, UserSlotState,
                                   closing_stage)

ACCOUNTING_COUNTERS = ("records_used", "duplicates", "late", "dead_letters")


class AccountingTotals(beam.CombineFn):
    """``(counter, n)`` pairs -> one dict with the total of every counter in ``ACCOUNTING_COUNTERS``."""

    def create_accumulator(self) -> dict:
        return dict.fromkeys(ACCOUNTING_COUNTERS, 0)

    def add_input(self, totals: dict, pair: tuple) -> dict:
        totals[pair[0]] += pair[1]
        return totals

    def merge_accumulators(self, accumulators) -> dict:
        merged = self.create_accumulator()
        for totals in accumulators:
            for name, n in totals.items():
                merged[name] += n
        return merged

    def extract_output(self, totals: dict) -> dict:
        return totals

    def get_accumulator_coder(self):
        return ValueCoder()  # {counter: n}: no pickle


def _count_carried(record: ReleaseRecord) -> ReleaseRecord:
    """A release carried from the checkpoint is published by this job: counted with its kind (and as carried)."""
    Metrics.counter(NAMESPACE, f"slots_{record['kind']}").inc()
    Metrics.counter(NAMESPACE, "slots_carried").inc()
    return record


class PrivateStreamHistogram(beam.PTransform):
    """Per-slot private histograms of an event stream under personalized w-event privacy."""

    def __init__(self, mechanism: str, slot_seconds: float, bins: int, *, mechanism_params: dict | None = None,
                 origin: float = 0.0, allowed_lateness: float = 0.0, policy: RequirementPolicy | None = None,
                 insecure_seed: int | None = None, ledger_detail: bool = False, ledger_flush_slots: int = 100,
                 ledger_max_window: int = 1000, bounded: bool | None = None, evaluate: bool = False,
                 resume_from: str | None = None, checkpoint_every: int | None = None,
                 release_range: tuple[float, float] | None = None, numeric: NumericDomain | None = None):
        super().__init__()
        if numeric is not None:  # events carry grid indices; the mechanism runs in grid units (numeric_events)
            if not isinstance(numeric, NumericDomain):
                raise ValueError(f"numeric must be a NumericDomain, got {type(numeric).__name__}")
            if mechanism.lower() not in NUMERIC_STREAMS:
                raise ValueError(f"--domain is for the numeric mechanisms ({', '.join(NUMERIC_STREAMS)}), "
                                 f"not {mechanism}")
            mechanism_params = {**(mechanism_params or {}), **numeric.mechanism_params()}
        self.numeric = numeric
        if policy is None:
            raise ValueError("PrivateStreamHistogram needs policy=RequirementPolicy(default=..., levels=...): without "
                             "one every event that declares no requirement is refused (pass RequirementPolicy() "
                             "when every event declares its own)")
        if not isinstance(policy, RequirementPolicy):
            raise ValueError(f"policy must be a RequirementPolicy, got {type(policy).__name__}")
        self.clock = SlotClock(slot_seconds, origin, allowed_lateness)
        self.config = ReleaseConfig(mechanism.lower(), {"bins": bins, **(mechanism_params or {})}, self.clock,
                                    policy, insecure_seed, ledger_flush_slots, evaluate,
                                    resume_from=resume_from, checkpoint_every=checkpoint_every,
                                    release_range=None if release_range is None
                                    else ReleaseRange.of(self.clock, *release_range))
        longest = self.config.build().params.longest_declarable_window
        if longest is not None:
            ledger_max_window = max(ledger_max_window, longest)
        if not isinstance(ledger_max_window, int) or ledger_max_window < 1:
            raise ValueError(f"ledger_max_window must be an integer >= 1, got {ledger_max_window!r}")
        self.ledger_max_window = ledger_max_window
        self.ledger_detail = ledger_detail
        self.bounded = bounded

    def expand(self, events):
        bounded = self.bounded
        if bounded is None:
            bounded = not events.pipeline.options.view_as(StandardOptions).streaming
        if not bounded:  # timers follow event time; a bounded run closes every slot at once
            events = events | "AtEventTime" >> beam.Map(
                lambda e: TimestampedValue(e, e.time)).with_output_types(Event)
        closing = CloseUserSlots(self.clock) if bounded else UserSlotState(self.clock)
        # a fresh bounded run sends each user's charges in one complete chunk: no ledger state needed
        ledger = CompleteChunkLedgerFn if bounded and self.config.resume_from is None else UserLedgerFn
        closed = (events
                  | "GroupUserEvents" >> GroupUserEvents(bounded)
                  | "UserSlotState" >> closing_stage(closing))
        released = (closed.contributions
                    | "KeyByStream" >> beam.Map(lambda kv: kv).with_output_types(Packed)
                    | "ReleaseController" >> release_stage(self.config, bounded))
        ledger = (released[CHARGES]
                  | "KeyByUser" >> beam.Map(lambda chunk: (chunk.key, chunk)).with_output_types(
                      typing.Tuple[str, ChargeChunk])
                  | "PrivacyLedger" >> beam.ParDo(ledger(self.ledger_max_window, self.ledger_detail))
                  .with_outputs(VIOLATIONS, ENTRIES, main="usage"))
        releases = released.releases
        carried = [ReleaseRecord(record) for state in self.config.resume_state().values()
                   for record in state.unpublished]
        if carried:  # the old job released them, but no output is known to hold them: they are published here
            carried_releases = (events.pipeline | "CarriedReleases" >> beam.Create(carried).with_output_types(
                ReleaseRecord) | "CountCarried" >> beam.Map(_count_carried).with_output_types(ReleaseRecord))
            releases = (releases, carried_releases) | "WithCarriedReleases" >> beam.Flatten()
        if self.numeric is not None:
            releases = releases | "InDomainUnits" >> beam.Map(
                lambda record, domain: ReleaseRecord(domain.in_domain_units(record)), self.numeric
            ).with_output_types(ReleaseRecord)
        dead_letters = (closed[LATE], released[DEAD_LETTERS]) | "DeadLetters" >> beam.Flatten()
        accounting = (closed[ACCOUNTING], released[ACCOUNTING]) | "Accounting" >> beam.Flatten()
        outputs = {"releases": releases, "dead_letters": dead_letters, "usage": ledger.usage,
                   "violations": ledger[VIOLATIONS], "ledger_entries": ledger[ENTRIES], "accounting": accounting,
                   "evaluation": released[EVALUATION], "checkpoints": released[CHECKPOINTS]}
        if bounded:  # an unbounded input has no end to total up to
            outputs["accounting_totals"] = accounting | "AccountingTotals" >> beam.CombineGlobally(
                AccountingTotals()).with_output_types(typing.Dict[str, int])
        return outputs
