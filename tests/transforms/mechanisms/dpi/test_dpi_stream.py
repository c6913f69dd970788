"""DPI's slot loop as mechanisms ``dpi`` and ``dpi-sound`` (spec §2.6-§2.10; TV1, TV4, TV7-TV9, TV12-TV15).

TV10 (the privacy audit) is ``tests/benchmarks/test_dpi_audit.py``; TV2, TV3, TV5, TV6 and TV11 are the
foundations' tests next to this file.

Statistical claims are avoided: the reference comparison is an identity
(same seeded generator, same releases; it could only fail spuriously if a
uniform draw fell within a few ulps of a boundary of the float CDF, which
the two implementations may round differently: probability below 1e-12 over
this file).
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import reference_dpi
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.mechanisms import (
    FixedRequirements,
    LifetimeRequirement,
    LifetimeRequirements,
    PrivacyLedger,
    ReleaseKind,
    SlotBatch,
    make_mechanism,
)
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.dpi.budgets import li2, li2_inverse
from transforms.mechanisms.dpi.stream import (
    DPIParams,
    SoundDPI,
    reweight_query,
    reweight_synopses,
    score,
)
from transforms.mechanisms.dpi.theory import (
    kl_divergence,
    multinomial_entropy,
    multinomial_entropy_eq13,
    pdf_mse,
    theorem_5_4_bound,
    utility_bound,
)
from transforms.mechanisms.noise import insecure_seeded_randomness

U = UNITS_PER_EPSILON


def stream(users: int, bins: int, slots: int, seed: int, skew: float = 0.0, presence: float = 0.8,
           budget: float = 2.0):
    """Batches (every user declares ``lifetime:budget`` at slot 1) and each slot's true histogram."""
    gen = np.random.default_rng(seed)
    weights = np.arange(1, bins + 1, dtype=float) ** -skew
    batches, histograms = [], []
    for t in range(slots):
        present = np.flatnonzero(gen.random(users) < presence) if t else np.arange(users)
        values = gen.choice(bins, present.size, p=weights / weights.sum())
        requirements = LifetimeRequirements.of(np.full(users, budget)) if t == 0 else None
        batches.append(SlotBatch.of(present, values, requirements))
        histograms.append(np.bincount(values, minlength=bins))
    return batches, histograms


def run(mechanism, batches, seed=0, ledger=None):
    rng = insecure_seeded_randomness(seed)
    releases = []
    for batch in batches:
        release = mechanism.step(batch, rng)
        if ledger is not None:
            ledger.record(release.slot, release.charges)
        releases.append(release)
    return releases


# ---- Test vectors ---------------------------------------------------------------------------------------------

def test_tv1_score():
    d = [0, 0.05, 0.1, 0.1125, 0.125, 0.1375, 0.15, 0.2, 2.0]
    assert score(d, 0.1, 0.05) == pytest.approx([1, 1, 1, 0.5, 0, -0.5, -1, -1, -1], abs=1e-12)


def test_tv4_the_printed_exponent_spends_twice_the_budget_per_distribution_ours_half():
    """Theorem 5.4 as printed (no factor 2, the full ε in the m² equation) spends 2ε per distribution (4.0 at
    ε=2, both together 8.0); the corrected series used here spends ε/2 per distribution."""
    for mu, zeta in ((0.1, 0.2), (0.5, 1.0)):
        c = 2 / (mu * zeta)
        m2 = li2_inverse(math.pi**2 / 6 - 2.0 / c)
        printed = (2 * 2 / mu) * sum((1 - m2**i) / (zeta * i * i) for i in range(1, 400_000))
        assert printed == pytest.approx(4.0, abs=2e-3)
        series = DPIParams(bins=2, epsilon=2.0, mu=mu, zeta=zeta).series
        assert series.prefix_units(20_000) <= 2 * U
        assert series.prefix_units(20_000) > 1.99 * U


TV7_POOL = np.array([[.25, .25, .25, .25], [.40, .30, .20, .10], [.10, .20, .30, .40], [.70, .10, .10, .10]])
TV7_Y = np.array([.45, .30, .15, .10])


def softmax(w):
    e = np.exp(w - w.max())
    return e / e.sum()


