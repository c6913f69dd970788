"""``python -m pipelines.evaluate --suite ldp-ids`` end to end (tiny), its argument errors, its claims, and the
central suite's default of central mechanisms only."""

import csv

import numpy as np
import pytest

from pipelines.evaluation import cli
from pipelines.evaluation.ldp import LdpTask
from pipelines.evaluation.ldp_claims import check_claims
from pipelines.evaluation.ldp_cli import check_methods
from transforms.mechanisms import MECHANISMS, TrustModel
from transforms.mechanisms.registry import Family

TINY = ["--suite", "ldp-ids", "--experiments", "epsilon,table2", "--datasets", "sin,lns,taxi", "--methods",
        "lbu,lsp,lpu,lpd,lba", "--users", "400", "--slots", "40", "--repeats", "2", "--table2-users", "400",
        "--table2-slots", "40", "--table2-repeats", "2", "--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ldp")
    report = out / "results_ldp_ids.md"
    code = cli.main(TINY + ["--output", str(out / "run"), "--report", str(report), "--data-dir", str(out / "none")])
    return code, out, report


def test_the_suite_writes_its_document_with_no_violation(tiny_run):
    code, out, report = tiny_run
    assert code == 0
    text = report.read_text()
    assert text.startswith("# LDP-IDS evaluation")
    assert "python -m pipelines.evaluate --suite ldp-ids --experiments epsilon,table2" in text
    assert "**0 violations**" in text
    assert "| (1, 20) | LBU | 1 (= TV-12) | 1.0000 | +0.0%" in text
    for section in ("## Table 2", "### The paper's Table 2 (verbatim", "## MRE at ε = 1, w = 20",
                    "## The paper's claims", "## Fig. 3: MRE vs ε"):
        assert section in text
    assert "Skipped taxi:" in text and "is not on this machine" in text  # absent real data, said why
    with open(out / "run" / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    # epsilon: 2 datasets x 5 methods x 5 points x 2 repeats; table2: 2 x (3 x 1 + 2 x 2) x 3 settings (LBU, LSP
    # and LPU send data-independent bits: one run each)
    assert len(rows) == 100 + 42
    assert {r["ledger_violations"] for r in rows} == {"0"}


def test_rendering_from_csv_gives_the_same_document(tiny_run, tmp_path):
    _, out, report = tiny_run
    again = tmp_path / "again.md"
    code = cli.main(TINY + ["--output", str(out / "run"), "--report", str(again), "--data-dir", str(out / "none"),
                            "--from-csv", str(out / "run" / "results.csv")])
    assert code == 0 and again.read_text() == report.read_text()


@pytest.mark.parametrize("argv,message", [
    (["--methods", "bd"], "unknown method 'bd'"),
    (["--experiments", "fig99"], "unknown experiment"),
    (["--users", "0"], "--users must be >= 1"),
    (["--mre-floor", "0"], "--mre-floor must be > 0"),
])
def test_bad_arguments_are_one_line(argv, message, capsys):
    assert cli.main(["--suite", "ldp-ids"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_a_setting_a_method_refuses_fails_before_running():
    """An ε too small to split over w (below one budget unit per slot) is refused when the plan is checked,
    naming the method and the setting, before any run; a valid plan passes."""
    ok = [("epsilon", LdpTask("sin", "lpd", 1.0, 20, 0.5, 100, 5, 0, 0))]
    check_methods(ok, {})
    bad = ok + [("window", LdpTask("sin", "lbu", 1e-12, 50, 0.5, 100, 5, 0, 0))]
    with pytest.raises(ValueError, match=r"lbu at ε = 1e-12, w = 50, β = 0.5: .*epsilon"):
        check_methods(bad, {})


def test_unknown_suite_is_refused(capsys):
    assert cli.main(["--suite", "nope"]) == 2
    assert "unknown --suite 'nope'" in capsys.readouterr().err


def test_the_central_suite_runs_central_mechanisms_only():
    mechanisms = cli.parse_args([]).mechanisms
    assert mechanisms == [n for n, c in MECHANISMS.items()
                          if c.trust is TrustModel.CENTRAL and Family.of(c) is not Family.LIFETIME]
    assert "lbu" not in mechanisms and "dpi" not in mechanisms and "bd" in mechanisms
    with pytest.raises(cli.ArgumentError, match="unknown mechanism 'lpd'"):
        cli.parse_args(["--mechanisms", "lpd"])


def _rows(mre_of, repeats=6):
    """Epsilon-sweep rows of LPU and LBU on two datasets with the given MRE per (method, dataset, repeat)."""
    return [{"experiment": "epsilon", "dataset": d, "method": m, "epsilon": e, "repeat": r,
             "mre": mre_of(m, d, r), "auc": 0.5, "bits_per_user_slot": 1.0}
            for d in ("sin", "log") for m in ("lpu", "lbu") for e in (0.5, 1.0) for r in range(repeats)]


def test_a_claim_holds_is_reversed_or_is_not_shown():
    rng = np.random.default_rng(0)

    def verdict(mre_of):
        results = {r.statement: r for r in check_claims(_rows(mre_of))}
        return results["Population methods below budget methods (LPU < LBU, LPD < LBD, LPA < LBA)"]

    clear = verdict(lambda m, d, r: (0.1 if m == "lpu" else 1.0) * (1 + 0.1 * rng.random()))
    assert clear.verdict == "holds" and clear.pooled.pairs == 24 and clear.tally == "2 of 2 shown, 0 reversed"
    assert verdict(lambda m, d, r: (1.0 if m == "lpu" else 0.1) * (1 + 0.1 * rng.random())).verdict == "reversed"
    # pure noise: neither shown (seeded, so deterministic; under H0 either verdict has probability below 0.05)
    assert verdict(lambda m, d, r: 1 + rng.random()).verdict in ("not shown",)
