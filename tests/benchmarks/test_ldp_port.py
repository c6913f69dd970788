"""benchmarks/ldp_port.py at a tiny size, our side only: the port is not in CI, and the JSON says so.

The driver's path through a port (materialise a mirror's files, import them, time them, forget them) runs
against a stand-in mirror built here: a git repository whose LBD and LPD estimate the exact counts of the
``u`` they are given, so it follows its input as the real port must.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import ldp_port
from transforms.mechanisms.synthetic import sin_probabilities

TINY = ["--users", "300", "--slots", "6", "--rounds", "2"]


def run(capsys, *arguments: str) -> dict:
    assert ldp_port.main([*TINY, *arguments]) == 0
    return json.loads(capsys.readouterr().out)


def assert_ours_measured(result: dict, rounds: int = 2) -> None:
    assert set(result["methods"]) == {"lbd", "lpd"}
    for method in result["methods"].values():
        assert set(method["ours"]) == {"users", "aggregate"}
        for ours in method["ours"].values():
            assert len(ours["seconds_per_slot_runs"]) == len(ours["mre_runs"]) == rounds
            assert ours["seconds_per_slot"] > 0 and 0 <= ours["mre"] < float("inf")


def test_without_a_mirror_only_ours_is_measured_and_the_json_says_the_port_was_not(capsys, monkeypatch):
    monkeypatch.delenv(ldp_port.PORT_ENV, raising=False)
    result = run(capsys)
    assert result["port"] == {"available": False, "reason": f"{ldp_port.PORT_ABSENT}: no mirror given "
                                                            f"(--port-mirror or ${ldp_port.PORT_ENV})"}
    assert_ours_measured(result)
    assert all(method.keys() == {"ours"} for method in result["methods"].values())


def test_a_mirror_that_is_not_a_repository_is_reported_not_raised(capsys, tmp_path):
    result = run(capsys, "--rounds", "1", "--port-mirror", str(tmp_path))
    assert result["port"]["available"] is False
    assert result["port"]["reason"].startswith(f"{ldp_port.PORT_ABSENT}: cannot load it from {str(tmp_path)!r}")
    assert_ours_measured(result, rounds=1)


STAND_IN = '''
import numpy as np

import Var  # imports by top-level name, as the port's modules do
import ldp_protocol

def {name}(u, d, w, e, rounds, c, beta):
    counts = np.stack([(u == k).sum(axis=0) for k in range(1, d + 1)])
    return np.array([np.mean(np.abs(counts - c) / np.maximum(c, 1)), 0.0, 0.0, 0.0])
'''


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the stand-in port's mirror")
def test_a_port_is_imported_from_its_mirror_timed_beside_ours_and_forgotten(capsys, tmp_path):
    work = tmp_path / "work"
    for path in ldp_port.PORT_FILES:
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        name = path.rsplit("/", 1)[-1].removesuffix(".py")
        (work / path).write_text(STAND_IN.format(name=name) if path.startswith("budget_division/") else "")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "stand-in"], check=True)
    path_before = list(sys.path)
    result = run(capsys, "--port-mirror", str(work / ".git"), "--check-users", "300")
    port = result["port"]
    assert port["available"] is True and len(port["commit"]) == 40
    for method in result["methods"].values():
        assert method["port"]["mre"] == 0.0 and len(method["port"]["seconds_per_slot_runs"]) == 2
        for simulation, ratio in method["port_over_ours"].items():
            ours, theirs = method["ours"][simulation], method["port"]
            assert ratio["runs"] == [p / o for p, o in zip(theirs["seconds_per_slot_runs"],
                                                           ours["seconds_per_slot_runs"])]
            assert ratio["min"] <= ratio["median"] <= ratio["max"]
    dependence = port["depends_on_data"]
    assert dependence["all"] and all(m["mre_flipped"] == dependence["mre_if_following_flipped"]
                                     for m in dependence["methods"].values())
    assert sys.path == path_before and not {"budget_division", "ldp_protocol", "Var"} & set(sys.modules)


def test_the_sin_stream_has_exactly_round_p_n_ones_in_a_fresh_subset_each_slot():
    stream = ldp_port.sin_stream(1000, 40, seed=3)
    expected = np.rint(sin_probabilities(40) * 1000)
    assert stream.shape == (40, 1000) and np.array_equal(stream.sum(axis=1), expected)
    assert np.array_equal(ldp_port.true_counts(stream), np.stack([1000 - expected, expected], axis=1))
    # independent subsets: slots 1 and 2 share about 6 of their ~75 holders (never half: p < 1e-20)
    assert (stream[0] & stream[1]).sum() < stream[0].sum() / 2


def test_mre_divides_by_the_true_count_or_one():
    true = np.array([[0, 10], [4, 6]])
    released = np.array([[2.0, 5.0], [4.0, 9.0]])
    assert ldp_port.mre(released, true) == pytest.approx((2 / 1 + 5 / 10 + 0 + 3 / 6) / 4)
