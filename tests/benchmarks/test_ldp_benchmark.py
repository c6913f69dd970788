"""benchmarks/ldp_oracles.py prints one JSON object with the timings of a small configuration."""

from __future__ import annotations

import json

from benchmarks import ldp_oracles


def test_prints_the_timings(capsys):
    assert ldp_oracles.main(["--users", "2000", "--bins", "5", "--repeats", "1", "--client-reports", "50"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["oracle"] == "grr" and result["generator"] == "SecureRandomness"
    assert result["per_user_reports_per_second"] > 0 and result["client_reports_per_second"] > 0
    assert result["aggregate_seconds"] >= 0
