"""benchmarks/ldp_sampling.py prints one JSON object with before/after timings of a small configuration."""

from __future__ import annotations

import json

from benchmarks import ldp_sampling


def test_prints_before_and_after_timings(capsys):
    assert ldp_sampling.main(["--trials", "5000", "--cells", "4", "--users", "3000", "--bins", "12",
                              "--grr-bins", "3", "--repeats", "1", "--before-repeats", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["generator"] == "SecureRandomness"
    assert set(result["binomials"]) == {"p_half", "p_oue_q"} and set(result["aggregate_counts"]) == {"oue", "grr"}
    for timing in [*result["binomials"].values(), *result["aggregate_counts"].values()]:
        assert timing["after_seconds"] > 0 and timing["before_seconds"] > 0
    assert result["aggregate_counts"]["oue"]["bins"] == 12 and result["aggregate_counts"]["grr"]["bins"] == 3
