"""Client devices: a slot's requests as records, and the reports that come back checked and counted.

With client devices (trust model ``local_client``) the collector never sees
a value.  Each round of a slot (:class:`~transforms.mechanisms.ldp.stream.SlotRounds`)
becomes a :class:`RoundRequest`: one request record per asked user
(``schemas/request.avsc``), answered by the device module
``device/wevent_client.py`` with a report record (``schemas/report.avsc``).  What
comes back before the round's deadline is checked against the request, one
report per asked user, and the accepted reports' payloads are summed into the
counts ``C'`` the estimator reads; users who do not answer count as not
reporting, and the estimate is normalised by those who did.

A report is rejected, with its reason, when it is malformed, for another
stream, slot, request or method, from a user who was not asked in this round
(for LPU: not their group's slot), at another budget, oracle or domain size
than asked, with a realised epsilon other than the oracle's, with a payload
outside the domain, or when it is a second report of the user in the round.
Rejected reports are never counted and never charged; the caller routes them
to the dead letters.

Methods whose schedule is public (LBU, LSP, PLBU, and LPU with
``grouping="public"``) ask the same users whatever the data, so their devices
may report without reading the requests; the requests are still published.
A public LPU group is :func:`public_group` of the user's id, which the device
module computes the same way (``wevent_client.public_group``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from decimal import Decimal
from fractions import Fraction

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON, units_to_decimal_string
from transforms.mechanisms.charges import DISSIMILARITY
from transforms.mechanisms.ldp.stream import Reports, SlotRounds

SUB_MECHANISM = {DISSIMILARITY: "m1"}
MEAN_ORACLES = ("sr", "hm")
"""The Hybrid Mechanism's oracle names (``transforms.mechanisms.ldp.mean``): SR alone, or SR and PM."""
"""How a request names the part a report pays for: ``m1`` for the dissimilarity M_{t,1}, ``m2`` otherwise."""


