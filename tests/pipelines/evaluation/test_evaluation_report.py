"""The results document (pipelines/evaluation/report.py): the papers' numbers, claims and plots in the summary,
the claim and scenario sections, and the running-time estimate."""

from __future__ import annotations

import importlib.util

from pipelines.evaluation import cli, report, sweeps
from pipelines.evaluation.claims import check_claims
from pipelines.evaluation.paper import PAPER_NOTE
from tests.pipelines.evaluation.helpers import claim_rows


def test_summary_has_the_papers_numbers_claims_and_plots(sweep):
    _, out = sweep
    summary = (out / "summary.md").read_text(encoding="utf-8")
    for dataset in ("Sin", "Log", "TLNS"):
        assert f"### {dataset}: E varies" in summary
    assert "*papers*" in summary
    assert "*796,008.09*" in summary         # PBD, Sin, E = 0.6 (Table 5)
    assert "*35,214,891.91*" in summary      # BD, TLNS, E = 0.2
    assert summary.count(PAPER_NOTE) == 3
    assert "mean SQUARED error" in summary and "evaluation only" in summary
    # the claims whose two mechanisms ran are checked, with the papers' own percentage beside ours
    assert "### PBD below BD on every dataset: **" in summary
    assert "| Sin | E |" in summary and "+76.6%" in summary       # the papers' 1 - PBD/BD on Sin, Table 5
    assert "PBA better than PBD on the smooth synthetic streams" in summary
    assert "PBA below BA" not in summary                          # BA did not run
    assert "0 violations" in summary and "Extrapolated, not measured" not in summary
    if importlib.util.find_spec("matplotlib") is None:
        assert "pip install -e .[plot]" in summary
    else:
        for name in ("amre_vs_epsilon.png", "ajsd_vs_epsilon.png", "time_vs_epsilon.png"):
            assert (out / name).exists() and f"]({name})" in summary


def test_claim_and_scenario_sections_show_each_verdict():
    found = check_claims(claim_rows(), ["sin"])
    lines = "\n".join(report._claims_section(found) + report._scenario_section(found))
    assert "### PBD below BD on every dataset: **holds**" in lines
    assert "### DPBD below PBD: **shown on 1 of 2, reversed on 0**" in lines
    assert "| DPBD below PBD | held | 1 of 1 | 0 of 1 | 0.500 |" in lines
    assert "* **DPBD below PBD** needs requirements that stay put: it holds most often under `held` (redrawn 0 of 1, " \
           "held 1 of 1)." in lines
    assert "* **DPBA below PBA** holds under no scenario (redrawn 0 of 1)." in lines


def test_full_sweep_estimate_uses_cpu_time_and_old_results_their_wall_time():
    """A run's CPU time does not count waiting for a shared machine's cores; results written before
    cpu_seconds existed are estimated from their wall time, and the document says which."""
    rows = [{"dataset": "sin", "sweep": "epsilon", "mechanism": m, "epsilon": e, "users": 10, "slots": 20,
             "wall_seconds": 5.0, "cpu_seconds": 2.0, "seconds_per_slot": 0.001}
            for m in report.FULL_SWEEP_MECHANISMS for e in (0.2, 0.4, 0.6, 0.8, 1.0)]
    runs = len(rows) * sweeps.EPSILON_REPEATS
    assert report.full_sweep_estimate(rows, "sin", 2) == (runs * 2.0 / 2, 10, 20)
    args = cli.parse_args(["--datasets", "sin", "--mechanisms", ",".join(report.FULL_SWEEP_MECHANISMS)])
    assert "CPU time per run" in "\n".join(report._timing_section(rows, args, ["sin"]))
    old = [{k: v for k, v in row.items() if k != "cpu_seconds"} for row in rows]
    assert report.full_sweep_estimate(old, "sin", 2) == (runs * 5.0 / 2, 10, 20)
    assert "wall time per run" in "\n".join(report._timing_section(old, args, ["sin"]))
