"""Simulated users: per-user reports and the aggregate shortcut agree in distribution; the estimators are unbiased.

False-failure budget: each statistical assertion here has false-failure probability (FFP) ``ALPHA = 1e-7``
when the implementation is right (or, for a power rejection, a miss probability below ``POWER_MISS``); there
are 43 of them, so their joint FFP is below 4.3e-6 (the large-batch check states its own).  Every test of
a null hypothesis has a power check: the same test applied to draws from a deliberately wrong oracle
(eps 20% off; 50% for the two-sample test of the joint counts, which has hundreds of degrees of freedom) must
reject, and its miss probability is computed (noncentral chi-square or normal) and
asserted below ``POWER_MISS = 1e-7``.  The generator is the secure one, so the draws are fresh every run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import transforms.mechanisms.ldp.simulate as simulate_module

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp import aggregate_counts, ldp_variance, locsan, oracle_for, perturb_values, report_counts
from transforms.mechanisms.ldp.oracles import FrequencyOracle
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness

ALPHA = 1e-7
POWER_MISS = 1e-7
REPEATS = 20_000
BATCH = {"grr": np.array([6, 3, 1, 0, 2]), "oue": np.array([5, 3, 2, 0])}  # true counts of a small batch
LARGE_BATCH = {"grr": np.array([3000, 400, 300, 0]), "oue": np.array([1500, 700, 300, 0])}
"""Batches whose aggregate draws take every path of the binomials: rejection around the mode (GRR's kept reports
of value 0 and the ~1600 it moves, split in thirds; OUE's Binomial(1500, 1/2) and q cells of 2200 and 2500),
bit-level splits (OUE's q cell of 1800, whose mode 484 is under 512) and explicit coins (cells under 1024)."""


def _marginal_pmf(oracle: FrequencyOracle, m: np.ndarray, k: int) -> np.ndarray:
    """Exact law of C'[k]: Binomial(m[k], p) + Binomial(n' - m[k], q) (spec §3.5), as floats."""
    n = int(m.sum())
    own = stats.binom.pmf(np.arange(m[k] + 1), m[k], float(oracle.p))
    rest = stats.binom.pmf(np.arange(n - m[k] + 1), n - m[k], float(oracle.q))
    return np.convolve(own, rest)


def _pooled(expected: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge cells with expected count < 5 into one, so the chi-square approximation holds."""
    small = expected < 5
    if not small.any():
        return expected, observed
    return (np.append(expected[~small], expected[small].sum()), np.append(observed[~small], observed[small].sum()))


def _gof_pvalue(samples: np.ndarray, pmf: np.ndarray) -> float:
    observed = np.bincount(samples, minlength=pmf.size)
    expected, observed = _pooled(pmf * samples.size, observed)
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


def _gof_power_miss(pmf: np.ndarray, wrong_pmf: np.ndarray, n: int) -> float:
    """Probability that the GOF test against ``pmf`` accepts ``n`` draws from ``wrong_pmf`` (noncentral chi2)."""
    expected, wrong = _pooled(pmf * n, wrong_pmf * n)
    df = expected.size - 1
    noncentrality = float(((wrong - expected) ** 2 / expected).sum())
    return float(stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality))


def _per_user_counts(oracle: FrequencyOracle, m: np.ndarray, repeats: int, rng) -> np.ndarray:
    """C' of ``repeats`` independent batches simulated user by user (vectorised, about 2**20 reports a call)."""
    step = max(1, (1 << 20) // int(m.sum() * (1 if oracle.kind == "grr" else oracle.d)))
    if repeats > step:
        return np.concatenate([_per_user_counts(oracle, m, min(step, repeats - start), rng)
                               for start in range(0, repeats, step)])
    values = np.tile(np.repeat(np.arange(oracle.d), m), repeats)
    reports = perturb_values(oracle, values, rng)
    n = int(m.sum())
    if oracle.kind == "grr":
        batch = np.repeat(np.arange(repeats), n)
        return np.bincount(batch * oracle.d + reports, minlength=repeats * oracle.d).reshape(repeats, oracle.d)
    return reports.reshape(repeats, n, oracle.d).sum(axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grr", "oue"])
def test_aggregate_and_per_user_simulation_have_the_same_law(kind):
    """Both paths fit the exact law of every C'[k], and their joint C' vectors are homogeneous."""
    rng = secure_randomness()
    m = BATCH[kind]
    oracle = oracle_for(to_units("1"), m.size, kind)
    per_user = _per_user_counts(oracle, m, REPEATS, rng)
    aggregate = np.array([aggregate_counts(oracle, m, rng) for _ in range(REPEATS)])
    if kind == "grr":
        assert (per_user.sum(axis=1) == m.sum()).all()  # one report per reporter
    for k in (0, m.size - 1):  # the most and the least held value
        pmf = _marginal_pmf(oracle, m, k)
        assert _gof_pvalue(per_user[:, k], pmf) > ALPHA
        assert _gof_pvalue(aggregate[:, k], pmf) > ALPHA
    assert _homogeneity(per_user, aggregate)[0] > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grr", "oue"])
def test_aggregate_and_per_user_agree_where_the_binomials_reject(kind, monkeypatch):
    """On batches of a few thousand, the aggregate forced onto its binomials (which run their rejection
    sampler there): both paths fit the exact law of C'[0] and C'[d-1] and their C'[0] are homogeneous.
    Power: per-user draws of the oracle at eps = 1.05 fail the fit (its miss probability is computed)."""
    monkeypatch.setattr(simulate_module, "GRR_PER_REPORTER_MAX", 0)
    monkeypatch.setattr(simulate_module, "OUE_PER_COIN_MAX", 0)
    rng = secure_randomness()
    m = LARGE_BATCH[kind]
    oracle = oracle_for(to_units("1"), m.size, kind)
    repeats = 3000
    per_user = _per_user_counts(oracle, m, repeats, rng)
    aggregate = np.array([aggregate_counts(oracle, m, rng) for _ in range(repeats)])
    if kind == "grr":
        assert (aggregate.sum(axis=1) == m.sum()).all()
    for k in (0, m.size - 1):
        pmf = _marginal_pmf(oracle, m, k)
        assert _gof_pvalue(per_user[:, k], pmf) > ALPHA
        assert _gof_pvalue(aggregate[:, k], pmf) > ALPHA
    assert _homogeneity(per_user[:, :1], aggregate[:, :1])[0] > ALPHA
    wrong = oracle_for(to_units("1.05"), m.size, kind)
    pmf = _marginal_pmf(oracle, m, 0)
    assert _gof_power_miss(pmf, _marginal_pmf(wrong, m, 0), repeats) < POWER_MISS
    wrong_counts = _per_user_counts(wrong, m, repeats, rng)
    assert _gof_pvalue(wrong_counts[:, 0], pmf) <= ALPHA


def _homogeneity(first: np.ndarray, second: np.ndarray) -> tuple[float, int]:
    """p-value and degrees of freedom of the two-sample chi-square test of the joint C' vectors (categories
    seen fewer than 10 times in all are pooled)."""
    keys, inverse = np.unique(np.vstack([first, second]), axis=0, return_inverse=True)
    table = np.zeros((2, keys.shape[0]))
    np.add.at(table, (np.repeat([0, 1], [len(first), len(second)]), inverse.ravel()), 1)
    rare = table.sum(axis=0) < 10
    table = np.column_stack([table[:, ~rare], table[:, rare].sum(axis=1)])
    result = stats.chi2_contingency(table)
    return result.pvalue, result.dof


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grr", "oue"])
def test_a_wrong_probability_is_detected(kind):
    """Power: per-user draws from the oracle at eps = 1.2 fail the fit to the law at eps = 1, and the
    two-sample test tells draws at eps = 1.5 from draws at eps = 1."""
    rng = secure_randomness()
    m = BATCH[kind]
    right = oracle_for(to_units("1"), m.size, kind)
    wrong = oracle_for(to_units("1.2"), m.size, kind)
    pmf, wrong_pmf = _marginal_pmf(right, m, 0), _marginal_pmf(wrong, m, 0)
    assert _gof_power_miss(pmf, wrong_pmf, REPEATS) < POWER_MISS
    wrong_counts = _per_user_counts(wrong, m, REPEATS, rng)
    assert _gof_pvalue(wrong_counts[:, 0], pmf) <= ALPHA
    # The two-sample test of the joint vectors has hundreds of degrees of freedom: it must catch eps = 1.5.
    # Its noncentrality is at least that of the C'[0] marginal (coarsening can only lose it), so the miss
    # probability at the joint test's degrees of freedom is at most this bound.
    far = oracle_for(to_units("1.5"), m.size, kind)
    far_pmf = _marginal_pmf(far, m, 0)
    pvalue, dof = _homogeneity(_per_user_counts(right, m, REPEATS, rng), _per_user_counts(far, m, REPEATS, rng))
    noncentrality = REPEATS * float(((pmf - far_pmf) ** 2 / (pmf + far_pmf)).sum())
    assert stats.ncx2.cdf(stats.chi2.isf(ALPHA, dof), dof, noncentrality) < POWER_MISS
    assert pvalue <= ALPHA


@pytest.mark.parametrize("kind, d", [("grr", 5), ("oue", 20)])
def test_estimates_are_unbiased(kind, d):
    """Mean of R estimates vs the truth: z-test per item (Bonferroni over d), with the exact variance; the
    sample variances fit it too, and V(eps, n) is its average."""
    rng = secure_randomness()
    oracle = oracle_for(to_units("1"), d, kind)
    n, repeats = 2000, 2000
    m = np.bincount(np.arange(n) % (d + 3) % d, minlength=d)  # an uneven histogram
    truth = m / n
    counts = np.array([aggregate_counts(oracle, m, rng) for _ in range(repeats)])
    p, q = float(oracle.p), float(oracle.q)
    variance = (m * p * (1 - p) + (n - m) * q * (1 - q)) / (n * (p - q)) ** 2  # of one estimate
    sd_mean = np.sqrt(variance / repeats)
    z = stats.norm.isf(ALPHA / (2 * d))

    def rejected(estimator: FrequencyOracle) -> np.ndarray:
        mean = np.mean([estimator.estimate(c, n) for c in counts], axis=0)
        return np.abs(mean - truth) >= z * sd_mean

    assert not rejected(oracle).any()
    # V(eps, n) of spec §3.4 is the item-averaged exact variance (nominal e^eps vs the rounded p, q: 1e-6).
    assert variance.mean() == pytest.approx(ldp_variance(1.0, d, n), rel=1e-6)
    # Sample variances: (R-1)s^2/sigma^2 is chi-square with R-1 df (the estimates are near normal at n = 2000).
    ratio = (repeats - 1) * np.array([oracle.estimate(c, n) for c in counts]).var(axis=0, ddof=1) / variance
    assert (stats.chi2.cdf(ratio, repeats - 1) > ALPHA / (2 * d)).all()
    assert (stats.chi2.sf(ratio, repeats - 1) > ALPHA / (2 * d)).all()
    # Power: a variance 1.5 times off (the paper's printed GRR V is 1.6 times the exact one at d = 5) fails.
    low, high = stats.chi2.isf([1 - ALPHA / (2 * d), ALPHA / (2 * d)], repeats - 1)
    assert stats.chi2.cdf(1.5 * high, repeats - 1) - stats.chi2.cdf(1.5 * low, repeats - 1) < POWER_MISS
    assert not low <= ratio[0] / 1.5 <= high
    # Power: estimating with the oracle of another budget (spec trap T11: eps 1.2 instead of 1) is biased.
    wrong = oracle_for(to_units("1.2"), d, kind)
    biased = (truth * p + (1 - truth) * q - float(wrong.q)) / float(wrong.p - wrong.q)
    k = int(np.argmax(np.abs(biased - truth) / sd_mean))
    shift = abs(biased[k] - truth[k]) / sd_mean[k]
    miss = stats.norm.cdf(z - shift) - stats.norm.cdf(-z - shift)
    assert miss < POWER_MISS
    assert rejected(wrong)[k]


def test_estimate_of_a_large_batch_is_close_and_counts_add_up():
    rng = secure_randomness()
    oracle = oracle_for(to_units("1"), 100)
    values = np.arange(200_000) % 100
    reports = perturb_values(oracle, values, rng)
    assert reports.shape == (200_000, 100) and reports.dtype == bool
    estimate = oracle.estimate(report_counts(oracle, reports), values.size)
    sd = math.sqrt(4 * math.e / (values.size * (math.e - 1) ** 2) + 0.01 / values.size)
    assert np.abs(estimate - 0.01).max() < 6 * sd  # per item FFP 2e-9, 100 items: < 1e-6


def test_seeded_generator_replays_and_secure_is_the_default():
    for kind, d in (("grr", 5), ("oue", 8)):
        oracle = oracle_for(to_units("1"), d, kind)
        values = np.arange(1000) % d
        first = perturb_values(oracle, values, insecure_seeded_randomness(7))
        assert np.array_equal(first, perturb_values(oracle, values, insecure_seeded_randomness(7)))
        assert np.array_equal(aggregate_counts(oracle, np.bincount(values), insecure_seeded_randomness(3)),
                              aggregate_counts(oracle, np.bincount(values), insecure_seeded_randomness(3)))
        fresh = [perturb_values(oracle, values) for _ in range(2)]  # default: secure, never equal
        assert not np.array_equal(*fresh)  # FFP: at most (max(p, 1-q))^1000 < 1e-100


def test_large_oue_batches_are_chunked_exactly(monkeypatch):
    """Chunking changes nothing: the per-chunk and aggregate paths see every reporter once."""
    import transforms.mechanisms.ldp.simulate as simulate

    monkeypatch.setattr(simulate, "CHUNK_COINS", 64)
    oracle = oracle_for(to_units("1"), 16, "oue")
    values = np.arange(1000) % 16
    reports = perturb_values(oracle, values, insecure_seeded_randomness(1))
    assert reports.shape == (1000, 16)
    counts = aggregate_counts(oracle, np.bincount(values, minlength=16), insecure_seeded_randomness(1))
    assert counts.shape == (16,) and (counts <= 1000).all() and counts.sum() > 0
    grr = oracle_for(to_units("1"), 3, "grr")
    assert aggregate_counts(grr, np.array([100, 50, 0]), insecure_seeded_randomness(2)).sum() == 150


def test_locsan_uses_the_ada_oracle_and_reports_in_the_domain():
    oracle, report = locsan(3, to_units("1"), 5)
    assert oracle.kind == "grr" and 0 <= int(report) < 5
    oracle, report = locsan(3, to_units("1"), 50)
    assert oracle.kind == "oue" and report.shape == (50,)
    oracle, report = locsan(3, to_units("1"), 50, kind="grr")
    assert oracle.kind == "grr"


@pytest.mark.parametrize("values, message", [
    (np.array([0, 5]), "must lie in"),
    (np.array([-1]), "must lie in"),
    (np.array([0.5]), "integer array"),
    (np.array([[0]]), "1-D"),
])
def test_bad_values_raise(values, message):
    with pytest.raises(ValueError, match=message):
        perturb_values(oracle_for(to_units("1"), 5), values)


def test_bad_true_counts_raise():
    with pytest.raises(ValueError, match="true_counts"):
        aggregate_counts(oracle_for(to_units("1"), 5), np.array([1, 2, -1, 0, 0]))
    with pytest.raises(ValueError, match="true_counts"):
        aggregate_counts(oracle_for(to_units("1"), 5), np.array([1, 2]))


def test_hypergeometric_counts_follow_the_exact_law():
    """Spec §3.5's shortcut for synthetic streams: the true counts of k holders drawn without replacement.

    GOF of value 0's count against scipy's hypergeometric pmf at ALPHA; power: the same draws against the
    binomial (with replacement) law, which the test must reject with miss probability below POWER_MISS."""
    rng = secure_randomness()
    remaining, k = np.array([30, 0, 12, 18]), 25
    draws = np.array([simulate_module.hypergeometric_counts(remaining, k, rng) for _ in range(20_000)])
    assert (draws.sum(axis=1) == k).all() and (draws <= remaining).all() and (draws[:, 1] == 0).all()
    pmf = stats.hypergeom.pmf(np.arange(k + 1), remaining.sum(), remaining[0], k)
    assert _gof_pvalue(draws[:, 0], pmf) > ALPHA
    wrong = stats.binom.pmf(np.arange(k + 1), k, remaining[0] / remaining.sum())
    assert _gof_power_miss(pmf, wrong, draws.shape[0]) < POWER_MISS
    assert (simulate_module.hypergeometric_counts(remaining, 60, rng) == remaining).all()
    with pytest.raises(ValueError, match="cannot draw 61 of 60"):
        simulate_module.hypergeometric_counts(remaining, 61, rng)


@pytest.mark.parametrize("method", ["lpd", "lbu"])
def test_exchangeable_slots_release_as_user_by_user_simulation_does(method):
    """A synthetic stream run from its counts alone (no user's value built) and user by user: the released
    share of 1s has the same law. Two-sample Kolmogorov-Smirnov over 400 runs of one slot each at ALPHA; power:
    a shifted truth (60% of 1s instead of 40%) must be told apart (its KS p-value is far below ALPHA)."""
    from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism

    n, rng, gen = 2000, secure_randomness(), np.random.default_rng(5)
    registrations = FixedRequirements.of(np.full(n, 4), np.full(n, 1.0))

    def released(ones: int, exchangeable: bool) -> float:
        mechanism = make_mechanism(method, bins=2, epsilon=1.0, window=4, simulation="aggregate")
        if exchangeable:
            batch = SlotBatch.of(range(n), np.full(n, -1), registrations)
            return float(mechanism.step_exchangeable(batch, [n - ones, ones], rng).estimate[1])
        values = np.zeros(n, np.int64)
        values[gen.choice(n, ones, replace=False)] = 1
        return float(mechanism.step(SlotBatch.of(range(n), values, registrations), rng).estimate[1])

    counts = [released(800, True) for _ in range(400)]
    users = [released(800, False) for _ in range(400)]
    assert stats.ks_2samp(counts, users).pvalue > ALPHA
    assert stats.ks_2samp(counts, [released(1200, False) for _ in range(400)]).pvalue < ALPHA


def test_exchangeable_slots_are_labelled_simulated_and_refuse_what_they_cannot_count():
    from transforms.mechanisms import FixedRequirements, SlotBatch, TrustModel, make_mechanism

    mechanism = make_mechanism("lpu", bins=2, epsilon=1.0, window=2)
    batch = SlotBatch.of(range(4), np.full(4, -1), FixedRequirements.of(np.full(4, 2), np.full(4, 1.0)))
    with pytest.raises(ValueError, match="registered users' values"):
        mechanism.step_exchangeable(batch, [3, 0], insecure_seeded_randomness(1))
    release = make_mechanism("lpu", bins=2, epsilon=1.0, window=2).step_exchangeable(batch, [1, 3],
                                                                                   insecure_seeded_randomness(1))
    assert release.trust is TrustModel.LOCAL_SIMULATED
    with pytest.raises(ValueError, match="counts of the frequency oracles"):
        make_mechanism("lbu-mean", epsilon=1.0, window=2, low=0.0, high=1.0).step_exchangeable(
            batch, [1, 3], insecure_seeded_randomness(1))
