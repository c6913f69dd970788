"""benchmarks/square_wave.py prints one JSON object with the timings of a small configuration."""

from __future__ import annotations

import json

from benchmarks import square_wave


def test_prints_the_timings(capsys):
    assert square_wave.main(["--users", "2000", "--repeats", "1", "--client-reports", "50"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["generator"] == "SecureRandomness" and result["grid_bits"] == 16
    assert result["reports_per_second"] > 0 and result["client_reports_per_second"] > 0
