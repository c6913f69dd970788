"""benchmarks/numeric_pipeline.py prints one JSON object: one method's ratios, or several methods' beside one
baseline."""

from __future__ import annotations

import json

import pytest

from benchmarks import numeric_pipeline


@pytest.mark.slow
def test_prints_each_methods_ratio_beside_one_baseline(capsys):
    assert numeric_pipeline.main(["--records", "600", "--users", "30", "--slots", "20", "--mechanism",
                                  "sw-direct,pp-s,ba-sw", "--kinds", "baseline,clients"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["baseline_seconds"] > 0 and set(result["methods"]) == {"sw-direct", "pp-s", "ba-sw"}
    for method in result["methods"].values():
        assert set(method) == {"clients_seconds", "clients_cpu_seconds", "clients_ratio"}
        assert method["clients_ratio"] == pytest.approx(method["clients_seconds"] / result["baseline_seconds"])
    with pytest.raises(SystemExit):
        numeric_pipeline.main(["--kinds", "clients"])  # the ratios need the baseline
