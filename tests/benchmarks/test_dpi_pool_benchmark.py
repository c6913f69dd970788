"""The pool-cache benchmark (benchmarks/dpi_pool.py) at a tiny size: both modes run and say which they were."""

from __future__ import annotations

import json

import pytest

from benchmarks import dpi_pool


@pytest.mark.parametrize("cache_mb, cached", [(256, True), (0, False)])
def test_measure_runs_with_and_without_the_cache(cache_mb, cached):
    result = dpi_pool.measure("dpi-sound", cache_mb, bins=20, users=30, slots=3)
    assert result["cached"] is cached and result["pool_cache_mb"] == cache_mb
    assert result["first_slot_ms"] > 0 and result["ms_per_slot"] > 0 and result["peak_rss_mb"] > 0


def test_the_command_reports_every_run_from_its_own_process(capsys):
    assert dpi_pool.main(["--bins", "10", "--users", "5", "--slots", "2", "--mechanisms", "dpi",
                          "--cache-mb", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["mechanism"], r["pool_cache_mb"], r["cached"]) for r in report["runs"]] == [("dpi", 0, False)]
    with pytest.raises(SystemExit):
        dpi_pool.main(["--slots", "1"])
