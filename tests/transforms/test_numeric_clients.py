"""The numeric client stage: each user's client in the per-user stage, batch (FnApiRunner) and streaming
(BundleBasedDirectRunner + TestStream) against the core's ``Client.step`` run user by user."""

from __future__ import annotations


import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

from tests.transforms.beam_helpers import (
    SLOT,
    batch_pipeline,
    streaming_pipeline,
    streaming_source,
)
from transforms.checkpoint import CheckpointError
from transforms.coders import ClientRowCoder
from transforms.encoding import encode_value
from transforms.mechanisms import make_mechanism
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.numeric.perturbation import (
    worst_window_units,
)
from transforms.numeric_clients import (
    ClientStageConfig,
    PrivateNumericClients,
    UserClientState,
    read_clients_checkpoint,
    report_randomness,
    write_clients_checkpoint,
)
from transforms.numeric_events import NumericDomain
from transforms.numeric_records import ClientRow
from transforms.records import Event
from transforms.slotting import SlotClock
from tests.transforms.numeric_stage_helpers import (CROWD, DOMAIN, EPSILON, POLICY, SEED, WINDOW, RESULTS, keep_result,
                                                    run_carrying, expected, expected_method, fresh_row, kinds,
                                                    make_numeric_events, released, run, step_user, totals)


@pytest.mark.parametrize("mechanism, params", [
    ("capp", {"epsilon": EPSILON, "window": WINDOW}),
    ("app", {"epsilon": EPSILON, "window": WINDOW, "memory": 2}),
    ("ipp", {"epsilon": EPSILON, "window": WINDOW}),
    ("sw-direct", {"epsilon": EPSILON, "window": WINDOW}),
])
def test_batch_stage_releases_the_core_clients_means(mechanism, params):
    events = make_numeric_events()
    results = run(batch_pipeline(), lambda p: p | beam.Create(events), mechanism, params)
    want = expected(events, mechanism, params)
    assert released(results) == want  # exact: same client code, same draws, exact sums
    assert results["violations"] == []
    assert all(u["violations"] == 0 and 0 < u["max_window_usage_ratio"] <= 1 for u in results["usage"])
    assert {u["user"] for u in results["usage"]} == {f"user{u}" for u in range(1, 7)}
    refused = [d for d in results["dead_letters"] if d["user"] == "user0"]
    assert refused and all(d["reason"].startswith("requirement refused") for d in refused)
    counts = totals(results)
    assert counts.get("duplicates") == 1 and counts.get("dead_letters") == len(refused)
    assert counts["records_used"] + counts["duplicates"] + counts["dead_letters"] == len(events)
    units = make_mechanism(mechanism, bins=1, **params, **DOMAIN.mechanism_params()).client.report_units
    assert {r["epsilon"] for r in results["releases"]} == {units_to_decimal_string(units)}
    assert {r["trust"] for r in results["releases"]} == {"local_simulated"}


def test_streaming_stage_equals_batch_and_dead_letters_late_events():
    params = {"epsilon": EPSILON, "window": WINDOW}
    events = make_numeric_events()
    batch = run(batch_pipeline(), lambda p: p | beam.Create(events), "capp", params)
    lateness = 20.0
    streaming = run(streaming_pipeline(), lambda p: streaming_source(p, events, lateness, seed=5), "capp", params,
                    lateness)
    assert released(streaming) == released(batch) == expected(events, "capp", params)
    assert streaming["violations"] == []
    assert totals(streaming) == totals(batch)

    late = Event("s", "user2", 1.0, 5, None, "s|late")

    def source(p):
        stream = (test_stream.TestStream().add_elements([TimestampedValue(e, e.time) for e in events if e.time < SLOT])
                  .advance_watermark_to(3 * SLOT)
                  .add_elements([TimestampedValue(late, late.time)])
                  .add_elements([TimestampedValue(e, e.time) for e in events if e.time >= SLOT])
                  .advance_watermark_to_infinity())
        return p | stream

    results = run(streaming_pipeline(), source, "capp", params)
    reasons = [d["reason"] for d in results["dead_letters"] if d["record"] == "s|late"]
    assert len(reasons) == 1 and reasons[0].startswith("late: slot 0 closed")
    assert totals(results)["late"] == 1


def test_client_cell_round_trips_exactly_and_never_pickles():
    coder = ClientRowCoder()
    row = ClientRow(np.array([0.125, -0.5 + 2 ** -30, 0.0]), 0.25 - 2 ** -40, 17)
    back = coder.decode(coder.encode(row))
    assert np.array_equal(back.deviations, row.deviations) and back.accumulated == row.accumulated
    assert back.age == 17 and back.deviations.dtype == np.float64
    assert coder.encode(row)[0] == 1  # the layout version byte
    with pytest.raises(TypeError):
        coder.encode(ClientRow([0.1], 0.0, 0))  # a list is not the cell's array
    assert UserClientState.CLIENT.coder == ClientRowCoder()