def test_tv7_one_reweighting_step():
    everything = np.zeros(4)
    reweight_synopses(everything, np.arange(4), TV7_POOL, TV7_Y, 0.5, 0.2, 0.1)
    assert everything == pytest.approx([-.5, .5, -.5, -.5])
    assert softmax(everything) == pytest.approx([0.174878, 0.475367, 0.174878, 0.174878], abs=1e-6)
    sampled = np.zeros(4)
    reweight_synopses(sampled, np.array([1, 3]), TV7_POOL[[1, 3]], TV7_Y, 0.5, 0.2, 0.1)
    assert softmax(sampled) == pytest.approx([0.235004, 0.387456, 0.235004, 0.142537], abs=1e-6)
    release = TV7_POOL[[1, 3]].mean(axis=0)
    assert release == pytest.approx([.55, .20, .15, .10])
    assert np.abs(release - TV7_Y).sum() == pytest.approx(0.2)


def test_tv8_query_step():
    w = np.zeros(2)
    y = np.array([.5, .5])
    reweight_query(w, 0, y + [0.025, -0.025], y, 0.5, 0.2, 0.1)   # d = 0.05: score 1
    reweight_query(w, 1, y + [0.13, -0.13], y, 0.5, 0.2, 0.1)     # d = 0.26: score -0.2
    assert w == pytest.approx([-0.5, 0.1])
    assert softmax(w) == pytest.approx([0.354344, 0.645656], abs=1e-6)


def test_tv9_metrics():
    p, q = [.45, .30, .15, .10], [.40, .30, .20, .10]
    assert pdf_mse(q, p) == pytest.approx(0.00125)
    assert kl_divergence(p, q) == pytest.approx(0.00985006, abs=1e-8)
    assert math.isfinite(kl_divergence([.5, .5], [1.0, 0.0]))  # T-6: a zero bin is smoothed, not infinite


@pytest.mark.parametrize("epsilon, mu, zeta, bound", [(2, .5, 1, 0.99960), (10, .5, 1, 0.97056), (2, .1, .2, 1.0)])
def test_tv12_utility_bound(epsilon, mu, zeta, bound):
    assert utility_bound(epsilon, mu, zeta, terms=50_000) == pytest.approx(bound, abs=6e-5)


@pytest.mark.parametrize("epsilon, mu, zeta, m2, bound", [(2, .1, .2, 0.99707807, 0.0300681),
                                                          (2, .5, 1, 0.83373125, 0.185987)])
def test_tv13_theorem_5_4_bound(epsilon, mu, zeta, m2, bound):
    assert theorem_5_4_bound(epsilon, mu, zeta) == pytest.approx((m2, bound), abs=1e-6)


@pytest.mark.parametrize("n, k, exact, eq13", [(50, 3, 5.0984, 5.1020), (200, 3, 6.4874, 6.4883),
                                                 (30, 5, 8.4162, 8.4546)])
def test_tv14_multinomial_entropy(n, k, exact, eq13):
    assert multinomial_entropy(n, k) == pytest.approx(exact, abs=1e-4)
    assert multinomial_entropy_eq13(n, k) == pytest.approx(eq13, abs=1e-4)


def test_tv15_dilogarithm_constants():
    assert li2(1.0) == pytest.approx(1.6449340668, abs=1e-10)
    assert li2(0.5) == pytest.approx(0.5822405265, abs=1e-10)


# ---- The reference ------------------------------------------------------------------------------------------

CASES = [
    ("dpi", {"rba": "ranges", "queries": "acc,inst"}),
    ("dpi", {"rba": "exponential", "queries": "acc", "update": "all"}),
    ("dpi", {"rba": "sequential", "queries": "inst,acc", "sampled_queries": 2}),
    ("dpi", {"rba": "ranges", "ranges": "1:4,10:12", "queries": "acc", "epsilon": 4.0, "mu": 0.5, "zeta": 1.0}),
    ("dpi-sound", {"rba": "ranges", "queries": "acc,inst"}),
    ("dpi-sound", {"rba": "exponential", "queries": "inst"}),
    ("dpi-sound", {"rba": "ranges", "ranges": "1:3,5:6", "queries": "acc"}),
]


