"""The per-user privacy ledger stage: an independent, exact check of every charge.

``UserLedgerFn`` is a stateful DoFn keyed by ``stream + SEP + user``.  It is
fed each user's charges in chunks of consecutive slots (from the release
stage), each with the least charge the release's evidence implies (what the
statistics were computed from, not the mechanism's bookkeeping), checks that
every charge covers it, and checks, with exact integer budget units, every window the user's
requirement covers: ``(w, E)`` for fixed requirements, the backward and
forward windows of every dynamic declaration (forward windows when they
close, or at the end of a bounded input), and for a lifetime budget ``E``
everything charged since the user's first slot, at every slot.  State keeps
only the last ``max_window`` slots, the forward windows still open and the
sum of every charge older than those slots, so it stays flat over an
infinite stream.  It emits each user's usage (the largest fraction
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
from transforms.mechanisms.charges import DISSIMILARITY
from transforms.mechanisms.declared import KINDS
from transforms.mechanisms.public_schedule import unpack_least
from transforms.mechanisms.requirements import DynamicRequirements, LifetimeRequirements
from transforms.mechanisms.windows import closing_windows, forward_end, usage_ratios
from transforms.user_state import NAMESPACE, SEP

VIOLATIONS = "violations"
ENTRIES = "ledger_entries"


def check_windows(tail: dict, chunk: dict, max_window: int):
    """Check one chunk against the user's tail; returns (new tail, worst ratio, violations).

    Slots need not be consecutive: a slot the stream did not release charged nothing.  The tail keeps the
    recent slots' charges and ``before``, the sum of every older charge (a lifetime budget covers them all).
    """
    slots = np.concatenate([tail["slots"], chunk["slots"]])
    spent = np.concatenate([tail["spent"], chunk["charge"]])
    dc = np.concatenate([tail.get("dc", np.zeros(tail["slots"].size, np.int64)), chunk["dc"]])
    if slots.size > 1 and np.any(np.diff(slots) <= 0):
        raise ValueError("a user's charges must come in increasing slot order")
    before = int(tail.get("before", 0))
    totals = before + np.concatenate([[0], np.cumsum(spent)])  # totals[k]: every charge up to the k-th entry
    dc_totals = np.concatenate([[0], np.cumsum(dc)])
    rows = np.arange(tail["slots"].size, slots.size)
    reqs, ends, requirement_kind = chunk["requirements"], slots[rows], chunk["kind"]
    dynamic = requirement_kind is DynamicRequirements

    def sums_of(running):
        def between(first_slot, last_slot):
            """Charges over the slots [first_slot, last_slot] (arrays)."""
            return running[np.searchsorted(slots, last_slot, "right")] - running[np.searchsorted(slots, first_slot, "left")]
        return between

    def since_start(last_slot):
        """Every charge up to ``last_slot``, the dropped slots' included."""
        return totals[np.searchsorted(slots, last_slot, "right")]

    window_sum = sums_of(totals)
    kind, sums, bounds = closing_windows(requirement_kind, ends, reqs, window_sum, sums_of(dc_totals), since_start)
    checks = [(ends, kind, sums, bounds)]  # (slot, kind, window sum, bound)
    opened = [(int(s), int(w), int(e)) for s, w, e in zip(ends, reqs[:, 2], reqs[:, 3])] if dynamic else []
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
    charged = chunk["charge"]
    for i in np.flatnonzero(chunk["least"] > charged):
        violations.append({"slot": int(chunk["slots"][i]), "kind": "undercharged",
                           "window_units": int(chunk["least"][i]), "bound_units": int(charged[i])})
    for i, kind in chunk.get("findings", ()):  # what the public schedule rules out (local and DPI methods)
        violations.append({"slot": int(chunk["slots"][i]), "kind": kind, "window_units": 0, "bound_units": 0})
    for at, kind, sums, bounds in checks:
        if sums.size:
            worst = max(worst, float(usage_ratios(sums, bounds).max()))
            for i in np.flatnonzero(sums > bounds):
                violations.append({"slot": int(at[i]), "kind": kind, "window_units": int(sums[i]),
                                   "bound_units": int(bounds[i])})
    widest = int(reqs[:, 0::2].max()) if reqs.size and requirement_kind is not LifetimeRequirements else 1
    keep = max(max_window, widest, tail.get("keep", 1))
    recent = slots > last - keep  # only slots some later window can still reach
    new_tail = {"slots": slots[recent], "spent": spent[recent], "dc": dc[recent], "open": still_open, "keep": keep,
                "before": before + int(spent[~recent].sum())}
    return new_tail, worst, violations


def charge_chunk(table: np.ndarray, kind: str, parts: tuple[str, ...], final: bool, complete: bool) -> dict:
    """The chunk :func:`check_windows` reads, from the form the release stage sends: one int64 row per slot
    (slot, the least charge the evidence or the public schedule implies, with the kinds of the schedule's findings
    packed above bit 56 (``public_schedule.packed_least``), the charge under each of ``parts``, then the requirement the
    user declared in force, of ``kind`` ("fixed", "dynamic" or "lifetime"): (w, E), (w_B, E_B, w_F, E_F) with
    E_B as declared (the ledger projects it itself), or (E,)).

    One array per user and chunk crosses the stages instead of several: Beam pickles each array (~15 µs apiece).
    """
    charged = table[:, 2:2 + len(parts)]
    named = dict(zip(parts, charged.T))
    least, findings = unpack_least(table[:, 1])  # a public schedule's findings ride above the least's bits
    return {"slots": table[:, 0], "least": least, "findings": findings, "parts": named, "charge": charged.sum(axis=1),
            "dc": named[DISSIMILARITY] if DISSIMILARITY in named else np.zeros(len(table), np.int64),
            "requirements": table[:, 2 + len(parts):], "kind": KINDS[kind], "final": final, "complete": complete}


def empty_tail() -> dict:
    return {"slots": np.zeros(0, np.int64), "spent": np.zeros(0, np.int64), "dc": np.zeros(0, np.int64), "open": [],
            "before": 0}


def _chunk(charges: ChargeChunk) -> dict:
    return charge_chunk(*charges.ledger_input())


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
            parts = chunk["parts"]
            for i, slot in enumerate(chunk["slots"].tolist()):
                yield beam.pvalue.TaggedOutput(ENTRIES, {
                    "stream": stream, "user": user, "slot": slot,
                    "charge": units_to_decimal_string(int(chunk["charge"][i])),
                    "parts": {name: units_to_decimal_string(int(units[i])) for name, units in parts.items()},
                    "least": units_to_decimal_string(int(chunk["least"][i]))})
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
