"""The crowd distribution release of the numeric streams (``crowd_window``/``crowd_bins``, spec §3.8.3): exactly
the fractions a slow reference computes from the reports sent, the mean release's charges, carried through a
checkpoint, and closer to the true per-user means' distribution as epsilon grows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanism_helpers import run_with_ledger
from transforms.mechanisms import Estimate, FixedRequirements, ReleaseKind, SlotBatch, make_mechanism
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.numeric.server import wasserstein_binned
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS

LOW, HIGH = -5.0, 15.0


def batches_of(x: np.ndarray, window: int, epsilon: float) -> list[SlotBatch]:
    """Slot batches of ``x`` (users × slots, values in domain units; NaN: the user holds no value that slot);
    every user declares ``(window, epsilon)`` at the first slot."""
    reqs = FixedRequirements.of([window] * x.shape[0], [epsilon] * x.shape[0])
    return [SlotBatch.of(range(x.shape[0]), x[:, t], reqs if t == 0 else None) for t in range(x.shape[1])]


def recording(mechanism):
    """``mechanism`` with every slot's reports recorded: a list of ``{user: report}`` (the [0, 1] units the crowd
    averages: ``crowd_values``, ToPL's de-biased), one per step."""
    sent, run_users = [], mechanism.run_users

    def run(users, x, rng):
        reporters, released, reports = run_users(users, x, rng)
        sent.append(dict(zip(reporters.tolist(), mechanism.crowd_values(released).tolist())))
        return reporters, released, reports

    mechanism.run_users = run
    return sent


def reference(sent: list[dict], q: int, bins: int) -> list[list[float] | None]:
    """Per slot, straight from the reports: the users with a report in the last ``q`` slots, each one's mean
    (summed oldest first), binned as ``floor(mean * bins)`` clipped to the end bins; None without reporters."""
    out = []
    for t, now in enumerate(sent):
        if not now:
            out.append(None)
            continue
        recent = sent[max(0, t - q + 1):t + 1]
        counts = [0] * bins
        users = sorted({user for slot in recent for user in slot})
        for user in users:
            total, n = 0.0, 0
            for slot in recent:
                if user in slot:
                    total += slot[user]
                    n += 1
            counts[min(max(math.floor(total / n * bins), 0), bins - 1)] += 1
        out.append([c / len(users) for c in counts])
    return out


def check_against_reference(name: str, x: np.ndarray, q: int, bins: int, seed: int, **options) -> list:
    mechanism = make_mechanism(name, epsilon=2.0, window=4, low=LOW, high=HIGH, out_of_range="clip",
                               crowd_window=q, crowd_bins=bins, **options)
    sent = recording(mechanism)
    releases, ledger = run_with_ledger(mechanism, batches_of(x, 4, 2.0), seed=seed, max_window=4)
    assert ledger.violation_count == 0
    expected, previous = reference(sent, q, bins), np.zeros(bins)
    for release, fractions in zip(releases, expected):
        assert release.estimates is Estimate.DISTRIBUTION and release.values.shape == (bins,)
        if fractions is None:
            assert release.kind is not ReleaseKind.FRESH and release.values.tolist() == previous.tolist()
        else:
            assert release.kind is ReleaseKind.FRESH and release.values.tolist() == fractions  # exactly
            assert math.isclose(release.values.sum(), 1.0)
        previous = release.values
    return releases


@pytest.mark.parametrize("name, options", [("sw-direct", {}), ("ipp", {}), ("app", {}), ("capp", {}),
                                           ("pp-s", {"segment": 2}), ("app-s", {"segment": 3}),
                                           ("capp-s", {"segment": 2}), ("sampling", {"segment": 3}),
                                           ("ba-sw", {}), ("topl", {})])
def test_every_method_releases_the_reference_distribution_of_its_reports(name, options):
    """Users hold no value at some slots (some at none of the first five); values outside [LOW, HIGH] are
    clipped (ToPL's reports leave the interval: their means are counted in the end bins)."""
    rng = np.random.default_rng(11)
    x = LOW - 3 + (HIGH - LOW + 6) * rng.random((25, 14))
    x[rng.random(x.shape) < 0.3] = np.nan
    x[20:, :5] = np.nan
    releases = check_against_reference(name, x, q=3, bins=5, seed=4, **options)
    assert sum(r.kind is ReleaseKind.FRESH for r in releases) >= 4


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["sw-direct", "capp", "capp-s", "ba-sw", "topl"]), users=st.integers(1, 6),
       slots=st.integers(1, 9), q=st.integers(1, 4), bins=st.integers(1, 5), seed=st.integers(0, 2 ** 16),
       presence=st.floats(0.2, 1.0))
def test_small_streams_release_the_reference_distribution(name, users, slots, q, bins, seed, presence):
    rng = np.random.default_rng(seed)
    x = LOW + (HIGH - LOW) * rng.random((users, slots))
    x[:, 1:][rng.random((users, slots - 1)) > presence] = np.nan
    check_against_reference(name, x, q, bins, seed, **({"segment": 2} if name == "capp-s" else {}))


