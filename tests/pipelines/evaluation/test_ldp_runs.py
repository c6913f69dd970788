"""One LDP-IDS run (pipelines.evaluation.ldp): the engine, the ledger, the paired seeds and the bits of the
data-independent methods against TV-12's predictions (spec ldp_ids.md §6.3, §7)."""

import numpy as np
import pytest

from pipelines.evaluation import ldp
from pipelines.evaluation.ldp import LdpTask, build_method, probability_path, run_stream, run_task
from pipelines.evaluation.ldp_data import load_stream
from pipelines.evaluation.ldp_paper import TABLE2, predicted_bits
from pipelines.evaluation_data import DataUnavailable


def task(method, dataset="sin", epsilon=1.0, window=20, users=400, slots=45, **kw):
    return LdpTask(dataset, method, epsilon, window, 0.5, users, slots, 0, 3, **kw)


@pytest.mark.parametrize("method", ["lbu", "lsp", "lpu"])
@pytest.mark.parametrize("epsilon,window", [(1.0, 20), (2.0, 40)])
def test_data_independent_bits_match_tv12(method, epsilon, window):
    """LBU = b(ε/w) = 1; LSP = #{t: (t-1) mod w = 0}(b+1)/T; LPU = (b+1)/w when w divides n (TV-12); at
    n = 200,000 and T = 800 these are Table 2's values."""
    users, slots = 400, 45 if window == 20 else 80
    row = run_task(task(method, epsilon=epsilon, window=window, users=users, slots=slots))
    assert row["bits_per_user_slot"] == pytest.approx(predicted_bits(method, epsilon, window, users, slots, 1, 1),
                                                      abs=1e-12)
    assert predicted_bits(method, epsilon, window, 200_000, 800, 1, 1) == TABLE2[(epsilon, window, method, "sin")]
    assert row["ledger_violations"] == 0


def test_lsp_bits_count_the_sampling_slots():
    assert predicted_bits("lsp", 1.0, 20, 400, 45, 1, 1) == pytest.approx(3 * 2 / 45)  # t = 1, 21, 41


def test_adaptive_runs_are_private_and_publish_some_slots():
    for method in ("lbd", "lba", "lpd", "lpa"):
        row = run_task(task(method, users=2000, slots=60))
        assert row["ledger_violations"] == 0 and row["max_window_usage_ratio"] <= 1
        assert 0 < row["fresh_fraction"] < 1
        assert np.isfinite(row["mre"]) and row["mse"] > 0


def test_methods_of_one_repeat_see_the_same_stream():
    """Paired runs: the truth depends on (seed, dataset, n, T, repeat), not on the method or (ε, w, β)."""
    a = run_stream(task("lbu"))
    b = run_stream(LdpTask("sin", "lpd", 2.0, 10, 0.3, 400, 45, 0, 3))
    np.testing.assert_array_equal(a.truth, b.truth)
    assert not np.array_equal(a.released, b.released)
    first, second = (run_stream(LdpTask("lns", "lbu", 1.0, 20, 0.5, 400, 45, repeat, 3)) for repeat in (0, 1))
    assert not np.array_equal(first.truth, second.truth)  # a repeat draws another LNS path
    # exact counts: the 1-bin is round(p_t n)/n
    p, _ = probability_path(task("lbu"))
    np.testing.assert_allclose(a.truth[:, 1], np.floor(p * 400 + 0.5) / 400)


def test_the_lns_path_does_not_depend_on_n():
    small, _ = probability_path(task("lbu", dataset="lns", users=100))
    large, _ = probability_path(task("lbu", dataset="lns", users=5000))
    np.testing.assert_array_equal(small, large)
    assert small.min() > 0.01


def test_methods_take_beta_and_simulate_in_aggregate():
    mechanism = build_method(LdpTask("sin", "lpd", 1.0, 20, 0.3, 400, 45, 0, 3), 2)
    assert mechanism.params.beta == 0.3 and mechanism.params.simulation == "aggregate"


def test_absent_real_data_is_refused_saying_why(tmp_path):
    for name in ("taxi", "foursquare", "gowalla"):
        with pytest.raises(DataUnavailable, match=f"{name}: .* is not on this machine"):
            load_stream(str(tmp_path), name)


def test_exchangeable_runs_build_no_users_values_and_match_the_same_law(monkeypatch):
    """``--exchangeable``: the synthetic stream's counts alone (no exact_count_stream call), ledger clean; LBU asks
    everyone, so its run is the users' run exactly (the hypergeometric draw of all holders takes no randomness)."""
    users_run = run_task(LdpTask("sin", "lbu", 1.0, 5, 0.5, 3000, 40, 0, 0))
    monkeypatch.setattr(ldp, "exact_count_stream", lambda *a: (_ for _ in ()).throw(AssertionError("values built")))
    counts_run = run_task(LdpTask("sin", "lbu", 1.0, 5, 0.5, 3000, 40, 0, 0, exchangeable=True))
    assert counts_run["mre"] == users_run["mre"] and counts_run["ledger_violations"] == 0
    lpd = run_task(LdpTask("lns", "lpd", 1.0, 5, 0.5, 3000, 40, 0, 0, exchangeable=True))
    assert lpd["ledger_violations"] == 0 and 0 < lpd["max_window_usage_ratio"] <= 1 and lpd["fresh_fraction"] > 0
    with pytest.raises(ValueError, match="synthetic binary streams"):
        ldp.run_stream(LdpTask("lns-con", "lbu-mean", 1.0, 5, 0.5, 100, 5, 0, 0, exchangeable=True))
