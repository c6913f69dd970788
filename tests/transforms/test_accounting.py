"""Nothing is lost: every record read is used, a duplicate, late, or a dead letter with its reason."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

from beam_helpers import SLOT, batch_pipeline, streaming_pipeline
from transforms.accounting import account
from transforms.declarations import RequirementPolicy
from transforms.mechanisms import FixedRequirement
from transforms.parse import ParseConfig, ParseEvents
from transforms.private_histogram import PrivateStreamHistogram

VALID = [{"user": f"u{u}", "time": s * SLOT + 7 + u, "value": (u + s) % 4} for u in range(6) for s in range(5)]
DUPLICATES = [{"user": "u1", "time": 2 * SLOT + 30, "value": 3}, {"user": "u2", "time": 3 * SLOT + 40, "value": 0}]
DECLARATIONS = [{"user": "u3", "time": 2 * SLOT + 1, "w": 3, "epsilon": 2.0}]
BAD = ["{not json", '["a list"]', json.dumps({"user": "u9", "time": 5, "value": 7}),           # unknown bin
       json.dumps({"user": "u9", "time": 5, "value": float("nan")}).replace("NaN", "NaN"),   # NaN value
       json.dumps({"user": "u9", "time": 5, "value": -1}), json.dumps({"time": 5, "value": 1}),
       json.dumps({"user": "u9", "time": "yesterday", "value": 1}),
       json.dumps({"user": "u9", "time": 5, "value": 1, "w": 0, "epsilon": 1.0})]


def lines() -> list[str]:
    return [json.dumps(r) for r in VALID + DUPLICATES + DECLARATIONS] + BAD


def histogram(policy=RequirementPolicy(default=FixedRequirement(window=4, epsilon=2.0)), **kwargs):
    return PrivateStreamHistogram("pbd", SLOT, 4, policy=policy, insecure_seed=3, **kwargs)


def test_batch_replay_accounts_for_every_record():
    pipeline = batch_pipeline()
    parsed = pipeline | beam.Create(lines()) | ParseEvents(ParseConfig(bins=4))
    outputs = parsed.events | histogram()
    dead = (parsed.dead_letters, outputs["dead_letters"]) | beam.Flatten()
    dead | beam.Map(lambda d: d["reason"])  # every dead letter carries a reason
    result = pipeline.run()
    result.wait_until_finish()
    counts = account(result)
    assert counts.records_read == len(lines())
    assert counts.dead_letters == len(BAD)
    assert counts.duplicates == len(DUPLICATES)
    assert counts.late == 0
    assert counts.records_used == len(VALID) + len(DECLARATIONS)
    assert counts.reconciles
    assert counts.slots_fresh + counts.slots_skipped + counts.slots_nullified == 5
    assert counts.ledger_violations == 0


def _sums(pairs) -> dict:
    totals: dict = {}
    for name, n in pairs:
        totals[name] = totals.get(name, 0) + n
    return totals


def _fail(got, expected):
    raise AssertionError(f"{got} != {expected}")


def test_streaming_counts_late_records_too():
    """In streaming the counts come from the ``accounting`` output (runner-independent)."""
    late = json.dumps({"user": "u4", "time": 1 * SLOT + 3, "value": 2})  # slot 1, delivered in slot 4
    source = test_stream.TestStream()
    for slot in range(5):
        in_slot = [json.dumps(r) for r in VALID + DUPLICATES + DECLARATIONS if r["time"] // SLOT == slot]
        source = source.add_elements([TimestampedValue(line, slot * SLOT + 1) for line in in_slot])
        if slot == 4:
            source = source.add_elements([TimestampedValue(line, slot * SLOT + 2) for line in BAD + [late]])
        source = source.advance_watermark_to((slot + 1) * SLOT + 2)
    source = source.advance_watermark_to(30 * SLOT).advance_watermark_to_infinity()
    read = len(lines()) + 1
    with streaming_pipeline() as pipeline:
        parsed = pipeline | source | ParseEvents(ParseConfig(bins=4))
        outputs = parsed.events | histogram(allowed_lateness=1.0)
        parse_dead = parsed.dead_letters | "ParseDead" >> beam.Map(lambda d: ("dead_letters", 1))
        counts = (outputs["accounting"], parse_dead) | beam.Flatten()
        expected = {"records_used": len(VALID) + len(DECLARATIONS), "duplicates": len(DUPLICATES), "late": 1,
                    "dead_letters": len(BAD)}
        assert_that(counts, lambda pairs: _sums(pairs) == expected or _fail(_sums(pairs), expected))
        assert len(VALID) + len(DECLARATIONS) + len(DUPLICATES) + 1 + len(BAD) == read
        late_letters = outputs["dead_letters"] | beam.Map(lambda d: d["reason"].split(":")[0])
        assert_that(late_letters, equal_to(["late"]), label="late letter")
