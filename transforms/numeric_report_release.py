"""Recorded numeric device reports released slot by slot: the Beam-free core of ``pipelines.client_replay --domain``.

The devices (``wevent_client.NumericClient``) run SW-direct / IPP / APP / CAPP themselves and send, for
every slot they hold a value, one report (``schemas/report.avsc``, oracle ``"sw"``, payload ``[j]``: the
square wave's output cell).  Their schedule is public (every holder reports every slot at the method's
per-report budget ``ε/(w + h)``), so the collector checks each report against it without asking: the
registered user, the method, ``epsilon`` equal to the per-report budget, ``realised_epsilon`` equal to that
square wave's, ``domain_size`` 1, a cell of the square wave, at most one report per user and slot (a second
one is a duplicate).  Anything else is a dead letter with its reason; nothing is charged or counted for it.

Each slot with accepted reports releases the paper's average of the reports at face value (``estimate``, in
the domain's units, as the central and per-user paths do) and, for SW-direct, the de-biased mean
(``debiased``, ``server.debiased``: unbiased, post-processing).  The sum is exact (every report value is a
dyadic rational, summed as an integer times ``2**64``), so the order the reports arrive in cannot change a
bit.  A slot between the first and last report of a stream without any accepted report repeats the last
estimate (``kind`` ``skipped``, as the central path).  The users' declared ``(w_i, E_i)`` must accept the
mechanism's ``(w, ε)`` (checked before the job starts); an exact per-user window check over the accepted
reports' realised charges is the ledger's verdict.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction

from transforms.mechanisms import make_mechanism
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.domain import Interval
from transforms.mechanisms.ldp.client import (
    DUPLICATE_REPORT,
    REPORT_FIELDS,
    ReportRejected,
    _units,
    report_record,
)
from transforms.mechanisms.numeric import server
from transforms.numeric_clients import CLIENT_METHODS, _scaled
from transforms.numeric_events import NumericDomain

NUMERIC_ORACLE = "sw"
"""The oracle a numeric device report names: the Square Wave."""

_STREAM, _USER, _SLOT = (REPORT_FIELDS.index(name) for name in ("stream", "user", "slot"))
_SCALE = 1 << 64


@dataclass(frozen=True)
class NumericReportConfig:
    """The method, its parameters (grid units, from ``NumericDomain.mechanism_params``), the interval, the
    registered devices and their fixed requirements (public)."""

    mechanism: str
    params: dict
    domain: NumericDomain
    user_ids: tuple[str, ...]
    windows: tuple[int, ...]
    epsilon_units: tuple[int, ...]

    def __post_init__(self):
        if self.mechanism not in CLIENT_METHODS:
            raise ValueError(f"device reports of {self.mechanism} cannot be replayed: the numeric devices run "
                             f"{', '.join(CLIENT_METHODS)}")
        if len(set(self.user_ids)) != len(self.user_ids) or not self.user_ids:
            raise ValueError("the registered devices must be listed, each once")
        params = self.build().params
        for user, window, units in zip(self.user_ids, self.windows, self.epsilon_units):
            if window > params.window or units < params.epsilon_units:
                raise ValueError(f"user {user!r} declares (w={window}, E={units_to_decimal_string(units)}), which "
                                 f"{self.mechanism} at (w={params.window}, ε={units_to_decimal_string(params.epsilon_units)}) "
                                 "does not honour")

    def build(self):
        return make_mechanism(self.mechanism, **self.params)


class _Schedule:
    """What every report of the configuration must say, and the checks (module doc)."""

    def __init__(self, config: NumericReportConfig):
        client = config.build().client
        self.client, self.wave = client, client.sw
        self.method = config.mechanism
        self.epsilon = units_to_decimal_string(self.wave.epsilon_units)
        self.realised = units_to_decimal_string(self.wave.realised_units)
        self.index_of = {user: i for i, user in enumerate(config.user_ids)}

    def check(self, report: tuple) -> tuple[int, int]:
        """``(user index, report value·2**64)`` of an acceptable report; ReportRejected with the reason otherwise."""
        _, _, user, slot, method, oracle, epsilon, realised, d, payload = report
        index = self.index_of.get(user) if isinstance(user, str) else None
        if index is None:
            raise ReportRejected(f"unknown user {user!r}")
        if slot < 0:
            raise ReportRejected(f"report for slot {slot}: slots start at 0")
        if method != self.method:
            raise ReportRejected(f"report for method {method!r}, not {self.method!r}")
        if oracle != NUMERIC_ORACLE or d != 1:
            raise ReportRejected(f"report through {oracle!r} over {d!r} values, not sw over 1")
        if epsilon != self.epsilon and (not isinstance(epsilon, str) or _units(epsilon) != self.wave.epsilon_units):
            raise ReportRejected(f"report at epsilon {epsilon!r}, not the schedule's {self.epsilon}")
        if realised != self.realised and (not isinstance(realised, str)
                                          or _units(realised) != self.wave.realised_units):
            raise ReportRejected(f"realised epsilon {realised!r} is not the square wave's {self.realised}")
        if type(payload) is not list or len(payload) != 1 or type(payload[0]) is not int:
            raise ReportRejected("malformed report: the payload must be [cell], one integer")
        cell, half_band = payload[0], self.wave.half_band
        if not -half_band <= cell < self.wave.steps + half_band:
            raise ReportRejected(f"report outside the domain: the square wave's cells are "
                                 f"[{-half_band}, {self.wave.steps + half_band})")
        low, high, _, _ = self.client.bounds
        value = Fraction(2 * cell + 1, 2 * self.wave.steps)
        if (low, high) != (0.0, 1.0):  # CAPP's output bounds (grid points: still dyadic)
            value = Fraction(low) + (Fraction(high) - Fraction(low)) * value
        return index, _scaled(float(value))


def release_numeric_stream(config: NumericReportConfig, stream: str, reports: Iterable[tuple]
                           ) -> Iterator[tuple[str, dict]]:
    """``("release", record)`` per slot of ``stream``, ``("dead", {...})`` per rejected report (``"duplicate"`` for a
    second report of a user in a slot), and last ``("ledger", {...})``: the exact per-user window check."""
    schedule = _Schedule(config)
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    seen: set[tuple[int, int]] = set()
    slots_of: dict[int, list[int]] = defaultdict(list)
    for report in reports:
        try:
            index, scaled = schedule.check(report)
        except ReportRejected as reason:
            yield "dead", {"reason": str(reason), "record": report_record(report)}
            continue
        key = (index, report[_SLOT])
        if key in seen:
            yield "duplicate", {"reason": DUPLICATE_REPORT, "record": report_record(report)}
            continue
        seen.add(key)
        slots_of[index].append(report[_SLOT])
        held = sums[report[_SLOT]]
        held[0] += 1
        held[1] += scaled
    if not sums:
        return
    domain, wave = config.domain, schedule.wave
    interval = Interval(domain.low, domain.high)
    epsilon = units_to_decimal_string(wave.epsilon_units)
    last: dict = {}  # the first slot always has reports
    for slot in range(min(sums), max(sums) + 1):
        n, total = sums.get(slot, (0, 0))
        record = {"stream": stream, "slot": slot, "statistic": "mean", "trust": "local_client",
                  "mechanism": config.mechanism, "reporters": n}
        if n:
            mean = total / (n * _SCALE)  # int / int: correctly rounded
            last = {"estimate": [domain.low + domain.width * mean],
                    "debiased": float(server.debiased(mean, wave, interval)) if config.mechanism == "sw-direct"
                    else None}
            yield "release", {**record, "kind": "fresh", "epsilon": epsilon, **last}
        else:
            yield "release", {**record, "kind": "skipped", "epsilon": "0", **last}
    violations, worst = _window_check(config, slots_of, wave.realised_units)
    yield "ledger", {"stream": stream, "reports_used": len(seen), "violations": violations,
                     "max_window_usage_ratio": worst}


def _window_check(config: NumericReportConfig, slots_of: dict[int, list[int]], units: int) -> tuple[int, float]:
    """Users whose accepted reports exceed their ``E_i`` in some window of ``w_i`` slots, and the largest usage."""
    violations, worst = 0, 0.0
    for index, slots in slots_of.items():
        window, budget = config.windows[index], config.epsilon_units[index]
        slots.sort()
        most, start = 0, 0
        for end, slot in enumerate(slots):
            while slots[start] <= slot - window:
                start += 1
            most = max(most, end - start + 1)
        violations += most * units > budget
        worst = max(worst, most * units / budget)
    return violations, worst
