"""The device's numeric clients (device.numeric_client.NumericClient) against the collector's core ``Client.step``."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from transforms.mechanisms import make_mechanism
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.numeric.perturbation import capp_delta as core_capp_delta
from transforms.mechanisms.numeric.perturbation import worst_window_units
from transforms.mechanisms.numeric.baselines import absorption_charges, absorption_step, topl_step
from device.numeric_client import NumericClient, capp_delta
from device.wevent_client import RequestRefused

LOW, HIGH, WINDOW, BUDGET = -3.0, 9.0, 4, "2"


def randbits_of(rng):
    """The core's 64-bit draw (two uint32 read as one little-endian uint64) as ``randbits(64)``."""
    def randbits(k: int) -> int:
        assert k == 64
        low, high = (int(v) for v in rng.uint32(2))
        return low | high << 32
    return randbits


def values(n: int, seed: int) -> list[float]:
    rnd = random.Random(seed)
    return [rnd.uniform(LOW - 1, HIGH + 1) for _ in range(n)]  # some outside: both clip


def paired(method: str, memory: int | None, **options):
    """The core's client of ``method`` (a fresh state and a seeded generator) and the device's, drawing the same
    64-bit integers."""
    params = {"epsilon": 2.0, "window": WINDOW, "low": LOW, "high": HIGH, "out_of_range": "clip", **options}
    if memory is not None:
        params["memory"] = memory
    client = make_mechanism(method, bins=1, **params).client
    device = NumericClient("u", method, WINDOW, BUDGET, LOW, HIGH, memory=memory,
                           randbits=randbits_of(insecure_seeded_randomness(5)), **options)
    return client, client.initial_state(1), insecure_seeded_randomness(5), device


@pytest.mark.parametrize("method, memory", [("sw-direct", None), ("ipp", None), ("app", 2), ("app", None),
                                            ("capp", None), ("capp", 3)])
def test_device_reports_equal_the_cores_client_step(method, memory):
    client, state, core_rng, device = paired(method, memory)
    assert device.report_units == client.sw.epsilon_units and device.wave.realised_units == client.report_units
    assert (device.wave.half_band, device.wave.keep, device.wave.other) == (client.sw.half_band, client.sw.keep,
                                                                            client.sw.other)
    assert device.bounds == (client.bounds if method == "capp"
                                                                            else (0.0, 1.0, 0.0, 1.0))
    xs = values(40, 1)
    for slot, v in enumerate(xs):
        index = \
            round((min(max(v, LOW), HIGH) - LOW) / (HIGH - LOW) * client.sw.steps)
        reports, state = client.step(state, np.array([index / client.sw.steps]), core_rng)
        report = device.report("s", slot, v)
        assert device.report_value(report["report"][0]) == reports[0]  # bit for bit
        assert device.accumulated == state.accumulated[0] and device.age == state.age[0]
        assert report["realised_epsilon"] and report["domain_size"] == 1
    assert device.deviations == state.deviations[0].tolist()


def test_capp_delta_is_the_collectors_formula():
    for epsilon in (0.01, 0.05, 0.1, 0.25, 0.4):
        assert capp_delta(epsilon) == core_capp_delta(epsilon)


def test_the_device_keeps_its_window_budget_and_refuses_replays():
    device = NumericClient("u", "capp", WINDOW, BUDGET, LOW, HIGH, randbits=random.Random(3).getrandbits)
    slots = [0, 1, 2, 3, 5, 6, 9, 10, 11, 12]
    for slot in slots:
        device.report("s", slot, 1.5)
    charges = np.zeros((1, 13), np.int64)
    charges[0, slots] = device.wave.realised_units
    first = np.arange(13) - WINDOW  # a report depends on at most `memory = w` earlier reported slots
    assert worst_window_units(charges, first[None, :], WINDOW)[0] <= to_units(2.0)
    assert device.report_units * (2 * WINDOW) <= to_units(2.0)
    with pytest.raises(RequestRefused) as refused:
        device.report("s", 12, 1.0)
    assert refused.value.code == "duplicate"
    with pytest.raises(RequestRefused) as refused:
        device.report("s", 4, 1.0)
    assert refused.value.code == "stale"
    with pytest.raises(RequestRefused) as refused:
        device.report("s", 13, float("nan"))
    assert refused.value.code == "invalid"


