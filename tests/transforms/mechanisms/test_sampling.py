"""Cells and their counting (the sampling mechanism itself is tested through the mechanisms)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.sampling import Cells, count_keys, sample_histogram, sampled_statistic


@given(st.integers(1, 7).flatmap(lambda size: st.tuples(st.just(size), st.lists(st.integers(0, size - 1)))))
def test_count_keys_is_bincount(size_and_keys):
    size, keys = size_and_keys
    keys = np.array(keys, np.int64)
    counts = count_keys(keys, size)
    assert counts.dtype == np.int64
    assert counts.tolist() == np.bincount(keys, minlength=size).tolist()


def test_pooled_cells_give_the_histogram_and_refuse_sampling():
    cells = Cells.pooled(np.array([3, 0, 5]))
    histogram = cells.histogram(3)
    assert histogram.tolist() == [3, 0, 5]
    histogram[0] = 99  # a copy: the cells are unchanged
    assert cells.histogram(3).tolist() == [3, 0, 5]
    with pytest.raises(ValueError, match="by cohort"):
        sample_histogram(cells, sampled_statistic("publication", np.array([10]), 10, 1), 3, insecure_seeded_randomness(0))
