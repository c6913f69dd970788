"""The collector's side of seed 003: SMA (§3.5), population and subsequence means (§4), crowd-level
statistics (§3.8.3, §5.8) and the metrics of §6.3.  Deterministic: no statistical assertions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transforms.mechanisms.domain import Interval
from transforms.mechanisms.numeric.server import (cosine_distances, crowd_distribution, dkw_users, mse,
                                                  population_means, sma, subsequence_means, to_domain,
                                                  wasserstein_binned, wasserstein_grid_sum, wasserstein_w1)


def test_sma_centred_and_trailing_with_shrinking_ends():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert sma(x).tolist() == [1.5, 2.0, 3.0, 4.0, 4.5]
    assert sma(x, mode="trailing").tolist() == [1.0, 1.5, 2.0, 3.0, 4.0]
    assert sma(x, 5).tolist() == [2.0, 2.5, 3.0, 3.5, 4.0]
    assert sma(x, 1).tolist() == x.tolist()
    block = np.vstack([x, 2 * x])
    assert np.array_equal(sma(block, mode="trailing")[1], 2 * sma(x, mode="trailing"))
    for size, mode in ((2, "centered"), (0, "trailing"), (3, "leading")):
        with pytest.raises(ValueError):
            sma(x, size, mode)


def test_means_read_reports_only_and_map_to_the_domain():
    reports = np.array([[0.0, 1.0, np.nan], [1.0, 1.0, 0.5]])
    assert population_means(reports).tolist() == [0.5, 1.0, 0.5]  # a user who did not report is left out
    domain = Interval(10.0, 30.0)
    assert population_means(reports, domain).tolist() == [20.0, 30.0, 20.0]
    assert subsequence_means(reports[:, :2]).tolist() == [0.5, 1.0]
    assert subsequence_means(reports, 1, 3, domain).tolist()[1] == pytest.approx(25.0)
    assert to_domain(0.25, domain) == 15.0
    with pytest.raises(ValueError, match="at least one slot"):
        subsequence_means(reports, 2, 2)


def test_cosine_distance_drops_and_counts_zero_rows():
    truth = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    released = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 2.0]])
    distances, dropped = cosine_distances(truth, released)
    assert distances.tolist() == pytest.approx([1.0, 0.0]) and dropped == 1
    assert mse([1.0, 2.0], [1.0, 4.0]) == 2.0
    with pytest.raises(ValueError):
        mse([1.0], [1.0, 2.0])


def test_wasserstein_equals_scipy_and_the_grid_sum_is_the_papers_form():
    generator = np.random.default_rng(1)
    for a, b in [(generator.random(50), generator.random(80)), (generator.normal(size=7), generator.normal(size=7)),
                 (np.array([0.0, 0.0, 1.0]), np.array([0.5]))]:
        assert wasserstein_w1(a, b) == pytest.approx(stats.wasserstein_distance(a, b), abs=1e-12)
    assert wasserstein_w1([0.0, 1.0], [0.0, 1.0]) == 0.0
    assert wasserstein_grid_sum([0.0], [1.0], points=3) == 2.0  # F differs at the two lower grid points
    with pytest.raises(ValueError):
        wasserstein_w1([], [1.0])


def test_dkw_users_of_spec_5_8():
    assert dkw_users(0.05, 0.05) == 738
    with pytest.raises(ValueError):
        dkw_users(0.05, 0)


def test_crowd_distribution_bins_means_with_the_ends_clipped():
    means = [-0.3, 0.0, 0.249, 0.25, 0.5, 0.99, 1.0, 1.7]
    assert crowd_distribution(means, 4).tolist() == [3 / 8, 1 / 8, 1 / 8, 3 / 8]  # [k/4, (k+1)/4), 1.0 in the last
    assert crowd_distribution([0.2], 1).tolist() == [1.0]
    with pytest.raises(ValueError, match="at least one"):
        crowd_distribution([], 3)


def test_binned_wasserstein_is_w1_of_the_bin_centres():
    generator = np.random.default_rng(2)
    for bins, width in [(1, 1.0), (4, 1.0), (10, 20.0)]:
        a, b = generator.integers(0, bins, 30), generator.integers(0, bins, 17)
        p, q = np.bincount(a, minlength=bins) / a.size, np.bincount(b, minlength=bins) / b.size
        centres = width * (np.arange(bins) + 0.5) / bins
        assert wasserstein_binned(p, q, width) == pytest.approx(wasserstein_w1(centres[a], centres[b]), abs=1e-12)
    with pytest.raises(ValueError, match="same bins"):
        wasserstein_binned([0.5, 0.5], [1.0])
