"""The numeric per-user stage's ledger (``transforms.numeric_ledger``) in the stage: least charges from the public
schedule, never from the client's charges; the carried tail of a resumed streaming job.

The first test fails on the code before the ledger stage derived least charges (the stage sent ``least =
charge``: 0 violations).
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from tests.transforms.beam_helpers import batch_pipeline, streaming_pipeline, streaming_source
from tests.transforms.test_numeric_clients import EPSILON, WINDOW, expected, make_numeric_events, run
from transforms.mechanisms.numeric.perturbation import Client


def test_a_client_charging_half_its_square_wave_is_flagged_in_batch_and_streaming(monkeypatch):
    """The stage ships the budget each report was made at and the ledger stage rebuilds its cost from the public
    schedule: a CAPP client (a public subclass, registered under "capp") charging half of it is undercharged at
    every report, batch and streaming (the streaming ledger's state cells).  The stage used to send the ledger
    ``least = charge``, so both runs passed with no violation."""
    import dataclasses
    from functools import cached_property

    from transforms.mechanisms.numeric.streams import CAPPStream
    from transforms.mechanisms.registry import MECHANISMS

    @dataclasses.dataclass(frozen=True)
    class HalfChargedClient(Client):
        @property
        def report_units(self) -> int:
            return self.sw.realised_units // 2

    class HalfChargedCAPP(CAPPStream):
        @cached_property
        def client(self):
            honest = super().client
            return HalfChargedClient(**{f.name: getattr(honest, f.name) for f in dataclasses.fields(Client)})

    monkeypatch.setitem(MECHANISMS, "capp", HalfChargedCAPP)
    params = {"epsilon": EPSILON, "window": WINDOW}
    events = make_numeric_events()
    batch = run(batch_pipeline(), lambda p: p | beam.Create(events), "capp", params)
    streaming = run(streaming_pipeline(), lambda p: streaming_source(p, events, 20.0, seed=5), "capp", params, 20.0)
    reports = sum(n for n, _ in expected(events, "capp", params).values())
    for results in (batch, streaming):
        assert len(results["violations"]) == reports and {v["kind"] for v in results["violations"]} == {"undercharged"}
        latest: dict = {}  # streaming: one usage record per chunk, counts cumulative per user
        for u in results["usage"]:
            latest[u["user"]] = max(latest.get(u["user"], 0), u["violations"])
        assert sum(latest.values()) == reports


def _charges(key: str, slots: list, units: int, window: int, budget: int) -> tuple:
    """One NumericCharges of SW-direct reports charged ``units`` per slot (made at ``units``) under the fixed
    requirement ``(window, budget)``, as the stage sends."""
    from transforms.numeric_records import NumericCharges

    table = np.array([(slot, 0, units, 0, units, window, budget) for slot in slots], np.int64)
    return key, NumericCharges(key, table, "fixed", False, False)


def test_the_resumed_streaming_ledger_checks_the_windows_across_the_restart():
    """A window reaching back into the checkpoint: the carried tail holds slots 4 and 5 at 2/5 of a w=3 budget
    each, the resumed job charges 2/5 at slot 6: window 4-6 spends 6/5 of it, one violation.  The plain streaming
    ledger (a fresh tail) sees none: the carried tail is what catches it."""
    from transforms.ledger import VIOLATIONS
    from transforms.mechanisms.budget import to_units
    from transforms.mechanisms.public_schedule.numeric_plan import NumericPlan
    from transforms.numeric_ledger import LedgerRules, NumericLedgerFn, carried_tail

    budget, key = to_units(1.0), "s\x1fu0"
    units = budget * 2 // 5
    rules = LedgerRules(NumericPlan("sw-direct", budget * 6 // 5, 3), 3)  # the schedule's budget: 2/5 per report
    assert rules.plan.report_units == units
    carried = carried_tail(None, _charges(key, [4, 5], units, 3, budget)[1], rules)
    from apache_beam.testing.util import assert_that, equal_to

    for ledger, violations in ((NumericLedgerFn(rules, tails={key: carried}), [1]), (NumericLedgerFn(rules), [0])):
        with batch_pipeline() as pipeline:
            outputs = (pipeline | beam.Create([_charges(key, [6], units, 3, budget)])
                       | beam.ParDo(ledger).with_outputs(VIOLATIONS, main="usage"))
            assert_that(outputs.usage | beam.Map(lambda usage: usage["violations"]), equal_to(violations))