def test_a_restarted_device_continues_exactly():
    seeded = random.Random(8)
    whole = NumericClient("u", "app", WINDOW, BUDGET, LOW, HIGH, memory=3, randbits=seeded.getrandbits)
    xs = values(20, 2)
    expected = [whole.report("s", t, v)["report"] for t, v in enumerate(xs)]
    seeded = random.Random(8)
    first = NumericClient("u", "app", WINDOW, BUDGET, LOW, HIGH, memory=3, randbits=seeded.getrandbits)
    got = [first.report("s", t, v)["report"] for t, v in enumerate(xs[:11])]
    saved = first.state()
    json.loads(saved)  # plain JSON
    again = NumericClient.from_state(saved, randbits=seeded.getrandbits)
    got += [again.report("s", t, v)["report"] for t, v in enumerate(xs[11:], start=11)]
    assert got == expected
    assert again.accumulated == whole.accumulated and again.deviations == whole.deviations


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "pbd"}, "method must be one of"),
    ({"method": "pp-s"}, "needs its public segment length"),
    ({"method": "capp", "segment": 3}, "segment is the sampling methods'"),
    ({"method": "ba-sw", "memory": 2}, "memory does not apply"),
    ({"method": "ipp", "memory": 3}, "memory does not apply"),
    ({"low": 2.0, "high": 2.0}, "low < high"),
    ({"budget": "0.000000000005"}, "too small"),
])
def test_bad_device_configuration_is_refused(kwargs, message):
    args = {"user": "u", "method": "capp", "window": WINDOW, "budget": BUDGET, "low": LOW, "high": HIGH, **kwargs}
    with pytest.raises(ValueError, match=message):
        NumericClient(**args)


def grid(v: float, steps: int) -> float:
    return round((min(max(v, LOW), HIGH) - LOW) / (HIGH - LOW) * steps) / steps


@pytest.mark.parametrize("method, memory", [("pp-s", None), ("app-s", None), ("app-s", 2), ("capp-s", None),
                                            ("sampling", None)])