@pytest.mark.parametrize("name, kwargs", CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_the_mechanism_matches_the_per_slot_reference(name, kwargs, seed):
    """Same seeded generator, same releases, charges and claims as the loops written from the spec."""
    kwargs = {"epsilon": 2.0, "pool_size": 40, "draws": 5, "lam": 0.3, "mu": 0.1, "zeta": 0.2, **kwargs}
    batches, histograms = stream(users=30, bins=6, slots=25, seed=seed, skew=1.5 * (seed - 1),
                                 budget=kwargs["epsilon"])
    mechanism = make_mechanism(name, bins=6, **kwargs)
    reference = (reference_dpi.paper if name == "dpi" else reference_dpi.sound)(
        mechanism.params, histograms, insecure_seeded_randomness(seed))
    claimed = charged = 0
    for release, expected in zip(run(mechanism, batches, seed), reference):
        if expected is None:
            assert release.kind is ReleaseKind.SKIPPED and release.charges.units.max() == 0
            continue
        outputs, charge, units = expected
        claimed, charged = claimed + units, charged + charge
        assert release.kind is ReleaseKind.FRESH
        assert np.array_equal(mechanism.outputs, outputs) if release.slot == len(reference) else True
        assert release.histogram.tolist() == outputs[0], release.slot
        assert set(release.charges.units.tolist()) == {charge}
        assert release.figures["eps_claimed"] == pytest.approx(claimed / U) if name == "dpi" else True
        assert release.figures["eps_sound_upper"] == pytest.approx(charged / U)
    if kwargs.get("ranges") is not None:
        assert reference[-1] is None  # the short ranges ran out: exhaustion was compared too


# ---- Budgets and the ledger ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
@pytest.mark.parametrize("rba", ["ranges", "exponential", "sequential"])
def test_no_prefix_ever_exceeds_the_lifetime_budget(name, rba):
    batches, _ = stream(users=40, bins=5, slots=60, seed=3, skew=1.0, budget=1.5)
    mechanism = make_mechanism(name, bins=5, epsilon=1.5, pool_size=50, draws=4, rba=rba, queries="acc,inst")
    ledger = PrivacyLedger(1)
    releases = run(mechanism, batches, 4, ledger)
    assert ledger.ok, [str(v) for v in ledger.violations[:3]]
    spent = np.cumsum([int(r.charges.units.max()) for r in releases])
    assert spent[-1] <= 1.5 * U
    assert releases[-1].figures["eps_charged_total"] == pytest.approx(spent[-1] / U)
    assert ledger.window_sum(0, 1, 60) == spent[-1]
    assert all(abs(r.values.sum() - 1) < 1e-12 for r in releases)


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(["dpi", "dpi-sound"]), rba=st.sampled_from(["ranges", "exponential", "sequential"]),
       restart=st.sampled_from(["stop", "epoch"]), seed=st.integers(0, 2**16), epsilon=st.sampled_from([0.3, 1.0]),
       extra=st.lists(st.sampled_from([0.0, 0.4, 1.5]), min_size=3, max_size=3))
def test_no_user_ever_exceeds_their_lifetime_budget_with_joiners_and_restarts(name, rba, restart, seed, epsilon,
                                                                                extra):
    """Users with different lifetime budgets (ε plus 0, 0.4 or 1.5), three of them joining late, redeclaring
    nothing; short RBA ranges so that epochs end: the ledger finds no prefix over any user's budget."""
    gen = np.random.default_rng(seed)
    mechanism = make_mechanism(name, bins=3, epsilon=epsilon, pool_size=12, draws=3, rba=rba, ranges="1:4,30:32",
                               restart=restart, queries="acc,inst")
    ledger, rng = PrivacyLedger(1), insecure_seeded_randomness(seed)
    budgets = [epsilon + e for e in extra]
    users = [0, 1, 2]
    for t in range(30):
        batch = SlotBatch.of(users, gen.integers(0, 3, len(users)), LifetimeRequirements.of(budgets) if t == 0
                             else None)
        if t == 10:  # joiners, refused when their budget is below what the epoch may still charge them
            joiners = SlotBatch.of([3, 4, 5], gen.integers(0, 3, 3), LifetimeRequirements.of(budgets))
            need = mechanism.total_units + mechanism.params.epsilon_units - mechanism.spent_units
            if min(joiners.requirements.epsilon_units) >= need:
                batch, users = joiners, users + [3, 4, 5]
            else:
                with pytest.raises(ValueError, match="below"):
                    mechanism.step(joiners, rng)
        release = mechanism.step(batch, rng)
        ledger.record(release.slot, release.charges)
    assert ledger.ok, [str(v) for v in ledger.violations[:3]]
    assert release.figures["eps_charged_total"] <= max(budgets)


