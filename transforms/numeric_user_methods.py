"""What each numeric method computes at the user, for the per-user stage (``transforms.numeric_clients``); no Beam.

Each class runs one registered method of seed 003 (``transforms.mechanisms.numeric.streams``) for a group of
users, each from their own state row, with the core's own functions (``Client.step``, ``absorption_step``, the
Piecewise Mechanism): the k-th report of every user of the group in one vectorised call.  A user's input is a
:class:`Reporting` (their admitted slots, grid values in ``[0, 1]`` and requirement rows, ascending); the output
is, per user, the reports that leave the stage, ``(slot, value, dissimilarity units, publication units,
requirement row, dissimilarity budget, publication budget)`` (the charges, then the budgets in units the parts were
made at: what the ledger derives the least charge from; 0: no such part), and the new state row.  ``value`` is a dyadic rational (a square wave or PM cell midpoint),
so the release stage sums it exactly.

* :class:`ClientMethod`: SW-direct, IPP, APP, CAPP: one report per admitted slot (row ``ClientRow``).
* :class:`SampledMethod`: PP-S, APP-S, CAPP-S, Sampling: the values of a segment of ``L`` slots (aligned on the
  absolute slot numbers: slots ``kL .. kL + L - 1``, public and data-independent; the central registered mechanism
  counts from its stream's first slot, the same segments when that slot is a multiple of ``L``) are summed in the
  row (``SampledRow``) and their mean is reported through the base client at the segment's last slot, once that
  slot is closed (``horizon``); a segment still open at the end of a bounded run stays in the row.  Only segment
  ends report: the release stage releases every other slot as skipped (``numeric_clients.SlotReleases``).
  Strict ``n_w`` by default (the registered mechanism's client); ``accounting="paper"`` uses the paper's intent
  ``n_w = ceil(w/L)`` without the memory term, which is not w-event private on a stream unless the strict count
  happens to fit (:attr:`SampledMethod.w_event_private`).
* :class:`AbsorptionMethod`: BA-SW: every admitted slot is a step of the user's budget absorption (row
  ``AbsorptionRow``): a dissimilarity report and perhaps a publication; the value that leaves is what the user
  releases for the slot (a new publication or the last one repeated).
* :class:`ToplMethod`: ToPL(PM): the PM cell of every admitted slot, no state.  De-biasing (``(1 + (2w - 1)/g)/2``,
  affine) is applied to the slot's average by the release stage (the estimator's ``unit_estimate``), which is the
  registered mechanism's average of de-biased reports up to float rounding.

Randomness: ``draws(keys, words)`` gives the generator of one vectorised call: ``keys()`` lists the reports'
``(stream, user, slot)`` (called only by seeded runs), ``words`` the 32-bit words the core's function takes per
report.
"""

from __future__ import annotations

import bisect

from typing import Callable, NamedTuple

import numpy as np

from transforms.mechanisms.numeric.baselines import AbsorptionState, absorption_step
from transforms.mechanisms.numeric.perturbation import Client, ClientState, build_client
from transforms.mechanisms.numeric.sampling import (
    ACCOUNTINGS,
    choose_samples,
    samples_per_window,
)
from transforms.mechanisms.numeric.server import crowd_distribution
from transforms.mechanisms.numeric.estimates import MeanEstimator, estimator_for
from transforms.numeric_records import AbsorptionRow, ClientRow, SampledRow

Draws = Callable[[Callable[[], list], int], object]
"""``draws(keys, words)``: the Randomness of one vectorised step (module doc)."""


class Reporting(NamedTuple):
    """One user's admitted contributions that hold a value: slots, grid values in [0, 1], requirement rows."""

    stream: str
    user: str
    slots: list
    x: list
    requirements: list


