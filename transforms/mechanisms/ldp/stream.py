"""The LDP-IDS stream methods on the one mechanism protocol: who reports, at which budget, and what it costs.

A local-DP method never sees a raw value: at each slot it decides which
users report through which frequency oracle (a :class:`Reports`), receives
their randomized reports and estimates the frequencies from them alone
(spec ``ldp_ids.md`` §3-§5).  Here the users are *simulated* (trust model
``local_simulated``): :meth:`LocalMechanism.collect` runs each chosen user's
randomizer on the value they hold (``simulation="users"``), or draws the
counts their reports would sum to exactly (``"aggregate"``, spec §3.5), and
only those counts reach the estimator.

A *holder* is a registered user with a value at the slot (their event of the
slot, or their last one with ``carry_forward``); only holders are ever asked
to report, so a population method never asks a user who is not there, and
an estimate is normalised by the users who did report.

**Charges.**  Every report costs its sender the oracle's realised epsilon
``ln(P/Q)`` (rounded up, never above the nominal budget): the release's
charges group users by the reports they sent, under the part the report
paid for (``dissimilarity`` for M_{t,1}, ``publication`` otherwise), and its
evidence names, for each report, the oracle's exact ``P/Q`` and who sent
one, from the same arrays the estimate was computed from.  The ledgers
derive each user's least charge from that evidence and check every window
against what the user declared.

Releases carry frequency estimates (``Estimate.FREQUENCIES``, float64; the
counts view is the estimate times the registered users, rounded).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import ClassVar, Generator, NamedTuple

import numpy as np

from transforms.mechanisms.base import HomogeneousParams, Mechanism, Release, ReleaseKind
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION, GroupCharges
from transforms.mechanisms.domain import Estimate, TrustModel
from transforms.mechanisms.evidence import CERTAIN, Evidence, LocalReport
from transforms.mechanisms.homogeneous import HomogeneousMechanism
from transforms.mechanisms.ldp.oracles import (GRR_VARIANCE_MODES, MAX_LDP_EPSILON_UNITS, ORACLES, FrequencyOracle,
                                               choose_oracle, ldp_variance, oracle_for)
from transforms.mechanisms.ldp.simulate import aggregate_counts, hypergeometric_counts, perturb_values, report_counts
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.population import UNREGISTERED, SlotData
from transforms.mechanisms.public_schedule import PublicRecord, ReportRecord

SIMULATIONS = ("users", "aggregate")

_CHARGED_NOTHING = -2
"""``group_of`` of a registered user who sent no report (any negative but UNREGISTERED)."""


def validate_local_options(params) -> None:
    """Check the options every local method's parameters share (``oracle``, ``grr_variance``, ``simulation``)."""
    if params.bins < 2:
        raise ValueError(f"local-DP methods need at least 2 bins, got {params.bins}")
    if params.oracle is not None and params.oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES} or None (the Ada rule), got {params.oracle!r}")
    if params.grr_variance not in GRR_VARIANCE_MODES:
        raise ValueError(f"grr_variance must be one of {GRR_VARIANCE_MODES}, got {params.grr_variance!r}")
    if params.simulation not in SIMULATIONS:
        raise ValueError(f"simulation must be one of {SIMULATIONS}, got {params.simulation!r}")


