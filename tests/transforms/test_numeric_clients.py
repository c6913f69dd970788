"""The numeric client stage: each user's client in the per-user stage, batch (FnApiRunner) and streaming
(BundleBasedDirectRunner + TestStream) against the core's ``Client.step`` run user by user."""

from __future__ import annotations

import random

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
from transforms.coders import AbsorptionRowCoder, ClientRowCoder, SampledRowCoder
from transforms.declarations import RequirementPolicy
from transforms.encoding import encode_value
from transforms.mechanisms import FixedRequirement, FixedRequirements, make_mechanism
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.numeric.baselines import absorption_step, topl_step
from transforms.mechanisms.numeric.perturbation import (
    Client,
    ClientState,
    build_client,
    worst_window_units,
)
from transforms.mechanisms.numeric.sampling import samples_per_window
from transforms.mechanisms.numeric.server import crowd_distribution
from transforms.mechanisms.numeric.streams import AbsorptionStream, SampledStream
from transforms.numeric_clients import (
    CarriedClients,
    ClientStageConfig,
    PrivateNumericClients,
    WriteClientCheckpoints,
    ReportDraws,
    UserAbsorptionState,
    UserClientState,
    UserSampledState,
    read_clients_checkpoint,
    report_randomness,
    write_clients_checkpoint,
)
from transforms.numeric_events import NumericDomain
from transforms.numeric_records import AbsorptionRow, ClientRow, SampledRow
from transforms.private_histogram import PrivateStreamHistogram
from transforms.records import Event
from transforms.slotting import SlotClock

SEED = 11


def fresh_row(client: Client) -> ClientRow:
    return ClientRow(np.zeros(client.memory), 0.0, 0)


def step_user(client: Client, row: ClientRow, x: float, rng) -> tuple[float, ClientRow]:
    """The reference: one report of one user (grid value ``x``) through the core's ``Client.step``, on its own."""
    state = ClientState(row.deviations.reshape(1, -1).copy(), np.array([row.accumulated]),
                        np.array([row.age], np.int64))
    reports, state = client.step(state, np.array([x]), rng, in_place=True)
    return float(reports[0]), ClientRow(state.deviations[0].copy(), float(state.accumulated[0]), int(state.age[0]))
DOMAIN = NumericDomain(-2.0, 6.0)
EPSILON, WINDOW = 2.0, 4
POLICY = RequirementPolicy(default=FixedRequirement(WINDOW, EPSILON))


def make_numeric_events(users: int = 7, slots: int = 9, seed: int = 3) -> list[Event]:
    """Each user reports in most slots (grid indices of values in DOMAIN); user 0 declares a window the
    mechanism refuses (dead letters), one duplicate per user 1."""
    rnd = random.Random(seed)
    events = []
    for u in range(users):
        for s in range(slots):
            if rnd.random() < 0.8 or s == 0:
                value = DOMAIN.grid_index(rnd.uniform(DOMAIN.low, DOMAIN.high))
                declaration = ("fixed", WINDOW + 3, "2.0") if u == 0 and s == 0 else None
                events.append(Event("s", f"user{u}", s * SLOT + rnd.uniform(0, SLOT - 1), value, declaration,
                                    f"s|{u}|{s}"))
    events.append(Event("s", "user1", 0.5, 17, None, "s|1|0|dup"))  # a second report in slot 0 (the earlier one)
    return events


