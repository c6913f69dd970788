"""Seed 003's methods on the mechanism protocol: registered local-DP streams estimating a population mean.

``sw-direct``, ``ipp``, ``app``, ``capp`` (every holder reports every slot), ``pp-s``, ``app-s``, ``capp-s``,
``sampling`` (each holder reports the mean of their values once per segment of ``segment`` slots), ``ba-sw``
and ``topl``: one ``(ε, w)`` for every user (``NumericParams``), values in a declared interval
``[low, high]`` (refused or clipped outside it, ``out_of_range``), simulated users (trust model
``local_simulated``: the collector runs each user's client on the value the user holds, and only the reports
reach the estimate).  A release's estimate and predicted error come from the method's
:class:`~.estimates.MeanEstimator` (:attr:`NumericStream.estimator`): the de-biased mean for SW-direct and ToPL,
the de-biased segment mean for Sampling, the raw average of the reports (``report_mean``, with a worst-case
error bound) for the methods whose reports depend on private state; a slot without reports repeats the last
estimate.  The release's epsilon is the realised charge of its most expensive report, ``histogram`` the
estimate times the reporters (0 for a skipped slot), as the per-user stage writes them.

**Crowd distribution** (``crowd_window = q``, ``crowd_bins = B``; spec §3.8.3): each release's estimate is
instead the distribution over users of each user's mean report over the last ``q`` slots (``Estimate.
DISTRIBUTION``, :func:`.server.crowd_distribution`): the fractions of the users who sent at least one
report in slots ``t - q + 1 .. t`` whose average report (the raw average the mean release uses, on
``[low, high]``) falls in each of ``B`` equal bins, means outside ``[low, high]`` counted in the end bins.
It reads only the reports already sent (post-processing: the charges are the mean release's); each user's
last ``q`` reports are a state column (``crowd_reports``) saved with the rest.

**Only w-event private configurations are accepted here.**  The paper's readings that are not (ε/w with
deviation memory, unbounded memory, the PP-S ``n_w`` of the paper's intent on a stream) stay in the evaluation
functions (:mod:`.perturbation`, :mod:`.sampling`), whose results say whether they are private.  The clients
use the strict budgets: ``ε/(w + h)`` for memory ``h`` (APP/CAPP default ``h = w``); the sampling variants
``ε/(n_w + h)`` with ``n_w = ceil((w - 1)/L) + 1`` segments a window can touch and ``h`` samples of memory
(APP-S/CAPP-S default ``h = ceil(w/L)``); BA-SW ``e1 = ε/(2w)`` per dissimilarity and absorbed publications;
ToPL ``ε/w``.  Segments are aligned on the slot numbers (public): slots ``kL + 1 .. (k + 1)L``.

**Charges and evidence.**  Every report costs its sender the realised epsilon of its square wave (or PM),
``ln(P/Q)`` rounded up; the charges group users by what they sent (parts ``dissimilarity`` and
``publication``) and the evidence names each report's exact ``P/Q`` and its senders, so the ledgers check
every window against what the users declared.  A report depends on earlier values through the memory; the
strict budgets cover that (the ledger's window sums only see the charges: the tests check the longer
dependency spans with ``perturbation.worst_window_units``).

**State.**  Per user index: the client's deviation cells and age (and the segment's running sum and count,
or BA-SW's last publication), saved with the mechanism (:meth:`method_state`): the rows a Beam per-user stage
would keep in its state cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from transforms.mechanisms.base import Release, ReleaseKind
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION, GroupCharges
from transforms.mechanisms.domain import NO_VALUE, Estimate, Interval
from transforms.mechanisms.evidence import CERTAIN, Evidence, LocalReport
from transforms.mechanisms.ldp.mean import OUT_OF_RANGE, ClippedInterval, PiecewiseMechanism, TrueMeanForEvaluation
from transforms.mechanisms.ldp.stream import Holders, HomogeneousLocalMechanism, LocalParams, SlotRounds
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.numeric.baselines import AbsorptionParams, AbsorptionState, ToplParams, absorption_step
from transforms.mechanisms.numeric.perturbation import Client, ClientState, PerturbationParams, build_client
from transforms.mechanisms.numeric.sampling import choose_samples, samples_per_window
from transforms.mechanisms.numeric.estimates import MeanEstimator, absorption_estimator, estimator_for
from transforms.mechanisms.numeric.server import crowd_distribution
from transforms.mechanisms.numeric.square_wave import DEFAULT_GRID_BITS
from transforms.mechanisms.population import UNREGISTERED
from transforms.mechanisms.public_schedule import PublicRecord, ReportRecord

_CHARGED_NOTHING = -2
CROWD_REPORTS = "crowd_reports"
"""The state column of each user's last ``crowd_window`` reports (the crowd distribution's)."""


@dataclass(frozen=True, kw_only=True)
class NumericParams(LocalParams):
    """One ``(epsilon, window)`` for every user and the numeric options (module doc).

    ``memory``: APP/CAPP's deviation cells (default ``window``), APP-S/CAPP-S's samples (default
    ``ceil(window/segment)``); ``reset``: restart the clients' state every so many of their slots;
    ``bound_mode``/``delta``: CAPP's bounds; ``segment``: the PP-S family's segment length (default: the
    paper's choice of ``n_s`` for a ``window``-slot query, ``floor(window/n_s)``); ``grid_bits``: the square
    wave's grid.  ``bins`` is 1 (one mean; the pipelines fix it).  ``crowd_window``/``crowd_bins`` (together):
    release the crowd distribution over ``crowd_bins`` bins of the users' means over ``crowd_window`` slots.
    """

    low: float | None = None
    high: float | None = None
    bins: int = 1
    out_of_range: str = "refuse"
    grid_bits: int = DEFAULT_GRID_BITS
    memory: int | None = None
    reset: int | None = None
    bound_mode: str = "ref"
    delta: float | None = None
    segment: int | None = None
    crowd_window: int | None = None
    crowd_bins: int | None = None

    def validate_options(self) -> None:
        if self.bins != 1:
            raise ValueError(f"a mean estimate has one bin: bins must be 1, got {self.bins!r}")
        if self.oracle is not None or self.grr_variance != "exact" or self.simulation != "users":
            raise ValueError("the numeric streams run each user's client: oracle, grr_variance and simulation "
                             "do not apply")
        if self.low is None or self.high is None:
            raise ValueError("numeric streams need the values' domain: give low and high")
        if self.out_of_range not in OUT_OF_RANGE:
            raise ValueError(f"out_of_range must be one of {OUT_OF_RANGE}, got {self.out_of_range!r}")
        Interval(self.low, self.high)
        if (self.crowd_window is None) != (self.crowd_bins is None):
            raise ValueError("the crowd distribution needs both crowd_window (slots) and crowd_bins")
        for name in ("memory", "reset", "segment", "crowd_window", "crowd_bins"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    @cached_property
    def domain(self) -> Interval:
        return (ClippedInterval if self.out_of_range == "clip" else Interval)(self.low, self.high)


METHOD_OPTIONS = {"memory": None, "reset": None, "bound_mode": "ref", "delta": None, "segment": None}
"""The options of :class:`NumericParams` that only some methods take, with their defaults."""


class NumericStream(TrueMeanForEvaluation, HomogeneousLocalMechanism):
    """Base of the registered numeric streams: holders' grid values in, each user's algorithm, reports out."""

    params_type = NumericParams
    params: NumericParams
    estimates = Estimate.MEAN
    asks_on_schedule = False
    state_columns: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[frozenset[str]] = frozenset()
    """The method options (of :data:`METHOD_OPTIONS`) this method takes; the others must keep their defaults."""

    def __init__(self, params: NumericParams):
        given = sorted(name for name, default in METHOD_OPTIONS.items()
                       if name not in self.options and getattr(params, name) != default)
        if given:
            raise ValueError(f"{self.name} does not take {', '.join(given)}")
        super().__init__(params)
        self.last_clipped = 0  # values clipped at the last slot (raw data: not private, evaluation only)
        self._true_mean = math.nan
        self.user_state: dict[str, np.ndarray] = dict(zip(self.state_columns, self.initial_rows(0)))
        if params.crowd_window is not None:  # each user's last q reports, column slot % q (NaN: none sent)
            self.estimates = Estimate.DISTRIBUTION
            self.last_estimate = np.zeros(params.crowd_bins)
            self.user_state[CROWD_REPORTS] = np.zeros((0, params.crowd_window))

    # -- what subclasses provide -------------------------------------------------------------------------------
    def initial_rows(self, users: int) -> tuple[np.ndarray, ...]:
        """Fresh state rows for ``users`` new user indices, one array per :attr:`state_columns`."""
        return ()

    def run_users(self, users: np.ndarray, x: np.ndarray, rng: Randomness) -> tuple[np.ndarray, np.ndarray, list]:
        """The slot for ``users`` (holders, ascending) with grid values ``x`` in ``[0, 1]``: the reporters, their
        released values, and the reports as ``(part, wave, mask over the reporters)``."""
        raise NotImplementedError

    # -- the protocol ------------------------------------------------------------------------------------------
    def start_slot(self, batch: SlotBatch, rng: Randomness, clients: bool = False, trust=None) -> SlotRounds:
        raise ValueError(f"{self.name}: the collector runs no rounds for the numeric clients: simulated users step "
                         "(step); device reports are released by transforms.numeric_report_release")

    def step(self, batch: SlotBatch, rng: Randomness) -> Release:
        """One slot with simulated users: each holder's client runs on their value; the reports are averaged."""
        data = self.admit(batch)
        holders = self._holders(batch, data.groups)
        self._grow(holders.capacity)
        x = holders.value_of[holders.users] / float(1 << self.params.grid_bits)
        reporters, released, reports = self.run_users(holders.users, x, rng)
        crowd = CROWD_REPORTS in self.user_state
        if crowd:
            ring = self.user_state[CROWD_REPORTS]
            ring[:, self.slot % ring.shape[1]] = np.nan
            ring[reporters, self.slot % ring.shape[1]] = self.crowd_values(released)
        kind = ReleaseKind.SKIPPED
        width = self.params.domain.width
        if reporters.size:
            kind = ReleaseKind.FRESH
            self.last_estimate = self._crowd_estimate() if crowd else \
                np.array([float(self.params.low) + width * self.estimator.unit_estimate(float(released.mean()))])
        charges = self._charges(batch, data.groups, reporters, reports)
        if crowd:
            counts = np.rint(self.last_estimate * holders.registered).astype(np.int64)
        else:  # the estimate times the reporters, as the per-user stage writes it (0 when none reported)
            counts = np.rint(self.last_estimate * reporters.size).astype(np.int64)
        units = self.most_charged(reports, reporters.size)
        error = self.estimator.predicted_error(reporters.size, width) if reporters.size else math.inf
        return Release(self.slot, counts, kind, units if reporters.size else 0,
                       math.nan if crowd else error, charges, self.estimates, self.trust, self.last_estimate.copy())

    @staticmethod
    def most_charged(reports: list, reporters: int) -> int:
        """The most one reporter was charged at the slot (realised units): the sum of the realised epsilons of the
        reports they sent (BA-SW: a dissimilarity and a publication), as the per-user stage's ``epsilon``."""
        spent = np.zeros(reporters, np.int64)
        for _, wave, mask in reports:
            spent += np.where(np.asarray(mask, bool), wave.realised_units, 0)
        return int(spent.max(initial=0))

    @cached_property
    def estimator(self) -> MeanEstimator:
        """What the release's estimate is and its predicted error (:mod:`.estimates`)."""
        return estimator_for(self.name, self.client.sw, self.client.bounds)

    def crowd_values(self, released: np.ndarray) -> np.ndarray:
        """The values the crowd distribution averages per user: the reports as sent."""
        return released

    def _crowd_estimate(self) -> np.ndarray:
        """The fractions of users (those with a report in the last ``q`` slots) whose mean report falls in each
        of ``B`` equal bins of ``[low, high]``; each mean is summed oldest report first (reports only)."""
        ring = self.user_state[CROWD_REPORTS]
        q = ring.shape[1]
        total, sent = np.zeros(ring.shape[0]), np.zeros(ring.shape[0], np.int64)
        for age in range(q - 1, -1, -1):
            column = ring[:, (self.slot - age) % q]
            present = ~np.isnan(column)
            total += np.where(present, column, 0.0)
            sent += present
        counted = sent > 0  # at least this slot's reporters
        return crowd_distribution(total[counted] / sent[counted], self.params.crowd_bins)

    def counted(self, batch: SlotBatch) -> SlotBatch:
        """Each value as its grid index on ``[low, high]`` (NaN: NO_VALUE), after clipping."""
        p = self.params
        values = batch.values.astype(np.float64, copy=False)
        missing = np.isnan(values)
        unit = (np.clip(values, p.low, p.high) - p.low) / p.domain.width
        indices = np.rint(np.where(missing, 0.0, unit) * (1 << p.grid_bits)).astype(np.int64)
        return SlotBatch(batch.users, np.where(missing, NO_VALUE, indices), batch.requirements)

    def _holders(self, batch: SlotBatch, groups: np.ndarray) -> Holders:
        values = batch.values.astype(np.float64, copy=False)
        self.last_clipped = int(np.count_nonzero((values < self.params.low) | (values > self.params.high)))
        holders = super()._holders(self.counted(batch), groups)
        grid = holders.value_of[holders.users] / float(1 << self.params.grid_bits)
        self._true_mean = float(self.params.low) + self.params.domain.width * float(grid.mean()) if grid.size \
            else math.nan
        return holders

    def step_clients(self, users: np.ndarray, x: np.ndarray, rng: Randomness) -> np.ndarray:
        """``self.client``'s step for ``users`` (ascending) on their state rows, written back; the reports."""
        columns = [self.user_state[name] for name in ClientState._fields]
        if users.size == columns[-1].size:  # every user index: the rows themselves, updated in place
            state = ClientState(*columns)
        else:
            state = ClientState(*(column[users] for column in columns))
        reports, state = self.client.step(state, x, rng, in_place=True)
        if users.size != columns[-1].size:
            for column, rows in zip(columns, state):
                column[users] = rows
        return reports

    def _grow(self, capacity: int) -> None:
        have = next(iter(self.user_state.values())).shape[0] if self.user_state else capacity
        if capacity > have:
            fresh = self.initial_rows(capacity - have)
            for name, rows in zip(self.state_columns, fresh):
                self.user_state[name] = np.concatenate([self.user_state[name], rows])
            if CROWD_REPORTS in self.user_state:
                ring = self.user_state[CROWD_REPORTS]
                self.user_state[CROWD_REPORTS] = np.vstack([ring, np.full((capacity - have, ring.shape[1]), np.nan)])

    def _charges(self, batch: SlotBatch, groups: np.ndarray, reporters: np.ndarray, reports: list) -> GroupCharges:
        """Reporters grouped by the reports they sent; each group charged those reports' realised epsilon."""
        group_of = np.where(groups == UNREGISTERED, UNREGISTERED, _CHARGED_NOTHING).astype(np.int64)
        if reporters.size and (group_of[reporters] == UNREGISTERED).any():
            raise ValueError(f"{self.name}: an unregistered user reported")
        keys = np.zeros(reporters.size, np.int64)  # the reports each reporter sent, one bit per report
        for column, (_, _, mask) in enumerate(reports):
            keys |= mask.astype(np.int64) << column
        if keys.size and keys.min() == keys.max():  # the usual slot: every reporter sent the same reports
            distinct, inverse = keys[:1], np.zeros(keys.size, np.int64)
        else:
            distinct, inverse = np.unique(keys, return_inverse=True)
        patterns = (distinct[:, None] >> np.arange(len(reports))) & 1 == 1
        group_of[reporters] = inverse.reshape(-1)
        statistics, parts = [], {DISSIMILARITY: np.zeros(len(patterns), np.int64),
                                 PUBLICATION: np.zeros(len(patterns), np.int64)}
        records = []
        for column, (part, wave, mask) in enumerate(reports):
            members = patterns[:, column]
            kind = "pm" if isinstance(wave, PiecewiseMechanism) else "sw"
            statistics.append(LocalReport(f"{part}:{kind}", wave.keep, wave.other,
                                          np.where(members, CERTAIN, 0).astype(np.uint64)))
            parts[part] += np.where(members, wave.realised_units, 0)
            senders = reporters[np.asarray(mask, bool)]
            records.append(ReportRecord(part, kind, 1, wave.epsilon_units, senders, senders))
        group_of.flags.writeable = False
        record = PublicRecord(self.name, self.public_params, tuple(records), figures=self.public_figures())
        return GroupCharges(group_of, parts, self.requirement_kind, Evidence(group_of, tuple(statistics)), batch,
                            self.population.default_requirement, record)

    def public_figures(self) -> dict[str, int]:
        """The public numbers the method's schedule needs beside its parameters (the sampling methods' segment)."""
        return {}

    # -- state -------------------------------------------------------------------------------------------------
    def method_state(self) -> dict[str, np.ndarray]:
        return dict(self.user_state)

    def load_method_state(self, state: dict[str, np.ndarray]) -> None:
        self.user_state = {name: np.array(state[name]) for name in self.user_state}



class ClientStream(NumericStream):
    """SW-direct / IPP / APP / CAPP: every holder reports every slot through their client (strict budget)."""

    method: ClassVar[str]
    state_columns = ClientState._fields
    options = frozenset({"memory", "reset", "bound_mode", "delta"})

    @cached_property
    def client(self) -> Client:
        p = self.params
        return PerturbationParams(p.epsilon, p.window, self.method, memory=p.memory, reset=p.reset,
                                  bound_mode=p.bound_mode, delta=p.delta, grid_bits=p.grid_bits).client

    def largest_report_units(self) -> int:
        return self.client.sw.epsilon_units

    def initial_rows(self, users: int) -> tuple[np.ndarray, ...]:
        return tuple(self.client.initial_state(users))

    def run_users(self, users, x, rng):
        return users, self.step_clients(users, x, rng), [(PUBLICATION, self.client.sw, np.ones(users.size, bool))]


class SampledStream(NumericStream):
    """PP-S / APP-S / CAPP-S / Sampling on a stream: each user's mean over a segment, reported at its end."""

    base: ClassVar[str]
    state_columns = (*ClientState._fields, "segment_sum", "segment_count")
    options = frozenset({"memory", "reset", "bound_mode", "delta", "segment"})

    @cached_property
    def segment(self) -> int:
        p = self.params
        if p.segment is not None:
            return p.segment
        return p.window // choose_samples(p.window, p.window, p.epsilon, "strict", self.fixed_memory or 0)

    @property
    def fixed_memory(self) -> int | None:
        return {"none": 0, "ipp": 1}.get(self.base)

    @cached_property
    def client(self) -> Client:
        p = self.params
        if self.fixed_memory is not None and p.memory is not None:
            raise ValueError(f"{self.name}: memory applies to APP-S and CAPP-S only")
        if p.delta is not None and self.base != "capp":
            raise ValueError("delta is CAPP's clip parameter")
        memory = self.fixed_memory if self.fixed_memory is not None else \
            (p.memory or -(-p.window // self.segment))
        touched = samples_per_window(self.segment, p.window, p.window, "strict")  # n_w on an endless stream
        units = p.epsilon_units // (touched + memory)
        if units < 1:
            raise ValueError(f"epsilon={p.epsilon!r} is too small to split over {touched + memory} samples")
        return build_client(units, p.grid_bits, memory, False, p.reset, self.base == "capp", p.bound_mode, p.delta)

    def largest_report_units(self) -> int:
        return self.client.sw.epsilon_units

    def public_figures(self) -> dict[str, int]:
        return {"segment": self.segment}

    def initial_rows(self, users: int) -> tuple[np.ndarray, ...]:
        return (*self.client.initial_state(users), np.zeros(users), np.zeros(users, np.int64))

    def run_users(self, users, x, rng):
        cells = self.user_state
        cells["segment_sum"][users] += x
        cells["segment_count"][users] += 1
        if self.slot % self.segment:
            return np.zeros(0, np.int64), np.zeros(0), []
        reporters = np.flatnonzero((cells["segment_count"] > 0) & (self.population.cohort_of >= 0))
        means = cells["segment_sum"][reporters] / cells["segment_count"][reporters]
        reports = self.step_clients(reporters, np.clip(means, 0.0, 1.0), rng)
        cells["segment_sum"][:], cells["segment_count"][:] = 0.0, 0
        return reporters, reports, [(PUBLICATION, self.client.sw, np.ones(reporters.size, bool))]


class AbsorptionStream(NumericStream):
    """BA-SW: each holder's own budget absorption (dissimilarity at ``e1``, absorbed publications)."""

    name = "ba-sw"
    state_columns = AbsorptionState._fields

    @cached_property
    def absorption(self) -> AbsorptionParams:
        return AbsorptionParams(self.params.epsilon, self.params.window, self.params.grid_bits)

    def largest_report_units(self) -> int:
        return self.absorption.wave(self.params.window).epsilon_units

    def initial_rows(self, users: int) -> tuple[np.ndarray, ...]:
        return tuple(self.absorption.initial_state(users))

    @cached_property
    def estimator(self) -> MeanEstimator:
        return absorption_estimator(self.absorption.wave(self.params.window), self.absorption.wave(1))

    def run_users(self, users, x, rng):
        state = AbsorptionState(*(self.user_state[name][users] for name in self.state_columns))
        released, sent, published, state = absorption_step(self.absorption, state, x, rng)
        for name, rows in zip(self.state_columns, state):
            self.user_state[name][users] = rows
        reports = [(DISSIMILARITY, self.absorption.wave(1), sent)]
        reports += [(PUBLICATION, self.absorption.wave(int(k)), published == k) for k in np.unique(published[published > 0])]
        return users, released, reports


class ToplStream(NumericStream):
    """ToPL(PM): every holder reports through the Piecewise Mechanism at ``ε/w``."""

    name = "topl"

    @cached_property
    def topl(self) -> ToplParams:
        return ToplParams(self.params.epsilon, self.params.window, self.params.grid_bits)

    def largest_report_units(self) -> int:
        return self.topl.piecewise.epsilon_units

    @cached_property
    def estimator(self) -> MeanEstimator:
        return estimator_for(self.name, self.topl.piecewise)

    def crowd_values(self, released: np.ndarray) -> np.ndarray:
        """ToPL's de-biased reports (``topl_step``'s), as the crowd distribution always averaged them."""
        return (1 + (2 * released - 1) / float(self.topl.piecewise.gain)) / 2

    def run_users(self, users, x, rng):
        """The PM cells (``topl_step`` before its affine de-biasing, which the estimator applies to the average)."""
        cells = self.topl.piecewise.perturb(x, rng, clip=True)
        return users, cells, [(PUBLICATION, self.topl.piecewise, np.ones(users.size, bool))]


def _stream(parent: type, class_name: str, name: str, **attributes) -> type:
    return type(class_name, (parent,), {"name": name, "__module__": __name__, **attributes,
                                        "__doc__": f"{name} (spec ipp_app_capp.md §3)."})


SWDirectStream = _stream(ClientStream, "SWDirectStream", "sw-direct", method="sw")
IPPStream = _stream(ClientStream, "IPPStream", "ipp", method="ipp")
APPStream = _stream(ClientStream, "APPStream", "app", method="app")
CAPPStream = _stream(ClientStream, "CAPPStream", "capp", method="capp")
PPSStream = _stream(SampledStream, "PPSStream", "pp-s", base="ipp")
APPSStream = _stream(SampledStream, "APPSStream", "app-s", base="app")
CAPPSStream = _stream(SampledStream, "CAPPSStream", "capp-s", base="capp")
SamplingStream = _stream(SampledStream, "SamplingStream", "sampling", base="none")

NUMERIC_STREAMS: dict[str, type[NumericStream]] = {
    cls.name: cls for cls in (SWDirectStream, IPPStream, APPStream, CAPPStream, PPSStream, APPSStream, CAPPSStream,
                              SamplingStream, AbsorptionStream, ToplStream)}
"""Seed 003's methods by registered name."""