def public_group(user_id: str, window: int) -> int:
    """The public LPU group of ``user_id`` among ``window`` groups: the first 8 bytes of a SHA-256 of the id, mod w.

    Data-independent and computable on the device; the same function as ``wevent_client.public_group``.
    """
    digest = hashlib.sha256(b"wevent-lpu-group\x00" + user_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % window


def assign_public_groups(mechanism, user_ids: Sequence[str], first_slot: int = 1) -> None:
    """Give the users their public groups when ``mechanism`` takes them (LPU with ``grouping="public"``).

    A device in group ``g`` reports at the absolute slots ``t`` with ``(t - 1) mod w == g``; the method asks group
    ``(k - 1) mod w`` at its own ``k``-th slot, so a run whose first slot is absolute slot ``first_slot`` gives each
    user the group shifted by ``first_slot - 1``: its ``k``-th slot then asks whom absolute slot
    ``first_slot + k - 1`` asks."""
    if hasattr(mechanism, "assign_groups") and mechanism.asks_on_schedule:
        window = mechanism.params.window
        mechanism.assign_groups(np.arange(len(user_ids)),
                                [(public_group(user, window) - (first_slot - 1)) % window for user in user_ids])


class ReportRejected(ValueError):
    """A report that cannot be counted; ``str(error)`` is the reason the dead letter carries."""


DUPLICATE_REPORT = "a second report of the user in this round"
"""The reason :func:`answer_round` gives a user's second report (callers count these as duplicates)."""


REPORT_FIELDS = ("request_id", "stream", "user", "slot", "method", "oracle", "epsilon", "realised_epsilon",
                 "domain_size", "report")
"""A report's fields (``schemas/report.avsc``), in the order of its compact form."""


def compact_report(report) -> tuple:
    """A report record as the plain tuple of :data:`REPORT_FIELDS` (what a pipeline shuffles and checks)."""
    if not isinstance(report, dict):
        raise ReportRejected("malformed report: not a record")
    try:
        return (report.get("request_id"),) + tuple(report[name] for name in REPORT_FIELDS[1:])
    except KeyError as missing:
        raise ReportRejected(f"malformed report: missing field {missing}") from None


def report_record(report: tuple) -> dict:
    """The record of a compact report (for a dead letter)."""
    return dict(zip(REPORT_FIELDS, report))


@dataclass(frozen=True)
class RoundRequest:
    """One round of one slot of one stream: who is asked, through which oracle, under which method label."""

    stream: str
    slot: int          # the absolute slot index the reports are for
    round: int         # 0 for the slot's first request, 1 for the second, ...
    mechanism: str
    request: Reports

    @cached_property
    def request_id(self) -> str:
        return f"{self.stream}/{self.slot}/{self.round}"

    @cached_property
    def method(self) -> str:
        return f"{self.mechanism}/{SUB_MECHANISM.get(self.request.part, 'm2')}"

    @cached_property
    def epsilon(self) -> str:
        """The budget as the exact decimal text a request carries (and a report echoes)."""
        return units_to_decimal_string(self.request.oracle.epsilon_units)

    @cached_property
    def _realised(self) -> str:
        return units_to_decimal_string(self.request.oracle.realised_units)

    @cached_property
    def _asked(self) -> frozenset[int]:
        return frozenset(self.request.users.tolist())

    def records(self, user_ids: Sequence[str]) -> list[dict]:
        """The request records (``schemas/request.avsc``), one per asked user; ``user_ids[i]`` is user index i's id."""
        oracle = self.request.oracle
        common = {"request_id": self.request_id, "stream": self.stream, "slot": self.slot, "method": self.method,
                  "epsilon": self.epsilon, "domain_size": oracle.d, "oracle": oracle.kind}
        if oracle.kind in MEAN_ORACLES:  # a mean: the device maps its value with the public domain and grid
            common.update(low=float(oracle.low), high=float(oracle.top), grid_bits=oracle.mechanism.grid_bits)
        return [{**common, "user": user_ids[int(u)]} for u in self.request.users]

    @cached_property
    def _expected_fields(self) -> tuple:
        """What a report echoes at ``REPORT_FIELDS[3:9]`` (slot, method, oracle, epsilon, realised, d) as sent."""
        oracle = self.request.oracle
        return self.slot, self.method, oracle.kind, self.epsilon, self._realised, oracle.d

    def check(self, report: tuple, index_of: Mapping[str, int]) -> tuple[int, list[int]]:
        """The user index and the value or bits of an acceptable report (:func:`compact_report` form);
        ReportRejected otherwise."""
        if report[3:9] == self._expected_fields and report[1] == self.stream \
                and report[0] in (None, self.request_id) and isinstance(report[2], str):  # the usual report
            index = index_of.get(report[2])
            if index is not None and index in self._asked:
                return index, _payload(report[9], self.request.oracle)
        return self._check_field_by_field(report, index_of)

    def _check_field_by_field(self, report: tuple, index_of: Mapping[str, int]) -> tuple[int, list[int]]:
        request_id, stream, user, slot, method, oracle_kind, epsilon, realised, d, payload = report
        oracle = self.request.oracle
        if stream != self.stream:
            raise ReportRejected(f"report for stream {stream!r}, not {self.stream!r}")
        if request_id not in (None, self.request_id):
            raise ReportRejected(f"unknown request {request_id!r}")
        if slot != self.slot:
            raise ReportRejected(f"report for slot {slot!r}, not {self.slot}")
        if method != self.method:
            raise ReportRejected(f"report for method {method!r}, not {self.method!r}")
        index = index_of.get(user) if isinstance(user, str) else None
        if index is None:
            raise ReportRejected(f"unknown user {user!r}")
        if index not in self._asked:
            raise ReportRejected(f"user {user!r} was not asked in this round (not their turn or group)")
        if epsilon != self.epsilon and (not isinstance(epsilon, str) or exact_units(epsilon) != oracle.epsilon_units):
            raise ReportRejected(f"report at epsilon {epsilon!r}, not {self.epsilon}")
        if oracle_kind != oracle.kind or d != oracle.d:
            raise ReportRejected(f"report through {oracle_kind!r} over {d!r} values, not {oracle.kind} over {oracle.d}")
        if realised != self._realised and (not isinstance(realised, str) or exact_units(realised) != oracle.realised_units):
            raise ReportRejected(f"realised epsilon {realised!r} is not the oracle's {self._realised}")
        return index, _payload(payload, oracle)


def exact_units(text: str) -> int | None:
    """The budget units an exact decimal string stands for (None unless it is a whole number of units)."""
    try:
        value = Fraction(Decimal(text)) * UNITS_PER_EPSILON
    except (ArithmeticError, ValueError):
        return None
    return int(value) if value.denominator == 1 else None


def _payload(payload, oracle) -> list[int]:
    if oracle.kind == "grr" and type(payload) is list and len(payload) == 1 and type(payload[0]) is int \
            and 0 <= payload[0] < oracle.d:  # the usual GRR report
        return payload
    if not isinstance(payload, (list, tuple)) or not all(type(v) is int for v in payload):
        raise ReportRejected("malformed report: the payload must be a list of integers")
    kind, d = oracle.kind, oracle.d
    if kind in MEAN_ORACLES:
        return _mean_payload(payload, oracle.mechanism)
    if kind == "grr":
        if len(payload) != 1 or not 0 <= payload[0] < d:
            raise ReportRejected(f"report outside the domain: GRR sends one value in [0, {d})")
    elif len(payload) != d or not set(payload) <= {0, 1}:
        raise ReportRejected(f"report outside the domain: OUE sends {d} bits")
    return payload


def _mean_payload(payload, hybrid) -> list[int]:
    """``[0, ±1]`` (SR) or, for HM, ``[1, 2j + 1 - m]`` with the PM cell ``j`` in ``[-B, m + B)``."""
    if len(payload) != 2 or payload[0] not in (0, 1):
        raise ReportRejected("report outside the domain: a mean report is [branch, value] with branch 0 or 1")
    branch, value = payload
    if branch == 0 and value not in (-1, 1):
        raise ReportRejected("report outside the domain: stochastic rounding sends -1 or 1")
    if branch == 1:
        pm = hybrid.piecewise
        if pm is None:
            raise ReportRejected("report outside the domain: at this epsilon the Hybrid Mechanism is SR alone")
        if value % 2 == pm.steps % 2 or not -pm.steps - 2 * pm.half_band < value < pm.steps + 2 * pm.half_band:
            raise ReportRejected("report outside the domain: no Piecewise Mechanism cell")
    return payload


def answer_round(slot: SlotRounds, round_request: RoundRequest, reports: Sequence[tuple],
                 index_of: Mapping[str, int]) -> list[tuple[dict, str]]:
    """Check ``reports`` (compact) against the round, answer it with the accepted ones; return the rejected ones
    (as records) and why."""
    if slot.request is not round_request.request:
        raise ValueError("the reports answer another round than the slot's current one")
    oracle = round_request.request.oracle
    rejected, seen, payloads = [], set(), []
    for report in reports:
        try:
            index, payload = round_request.check(report, index_of)
            if index in seen:
                raise ReportRejected(DUPLICATE_REPORT)
        except ReportRejected as reason:
            rejected.append((report_record(report), str(reason)))
            continue
        seen.add(index)
        payloads.append(payload)
    if oracle.kind in MEAN_ORACLES:  # the sums of SR's and PM's reports (HybridMechanism.sums)
        counts = np.array([sum(v for b, v in payloads if b == 0), sum(v for b, v in payloads if b == 1)], np.int64)
    elif oracle.kind == "grr":
        counts = np.bincount(np.array([p[0] for p in payloads], np.int64), minlength=oracle.d)
    else:
        counts = np.array(payloads, np.int64).reshape(-1, oracle.d).sum(axis=0)
    slot.answer(np.array(sorted(seen), np.int64), counts)
    return rejected


def client_slot(mechanism, batch, rng, stream: str, slot: int, user_ids: Sequence[str],
                index_of: Mapping[str, int], exchange) -> tuple:
    """One slot with client devices: each round's request records go out through ``exchange``.

    ``exchange(round_request, request_records)`` returns the report records that came back before the
    round's deadline (in any order, possibly with bad or missing ones).  Returns the release and the rejected
    reports with their reasons.
    """
    rounds = mechanism.start_slot(batch, rng, clients=True)
    rejected: list[tuple[dict, str]] = []
    number = 0
    while rounds.request is not None:
        round_request = RoundRequest(stream, slot, number, mechanism.name, rounds.request)
        compact = []
        for record in exchange(round_request, round_request.records(user_ids)):
            try:
                compact.append(compact_report(record))
            except ReportRejected as reason:
                rejected.append((record, str(reason)))
        rejected += answer_round(rounds, round_request, compact, index_of)
        number += 1
    return rounds.release, rejected