def expected(events: list[Event], mechanism: str, params: dict) -> dict:
    """slot -> (reporters, mean in the domain's units): the core's Client.step per user, same generators."""
    built = make_mechanism(mechanism, bins=1, **params, **DOMAIN.mechanism_params())
    client, estimator = built.client, built.estimator
    by_user: dict = {}
    for e in sorted(events, key=lambda e: (e.time, e.raw)):
        by_user.setdefault(e.user, {})[int(e.time // SLOT)] = e.value  # the latest event of a slot wins
    reports: dict = {}
    for user, slots in by_user.items():
        if user == "user0":  # refused declaration: no report
            continue
        row = fresh_row(client)
        for slot in sorted(slots):
            report, row = step_user(client, row, slots[slot] / DOMAIN.steps,
                                    report_randomness(SEED, "s", user, slot))
            reports.setdefault(slot, []).append(report)
    return {slot: (len(r), DOMAIN.low + DOMAIN.width * estimator.unit_estimate(float(np.mean(r))))
            for slot, r in reports.items()}


def run(pipeline, source, mechanism: str, params: dict, lateness: float = 0.0) -> dict:
    """The stage's outputs, collected in this process (both runners run in it)."""
    _RESULTS.clear()
    with pipeline as p:
        events = source(p)
        out = events | PrivateNumericClients(mechanism, SLOT, DOMAIN, mechanism_params=params, policy=POLICY,
                                             insecure_seed=SEED, allowed_lateness=lateness)
        for name in ("releases", "dead_letters", "usage", "violations", "accounting"):
            _RESULTS[name] = []
            out[name] | f"Keep{name}" >> beam.Map(_keep, name)
    return dict(_RESULTS)


_RESULTS: dict = {}


def _keep(value, name: str) -> None:
    """A top-level function (pickled by reference): both runners run in this process."""
    _RESULTS[name].append(value)


def released(results: dict) -> dict:
    """The fresh releases (those with reports): slot -> (reporters, estimate)."""
    return {r["slot"]: (r["reporters"], r["estimate"][0]) for r in results["releases"] if r["kind"] == "fresh"}


def kinds(results: dict) -> dict:
    """Every release: slot -> kind (each slot once)."""
    slots = [r["slot"] for r in results["releases"]]
    assert len(slots) == len(set(slots))
    return {r["slot"]: r["kind"] for r in results["releases"]}


def totals(results: dict) -> dict:
    out: dict = {}
    for name, n in results["accounting"]:
        out[name] = out.get(name, 0) + n
    return out


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
    _RESULTS.clear()
    with batch_pipeline() as p:
        out = (p | beam.Create(events)) | PrivateNumericClients(
            "ipp", SLOT, DOMAIN, mechanism_params={"epsilon": EPSILON, "window": WINDOW}, policy=POLICY,
            insecure_seed=SEED, sma=3, sma_mode="trailing")
        _RESULTS["releases"] = []
        out["releases"] | beam.Map(_keep, "releases")
    ordered = sorted(_RESULTS["releases"], key=lambda r: r["slot"])
    estimates = [r["estimate"][0] for r in ordered]
    want = expected(events, "ipp", {"epsilon": EPSILON, "window": WINDOW})
    assert estimates == [want[slot][1] for slot in sorted(want)]  # smoothing adds a figure, changes no estimate
    smoothed = [r["figures"]["sma"] for r in ordered]
    assert np.allclose(smoothed, server.sma(estimates, 3, "trailing"), rtol=0, atol=1e-12)
    assert smoothed[0] == estimates[0] and smoothed[2] == pytest.approx(sum(estimates[:3]) / 3)
    with pytest.raises(ValueError, match="odd size"):
        PrivateNumericClients("ipp", SLOT, DOMAIN, mechanism_params={"epsilon": EPSILON, "window": WINDOW},
                              policy=POLICY, sma=2)


def _run_carrying(events, mechanism, params, resume=None) -> dict:
    _RESULTS.clear()
    with batch_pipeline() as p:
        out = p | beam.Create(events) | PrivateNumericClients(
            mechanism, SLOT, DOMAIN, mechanism_params=params, policy=POLICY, insecure_seed=SEED, bounded=True,
            resume=resume, carry=True)
        for name in ("releases", "dead_letters", "usage", "violations", "accounting", "carry", "estimates"):
            _RESULTS[name] = []
            out[name] | f"Keep{name}" >> beam.Map(_keep, name)
    return dict(_RESULTS)


@pytest.mark.parametrize("mechanism, extra", [("capp", {}), ("ipp", {}), ("pp-s", {"segment": 3}),
                                              ("capp-s", {"segment": 3}), ("ba-sw", {})])
def test_a_run_resumed_from_the_carried_state_releases_what_one_run_releases(tmp_path, mechanism, extra):
    """Slots 0-3, then slots 4-8 resumed from the first run's carried state (clients, open segments, BA-SW's
    last publications, declarations, ledger tails): the releases, the ledger's usage and the accounting equal
    those of one run over slots 0-8; an event for a slot the first run closed is late.  PP-S/CAPP-S: the segment
    of slots 3-5 is open at the checkpoint."""
    params = {"epsilon": EPSILON, "window": WINDOW, **extra}
    events = make_numeric_events() + [Event("s", "early", 3 * SLOT + 1, 9, None, "s|early|3")]  # none after slot 3
    whole = _run_carrying(events, mechanism, params)
    first = _run_carrying([e for e in events if e.time < 4 * SLOT], mechanism, params)
    config = ClientStageConfig(mechanism, DOMAIN, params, SlotClock(SLOT), POLICY, SEED)
    path = write_clients_checkpoint(first["carry"], config, str(tmp_path), None, dict(first["estimates"]))
    carried = read_clients_checkpoint(str(tmp_path), config)  # the file, found as the latest in the directory
    assert set(carried) == {("s", f"user{u}") for u in range(7)} | {("s", "early")}
    assert len(carried) == len(first["carry"])
    with pytest.raises(CheckpointError, match="insecure seed"):
        read_clients_checkpoint(path, ClientStageConfig(mechanism, DOMAIN, params, SlotClock(SLOT), POLICY, SEED + 1))
    late = [Event("s", "user2", 1 * SLOT + 3, 5, None, "s|2|late"),
            Event("s", "newcomer", 3 * SLOT + 3, 5, None, "s|new|late")]  # slot 3 was closed for everyone
    second = _run_carrying([e for e in events if e.time >= 4 * SLOT] + late, mechanism, params, carried)
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
    violated = _run_carrying([e for e in events if e.time >= 4 * SLOT], mechanism, params, inflated)
    assert {v["user"] for v in violated["violations"]} == {"user3"}
    assert min(v["slot"] for v in violated["violations"]) == min(released(second))


# ---------------------------------------------------------------- the sampling methods, BA-SW and ToPL

def stream_values(events: list[Event]) -> dict:
    """user -> {slot: grid value in [0, 1]} of the admitted users (the latest event of a slot wins)."""
    by_user: dict = {}
    for e in sorted(events, key=lambda e: (e.time, e.raw)):
        if e.user != "user0":  # refused declaration: no report
            by_user.setdefault(e.user, {})[int(e.time // SLOT)] = e.value / DOMAIN.steps
    return by_user


def paper_client(mechanism) -> Client:
    """The PP-S family's client under the paper's n_w = ceil(w/L), built from the core's functions."""
    p = mechanism.params
    touched = samples_per_window(mechanism.segment, p.window, p.window, "paper")
    memory = mechanism.fixed_memory if mechanism.fixed_memory is not None else -(-p.window // mechanism.segment)
    return build_client(p.epsilon_units // touched, p.grid_bits, memory, False, None, mechanism.base == "capp")


def expected_method(events: list[Event], mechanism_name: str, params: dict, accounting: str = "strict") -> dict:
    """slot -> (reports, mean in the domain's units) from the core's per-user functions, user by user, each report
    from its (seed, stream, user, slot) generator: the sampled methods' segment means through ``Client.step`` at
    each segment's last slot (once it is within the stream's slots), BA-SW's ``absorption_step`` at every value,
    ToPL's ``topl_step`` (de-biased per report, averaged)."""
    reports: dict = {}
    for user_reports in reports_of_users(events, mechanism_name, params, accounting).values():
        for slot, report in user_reports:
            reports.setdefault(slot, []).append(report)
    estimator = make_mechanism(mechanism_name, bins=1, **params, **DOMAIN.mechanism_params()).estimator
    unit = (lambda mean: mean) if mechanism_name == "topl" else estimator.unit_estimate  # ToPL: de-biased per report
    return {slot: (len(r), DOMAIN.low + DOMAIN.width * unit(float(np.mean(r)))) for slot, r in reports.items()}


def reports_of_users(events: list[Event], mechanism_name: str, params: dict, accounting: str = "strict") -> dict:
    """user -> [(slot, report)] from the core's per-user functions (:func:`expected_method`'s; the other methods
    through ``Client.step`` at every value), each report from its (seed, stream, user, slot) generator."""
    mechanism = make_mechanism(mechanism_name, bins=1, **params, **DOMAIN.mechanism_params())
    horizon = max(int(e.time // SLOT) for e in events)
    out: dict = {}
    for user, slots in stream_values(events).items():
        reports = out.setdefault(user, [])
        if isinstance(mechanism, SampledStream):
            client = mechanism.client if accounting == "strict" else paper_client(mechanism)
            length = mechanism.segment
            row, segments = fresh_row(client), {}
            for slot, x in slots.items():
                segments.setdefault(slot // length, []).append(x)
            for k in sorted(segments):
                end = (k + 1) * length - 1
                if end <= horizon:
                    report, row = step_user(client, row, sum(segments[k]) / len(segments[k]),
                                            report_randomness(SEED, "s", user, end))
                    reports.append((end, report))
        elif isinstance(mechanism, AbsorptionStream):
            state = mechanism.absorption.initial_state(1)
            for slot in sorted(slots):
                released_, _, _, state = absorption_step(mechanism.absorption, state, np.array([slots[slot]]),
                                                         report_randomness(SEED, "s", user, slot))
                reports.append((slot, float(released_[0])))
        elif mechanism_name == "topl":
            for slot in sorted(slots):
                report = topl_step(mechanism.topl, np.array([slots[slot]]), report_randomness(SEED, "s", user, slot))
                reports.append((slot, float(report[0])))
        else:
            row = fresh_row(mechanism.client)
            for slot in sorted(slots):
                report, row = step_user(mechanism.client, row, slots[slot], report_randomness(SEED, "s", user, slot))
                reports.append((slot, report))
    return out


SAMPLED_CASES = [
    ("pp-s", {"epsilon": EPSILON, "window": WINDOW, "segment": 3}),
    ("app-s", {"epsilon": EPSILON, "window": WINDOW, "segment": 4}),  # the last segment (8-11) stays open
    ("capp-s", {"epsilon": EPSILON, "window": WINDOW}),  # the default segment
    ("sampling", {"epsilon": EPSILON, "window": WINDOW, "segment": 2}),
    ("ba-sw", {"epsilon": EPSILON, "window": WINDOW}),
    ("topl", {"epsilon": EPSILON, "window": WINDOW}),
]


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
    _RESULTS.clear()
    with batch_pipeline() as p:
        out = (p | beam.Create(events)) | PrivateNumericClients(
            "capp-s", SLOT, DOMAIN, mechanism_params=params, policy=POLICY, insecure_seed=SEED, accounting="paper",
            not_w_event_private=True)
        _RESULTS["releases"] = []
        out["releases"] | beam.Map(_keep, "releases")
    assert released(dict(_RESULTS)) == expected_method(events, "capp-s", params, "paper")
    assert {r["figures"]["w_event_private"] for r in _RESULTS["releases"]} == {0.0}
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
    _RESULTS.clear()
    with pipeline as p:
        out = source(p) | PrivateNumericClients(mechanism, SLOT, DOMAIN, mechanism_params=params, policy=POLICY,
                                                insecure_seed=SEED, allowed_lateness=lateness, sma=size,
                                                sma_mode=mode)
        _RESULTS["releases"] = []
        out["releases"] | beam.Map(_keep, "releases")
    return {r["slot"]: (r["estimate"][0], r["figures"]["sma"]) for r in _RESULTS["releases"]}


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
    first = _run_carrying(events, "pp-s", params)
    carried = dict(first["carry"])
    open_segments = {key for key, c in carried.items() if c.row is not None and c.row.count}
    assert open_segments  # slot 3 opened the segment 3-5
    second = _run_carrying([Event("t", "user9", 7 * SLOT + 1, 5, None, "t|9|7")], "pp-s", params, carried)
    assert {r["stream"] for r in second["releases"]} <= {"t"}
    again = dict(second["carry"])
    assert all(encode_value(tuple(again[key].row)) == encode_value(tuple(carried[key].row)) for key in open_segments)


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
    _RESULTS.clear()
    with pipeline as p:
        out = source(p) | transform
        for name in ("releases", "dead_letters", "usage", "accounting", "ledger_entries"):
            _RESULTS[name] = []
            out[name] | f"Keep{name}" >> beam.Map(_keep, name)
    return dict(_RESULTS)


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


def expected_crowd(events: list[Event], mechanism: str, params: dict, window: int, bins: int) -> list:
    """Every slot's ``(kind, estimate)`` of the crowd distribution release (the core's definition, spec §3.8.3):
    at a slot with reports, the fractions (``server.crowd_distribution``) of the users with a report in the last
    ``window`` slots by their mean report (summed oldest first); a slot without reports repeats the last one."""
    by_user = reports_of_users(events, mechanism, params)
    reporting = {slot for reports in by_user.values() for slot, _ in reports}
    estimate, out = [0.0] * bins, []
    for t in range(max(int(e.time // SLOT) for e in events) + 1):
        if t in reporting:
            means = []
            for reports in by_user.values():
                held = [value for slot, value in reports if t - window < slot <= t]
                total = 0.0
                for value in held:
                    total += value
                if held:
                    means.append(total / len(held))
            estimate = crowd_distribution(means, bins).tolist()
        out.append(("fresh" if t in reporting else "skipped", estimate))
    return out


CROWD = {"crowd_window": 3, "crowd_bins": 4}


@pytest.mark.parametrize("mechanism, params", [
    ("ipp", {"epsilon": EPSILON, "window": WINDOW}),
    SAMPLED_CASES[0],  # pp-s, segment 3: two of every three slots skipped
])
def test_batch_crowd_distribution_equals_the_cores_on_the_same_reports(mechanism, params):
    """The per-user stage's crowd releases (each user's bin per slot, counted per slot) are exactly the core's
    distribution of the same seeded reports; the charges (ledger usage) are the mean release's."""
    events = make_numeric_events()
    results = run(batch_pipeline(), lambda p: p | beam.Create(events), mechanism, {**params, **CROWD})
    got = sorted(results["releases"], key=lambda r: r["slot"])
    want = expected_crowd(events, mechanism, params, CROWD["crowd_window"], CROWD["crowd_bins"])
    assert [(r["kind"], r["estimate"]) for r in got] == want
    assert {r["statistic"] for r in got} == {"distribution"}
    assert all(abs(sum(r["estimate"]) - 1) < 1e-12 for r in got if r["kind"] == "fresh")
    assert len({tuple(e) for _, e in want}) > 2  # power: the distribution moves from slot to slot
    usage = {u["user"]: u["max_window_usage_ratio"] for u in results["usage"]}
    mean = run(batch_pipeline(), lambda p: p | beam.Create(events), mechanism, params)
    assert usage == {u["user"]: u["max_window_usage_ratio"] for u in mean["usage"]} and results["violations"] == []


def test_the_crowd_reference_is_the_registered_mechanisms_release():
    """:func:`expected_crowd` is the core's own release: the registered IPP stream with the crowd options, stepped
    slot by slot on the same users with each report's (seed, stream, user, slot) draws, releases exactly it."""
    events = make_numeric_events()
    values = stream_values(events)
    users = sorted(values, key=lambda u: int(u[4:]))
    core = make_mechanism("ipp", bins=1, epsilon=EPSILON, window=WINDOW, **CROWD, **DOMAIN.mechanism_params())
    declared = FixedRequirements.of([WINDOW] * len(users), [EPSILON] * len(users))
    got = []
    for t in range(max(int(e.time // SLOT) for e in events) + 1):
        held = [i for i, user in enumerate(users) if t in values[user]]
        grid = np.array([values[users[i]][t] * DOMAIN.steps for i in held], np.float64)
        release = core.step(SlotBatch.of(np.array(held, np.int64), grid, declared if t == 0 else None),
                            ReportDraws(SEED, [("s", users[i], t) for i in held], 2))
        got.append((release.kind.name.lower(), release.values.tolist()))
    assert got == expected_crowd(events, "ipp", {"epsilon": EPSILON, "window": WINDOW}, CROWD["crowd_window"],
                                 CROWD["crowd_bins"])


@pytest.mark.parametrize("mechanism, extra", [("ipp", {}), ("pp-s", {"segment": 3})])
def test_a_crowd_run_resumed_from_its_checkpoint_releases_what_one_run_releases(tmp_path, mechanism, extra):
    """The crowd distribution carried across a checkpoint (each user's recent reports in the file): slots 0-3,
    then 4-8 resumed, release what one run over 0-8 releases (the first resumed slots' means reach back into
    the first run; its last distribution repeated by skipped slots), at the same ledger usage."""
    params = {"epsilon": EPSILON, "window": WINDOW, **extra, "crowd_window": 4, "crowd_bins": 4}  # q = 4: PP-S's
    # slot-5 means reach its slot-2 reports
    events = make_numeric_events() + [Event("s", "early", 3 * SLOT + 1, 9, None, "s|early|3")]  # none after slot 3
    whole = _run_carrying(events, mechanism, params)
    first = _run_carrying([e for e in events if e.time < 4 * SLOT], mechanism, params)
    config = ClientStageConfig(mechanism, DOMAIN, params, SlotClock(SLOT), POLICY, SEED)
    write_clients_checkpoint(first["carry"], config, str(tmp_path), None, dict(first["estimates"]))
    carried = read_clients_checkpoint(str(tmp_path), config)
    assert any(c.recent for c in carried.values())
    second = _run_carrying([e for e in events if e.time >= 4 * SLOT], mechanism, params, carried)
    every = lambda results: {r["slot"]: (r["kind"], r["estimate"]) for r in results["releases"]}  # noqa: E731
    assert every(first) | every(second) == every(whole)
    assert {r["statistic"] for r in whole["releases"]} == {"distribution"}
    usage = lambda results: {u["user"]: u["max_window_usage_ratio"] for u in results["usage"]}  # noqa: E731
    assert {user: max(usage(first).get(user, 0), usage(second).get(user, 0))
            for user in usage(first) | usage(second)} == usage(whole)
    forgetful = CarriedClients({key: c._replace(recent=()) for key, c in carried.items()}, carried.estimates)
    assert every(_run_carrying([e for e in events if e.time >= 4 * SLOT], mechanism, params, forgetful)) \
        != every(second)  # power: the carried reports count


@pytest.mark.parametrize("mechanism, params", [
    ("ipp", {"epsilon": EPSILON, "window": WINDOW}),
    SAMPLED_CASES[0],  # pp-s, segment 3
])
def test_streaming_crowd_distribution_equals_the_bounded_one(mechanism, params):
    """TestStream, events out of order within the allowed lateness: the streaming stage's crowd releases (the
    users' timers kept armed while a stored report still reaches a slot) are the bounded stage's, slot for slot,
    and so the core's (``expected_crowd``)."""
    events = make_numeric_events()
    lateness = 20.0
    streaming = run(streaming_pipeline(), lambda p: streaming_source(p, events, lateness, seed=5), mechanism,
                    {**params, **CROWD}, lateness)
    every = {r["slot"]: (r["kind"], r["estimate"]) for r in streaming["releases"]}
    want = expected_crowd(events, mechanism, params, CROWD["crowd_window"], CROWD["crowd_bins"])
    assert [every[slot] for slot in sorted(every)] == want and len(every) == len(streaming["releases"])
    assert {r["statistic"] for r in streaming["releases"]} == {"distribution"} and streaming["violations"] == []
