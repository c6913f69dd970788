"""DPI's 0-DP synopsis pool (spec §2.2, TV11, T-9, T-10): a deterministic function of public parameters only.

The TV11 comparisons are statistical expectations of the spec's seeded run; the tolerances are more than
10 standard errors wide (false-failure probability negligible), the seeds here are arbitrary.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transforms.mechanisms.dpi.exponential import select_synopses
from transforms.mechanisms.dpi.pool import BLOCK, CATEGORICAL_RATIO, MAX_SEED, SynopsisPool, new_public_seed
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness


def test_same_seed_same_pool_in_any_order_and_from_any_instance():
    a, b = SynopsisPool(k=50, size=100, seed=12345), SynopsisPool(k=50, size=100, seed=12345)
    forward = a.counts_of(range(100))
    backward = b.counts_of(range(99, -1, -1))[::-1]
    assert np.array_equal(forward, backward)
    assert np.array_equal(a.counts(37), forward[37])  # regenerated on demand, nothing stored
    assert forward.shape == (100, 50) and forward.dtype == np.int64
    assert (forward.sum(axis=1) == 50).all() and (forward >= 0).all()
    assert len({row.tobytes() for row in forward}) == 100  # distinct entries


def test_a_candidate_depends_on_seed_and_index_only_never_on_the_pool_size():
    """Candidates come in blocks of BLOCK from one generator: a pool of 5 and one of 100 share their first 5
    entries, and the block iterator gives the same rows as one-by-one access (memory: one block)."""
    small, large = SynopsisPool(k=30, size=5, seed=7), SynopsisPool(k=30, size=3 * BLOCK + 2, seed=7)
    assert np.array_equal(small.counts_of(range(5)), large.counts_of(range(5)))
    rows = np.concatenate([block for _, block in large.blocks()])
    assert rows.shape == (large.size, 30) and [s for s, _ in large.blocks()] == [0, BLOCK, 2 * BLOCK, 3 * BLOCK]
    assert np.array_equal(rows, large.counts_of(range(large.size)))
    assert np.array_equal(rows[BLOCK + 3], large.counts(BLOCK + 3))
    with pytest.raises(IndexError):
        large.counts_of([0, large.size])


@pytest.mark.parametrize("k, n_units", [(6, 9), (4, CATEGORICAL_RATIO * 4 + 5)])
def test_both_ways_of_drawing_give_the_multinomial_law(k, n_units):
    """Categorical draws counted (n_units <= 8k) and numpy's multinomial (above): each count is
    Binomial(n, 1/k) and two counts have covariance -n/k².  Over 4,000 entries the checks are at 6 standard
    errors (false failure below 1e-8 each); a pool drawn from a non-uniform law (item 0 at twice the others'
    probability) fails the first check by 60 standard errors or more (the power check)."""
    entries = 4000
    counts = SynopsisPool(k=k, size=entries, seed=31, n_units=n_units).counts_of(range(entries))
    assert (counts.sum(axis=1) == n_units).all()
    p = 1 / k
    mean_se = math.sqrt(n_units * p * (1 - p) / entries)
    assert np.abs(counts.mean(axis=0) - n_units * p).max() < 6 * mean_se
    variance = n_units * p * (1 - p)
    assert np.abs(counts.var(axis=0) / variance - 1).max() < 6 * math.sqrt(2 / entries) * 1.5
    covariance = np.cov(counts[:, 0], counts[:, 1])[0, 1]
    assert abs(covariance + n_units * p * p) < 6 * variance / math.sqrt(entries)
    weights = np.full(k, 1.0)
    weights[0] = 2
    skewed = np.random.default_rng(0).multinomial(n_units, weights / weights.sum(), size=entries)
    assert abs(skewed.mean(axis=0)[0] - n_units * p) > 6 * mean_se


def test_different_seed_different_pool():
    a, b = SynopsisPool(k=50, size=10, seed=1), SynopsisPool(k=50, size=10, seed=2)
    assert not np.array_equal(a.counts_of(range(10)), b.counts_of(range(10)))


def test_pool_is_independent_of_any_data_and_global_random_state():
    """Entries are the same before and after the mechanism reads data, and whatever numpy's global state."""
    pool = SynopsisPool(k=20, size=30, seed=99, n_units=40)
    before = pool.counts_of(range(30))
    np.random.seed(0)
    skewed = np.zeros(20, dtype=np.int64)
    skewed[0] = 10**6
    select_synopses(skewed, pool, 10**12, draws=5, rng=insecure_seeded_randomness(3))
    select_synopses(np.arange(20), pool, 5 * 10**12, draws=5, rng=secure_randomness())
    np.random.seed(1)
    assert np.array_equal(pool.counts_of(range(30)), before)
    assert (before.sum(axis=1) == 40).all()  # n_units is the public constant, never a data size


