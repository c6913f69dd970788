"""DPI's slot loop as a mechanism: the paper's (``dpi``) and the sound variant (``dpi-sound``) (spec §2.7-§2.10).

Both release, every slot, a distribution over the public domain for each
configured query (``acc``: everything so far; ``inst``: this slot), drawn
from the public synopsis pool (:mod:`.pool`), and spend per-slot budgets
that Random Budget Allocation hands out from the lifetime series
(:mod:`.budgets`).  Every registered user is charged each slot's units (a
query over all data touches everyone, spec §1.3) under a **lifetime**
requirement, which the ledger checks forever.

**``dpi``: the paper's loop** (spec §2.7 as specified, readings I-6..I-12).
Per slot: ``e_t`` from RBA, split in halves for the synopsis and the query
distributions; ``s_q`` queries sampled from ``P_Q``; for every configured
query ``q``, ``r`` synopses drawn i.i.d. from ``P_A[q] = softmax(wA[q])``
*before* the update (the release is their mean); then, for each sampled
query, ``wA[q][j] += aA·score(||y - A_j||_1)`` for the unique drawn ``j``
(or every ``j`` with ``update="all"``) and ``wQ[q] -= aQ·score(||y - O_q||_1)``
with ``aA = mu·(e_A/s_q)/(4Δ)``, ``aQ = mu·e_Q/(4Δ)``.  Two figures ride on
every release: ``eps_claimed`` (Theorem 5.1: the sum of the slot budgets)
and ``eps_sound_upper`` (§2.10.1: each released draw from a distribution
costs twice the score sensitivity ``s_a = min(2, 2Δ/mu)`` times the
cumulative learning rate of that distribution).  **The sound figure is what
is charged**; the claim is reported, labelled the paper's.  A slot whose
sound charge would take the epoch past ``epsilon`` is not run: the budget is
exhausted (see restarts).  The sound figure is computed in exact rationals
from the integer budget units, times ``1 + 2**-30`` plus one unit to cover
the float sums the weights are kept in; the draws themselves are float
inverse-CDF draws (this variant reproduces the paper, it is not an exact
sampler).

**``dpi-sound``: the sound variant** (§2.10.1's recommendation).  Per slot
the budget ``e_t`` from the same RBA is split evenly over the configured
queries and the ``r`` draws; each draw is the exact exponential mechanism on
``-||y_t - A_j||_1`` over the whole pool (sensitivity 2,
:mod:`.exponential`: no float decides a draw).  The realised units are
charged; by sequential composition and because RBA never hands out an index
twice, the epoch never spends more than ``epsilon``.

**Exhaustion and restarts** (§2.8).  An epoch is exhausted when RBA hands
out nothing (the ranges' queues are empty, or the series' budgets have
fallen below one unit) or, for ``dpi``, when the next sound charge does not
fit.  ``restart="stop"`` then repeats the last release (``skipped``, charged
0, nothing computed from the data) forever; ``restart="epoch"`` starts a new epoch (fresh
weights, RBA and budget; the cumulative histogram is kept) **only if every
registered user's lifetime budget covers everything spent so far plus a
whole new ``epsilon``**, else it stops.  Releases label their epoch.

**Counts view.**  The release's ``values`` is the distribution (sums to 1);
its ``histogram`` is the sum of the drawn synopses' integer counts (scale
``r·n_units``, public), not a count of users: the mechanism releases no
number of users (spec §1.4; nor do the pipeline's release records: their
``registered_users`` is null under a lifetime budget, ``transforms.records``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from transforms.mechanisms.base import (
    Decision,
    Mechanism,
    MechanismParams,
    Release,
    ReleaseKind,
    same_for_every_row,
)
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.budget import (
    UNITS_PER_EPSILON,
    to_epsilon,
    to_fraction,
    to_units,
)
from transforms.mechanisms.domain import Estimate
from transforms.mechanisms.dpi.budgets import (
    DEFAULT_RANGES,
    BudgetSeries,
    ExponentialRBA,
    RangesRBA,
    SequentialRBA,
    learning_rate,
    split_units,
)
from transforms.mechanisms.dpi.exponential import (
    SENSITIVITY,
    PoolDistances,
    exponential_draw,
)
from transforms.mechanisms.dpi.pool import BLOCK, MAX_SEED, SynopsisPool
from transforms.mechanisms.evidence import Draws, every_member_certain
from transforms.mechanisms.public_schedule import DrawRecord, PublicRecord
from transforms.mechanisms.noise import Randomness, insecure_seeded_randomness
from transforms.mechanisms.population import SlotData
from transforms.mechanisms.requirements import LifetimeRequirement, LifetimeRequirements

QUERIES = ("acc", "inst")
"""The accumulative (all slots so far) and instantaneous (this slot) distributions (spec §1.1)."""
RBA_MODES = ("exponential", "ranges", "sequential")
RESTARTS = ("stop", "epoch")
UPDATES = ("sampled", "all")
SOUND_MARGIN = Fraction(1, 1 << 30)
"""Relative margin on the sound figure: covers the float sums the weights are kept in (module doc)."""
_U53 = 1 << 53
_NO_COINS = insecure_seeded_randomness(0)
"""Only for building RBAs to validate their parameters; a running RBA is given the slot's generator."""


