"""Shared by the numeric client stage's tests: numeric events, the core's per-user reference (``Client.step``
run user by user; the other methods' reports), and a stage run read back as releases, kinds and totals.
"""

from __future__ import annotations

import random

import apache_beam as beam
import numpy as np

from tests.transforms.beam_helpers import (
    SLOT,
    batch_pipeline,
)
from transforms.declarations import RequirementPolicy
from transforms.mechanisms import FixedRequirement, make_mechanism
from transforms.mechanisms.numeric.baselines import absorption_step, topl_step
from transforms.mechanisms.numeric.perturbation import (
    Client,
    ClientState,
    build_client,
)
from transforms.mechanisms.numeric.sampling import samples_per_window
from transforms.mechanisms.numeric.streams import AbsorptionStream, SampledStream
from transforms.numeric_clients import (
    PrivateNumericClients,
    report_randomness,
)
from transforms.numeric_events import NumericDomain
from transforms.numeric_records import ClientRow
from transforms.records import Event



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
    RESULTS.clear()
    with pipeline as p:
        events = source(p)
        out = events | PrivateNumericClients(mechanism, SLOT, DOMAIN, mechanism_params=params, policy=POLICY,
                                             insecure_seed=SEED, allowed_lateness=lateness)
        for name in ("releases", "dead_letters", "usage", "violations", "accounting"):
            RESULTS[name] = []
            out[name] | f"Keep{name}" >> beam.Map(keep_result, name)
    return dict(RESULTS)


RESULTS: dict = {}
"""Each run's outputs by name, filled by :func:`keep_result`."""


def keep_result(value, name: str) -> None:
    """A top-level function (pickled by reference): both runners run in this process."""
    RESULTS[name].append(value)


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


def run_carrying(events, mechanism, params, resume=None) -> dict:
    """A bounded stage run that carries its clients' state (resuming from ``resume``): its outputs by name."""
    RESULTS.clear()
    with batch_pipeline() as p:
        out = p | beam.Create(events) | PrivateNumericClients(
            mechanism, SLOT, DOMAIN, mechanism_params=params, policy=POLICY, insecure_seed=SEED, bounded=True,
            resume=resume, carry=True)
        for name in ("releases", "dead_letters", "usage", "violations", "accounting", "carry", "estimates"):
            RESULTS[name] = []
            out[name] | f"Keep{name}" >> beam.Map(keep_result, name)
    return dict(RESULTS)


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


CROWD = {"crowd_window": 3, "crowd_bins": 4}
"""The crowd distribution's parameters the stage tests use (window, bins)."""