class UserMethod:
    """Base: one registered numeric method run per user (module doc)."""

    row_type: type | None = None
    sampled = False

    def __init__(self, mechanism):
        self.mechanism = mechanism

    @property
    def w_event_private(self) -> bool:
        return True

    @property
    def estimator(self) -> MeanEstimator:
        """What the release's estimate is and its predicted error: the registered mechanism's own
        (:mod:`transforms.mechanisms.numeric.estimates`), for this method's client."""
        return self.mechanism.estimator

    def run(self, users: list, rows: list, horizons: list, draws: Draws) -> tuple[list, list]:
        """Per user, the reports ``(slot, value, dc, publication, requirement)`` and the new row (module doc)."""
        raise NotImplementedError


def _client_state(rows: list, client: Client, column) -> ClientState:
    """The ClientState of ``rows`` (``column(row)`` the user's ClientRow, None: fresh)."""
    state = client.initial_state(len(rows))
    for i, row in enumerate(rows):
        if row is not None:
            state.deviations[i], state.accumulated[i], state.age[i] = column(row)
    return state


def _client_rows(state: ClientState) -> list:
    return [ClientRow(state.deviations[i].copy(), float(state.accumulated[i]), int(state.age[i]))
            for i in range(state.age.size)]


def _step_in_turn(client: Client, state: ClientState, users: list, slots: list, x: list, draws: Draws) -> list:
    """Every user's reports through ``client`` (user i's at ``slots[i]`` of grid values ``x[i]``), the k-th of all
    users in one ``Client.step``; ``state`` updated in place.  Returns each user's report values."""
    counts = np.array([len(s) for s in slots], np.int64)
    out: list = [[] for _ in users]
    for k in range(int(counts.max(initial=0))):
        idx = np.flatnonzero(counts > k).tolist()
        rng = draws(lambda: [(users[i].stream, users[i].user, slots[i][k]) for i in idx], 2)
        sub = ClientState(state.deviations[idx], state.accumulated[idx], state.age[idx])
        reports, sub = client.step(sub, np.array([x[i][k] for i in idx]), rng, in_place=True)
        state.deviations[idx], state.accumulated[idx], state.age[idx] = sub
        for i, report in zip(idx, reports.tolist()):
            out[i].append(report)
    return out


class ClientMethod(UserMethod):
    """SW-direct / IPP / APP / CAPP: one report per admitted slot through the user's client."""

    row_type = ClientRow

    def __init__(self, mechanism):
        super().__init__(mechanism)
        self.client = mechanism.client
        self.wave = self.client.sw

    def run(self, users, rows, horizons, draws):
        state = _client_state(rows, self.client, lambda row: row)
        values = _step_in_turn(self.client, state, users, [u.slots for u in users], [u.x for u in users], draws)
        units, made_at = self.client.report_units, self.client.sw.epsilon_units
        reports = [[(slot, value, 0, units, req, 0, made_at) for slot, value, req in zip(u.slots, v, u.requirements)]
                   for u, v in zip(users, values)]
        return reports, _client_rows(state)