def score(distance, lam: float, mu: float):
    """The boosting score ``clip(1 - 2(d - lam)/mu, -1, 1)`` (spec §2.6): +1 within ``lam``, -1 beyond ``lam + mu``."""
    return np.clip(1.0 - 2.0 * (np.asarray(distance, np.float64) - lam) / mu, -1.0, 1.0)


def pdf(histogram: np.ndarray) -> np.ndarray:
    """The normalised histogram; the uniform distribution when it is empty (spec I-14)."""
    total = histogram.sum()
    return np.full(histogram.size, 1.0 / histogram.size) if total == 0 else histogram / total


def _choice(items, name: str, allowed: tuple[str, ...]) -> str:
    if items not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {items!r}")
    return items


def _parse_queries(value) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",")) if isinstance(value, str) else tuple(value)
    if not names or any(q not in QUERIES for q in names) or len(set(names)) != len(names):
        raise ValueError(f"queries must be distinct names among {', '.join(QUERIES)} (e.g. 'acc' or 'acc,inst'), "
                         f"got {value!r}")
    return names


def _parse_ranges(value) -> tuple[tuple[int, int], ...]:
    if isinstance(value, str):  # "1:10000,10000:20000" from a command line
        try:
            value = [tuple(int(x) for x in part.split(":")) for part in value.split(",")]
        except ValueError:
            raise ValueError(f"ranges must read START:STOP,START:STOP,..., got {value!r}") from None
    ranges = tuple(tuple(pair) for pair in value)
    if any(len(pair) != 2 for pair in ranges):
        raise ValueError(f"ranges must be (start, stop) pairs, got {value!r}")
    return tuple((int(a), int(b)) for a, b in ranges)


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True, kw_only=True)
class DPIParams(MechanismParams):
    """DPI's public parameters (spec §2.0; defaults from I-10, the authors' code and the spec's own runs).

    ``epsilon`` is one epoch's lifetime budget; ``lam``/``mu`` the score's
    thresholds (both in ``(0, 1]``); ``zeta`` the series' decay (``> 0``);
    ``pool_size`` N, ``draws`` r (at most N), ``n_units`` the pool's trial count
    (default ``bins``), ``pool_seed`` the pool's **public** seed; ``queries``
    the configured queries (the release's estimate answers the first);
    ``sampled_queries`` s_q; ``rba`` one of exponential (Algorithm 3, ``rate``
    Λ), ranges (Algorithm 4, ``ranges`` of series indices) or sequential;
    ``update`` which synopses are reweighted (I-11); ``restart`` what happens
    once the epoch's budget is spent; ``pool_cache_mb`` the memory the pool's
    counts may be cached in (default 0: regenerated on use, memory one block;
    the releases are the same either way).
    """

    epsilon: float
    lam: float = 0.3
    mu: float = 0.1
    zeta: float = 0.2
    pool_size: int = 2000
    draws: int = 20
    n_units: int | None = None
    pool_seed: int = 0
    queries: tuple[str, ...] | str = ("acc",)
    sampled_queries: int = 1
    rba: str = "exponential"
    rate: float = 1e8
    ranges: tuple[tuple[int, int], ...] | str = DEFAULT_RANGES
    update: str = "sampled"
    restart: str = "stop"
    pool_cache_mb: int = 0
    operational_fields = frozenset({"pool_cache_mb"})

    def __post_init__(self):
        super().__post_init__()
        to_units(self.epsilon, "epsilon")
        for name in ("lam", "mu"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
        if isinstance(self.zeta, bool) or not isinstance(self.zeta, (int, float)) or not self.zeta > 0 \
                or not math.isfinite(self.zeta):
            raise ValueError(f"zeta must be a positive number, got {self.zeta!r}")
        _positive_int(self.pool_size, "pool_size (N)")
        _positive_int(self.draws, "draws (r)")
        if self.draws > self.pool_size:
            raise ValueError(f"the pool (pool_size={self.pool_size}) must be at least as large as draws={self.draws}")
        if self.n_units is not None:
            _positive_int(self.n_units, "n_units")
        if isinstance(self.pool_seed, bool) or not isinstance(self.pool_seed, (int, np.integer)) \
                or not 0 <= self.pool_seed <= MAX_SEED:
            raise ValueError(f"pool_seed must be an integer in [0, 2**128), got {self.pool_seed!r}")
        object.__setattr__(self, "queries", _parse_queries(self.queries))
        sampled = _positive_int(self.sampled_queries, "sampled_queries")
        if sampled > len(self.queries):
            raise ValueError(f"sampled_queries={sampled} exceeds the {len(self.queries)} configured queries")
        _choice(self.rba, "rba", RBA_MODES)
        _choice(self.update, "update", UPDATES)
        _choice(self.restart, "restart", RESTARTS)
        object.__setattr__(self, "ranges", _parse_ranges(self.ranges))
        if isinstance(self.pool_cache_mb, bool) or not isinstance(self.pool_cache_mb, (int, np.integer)) \
                or self.pool_cache_mb < 0:
            raise ValueError(f"pool_cache_mb must be a non-negative integer (0: no cache), got {self.pool_cache_mb!r}")
        ExponentialRBA(self.series, self.rate, _NO_COINS)  # validate rate and ranges, whichever RBA runs
        RangesRBA(self.series, self.ranges, _NO_COINS)

    @cached_property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")

    @cached_property
    def series(self) -> BudgetSeries:
        return BudgetSeries(self.epsilon, self.mu, self.zeta, SENSITIVITY)

    @cached_property
    def pool(self) -> SynopsisPool:
        return SynopsisPool(self.bins, self.pool_size, int(self.pool_seed), self.n_units)

    def rba_factory(self, rng: Randomness | None):
        """A fresh RBA of the configured mode over the series (its coins from ``rng``, set each slot)."""
        if self.rba == "exponential":
            return ExponentialRBA(self.series, self.rate, rng)
        if self.rba == "ranges":
            return RangesRBA(self.series, self.ranges, rng)
        return SequentialRBA(self.series, rng)

    @classmethod
    def fitted(cls, *, epsilon: float | None, window: int | None, max_window: int | None) -> dict:
        if epsilon is None:
            raise ValueError("dpi: one lifetime budget for everyone; give epsilon (no window: it is never replenished)")
        return {"epsilon": epsilon}

    @classmethod
    def from_requirements(cls, requirements, bins: int, **common) -> DPIParams:
        """The smallest lifetime budget of ``requirements`` (windowed requirements are refused)."""
        if not isinstance(requirements, LifetimeRequirements):
            raise ValueError("dpi takes lifetime budgets (lifetime:E), not windowed requirements")
        return cls.from_options(bins, epsilon=to_epsilon(int(requirements.epsilon_units.min())), **common)

    @property
    def shared_epsilon(self) -> float | None:
        return self.epsilon


class _DPI(Mechanism):
    """What both variants share: the cumulative histogram, the RBA, epochs, charges and the release."""

    requirement_kind = LifetimeRequirements
    params_type = DPIParams
    params: DPIParams
    samples_cohorts = False
    estimates = Estimate.DISTRIBUTION

    def __init__(self, params: DPIParams):
        super().__init__(params)
        self.cumulative = np.zeros(params.bins, np.int64)
        self.epoch, self.total_units, self.exhausted = 1, 0, False
        self.outputs = np.zeros((len(params.queries), params.bins), np.int64)  # counts of each query's release
        self._matrix: np.ndarray | None = None
        self._memo: dict = {}  # the last distances computed, by truth (shared with share_pool)
        self._given_counts: np.ndarray | None = None
        self._new_epoch()
        if isinstance(params.default_requirement, LifetimeRequirement):
            self.validate_requirements(LifetimeRequirements.uniform(params.default_requirement, 1))

    # -- what a variant provides -------------------------------------------------------------------------------
    def _new_epoch(self) -> None:
        """Fresh epoch state: the RBA and the epoch's spent totals (a variant adds its weights)."""
        self.rba = self.params.rba_factory(None)
        self.claimed_units = 0  # the sum of the slot budgets RBA handed out (the paper's claim)
        self.spent_units = 0    # what was charged in this epoch

    def _run(self, data: SlotData, truths: list[np.ndarray], units: int, rng: Randomness):
        """The slot's draws and updates: ``(counts per query, charged units, statistics)`` or None when the
        epoch cannot afford the slot."""
        raise NotImplementedError

    # -- shared pieces -------------------------------------------------------------------------------------------
    def validate_requirements(self, requirements: LifetimeRequirements, users: np.ndarray | None = None) -> None:
        """A lifetime budget must cover the most anyone can be charged by the end of this epoch: ``epsilon`` in
        the first, everything charged so far plus what the epoch has left after a restart."""
        need = self.total_units + self.params.epsilon_units - self.spent_units
        short = requirements.epsilon_units < need
        if short.any():
            i = int(np.argmax(short))
            who = "a user" if users is None else f"user {int(users[i])}"
            raise ValueError(f"{who} has a lifetime budget of {to_epsilon(int(requirements.epsilon_units[i]))}, "
                             f"below the {to_epsilon(need)} {self.name} may charge by the end of this epoch "
                             f"(epsilon={self.params.epsilon}); run it with the smallest E_i")

    def counts(self, j) -> np.ndarray:
        """Pool candidates' counts (rows), from the cache when the pool fits in ``pool_cache_mb``."""
        matrix = self.pool_matrix()
        if matrix is not None:
            return matrix[j]
        pool = self.params.pool
        return pool.counts_of(j) if np.ndim(j) else pool.counts(int(j))

    def pool_matrix(self) -> np.ndarray | None:
        """Every candidate's counts, built once on first use when ``N·k`` fits the cache (else None)."""
        p = self.params
        pool = p.pool
        kind = np.uint16 if pool.n_units < 1 << 16 else np.int64
        if pool.size * pool.k * np.dtype(kind).itemsize > p.pool_cache_mb << 20:
            return None
        if self._matrix is None:
            matrix = np.empty((pool.size, pool.k), kind)
            for start, block in pool.blocks():
                matrix[start:start + len(block)] = block
            matrix.flags.writeable = False
            self._matrix = matrix
        return self._matrix

    def distances(self, truth: np.ndarray) -> PoolDistances:
        """The exact l1 numerators of ``pdf(truth)`` to the pool's entries (:class:`.exponential.PoolDistances`),
        each block measured when a draw first proposes one of its candidates, from the cache or regenerated.

        The last one is kept by truth: mechanisms that share the pool (:meth:`share_pool`) and see the same
        truth in lock step (an evaluation over several budgets) measure each block once; the numbers are the
        same."""
        key = np.asarray(truth, np.int64).tobytes()
        if self._memo.get("key") != key:
            matrix = self.pool_matrix()
            block_rows = None if matrix is None else (lambda b: matrix[b * BLOCK:(b + 1) * BLOCK])
            self._memo.update(key=key, value=PoolDistances(truth, self.params.pool, block_rows))
        return self._memo["value"]

    def share_pool(self, other: _DPI) -> None:
        """Use ``other``'s pool cache and distance memo (the same public pool: read-only, never data-dependent
        state), so that many mechanisms over one pool hold it once."""
        if other.params.pool != self.params.pool:
            raise ValueError("share_pool needs the same pool (k, pool_size, pool_seed, n_units)")
        self._matrix, self._memo = other.pool_matrix(), other._memo

    def step_counts(self, counts, rng: Randomness, batch: SlotBatch | None = None) -> Release:
        """One slot whose data are ``batch``'s records plus ``counts[i]`` one-record users in bin ``i`` that are
        not tracked one by one (an evaluation at 10^6 records a slot feeds the count vector, which is all the
        mechanism reads).  The release is the one a batch of those users would get; the charges go to the
        registered users, each charged what every record's user would be (all are charged alike)."""
        counts = np.asarray(counts)
        if counts.shape != (self.params.bins,) or counts.dtype.kind not in "iu" or (counts < 0).any():
            raise ValueError(f"counts must be {self.params.bins} non-negative integers, one per bin")
        self._given_counts = counts.astype(np.int64)
        try:
            return self.step(SlotBatch.empty() if batch is None else batch, rng)
        finally:
            self._given_counts = None

    def truths(self, histogram: np.ndarray) -> list[np.ndarray]:
        """Each configured query's true count vector (read only by the draws and the updates)."""
        return [self.cumulative if q == "acc" else histogram for q in self.params.queries]

    def _restartable(self) -> bool:
        """Whether every registered user's lifetime budget covers all spent so far plus a whole new epoch."""
        if self.params.restart != "epoch" or self.claimed_units == 0:  # an epoch that spent nothing ends it all
            return False
        requirements = self.in_force_requirements().epsilon_units
        need = self.total_units + self.params.epsilon_units
        return requirements.size == 0 or int(requirements.min()) >= need

    def decide(self, data: SlotData, rng: Randomness) -> Decision:
        p = self.params
        histogram = data.cells.histogram(p.bins)
        if self._given_counts is not None:
            histogram = histogram + self._given_counts
        self.cumulative = self.cumulative + histogram
        self._slot_figures = {}
        self._slot_draws: tuple[DrawRecord, ...] = ()
        ran = None
        while not self.exhausted:
            self.rba.rng = rng
            index, units = self.rba.next()
            ran = self._run(data, self.truths(histogram), units, rng) if units > 0 else None
            if ran is not None:
                break
            if self._restartable():  # the epoch is spent: a new one, if everyone's lifetime budget covers it
                self.epoch += 1
                self._new_epoch()
            else:
                self.exhausted = True
        self.rba.rng = None  # the slot's generator is not part of the state
        rows = self.population.table.rows
        if ran is None:
            nothing = same_for_every_row(rows, 0)
            return Decision(ReleaseKind.SKIPPED, None, 0, math.nan, nothing, nothing)
        outputs, charged, statistics = ran
        self.outputs = outputs
        self.claimed_units += units
        self.spent_units += charged
        self.total_units += charged
        self._slot_figures = {"eps_t": to_epsilon(units), "series_index": index}
        self._slot_public = {"epoch": self.epoch, "series_index": int(index), "slot_units": int(units)}
        self._slot_draws = tuple(DrawRecord(name, per_draw, count) for name, per_draw, count in statistics)
        return Decision(ReleaseKind.FRESH, outputs[0], charged, math.nan, same_for_every_row(rows, 0),
                        same_for_every_row(rows, charged),
                        tuple(Draws(name, per_draw, count, every_member_certain(rows))
                              for name, per_draw, count in statistics))

    def step(self, batch, rng: Randomness) -> Release:
        release = super().step(batch, rng)
        p = self.params
        figures = {"epoch": self.epoch, "exhausted": float(self.exhausted), **self._figures(),
                   "eps_charged_total": to_epsilon(self.total_units), **self._slot_figures}
        public = PublicRecord(self.name, self.public_params, draws=self._slot_draws,
                              figures=self._slot_public if self._slot_draws else {})
        return dataclasses.replace(release, values=release.histogram / (p.draws * p.pool.n_units), figures=figures,
                                   charges=dataclasses.replace(release.charges, public_record=public))

    @cached_property
    def public_params(self) -> dict:
        """The parameters as plain JSON values: public, what the schedule the ledger checks is built from."""
        return json.loads(self.params.to_json())

    def _figures(self) -> dict[str, float]:
        return {"eps_claimed": to_epsilon(self.claimed_units), "eps_sound_upper": to_epsilon(self.spent_units)}

    # -- state ---------------------------------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        """Pickled without the pool's cache (rebuilt on first use from the public seed)."""
        return {**self.__dict__, "_matrix": None, "_memo": {}}

    def extra_state(self) -> dict[str, np.ndarray]:
        state = {"cumulative": self.cumulative, "outputs": self.outputs,
                 "counters": np.array([self.epoch, self.total_units, int(self.exhausted), self.claimed_units,
                                       self.spent_units], np.int64)}
        state.update({f"rba.{name}": value for name, value in self.rba.state().items()})
        return state

    def load_extra_state(self, state: dict[str, np.ndarray]) -> None:
        self.cumulative = np.array(state["cumulative"], np.int64)
        self.outputs = np.array(state["outputs"], np.int64)
        epoch, total, exhausted, claimed, spent = (int(v) for v in state["counters"])
        self.epoch, self.total_units, self.exhausted = epoch, total, bool(exhausted)
        self._new_epoch()
        self.claimed_units, self.spent_units = claimed, spent
        self.rba.load_state({name[4:]: value for name, value in state.items() if name.startswith("rba.")})


class PaperDPI(_DPI):
    """DPI as the paper defines it, with the spec's corrections; charged its sound upper bound (module doc)."""

    name = "dpi"

    def _new_epoch(self) -> None:
        super()._new_epoch()
        p = self.params
        self.weights = np.zeros((len(p.queries), p.pool_size))  # log-weights of P_A[q]
        self.query_weights = np.zeros(len(p.queries))           # log-weights of P_Q
        self.synopsis_rate_units = np.zeros(len(p.queries), np.int64)  # sum of e_A over the slots q was sampled
        self.query_rate_units = 0                                     # sum of e_Q

    @cached_property
    def _rate_scale(self) -> Fraction:
        """``alpha`` per budget unit: ``mu/(4Δ)`` (mu on the units grid, as the series reads it)."""
        return to_fraction(to_units(self.params.mu, "mu")) / (4 * SENSITIVITY) / UNITS_PER_EPSILON

    def draw_units(self, rate_units: int, per: int = 1) -> int:
        """Units bounding one draw from a distribution whose log-weights moved by ``alpha = scale·rate/per``:
        ``2·s_a·alpha`` (``s_a = min(2, 2Δ/mu)``), with the float margin, rounded up."""
        if rate_units == 0:
            return 0
        s_a = min(Fraction(2), 2 * SENSITIVITY / to_fraction(to_units(self.params.mu, "mu")))
        bound = 2 * s_a * self._rate_scale * rate_units / per * (1 + SOUND_MARGIN) * UNITS_PER_EPSILON
        return math.ceil(bound) + 1

    def sound_statistics(self) -> list[tuple[str, int, int]]:
        """This slot's draws and what each costs, from the weights' cumulative learning rates (before the update)."""
        p = self.params
        per = p.sampled_queries
        statistics = [(f"synopses:{q}", self.draw_units(int(self.synopsis_rate_units[i]), per), p.draws)
                      for i, q in enumerate(p.queries)]
        if per == len(p.queries):  # every query is "sampled" whatever its weight: the draw reveals nothing
            return statistics
        return statistics + [("queries", self.draw_units(self.query_rate_units), per)]

    def _run(self, data, truths, units, rng):
        p = self.params
        statistics = self.sound_statistics()
        charge = sum(per_draw * count for _, per_draw, count in statistics)
        if self.spent_units + charge > p.epsilon_units:
            return None
        e_synopses, e_queries = split_units(units)
        sampled = _sample_without_replacement(self.query_weights, p.sampled_queries, rng)
        drawn = [_sample(self.weights[i], p.draws, rng) for i in range(len(p.queries))]
        unique, positions = np.unique(np.concatenate(drawn), return_inverse=True)
        rows = self.counts(unique).astype(np.int64)  # each drawn candidate once (a lazy pool draws its block once)
        outputs = np.stack([rows[part].sum(axis=0) for part in np.split(positions.ravel(), len(drawn))])
        _, alpha_a, _ = learning_rate(to_epsilon(e_synopses) / len(sampled), p.mu, SENSITIVITY)
        _, alpha_q, _ = learning_rate(to_epsilon(e_queries), p.mu, SENSITIVITY)
        for i in sampled:
            y = pdf(truths[i])
            if p.update == "sampled":
                updated = np.unique(drawn[i])
                candidates = rows[np.searchsorted(unique, updated)]
            else:
                updated = np.arange(p.pool_size)
                candidates = self.counts(updated)
            reweight_synopses(self.weights[i], updated, candidates / p.pool.n_units, y, alpha_a, p.lam, p.mu)
            reweight_query(self.query_weights, i, outputs[i] / (p.draws * p.pool.n_units), y, alpha_q, p.lam, p.mu)
            self.synopsis_rate_units[i] += e_synopses
        self.query_rate_units += e_queries
        return outputs, charge, statistics

    def extra_state(self) -> dict[str, np.ndarray]:
        return {**super().extra_state(), "weights": self.weights, "query_weights": self.query_weights,
                "synopsis_rate_units": self.synopsis_rate_units, "query_rate_units": np.array(self.query_rate_units)}

    def load_extra_state(self, state: dict[str, np.ndarray]) -> None:
        super().load_extra_state(state)
        self.weights = np.array(state["weights"], np.float64)
        self.query_weights = np.array(state["query_weights"], np.float64)
        self.synopsis_rate_units = np.array(state["synopsis_rate_units"], np.int64)
        self.query_rate_units = int(state["query_rate_units"])


class SoundDPI(_DPI):
    """Each slot's synopses drawn by the exact exponential mechanism with the RBA budget (module doc)."""

    name = "dpi-sound"

    def units_per_draw(self, slot_units: int) -> int:
        """The budget of each draw of a slot given ``slot_units``: split evenly over the queries and ``r`` draws."""
        return slot_units // (len(self.params.queries) * self.params.draws)

    def _run(self, data, truths, units, rng):
        p = self.params
        per_draw = self.units_per_draw(units)
        outputs, statistics = [], []
        for q, truth in zip(p.queries, truths):
            distances = self.distances(truth)
            picks = [exponential_draw(distances, distances.denominator, per_draw, rng) for _ in range(p.draws)]
            outputs.append(self.counts(np.asarray(picks)).astype(np.int64).sum(axis=0))
            statistics.append((f"synopses:{q}", per_draw, p.draws))
        return np.stack(outputs), per_draw * p.draws * len(p.queries), statistics

    def _figures(self) -> dict[str, float]:
        spent = to_epsilon(self.spent_units)
        return {"eps_claimed": spent, "eps_sound_upper": spent}


def reweight_synopses(log_weights: np.ndarray, indices: np.ndarray, candidates: np.ndarray, y: np.ndarray,
                      alpha: float, lam: float, mu: float) -> None:
    """``wA[j] += alpha·score(||y - A_j||_1)`` for the (unique) ``indices``, in place: accurate synopses gain (I-8)."""
    log_weights[indices] += alpha * score(np.abs(candidates - y).sum(axis=1), lam, mu)


def reweight_query(log_weights: np.ndarray, query: int, release: np.ndarray, y: np.ndarray, alpha: float, lam: float,
                   mu: float) -> None:
    """``wQ[q] -= alpha·score(||y - O_q||_1)``, in place: accurately answered queries lose weight (I-8, I-12)."""
    log_weights[query] -= alpha * float(score(np.abs(release - y).sum(), lam, mu))


def _uniform(rng: Randomness) -> float:
    """A uniform float in [0, 1) on the 2**53 grid."""
    return rng.randbelow(_U53) / _U53


def _sample(log_weights: np.ndarray, count: int, rng: Randomness) -> np.ndarray:
    """``count`` i.i.d. indices from ``softmax(log_weights)`` (inverse CDF on the unnormalised weights)."""
    cumulative = np.cumsum(np.exp(log_weights - log_weights.max()))
    targets = np.array([_uniform(rng) for _ in range(count)]) * cumulative[-1]
    return np.minimum(np.searchsorted(cumulative, targets, side="right"), log_weights.size - 1)


def _sample_without_replacement(log_weights: np.ndarray, count: int, rng: Randomness) -> list[int]:
    """``count`` distinct indices, each drawn from ``softmax`` of the ones not drawn yet."""
    remaining, picked = list(range(log_weights.size)), []
    for _ in range(count):
        position = int(_sample(log_weights[remaining], 1, rng)[0])
        picked.append(remaining.pop(position))
    return picked


DPI = {m.name: m for m in (PaperDPI, SoundDPI)}
