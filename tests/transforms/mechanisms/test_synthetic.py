"""Tests of the papers' synthetic binary streams (Sin, Log, TLNS)."""

import math

import numpy as np
import pytest
from scipy import stats

from transforms.mechanisms.synthetic import (
    STREAMS,
    TlnsPath,
    binary_stream,
    log_probabilities,
    sin_probabilities,
    stream_probabilities,
    tlns_probabilities,
)

PAPER_SLOTS = 10_000


# --- Sin --------------------------------------------------------------------


def test_sin_matches_formula_at_hand_computed_slots():
    probabilities = sin_probabilities(PAPER_SLOTS)
    # index 0 is t = 1: 0.05 sin(0.01) + 0.075
    assert probabilities[0] == pytest.approx(0.07549999166670833, abs=1e-15)
    # t = 157: 0.05 sin(1.57) + 0.075, just below the peak 0.125 at t = 50 pi
    assert probabilities[156] == pytest.approx(0.12499998414659173, abs=1e-15)
    # t = 471: 0.05 sin(4.71) + 0.075, just above the trough 0.025
    assert probabilities[470] == pytest.approx(0.05 * math.sin(4.71) + 0.075, abs=1e-15)
    assert probabilities[470] == pytest.approx(0.025, abs=1e-6)


def test_sin_shape_dtype_and_range():
    probabilities = sin_probabilities(PAPER_SLOTS)
    assert probabilities.shape == (PAPER_SLOTS,)
    assert probabilities.dtype == np.float64
    assert probabilities.min() >= 0.025 - 1e-12
    assert probabilities.max() <= 0.125 + 1e-12


def test_sin_mean_over_paper_horizon_matches_closed_form():
    # sum_{t=1}^{T} sin(w t) = sin(T w / 2) sin((T + 1) w / 2) / sin(w / 2)
    slots, amplitude, frequency, offset = PAPER_SLOTS, 0.05, 0.01, 0.075
    sine_sum = (
        math.sin(slots * frequency / 2)
        * math.sin((slots + 1) * frequency / 2)
        / math.sin(frequency / 2)
    )
    expected_mean = offset + amplitude * sine_sum / slots
    assert expected_mean == pytest.approx(0.0750675740760811, abs=1e-15)
    assert sin_probabilities(slots).mean() == pytest.approx(expected_mean, rel=1e-12)
    # close to h: the partial sine sum is bounded by 1 / sin(w/2) ~ 200
    assert abs(expected_mean - offset) < 1e-4


def test_sin_custom_parameters():
    probabilities = sin_probabilities(3, amplitude=0.1, frequency=math.pi / 2, offset=0.5)
    np.testing.assert_allclose(probabilities, [0.6, 0.5, 0.4], atol=1e-15)


# --- Log --------------------------------------------------------------------


def test_log_matches_formula_at_hand_computed_slots():
    probabilities = log_probabilities(PAPER_SLOTS)
    assert probabilities.shape == (PAPER_SLOTS,)
    # t = 1: 0.25 / (1 + e^-0.01)
    assert probabilities[0] == pytest.approx(0.25 / (1 + math.exp(-0.01)), abs=1e-15)
    assert probabilities[0] == pytest.approx(0.12562499479172, abs=1e-13)
    # t = 100: 0.25 / (1 + e^-1)
    assert probabilities[99] == pytest.approx(0.18276464465750, abs=1e-13)
    # t = 10,000: 0.25 / (1 + e^-100), equal to 0.25 in double precision
    assert probabilities[-1] == pytest.approx(0.25, abs=1e-15)


def test_log_is_increasing_and_bounded_by_amplitude():
    probabilities = log_probabilities(PAPER_SLOTS)
    assert np.all(np.diff(probabilities) >= 0)
    assert probabilities[0] > 0.125
    assert probabilities.max() <= 0.25


# --- TLNS -------------------------------------------------------------------


def _increments(path: np.ndarray, initial: float) -> np.ndarray:
    return np.diff(path, prepend=initial)


