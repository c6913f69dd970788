"""Domains: categorical bins and numeric intervals, validated before anything changes."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.mechanisms import (Categorical, Estimate, FixedRequirements, Interval, SlotBatch, TrustModel,
                                   make_mechanism)
from transforms.mechanisms.noise import insecure_seeded_randomness


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_a_categorical_domain_needs_a_positive_number_of_bins(bad):
    with pytest.raises(ValueError, match="bins"):
        Categorical(bad)


@pytest.mark.parametrize("low, high, message", [(1.0, 1.0, "LOW below HIGH"), (2, 1, "LOW below HIGH"),
                                                (float("nan"), 1, "finite"), (0, float("inf"), "finite"),
                                                ("0", 1, "finite")])
def test_an_interval_domain_refuses_an_empty_or_unbounded_range_in_one_line(low, high, message):
    with pytest.raises(ValueError, match=message):
        Interval(low, high)


def test_interval_batches_take_real_values_nan_for_no_report_and_refuse_values_outside():
    domain = Interval(-1.0, 2.5)
    assert SlotBatch.of([0, 1], [0.5, 2.5]).validate(domain).all_report
    assert not SlotBatch.of([0, 1], [0.5, np.nan]).validate(domain).all_report
    for bad in ([0.5, 2.6], [-1.5, 0.0], [np.inf, 0.0]):
        with pytest.raises(ValueError, match="values must"):
            SlotBatch.of([0, 1], bad).validate(domain)
    with pytest.raises(ValueError, match="float64"):  # bins are not real values
        SlotBatch.of([0, 1], [0, 1]).validate(domain)


def test_real_values_are_never_truncated_into_bins():
    batch = SlotBatch.of([0], [1.7])
    assert batch.values.dtype == np.float64
    with pytest.raises(ValueError, match="int64"):
        batch.validate(Categorical(3))


def test_a_central_release_estimates_counts_under_the_central_trust_model():
    pbd = make_mechanism("pbd", bins=3)
    release = pbd.step(SlotBatch.of([0, 1], [0, 2], FixedRequirements.of([2, 2], [1.0, 1.0])),
                       insecure_seeded_randomness(0))
    assert pbd.params.domain == Categorical(3)
    assert (release.estimates, release.trust) == (Estimate.COUNTS, TrustModel.CENTRAL)
    assert release.estimate.dtype == np.float64 and release.estimate.tolist() == release.histogram.tolist()