def test_the_papers_variant_stops_when_its_sound_figure_would_overspend():
    """With the front-loaded ranges RBA the claimed ε stays below 1 while the sound figure reaches ε and the
    mechanism stops: skipped releases repeating the last one, charged nothing."""
    batches, _ = stream(users=20, bins=4, slots=40, seed=5, budget=2.0)
    mechanism = make_mechanism("dpi", bins=4, epsilon=2.0, pool_size=30, draws=20, rba="ranges")
    ledger = PrivacyLedger(1)
    releases = run(mechanism, batches, 6, ledger)
    stopped = [r for r in releases if r.kind is ReleaseKind.SKIPPED]
    assert stopped and all(r.charges.units.max() == 0 for r in stopped)
    assert all(np.array_equal(r.histogram, stopped[0].histogram) for r in stopped)
    assert stopped[-1].figures["exhausted"] == 1.0
    assert stopped[-1].figures["eps_claimed"] < stopped[-1].figures["eps_sound_upper"] <= 2.0
    assert ledger.ok


class Undercharging(SoundDPI):
    """Charges one unit less than its draws cost: the ledger must notice from the evidence."""

    name = "dpi-sound"

    def _run(self, data, truths, units, rng):
        outputs, charged, statistics = super()._run(data, truths, units, rng)
        return outputs, max(charged - 1, 0), statistics


def test_the_ledger_checks_charges_from_the_draws_evidence():
    batches, _ = stream(users=10, bins=3, slots=5, seed=7)
    mechanism = Undercharging(DPIParams(bins=3, epsilon=2.0, pool_size=20, draws=3, rba="ranges"))
    ledger = PrivacyLedger(1)
    run(mechanism, batches, 0, ledger)
    assert {v.kind for v in ledger.violations} == {"undercharged"}


def test_a_lifetime_budget_that_an_epoch_would_exceed_is_refused():
    mechanism = make_mechanism("dpi-sound", bins=3, epsilon=2.0, pool_size=20, draws=2)
    with pytest.raises(ValueError, match="user 4 has a lifetime budget of 1.0, below the 2.0 dpi-sound may charge"):
        mechanism.step(SlotBatch.of([3, 4], [0, 1], LifetimeRequirements.of([2.0, 1.0])),
                       insecure_seeded_randomness(0))
    with pytest.raises(ValueError, match="takes LifetimeRequirements"):
        mechanism.step(SlotBatch.of([3], [0], FixedRequirements.of([2], [2.0])), insecure_seeded_randomness(0))
    with pytest.raises(ValueError, match="below"):
        make_mechanism("dpi", bins=3, epsilon=2.0, default_requirement=LifetimeRequirement(1.0))
    assert mechanism.slot == 0


# ---- Restarts ------------------------------------------------------------------------------------------------

def short_ranges(name, restart, budget, slots=40):
    batches, _ = stream(users=12, bins=3, slots=slots, seed=8, budget=budget)
    mechanism = make_mechanism(name, bins=3, epsilon=1.0, pool_size=20, draws=2, rba="ranges", ranges="1:5",
                               restart=restart)
    ledger = PrivacyLedger(1)
    return run(mechanism, batches, 1, ledger), ledger


@pytest.mark.parametrize("name", ["dpi-sound", "dpi"])
def test_restart_stop_skips_forever_and_epoch_restarts_while_every_budget_covers_it(name):
    """Four series indices per epoch: ``stop`` ends after them; ``epoch`` starts labelled epochs while every
    user's lifetime 2.5 covers all spent plus a whole new ε = 1.0, then stops (dpi-sound spends ~0.25 an epoch
    and stops in its seventh; dpi's sound charges are smaller and it is still running)."""
    stopped, ledger = short_ranges(name, "stop", 2.5)
    assert ledger.ok and {r.figures["epoch"] for r in stopped} == {1}
    assert [r.kind for r in stopped[4:]] == [ReleaseKind.SKIPPED] * (len(stopped) - 4)
    restarted, ledger = short_ranges(name, "epoch", 2.5)
    epochs = [r.figures["epoch"] for r in restarted]
    assert epochs == sorted(epochs) and epochs[-1] >= 3 and ledger.ok
    for release in restarted:
        total = release.figures["eps_charged_total"]
        assert total <= 2.5
        if release.kind is ReleaseKind.SKIPPED:
            assert release.figures["exhausted"] == 1.0 and total + 1.0 > 2.5  # another epoch could overspend
    if name == "dpi-sound":
        assert restarted[-1].kind is ReleaseKind.SKIPPED  # power: the stop after the epochs was reached


