"""The soak benchmark at a tiny size: its report's structure, and an exactness check that catches drift."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.soak import ExactWindows, ledger_starting_below_wrap, main, soak
from transforms.mechanisms import DISSIMILARITY, PUBLICATION, CohortCharges, DynamicRequirements, SlotBatch
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.evidence import no_statistics

U = UNITS_PER_EPSILON


def charges(units) -> CohortCharges:
    """Charges for users 0..n-1 under a loose dynamic requirement (each in their own cohort)."""
    n = len(units)
    loose = DynamicRequirements(np.ones(n, np.int64), np.full(n, 10 * U), np.ones(n, np.int64), np.full(n, 10 * U))
    return CohortCharges(cohort_of=np.arange(n), cohort_parts={DISSIMILARITY: np.zeros(n, np.int64),
                                                               PUBLICATION: np.asarray(units, np.int64)},
                         cohort_requirements=loose, waiting_users=np.zeros(0, np.int64), waiting_requirements=None,
                         evidence=no_statistics(np.arange(n)),
                         declarations=SlotBatch.of(np.arange(n), np.full(n, -1), loose))


@pytest.mark.parametrize("mechanism", ["dpbd", "dpba"])
def test_tiny_soak_reports_every_checkpoint_exactly(mechanism):
    # 600 slots over windows of up to 200: the ledger's and the reference's rings wrap three times,
    # and ledger totals start at most 10 epsilon below 2^64, so most of them wrap too
    report = soak(users=200, slots=600, mechanism=mechanism, checkpoints=(250, 400, 9999), insecure_seed=1,
                  start_below_wrap=10.0, random_check_every=50)
    rows = report["checkpoints"]
    assert [row["slot"] for row in rows] == [250, 400, 600]  # beyond the run dropped, the last slot added
    for row in rows:
        assert row["history_width"] == report["max_window"] == 200
        assert 1 <= row["cohorts"] <= 200
        assert row["mechanism_state_bytes"] > 0 and row["ledger_state_bytes"] > 0
        assert 0 < row["rss_mib"] <= row["interval_peak_rss_mib"] <= row["peak_rss_mib"]
        assert row["violations"] == 0 and 0 < row["max_window_usage_ratio"] <= 1
        assert row["mismatches_at_checkpoint"] == 0
        assert set(row["seconds_per_slot"]) == {"mechanism", "ledger", "all"}
        assert sum(row["kinds"].values()) == row["slot"]
    # every user at >= 6 window lengths per checkpoint, plus the random slots' samples
    exactness = report["exactness"]
    assert exactness["random_slot_checks"] > 0
    assert exactness["window_checks"] >= 3 * 200 * 6 + exactness["random_slot_checks"]
    assert exactness["window_checks"] == rows[-1]["window_checks"]
    assert exactness["mismatches"] == 0 and exactness["first_mismatches"] == [] and exactness["exact"]
    assert 0 < exactness["users_whose_ledger_total_wrapped"] < 200
    assert report["ledger"] == {"max_window_usage_ratio": rows[-1]["max_window_usage_ratio"], "violations": 0}
    assert report["warmup"]["slots"] == 249 and report["warmup"]["peak_rss_mib"] <= rows[0]["peak_rss_mib"]
    memory = report["memory"]
    assert (memory["from_slot"], memory["to_slot"]) == (250, 600)
    assert memory["interval_peak_rss_growth_mib"] == pytest.approx(
        rows[-1]["interval_peak_rss_mib"] - rows[0]["interval_peak_rss_mib"])
    assert memory["run_peak_rss_growth_mib"] >= 0
    assert memory["mechanism_state_growth_bytes"] == 0  # the state is sized by max_window, not by slots
    assert report["noise"].startswith("INSECURE")


def test_command_line_prints_the_report_as_json(capsys):
    code = main(["--users", "50", "--slots", "250", "--checkpoints", "210", "--insecure-seed", "3",
                 "--mechanism", "dpba", "--dataset", "tlns", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (report["mechanism"], report["dataset"], report["users"]) == ("dpba", "tlns", 50)
    assert [row["slot"] for row in report["checkpoints"]] == [210, 250]
    assert report["memory"]["flat"] and report["exactness"]["exact"]


def test_ledger_totals_wrap_without_changing_window_sums():
    ledger = ledger_starting_below_wrap(max_window=3, below=np.array([5, 0]))
    for slot, units in enumerate([[3, 1], [4, 2], [0, 0], [9, 7]], start=1):
        ledger.record(slot, charges(units))  # user 0's total passes 2^64 at slot 2
    assert [ledger.window_sum(0, first, 4) for first in (2, 3, 4)] == [13, 9, 9]
    assert [ledger.window_sum(1, first, 4) for first in (2, 3, 4)] == [9, 7, 7]


def test_exact_windows_catch_one_unit_of_drift():
    users, window, slots, drift_slot = 4, 5, 30, 12
    gen = np.random.default_rng(7)
    ledger = ledger_starting_below_wrap(window, gen.integers(0, 50 * U, users))
    exact = ExactWindows(users, window)
    everyone = np.arange(users)
    found = {}
    for slot in range(1, slots + 1):
        units = gen.integers(0, U // 10, users)
        drifted = units.copy()
        if slot == drift_slot:
            drifted[2] += 1  # the ledger is charged one unit (10^-12 epsilon) more than the truth, once
        ledger.record(slot, charges(drifted))
        exact.record(slot, everyone, units)
        for length in range(1, min(window, slot) + 1):
            found[slot, length] = exact.check(ledger, everyone, length)
    # exactly the windows that contain the drifted slot show exactly one mismatch (user 2), no others
    expected = {(slot, length): int(slot - length + 1 <= drift_slot <= slot) for slot, length in found}
    assert found == expected
    assert exact.mismatches == sum(expected.values()) > 0
    first = exact.first_mismatches[0]
    assert (first["user"], first["ledger"] - first["exact"]) == (2, 1)
    assert first["last_slot"] == drift_slot


def test_exact_windows_refuse_gaps_and_out_of_range_windows():
    exact = ExactWindows(users=2, max_window=3)
    exact.record(1, np.array([0, 1]), np.array([1, 2]))
    with pytest.raises(ValueError, match="expected slot 2"):
        exact.record(3, np.array([0]), np.array([1]))
    with pytest.raises(ValueError, match="outside the kept history"):
        exact.window(np.array([0]), 2)
    with pytest.raises(ValueError, match="negative"):
        exact.record(2, np.array([0]), np.array([-1]))
    assert exact.window(np.array([1, 0]), 1).tolist() == [2, 1]