def test_tlns_returns_path_within_unit_interval():
    path = tlns_probabilities(PAPER_SLOTS, np.random.default_rng(7))
    assert isinstance(path, TlnsPath)
    assert path.probabilities.shape == (PAPER_SLOTS,)
    assert path.probabilities.dtype == np.float64
    assert np.all((path.probabilities >= 0.0) & (path.probabilities <= 1.0))
    assert isinstance(path.clipped_slots, int)
    # Every clipped slot sits exactly on a boundary (an unclipped walk hits
    # exactly 0.0 or 1.0 with probability 0).
    on_boundary = np.count_nonzero((path.probabilities == 0.0) | (path.probabilities == 1.0))
    assert on_boundary == path.clipped_slots


def test_tlns_median_clip_count_is_plausible():
    # The spec reports a median of 62 clipped slots (T = 10,000) over 200
    # seeds.  Simulating 4,000 seeds gave a median of 64, 16.6 % of seeds with
    # no clip at all, and empirical CDF values F(<20) = 0.269, F(<=120) = 0.706.
    # The median of 101 seeds is the 51st order statistic, so
    #   P(median < 20)  = P(Binomial(101, 0.269) >= 51) ~ 4e-7
    #   P(median > 120) = P(Binomial(101, 0.294) >= 51) ~ 7e-6
    # i.e. a false-failure probability of about 1e-5 over the choice of seeds.
    # A walk that does not restart from the clipped value gives a median of
    # about 1,700, and the reference start p0 = 0.5 a median of 0: both fail.
    counts = [
        tlns_probabilities(PAPER_SLOTS, np.random.default_rng(seed)).clipped_slots
        for seed in range(101)
    ]
    assert 20 <= np.median(counts) <= 120


def test_tlns_reference_start_rarely_clips():
    # From p0 = 0.5 a boundary is 200 sigma away; with sd 0.25 after 10,000
    # steps most seeds never reach one.
    counts = [
        tlns_probabilities(PAPER_SLOTS, np.random.default_rng(seed), initial=0.5).clipped_slots
        for seed in range(21)
    ]
    assert np.median(counts) == 0


def test_tlns_unclipped_increments_have_std_sigma():
    # Where neither boundary was hit the increment p_t - p_{t-1} is exactly
    # the N(0, sigma^2) step.  With n unclipped steps, sum(x^2)/sigma^2 is
    # chi-square(n); the two-sided bound below has false-failure probability
    # 1e-6.  Dropping clipped steps truncates the noise slightly (measured
    # bias of the std: -0.3 %), so each bound is widened by 1 %.
    sigma = 0.0025
    pooled = []
    for seed in range(5):
        path = tlns_probabilities(PAPER_SLOTS, np.random.default_rng(seed)).probabilities
        unclipped = (path > 0.0) & (path < 1.0)
        pooled.append(_increments(path, 0.05)[unclipped])
    increments = np.concatenate(pooled)
    count = increments.size
    assert count > 0.95 * 5 * PAPER_SLOTS
    ratio = math.sqrt(np.mean(increments**2)) / sigma
    lower = math.sqrt(stats.chi2.ppf(0.5e-6, count) / count) - 0.01
    upper = math.sqrt(stats.chi2.isf(0.5e-6, count) / count) + 0.01
    assert lower <= ratio <= upper
    # The bounds are tight enough to reject a sigma 5 % off.
    assert upper < 1.05 and lower > 0.95


def test_tlns_zero_sigma_is_constant():
    path = tlns_probabilities(50, np.random.default_rng(0), initial=0.3, sigma=0.0)
    np.testing.assert_array_equal(path.probabilities, np.full(50, 0.3))
    assert path.clipped_slots == 0


def test_tlns_clips_at_both_boundaries_and_restarts_from_clipped_value():
    # A huge sigma clips most steps, at both ends of [0, 1].
    path = tlns_probabilities(2_000, np.random.default_rng(3), initial=0.5, sigma=10.0)
    values = path.probabilities
    assert np.any(values == 0.0) and np.any(values == 1.0)
    assert path.clipped_slots == np.count_nonzero((values == 0.0) | (values == 1.0))
    assert path.clipped_slots > 0.9 * values.size