@pytest.mark.parametrize("name", ["app", "capp-s", "ba-sw"])
def test_the_distribution_costs_what_the_mean_release_costs(name):
    """Post-processing: the same seeded run sends the same reports and is charged the same, group by group."""
    rng = np.random.default_rng(3)
    x = LOW + (HIGH - LOW) * rng.random((30, 12))
    x[rng.random(x.shape) < 0.2] = np.nan
    runs = []
    for crowd in ({}, {"crowd_window": 4, "crowd_bins": 3}):
        mechanism = make_mechanism(name, epsilon=2.0, window=4, low=LOW, high=HIGH, **crowd)
        sent = recording(mechanism)
        runs.append((sent, *run_with_ledger(mechanism, batches_of(x, 4, 2.0), seed=9, max_window=4)))
    (mean_sent, mean_releases, mean_ledger), (crowd_sent, crowd_releases, crowd_ledger) = runs
    assert crowd_sent == mean_sent
    for a, b in zip(mean_releases, crowd_releases):
        assert (a.kind, a.epsilon_units) == (b.kind, b.epsilon_units)
        assert a.charges.group_of.tolist() == b.charges.group_of.tolist()
        parts = [{k: v.tolist() for k, v in r.charges.group_parts.items()} for r in (a, b)]
        assert parts[0] == parts[1]
        assert a.estimates is Estimate.MEAN and b.estimates is Estimate.DISTRIBUTION
    assert crowd_ledger.violation_count == mean_ledger.violation_count == 0
    assert crowd_ledger.max_usage_ratio == mean_ledger.max_usage_ratio > 0
    assert NUMERIC_STREAMS[name].estimates is Estimate.MEAN  # the class's default is unchanged


@pytest.mark.parametrize("name", ["ipp", "capp-s", "topl"])
def test_a_resumed_mechanism_carries_the_users_last_reports(name):
    """Saved mid-run and loaded, the tail equals the uninterrupted run's; a fresh mechanism (no rings) would not."""
    rng = np.random.default_rng(8)
    x = LOW + (HIGH - LOW) * rng.random((20, 12))
    x[rng.random(x.shape) < 0.25] = np.nan
    batches = batches_of(x, 4, 2.0)
    kwargs = dict(epsilon=2.0, window=4, low=LOW, high=HIGH, crowd_window=5, crowd_bins=4,
                  **({"segment": 2} if name == "capp-s" else {}))
    whole, _ = run_with_ledger(make_mechanism(name, **kwargs), batches, seed=6)
    first, generator = make_mechanism(name, **kwargs), insecure_seeded_randomness(6)
    head = [first.step(b, generator) for b in batches[:6]]
    state = first.to_bytes()
    resumed = type(first).from_bytes(first.params, state)
    assert resumed.user_state["crowd_reports"].shape == (20, 5)
    tail = [resumed.step(b, generator) for b in batches[6:]]
    assert [r.values.tolist() for r in head + tail] == [r.values.tolist() for r in whole]
    forgetful = type(first).from_bytes(first.params, state)
    forgetful.user_state["crowd_reports"][:] = np.nan
    generator, again = insecure_seeded_randomness(6), make_mechanism(name, **kwargs)
    for batch in batches[:6]:  # the head's draws
        again.step(batch, generator)
    assert [forgetful.step(b, generator).values.tolist() for b in batches[6:]] != [r.values.tolist() for r in tail]


@pytest.mark.parametrize("kwargs, match", [
    ({"crowd_window": 3}, "needs both crowd_window"),
    ({"crowd_bins": 3}, "needs both crowd_window"),
    ({"crowd_window": 0, "crowd_bins": 3}, "crowd_window must be an integer >= 1"),
    ({"crowd_window": 3, "crowd_bins": 2.5}, "crowd_bins must be an integer >= 1"),
    ({"crowd_window": True, "crowd_bins": 2}, "crowd_window must be an integer >= 1"),
])
def test_bad_crowd_parameters_fail_in_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match) as error:
        make_mechanism("capp", epsilon=1.0, window=4, low=0.0, high=1.0, **kwargs)
    assert "\n" not in str(error.value)


def test_the_released_distribution_approaches_the_true_one_as_epsilon_grows():
    """20,000 users, each value fixed (a Beta(2, 5) crowd) with a little jitter; SW-direct over w = q = 2 slots at
    epsilon 1, 6, 36 (0.5, 3, 18 per report): W1 between the released histogram and the true means' one.

    Given the true values the users' reports are independent, and one user moves W1 by at most 1/N: McDiarmid
    gives P(|W1 - E W1| >= 0.019) <= 2 exp(-2·0.019²·N) = 1.1e-6 per run.  On four trial seeds the W1 were
    0.18, 0.068, 0.0002 (spread < 0.004), so the asserted gaps (0.03) and bound (0.02) fail only if a run is
    0.019 or more off its expectation: false-failure probability below 4e-6.  Power: the released bins reversed
    (W1 about 0.43) or the truth shifted by one bin (0.1) are far outside the bound at the largest epsilon."""
    users, q, bins = 20_000, 2, 10
    rng = np.random.default_rng(21)
    centre = rng.beta(2, 5, users)
    x = np.clip(centre[:, None] + rng.uniform(-0.02, 0.02, (users, q)), 0, 1)
    truth = np.bincount(np.minimum((x.mean(axis=1) * bins).astype(int), bins - 1), minlength=bins) / users
    distances = []
    for epsilon in (1.0, 6.0, 36.0):
        mechanism = make_mechanism("sw-direct", epsilon=epsilon, window=q, low=0.0, high=1.0, crowd_window=q,
                                   crowd_bins=bins)
        releases, ledger = run_with_ledger(mechanism, batches_of(x, q, epsilon), seed=int(epsilon), max_window=q)
        assert ledger.violation_count == 0 and math.isclose(releases[-1].values.sum(), 1.0)
        distances.append(wasserstein_binned(releases[-1].values, truth))
    assert distances[0] > distances[1] + 0.03 and distances[1] > distances[2] + 0.03, distances
    assert distances[2] < 0.02, distances
    released = releases[-1].values
    assert wasserstein_binned(released[::-1], truth) > 0.2
    assert wasserstein_binned(np.roll(truth, 1), truth) > 0.02 + 0.05
