"""The numeric client stage's other methods (the sampling methods, BA-SW, ToPL) in the per-user stage, batch
and streaming, against the core; their paper accounting marked and refused by default; their cells' coders;
the streaming SMA and a carried open segment.
"""

from __future__ import annotations


import apache_beam as beam
import numpy as np
import pytest

from tests.transforms.beam_helpers import (
    SLOT,
    batch_pipeline,
    streaming_pipeline,
    streaming_source,
)
from transforms.coders import AbsorptionRowCoder, SampledRowCoder
from transforms.encoding import encode_value
from transforms.mechanisms import make_mechanism
from transforms.mechanisms.numeric.perturbation import (
    worst_window_units,
)
from transforms.numeric_clients import (
    PrivateNumericClients,
    UserAbsorptionState,
    UserSampledState,
)
from transforms.numeric_records import AbsorptionRow, SampledRow
from transforms.records import Event
from tests.transforms.numeric_stage_helpers import (DOMAIN, EPSILON, POLICY, SAMPLED_CASES, SEED, WINDOW, RESULTS,
                                                    keep_result, run_carrying, expected_method, make_numeric_events,
                                                    paper_client, released, run, stream_values, totals)


@pytest.mark.parametrize("mechanism, params", SAMPLED_CASES)
def test_batch_stage_runs_every_other_method_like_the_core(mechanism, params):
    events = make_numeric_events()
    results = run(batch_pipeline(), lambda p: p | beam.Create(events), mechanism, params)
    want = expected_method(events, mechanism, params)
    got = released(results)
    if mechanism == "topl":  # the stage de-biases the slot's average, the core each report: float rounding apart
        assert set(got) == set(want) and all(got[s][0] == want[s][0] for s in want)
        assert all(got[s][1] == pytest.approx(want[s][1], rel=1e-12, abs=1e-9) for s in want)
    else:
        assert got == want  # exact: the core's functions, the same draws, exact sums
    assert results["violations"] == []
    assert all(u["violations"] == 0 and 0 < u["max_window_usage_ratio"] <= 1 for u in results["usage"])
    counts = totals(results)
    assert counts["records_used"] + counts["duplicates"] + counts["dead_letters"] == len(events)
    assert {r["figures"].get("w_event_private", 1.0) for r in results["releases"]} == {1.0}
    if mechanism in ("app-s", "capp-s", "pp-s", "sampling"):
        segment = make_mechanism(mechanism, bins=1, **params, **DOMAIN.mechanism_params()).segment
        assert segment == params.get("segment", 1) and all((slot + 1) % segment == 0 for slot in got)  # at the ends