def test_tlns_is_deterministic_per_seed():
    first = tlns_probabilities(1_000, np.random.default_rng(42))
    second = tlns_probabilities(1_000, np.random.default_rng(42))
    other = tlns_probabilities(1_000, np.random.default_rng(43))
    np.testing.assert_array_equal(first.probabilities, second.probabilities)
    assert first.clipped_slots == second.clipped_slots
    assert not np.array_equal(first.probabilities, other.probabilities)


# --- round_to_cents ---------------------------------------------------------


def _is_whole_cents(values: np.ndarray) -> bool:
    return bool(np.all(np.abs(values * 100 - np.round(values * 100)) < 1e-9))


def test_round_to_cents_rounds_sin_and_log():
    for make in (sin_probabilities, log_probabilities):
        exact = make(1_000)
        rounded = make(1_000, round_to_cents=True)
        assert _is_whole_cents(rounded)
        assert not _is_whole_cents(exact)
        np.testing.assert_array_equal(rounded, np.round(exact, 2))
        assert np.max(np.abs(rounded - exact)) <= 0.005 + 1e-12


def test_round_to_cents_on_hand_computed_values():
    # Sin t = 1: 0.0754999917 is above 0.075 -> 0.08
    assert sin_probabilities(1, round_to_cents=True)[0] == pytest.approx(0.08, abs=1e-15)
    # t = 157: 0.124999984 -> 0.12
    assert sin_probabilities(157, round_to_cents=True)[156] == pytest.approx(0.12, abs=1e-15)
    # Log t = 1: 0.12562 -> 0.13;  t = 10,000: 0.25 -> 0.25
    rounded_log = log_probabilities(PAPER_SLOTS, round_to_cents=True)
    assert rounded_log[0] == pytest.approx(0.13, abs=1e-15)
    assert rounded_log[-1] == pytest.approx(0.25, abs=1e-15)


def test_round_to_cents_rounds_tlns_output_only():
    # Reference-code variant: p0 = 0.5 and rounded probabilities.  The walk
    # evolves unrounded, so the clip count does not change.
    exact = tlns_probabilities(PAPER_SLOTS, np.random.default_rng(11), initial=0.5)
    rounded = tlns_probabilities(
        PAPER_SLOTS, np.random.default_rng(11), initial=0.5, round_to_cents=True
    )
    assert _is_whole_cents(rounded.probabilities)
    np.testing.assert_array_equal(rounded.probabilities, np.round(exact.probabilities, 2))
    assert rounded.clipped_slots == exact.clipped_slots


# --- binary_stream ----------------------------------------------------------


def test_binary_stream_yields_int64_zero_one_arrays_per_slot():
    probabilities = np.array([0.0, 0.3, 1.0, 0.5])
    slots = list(binary_stream(probabilities, 1_000, np.random.default_rng(0)))
    assert len(slots) == probabilities.size
    for values in slots:
        assert values.dtype == np.int64
        assert values.shape == (1_000,)
        assert set(np.unique(values).tolist()) <= {0, 1}
    assert slots[0].sum() == 0
    assert slots[2].sum() == 1_000


def test_binary_stream_slot_means_match_probabilities():
    # Two-sided exact binomial test per slot; Bonferroni over the slots gives
    # a total false-failure probability of at most 1e-6 (the exact test is
    # conservative).
    users = 50_000
    probabilities = np.array([0.025, 0.05, 0.075, 0.125, 0.25, 0.5, 0.7])
    alpha_per_slot = 1e-6 / probabilities.size
    ones = [
        int(values.sum())
        for values in binary_stream(probabilities, users, np.random.default_rng(2024))
    ]
    for count, probability in zip(ones, probabilities):
        assert stats.binomtest(count, users, probability).pvalue > alpha_per_slot

        # Power check: the same sample rejects a probability 30 % higher ...
        inflated = 1.3 * probability
        assert stats.binomtest(count, users, inflated).pvalue < alpha_per_slot
        # ... and would do so for almost every sample: reject when
        # count <= the alpha/2 quantile under the inflated probability.
        critical = stats.binom.ppf(alpha_per_slot / 2, users, inflated) - 1
        power = stats.binom.cdf(critical, users, probability)
        assert power > 0.999


