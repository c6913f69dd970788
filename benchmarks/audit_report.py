"""The privacy audit of every mechanism and of the broken variants, as a Markdown report.

    python -m benchmarks.audit_report --runs 2000 --output docs/audit.md

runs :func:`pipelines.audit.audit` on every registered mechanism and on every
deliberately broken variant of ``tests/pipelines/broken_mechanisms.py`` (tests
only; imported from there, so run it from the repository root), all with the
same setting, prints one JSON object per audit and writes the report.  Secure
noise unless ``--insecure-seed`` is given.  Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pipelines.audit import AuditConfig, AuditResult, audit, registered_factory
from tests.pipelines.broken_mechanisms import BROKEN
from transforms.mechanisms import MECHANISMS

METHOD = """\
## Method

For user i with requirement `(w_i, E_i)` the audit builds two neighbouring streams that differ only
in user i's reports inside one window of `w_i` slots: user i reports bin 0 in the first and nothing in
the second (add/remove-one neighbours, sensitivity 1, the library's reading). The population is user
i and {others} others with the same requirement (one cohort, so no subsampling; the homogeneous
baselines run with `(E_i, w_i)`, the dynamic mechanisms with `(w_B, E_B, w_F, E_F) = (w_i, E_i, w_i, E_i)`).
The others switch between the 2 bins together at every slot, so the data always move far more than the
noise and the publication decisions hardly depend on user i. The window starts after `w_i - 1` slots,
once every budget window has formed.

Each stream is run `runs` times with independent noise. Per run, the statistic is the sign test of
the fresh releases in the window, `S = Σ ε_t · (+1 if r_t[0] > c_t else −1)`, with `ε_t` the release's
noise budget and `c_t` the others' count in bin 0: for discrete Laplace noise, the exact log-likelihood
ratio of the releases given the decisions. The first quarter of each stream's runs chooses one event
(`S ≥ τ`, `S ≤ τ`, or the mirrored `S ≥ τ` on the first stream pooled with `S ≤ −τ` on the second,
which is an event of the equally private mechanism that runs a coin-chosen one of the two streams);
the other runs alone measure it: `ε_LB = ln(P_lower / Q_upper)`, with one-sided Clopper–Pearson bounds
at `(1 − confidence)/2` each. With probability at least the confidence, `ε_LB` is below the true
privacy loss of the mechanism on these two streams. The audit flags a violation when `ε_LB > E_i`.
Every run's charges also go through the privacy ledger; "ledger" below is the largest fraction of
`E_i` charged to user i in any `w_i` consecutive slots, over all runs.

## Limits

* A lower bound can only show a violation. A pass is evidence, not proof: the audit looks at one
  pair of streams, one statistic, and what the releases reveal. PBD, PBA, DPBD, DPBA, BD and BA spend
  half of `E_i` on the private dissimilarity, and in these streams the publication decisions are
  nearly certain, so that half barely shows: their bounds stay well below `E_i` even when correct.
* So a broken variant passes when its overspending does not reach the releases, or is smaller than
  the statistical slack at the number of runs used. Half-scale noise in PBD spends `2E_i`, but its
  releases carry at most `E_i` of it; Uniform forgetting one slot spends `w_i/(w_i − 1) · E_i`, which
  takes many runs to separate from `E_i` (`4E_i/3` at `w_i = 4`).
* Uniform and Sample spend all of `E_i` on releases, so their bounds come closest to `E_i`: they
  show how much of a real leak the audit certifies with this many runs.
* The confidence holds for each row separately: a correct mechanism is flagged with probability at
  most `1 − confidence` per row (less in practice, as the bounds are conservative).
* The mirrored events count a Poisson-binomial number of successes; the binomial Clopper–Pearson
  bounds stay valid for it because its tails beyond the mean are at most the binomial ones with the
  same mean (Hoeffding 1956), which `tests/pipelines/test_audit.py` also checks by simulation.
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audit_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per neighbouring stream and audit")
    parser.add_argument("--epsilon", type=float, default=AuditConfig.epsilon)
    parser.add_argument("--window", type=int, default=AuditConfig.window)
    parser.add_argument("--users", type=int, default=AuditConfig.users)
    parser.add_argument("--insecure-seed", type=int, default=None)
    parser.add_argument("--output", default="docs/audit.md")
    return parser.parse_args(argv)


def _row(kind: str, result: AuditResult) -> str:
    e, c = result.estimate, result.config
    verdict = "**violation**" if result.violation else "pass"
    return (f"| {result.mechanism} | {kind} | {c.epsilon:g} | {c.window} | {c.runs} | {e.lower_bound:.3f} | "
            f"{e.event or '–'} | {result.fresh_in_window:.2f} | {result.ledger_max_window_usage_ratio:.3f} | "
            f"{verdict} |")


def report(rows: list[tuple[str, AuditResult]], command: str, config: AuditConfig, seconds: float) -> str:
    lines = ["# Empirical privacy audit", "",
             f"Generated by `{command}` ({seconds / 60:.1f} min on the shared 2-core development machine); "
             f"noise: {config.noise}; confidence {config.confidence:.0%}; {config.users} users; "
             f"runs are per neighbouring stream (twice as many in all).", "",
             "| mechanism / variant | kind | E_i | w_i | runs | lower bound | event | fresh in window | ledger | "
             "verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(kind, result) for kind, result in rows]
    lines += ["", "*Event*: `S` in units of ε; *mirrored*: `S ≥ τ` on the runs with user i pooled with `S ≤ −τ` on the runs without. *Fresh in window*: "
              "mean number of fresh releases among the window's slots. *Ledger*: largest fraction of E_i charged "
              "to user i in any w_i slots (a broken variant that misreports its charges stays at 1).", "",
              "Broken variants (`tests/pipelines/broken_mechanisms.py`, tests only): *never records the last "
              "publication* is the authors' BA/PBA code (reference_impl §4.4); *noise at half the scale* runs the "
              "mechanism with 2E_i and reports charges for E_i; *budget window forgets one slot* runs it with "
              "w_i − 1 while the user asked for w_i.", "", METHOD.format(others=config.users - 1)]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        config = AuditConfig(epsilon=args.epsilon, window=args.window, users=args.users, runs=args.runs,
                             insecure_seed=args.insecure_seed)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    plan = [("mechanism", name, registered_factory(name)) for name in MECHANISMS]
    plan += [("broken", name, factory) for name, factory in BROKEN.items()]
    rows = []
    for kind, name, factory in plan:
        result = audit(name, factory, config)
        print(json.dumps({"kind": kind, **result.to_json()}), flush=True)
        rows.append((kind, result))
    command = "python -m benchmarks.audit_report " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(report(rows, command.strip(), config, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