def test_distribution_sums_to_one_on_the_n_units_grid():
    pool = SynopsisPool(k=7, size=5, seed=0, n_units=13)
    for j in range(5):
        pdf = pool.distribution(j)
        assert pdf.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.allclose(pdf * 13, np.round(pdf * 13))


@pytest.mark.parametrize("n_units, k, mean_l1, tolerance", [(100, 100, 0.7316, 0.01), (48_925, 110, 0.0377, 0.001)])
def test_tv11_pool_clusters_around_uniform(n_units, k, mean_l1, tolerance):
    pool = SynopsisPool(k=k, size=2000, seed=2024, n_units=n_units)
    distances = np.abs(pool.counts_of(range(2000)) / n_units - 1 / k).sum(axis=1)
    assert distances.mean() == pytest.approx(mean_l1, abs=tolerance)


def test_tv11_no_pool_entry_beats_uniform_on_a_zipf_target():
    """The coverage fact of §2.2: for Zipf(1.1) over 100 bins the best of 6,500 entries (l1 about 1.134) is
    farther from the target than the uniform PDF (1.097).  Tests must not expect DPI to track skew (T-11)."""
    k = 100
    target = 1.0 / np.arange(1, k + 1) ** 1.1
    target /= target.sum()
    uniform_l1 = np.abs(target - 1 / k).sum()
    assert uniform_l1 == pytest.approx(1.097, abs=1e-3)
    pool = SynopsisPool(k=k, size=6500, seed=11)
    best = min(np.abs(pool.counts_of(range(start, start + 500)) / k - target).sum(axis=1).min()
               for start in range(0, 6500, 500))
    assert uniform_l1 < best < 1.2


def test_bad_parameters_fail_with_one_line():
    for kwargs, message in [({"k": 0, "size": 1, "seed": 0}, "k"), ({"k": 2, "size": 0, "seed": 0}, "size"),
                            ({"k": 2, "size": 1, "seed": -1}, "seed"), ({"k": 2, "size": 1, "seed": 1.5}, "seed"),
                            ({"k": 2, "size": 1, "seed": MAX_SEED + 1}, "seed"),
                            ({"k": 2, "size": 1, "seed": 0, "n_units": 0}, "n_units"),
                            ({"k": True, "size": 1, "seed": 0}, "k")]:
        with pytest.raises(ValueError, match=message):
            SynopsisPool(**kwargs)
    pool = SynopsisPool(k=3, size=4, seed=0)
    assert pool.n_units == 3  # default: k, as in the authors' code (I-1)
    for bad in (-1, 4, 1.0):
        with pytest.raises(IndexError):
            pool.counts(bad)


def test_new_public_seed_comes_from_the_secure_generator():
    seeds = {new_public_seed() for _ in range(4)}
    assert len(seeds) == 4 and all(0 <= s <= MAX_SEED for s in seeds)
    assert new_public_seed(insecure_seeded_randomness(5)) == new_public_seed(insecure_seeded_randomness(5))
    SynopsisPool(k=3, size=2, seed=max(seeds))  # a drawn seed is accepted
