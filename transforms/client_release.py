"""Recorded client reports released slot by slot: the Beam-free core of ``pipelines.client_replay``.

Methods whose schedule is public (``asks_on_schedule``: LBU, LSP, PLBU, LPU with public groups) ask
the same users whatever the data, so the reports their devices sent can be
replayed: for every slot from the first to the last report of a stream, the
method's rounds are answered with the slot's reports that match each round
(method and budget), and every report ends up counted, or a dead letter
with its reason (malformed, for no round of its slot, or rejected by the
round's checks: ``transforms.mechanisms.ldp.client``).  The schedule is the
devices' own, on absolute slots (:func:`on_absolute_slots`), whatever the
first slot with a report.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from transforms.mechanisms import FixedRequirements, PrivacyLedger, SlotBatch, make_mechanism
from transforms.mechanisms.public_schedule.registry import schedule_if_any
from transforms.mechanisms.ldp.client import (REPORT_FIELDS, ReportRejected, RoundRequest, answer_round,
                                              assign_public_groups, compact_report, report_record)
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.records import ReleaseRecord, dead_letter
from transforms.slotting import SlotClock


@dataclass(frozen=True)
class ClientReleaseConfig:
    """The method and its parameters, the registered devices and their fixed requirements (public); ``clock``
    dates the release records (devices report slot indices only)."""

    mechanism: str
    params: dict
    user_ids: tuple[str, ...]
    windows: tuple[int, ...]
    epsilon_units: tuple[int, ...]
    insecure_seed: int | None = None  # reproducible, NOT private randomness: tests only
    clock: SlotClock = SlotClock(1.0)

    def __post_init__(self):
        mechanism = self.build()
        if not getattr(mechanism, "asks_on_schedule", False):
            raise ValueError(f"{self.mechanism} decides whom to ask from the reports: recorded reports cannot be "
                             "replayed (run it live: pipelines.collector)")
        if len(set(self.user_ids)) != len(self.user_ids) or not self.user_ids:
            raise ValueError("the registered devices must be listed, each once")

    def build(self):
        return make_mechanism(self.mechanism, **self.params)


def on_absolute_slots(name: str, params: dict, user_ids, first_slot: int):
    """Method ``name`` for a run whose first slot is absolute slot ``first_slot``, asking on the devices' public
    schedule, which counts absolute slots (``wevent_client``): LPU's public group ``g`` reports at the slots ``t``
    with ``(t - 1) mod w == g`` and LSP samples at ``t ≡ 1 + sampling_offset (mod w)``.  A method counts its own
    slots from 1, so both phases shift by ``first_slot - 1`` (nothing changes for a run that starts at slot 1).
    Returns the mechanism with the users' public groups assigned, and the parameters it was built with."""
    mechanism = make_mechanism(name, **params)
    window, offset = getattr(mechanism.params, "window", None), getattr(mechanism.params, "sampling_offset", None)
    if window and offset is not None and (first_slot - 1) % window:
        params = {**params, "sampling_offset": (offset - (first_slot - 1)) % window}
        mechanism = make_mechanism(name, **params)
    assign_public_groups(mechanism, user_ids, first_slot)
    return mechanism, params


_STREAM, _SLOT, _METHOD, _EPSILON = (REPORT_FIELDS.index(name) for name in ("stream", "slot", "method", "epsilon"))


def parse_report(line: str) -> tuple[str, tuple]:
    """``(stream, compact report)`` from one JSON line; ReportRejected("malformed ...") otherwise."""
    try:
        report = compact_report(json.loads(line))
    except json.JSONDecodeError:
        raise ReportRejected("malformed report: not JSON") from None
    if not isinstance(report[_STREAM], str) or type(report[_SLOT]) is not int:
        raise ReportRejected("malformed report: a record with a string stream and an integer slot is needed")
    return report[_STREAM], report


def release_stream(config: ClientReleaseConfig, stream: str, reports: Iterable[tuple]) -> Iterator[tuple[str, dict]]:
    """``("release", record)`` for every slot of ``stream`` (``schemas/release.avsc``), ``("dead", record)`` per
    rejected report (``schemas/dead_letter.avsc``), and last ``("ledger", {...})``: the reports used and the privacy
    ledger's verdict on every release's charges."""
    by_slot: dict[int, list[tuple]] = defaultdict(list)
    for report in reports:
        by_slot[report[_SLOT]].append(report)
    if not by_slot:
        return
    first = min(by_slot)
    mechanism, _ = on_absolute_slots(config.mechanism, config.params, config.user_ids, first)
    rng = secure_randomness() if config.insecure_seed is None else insecure_seeded_randomness(config.insecure_seed)
    ids = list(config.user_ids)
    index_of = {user: i for i, user in enumerate(ids)}
    registrations = SlotBatch.of(range(len(ids)), mechanism.params.domain.no_values(len(ids)),
                                 FixedRequirements(np.array(config.windows, np.int64),
                                                   np.array(config.epsilon_units, np.int64)))
    ledger = PrivacyLedger(max(config.windows), schedule=schedule_if_any(mechanism.name, mechanism.params))
    used = 0
    for slot in range(first, max(by_slot) + 1):
        rounds = mechanism.start_slot(registrations if slot == first else SlotBatch.empty(), rng, clients=True)
        pending = by_slot.pop(slot, [])
        number = 0
        while rounds.request is not None:
            round_request = RoundRequest(stream, slot, number, mechanism.name, rounds.request)
            key = (round_request.method, round_request.epsilon)
            mine, rest = [], []
            for report in pending:
                (mine if (report[_METHOD], report[_EPSILON]) == key else rest).append(report)
            pending = rest
            for record, reason in answer_round(rounds, round_request, mine, index_of):
                yield "dead", _dead(stream, record, reason)
            number += 1
        for report in pending:
            yield "dead", _dead(stream, report_record(report),
                                "no request of this slot matches the report's method and epsilon")
        release = rounds.release
        ledger.record(release.slot, release.charges)
        used += int(np.count_nonzero(release.charges.units))
        yield "release", ReleaseRecord.of(release, stream, slot, config.clock, mechanism.name)
    ledger.close()
    yield "ledger", {"stream": stream, "reports_used": used, "violations": ledger.violation_count,
                     "max_window_usage_ratio": ledger.max_usage_ratio}


def _dead(stream: str, record: dict, reason: str):
    user = record.get("user")
    return dead_letter(reason, json.dumps(record, sort_keys=True), "client_release", stream,
                       user if isinstance(user, str) else None)