@pytest.mark.parametrize("mechanism, params", [SAMPLED_CASES[0], SAMPLED_CASES[4], SAMPLED_CASES[5]])
def test_streaming_stage_runs_every_other_method_as_batch_does(mechanism, params):
    """Events out of order within the allowed lateness; users without a value at a segment's last slot still
    report the segment when that slot closes (the timer is armed at it); 9 slots of segments of 3: every segment
    is complete in both modes."""
    events = make_numeric_events()
    batch = run(batch_pipeline(), lambda p: p | beam.Create(events), mechanism, params)
    lateness = 20.0
    streaming = run(streaming_pipeline(), lambda p: streaming_source(p, events, lateness, seed=5), mechanism,
                    params, lateness)
    assert released(streaming) == released(batch)
    assert streaming["violations"] == [] and totals(streaming) == totals(batch)
    if mechanism == "pp-s":
        by_slot = {}
        for e in events:
            by_slot.setdefault(int(e.time // SLOT), set()).add(e.user)
        missing = {u for u in stream_values(events) if u not in by_slot[2]}
        assert missing and released(batch)[2][0] == len(stream_values(events))  # power: some report without a value


def test_paper_accounting_of_the_sampling_methods_is_marked_and_refused_by_default():
    """The paper's n_w = ceil(w/L) (no memory term) is not w-event private on a stream: refused unless flagged,
    then its releases say so; the exact window check of the dependency spans shows why (strict: within the
    budget; paper: above it)."""
    params = {"epsilon": EPSILON, "window": WINDOW, "segment": 3}
    with pytest.raises(ValueError, match="not w-event private on a stream"):
        PrivateNumericClients("capp-s", SLOT, DOMAIN, mechanism_params=params, policy=POLICY, accounting="paper")
    events = make_numeric_events()
    RESULTS.clear()
    with batch_pipeline() as p:
        out = (p | beam.Create(events)) | PrivateNumericClients(
            "capp-s", SLOT, DOMAIN, mechanism_params=params, policy=POLICY, insecure_seed=SEED, accounting="paper",
            not_w_event_private=True)
        RESULTS["releases"] = []
        out["releases"] | beam.Map(keep_result, "releases")
    assert released(dict(RESULTS)) == expected_method(events, "capp-s", params, "paper")
    assert {r["figures"]["w_event_private"] for r in RESULTS["releases"]} == {0.0}
    mechanism = make_mechanism("capp-s", bins=1, **params, **DOMAIN.mechanism_params())
    slots, length = 24, mechanism.segment
    ends = np.arange(length - 1, slots, length)
    for client, within in ((mechanism.client, True), (paper_client(mechanism), False)):
        charges, first = np.zeros((1, slots), np.int64), np.arange(slots)[None, :].copy()
        charges[0, ends] = client.report_units
        first[0, ends] = np.maximum(ends - length + 1 - client.memory * length, 0)  # the segment and h samples
        assert bool(worst_window_units(charges, first, WINDOW)[0] <= mechanism.params.epsilon_units) == within


def test_sampled_and_absorption_cells_round_trip_exactly():
    row = SampledRow(np.array([0.125, -0.5 + 2 ** -30]), 2 ** -40, 5, 7, 1.5 + 2 ** -16, 3, (4, 2000000))
    back = SampledRowCoder().decode(SampledRowCoder().encode(row))
    assert np.array_equal(back.deviations, row.deviations) and back[1:] == row[1:]
    with pytest.raises(TypeError):
        SampledRowCoder().encode(row._replace(deviations=[0.1]))
    absorbed = AbsorptionRow(0.5 + 2 ** -17, 3, 2, 9)
    assert AbsorptionRowCoder().decode(AbsorptionRowCoder().encode(absorbed)) == absorbed
    assert UserSampledState.CLIENT.coder == SampledRowCoder()
    assert UserAbsorptionState.CLIENT.coder == AbsorptionRowCoder()


def _smoothed_run(pipeline, source, mechanism: str, params: dict, size: int, mode: str, lateness: float = 0.0):
    RESULTS.clear()
    with pipeline as p:
        out = source(p) | PrivateNumericClients(mechanism, SLOT, DOMAIN, mechanism_params=params, policy=POLICY,
                                                insecure_seed=SEED, allowed_lateness=lateness, sma=size,
                                                sma_mode=mode)
        RESULTS["releases"] = []
        out["releases"] | beam.Map(keep_result, "releases")
    return {r["slot"]: (r["estimate"][0], r["figures"]["sma"]) for r in RESULTS["releases"]}


@pytest.mark.parametrize("mechanism, params, size, mode", [
    ("capp", {"epsilon": EPSILON, "window": WINDOW}, 3, "centered"),
    ("ba-sw", {"epsilon": EPSILON, "window": WINDOW}, 5, "centered"),
    ("ipp", {"epsilon": EPSILON, "window": WINDOW}, 3, "trailing"),
])
def test_streaming_sma_equals_the_bounded_sma_on_the_same_events(mechanism, params, size, mode):
    """The SMA of the released series, streaming (TestStream on the BundleBasedDirectRunner, events out of order
    within the allowed lateness: each release waits for the releases its window takes; the last ones go when the
    stream ends) and bounded: the same bits, and server.sma's numbers."""
    from transforms.mechanisms.numeric import server

    events = make_numeric_events()
    bounded = _smoothed_run(batch_pipeline(), lambda p: p | beam.Create(events), mechanism, params, size, mode)
    lateness = 20.0
    streaming = _smoothed_run(streaming_pipeline(), lambda p: streaming_source(p, events, lateness, seed=5),
                              mechanism, params, size, mode, lateness)
    assert streaming == bounded and len(bounded) == 9
    estimates = [bounded[slot][0] for slot in sorted(bounded)]
    assert np.allclose([bounded[slot][1] for slot in sorted(bounded)], server.sma(estimates, size, mode),
                       rtol=0, atol=1e-12)
    assert bounded[4][1] != pytest.approx(estimates[4])  # power: the figure is smoothed


def test_a_carried_open_segment_of_a_stream_without_new_events_stays_open():
    """Resuming PP-S on input of another stream only: the carried segments of stream "s" have no closed last slot
    (nothing of "s" came), so they report nothing and are carried on unchanged."""
    params = {"epsilon": EPSILON, "window": WINDOW, "segment": 3}
    events = [e for e in make_numeric_events() if e.time < 4 * SLOT]
    first = run_carrying(events, "pp-s", params)
    carried = dict(first["carry"])
    open_segments = {key for key, c in carried.items() if c.row is not None and c.row.count}
    assert open_segments  # slot 3 opened the segment 3-5
    second = run_carrying([Event("t", "user9", 7 * SLOT + 1, 5, None, "t|9|7")], "pp-s", params, carried)
    assert {r["stream"] for r in second["releases"]} <= {"t"}
    again = dict(second["carry"])
    assert all(encode_value(tuple(again[key].row)) == encode_value(tuple(carried[key].row)) for key in open_segments)