class SampledMethod(UserMethod):
    """PP-S / APP-S / CAPP-S / Sampling: a segment's mean reported at its last slot (module doc)."""

    row_type = SampledRow
    sampled = True

    def __init__(self, mechanism, accounting: str = "strict"):
        super().__init__(mechanism)
        if accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {accounting!r}")
        self.accounting = accounting
        p = mechanism.params
        memory = mechanism.fixed_memory  # None: APP-S/CAPP-S, a parameter
        if accounting == "strict":
            self.segment, self.client = mechanism.segment, mechanism.client
            self.memory = self.client.memory
        else:  # the paper's intent: n_w = ceil(w/L) reports share the window budget, memory not counted
            self.segment = p.segment or p.window // choose_samples(p.window, p.window, p.epsilon, "paper",
                                                                   memory or 0)
            self.memory = memory if memory is not None else (p.memory or -(-p.window // self.segment))
            touched = samples_per_window(self.segment, p.window, p.window, "paper")
            units = p.epsilon_units // touched
            if units < 1:
                raise ValueError(f"epsilon={p.epsilon!r} is too small to split over {touched} samples")
            self.client = build_client(units, p.grid_bits, self.memory, False, p.reset, mechanism.base == "capp",
                                       p.bound_mode, p.delta)
        self.wave = self.client.sw

    @property
    def estimator(self) -> MeanEstimator:
        """The registered mechanism's estimator for this client (the paper's accounting has its own budget)."""
        return estimator_for(self.mechanism.name, self.client.sw, self.client.bounds)

    @property
    def w_event_private(self) -> bool:
        """Whether the worst window (``ceil((w-1)/L) + 1`` segments it touches plus ``h`` remembered samples)
        stays within the window budget at this client's per-report charge."""
        p = self.mechanism.params
        touched = samples_per_window(self.segment, p.window, p.window, "strict")
        return (touched + self.memory) * self.client.report_units <= p.epsilon_units

    def segment_end(self, slot: int) -> int:
        return (slot // self.segment + 1) * self.segment - 1

    def means(self, user: Reporting, row: SampledRow | None, horizon: int) -> tuple[list, tuple]:
        """``user``'s finished segments ``[(end slot, mean, requirement)]`` (a segment finishes once its last slot is
        at most ``horizon``) and the open one ``(segment, total, count, requirement)``."""
        seg, total, count, req = (-1, 0.0, 0, ()) if row is None else (row.segment, row.total, row.count,
                                                                         row.requirement)
        finished = []
        for slot, x, requirement in zip(user.slots, user.x, user.requirements):
            k = slot // self.segment
            if count and k != seg:
                finished.append(((seg + 1) * self.segment - 1, total / count, req))
                total, count = 0.0, 0
            seg, total, count, req = k, total + x, count + 1, tuple(requirement)
        if count and (seg + 1) * self.segment - 1 <= horizon:
            finished.append(((seg + 1) * self.segment - 1, total / count, req))
            seg, total, count, req = -1, 0.0, 0, ()
        return finished, (seg, total, count, req)

    def run(self, users, rows, horizons, draws):
        state = _client_state(rows, self.client, lambda row: row[:3])
        finished, open_ = zip(*[self.means(u, row, h) for u, row, h in zip(users, rows, horizons)]) if users \
            else ((), ())
        values = _step_in_turn(self.client, state, users, [[end for end, _, _ in f] for f in finished],
                               [[min(max(mean, 0.0), 1.0) for _, mean, _ in f] for f in finished], draws)
        units, made_at = self.client.report_units, self.client.sw.epsilon_units
        reports = [[(end, value, 0, units, req, 0, made_at) for (end, _, req), value in zip(f, v)]
                   for f, v in zip(finished, values)]
        new_rows = [SampledRow(c.deviations, c.accumulated, c.age, *o) for c, o in zip(_client_rows(state), open_)]
        return reports, new_rows


class AbsorptionMethod(UserMethod):
    """BA-SW: each admitted slot one step of the user's budget absorption (``absorption_step``)."""

    row_type = AbsorptionRow

    def __init__(self, mechanism):
        super().__init__(mechanism)
        self.params = mechanism.absorption
        self.wave = self.params.wave(1)  # the largest variance: the smallest budget
        self._units: dict = {}

    def share_units(self, shares: int) -> int:
        """The realised units of a publication at ``shares · e1``."""
        if shares not in self._units:
            self._units[shares] = self.params.wave(shares).realised_units
        return self._units[shares]

    def run(self, users, rows, horizons, draws):
        state = self.params.initial_state(len(rows))
        for i, row in enumerate(rows):
            if row is not None:
                for column, value in zip(state, row):
                    column[i] = value
        counts = np.array([len(u.slots) for u in users], np.int64)
        reports: list = [[] for _ in users]
        dc_units = self.params.wave(1).realised_units
        for k in range(int(counts.max(initial=0))):
            idx = np.flatnonzero(counts > k)
            sub = AbsorptionState(*(column[idx] for column in state))
            keys = [(users[i].stream, users[i].user, users[i].slots[k]) for i in idx.tolist()]
            released, sent, published, sub = absorption_step(
                self.params, sub, np.array([users[i].x[k] for i in idx.tolist()]), draws(lambda: keys, 4))
            for column, rows_ in zip(state, sub):
                column[idx] = rows_
            for j, i in enumerate(idx.tolist()):
                shares = int(published[j])
                reports[i].append((users[i].slots[k], float(released[j]), dc_units if sent[j] else 0,
                                   self.share_units(shares) if shares else 0, users[i].requirements[k],
                                   self.params.share_units if sent[j] else 0, shares * self.params.share_units))
        new_rows = [AbsorptionRow(float(state.published[i]), int(state.last_slot[i]), int(state.shares[i]),
                                  int(state.slot[i])) for i in range(len(users))]
        return reports, new_rows


class ToplMethod(UserMethod):
    """ToPL(PM): the PM cell of each admitted slot at ``ε/w``; no state."""

    def __init__(self, mechanism):
        super().__init__(mechanism)
        self.wave = mechanism.topl.piecewise

    def run(self, users, rows, horizons, draws):
        keys = [(u.stream, u.user, slot) for u in users for slot in u.slots]
        x = np.array([x for u in users for x in u.x])
        cells = self.wave.perturb(x, draws(lambda: keys, 2), clip=True).tolist() if keys else []
        units, made_at, out, at = self.wave.realised_units, self.wave.epsilon_units, [], 0
        for u in users:
            out.append([(slot, cells[at + j], 0, units, req, 0, made_at) for j, (slot, req) in
                        enumerate(zip(u.slots, u.requirements))])
            at += len(u.slots)
        return out, [None] * len(users)


def user_method(mechanism, accounting: str = "strict") -> UserMethod:
    """The :class:`UserMethod` of a registered numeric mechanism (``accounting``: the PP-S family's ``n_w``)."""
    from transforms.mechanisms.numeric.streams import (
        AbsorptionStream,
        ClientStream,
        SampledStream,
        ToplStream,
    )

    if accounting != "strict" and not isinstance(mechanism, SampledStream):
        raise ValueError(f"accounting applies to the sampling methods (pp-s, app-s, capp-s, sampling), not "
                         f"{mechanism.name}")
    if isinstance(mechanism, ClientStream):
        return ClientMethod(mechanism)
    if isinstance(mechanism, SampledStream):
        return SampledMethod(mechanism, accounting)
    if isinstance(mechanism, AbsorptionStream):
        return AbsorptionMethod(mechanism)
    if isinstance(mechanism, ToplStream):
        return ToplMethod(mechanism)
    raise ValueError(f"{mechanism.name} has no per-user client")


def crowd_bins(reports: list, window: int, bins: int, last: int) -> list:
    """One user's crowd distribution entries (the streams' ``crowd_window``/``crowd_bins`` release, spec §3.8.3):
    for every slot ``t`` up to ``last`` with at least one of the user's ``reports`` (``(slot, value, ...)``,
    ascending slots) in ``t - window + 1 .. t``, ``(t, bin)``: the bin of the user's mean report over those slots,
    summed oldest first as the core sums it, binned by ``server.crowd_distribution`` (its definition, once).
    Post-processing of the reports: no charge."""
    if not reports:
        return []
    slots = [report[0] for report in reports]
    out = []
    for t in range(slots[0], min(slots[-1] + window - 1, last) + 1):
        held = reports[bisect.bisect_right(slots, t - window):bisect.bisect_right(slots, t)]
        if not held:
            continue
        total = 0.0
        for report in held:
            total += report[1]
        out.append((t, int(np.argmax(crowd_distribution([total / len(held)], bins)))))
    return out