def test_after_a_restart_a_new_budget_must_cover_what_was_charged_and_the_epoch_left():
    batches, _ = stream(users=12, bins=3, slots=6, seed=8, budget=5.0)
    mechanism = make_mechanism("dpi-sound", bins=3, epsilon=1.0, pool_size=20, draws=2, rba="ranges", ranges="1:3",
                               restart="epoch")
    releases = run(mechanism, batches, 1)
    assert releases[-1].figures["epoch"] == 3
    need = mechanism.total_units + mechanism.params.epsilon_units - mechanism.spent_units
    assert U < need < 3 * U
    with pytest.raises(ValueError, match="user 20 has a lifetime budget of 1.0, below"):
        mechanism.step(SlotBatch.of([20], [0], LifetimeRequirements.of([1.0])), insecure_seeded_randomness(0))
    mechanism.step(SlotBatch.of([20], [0], LifetimeRequirements.of([need / U])), insecure_seeded_randomness(0))


# ---- State, pool cache, parameters ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
@pytest.mark.parametrize("rba", ["exponential", "ranges", "sequential"])
def test_a_checkpoint_round_trip_continues_identically(name, rba):
    batches, _ = stream(users=15, bins=4, slots=30, seed=9, budget=4.0)
    kwargs = {"bins": 4, "epsilon": 1.0, "pool_size": 25, "draws": 3, "rba": rba, "queries": "acc,inst",
              "restart": "epoch", "ranges": "1:6,20:22"}
    full = run(make_mechanism(name, **kwargs), batches, 2)
    first, rng = make_mechanism(name, **kwargs), insecure_seeded_randomness(2)
    head = [first.step(b, rng) for b in batches[:12]]
    saved_rng = pickle.dumps(rng)
    for resumed in (type(first).from_bytes(first.params, first.to_bytes()), pickle.loads(pickle.dumps(first))):
        resumed_rng = pickle.loads(saved_rng)
        tail = [resumed.step(b, resumed_rng) for b in batches[12:]]
        for a, b in zip(full, head + tail):
            assert (a.slot, a.kind) == (b.slot, b.kind)
            assert np.array_equal(a.histogram, b.histogram)
            assert a.figures == b.figures
            assert np.array_equal(a.charges.units, b.charges.units)


@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
def test_the_lazy_pool_gives_the_cached_pools_releases(name):
    batches, _ = stream(users=10, bins=5, slots=8, seed=10)
    kwargs = {"bins": 5, "epsilon": 2.0, "pool_size": 30, "draws": 4, "rba": "ranges"}
    cached = make_mechanism(name, pool_cache_mb=1, **kwargs)
    lazy = make_mechanism(name, **kwargs)  # the default: regenerated block by block every slot
    for a, b in zip(run(cached, batches, 3), run(lazy, batches, 3)):
        assert np.array_equal(a.histogram, b.histogram)
    assert cached._matrix is not None and lazy._matrix is None
    truth = np.arange(5) * 7
    lazy_distances, cached_distances = lazy.distances(truth), cached.distances(truth)
    assert lazy.distances(truth) is lazy_distances  # memoised by truth
    assert list(lazy_distances) == list(cached_distances) and lazy_distances.denominator == 70 * 5


def records_of(counts) -> SlotBatch:
    """One one-record user per count (users 0..n-1), as the evaluation's records are users."""
    return SlotBatch.of(range(int(counts.sum())), np.repeat(np.arange(counts.size), counts))


@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
def test_feeding_counts_releases_what_a_batch_of_one_record_users_would(name):
    """``step_counts`` (the evaluation at 10^6 records a slot) against the same records as users: the same
    releases and figures; the one registered user is charged what each record's user is."""
    gen = np.random.default_rng(4)
    counts = [gen.integers(0, 6, 5) for _ in range(10)]
    kwargs = {"bins": 5, "epsilon": 2.0, "pool_size": 30, "draws": 4, "rba": "ranges",
              "default_requirement": LifetimeRequirement(2.0)}
    by_records, by_counts = make_mechanism(name, **kwargs), make_mechanism(name, **kwargs)
    one = SlotBatch.of([0], [-1])  # a registered user without a value (NO_VALUE)
    rng_a, rng_b = insecure_seeded_randomness(5), insecure_seeded_randomness(5)
    ledger = PrivacyLedger(1)
    for c in counts:
        a, b = by_records.step(records_of(c), rng_a), by_counts.step_counts(c, rng_b, one)
        ledger.record(b.slot, b.charges)
        assert np.array_equal(a.histogram, b.histogram) and a.figures == b.figures and a.kind == b.kind
        assert set(a.charges.units.tolist()) <= {b.epsilon_units} and b.charges.units.tolist() == [b.epsilon_units]
    assert ledger.ok and np.array_equal(by_records.cumulative, by_counts.cumulative)
    with pytest.raises(ValueError, match="non-negative integers"):
        by_counts.step_counts(np.array([1, -1, 0, 0, 0]), rng_b)
    with pytest.raises(ValueError, match="non-negative integers"):
        by_counts.step_counts(np.ones(4, np.int64), rng_b)