def test_client_state_continues_across_firings_like_one_run():
    """A user's state cell carries the ring between slots: stepping slot by slot through rows equals Client.run."""
    client = make_mechanism("capp", bins=1, epsilon=EPSILON, window=WINDOW, **DOMAIN.mechanism_params()).client
    x = np.array([[0.1, 0.9, 0.4, 0.7, 0.2, 0.8]])
    row, stepped = fresh_row(client), []
    for t in range(x.shape[1]):
        report, row = step_user(client, ClientRowCoder().decode(ClientRowCoder().encode(row)), x[0, t],
                                report_randomness(SEED, "s", "u", t))
        stepped.append(report)

    class PerSlot:  # Client.run draws from one generator: hand it the per-slot ones in turn
        def __init__(self):
            self.t = 0

        def uint32(self, size: int) -> np.ndarray:
            self.t += 1
            return report_randomness(SEED, "s", "u", self.t - 1).uint32(size)

    reports, state = client.run(x, PerSlot())
    assert stepped == reports[0].tolist()
    assert row.age == 6 and row.accumulated == state.accumulated[0]
    charges = np.full((1, 6), client.report_units, np.int64)
    first = client.first_dependency(6)[None, :]
    assert worst_window_units(charges, first, WINDOW)[0] <= make_mechanism(
        "capp", bins=1, epsilon=EPSILON, window=WINDOW, **DOMAIN.mechanism_params()).params.epsilon_units


def test_bad_stage_configuration_fails_at_construction():
    with pytest.raises(ValueError, match="per-user client stage runs sw-direct, .*, topl, not pbd"):
        ClientStageConfig("pbd", DOMAIN, {"epsilon": 1.0, "window": 4}, SlotClock(SLOT))
    with pytest.raises(ValueError, match="accounting applies to the sampling methods"):
        ClientStageConfig("capp", DOMAIN, {"epsilon": 1.0, "window": 4}, SlotClock(SLOT), accounting="paper")
    with pytest.raises(ValueError, match="LOW < HIGH"):
        NumericDomain(1.0, 1.0)
    with pytest.raises(ValueError, match="policy"):
        PrivateNumericClients("capp", SLOT, DOMAIN, mechanism_params={"epsilon": 1.0, "window": 4})
    with pytest.raises(ValueError, match="too small"):
        PrivateNumericClients("capp", SLOT, DOMAIN, mechanism_params={"epsilon": 3e-12, "window": 4}, policy=POLICY)
    with pytest.raises(ValueError, match="topl: the crowd distribution is not in the per-user stage"):
        ClientStageConfig("topl", DOMAIN, {"epsilon": 1.0, "window": 4, **CROWD}, SlotClock(SLOT))
    with pytest.raises(ValueError, match="sma: the crowd distribution"):
        PrivateNumericClients("ipp", SLOT, DOMAIN, mechanism_params={"epsilon": 1.0, "window": 4, **CROWD},
                              policy=POLICY, sma=3)
    with pytest.raises(ValueError, match="needs both crowd_window"):
        ClientStageConfig("ipp", DOMAIN, {"epsilon": 1.0, "window": 4, "crowd_bins": 3}, SlotClock(SLOT))


def test_sma_figures_smooth_the_released_series():
    from transforms.mechanisms.numeric import server

    events = make_numeric_events()
    RESULTS.clear()
    with batch_pipeline() as p:
        out = (p | beam.Create(events)) | PrivateNumericClients(
            "ipp", SLOT, DOMAIN, mechanism_params={"epsilon": EPSILON, "window": WINDOW}, policy=POLICY,
            insecure_seed=SEED, sma=3, sma_mode="trailing")
        RESULTS["releases"] = []
        out["releases"] | beam.Map(keep_result, "releases")
    ordered = sorted(RESULTS["releases"], key=lambda r: r["slot"])
    estimates = [r["estimate"][0] for r in ordered]
    want = expected(events, "ipp", {"epsilon": EPSILON, "window": WINDOW})
    assert estimates == [want[slot][1] for slot in sorted(want)]  # smoothing adds a figure, changes no estimate
    smoothed = [r["figures"]["sma"] for r in ordered]
    assert np.allclose(smoothed, server.sma(estimates, 3, "trailing"), rtol=0, atol=1e-12)
    assert smoothed[0] == estimates[0] and smoothed[2] == pytest.approx(sum(estimates[:3]) / 3)
    with pytest.raises(ValueError, match="odd size"):
        PrivateNumericClients("ipp", SLOT, DOMAIN, mechanism_params={"epsilon": EPSILON, "window": WINDOW},
                              policy=POLICY, sma=2)


