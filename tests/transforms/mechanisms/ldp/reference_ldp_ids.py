"""A slow per-user reference of the LDP-IDS stream methods and PLBU (test-only code).

Written straight from ``spec/ldp_ids.md`` §4-§5 (LBU §5.1, LSP §5.2, LBD
§5.3, LBA §5.4, LPU §5.5, LPD Algorithm 2 §5.7, LPA Algorithm 3 §5.8, the
general β of §5.9) and ``spec/pwsm.md`` §3.5 (PLBU): plain Python sets and
dicts of users, budgets as integer units (``UNITS`` per epsilon, every
derived budget rounded down with exact integer or Fraction arithmetic), the
pool ``U_A`` as a set with the spec's recycling at the end of every slot, and
a per-user ledger of the nominal budgets each report spent, whose every
window is checked after every slot.  It never imports the fast mechanisms.

The readings beyond the spec's fixed, always-present population are those
the project chose (the fast modules' docstrings):

* ``n`` is the number of registered users; a *holder* is a registered user
  with a value at the slot (their row's, or their last one with
  ``carry_forward``); only holders are asked to report, and a sample that
  asks for more holders than are available takes all of them.
* Budget division: ``ε_{t,1} = floor(βε/w)``; the publication pool is what
  ``w`` dissimilarity shares leave of ``ε``, ``pool = ε - w·ε_{t,1}``, and LBA's
  unit is ``floor(pool / w)``.  V and the estimates count the reporters.
* LPA's ``|U_{l,2}|`` is the publication size the algorithm asked for at
  ``l`` (``n_pp``); in the spec's setting every user is present and it is
  also the size sampled.  ``t_N = |U_{l,2}| // unit_l - 1`` with the unit of
  that publication, so the initial ``|U_{0,2}| = 0`` gives ``t_N = -1``.
* LPU: users are grouped as they register (ascending index), in a uniformly
  random order, continuing the round ``0, 1, ..., w-1`` where it stopped.
* PLBU: user ``i`` reports with ``floor(E_i / w_i)``; the release is the sum
  of every reporter's own unbiased estimator over the ``n'`` reporters,
  computed exactly (Fractions).

Common random numbers: the reference calls the same primitives as the fast
code in the same order per slot (``choose.uniform_permutation`` for LPU's
newcomers; ``choose.uniform_subset`` for each sample from the sorted
candidates; ``oracles.oracle_for`` and ``simulate.perturb_values`` (users) or
``simulate.aggregate_counts`` (aggregate) for each batch of reports, M_{t,1}
first), so both sides see the same draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from transforms.mechanisms.ldp.choose import uniform_permutation, uniform_subset
from transforms.mechanisms.ldp.oracles import ldp_variance, oracle_for
from transforms.mechanisms.ldp.simulate import aggregate_counts, perturb_values, report_counts

UNITS = 10**12  # budget units per epsilon (transforms.mechanisms.budget.UNITS_PER_EPSILON)
BUDGET_METHODS = ("lbu", "lsp", "lbd", "lba")
POPULATION_METHODS = ("lpu", "lpd", "lpa")
METHODS = BUDGET_METHODS + POPULATION_METHODS + ("plbu",)
DIS, PUB = "dissimilarity", "publication"
FRESH, SKIPPED, NULLIFIED = "fresh", "skipped", "nullified"


class ReferenceOverspent(AssertionError):
    """A user's window in the reference's own ledger holds more than allowed."""


@dataclass
class Report:
    """One batch of reports: the part it pays for, the reporters (ascending), the nominal units, the oracle."""

    part: str
    users: tuple[int, ...]
    units: int
    kind: str
    bits: int            # per report, spec §6.3: ceil(log2 d) for GRR, d for OUE
    instruction: bool    # a request bit per report (§6.3's counting)


@dataclass
class Outcome:
    """What the reference did at one slot."""

    slot: int
    kind: str
    estimate: np.ndarray                 # r_t
    reports: list[Report]
    charges: dict[int, tuple[int, int]]  # every registered user: (dissimilarity, publication) realised units
    bits: int                            # the slot's communication (§6.3)
    epsilon_units: int = 0               # budget of the fresh estimate's reports
    trace: dict = field(default_factory=dict)


class Reference:
    """One method, slot by slot: ``step(rows, rng)`` with rows ``(user, value or -1, (w, E units) or None)``.

    ``epsilon`` and ``beta`` are decimal strings (exact); ``dis_override(t)``, when given, replaces Eq. (3)'s
    value at slot ``t`` (the spec's traces TV-4/TV-5 give the dissimilarities).
    """

    def __init__(self, method: str, bins: int, epsilon: str | None = None, window: int | None = None,
                 beta: str = "0.5", carry_forward: bool = False, simulation: str = "users",
                 oracle: str | None = None, grr_variance: str = "exact", min_publication_users: int = 1,
                 sampling_offset: int = 0, dis_override=None):
        assert method in METHODS, method
        self.method, self.d = method, bins
        self.E = None if epsilon is None else int(Fraction(epsilon) * UNITS)
        self.w = window
        self.beta = Fraction(beta)
        self.carry_forward, self.simulation = carry_forward, simulation
        self.forced, self.grr_variance = oracle, grr_variance
        self.u_min, self.offset = min_publication_users, sampling_offset
        self.dis_override = dis_override
        self.t = 0
        self.r = np.zeros(bins)                      # r_{t-1}; r_0 = 0
        self.registered: set[int] = set()
        self.requirement: dict[int, tuple[int, int]] = {}  # PLBU: (w_i, E_i units)
        self.last_value: dict[int, int] = {}
        self.spent: dict[int, dict[int, int]] = {}   # user -> slot -> nominal units reported with
        self.reported_at: dict[int, list[int]] = {}  # user -> slots they reported at
        # LBD/LBA
        self.eps2: dict[int, int] = {}               # ε_{t,2} actually spent
        self.l, self.eps_l2 = 0, 0                   # LBA: last publication and ε_{l,2}
        # LPU
        self.group: dict[int, int] = {}
        self.grouped = 0
        # LPD/LPA
        self.U_A: set[int] = set()
        self.used: dict[int, tuple[set[int], set[int]]] = {}  # t -> (U_{t,1}, U_{t,2})
        self.size_l2, self.unit_l = 0, 1             # LPA: |U_{l,2}| asked for and the unit at l

    # ------------------------------------------------------------------ shared pieces
    def V(self, units: int, n: int) -> float:
        """V(ε, n) of the oracle LocSan uses at ``units`` (inf with no budget or no reporter)."""
        if units <= 0 or n <= 0:
            return math.inf
        kind = oracle_for(units, self.d, self.forced).kind
        return ldp_variance(units / UNITS, self.d, n, kind, self.grr_variance)

    def send(self, users, units: int, part: str, rng, instruction: bool):
        """``users`` (ascending) run LocSan at ``units``: the oracle, their reports (None when simulated in
        aggregate) and the counts C' the server sums; each reporter's ledger and charges take the report."""
        users = sorted(users)
        oracle = oracle_for(units, self.d, self.forced)
        values = np.array([self.holding[u] for u in users], np.int64)
        if self.simulation == "aggregate":
            reports, counts = None, aggregate_counts(oracle, np.bincount(values, minlength=self.d), rng)
        else:
            reports = perturb_values(oracle, values, rng)
            counts = report_counts(oracle, reports)
        for u in users:
            self.spent.setdefault(u, {})[self.t] = self.spent.get(u, {}).get(self.t, 0) + units
            self.reported_at.setdefault(u, []).append(self.t)
            dis, pub = self.charged.get(u, (0, 0))
            self.charged[u] = (dis + oracle.realised_units, pub) if part == DIS else (dis, pub + oracle.realised_units)
        bits = (self.d - 1).bit_length() if oracle.kind == "grr" else self.d
        self.reports.append(Report(part, tuple(users), units, oracle.kind, bits, instruction))
        return oracle, reports, counts

    def report(self, users, units: int, part: str, rng, instruction: bool) -> np.ndarray:
        """The FO estimate from ``users``' reports at ``units``, normalised by the reporters (spec §3, T1)."""
        oracle, _, counts = self.send(users, units, part, rng, instruction)
        return oracle.estimate(counts, len(users))

    def dissimilarity(self, estimate: np.ndarray, units: int, n1: int) -> float:
        """Eq. (3): (1/d) Σ_k (ĉ_{t,1}[k] - r_{t-1}[k])^2 - V(ε_{t,1}, n_{t,1})."""
        if self.dis_override is not None:
            return self.dis_override(self.t)
        return sum((float(a) - float(b)) ** 2 for a, b in zip(estimate, self.r)) / self.d - self.V(units, n1)

    # ------------------------------------------------------------------ the protocol
    def step(self, rows, rng) -> Outcome:
        self.t += 1
        t = self.t
        newcomers, present = [], {}
        for user, value, requirement in rows:
            if user not in self.registered:
                self.registered.add(user)
                newcomers.append(user)
                self.requirement[user] = requirement
                self.U_A.add(user)   # a new user is available (U_A starts as U)
            if value >= 0:
                present[user] = value
        if self.carry_forward:
            self.last_value.update(present)
            self.holding = dict(self.last_value)
        else:
            self.holding = present
        self.holders = sorted(self.holding)
        self.n = len(self.registered)
        self.reports, self.charged, self.trace = [], {}, {}
        kind, estimate, units = getattr(self, "_" + self.method)(sorted(newcomers), rng)
        if kind == FRESH:
            self.r = np.array(estimate, np.float64)
        if self.method in ("lpd", "lpa"):
            self.recycle()
        self.check_windows()
        charges = {u: self.charged.get(u, (0, 0)) for u in sorted(self.registered)}
        bits = sum(len(r.users) * (r.bits + r.instruction) for r in self.reports)
        return Outcome(t, kind, self.r.copy(), self.reports, charges, bits, units if kind == FRESH else 0,
                       self.trace)

    def check_windows(self) -> None:
        """Theorem 4.1 per user: every window of ``w`` slots ending now sums to at most ``ε``; in population
        division, at most one report in it (Theorem 5.2, spec TV-11b)."""
        t = self.t
        for u, slots in self.spent.items():
            w, E = self.requirement[u] if self.method == "plbu" else (self.w, self.E)
            total = sum(units for s, units in slots.items() if t - w < s <= t)
            if total > E:
                raise ReferenceOverspent(f"user {u} spent {total} > {E} units in the window ending at {t}")
            if self.method in POPULATION_METHODS + ("lsp",):
                inside = [s for s in self.reported_at[u] if t - w < s <= t]
                if len(inside) > 1:
                    raise ReferenceOverspent(f"user {u} reported at {inside}, within {w} slots")

    # ------------------------------------------------------------------ budget division
    def _lbu(self, newcomers, rng):
        units = self.E // self.w                       # ε/w
        if not self.holders:
            return SKIPPED, None, 0
        return FRESH, self.report(self.holders, units, PUB, rng, instruction=False), units

    def _lsp(self, newcomers, rng):
        if (self.t - 1 - self.offset) % self.w or not self.holders:   # sampling timestamps t ≡ 1 + offset
            return SKIPPED, None, 0
        return FRESH, self.report(self.holders, self.E, PUB, rng, instruction=True), self.E

    @property
    def eps_t1(self) -> int:
        return math.floor(self.beta * self.E / self.w)  # βε/w

    @property
    def publication_pool(self) -> int:
        return self.E - self.w * self.eps_t1           # what w dissimilarity shares leave of ε

    def m1_budget(self, rng) -> float:
        """M_{t,1} of LBD/LBA: every holder reports with ε_{t,1}; dis."""
        if not self.holders:
            dis = -math.inf
        else:
            estimate = self.report(self.holders, self.eps_t1, DIS, rng, instruction=False)
            dis = self.dissimilarity(estimate, self.eps_t1, len(self.holders))
        self.trace["dis"] = dis
        return dis

    def _lbd(self, newcomers, rng):
        t, w = self.t, self.w
        dis = self.m1_budget(rng)
        eps_rm = self.publication_pool - sum(self.eps2.get(i, 0) for i in range(t - w + 1, t))
        eps_t2 = eps_rm // 2
        err = self.V(eps_t2, len(self.holders))
        self.trace.update(eps_rm=eps_rm, eps_t2=eps_t2, err=err)
        if dis > err:
            self.eps2[t] = eps_t2
            return FRESH, self.report(self.holders, eps_t2, PUB, rng, instruction=True), eps_t2
        self.eps2[t] = 0
        return SKIPPED, None, 0

    def _lba(self, newcomers, rng):
        t, w = self.t, self.w
        unit = self.publication_pool // w
        dis = self.m1_budget(rng)                          # at every t, nullified ones included (T7)
        t_N = self.eps_l2 // unit - 1                      # integer units (T10): -1 before any publication
        self.trace.update(t_N=t_N)
        if t - self.l <= t_N:
            return NULLIFIED, None, 0
        t_A = t - (self.l + t_N)
        eps_t2 = unit * min(t_A, w)
        err = self.V(eps_t2, len(self.holders))
        self.trace.update(t_A=t_A, eps_t2=eps_t2, err=err)
        if dis > err:
            self.l, self.eps_l2 = t, eps_t2
            return FRESH, self.report(self.holders, eps_t2, PUB, rng, instruction=True), eps_t2
        return SKIPPED, None, 0

    # ------------------------------------------------------------------ population division
    def _lpu(self, newcomers, rng):
        if newcomers:  # the newcomers, in a uniformly random order, continue the round of groups
            order = uniform_permutation(len(newcomers), rng)
            for position, index in enumerate(order):
                self.group[newcomers[int(index)]] = (self.grouped + position) % self.w
            self.grouped += len(newcomers)
        users = [u for u in self.holders if self.group[u] == (self.t - 1) % self.w]
        if not users:
            return SKIPPED, None, 0
        return FRESH, self.report(users, self.E, PUB, rng, instruction=True), self.E

    def sample(self, k: int, rng) -> set[int]:
        """``k`` users drawn uniformly from the available holders, removed from ``U_A``."""
        candidates = np.array(sorted(u for u in self.holders if u in self.U_A), np.int64)
        chosen = {int(u) for u in uniform_subset(candidates, k, rng)}
        self.U_A -= chosen
        return chosen

    def m1_population(self, rng) -> float:
        """M_{t,1} of LPD/LPA: n1 = floor(βn/w) users from U_A report with ε; dis with V(ε, |U_{t,1}|)."""
        n1 = math.floor(self.beta * self.n / self.w)
        chosen = self.sample(n1, rng)
        self.used[self.t] = (chosen, set())
        if not chosen:
            dis = -math.inf
        else:
            dis = self.dissimilarity(self.report(chosen, self.E, DIS, rng, instruction=True), self.E, len(chosen))
        self.trace.update(n1=n1, dis=dis)
        return dis

    def publish(self, n_pp: int, rng):
        chosen = self.sample(n_pp, rng)
        self.used[self.t] = (self.used[self.t][0], chosen)
        self.trace["U_A_after_sampling"] = len(self.U_A)
        if not chosen:
            return None
        return self.report(chosen, self.E, PUB, rng, instruction=True)

    def recycle(self) -> None:
        """End of t >= w: U_A := U_A ∪ U_{t-w+1,1} ∪ U_{t-w+1,2} (§4.4; trap T6)."""
        self.trace.setdefault("U_A_after_sampling", len(self.U_A))
        if self.t >= self.w:
            first, second = self.used.pop(self.t - self.w + 1)
            self.U_A |= first | second
        self.trace["U_A_after_recycling"] = len(self.U_A)

    def _lpd(self, newcomers, rng):
        t, w = self.t, self.w
        dis = self.m1_population(rng)
        P = math.floor((1 - self.beta) * self.n)
        n_rm = P - sum(len(self.used[i][1]) for i in range(t - w + 1, t) if i in self.used)
        n_pp = n_rm // 2
        err = self.V(self.E, n_pp)
        self.trace.update(n_rm=n_rm, n_pp=n_pp, err=err)
        if dis > err and n_pp >= self.u_min:
            estimate = self.publish(n_pp, rng)
            if estimate is not None:
                return FRESH, estimate, self.E
        return SKIPPED, None, 0

    def _lpa(self, newcomers, rng):
        t, w = self.t, self.w
        unit = math.floor((1 - self.beta) * self.n / w)
        dis = self.m1_population(rng)                      # at every t, nullified ones included (T7)
        t_N = self.size_l2 // self.unit_l - 1              # -1 before any publication (T10)
        self.trace.update(t_N=t_N)
        if t - self.l <= t_N:
            return NULLIFIED, None, 0
        t_A = t - (self.l + t_N)
        n_pp = unit * min(t_A, w)
        err = self.V(self.E, n_pp)
        self.trace.update(t_A=t_A, n_pp=n_pp, err=err)
        if dis > err:
            estimate = self.publish(n_pp, rng)
            if estimate is not None:
                self.l, self.size_l2, self.unit_l = t, n_pp, unit
                return FRESH, estimate, self.E
        return SKIPPED, None, 0

    # ------------------------------------------------------------------ PLBU (pwsm.md §3.5)
    def _plbu(self, newcomers, rng):
        if not self.holders:
            return SKIPPED, None, 0
        budget = {u: self.requirement[u][1] // self.requirement[u][0] for u in self.holders}  # E_i / w_i
        total = [Fraction(0)] * self.d
        for units in sorted(set(budget.values())):  # one oracle per distinct budget, ascending
            users = [u for u in self.holders if budget[u] == units]
            oracle, reports, counts = self.send(users, units, PUB, rng, instruction=False)
            scale = oracle.p - oracle.q
            if reports is None:  # aggregate: the group's sum of per-user estimators, from its counts
                for j in range(self.d):
                    total[j] += (int(counts[j]) - len(users) * oracle.q) / scale
                continue
            for y in reports:  # every reporter's own unbiased estimator (1[y = j] - q_i)/(p_i - q_i)
                ones = [int(y) == j for j in range(self.d)] if oracle.kind == "grr" else [bool(b) for b in y]
                for j in range(self.d):
                    total[j] += (int(ones[j]) - oracle.q) / scale
        return FRESH, np.array([float(x / len(self.holders)) for x in total]), min(budget.values())
