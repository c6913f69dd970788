"""The LDP-IDS synthetic streams (spec ldp_ids.md §8.1, TV-10): exact per-slot counts on fresh uniform subsets,
and LNS walks redrawn until they stay above a floor (trap T14)."""

import numpy as np
import pytest

from transforms.mechanisms.synthetic import (exact_count_stream, lns_probabilities, log_probabilities,
                                             sin_probabilities, tlns_probabilities)


def test_tv10_paths_match_the_spec_values():
    sin, log = sin_probabilities(800), log_probabilities(800)
    for t, value in ((1, 0.075500), (100, 0.117074), (157, 0.125000), (314, 0.075080), (471, 0.025000),
                     (628, 0.074841), (800, 0.124468)):
        assert sin[t - 1] == pytest.approx(value, abs=5e-7)
    for t, value in ((1, 0.125625), (100, 0.182765), (400, 0.245503), (800, 0.249916)):
        assert log[t - 1] == pytest.approx(value, abs=5e-7)


def test_every_slot_holds_exactly_the_rounded_count():
    probabilities = np.array([0.0, 0.1, 0.25, 0.0005, 0.0015, 1.0, 0.333])
    slots = list(exact_count_stream(probabilities, 1000, np.random.default_rng(1)))
    assert [int(v.sum()) for v in slots] == [0, 100, 250, 1, 2, 1000, 333]  # halves round up (0.5 -> 1, 1.5 -> 2)
    assert all(v.dtype == np.int64 and set(np.unique(v)) <= {0, 1} for v in slots)


def test_subsets_are_uniform_and_independent_across_slots():
    """Each user is 1 in a slot with probability k/n = 0.3, independently of the slot before.

    400 slots x 50 users: a user's count of ones is Binomial(400, 0.3) (sd 9.2); the overall rate's
    5-sigma band fails with probability below 1e-6, and so does the lag-1 agreement band.  Power: a subset
    fixed across slots would give agreement 1.0, far outside."""
    n, slots = 50, 400
    values = np.array(list(exact_count_stream(np.full(slots, 0.3), n, np.random.default_rng(7))))
    per_user = values.mean(axis=0)
    assert abs(per_user.mean() - 0.3) < 1e-12  # exact counts: the overall mean is exact
    assert per_user.min() > 0.3 - 5 * np.sqrt(0.21 / slots) and per_user.max() < 0.3 + 5 * np.sqrt(0.21 / slots)
    both = (values[1:] & values[:-1]).mean()  # P(1 at t and at t+1) = 0.09 if independent
    assert abs(both - 0.09) < 5 * np.sqrt(0.09 * 0.91 / (n * (slots - 1)))


def test_exact_count_stream_rejects_bad_input_at_once():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        exact_count_stream(np.array([0.5, 1.2]), 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="users"):
        exact_count_stream(np.array([0.5]), 0, np.random.default_rng(0))


def test_lns_paths_stay_above_the_floor_and_count_their_redraws():
    """sqrt(Q) = 0.005 leaves [0, 1] in about 70% of 800-slot walks (TV-10): some seeds must redraw."""
    attempts = []
    for seed in range(12):
        path = lns_probabilities(800, np.random.default_rng(seed), sigma=0.005, floor=0.01)
        assert path.probabilities.shape == (800,)
        assert path.probabilities.min() > 0.01 and path.probabilities.max() < 1
        attempts.append(path.attempts)
    assert max(attempts) > 1  # P(no seed of 12 redraws) < 0.5^12


def test_lns_path_is_the_first_walk_that_passes():
    """The returned path is the rng's k-th TLNS walk, and the k-1 before it broke the floor."""
    path = lns_probabilities(800, np.random.default_rng(5), sigma=0.004, floor=0.02)
    replay = np.random.default_rng(5)
    for _ in range(path.attempts - 1):
        walk = tlns_probabilities(800, replay, 0.05, 0.004)
        assert walk.clipped_slots > 0 or walk.probabilities.min() <= 0.02
    np.testing.assert_array_equal(tlns_probabilities(800, replay, 0.05, 0.004).probabilities, path.probabilities)


def test_lns_gives_up_with_a_clear_error():
    with pytest.raises(ValueError, match="stayed above floor"):
        lns_probabilities(800, np.random.default_rng(0), sigma=0.05, floor=0.049, max_attempts=3)
    with pytest.raises(ValueError, match="floor"):
        lns_probabilities(10, np.random.default_rng(0), floor=0.06)
