"""The empirical privacy audit: its statistics, its streams, every mechanism passing, broken ones flagged.

Audits run with the seeded generator and fixed seeds, so outcomes are
reproducible; each statistical test states how likely it would be to fail for
a seed drawn at random.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from broken_mechanisms import forgetful, forgets_one_slot, half_scale_noise
from pipelines import audit as audit_module
from pipelines.audit import (AuditConfig, Direction, Event, clopper_pearson, lower_bound, neighbouring_streams,
                             registered_factory, run_seed)
from transforms.mechanisms import MECHANISMS, NO_VALUE, DynamicRequirements, FixedRequirements


def run_audit(name, factory, **config):
    return audit_module.audit(name, factory, AuditConfig(**config))


# ---------------------------------------------------------------------- the statistics
def test_clopper_pearson_equals_the_beta_quantiles():
    betaincinv = pytest.importorskip("scipy.special").betaincinv
    n, tail = 300, 0.01
    k = np.array([0, 1, 2, 17, 150, 298, 299, 300])
    lower, upper = clopper_pearson(k, n, tail)
    with np.errstate(all="ignore"):
        expected_lower = np.nan_to_num(betaincinv(k, n - k + 1, tail), nan=0.0)
        expected_upper = np.nan_to_num(betaincinv(k + 1, n - k, 1 - tail), nan=1.0)
    assert np.allclose(lower, expected_lower, rtol=1e-8, atol=1e-11)
    assert np.allclose(upper, expected_upper, rtol=1e-8, atol=1e-11)
    assert lower[0] == 0.0 and upper[-1] == 1.0
    assert np.all(lower <= expected_lower + 1e-15) and np.all(upper >= expected_upper - 1e-15)  # outward


@pytest.mark.parametrize("a, b", [(0.3, 0.005), (0.02, 0.0), (0.6, 0.1), (0.9, 0.2)])
def test_clopper_pearson_covers_pooled_counts_with_two_probabilities(a, b):
    """What mirrored events rely on: counts Bin(100, a) + Bin(100, b) read as 200 trials of (a+b)/2.

    4000 draws; each one-sided bound at tail 0.05 must miss (a+b)/2 in at most
    6.4% of them (0.05 plus 4 standard deviations: a false failure has
    probability below 1e-4 if the bound is valid).
    """
    rng = np.random.default_rng(31)
    counts = rng.binomial(100, a, 4000) + rng.binomial(100, b, 4000)
    distinct, where = np.unique(counts, return_inverse=True)
    lower, upper = clopper_pearson(distinct, 200, 0.05)
    mean = (a + b) / 2
    assert np.mean(lower[where] > mean) <= 0.064
    assert np.mean(upper[where] < mean) <= 0.064


@pytest.mark.parametrize("bad", [dict(successes=[-1], n=10), dict(successes=[11], n=10), dict(successes=[1], n=0)])
def test_clopper_pearson_refuses_impossible_counts(bad):
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(bad["successes"], bad["n"], 0.05)


def test_the_bound_covers_the_true_loss_and_has_power():
    """Randomized response, S = ±1 with P0(S=1) = P1(S=-1) = e^ε/(1+e^ε): every event's ratio is at most e^ε,
    and both the plain and the mirrored events reach it; 150 repetitions of 400 runs per stream.

    Coverage: at confidence 0.8 each repetition exceeds ε with probability at
    most 0.2, so more than 45 exceedances out of 150 has probability below 1e-4
    (binomial tail).  Power: the mean bound must reach 0.6ε (it is about 0.8ε;
    it would be 0 for a bound that never looks at the data).
    """
    rng = np.random.default_rng(2024)
    epsilon, n = 1.0, 400
    p = np.exp(epsilon) / (1 + np.exp(epsilon))
    bounds = [lower_bound(2 * rng.binomial(1, p, n) - 1, 2 * rng.binomial(1, 1 - p, n) - 1, 0.8).lower_bound
              for _ in range(150)]
    assert sum(b > epsilon for b in bounds) <= 45
    assert np.mean(bounds) >= 0.6 * epsilon


def test_identical_distributions_give_a_small_bound():
    """Both streams from one distribution: the true loss is 0.  At confidence 0.95 the bound exceeds 0
    with probability at most 5%; here it must stay below 0.5."""
    rng = np.random.default_rng(7)
    estimate = lower_bound(rng.integers(-3, 4, 800), rng.integers(-3, 4, 800), 0.95)
    assert estimate.lower_bound <= 0.5
    assert estimate.evaluation_runs == 600


def test_the_bound_comes_from_the_runs_after_the_selection_only():
    """The first quarter shows a huge effect that the other runs do not: the bound must be 0."""
    present = np.r_[np.ones(25), np.zeros(75)].astype(np.int64)
    absent = np.zeros(100, np.int64)
    estimate = lower_bound(present, absent, 0.95)
    assert estimate.selection_bound > 1.0
    assert estimate.lower_bound == 0.0 and estimate.evaluation_runs == 75
    assert estimate.favoured_hits == estimate.other_hits  # measured on the evaluation runs, where S is always 0


@pytest.mark.parametrize("direction, threshold, expected", [
    (Direction.AT_LEAST, 1, (2, 1, 4)), (Direction.AT_MOST, -1, (3, 1, 4)), (Direction.MIRRORED, 1, (5, 2, 8))])
def test_events_count_the_runs_they_describe(direction, threshold, expected):
    present, absent = np.array([-1, 0, 1, 2]), np.array([-2, -1, -1, 1])
    assert Event(direction, threshold).counts(present, absent) == expected


# ---------------------------------------------------------------------- the streams
@pytest.mark.parametrize("dynamic", [False, True])
def test_neighbours_differ_only_in_user_i_inside_one_window(dynamic):
    config = AuditConfig(epsilon=0.5, window=3, users=5, runs=10)
    streams = neighbouring_streams(config, dynamic)
    assert list(streams.window_slots) == [3, 4, 5] and len(streams.present) == len(streams.absent) == 5
    for slot, (a, b) in enumerate(zip(streams.present, streams.absent), start=1):
        assert np.array_equal(a.users, b.users)
        assert np.array_equal(a.values[1:], b.values[1:])
        assert a.values[0] == 0
        assert b.values[0] == (NO_VALUE if slot in streams.window_slots else 0)
        assert (a.requirements is None) == (b.requirements is None) == (slot > 1)
        assert len(set(a.values[1:])) == 1  # the others move together
    first = streams.present[0].requirements
    if dynamic:
        assert isinstance(first, DynamicRequirements)
        assert set(first.backward_window) == set(first.forward_window) == {3}
        assert set(first.backward_units) == set(first.forward_units) == {config.epsilon_units}
    else:
        assert isinstance(first, FixedRequirements)
        assert set(first.window) == {3} and set(first.epsilon_units) == {config.epsilon_units}
    counts = [int(np.count_nonzero(streams.present[t - 1].values[1:] == 0)) for t in streams.window_slots]
    assert list(streams.others_in_target_bin) == counts


def test_runs_get_distinct_seeds_and_secure_noise_is_the_default():
    seeds = {run_seed(seed, stream, run) for seed in (0, 1, 2**32 - 1) for stream in (0, 1) for run in
             (0, 1, 999, 10_000_000)}
    assert len(seeds) == 24
    assert AuditConfig().noise == "secure"
    assert audit_module._randomness(AuditConfig())(0, 0).is_secure
    seeded = AuditConfig(insecure_seed=3)
    assert "INSECURE" in seeded.noise and not audit_module._randomness(seeded)(0, 0).is_secure


@pytest.mark.parametrize("field, value", [("epsilon", 0), ("epsilon", -1.0), ("window", 0), ("users", 1),
                                          ("runs", 3), ("confidence", 1.0), ("confidence", 0.2), ("warmup", -1),
                                          ("insecure_seed", -2), ("insecure_seed", 2**32)])
def test_bad_settings_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        AuditConfig(**{field: value})


# ---------------------------------------------------------------------- every mechanism passes
@pytest.mark.parametrize("name", list(MECHANISMS))
def test_every_registered_mechanism_passes(name):
    """At confidence 0.99 a correct mechanism is flagged for a random seed with probability at most 1%.

    The ledger sees every run: user i never spends more than E_i in a window.
    """
    result = run_audit(name, registered_factory(name), epsilon=2.0, window=2, runs=100, confidence=0.99,
                       insecure_seed=11)
    assert not result.violation, result.to_json()
    assert result.estimate.lower_bound <= 2.0
    assert 0 < result.ledger_max_window_usage_ratio <= 1.0 and result.ledger_violations == 0
    assert result.fresh_in_window > 0  # the window held releases to judge


@pytest.mark.parametrize("name", ["uniform", "sample"])
def test_the_audit_sees_most_of_a_tight_mechanisms_budget(name):
    """Power on correct mechanisms: Uniform and Sample spend all of E_i on releases, so the bound comes close.

    The median bound is about 1.5 (Uniform) and 1.65 (Sample) of E = 2 at 200
    runs per stream; below 1.0 (half of E) for a random seed with probability
    under 0.1% (binomial model of the counts of the extreme event).
    """
    result = run_audit(name, registered_factory(name), epsilon=2.0, window=2, runs=200, insecure_seed=5)
    assert 1.0 <= result.estimate.lower_bound <= 2.0, result.to_json()


# ---------------------------------------------------------------------- broken variants are flagged
BROKEN_CASES = [
    pytest.param("ba, never records the last publication", forgetful("ba"), dict(epsilon=2.0, window=5, runs=350),
                 True, marks=pytest.mark.slow, id="forgetful-ba"),
    pytest.param("pba, never records the last publication", forgetful("pba"),
                 dict(epsilon=2.0, window=5, runs=350), True, marks=pytest.mark.slow, id="forgetful-pba"),
    pytest.param("uniform, noise at half the scale", half_scale_noise("uniform"),
                 dict(epsilon=2.0, window=2, runs=150), "undercharged", id="half-noise-uniform"),
    pytest.param("sample, noise at half the scale", half_scale_noise("sample"),
                 dict(epsilon=1.0, window=2, runs=150), "undercharged", id="half-noise-sample"),
    pytest.param("sample, budget window forgets one slot", forgets_one_slot("sample"),
                 dict(epsilon=2.0, window=2, runs=150), True, id="forgets-one-slot-sample"),
]


@pytest.mark.parametrize("name, factory, config, ledger_sees_it", BROKEN_CASES)
def test_broken_variants_are_flagged(name, factory, config, ledger_sees_it):
    """Each variant leaks at least twice its E_i through its releases (2.5 E_i for the forgetful ones at
    w_i = 5); the audit must flag it.

    Power: at these run counts the bound exceeds E_i for a random seed with
    probability above 97% (simulated: the audit's own bound on 150 draws of the
    sign statistic S of the releases, choice of the event included).  Half-scale
    noise reports charges for E_i, so its windows look fine, but the noise scale in
    the release's evidence implies twice the charge (``undercharged``); the other
    variants overspend their windows in the ledger.
    """
    result = run_audit(name, factory, insecure_seed=21, **config)
    assert result.violation, result.to_json()
    assert result.estimate.lower_bound > config["epsilon"]
    assert result.ledger_violations > 0
    if ledger_sees_it == "undercharged":
        assert result.ledger_max_window_usage_ratio <= 1.0
    else:
        assert result.ledger_max_window_usage_ratio >= 2.0


def test_seeded_audits_are_reproducible():
    config = dict(epsilon=2.0, window=2, runs=20, insecure_seed=4)
    first = run_audit("uniform", registered_factory("uniform"), **config)
    again = run_audit("uniform", registered_factory("uniform"), **config)
    other = run_audit("uniform", registered_factory("uniform"), **{**config, "insecure_seed": 5})
    assert all(np.array_equal(a, b) for a, b in zip(first.statistics, again.statistics))
    assert not all(np.array_equal(a, b) for a, b in zip(first.statistics, other.statistics))
    assert len(set(first.statistics[0].tolist())) > 1  # runs differ from each other


# ---------------------------------------------------------------------- the command line
def test_json_output_has_the_documented_fields(capsys):
    code = audit_module.run(["--mechanism", "Uniform", "--runs", "40", "--window", "2", "--insecure-seed", "1",
                             "--json"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(lines) == 1
    record = json.loads(lines[0])
    assert list(record)[:6] == ["mechanism", "epsilon", "window", "lower_bound", "runs", "violation"]
    assert (record["mechanism"], record["epsilon"], record["window"], record["runs"]) == ("uniform", 2.0, 2, 40)
    assert record["violation"] is False and 0 <= record["lower_bound"] <= 2.0
    assert "INSECURE" in record["noise"] and record["confidence"] == 0.95
    assert record["ledger_max_window_usage_ratio"] <= 1.0 and record["ledger_violations"] == 0


def test_all_mechanisms_print_one_line_each(capsys):
    code = audit_module.run(["--mechanism", "all", "--runs", "4", "--window", "1", "--users", "3",
                             "--insecure-seed", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert [line.split()[0] for line in lines] == list(MECHANISMS)
    assert all(line.endswith(": pass") for line in lines)


@pytest.mark.parametrize("argv, named", [
    (["--mechanism", "laplace"], "unknown mechanism 'laplace'"),
    (["--mechanism", "pbd", "--runs", "2"], "runs"),
    (["--mechanism", "pbd", "--epsilon", "-1"], "epsilon"),
    (["--mechanism", "pbd", "--window", "0"], "window"),
    (["--mechanism", "pbd", "--confidence", "1.5"], "confidence"),
    (["--mechanism", "bd", "--epsilon", "0.000000000001", "--window", "4"], "too small"),
    (["--mechanism", "dpbd", "--window", "200000"], "max_window"),
    (["--runs", "10"], "--mechanism"),
    (["--mechanism", "pbd", "--runs", "many"], "--runs"),
])
def test_bad_arguments_fail_with_one_line_and_exit_code_2(capsys, argv, named):
    assert audit_module.run(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0]


def test_a_flagged_mechanism_makes_the_exit_code_1(monkeypatch, capsys):
    monkeypatch.setattr(audit_module, "registered_factory", lambda name: half_scale_noise("sample"))
    code = audit_module.run(["--mechanism", "sample", "--runs", "200", "--epsilon", "1", "--window", "2",
                             "--insecure-seed", "21", "--json"])
    assert code == 1 and json.loads(capsys.readouterr().out)["violation"] is True



def test_the_report_names_its_command_and_has_one_row_per_audit():
    from benchmarks.audit_report import report

    config = AuditConfig(epsilon=2.0, window=1, users=3, runs=4, insecure_seed=1)
    rows = [("mechanism", audit_module.audit("sample", registered_factory("sample"), config)),
            ("broken", audit_module.audit("sample, noise at half the scale", half_scale_noise("sample"), config))]
    text = report(rows, "python -m benchmarks.audit_report --runs 4", config, 3.0)
    assert text.splitlines()[2].startswith("Generated by `python -m benchmarks.audit_report --runs 4`")
    table = [line for line in text.splitlines() if line.startswith("| sample")]
    assert len(table) == 2 and all(line.count("|") == 11 for line in table)
    assert "## Limits" in text and "INSECURE" in text
