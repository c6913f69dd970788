"""The per-user privacy ledger stage: an independent, exact check of every charge.

``UserLedgerFn`` is a stateful DoFn keyed by ``stream + SEP + user``.  It is
fed each user's charges in chunks of consecutive slots (from the release
stage), each with the least charge the release's evidence implies (what the
statistics were computed from, not the mechanism's bookkeeping), checks that
every charge covers it, and checks, with exact integer budget units, every window the user's
requirement covers: ``(w, E)`` for fixed requirements, and the backward and
forward windows of every dynamic declaration (forward windows when they
close, or at the end of a bounded input).  State keeps only the last
``max_window`` slots and the forward windows still open, so it stays flat
over an infinite stream.  It emits each user's usage (the largest fraction
of a requirement spent in any window) and every violation, and, on request,
every charge as a ledger entry anyone can re-check.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.coders import FloatCoder, TupleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from transforms.coders import ValueCoder
from transforms.engine import ChargeChunk
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.windows import closing_windows, forward_end, usage_ratios
from transforms.user_state import NAMESPACE, SEP

VIOLATIONS = "violations"
ENTRIES = "ledger_entries"


def check_windows(tail: dict, chunk: dict, max_window: int):
    """Check one chunk against the user's tail; returns (new tail, worst ratio, violations).

    Slots need not be consecutive: a slot the stream did not release charged nothing.
    """
    slots = np.concatenate([tail["slots"], chunk["slots"]])
    spent = np.concatenate([tail["spent"], chunk["dc"] + chunk["publication"]])
    dc = np.concatenate([tail.get("dc", np.zeros(tail["slots"].size, np.int64)), chunk["dc"]])
    if slots.size > 1 and np.any(np.diff(slots) <= 0):
        raise ValueError("a user's charges must come in increasing slot order")
    totals = np.concatenate([[0], np.cumsum(spent)])  # totals[k]: sum of the first k entries
    dc_totals = np.concatenate([[0], np.cumsum(dc)])
    rows = np.arange(tail["slots"].size, slots.size)
    reqs, ends = chunk["requirements"], slots[rows]

    def sums_of(running):
        def between(first_slot, last_slot):
            """Charges over the slots [first_slot, last_slot] (arrays)."""
            return running[np.searchsorted(slots, last_slot, "right")] - running[np.searchsorted(slots, first_slot, "left")]
        return between

    window_sum = sums_of(totals)
    kind, sums, bounds = closing_windows(chunk["dynamic"], ends, reqs, window_sum, sums_of(dc_totals))
    checks = [(ends, kind, sums, bounds)]  # (slot, kind, window sum, bound)
    opened = [(int(s), int(w), int(e)) for s, w, e in zip(ends, reqs[:, 2], reqs[:, 3])] if chunk["dynamic"] else []
    still_open = []  # (start, w_F, E_F): the form checkpoints keep
    last = int(slots[-1])
    for start, window, bound in tail["open"] + opened:
        end = forward_end(start, window)
        if end <= last or chunk["final"]:
            at = min(end, last)
            checks.append((np.array([at]), "forward", window_sum(np.array([start]), np.array([at])),
                           np.array([bound])))
        else:
            still_open.append((start, window, bound))
    worst, violations = 0.0, []
    charged = chunk["dc"] + chunk["publication"]
    for i in np.flatnonzero(chunk["least"] > charged):
        violations.append({"slot": int(chunk["slots"][i]), "kind": "undercharged",
                           "window_units": int(chunk["least"][i]), "bound_units": int(charged[i])})
    for at, kind, sums, bounds in checks:
        if sums.size:
            worst = max(worst, float(usage_ratios(sums, bounds).max()))
            for i in np.flatnonzero(sums > bounds):
                violations.append({"slot": int(at[i]), "kind": kind, "window_units": int(sums[i]),
                                   "bound_units": int(bounds[i])})
    widest = int(reqs[:, 0::2].max()) if reqs.size else 1
    keep = max(max_window, widest, tail.get("keep", 1))
    recent = slots > last - keep  # only slots some later window can still reach
    new_tail = {"slots": slots[recent], "spent": spent[recent], "dc": dc[recent], "open": still_open, "keep": keep}
    return new_tail, worst, violations


def charge_chunk(table: np.ndarray, dynamic: bool, final: bool, complete: bool) -> dict:
    """The chunk :func:`check_windows` reads, from the form the release stage sends: one int64 row per slot
    (slot, dc, publication, the least charge the evidence implies, then the requirement the user declared in
    force: (w, E), or (w_B, E_B, w_F, E_F) when ``dynamic``, E_B as declared: the ledger projects it itself).

    One array per user and chunk crosses the stages instead of four: Beam pickles each array (~15 µs apiece).
    """
    return {"slots": table[:, 0], "dc": table[:, 1], "publication": table[:, 2], "least": table[:, 3],
            "requirements": table[:, 4:],
            "dynamic": dynamic, "final": final, "complete": complete}


def empty_tail() -> dict:
    return {"slots": np.zeros(0, np.int64), "spent": np.zeros(0, np.int64), "dc": np.zeros(0, np.int64), "open": []}


def _chunk(charges: ChargeChunk) -> dict:
    return charge_chunk(charges.table, charges.dynamic, charges.final, charges.complete)


@beam.typehints.with_input_types(beam.typehints.Tuple[str, ChargeChunk])
class UserLedgerFn(beam.DoFn):
    """Exact sliding-window sums per user; emits usage, violations and (on request) every charge."""

    TAIL = ReadModifyWriteStateSpec("tail", ValueCoder())  # check_windows' tail: a dict of int64 arrays and ints
    USAGE = ReadModifyWriteStateSpec("usage", TupleCoder([VarIntCoder(), FloatCoder(), VarIntCoder()]))

    def __init__(self, max_window: int, detail: bool = False):
        self.max_window = max_window
        self.detail = detail
        self.violation_counter = Metrics.counter(NAMESPACE, "ledger_violations")

    def process(self, element, tail_state=beam.DoFn.StateParam(TAIL), usage_state=beam.DoFn.StateParam(USAGE)):
        key, charges = element
        chunk = _chunk(charges)
        if chunk["final"] and chunk["complete"]:  # a bounded input's one chunk: nothing before or after it
            yield from self._complete(key, chunk)
            return
        tail, worst, violations = check_windows(tail_state.read() or empty_tail(), chunk, self.max_window)
        tail_state.write(tail)
        slots_seen, worst_so_far, violated = usage_state.read() or (0, 0.0, 0)
        usage = (slots_seen + int(chunk["slots"].size), max(worst_so_far, worst), violated + len(violations))
        usage_state.write(usage)
        yield from self._outputs(key, chunk, usage, violations)

    def _complete(self, key, chunk):
        _, worst, violations = check_windows(empty_tail(), chunk, self.max_window)
        yield from self._outputs(key, chunk, (int(chunk["slots"].size), worst, len(violations)), violations)

    def _outputs(self, key, chunk, usage, violations):
        stream, user = key.split(SEP, 1)
        for violation in violations:
            self.violation_counter.inc()
            yield beam.pvalue.TaggedOutput(VIOLATIONS, {"stream": stream, "user": user, **violation})
        if self.detail:
            for slot, dc, publication, least in zip(chunk["slots"], chunk["dc"], chunk["publication"], chunk["least"]):
                yield beam.pvalue.TaggedOutput(ENTRIES, {
                    "stream": stream, "user": user, "slot": int(slot),
                    "charge": units_to_decimal_string(int(dc + publication)),
                    "dc": units_to_decimal_string(int(dc)), "publication": units_to_decimal_string(int(publication)),
                    "least": units_to_decimal_string(int(least))})
        yield {"stream": stream, "user": user, "slots": usage[0], "max_window_usage_ratio": usage[1],
                   "violations": usage[2]}


class CompleteChunkLedgerFn(UserLedgerFn):
    """``UserLedgerFn`` for a bounded run that starts fresh: each user's charges arrive as one complete chunk, so
    nothing is kept between chunks and the DoFn is stateless (a stateful call costs about 125 µs per user)."""

    def process(self, element):
        key, charges = element
        chunk = _chunk(charges)
        if not (chunk["final"] and chunk["complete"]):
            raise ValueError("CompleteChunkLedgerFn got a partial chunk of charges; use UserLedgerFn")
        yield from self._complete(key, chunk)
