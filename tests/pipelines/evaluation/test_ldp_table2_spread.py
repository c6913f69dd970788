"""Table 2 of the LDP-IDS evaluation with repeats (spec ldp_ids.md §8.6): the adaptive methods' bits as mean ±
standard deviation beside the paper's, the 5% acceptance on the mean, the run-by-run tally."""

import numpy as np

from pipelines.evaluation.ldp import ADAPTIVE, PAPER_METHODS, SYNTHETIC
from pipelines.evaluation.ldp_cli import parse_args, plan
from pipelines.evaluation.ldp_paper import TABLE2, TABLE2_SETTINGS
from pipelines.evaluation.ldp_report import table2_section

SPREAD = (-0.06, -0.02, 0.0, 0.02, 0.06)
"""Relative offsets of the 5 repeats from the paper's value: mean exactly the paper's, two runs 6% off."""


def _rows(shift: float = 0.0) -> list[dict]:
    rows = []
    for epsilon, window in TABLE2_SETTINGS:
        for method in PAPER_METHODS:
            for dataset in SYNTHETIC:
                paper = TABLE2[(epsilon, window, method, dataset)]
                offsets = SPREAD if method in ADAPTIVE else (0.0,)
                for repeat, offset in enumerate(offsets):
                    bits = paper * (1 + offset + (shift if method == "lpa" and dataset == "sin" else 0.0))
                    rows.append({"experiment": "table2", "dataset": dataset, "method": method, "epsilon": epsilon,
                                 "window": window, "repeat": repeat, "users": 200_000, "slots": 800,
                                 "bits_per_user_slot": bits})
    return rows


def test_the_repeats_default_to_five_for_the_adaptive_methods_only():
    args = parse_args(["--experiments", "table2", "--datasets", "sin"])
    assert args.table2_repeats == 5
    repeats = {}
    for _, task in plan(args, {}):
        repeats.setdefault(task.method, set()).add(task.repeat)
    assert {m: len(r) for m, r in repeats.items()} == {m: 5 if m in ADAPTIVE else 1 for m in PAPER_METHODS}


def test_the_adaptive_cells_are_mean_and_spread_and_the_check_is_on_the_mean():
    class Args:
        table2_users, table2_slots, table2_repeats = 200_000, 800, 5
    lines, misses = table2_section(_rows(), Args)
    text = "\n".join(lines)
    assert misses == []
    std = np.std([1.5585 * (1 + o) for o in SPREAD], ddof=1)
    assert "| (1, 20) | LBU | 1 (= TV-12) | 1.0000 | +0.0% |" in text
    assert f"|  | LBD | 1.558 ± {std:.4g} | 1.5585 | +0.0% |" in text  # LNS at (1, 20): mean ± std, diff of the mean
    assert "mean ± standard deviation over 5 repeats" in text
    # every mean is the paper's; run by run, the two runs 6% off of each adaptive cell are outside
    assert "**Acceptance: all 63 entries lie within 5% of the paper's.** Run by run, 108 of the 180 adaptive runs" \
           in text
    lines, misses = table2_section(_rows(shift=0.07), Args)  # LPA on Sin 7% high on average: a miss, named
    assert len(misses) == 3 and all(m.startswith("LPA on Sin") and "(+7.0%)" in m for m in misses)
    assert "60 of 63 entries lie within 5%" in "\n".join(lines)