def test_binary_stream_validates_before_iteration():
    with pytest.raises(ValueError, match="probabilities"):
        binary_stream(np.array([0.5, 1.5]), 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="users"):
        binary_stream(np.array([0.5]), 0, np.random.default_rng(0))


def test_binary_stream_is_deterministic_per_seed():
    probabilities = sin_probabilities(20)
    first = list(binary_stream(probabilities, 500, np.random.default_rng(5)))
    second = list(binary_stream(probabilities, 500, np.random.default_rng(5)))
    other = list(binary_stream(probabilities, 500, np.random.default_rng(6)))
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for a, c in zip(first, other))


def test_binary_stream_draws_blocks_of_slots_exactly_as_one_draw_per_slot():
    """The values do not depend on how many slots one draw covers (here blocks of 5, 5 and 2 slots)."""
    users = 100_000
    probabilities = np.random.default_rng(1).random(12)
    expected = np.random.default_rng(8)
    for values, probability in zip(binary_stream(probabilities, users, np.random.default_rng(8)), probabilities):
        np.testing.assert_array_equal(values, (expected.random(users) < probability).astype(np.int64))


def test_binary_stream_copies_its_input():
    probabilities = np.array([1.0, 1.0])
    stream = binary_stream(probabilities, 10, np.random.default_rng(0))
    probabilities[:] = 0.0
    assert [int(values.sum()) for values in stream] == [10, 10]


# --- registry ---------------------------------------------------------------


def test_registry_names_and_dispatch():
    assert set(STREAMS) == {"sin", "log", "tlns"}
    np.testing.assert_array_equal(
        stream_probabilities("sin", 100, np.random.default_rng(0)), sin_probabilities(100)
    )
    np.testing.assert_array_equal(
        stream_probabilities("log", 100, np.random.default_rng(0)), log_probabilities(100)
    )
    np.testing.assert_array_equal(
        stream_probabilities("tlns", 100, np.random.default_rng(9)),
        tlns_probabilities(100, np.random.default_rng(9)).probabilities,
    )


def test_unknown_stream_name_lists_valid_names():
    with pytest.raises(ValueError, match="log, sin, tlns"):
        stream_probabilities("cos", 10, np.random.default_rng(0))


# --- parameter validation ---------------------------------------------------


@pytest.mark.parametrize("slots", [0, -1, 2.5, True, "10", None])
@pytest.mark.parametrize(
    "make",
    [
        sin_probabilities,
        log_probabilities,
        lambda slots: tlns_probabilities(slots, np.random.default_rng(0)),
        lambda slots: stream_probabilities("sin", slots, np.random.default_rng(0)),
    ],
)
def test_bad_slots_raise(make, slots):
    with pytest.raises(ValueError, match="slots"):
        make(slots)


@pytest.mark.parametrize("users", [0, -5, 1.5, False])
def test_bad_users_raise(users):
    with pytest.raises(ValueError, match="users"):
        binary_stream(np.array([0.5]), users, np.random.default_rng(0))


@pytest.mark.parametrize(
    "probabilities",
    [[-0.1, 0.5], [0.5, 1.0001], [np.nan], [np.inf], [[0.5, 0.5]], [], ["a"]],
)
def test_bad_probabilities_raise(probabilities):
    with pytest.raises(ValueError, match="probabilities"):
        binary_stream(probabilities, 10, np.random.default_rng(0))


def test_bad_stream_parameters_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="amplitude"):
        sin_probabilities(1_000, amplitude=0.1)  # dips to -0.025
    with pytest.raises(ValueError, match="offset"):
        sin_probabilities(10, offset=float("nan"))
    with pytest.raises(ValueError, match="frequency"):
        sin_probabilities(10, frequency=float("inf"))
    with pytest.raises(ValueError, match="amplitude"):
        log_probabilities(10, amplitude=1.5)
    with pytest.raises(ValueError, match="rate"):
        log_probabilities(10, rate=float("nan"))
    with pytest.raises(ValueError, match="initial"):
        tlns_probabilities(10, rng, initial=1.5)
    with pytest.raises(ValueError, match="sigma"):
        tlns_probabilities(10, rng, sigma=-0.1)
    with pytest.raises(TypeError, match="rng"):
        tlns_probabilities(10, 42)