@dataclass(frozen=True, kw_only=True)
class LocalParams(HomogeneousParams):
    """One ``(epsilon, window)`` for every user, and the LDP-IDS options.

    ``beta`` splits the budget (budget division) or the population
    (population division) between the dissimilarity M_{t,1} and the
    publications M_{t,2} (spec §5.9); ``oracle`` forces GRR or OUE (default:
    the Ada rule); ``grr_variance`` is V's form for GRR (§3.4);
    ``simulation`` runs every reporter's randomizer (``"users"``) or draws the
    reports' counts exactly in aggregate (``"aggregate"``); ``min_publication_users``
    is LPD's u_min; ``sampling_offset`` moves LSP's sampling slot.
    """

    beta: float = 0.5
    oracle: str | None = None
    grr_variance: str = "exact"
    simulation: str = "users"
    min_publication_users: int = 1
    sampling_offset: int = 0

    def __post_init__(self):
        super().__post_init__()
        self.validate_options()
        if isinstance(self.beta, bool) or not (isinstance(self.beta, (int, float)) and 0 < self.beta < 1):
            raise ValueError(f"beta must lie strictly between 0 and 1, got {self.beta!r}")
        for name, least in (("min_publication_users", 1), ("sampling_offset", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")

    def validate_options(self) -> None:
        """Check the randomizer's options (a numeric task checks its own)."""
        validate_local_options(self)

    @cached_property
    def beta_fraction(self) -> Fraction:
        """``beta`` as the exact decimal it was written as."""
        return Fraction(repr(float(self.beta)))

    def share_of(self, total: int) -> int:
        """``floor(β · total)``, exactly."""
        return total * self.beta_fraction.numerator // self.beta_fraction.denominator

    def rest_of(self, total: int) -> int:
        """``floor((1-β) · total)``, exactly."""
        rest = 1 - self.beta_fraction
        return total * rest.numerator // rest.denominator


class Reports(NamedTuple):
    """A request: some holders report through one oracle (users ascending), and the part the report pays for.

    ``instruction`` says whether the collector had to tell them (one request bit each, spec §6.3's counting);
    ``named_units`` is the budget the method asked at, recorded publicly beside the oracle it built for it.
    """

    users: np.ndarray
    oracle: FrequencyOracle
    part: str = PUBLICATION
    instruction: bool = True
    named_units: int | None = None
    """The budget the method asked at (the request's public budget); None: the oracle's."""

    @property
    def budget_units(self) -> int:
        """The budget this request names: what the method asked at, which the oracle's law must match."""
        return self.oracle.epsilon_units if self.named_units is None else self.named_units


class Answer(NamedTuple):
    """What came back for a request: who answered (ascending) and the estimate from their reports (None: nobody)."""

    users: np.ndarray
    estimate: np.ndarray | None


@dataclass(frozen=True)
class LocalDecision:
    """What a local method decided at a slot: the kind, the fresh estimate, the error model behind it."""

    kind: ReleaseKind
    estimate: np.ndarray | None   # the fresh frequency estimate (None: r_{t-1} repeated)
    predicted_error: float        # the error model's per-bin variance behind the decision
    epsilon_units: int = 0        # the budget of the fresh estimate's reports


class Holders(NamedTuple):
    """The users who may be asked at this slot (ascending) and the value of every user index (-1: none).

    With simulated users a holder is a registered user with a value at the slot; with client devices the
    collector knows no value (``value_of`` is None) and every registered user may be asked.
    """

    users: np.ndarray
    value_of: np.ndarray | None
    registered: int  # registered users (public): the population size n of the spec
    capacity: int    # user indices below this may exist


Rounds = Generator[Reports, Answer, LocalDecision]
"""A method's slot: it yields each request and is sent what came back; it returns the decision."""


class SlotRounds:
    """One slot of a local method, round by round.

    :attr:`request` is what the method asks next (``None`` once the slot is
    decided); :meth:`answer` gives it the users who answered and the counts
    ``C'`` their reports sum to; :attr:`release` is the slot's release once
    the method has decided.  The simulated users answer every request at
    once (:meth:`LocalMechanism.step`); client devices answer through the
    pipeline, and users who do not answer count as not reporting.
    """

    def __init__(self, mechanism: "LocalMechanism", batch: SlotBatch, groups: np.ndarray, holders: Holders,
                 rounds: Rounds, trust: TrustModel):
        self.mechanism, self.batch, self.groups, self.holders, self.trust = mechanism, batch, groups, holders, trust
        self._rounds = rounds
        self.answered: list[Reports] = []
        self.asked: list[Reports] = []  # each request as sent, beside what came back (the public record)
        self.release: Release | None = None
        self.request: Reports | None = None
        self._advance(None)

    def answer(self, users: np.ndarray, counts: np.ndarray | None) -> None:
        """The request's ``users`` who answered (ascending, a subset of it) and the sum ``C'`` of their reports."""
        request = self.request
        if request is None:
            raise ValueError("the slot is decided: nothing was asked")
        users = np.asarray(users, np.int64)
        self.check_answer(users)
        estimate = request.oracle.estimate(counts, users.size) if users.size else None
        self.asked.append(request)
        self.answered.append(request._replace(users=users))
        self._advance(Answer(users, estimate))

    def check_answer(self, users: np.ndarray) -> None:
        """Refuse answers from users the open request did not ask (the ledger checks the same from the public
        record, so a collector that skipped this is still caught)."""
        request = self.request
        if users is not request.users and users.size:  # everyone asked answering is the usual case
            at = np.minimum(np.searchsorted(request.users, users), request.users.size - 1)
            if request.users.size == 0 or (request.users[at] != users).any():
                raise ValueError("only users who were asked can answer")

    def _advance(self, answer: Answer | None) -> None:
        try:
            self.request = self._rounds.send(answer)
        except StopIteration as stop:
            self.request = None
            self.release = self.mechanism._release(self, stop.value)


class LocalMechanism(Mechanism):
    """Base of the LDP-IDS methods: holders in, requests out, answers in, charges and evidence from the answers."""

    trust = TrustModel.LOCAL_SIMULATED
    estimates = Estimate.FREQUENCIES
    samples_cohorts = False
    slot_rounds_type: ClassVar[type[SlotRounds]] = SlotRounds
    """The rounds a slot runs through (:meth:`start_slot`)."""
    asks_on_schedule: ClassVar[bool] = False
    """True when who is asked, and at which budget, follows from public facts alone (the slot and the registered
    users: LBU, LSP, PLBU), so devices can report without a round trip and recorded reports can be replayed.
    LPU's groups are drawn when users register: its devices learn them from the requests."""

    def __init__(self, params):
        super().__init__(params)
        self.last_estimate = np.zeros(params.bins)
        self.last_bits = 0  # communication of the last slot (spec §6.3): report bits plus request bits

    # -- what subclasses provide ----------------------------------------------------------------------
    def rounds(self, holders: Holders, rng: Randomness) -> Rounds:
        """The method's algorithm for slot ``self.slot``: ``answer = yield request`` per sub-mechanism."""
        raise NotImplementedError

    def decide(self, data: SlotData, rng: Randomness):
        raise TypeError(f"{self.name} decides from users' reports: call step()")

    # -- shared pieces ------------------------------------------------------------------------------------
    def oracle(self, units: int) -> FrequencyOracle:
        """The oracle LocSan uses at ``units`` (Ada unless forced)."""
        return oracle_for(units, self.params.bins, self.params.oracle)

    def variance(self, units: int, reporters: int) -> float:
        """V(eps, n) of the oracle a report at ``units`` uses, for ``reporters`` reporters (inf for none)."""
        if units <= 0 or reporters <= 0:
            return math.inf
        kind = self.params.oracle or choose_oracle(units, self.params.bins)
        return ldp_variance(units / UNITS_PER_EPSILON, self.params.bins, reporters, kind, self.params.grr_variance)

    def simulate(self, request: Reports, holders: Holders, rng: Randomness) -> np.ndarray:
        """The counts ``C'`` the reports of ``request``'s users would sum to, their randomizers run on their values."""
        if holders.value_of is None:
            raise ValueError("client devices answer for themselves: the collector has no values to simulate")
        values = holders.value_of[request.users]
        if values.size and values.min() < 0:
            raise ValueError("only holders can report")
        oracle = request.oracle
        if self.params.simulation == "aggregate":
            return aggregate_counts(oracle, np.bincount(values, minlength=oracle.d), rng)
        return report_counts(oracle, perturb_values(oracle, values, rng))

    def publication_round(self, users: np.ndarray, units: int, instruction: bool = True) -> Rounds:
        """``users`` report with ``units`` and the answers are released (repeated when nobody answers)."""
        if users.size == 0:
            return LocalDecision(ReleaseKind.SKIPPED, None, self.variance(units, 0))
        answer = yield Reports(users, self.oracle(units), PUBLICATION, instruction, units)
        if answer.estimate is None:
            return LocalDecision(ReleaseKind.SKIPPED, None, self.variance(units, 0))
        return LocalDecision(ReleaseKind.FRESH, answer.estimate, self.variance(units, answer.users.size), units)

    def dissimilarity(self, estimate: np.ndarray, units: int, reporters: int) -> float:
        """Eq. (3): the mean squared distance to ``r_{t-1}`` minus the estimate's variance."""
        return float(np.mean((estimate - self.last_estimate) ** 2)) - self.variance(units, reporters)

    # -- the protocol --------------------------------------------------------------------------------------
    def step(self, batch: SlotBatch, rng: Randomness) -> Release:
        """One slot with simulated users: every request is answered by all its users' randomizers."""
        slot = self.start_slot(batch, rng)
        while slot.request is not None:
            slot.answer(slot.request.users, self.simulate(slot.request, slot.holders, rng))
        return slot.release

    def step_exchangeable(self, batch: SlotBatch, true_counts, rng: Randomness) -> Release:
        """One slot with simulated users whose values are exchangeable (spec §3.5): ``true_counts[k]`` of the
        registered users hold value k, on a set drawn uniformly at random, so the users the method asks (a
        data-independent choice) hold multivariate-hypergeometric counts.  Each request's counts are drawn so,
        without replacement within the slot, and its reports in aggregate: no user's value is ever built.
        ``batch`` registers users and carries no values; every registered user holds a value."""
        if self.estimates is not Estimate.FREQUENCIES:
            raise ValueError(f"{self.name}: exchangeable values are counts of the frequency oracles' values")
        slot = self.start_slot(batch, rng, clients=True, trust=self.trust)  # simulated users, not devices
        remaining = np.asarray(true_counts, np.int64)
        if remaining.shape != (self.params.bins,) or int(remaining.sum()) != slot.holders.users.size:
            raise ValueError(f"true_counts must give the {slot.holders.users.size} registered users' values over "
                             f"{self.params.bins} bins, got {true_counts!r}")
        while slot.request is not None:
            drawn = hypergeometric_counts(remaining, slot.request.users.size, rng)
            remaining = remaining - drawn
            slot.answer(slot.request.users, aggregate_counts(slot.request.oracle, drawn, rng))
        return slot.release

    def start_slot(self, batch: SlotBatch, rng: Randomness, clients: bool = False,
                   trust: TrustModel | None = None) -> SlotRounds:
        """Admit ``batch`` and start the slot; its requests are answered through the returned rounds.

        With ``clients`` the users' devices answer (the batch registers users and carries no values): every
        registered user may be asked, and the release is labelled ``local_client`` (or ``trust``).
        """
        data = self.admit(batch)
        if clients:
            if (batch.values >= 0).any():
                raise ValueError("with client devices the collector receives no values")
            registered = np.flatnonzero(data.groups >= 0)
            holders = Holders(registered, None, registered.size, data.groups.size)
        else:
            holders = self._holders(batch, data.groups)
        trust = trust or (TrustModel.LOCAL_CLIENT if clients else self.trust)
        return self.slot_rounds_type(self, batch, data.groups, holders, self.rounds(holders, rng), trust)

    def _release(self, slot: SlotRounds, decision: LocalDecision) -> Release:
        if decision.kind is ReleaseKind.FRESH:
            self.last_estimate = np.asarray(decision.estimate, np.float64)
        reports = tuple(slot.answered)
        self.last_bits = sum(r.users.size * (r.oracle.bits + r.instruction) for r in reports)
        charges = self._charges(slot.batch, slot.groups, reports, self.public_record(slot.asked, reports))
        counts = np.rint(self.last_estimate * slot.holders.registered).astype(np.int64)
        return Release(self.slot, counts, decision.kind, decision.epsilon_units, decision.predicted_error,
                       charges, self.estimates, slot.trust, self.last_estimate.copy())

    def _holders(self, batch: SlotBatch, groups: np.ndarray) -> Holders:
        registered = int(np.count_nonzero(groups >= 0))
        everyone = registered == groups.size == batch.users.size  # users 0..n-1, all registered, all in the batch
        if self.params.carry_forward:  # the cells remembered this slot's values already
            value_of = np.array(self.population.registry.last_values(groups.size))
        elif everyone:  # every index is in the batch once (in any order)
            value_of = np.empty(groups.size, np.int64)
            value_of[batch.users] = batch.values
        else:
            value_of = np.full(groups.size, -1, np.int64)
            value_of[batch.users] = batch.values
        if not everyone:
            value_of[groups < 0] = -1  # unregistered, or waiting for a changed requirement: not asked
        if everyone and value_of.size and value_of.min() >= 0:
            return Holders(_every_index(value_of.size), value_of, registered, groups.size)
        return Holders(np.flatnonzero(value_of >= 0), value_of, registered, groups.size)

    @functools.cached_property
    def public_params(self) -> dict:
        """The parameters as plain JSON values: public, what the method's schedule is built from."""
        return json.loads(self.params.to_json())

    def public_record(self, asked: list[Reports], answered: tuple[Reports, ...]) -> PublicRecord:
        """What the slot publicly asked: per request its part, law, domain and budget, who was asked and whose
        reports entered the estimate."""
        return PublicRecord(self.name, self.public_params, tuple(
            ReportRecord(r.part, r.oracle.kind, r.oracle.d, r.budget_units, request.users, r.users)
            for request, r in zip(asked, answered)))

    def _charges(self, batch: SlotBatch, groups: np.ndarray, reports: tuple[Reports, ...],
                 public_record: PublicRecord | None = None) -> GroupCharges:
        """Users grouped by the reports they sent; each group charged the realised epsilon of those reports."""
        group_of = np.where(groups == UNREGISTERED, UNREGISTERED, _CHARGED_NOTHING).astype(np.int64)
        sent: list[frozenset[int]] = []  # per group, the reports its members sent
        for index, report in enumerate(reports):
            before = group_of[report.users]
            if (before == UNREGISTERED).any():
                raise ValueError(f"{self.name} asked an unregistered user to report")
            if not sent:  # the first report: its users are in no group yet
                sent.append(frozenset({index}))
                group_of[report.users] = 0
                continue
            key = np.maximum(before + 1, 0)  # 0: in no group yet; g + 1: group g
            renumber = np.zeros(len(sent) + 1, np.int64)
            for old in np.flatnonzero(np.bincount(key, minlength=len(sent) + 1)):
                renumber[old] = len(sent)  # a new group: the old one's members who sent this report too
                sent.append((sent[old - 1] if old else frozenset()) | {index})
            group_of[report.users] = renumber[key]
        statistics = tuple(LocalReport(f"{r.part}:{r.oracle.kind}", r.oracle.keep, r.oracle.other,
                                       np.array([CERTAIN if i in members else 0 for members in sent], np.uint64))
                           for i, r in enumerate(reports))
        parts = {name: np.array([sum(reports[i].oracle.realised_units for i in members if reports[i].part == name)
                                 for members in sent], np.int64)
                 for name in (DISSIMILARITY, PUBLICATION)}
        group_of.flags.writeable = False
        return GroupCharges(group_of, parts, self.requirement_kind, Evidence(group_of, statistics), batch,
                            self.population.default_requirement, public_record)

    # -- state ----------------------------------------------------------------------------------------------
    def extra_state(self) -> dict[str, np.ndarray]:
        return {"last_estimate": self.last_estimate, **self.method_state()}

    def load_extra_state(self, state: dict[str, np.ndarray]) -> None:
        self.last_estimate = np.array(state["last_estimate"], np.float64)
        self.load_method_state(state)

    def method_state(self) -> dict[str, np.ndarray]:
        """The method's own state beyond the last estimate."""
        return {}

    def load_method_state(self, state: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`method_state`."""


@functools.lru_cache(maxsize=4)
def _every_index(size: int) -> np.ndarray:
    """``0..size-1``, read-only (the holders when every registered user holds a value)."""
    users = np.arange(size)
    users.flags.writeable = False
    return users


class HomogeneousLocalMechanism(LocalMechanism, HomogeneousMechanism):
    """A local method with one ``(ε, w)`` for everyone (every declared requirement must be within it)."""

    params_type = LocalParams
    params: LocalParams

    def __init__(self, params: LocalParams):
        super().__init__(params)
        if self.largest_report_units() > MAX_LDP_EPSILON_UNITS:
            raise ValueError(f"{self.name} with epsilon={params.epsilon!r}, window={params.window} would send reports "
                             f"above the largest per-report epsilon {MAX_LDP_EPSILON_UNITS // UNITS_PER_EPSILON}")

    def largest_report_units(self) -> int:
        """The largest budget one report of this method can spend."""
        return self.params.epsilon_units