def test_mechanisms_sharing_a_pool_release_what_each_would_alone():
    """Budgets in lock step over one stream share the pool's cache and distances (computed once a slot)."""
    gen = np.random.default_rng(8)
    counts = [gen.integers(0, 9, 6) for _ in range(8)]
    kwargs = {"bins": 6, "pool_size": 40, "draws": 3, "rba": "ranges"}
    alone = {e: make_mechanism("dpi-sound", epsilon=e, **kwargs) for e in (0.5, 4.0)}
    shared = {e: make_mechanism("dpi-sound", epsilon=e, **kwargs) for e in (0.5, 4.0)}
    shared[4.0].share_pool(shared[0.5])
    assert shared[4.0]._matrix is shared[0.5]._matrix and shared[4.0]._memo is shared[0.5]._memo
    rngs = {(kind, e): insecure_seeded_randomness(1) for kind in ("alone", "shared") for e in (0.5, 4.0)}
    for c in counts:
        for e in (0.5, 4.0):
            a = alone[e].step_counts(c, rngs["alone", e])
            b = shared[e].step_counts(c, rngs["shared", e])
            assert np.array_equal(a.histogram, b.histogram) and a.figures == b.figures
    with pytest.raises(ValueError, match="same pool"):
        make_mechanism("dpi-sound", epsilon=1.0, **{**kwargs, "pool_seed": 3}).share_pool(shared[0.5])


def test_empty_slots_release_and_charge_like_any_other():
    mechanism = make_mechanism("dpi-sound", bins=3, epsilon=1.0, pool_size=10, draws=2, rba="sequential",
                               queries="inst")
    batches = [SlotBatch.empty(), SlotBatch.of([7], [2], LifetimeRequirements.of([1.0])), SlotBatch.empty()]
    releases = run(mechanism, batches)
    assert [r.kind for r in releases] == [ReleaseKind.FRESH] * 3
    assert list(releases[0].charges.users) == [] and list(releases[2].charges.users) == [7]
    assert releases[2].charges.units.tolist() == [releases[2].epsilon_units] and releases[2].epsilon_units > 0


@pytest.mark.parametrize("kwargs, message", [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"), ({"lam": 0.0}, "lam"), ({"lam": 1.5}, "lam"),
    ({"mu": 0.0}, "mu"), ({"mu": 2.0}, "mu"), ({"zeta": 0.0}, "zeta"), ({"bins": 0}, "bins"),
    ({"pool_size": 10, "draws": 11}, "pool"), ({"queries": "acc,sum"}, "queries"), ({"rba": "random"}, "rba"),
    ({"restart": "never"}, "restart"), ({"update": "some"}, "update"), ({"ranges": "5:1"}, "ranges"),
    ({"rate": -1.0}, "rate"), ({"sampled_queries": 2}, "sampled_queries"), ({"pool_seed": -1}, "pool_seed"),
    ({"pool_cache_mb": -1}, "pool_cache_mb"),
])
@pytest.mark.parametrize("name", ["dpi", "dpi-sound"])
def test_bad_parameters_fail_with_one_line(name, kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        make_mechanism(name, **{"bins": 3, "epsilon": 1.0, **kwargs})
    assert "\n" not in str(error.value)


def test_a_record_outside_the_domain_is_refused_before_anything_changes():
    mechanism = make_mechanism("dpi", bins=3, epsilon=1.0, pool_size=10, draws=2)
    with pytest.raises(ValueError, match="values must be bins"):
        mechanism.step(SlotBatch.of([0], [3], LifetimeRequirements.of([1.0])), insecure_seeded_randomness(0))
    assert mechanism.slot == 0 and not mechanism.cumulative.any()
