"""The DPI evaluation script at a tiny size: every method reported, budgets within ε, exact is exact."""

from __future__ import annotations

import json

from benchmarks import dpi_eval


def test_the_evaluation_reports_every_method_within_budget(capsys):
    assert dpi_eval.main(["--users", "40", "--bins", "6", "--slots", "12", "--pool", "30", "--epsilons", "0.5,4",
                          "--json"]) == 0
    output = json.loads(capsys.readouterr().out)
    for kind in ("synthetic_a", "zipf"):
        for epsilon, result in output["results"][kind].items():
            assert set(result) == {"uniform", "exact", "dpi", "dpi-sound"}
            assert result["exact"] == {"mse": 0.0, "kl": 0.0} and result["uniform"]["mse"] > 0
            for name in ("dpi", "dpi-sound"):
                assert 0 < result[name]["eps_charged"] <= float(epsilon)
                assert result[name]["mse"] > 0 and result[name]["kl"] > 0