def test_device_sampling_reports_equal_the_cores_segment_means_through_client_step(method, memory):
    """Segments of 3 slots; the device misses some slots, some of them a segment's last (it then closes the
    segment later): every report is the core's ``Client.step`` of the segment's mean, bit for bit, at the
    segment's last slot, at the registered mechanism's strict per-sample budget."""
    client, state, core_rng, device = paired(method, memory, segment=3)
    assert device.report_units == client.sw.epsilon_units and device.memory == client.memory
    assert device.bounds == (client.bounds if method == "capp-s" else (0.0, 1.0, 0.0, 1.0))
    held = [t for t in range(30) if t % 7 not in (2, 5)]  # misses slots 2, 5, 9, 12, ...: some segment ends
    xs = dict(zip(held, values(len(held), 3)))
    sent, segments = [], {}
    for slot in held:
        if device.open[2] and slot // 3 != device.open[0]:
            with pytest.raises(RequestRefused) as refused:
                device.report("s", slot, xs[slot])
            assert refused.value.code == "order"
            sent.append(device.close("s", slot - 1))
        report = device.report("s", slot, xs[slot])
        if report is not None:
            sent.append(report)
        segments.setdefault(slot // 3, []).append(grid(xs[slot], client.sw.steps))
    assert device.close("s", 29) is None  # the last segment (27-29) was reported at 29
    assert [r["slot"] for r in sent] == [3 * k + 2 for k in sorted(segments)]
    for report, k in zip(sent, sorted(segments)):
        reports, state = client.step(state, np.array([sum(segments[k]) / len(segments[k])]), core_rng)
        assert device.report_value(report["report"][0]) == reports[0]  # bit for bit
        assert report["realised_epsilon"] == units_string(client.report_units)
    assert device.accumulated == state.accumulated[0] and device.deviations == state.deviations[0].tolist()


def units_string(units: int) -> str:
    from transforms.mechanisms.budget import units_to_decimal_string

    return units_to_decimal_string(units)


def test_device_ba_sw_equals_the_cores_absorption_step():
    mechanism = make_mechanism("ba-sw", bins=1, epsilon=2.0, window=WINDOW, low=LOW, high=HIGH, out_of_range="clip")
    params = mechanism.absorption
    state = params.initial_state(1)
    core_rng, device_rng = insecure_seeded_randomness(9), insecure_seeded_randomness(9)
    device = NumericClient("u", "ba-sw", WINDOW, BUDGET, LOW, HIGH, randbits=randbits_of(device_rng))
    assert device.report_units == params.share_units
    published = 0
    for slot, v in enumerate(values(60, 4)):
        released, sent, shares, state = absorption_step(params, state, np.array([grid(v, 1 << 16)]), core_rng)
        report = device.report("s", slot, v)
        assert device.absorption[0] == released[0]  # what the user releases, bit for bit
        assert len(report["report"]) == int(sent[0]) + int(shares[0] > 0)
        assert report["realised_epsilon"] == units_string(int(absorption_charges(params, sent, shares)[0]))
        published += int(shares[0] > 0)
    assert 1 < published < 60  # power: both branches ran


def test_device_topl_equals_the_cores_topl_step():
    mechanism = make_mechanism("topl", bins=1, epsilon=2.0, window=WINDOW, low=LOW, high=HIGH, out_of_range="clip")
    pm = mechanism.topl.piecewise
    core_rng, device_rng = insecure_seeded_randomness(2), insecure_seeded_randomness(2)
    device = NumericClient("u", "topl", WINDOW, BUDGET, LOW, HIGH, randbits=randbits_of(device_rng))
    assert (device.wave.half_band, device.wave.keep, device.wave.other) == (pm.half_band, pm.keep, pm.other)
    assert device.report_units == pm.epsilon_units and device.wave.realised_units == pm.realised_units
    for slot, v in enumerate(values(30, 5)):
        core = topl_step(mechanism.topl, np.array([grid(v, pm.steps)]), core_rng)[0]
        cell = device.report("s", slot, v)["report"][0]
        assert (1 + (2 * device.wave.cell_value(cell) - 1) / float(pm.gain)) / 2 == core


@pytest.mark.parametrize("method, segment", [("capp-s", 3), ("ba-sw", None)])
def test_a_restarted_sampling_or_ba_sw_device_continues_exactly(method, segment):
    """Saved in the middle of a segment (CAPP-S) or of an absorption (BA-SW): the restarted device's reports are
    those of one that never stopped."""
    xs = values(20, 6)

    def run(split: int | None) -> list:
        seeded = random.Random(8)
        device = NumericClient("u", method, WINDOW, BUDGET, LOW, HIGH, segment=segment, randbits=seeded.getrandbits)
        out = []
        for t, v in enumerate(xs):
            if t == split:
                device = NumericClient.from_state(device.state(), randbits=seeded.getrandbits)
            report = device.report("s", t, v)
            out.append(None if report is None else report["report"])
        return out

    whole = run(None)
    assert run(10) == whole and run(4) == whole
    assert any(r is None for r in whole) == (segment is not None)


@pytest.mark.parametrize("value", [7318.25, -7318.0, float("inf"), "7318"])
def test_a_numeric_refusal_never_carries_the_users_value(value):
    """Outside the interval without clipping, or not a finite number: refused as ``invalid`` naming the interval,
    never the value (before: ``value must lie in [0.0, 10.0], got 7318.25``)."""
    from device.wevent_client import SquareWave

    device = NumericClient("u1", "capp", 4, "1", 0.0, 10.0)
    with pytest.raises(RequestRefused) as refused:
        device.report("s", 0, value, clip=False)
    assert refused.value.code == "invalid" and "7318" not in str(refused.value) and "inf" not in str(refused.value)
    with pytest.raises(ValueError) as error:
        SquareWave(10**12).grid_index(value, 0.0, 10.0)
    assert "7318" not in str(error.value) and "inf" not in str(error.value)
