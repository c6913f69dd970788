"""The numeric client stage releases every slot from the first to the last as the central path does, a
release range's slots only (charging them only, dead-lettering the rest), and cuts streaming checkpoints
where their slots stamp.
"""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

from tests.transforms.beam_helpers import (
    SLOT,
    batch_pipeline,
    streaming_pipeline,
)
from transforms.numeric_clients import (
    ClientStageConfig,
    PrivateNumericClients,
    WriteClientCheckpoints,
)
from transforms.private_histogram import PrivateStreamHistogram
from transforms.records import Event
from transforms.slotting import SlotClock
from tests.transforms.numeric_stage_helpers import (DOMAIN, EPSILON, POLICY, SAMPLED_CASES, SEED, WINDOW, RESULTS,
                                                    keep_result, kinds, make_numeric_events, released, totals)


# ---------------------------------------------------------------- every slot released; the release range

GAP_SLOTS = (0, 1, 4, 7, 8)  # slots 2-3 and 5-6 have no event; at slot 8 only user0's refused records


def gap_events() -> list[Event]:
    """Users 1-5 report at slots 0, 1, 4 and 7; user0 declares a window the mechanism refuses at slot 0 and sends
    at slots 0 and 8 (dead letters: slot 8 has records but no report)."""
    rnd = random.Random(5)
    events = [Event("s", f"user{u}", s * SLOT + rnd.uniform(0, SLOT - 1),
                    DOMAIN.grid_index(rnd.uniform(DOMAIN.low, DOMAIN.high)), None, f"s|{u}|{s}")
              for u in range(1, 6) for s in GAP_SLOTS[:4]]
    events += [Event("s", "user0", 3.0, 9, ("fixed", WINDOW + 3, "2.0"), "s|0|0"),
               Event("s", "user0", 8 * SLOT + 3, 9, None, "s|0|8")]
    return events


def run_stage(pipeline, source, transform) -> dict:
    """Any numeric stage's outputs (the per-user one or the central path), collected in this process."""
    RESULTS.clear()
    with pipeline as p:
        out = source(p) | transform
        for name in ("releases", "dead_letters", "usage", "accounting", "ledger_entries"):
            RESULTS[name] = []
            out[name] | f"Keep{name}" >> beam.Map(keep_result, name)
    return dict(RESULTS)


def clients(mechanism: str = "sw-direct", release_range=None, lateness: float = 0.0, **params):
    return PrivateNumericClients(mechanism, SLOT, DOMAIN, mechanism_params={"epsilon": EPSILON, "window": WINDOW,
                                                                            **params},
                                 policy=POLICY, insecure_seed=SEED, allowed_lateness=lateness,
                                 release_range=release_range, ledger_detail=True)


def central(mechanism: str = "sw-direct", release_range=None, bounded: bool = True, lateness: float = 0.0):
    return PrivateStreamHistogram(mechanism, SLOT, 1, mechanism_params={"epsilon": EPSILON, "window": WINDOW},
                                  policy=POLICY, insecure_seed=SEED, numeric=DOMAIN, bounded=bounded,
                                  release_range=release_range, allowed_lateness=lateness)


