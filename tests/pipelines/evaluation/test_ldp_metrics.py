"""The LDP-IDS metrics (spec ldp_ids.md §8.5) on hand-computed values."""

import numpy as np
import pytest

from pipelines.evaluation.ldp_metrics import auc, event_labels, mae, mre, mse, reduce, roc_curve


def test_mre_averages_every_bin_with_the_sanity_bound():
    truth = np.array([[0.9, 0.1], [1.0, 0.0]])
    released = np.array([[0.8, 0.2], [0.99, 0.01]])
    # slot 1: 0.1/0.9 and 0.1/0.1; slot 2: 0.01/1 and 0.01/max(0, 0.001) = 10
    expected = (0.1 / 0.9 + 1.0 + 0.01 + 10.0) / 4
    assert mre(released, truth, 0.001) == pytest.approx(expected)
    assert mse(released, truth) == pytest.approx((0.01 + 0.01 + 0.0001 + 0.0001) / 4)
    assert mae(released, truth) == pytest.approx((0.1 + 0.1 + 0.01 + 0.01) / 4)
    assert mre(truth, truth, 0.001) == 0.0


def test_metrics_refuse_misaligned_input_and_a_zero_floor():
    with pytest.raises(ValueError, match="equal"):
        mse(np.zeros((3, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="sanity bound"):
        mre(np.zeros((1, 2)), np.zeros((1, 2)), 0.0)


def test_reductions():
    h = np.array([[0.5, 0.25, 0.25], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(reduce(h, "index"), [0.75, 2.0])
    np.testing.assert_allclose(reduce(h, "one"), [0.25, 0.0])
    with pytest.raises(ValueError, match="reduction"):
        reduce(h, "median")


def test_events_exceed_three_quarters_of_the_range():
    labels = event_labels([0.0, 0.5, 0.75, 0.76, 1.0])
    assert labels.tolist() == [False, False, False, True, True]


def test_auc_known_values():
    y = np.array([0, 0, 1, 1], bool)
    assert auc(y, [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert auc(y, [0.9, 0.8, 0.2, 0.1]) == 0.0
    assert auc(y, [0.5, 0.5, 0.5, 0.5]) == 0.5
    # pairs (event, non-event): 0.35 beats 0.1, loses to 0.4; 0.8 beats both: 3 of 4
    assert auc(y, [0.1, 0.4, 0.35, 0.8]) == pytest.approx(3 / 4)
    # a tie between an event and a non-event counts half: (0.4 vs 0.1, 0.4) = 1.5, (0.8) = 2 -> 3.5 / 4
    assert auc(y, [0.1, 0.4, 0.4, 0.8]) == pytest.approx(3.5 / 4)
    assert np.isnan(auc(np.zeros(4, bool), [0.1, 0.2, 0.3, 0.4]))


def test_roc_curve_runs_from_corner_to_corner():
    fpr, tpr = roc_curve(np.array([0, 1, 0, 1], bool), [0.1, 0.9, 0.5, 0.5])
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    np.testing.assert_allclose(tpr, [0, 0.5, 1, 1])
    np.testing.assert_allclose(fpr, [0, 0, 0.5, 1])
