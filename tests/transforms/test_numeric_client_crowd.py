"""The numeric client stage's crowd distribution (spec §3.8.3): batch and streaming against the core on the
same reports, and a resumed run releasing what one run releases.
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
from transforms.mechanisms import FixedRequirements, make_mechanism
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.numeric.server import crowd_distribution
from transforms.numeric_clients import (
    CarriedClients,
    ClientStageConfig,
    ReportDraws,
    read_clients_checkpoint,
    write_clients_checkpoint,
)
from transforms.records import Event
from transforms.slotting import SlotClock
from tests.transforms.numeric_stage_helpers import (CROWD, DOMAIN, EPSILON, POLICY, SAMPLED_CASES, SEED, WINDOW,
                                                    run_carrying, make_numeric_events, reports_of_users, run,
                                                    stream_values)


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
    whole = run_carrying(events, mechanism, params)
    first = run_carrying([e for e in events if e.time < 4 * SLOT], mechanism, params)
    config = ClientStageConfig(mechanism, DOMAIN, params, SlotClock(SLOT), POLICY, SEED)
    write_clients_checkpoint(first["carry"], config, str(tmp_path), None, dict(first["estimates"]))
    carried = read_clients_checkpoint(str(tmp_path), config)
    assert any(c.recent for c in carried.values())
    second = run_carrying([e for e in events if e.time >= 4 * SLOT], mechanism, params, carried)
    every = lambda results: {r["slot"]: (r["kind"], r["estimate"]) for r in results["releases"]}  # noqa: E731
    assert every(first) | every(second) == every(whole)
    assert {r["statistic"] for r in whole["releases"]} == {"distribution"}
    usage = lambda results: {u["user"]: u["max_window_usage_ratio"] for u in results["usage"]}  # noqa: E731
    assert {user: max(usage(first).get(user, 0), usage(second).get(user, 0))
            for user in usage(first) | usage(second)} == usage(whole)
    forgetful = CarriedClients({key: c._replace(recent=()) for key, c in carried.items()}, carried.estimates)
    assert every(run_carrying([e for e in events if e.time >= 4 * SLOT], mechanism, params, forgetful)) \
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