def slot_by_slot_source(events: list[Event], lateness: float = 0.0):
    """A TestStream: each slot's events, then the watermark past the slot (empty slots too)."""
    def source(p):
        stream = test_stream.TestStream()
        for slot in range(max(int(e.time // SLOT) for e in events) + 1):
            mine = [TimestampedValue(e, e.time) for e in events if int(e.time // SLOT) == slot]
            if mine:
                stream = stream.add_elements(mine)
            stream = stream.advance_watermark_to((slot + 1) * SLOT + lateness + 1)
        return p | stream.advance_watermark_to_infinity()
    return source


def test_every_slot_from_the_first_to_the_last_is_released_as_the_central_path_releases_it():
    """Gaps in the data: the per-user stage releases slots 0-8, an empty slot (and slot 8, whose records are all
    dead letters) skipped with epsilon 0 and the last estimate repeated, exactly the kinds of the central path's
    SW-direct; streaming (TestStream) releases the same records as batch."""
    events = gap_events()
    batch = run_stage(batch_pipeline(), lambda p: p | beam.Create(events), clients())
    reference = run_stage(batch_pipeline(), lambda p: p | beam.Create(events), central())
    want = {0: "fresh", 1: "fresh", 2: "skipped", 3: "skipped", 4: "fresh", 5: "skipped", 6: "skipped",
            7: "fresh", 8: "skipped"}
    assert kinds(batch) == kinds(reference) == want
    by_slot = {r["slot"]: r for r in batch["releases"]}
    for slot, kind in want.items():
        record = by_slot[slot]
        if kind == "skipped":
            previous = max(s for s in want if s < slot and want[s] == "fresh")
            assert record["epsilon"] == "0" and record["reporters"] == 0 and record["registered_users"] is None
            assert record["estimate"] == by_slot[previous]["estimate"] and record["predicted_error"] is None
        else:
            assert record["epsilon"] != "0" and record["reporters"] == 5 and record["registered_users"] is None
    assert set(released(batch)) == {0, 1, 4, 7}
    central_skipped = {r["slot"]: r["epsilon"] for r in reference["releases"] if r["kind"] == "skipped"}
    assert set(central_skipped.values()) == {"0"}
    counts = totals(batch)
    assert counts["records_used"] + counts.get("dead_letters", 0) == len(events) and counts["dead_letters"] == 2
    assert {e["slot"] for e in batch["ledger_entries"]} == {0, 1, 4, 7}  # skipped slots charge no one
    streamed = run_stage(streaming_pipeline(), slot_by_slot_source(events), clients())
    assert sorted(streamed["releases"], key=lambda r: r["slot"]) == sorted(batch["releases"], key=lambda r: r["slot"])


@pytest.mark.parametrize("mechanism, params", [SAMPLED_CASES[0], SAMPLED_CASES[3]])
def test_a_slot_without_a_segment_ending_is_a_skipped_slot(mechanism, params):
    """The sampling methods report at segment ends: every other slot up to the stream's last is skipped (PP-S,
    segments of 3: fresh at 2, 5, 8; Sampling, segments of 2: fresh at 1, 5, 7, the segment 2-3 holds no value)."""
    events = gap_events()
    batch = run_stage(batch_pipeline(), lambda p: p | beam.Create(events), clients(mechanism, **params))
    segment = params["segment"]
    ends = {(s // segment + 1) * segment - 1 for s in GAP_SLOTS[:4]}  # segments with a value, ending by slot 8
    assert set(kinds(batch)) == set(range(9)) and len(ends) < 5
    assert {s for s, kind in kinds(batch).items() if kind == "fresh"} == {s for s in ends if s <= 8}
    streamed = run_stage(streaming_pipeline(), slot_by_slot_source(events), clients(mechanism, **params))
    assert kinds(streamed) == kinds(batch) and released(streamed) == released(batch)


RANGE = (2 * SLOT + 10, 11 * SLOT)  # slots 2-10: starts inside slot 2, ends at slot 11's start


def test_a_release_range_releases_and_charges_its_slots_only_and_dead_letters_the_others():
    """Slots 2-10 with events in slots 0-8: every slot of the range is released (the empty ones after the data
    too), records before --start and after --end are dead letters that never reach the clients (the fresh
    releases are those of a run on the in-range events alone), the declaration user0 made before --start still
    holds (its in-range records are refused), charges only in the range; the central path releases the same
    kinds and dead-letters the same records."""
    events = make_numeric_events() + [Event("s", "user3", 13 * SLOT + 2, 5, None, "s|3|13")]
    ranged = run_stage(batch_pipeline(), lambda p: p | beam.Create(events), clients(release_range=RANGE))
    inside = [e for e in events if 2 <= e.time // SLOT <= 10]
    alone = run_stage(batch_pipeline(), lambda p: p | beam.Create([e for e in inside if e.user != "user0"]),
                      clients())  # the clients see the in-range records only; user0's are refused
    undeclared = run_stage(batch_pipeline(), lambda p: p | beam.Create(inside), clients())
    reference = run_stage(batch_pipeline(), lambda p: p | beam.Create(events), central(release_range=RANGE))
    assert set(kinds(ranged)) == set(range(2, 11)) and kinds(ranged) == kinds(reference)
    assert {s for s, kind in kinds(ranged).items() if kind == "skipped"} == {9, 10}
    assert released(ranged) == released(alone)
    outside = sorted(d["record"] for d in ranged["dead_letters"] if d["reason"].startswith("outside the release"))
    assert outside == sorted(e.raw for e in events if not 2 <= e.time // SLOT <= 10 and not e.raw.endswith("dup"))
    assert outside == sorted(d["record"] for d in reference["dead_letters"]
                             if d["reason"].startswith("outside the release"))
    refused = [d for d in ranged["dead_letters"] if d["reason"].startswith("requirement refused")]
    assert refused and {d["user"] for d in refused} == {"user0"}  # declared at slot 0, before --start
    assert released(undeclared) != released(ranged) and undeclared["dead_letters"] == []  # power: without the
    # declaration made before --start, user0's in-range records would report
    assert {e["slot"] for e in ranged["ledger_entries"]} == set(range(2, 9))
    counts = totals(ranged)
    assert counts["records_used"] + counts["duplicates"] + counts["dead_letters"] == len(events)


def test_streaming_with_a_release_range_releases_each_slot_of_it_as_the_watermark_passes():
    """TestStream, slots 2-10 with data up to slot 8 (and one record after --end): the same releases as batch,
    the slots after the data included, released as their slot closes (the stream advances slot by slot)."""
    events = make_numeric_events() + [Event("s", "user3", 13 * SLOT + 2, 5, None, "s|3|13")]
    batch = run_stage(batch_pipeline(), lambda p: p | beam.Create(events), clients(release_range=RANGE))
    streamed = run_stage(streaming_pipeline(), slot_by_slot_source(events), clients(release_range=RANGE))
    assert sorted(streamed["releases"], key=lambda r: r["slot"]) == sorted(batch["releases"], key=lambda r: r["slot"])
    assert totals(streamed) == totals(batch)
    # the sampling methods: a segment ending after --end never reports (nothing charged outside the range)
    sampled = run_stage(streaming_pipeline(), slot_by_slot_source(events),
                        clients("pp-s", release_range=(0, 8 * SLOT), segment=3))
    assert set(kinds(sampled)) == set(range(8)) and set(released(sampled)) == {2, 5}
    assert max(e["slot"] for e in sampled["ledger_entries"]) == 5


def test_neighbouring_inputs_release_the_same_slots_with_a_range_and_different_ones_without():
    """One extra record far after the others: with the range the released slots (and their kinds) are the same;
    without it the neighbour's series runs to the far slot (the power check)."""
    events = make_numeric_events()
    neighbour = events + [Event("s", "user2", 40 * SLOT + 1, 5, None, "s|2|40")]
    slots = lambda results: sorted(r["slot"] for r in results["releases"])  # noqa: E731
    one, two = (run_stage(batch_pipeline(), lambda p, e=e: p | beam.Create(e), clients(release_range=RANGE))
                for e in (events, neighbour))
    assert slots(one) == slots(two) == list(range(2, 11)) and kinds(one) == kinds(two)
    free_one, free_two = (run_stage(batch_pipeline(), lambda p, e=e: p | beam.Create(e), clients())
                          for e in (events, neighbour))
    assert slots(free_one) == list(range(9)) and slots(free_two) == list(range(41))


def test_streaming_checkpoint_options_are_checked_at_construction():
    with pytest.raises(ValueError, match="carry is for bounded input"):
        PrivateNumericClients("ipp", SLOT, DOMAIN, mechanism_params={"epsilon": 1.0, "window": 4}, policy=POLICY,
                              bounded=False, carry=True)
    with pytest.raises(ValueError, match="checkpoint_every is for unbounded input"):
        PrivateNumericClients("ipp", SLOT, DOMAIN, mechanism_params={"epsilon": 1.0, "window": 4}, policy=POLICY,
                              bounded=True, checkpoint_every=2)
    with pytest.raises(ValueError, match="checkpoint_every must be an integer >= 1"):
        PrivateNumericClients("ipp", SLOT, DOMAIN, mechanism_params={"epsilon": 1.0, "window": 4}, policy=POLICY,
                              bounded=False, checkpoint_every=0)


def test_a_streaming_checkpoint_cut_takes_what_its_slots_stamp():
    """A cut after slot S (S + 1 a multiple of ``every``) takes the users' states stamped at the close of slots up
    to S and the releases of slots up to S (1 ms later), and nothing of slot S + 1."""
    clock = SlotClock(SLOT, 0.0, 5.0)
    config = ClientStageConfig("ipp", DOMAIN, {"epsilon": 1.0, "window": 4}, clock)
    writer = WriteClientCheckpoints(config, 4)
    assert [writer.cut_slot(clock.close_micros(slot)) for slot in range(9)] == [3, 3, 3, 3, 7, 7, 7, 7, 11]
    assert [writer.cut_slot(clock.release_micros(slot)) for slot in (3, 4)] == [3, 7]
