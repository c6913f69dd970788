"""A per-user reference implementation of PBD, PBA, DPBD and DPBA (test-only code).

Written straight from ``spec/pwsm.md`` §2 (Algs. 2-7, the chosen readings A1-A11,
the feasibility rules of §1.6) and from the population policies the core
documents (``transforms/mechanisms/population.py``): one user at a time, plain
python integers and Fractions, no cohorts, no caches, no fast paths.  It is an
oracle for the fast core, used only by ``test_reference_equivalence.py``.

Budgets are integers in the project's units (``budget.UNITS_PER_EPSILON`` per
epsilon) and every derived budget is floored, as ``budget.py`` prescribes.

Policies beyond the papers (which assume a fixed population), as the core reads them:

* **Registration.**  A user is registered at their first row, with the
  requirement it declares (or the default requirement when the batch carries
  none).  Registered users are charged at every slot, reporting or not.
* **Fixed requirements: the continuous holder.**  A user with fixed
  requirement ``R`` in force is charged what a *virtual user holding R
  continuously since R was first held by anyone* is charged; that holder is
  what a joiner's all-zero history is compared with ("a joiner shares the
  trajectory of the users of their requirement").  The holder is updated at
  every slot whether or not any real user holds ``R``; it never reports.
  PBD: the holder's history records every publication's ``ε^(2)`` for ``R``,
  held or not (conservative: nobody paid it).
  PBA: the holder's *border* is the last slot its publications have used,
  ``l + t_N = l + k(l) - 1`` (Alg. 5); a slot is nullified iff it is at or
  before the border of some user in force, and otherwise a user absorbs
  ``t_A = t - border`` shares (at most ``w``).  A holder created while the last
  publication is ``l`` starts with a virtual one-share publication at ``l``
  (trap 10).  A holder that holds nobody at a publication spends nothing
  there: its border stays where it is, and moves up to ``t - 1`` if it was
  earlier (the slots it skipped before ``t`` are not carried over).  Only
  users in force (not waiting) take part in the nullification test.
* **Changed fixed requirement.**  ``R -> R'`` declared at ``t`` takes effect
  at ``t + w' - 1``; until then the user waits: registered, charged 0,
  contributing nothing, ``R`` still in force.  Declaring ``R'`` again while
  waiting changes nothing; declaring ``R`` again cancels (back in ``R`` at
  once); declaring a third ``R''`` restarts the wait.  Due changes take effect
  before the slot's declarations are read.
* **Dynamic requirements** are per user: each user's own declaration history
  and own charge histories (a joiner's history is empty); a user who declares
  nothing repeats their last declaration.  An infeasible backward ``E_B`` is
  projected to ``max(E_B, 2Σε^(1), 2Σε^(2))`` (§1.6), which is the requirement
  in force.
* **Who contributes.**  A user in force whose row at ``t`` has a bin; with
  ``carry_forward`` a user in force with any bin reported so far (the last one).
* **OBS counts every user in force**, reporting or not (sizes are public).

Randomness comes from a :class:`Draws` object: ``uniforms(bins)`` per sampling
step (a user is kept iff the uniform of their bin is below their exact coin
threshold) and ``noise(scale, size)`` per noise draw, dissimilarity first.  What each
sampling step kept is appended to ``Draws.samples``, so two users of the same draws can be
compared step by step.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from fractions import Fraction

UNITS = 10**12  # budget units per epsilon (transforms.mechanisms.budget.UNITS_PER_EPSILON)
TWO_32 = 1 << 32
SHRINK = 1.0 - 2.0**-40  # exact coins round the probability down (noise.bernoulli_thresholds)

FRESH, SKIPPED, NULLIFIED = "fresh", "skipped", "nullified"
FIXED_MECHANISMS = ("pbd", "pba")
DYNAMIC_MECHANISMS = ("dpbd", "dpba")


class Draws:
    """Common random numbers: one seeded sequence that the core and the reference consume alike.

    ``uniforms(bins)``: one uniform 32-bit integer per bin for one sampling
    step.  ``noise(scale, size)``: discrete values ``round(scale · z)`` with
    ``z`` standard Laplace, so a caller asking with a wrong scale gets other
    values.  Every request is logged.
    """

    def __init__(self, seed: int):
        self._gen = random.Random(seed)
        self.log: list[tuple] = []
        self.samples: list[tuple[int, ...]] = []  # what each sampling step kept, per bin (filled by the caller)

    def uniforms(self, bins: int) -> list[int]:
        self.log.append(("sample", bins))
        return [self._gen.getrandbits(32) for _ in range(bins)]

    def noise(self, scale: Fraction, size: int) -> list[int]:
        self.log.append(("noise", Fraction(scale), size))
        values = []
        for _ in range(size):
            z = self._gen.expovariate(1.0) * (1 if self._gen.getrandbits(1) else -1)
            values.append(math.floor(z * float(scale) + 0.5))
        return values


@dataclass
class Outcome:
    """One slot as the reference releases it."""

    slot: int
    kind: str
    histogram: tuple[int, ...]
    epsilon_units: int                       # θ of a fresh publication, else 0
    dc: dict[int, int]                       # ε^(1) per registered user
    publication: dict[int, int]              # ε^(2) per registered user
    requirements: dict[int, tuple[int, ...]]  # requirement in force per registered user


# ------------------------------------------------------------------ OBS and SM (spec §2.1-2.3)
def noise_variance(theta: float, sensitivity: int, model: str) -> float:
    """Per-bin variance of the noise of scale Δ/θ (discrete Laplace, or the papers' 2Δ²/θ²)."""
    scale = sensitivity / theta
    if model == "continuous":
        return 2.0 * scale * scale
    x = 1.0 / scale
    return 2.0 * math.exp(-x) / math.expm1(-x) ** 2


def inclusion_probability(units: int, theta_units: int) -> float:
    """SM's ``p = (e^ε - 1)/(e^θ - 1)``, 1 at or above θ, 0 for a zero budget."""
    if units >= theta_units:
        return 1.0
    if units <= 0:
        return 0.0
    return math.expm1(units / UNITS) / math.expm1(theta_units / UNITS)


def coin_threshold(p: float) -> int:
    """The exact coin: kept iff a uniform 32-bit draw is below this (p rounded down)."""
    if p >= 1.0:
        return TWO_32
    return math.floor(max(p, 0.0) * float(TWO_32) * SHRINK)


def obs(budgets: list[int], sensitivity: int, model: str) -> tuple[int, float]:
    """Alg. 1 over one budget per user: ``(θ in units, err)``, θ = 0 when no budget is positive."""
    best, err_min = 0, math.inf
    for candidate in sorted(set(budgets)):          # ascending; strict < keeps the smaller on ties
        if candidate <= 0:
            continue                                # err_dp(0) = ∞ (A8)
        theta = candidate / UNITS
        variance, unsampled = 0.0, 0.0
        for b in budgets:
            if b < candidate:
                p = math.expm1(b / UNITS) / math.expm1(theta)
                variance += p * (1 - p)
                unsampled += 1 - p
        err = variance + unsampled**2 + noise_variance(theta, sensitivity, model)
        if err < err_min:
            best, err_min = candidate, err
    return best, err_min


def sample_counts(contributions: dict[int, int], budgets: dict[int, int], theta: int, bins: int,
                  draws: Draws) -> list[int]:
    """SM_s then Q, one user at a time: user i is kept iff u[bin_i] < threshold(p_i)."""
    u = draws.uniforms(bins)
    counts = [0] * bins
    for user, value in contributions.items():
        if u[value] < coin_threshold(inclusion_probability(budgets[user], theta)):
            counts[value] += 1
    draws.samples.append(tuple(counts))
    return counts


# ------------------------------------------------------------------ users
@dataclass
class _FixedUser:
    in_force: tuple[int, int]          # (w, E units)
    waiting: bool = False
    pending: tuple[int, int] | None = None
    pending_from: int = 0


@dataclass
class _Holder:
    """The virtual user holding one fixed requirement continuously (see the module docstring)."""

    window: int
    units: int
    publications: dict[int, int] = field(default_factory=dict)  # PBD: slot -> ε^(2) (0 when absent)
    border: int = 0        # PBA: the last slot its publications have used, l + t_N = l + k(l) - 1

    @property
    def share(self) -> int:
        return self.units // (2 * self.window)


@dataclass
class _DynamicUser:
    joined: int
    declarations: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)  # slot -> (wB,EB,wF,EF)
    dc: dict[int, int] = field(default_factory=dict)
    publication: dict[int, int] = field(default_factory=dict)

    def spent(self, history: dict[int, int], first: int, last: int) -> int:
        return sum(history.get(k, 0) for k in range(first, last + 1))