@pytest.mark.parametrize("mechanism, extra", [("capp", {}), ("ipp", {}), ("pp-s", {"segment": 3}),
                                              ("capp-s", {"segment": 3}), ("ba-sw", {})])
def test_a_run_resumed_from_the_carried_state_releases_what_one_run_releases(tmp_path, mechanism, extra):
    """Slots 0-3, then slots 4-8 resumed from the first run's carried state (clients, open segments, BA-SW's
    last publications, declarations, ledger tails): the releases, the ledger's usage and the accounting equal
    those of one run over slots 0-8; an event for a slot the first run closed is late.  PP-S/CAPP-S: the segment
    of slots 3-5 is open at the checkpoint."""
    params = {"epsilon": EPSILON, "window": WINDOW, **extra}
    events = make_numeric_events() + [Event("s", "early", 3 * SLOT + 1, 9, None, "s|early|3")]  # none after slot 3
    whole = run_carrying(events, mechanism, params)
    first = run_carrying([e for e in events if e.time < 4 * SLOT], mechanism, params)
    config = ClientStageConfig(mechanism, DOMAIN, params, SlotClock(SLOT), POLICY, SEED)
    path = write_clients_checkpoint(first["carry"], config, str(tmp_path), None, dict(first["estimates"]))
    carried = read_clients_checkpoint(str(tmp_path), config)  # the file, found as the latest in the directory
    assert set(carried) == {("s", f"user{u}") for u in range(7)} | {("s", "early")}
    assert len(carried) == len(first["carry"])
    with pytest.raises(CheckpointError, match="insecure seed"):
        read_clients_checkpoint(path, ClientStageConfig(mechanism, DOMAIN, params, SlotClock(SLOT), POLICY, SEED + 1))
    late = [Event("s", "user2", 1 * SLOT + 3, 5, None, "s|2|late"),
            Event("s", "newcomer", 3 * SLOT + 3, 5, None, "s|new|late")]  # slot 3 was closed for everyone
    second = run_carrying([e for e in events if e.time >= 4 * SLOT] + late, mechanism, params, carried)
    assert released(first) | released(second) == released(whole)
    every = lambda results: {r["slot"]: (r["kind"], r["estimate"]) for r in results["releases"]}  # noqa: E731
    assert every(first) | every(second) == every(whole)  # skipped slots repeat the carried last estimate
    assert set(released(second)) == {slot for slot in released(whole) if slot >= 4}
    if "segment" in extra:  # the open segment's values from the first run count in the second run's report, and
        # "early"'s carried segment reports at slot 5 though it sends nothing after the checkpoint
        assert set(released(first)) == {2} and kinds(first) == {0: "skipped", 1: "skipped", 2: "fresh", 3: "skipped"}
        assert released(second)[5] == expected_method(events, mechanism, params)[5]
        assert "early" in {u["user"] for u in second["usage"]}
    usage = lambda results: {u["user"]: u["max_window_usage_ratio"] for u in results["usage"]}  # noqa: E731
    resumed_usage = {user: max(usage(first).get(user, 0), usage(second).get(user, 0))
                     for user in usage(first) | usage(second)}
    assert resumed_usage == usage(whole)  # windows across the boundary see the carried charges
    assert second["violations"] == [] and totals(second).get("late") == 2
    assert sorted(d["reason"] for d in second["dead_letters"] if d["user"] in ("user2", "newcomer")) == \
        [f"late: slot {s} closed by the checkpoint resumed from" for s in (1, 3)]
    assert totals(first)["records_used"] + totals(second)["records_used"] == totals(whole)["records_used"]
    final = {key: c for key, c in {**carried, **dict(second["carry"])}.items() if key[1] != "newcomer"}  # the file's
    state = lambda c: (c.next_slot, encode_value(None if c.row is None else tuple(c.row)))  # noqa: E731
    assert {key: state(c) for key, c in final.items()} == {key: state(c) for key, c in dict(whole["carry"]).items()}
    # the carried ledger tail counts: charges inflated in it make the resumed run's windows across the boundary
    # violate (power check of the usage comparison above)
    key = ("s", "user3")
    tail = carried[key].tail
    inflated = {**carried, key: carried[key]._replace(tail={**tail, "spent": tail["spent"] * 100})}
    violated = run_carrying([e for e in events if e.time >= 4 * SLOT], mechanism, params, inflated)
    assert {v["user"] for v in violated["violations"]} == {"user3"}
    assert min(v["slot"] for v in violated["violations"]) == min(released(second))
