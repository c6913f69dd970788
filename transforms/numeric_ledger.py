"""The numeric per-user stage's ledger: least charges and memory-aware windows from the public schedule.

The client stage (``transforms.numeric_clients``) ships, with each report's charge, what the report was made
with: the budget of its publication and of its dissimilarity part (BA-SW), as :class:`NumericCharges`
(columns :data:`COLUMNS`).  It never states a least charge.  This stage derives it from the method's public
schedule (``transforms.mechanisms.public_schedule.numeric_plan``: the square wave or PM law rebuilt with
certified arithmetic at the schedule's budget, or at the recorded one if larger) and checks every window of
the user's declared ``(w, E)`` **memory-aware**: report ``k``'s window is ``w + reach(k)`` slots wide, where
``reach(k)`` is how far back the values it depends on reach (deviation memory, a segment's values), so a
change within any ``w`` slots is charged for every report it moves.  A window that exceeds ``E`` only through
that reach is a ``memory_window`` violation, a report made at a budget the schedule does not name an
``off_schedule`` one.  The exact window sums are ``transforms.ledger.check_windows``'s.

**An opt-in that is not private** (``opt_in``, e.g. ``--sampling-accounting paper --not-w-event-private``): the
usage is still the memory-aware one (above 1 when the opt-in overspends), and the ``memory_window`` windows
over budget are still written to the violations output, marked ``accepted_by`` the opt-in; they are counted by
the ``opted_in_windows`` counter instead of ``ledger_violations`` (the operator asked for it: the exit code
stays 0, the numbers say what it costs).  Every other violation counts as always.

State per user: ``check_windows``' tail plus ``history`` (:class:`~transforms.mechanisms.public_schedule.
numeric_plan.ReportHistory`: the user's report count and the first value slots of the last ``h`` reports), in a
state cell (streaming) or carried in a checkpoint (the client stage calls :func:`carried_tail`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.coders import FloatCoder, TupleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from transforms.coders import ValueCoder
from transforms.ledger import ENTRIES, VIOLATIONS, charge_chunk, check_windows, empty_tail
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION
from transforms.mechanisms.public_schedule import MEMORY_WINDOW, OFF_SCHEDULE
from transforms.mechanisms.public_schedule.numeric_plan import NumericPlan, ReportHistory
from transforms.numeric_records import NumericCharges
from transforms.records import KEY_SEPARATOR
from transforms.user_state import NAMESPACE

PARTS = (DISSIMILARITY, PUBLICATION)
COLUMNS = ("slot", "dissimilarity", "publication", "dissimilarity_epsilon", "publication_epsilon")
""":class:`NumericCharges` table columns before the requirement row: the charges per part and the budget each part
of the report was made at (units; 0: no such part)."""
REQUIREMENT_AT = len(COLUMNS)
HISTORY = "history"
OPTED_IN = "opted_in_windows"
"""The counter of memory-aware windows over budget that an explicit opt-in accepted."""


@dataclass(frozen=True)
class LedgerRules:
    """What the ledger stage checks with: the method's public rules, the ledger depth and the opt-in (if any)
    that accepts memory-aware windows over budget (module doc)."""

    plan: NumericPlan
    max_window: int
    opt_in: str | None = None

    def __post_init__(self):
        if not isinstance(self.plan, NumericPlan):
            raise ValueError("LedgerRules needs a NumericPlan")
        if self.max_window < 1:
            raise ValueError(f"max_window must be >= 1, got {self.max_window}")


def ledger_chunks(charges: NumericCharges, plan: NumericPlan, history: ReportHistory | None
                  ) -> tuple[dict, dict, ReportHistory]:
    """``check_windows``' chunks of ``charges``: the plain one (declared windows) and the memory-aware one
    (fixed requirements: ``w + reach``), each with the least charges the schedule implies; the new history."""
    table = np.asarray(charges.table, np.int64).reshape(-1, REQUIREMENT_AT + _requirement_width(charges.kind))
    slots = table[:, 0]
    least = plan.least_units(table[:, 4], table[:, 3])
    reach, history = plan.reach(slots, history)
    rows = np.column_stack([slots, least, table[:, 1], table[:, 2], table[:, REQUIREMENT_AT:]]).astype(np.int64)
    plain = charge_chunk(rows, charges.kind, PARTS, charges.final, charges.complete)
    if charges.kind != "fixed" or not reach.any():
        return plain, plain, history
    wide = rows.copy()
    wide[:, 2 + len(PARTS)] += reach  # the window column of (w, E)
    return plain, charge_chunk(wide, charges.kind, PARTS, charges.final, charges.complete), history


def _requirement_width(kind: str) -> int:
    return {"fixed": 2, "dynamic": 4, "lifetime": 1}[kind]


def check_reports(tail: dict, charges: NumericCharges, rules: LedgerRules) -> tuple[dict, float, list, list]:
    """One chunk of a user's reports against their tail: (new tail, worst memory-aware usage ratio, violations,
    windows over budget the opt-in accepted)."""
    history = ReportHistory.of_tuple(tail[HISTORY]) if HISTORY in tail else None
    plain, memory, history = ledger_chunks(charges, rules.plan, history)
    new_tail, worst, found = check_windows(tail, memory, rules.max_window)
    if memory is not plain:
        within = {v["slot"] for v in check_windows(tail, plain, rules.max_window)[2] if v["kind"] == "fixed"}
        for violation in found:
            if violation["kind"] == "fixed" and violation["slot"] not in within:
                violation["kind"] = MEMORY_WINDOW
    new_tail[HISTORY] = history.to_tuple()
    table = np.asarray(charges.table, np.int64)
    off = np.flatnonzero(rules.plan.off_schedule(table[:, 4], table[:, 3]))
    found += [{"slot": int(table[i, 0]), "kind": OFF_SCHEDULE, "window_units": rules.plan.report_units,
               "bound_units": int(table[i, 4])} for i in off]
    if rules.opt_in is None:
        return new_tail, worst, found, []
    accepted = [dict(v, accepted_by=rules.opt_in) for v in found if v["kind"] == MEMORY_WINDOW]
    return new_tail, worst, [v for v in found if v["kind"] != MEMORY_WINDOW], accepted


def carried_tail(tail: dict | None, charges: NumericCharges, rules: LedgerRules) -> dict:
    """The tail a checkpoint carries after ``charges`` (what the resumed ledger continues from)."""
    return check_reports(tail or empty_tail(), charges, rules)[0]


@beam.typehints.with_input_types(typing.Tuple[str, NumericCharges])
class NumericLedgerFn(beam.DoFn):
    """Streaming: each user's reports chunk by chunk, the tail in a state cell (``tails``: a resumed job's carried
    tails by ledger key, read when the cell is empty); emits usage, violations and (``detail``) every charge."""

    TAIL = ReadModifyWriteStateSpec("tail", ValueCoder())
    USAGE = ReadModifyWriteStateSpec("usage", TupleCoder([VarIntCoder(), FloatCoder(), VarIntCoder()]))

    def __init__(self, rules: LedgerRules, detail: bool = False, tails: dict | None = None):
        self.rules, self.detail, self.tails = rules, detail, dict(tails or {})

    def setup(self):
        self.violation_counter = Metrics.counter(NAMESPACE, "ledger_violations")
        self.accepted_counter = Metrics.counter(NAMESPACE, OPTED_IN)

    def process(self, element, tail_state=beam.DoFn.StateParam(TAIL), usage_state=beam.DoFn.StateParam(USAGE)):
        key, charges = element
        tail = tail_state.read() or self.tails.get(key) or empty_tail()
        tail, worst, violations, accepted = check_reports(tail, charges, self.rules)
        tail_state.write(tail)
        slots_seen, worst_so_far, violated = usage_state.read() or (0, 0.0, 0)
        usage = (slots_seen + len(charges.table), max(worst_so_far, worst), violated + len(violations))
        usage_state.write(usage)
        yield from self.outputs(key, charges, usage, violations, accepted)

    def outputs(self, key: str, charges: NumericCharges, usage: tuple, violations: list, accepted: list):
        """The usage record, each violation (and accepted window) and, with ``detail``, each charge."""
        stream, user = key.split(KEY_SEPARATOR, 1)
        for violation in violations:
            self.violation_counter.inc()
            yield beam.pvalue.TaggedOutput(VIOLATIONS, {"stream": stream, "user": user, **violation})
        for window in accepted:
            self.accepted_counter.inc()
            yield beam.pvalue.TaggedOutput(VIOLATIONS, {"stream": stream, "user": user, **window})
        if self.detail:
            table = np.asarray(charges.table, np.int64)
            least = self.rules.plan.least_units(table[:, 4], table[:, 3])
            for i, row in enumerate(table.tolist()):
                yield beam.pvalue.TaggedOutput(ENTRIES, {
                    "stream": stream, "user": user, "slot": row[0],
                    "charge": units_to_decimal_string(row[1] + row[2]),
                    "parts": {name: units_to_decimal_string(row[1 + j]) for j, name in enumerate(PARTS)},
                    "least": units_to_decimal_string(int(least[i]))})
        yield {"stream": stream, "user": user, "slots": usage[0], "max_window_usage_ratio": usage[1],
               "violations": usage[2]}


class CompleteNumericLedgerFn(NumericLedgerFn):
    """Bounded input starting fresh: each user's reports arrive as one complete chunk; stateless."""

    def process(self, element):
        key, charges = element
        if not (charges.final and charges.complete):
            raise ValueError("CompleteNumericLedgerFn got a partial chunk of reports; use NumericLedgerFn")
        _, worst, violations, accepted = check_reports(empty_tail(), charges, self.rules)
        yield from self.outputs(key, charges, (len(charges.table), worst, len(violations)), violations, accepted)


class ResumedNumericLedgerFn(NumericLedgerFn):
    """Bounded input of a resumed run: a carried user's reports continue the tail of the checkpoint (``carried``:
    ``(stream, user) -> Carried``, a side input)."""

    def process(self, element, carried=None):
        key, charges = element
        before = carried.get(tuple(key.split(KEY_SEPARATOR, 1))) if carried and not charges.complete else None
        tail = before.tail if before is not None else empty_tail()
        _, worst, violations, accepted = check_reports(tail, charges, self.rules)
        yield from self.outputs(key, charges, (len(charges.table), worst, len(violations)), violations, accepted)