class ReferenceMechanism:
    """PBD / PBA / DPBD / DPBA, one user at a time."""

    def __init__(self, name: str, bins: int, sensitivity: int = 1, error_model: str = "discrete",
                 carry_forward: bool = False, default_requirement: tuple[int, ...] | None = None,
                 ceil_borders: bool = False):
        assert name in FIXED_MECHANISMS + DYNAMIC_MECHANISMS
        self.name, self.bins, self.sensitivity, self.model = name, bins, sensitivity, error_model
        self.carry_forward, self.default, self.ceil_borders = carry_forward, default_requirement, ceil_borders
        self.dynamic = name in DYNAMIC_MECHANISMS
        self.slot = 0
        self.last_release = (0,) * bins     # r_0 = 0 (A1)
        self.last_fresh = 0                 # l, the last fresh publication (0: virtual)
        self.users: dict = {}               # user -> _FixedUser | _DynamicUser
        self.holders: dict[tuple[int, int], _Holder] = {}
        self.last_value: dict[int, int] = {}
        self.trace: list[str] = []          # membership events, "slot t: ...", for failure messages

    def _note(self, text: str) -> None:
        self.trace.append(f"slot {self.slot}: {text}")

    # -------------------------------------------------------------- declarations
    def _holder(self, requirement: tuple[int, int]) -> _Holder:
        if requirement not in self.holders:
            self.holders[requirement] = _Holder(*requirement, border=self.last_fresh)  # one share at l
        return self.holders[requirement]

    def _declare_fixed(self, user: int, declared: tuple[int, int]) -> None:
        state = self.users.get(user)
        t = self.slot
        if state is None:
            self.users[user] = _FixedUser(declared)
            self._holder(declared)
            self._note(f"user {user} joins with {declared}")
        elif declared == state.in_force:
            if state.waiting:                                     # cancel the change
                state.waiting, state.pending, state.pending_from = False, None, 0
                self._holder(declared)
                self._note(f"user {user} cancels, back in {declared}")
        elif not (state.waiting and state.pending == declared):   # start (or restart) waiting
            state.waiting, state.pending, state.pending_from = True, declared, t + declared[0] - 1
            self._note(f"user {user} waits for {declared} until slot {state.pending_from}")
            self._activate(user, state)                           # w' = 1 takes effect at once

    def _activate(self, user: int, state: _FixedUser) -> None:
        if state.waiting and state.pending_from <= self.slot:
            state.in_force, state.waiting, state.pending, state.pending_from = state.pending, False, None, 0
            self._holder(state.in_force)
            self._note(f"user {user} now in {state.in_force}")

    def _declare_dynamic(self, user: int, declared: tuple[int, int, int, int]) -> None:
        if user not in self.users:
            self.users[user] = _DynamicUser(joined=self.slot)
            self._note(f"user {user} joins")
        state = self.users[user]
        if state.declarations.get(self.slot - 1) != declared:
            self._note(f"user {user} declares {declared}")
        state.declarations[self.slot] = declared

    def _in_force(self) -> list[int]:
        """Users in force this slot (registered and not waiting), ascending."""
        return sorted(u for u, s in self.users.items() if self.dynamic or not s.waiting)

    # -------------------------------------------------------------- one slot
    def step(self, rows: list[tuple[int, int, tuple[int, ...] | None]], draws: Draws) -> Outcome:
        """``rows``: ``(user, bin or -1, declared requirement or None)``; None everywhere = no columns."""
        self.slot += 1
        t = self.slot
        with_requirements = any(r is not None for _, _, r in rows)
        if not self.dynamic:
            for user in sorted(self.users):
                self._activate(user, self.users[user])
        for user, _, declared in rows:
            if declared is None:
                if user in self.users:
                    continue
                assert self.default is not None and not with_requirements
                declared = self.default
            if self.dynamic:
                self._declare_dynamic(user, tuple(declared))
            else:
                self._declare_fixed(user, tuple(declared))
        if self.dynamic:  # every registered user who declared nothing repeats their last declaration
            for state in self.users.values():
                if t not in state.declarations:
                    state.declarations[t] = state.declarations[t - 1]
        for user, value, _ in rows:
            if value >= 0:
                self.last_value[user] = value
        active = self._in_force()
        if self.carry_forward:
            contributions = {u: self.last_value[u] for u in active if u in self.last_value}
        else:
            reported = {u: v for u, v, _ in rows if v >= 0}
            contributions = {u: reported[u] for u in active if u in reported}
        if self.dynamic:
            return self._dynamic_slot(active, contributions, draws)
        return self._fixed_slot(active, contributions, draws)

    def _publish(self, active, contributions, dc, publication_of, draws):
        """Alg. 2: ``(kind, histogram, θ2, dc, publication)``; ``publication_of()`` is None when nullified."""
        zero = {u: 0 for u in active}
        theta1, _ = obs([dc[u] for u in active], self.sensitivity, self.model)
        if theta1 == 0:                                           # A8: no DC possible, skip, charge 0
            return SKIPPED, None, 0, zero, zero
        sampled = sample_counts(contributions, dc, theta1, self.bins, draws)
        scale1 = Fraction(self.sensitivity * UNITS, theta1)
        # dis = (1/d)Σ|c̃ - r_l| + Lap(Δ/(dθ)): the discrete noise of scale Δ/θ, divided by d.
        dis = Fraction(sum(abs(c - r) for c, r in zip(sampled, self.last_release)) + draws.noise(scale1, 1)[0],
                       self.bins)
        publication = publication_of()
        if publication is None:
            return NULLIFIED, None, 0, dc, zero
        theta2, err2 = obs([publication[u] for u in active], self.sensitivity, self.model)
        if theta2 == 0 or not (math.isfinite(err2) and dis > Fraction(math.sqrt(err2))):
            return SKIPPED, None, 0, dc, zero
        counts = sample_counts(contributions, publication, theta2, self.bins, draws)
        noise = draws.noise(Fraction(self.sensitivity * UNITS, theta2), self.bins)
        histogram = tuple(c + z for c, z in zip(counts, noise))
        return FRESH, histogram, theta2, dc, {u: publication[u] for u in active}

    def _finish(self, kind, histogram, theta2, dc, publication) -> Outcome:
        if kind == FRESH:
            self.last_release, self.last_fresh = histogram, self.slot
        charged = {u: dc.get(u, 0) for u in self.users}
        published = {u: publication.get(u, 0) for u in self.users}
        return Outcome(self.slot, kind, self.last_release, theta2, charged, published, self._requirements())

    # -------------------------------------------------------------- PBD / PBA (Algs. 4-5)
    def _fixed_slot(self, active, contributions, draws) -> Outcome:
        t = self.slot
        holders = self.holders
        holder_of = {u: holders[self.users[u].in_force] for u in active}
        dc = {u: h.share for u, h in holder_of.items()}                      # E_i/(2w_i), every slot
        candidate: dict = {}                                                  # holder key -> ε^(2)

        def pbd():
            for key, h in holders.items():                                   # Alg. 4 lines 4-5
                spent = sum(h.publications.get(k, 0) for k in range(max(1, t - h.window + 1), t))
                candidate[key] = max(h.units // 2 - spent, 0) // 2
            return {u: candidate[self.users[u].in_force] for u in active}

        def pba():
            # Alg. 5 lines 5-7: t_N = k(l) - 1, i.e. border l + t_N, per user in force; nullified if t <= it.
            if any(t <= h.border for h in holder_of.values()):
                return None
            held = {self.users[u].in_force for u in active}
            for key, h in holders.items():                                    # lines 9-11: t_A = t - border
                candidate[key] = min(t - h.border, h.window) if key in held else 0
            return {u: candidate[self.users[u].in_force] * h.share for u, h in holder_of.items()}

        kind, histogram, theta2, dc, publication = self._publish(
            active, contributions, dc, pbd if self.name == "pbd" else pba, draws)
        for key, h in holders.items():
            if self.name == "pbd":
                h.publications[t] = candidate[key] if kind == FRESH else 0
            elif kind == FRESH and candidate[key] > 0:                      # k shares: slots up to t + k - 1
                h.border = t + candidate[key] - 1
            elif kind == FRESH:                                               # held nobody: spent nothing
                h.border = max(h.border, t - 1)
                self._note(f"{key} holds nobody at a publication, border now {h.border}")
        return self._finish(kind, histogram, theta2, dc, publication)

    # -------------------------------------------------------------- DPBD / DPBA (Algs. 6-7)
    def _dynamic_slot(self, active, contributions, draws) -> Outcome:
        t = self.slot
        backward_in_force, dc = {}, {}
        for u in active:
            s = self.users[u]
            w_b, e_b, _, _ = s.declarations[t]
            live = self._live(s)
            forward = min(e_f // (2 * w_f) for _, w_f, e_f in live)               # ε1F
            dc_spent = s.spent(s.dc, t - w_b + 1, t - 1)
            pub_spent = s.spent(s.publication, t - w_b + 1, t - 1)
            backward_in_force[u] = max(e_b, 2 * dc_spent, 2 * pub_spent)          # §1.6 projection
            dc[u] = max(min(forward, backward_in_force[u] // 2 - dc_spent), 0)    # ε1 = min(ε1F, ε1B)
        self._backward_in_force = backward_in_force

        def caps(u):
            s = self.users[u]
            w_b = s.declarations[t][0]
            backward = backward_in_force[u] // 2 - s.spent(s.publication, t - w_b + 1, t - 1)   # ε_UB / ε2B
            left = {tau: e_f // 2 - s.spent(s.publication, tau, t - 1) for tau, _, e_f in self._live(s)}
            return s, backward, left

        def dpbd():
            out = {}
            for u in active:
                _, backward, left = caps(u)
                out[u] = max(min(min(left.values()) // 2, backward), 0)           # ε2F halved, ε2B not
            return out

        def dpba():
            allocated = {}
            for u in active:
                s, _, _ = caps(u)
                best = None
                for tau, w_f, e_f in self._live(s):
                    share = e_f // (2 * w_f)
                    if share <= 0:
                        continue
                    spent = s.spent(s.publication, tau, t - 1)
                    if self.ceil_borders:   # border = ceil(Σ/share) + τ - 1
                        used = -(-spent // share)
                        if t - tau + 1 <= used:
                            return None                                           # t <= border: nullified
                        absorbed = (t - tau + 1 - used) * share
                    else:                   # border = Σ/share + τ - 1, compared exactly
                        if Fraction(spent, share) + tau - 1 >= t:
                            return None
                        absorbed = (t - tau + 1) * share - spent                  # (t - border)·share
                    best = absorbed if best is None else max(best, absorbed)
                allocated[u] = best
            out = {}
            for u in active:
                _, backward, left = caps(u)
                if allocated[u] is None:                                          # no share to absorb
                    out[u] = 0
                else:                                                             # min(ε_AF, ε_UF, ε_UB)
                    out[u] = max(min(allocated[u], min(left.values()), backward), 0)
            return out

        kind, histogram, theta2, dc, publication = self._publish(
            active, contributions, dc, dpbd if self.name == "dpbd" else dpba, draws)
        for u in active:
            self.users[u].dc[t] = dc[u]
            self.users[u].publication[t] = publication[u]
        return self._finish(kind, histogram, theta2, dc, publication)

    def _live(self, state: _DynamicUser) -> list[tuple[int, int, int]]:
        """T_{B,i,t}: the declarations τ whose forward window covers t, as (τ, w_F, E_F); includes t."""
        t = self.slot
        return [(tau, d[2], d[3]) for tau, d in state.declarations.items()
                if state.joined <= tau <= t <= tau + d[2] - 1]

    def _requirements(self) -> dict[int, tuple[int, ...]]:
        if not self.dynamic:
            return {u: s.in_force for u, s in self.users.items()}
        out = {}
        for u, s in self.users.items():
            w_b, _, w_f, e_f = s.declarations[self.slot]
            out[u] = (w_b, self._backward_in_force[u], w_f, e_f)
        return out
