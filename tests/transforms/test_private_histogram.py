"""The Beam graph end to end: same releases as the core, in batch, streaming and multi-process."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

from beam_helpers import SLOT, batch_pipeline, make_events, reference_releases, streaming_pipeline, streaming_source
from transforms.declarations import RequirementPolicy
from transforms.mechanisms import MECHANISMS, Estimate, Family, FixedRequirement, names_of
from transforms.private_histogram import ACCOUNTING_COUNTERS, PrivateStreamHistogram
from transforms.records import Event

HOMOGENEOUS, DYNAMIC = names_of(Family.HOMOGENEOUS), names_of(Family.DYNAMIC)
HOMOGENEOUS_PARAMS = {"epsilon": 0.5, "window": 6}
NUMERIC = sorted(name for name, cls in MECHANISMS.items() if cls.estimates is Estimate.MEAN)
LIFETIME = names_of(Family.LIFETIME)
BINNED = sorted(name for name in MECHANISMS if name not in NUMERIC and name not in LIFETIME)
"""The pipeline's events carry bins: the mean-estimating methods are refused (tested below), the rest run.  These
events declare windowed requirements, which DPI's lifetime mechanisms refuse: tests/pipelines/test_replay_dpi.py
runs them through the Beam graph with lifetime budgets."""


def mechanism_params(name: str) -> dict:
    if name in HOMOGENEOUS:
        return dict(HOMOGENEOUS_PARAMS)
    if name in DYNAMIC:
        return {"max_window": 8}
    return {}


def summarize(release: dict) -> tuple:
    return release["slot"], release["kind"], tuple(release["histogram"])


def private(name: str, seed: int = 7, **kwargs) -> PrivateStreamHistogram:
    kwargs.setdefault("policy", RequirementPolicy())  # every test event declares its own requirement
    return PrivateStreamHistogram(name, SLOT, 4, mechanism_params=mechanism_params(name), insecure_seed=seed,
                                  **kwargs)


@pytest.mark.parametrize("name", BINNED)
def test_releases_equal_the_core_loop_value_for_value(name):
    events = make_events(seed=1, users=30, slots=25, bins=4, dynamic=name in DYNAMIC, gaps=True)
    expected = reference_releases(events, name, {"bins": 4, **mechanism_params(name)}, seed=7)
    assert any(kind == "fresh" for _, kind, _ in expected)
    with batch_pipeline() as p:
        out = p | beam.Create(events) | private(name)
        assert_that(out["releases"] | beam.Map(summarize), equal_to(expected))
        assert_that(out["violations"], equal_to([]), label="no violations")
        assert_that(out["dead_letters"], equal_to([]), label="no dead letters")


@pytest.mark.parametrize("name", NUMERIC)
def test_a_mean_estimating_method_is_refused_before_the_pipeline_starts(name):
    """Events carry bins; a method estimating the mean of real values takes one bin, so the set-up fails in one
    line (the methods are tested on real values in tests/transforms/mechanisms/ldp/test_ldp_mean.py)."""
    params = {**HOMOGENEOUS_PARAMS, "low": 0.0, "high": 1.0}
    with pytest.raises(ValueError, match="one bin"):
        PrivateStreamHistogram(name, SLOT, 4, mechanism_params=params, policy=RequirementPolicy())


@pytest.mark.parametrize("name", ["pbd", "dpba", "ba"])
def test_batch_streaming_and_multiprocess_give_the_same_releases(name):
    dynamic = name in DYNAMIC
    events = make_events(seed=2, users=20, slots=15, bins=4, dynamic=dynamic)
    expected = reference_releases(events, name, {"bins": 4, **mechanism_params(name)}, seed=7)
    with batch_pipeline(workers=2) as p:
        out = p | beam.Create(events) | private(name)
        assert_that(out["releases"] | beam.Map(summarize), equal_to(expected))
    with streaming_pipeline() as p:
        lateness = SLOT / 2
        out = streaming_source(p, events, lateness) | private(name, allowed_lateness=lateness)
        assert_that(out["releases"] | beam.Map(summarize), equal_to(expected))
        assert_that(out["dead_letters"], equal_to([]), label="nothing late")


def test_streaming_counts_events_beyond_the_allowed_lateness_as_late():
    """An event for a slot closed longer ago than the allowed lateness is a dead letter, counted as late.

    The watermark advances slot by slot (on the bundle-based DirectRunner a jump over several
    slots does not hold the release stage back for the per-user timers; see transforms.release).
    """
    events = make_events(seed=3, users=5, slots=6, bins=4)
    straggler = events[0]._replace(raw="straggler")  # slot 0, delivered during slot 4
    source = test_stream.TestStream()
    for slot in range(6):
        source = source.add_elements([TimestampedValue(e, e.time) for e in events if e.time // SLOT == slot])
        if slot == 4:
            source = source.add_elements([TimestampedValue(straggler, 4 * SLOT + 5)])
        source = source.advance_watermark_to((slot + 1) * SLOT + 2)
    source = source.advance_watermark_to(20 * SLOT).advance_watermark_to_infinity()
    with streaming_pipeline() as p:
        out = p | source | private("pbd", allowed_lateness=1.0)
        assert_that(out["dead_letters"] | beam.Map(lambda d: (d["record"], d["reason"].split(":")[0])),
                    equal_to([("straggler", "late")]))


@pytest.mark.parametrize("name", BINNED)
def test_the_ledger_finds_no_violation_under_personalized_and_dynamic_requirements(name):
    dynamic = name in DYNAMIC
    events = make_events(seed=4, users=40, slots=30, bins=4, dynamic=dynamic)
    with batch_pipeline() as p:
        out = p | beam.Create(events) | private(name, ledger_detail=True)
        assert_that(out["violations"], equal_to([]))
        assert_that(out["usage"] | beam.Map(lambda u: (u["user"], u["max_window_usage_ratio"] <= 1)),
                    equal_to([(f"user{u:03d}", True) for u in range(40)]), label="usage")
        entries = out["ledger_entries"] | beam.combiners.Count.Globally()
        assert_that(entries, lambda counts: counts[0] > 0 or (_ for _ in ()).throw(AssertionError(counts)),
                    label="entries")


def test_gaps_and_a_single_user():
    events = [e for e in make_events(seed=5, users=1, slots=12, bins=4, gaps=True)]
    expected = reference_releases(events, "pba", {"bins": 4}, seed=7)
    assert [s for s, _, _ in expected] == list(range(expected[0][0], expected[-1][0] + 1))  # gaps released
    with batch_pipeline() as p:
        out = p | beam.Create(events) | private("pba")
        assert_that(out["releases"] | beam.Map(summarize), equal_to(expected))


def test_users_without_requirement_get_the_default_or_a_dead_letter():
    events = [e._replace(requirement=None) for e in make_events(seed=6, users=4, slots=3, bins=4)]
    with batch_pipeline() as p:
        out = p | beam.Create(events) | private("pbd")
        assert_that(out["dead_letters"] | beam.Map(lambda d: d["reason"]),
                    equal_to(["no requirement declared and no default configured"] * len(events)))
    with batch_pipeline() as p:
        policy = RequirementPolicy(default=FixedRequirement(window=4, epsilon=1.0))
        out = p | beam.Create(events) | private("pbd", policy=policy)
        assert_that(out["dead_letters"], equal_to([]))
        assert_that(out["usage"] | beam.Map(lambda u: u["user"]), equal_to([f"user{u:03d}" for u in range(4)]),
                    label="usage")



def test_small_bundle_buffers_change_nothing(monkeypatch):
    """The batch path sends gathered events and closed slots on early when its buffers fill up."""
    from transforms import user_state

    monkeypatch.setattr(user_state._GatherUserEvents, "MAX_HELD", 5)
    monkeypatch.setattr(user_state.CloseUserSlots, "MAX_HELD", 7)
    clean = make_events(seed=8, users=12, slots=10, bins=4, gaps=True)
    duplicates = [e._replace(raw=e.raw + "+dup") for e in clean[::5]]  # same user, slot and time: the later raw wins
    expected = reference_releases(clean + duplicates, "pbd", {"bins": 4}, seed=7)
    with batch_pipeline() as p:
        out = p | beam.Create(clean + duplicates) | private("pbd")
        assert_that(out["releases"] | beam.Map(summarize), equal_to(expected))
        counts = out["accounting"] | beam.CombinePerKey(sum)
        assert_that(counts, equal_to([("records_used", len(clean)), ("duplicates", len(duplicates))]),
                    label="accounting")
        assert_that(out["accounting_totals"], equal_to([{"records_used": len(clean), "duplicates": len(duplicates),
                                                         "late": 0, "dead_letters": 0}]), label="totals")


def test_omitting_the_policy_fails_at_construction_with_one_line():
    with pytest.raises(ValueError) as error:
        PrivateStreamHistogram("pbd", SLOT, 4)
    assert "needs policy=RequirementPolicy" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="policy must be a RequirementPolicy"):
        PrivateStreamHistogram("pbd", SLOT, 4, policy=FixedRequirement(window=4, epsilon=1.0))


def test_accounting_totals_count_every_outcome_and_an_empty_input_gives_zeros():
    events = [e._replace(requirement=None) for e in make_events(seed=6, users=4, slots=3, bins=4)]
    with batch_pipeline() as p:
        out = p | beam.Create(events) | private("pbd")  # no default: every event is refused
        assert_that(out["accounting_totals"], equal_to([{"records_used": 0, "duplicates": 0, "late": 0,
                                                         "dead_letters": len(events)}]))
    with batch_pipeline() as p:
        out = p | beam.Create([]).with_output_types(Event) | private("pbd")
        assert_that(out["accounting_totals"], equal_to([dict.fromkeys(ACCOUNTING_COUNTERS, 0)]))


def test_the_stateless_batch_ledger_refuses_a_partial_chunk():
    """A fresh bounded run checks each user's one complete chunk without state; anything else must not pass."""
    import numpy as np

    from transforms.engine import ChargeChunk
    from transforms.ledger import CompleteChunkLedgerFn

    table = np.array([[0, 1, 1, 0, 2, 3], [1, 2, 1, 1, 2, 3]])  # slot, least, dissimilarity, publication, w, E
    parts = ("dissimilarity", "publication")

    def chunk(complete: bool) -> ChargeChunk:
        return ChargeChunk("s\x1fu", table, "fixed", parts, True, complete)

    usage = list(CompleteChunkLedgerFn(4).process(("s\x1fu", chunk(True))))
    assert usage == [{"stream": "s", "user": "u", "slots": 2, "max_window_usage_ratio": 1.0, "violations": 0}]
    table[1, 1] = 3  # the evidence of slot 1 implies more than the user was charged
    *_, usage = CompleteChunkLedgerFn(4).process(("s\x1fu", chunk(True)))
    assert usage["violations"] == 1
    with pytest.raises(ValueError, match="partial chunk"):
        list(CompleteChunkLedgerFn(4).process(("s\x1fu", chunk(False))))
