"""Issue #16's evaluation of DPI: one command writes ``docs/results_dpi.md`` (and its figures).

    nice -n 10 python -m benchmarks.dpi_results --data-dir /work/shared/data --long-slots 200000 --workers 2

Streams (spec §4.1): **COVID-19** (JHU daily counts, ``covid19_jhu_daily``: each new case is a record whose
item is its country; the 109 countries with the most cases and one "other" item make k = 110; 48,925 records
drawn from all cases, each placed uniformly within its day, split into 1,000 equal slots), **synthetic A**
(k = 100, 3,000 slots, each slot's item counts ~ N(100, σ²), σ drawn from 1..10 per slot), **synthetic B**
(App. E.2: the ten k = 1,000 datasets, counts ~ N(1000, j²) for dataset j, and k = 10,000 ones with the same
mean, σ from ``--b10k-sigmas``; 2,700 slots over the spec's 11 ε; drawn one slot at a time as count vectors,
10^6 and 10^7 records a slot) and a **Zipf(1.5)** stream (k = 100, 10,000 records a slot: the skewed stress
test the paper lacks).  Records are users, as in the paper (spec §1.2): the DPI mechanisms read each slot's
count vector (``step_counts``), the w-event baseline one user per record (it does not run on synthetic B).

Methods, all answering the accumulative query (truth: the PDF of every record so far): ``dpi`` (the paper's
loop, charged its sound upper bound; its ``eps_claimed`` is reported beside), ``dpi-sound`` (exact exponential
mechanism, lifetime budget), **uniform** (data-independent), **exact** (not private) and ``bd`` (a w-event
mechanism, w = 10, ε per window: **a different guarantee**, its per-slot counts summed, clipped at 0 and
normalised).  Metrics (spec §4.2): per-bin MSE and KL(true || released), averaged over the slots; mean ±
standard deviation over the repeats; DPI against uniform by the paired sign-flip test of
:mod:`pipelines.evaluation.stats` (same data and seed for every method; every ε of a stream and repeat in
lock step, in ``--workers`` processes).  The privacy ledger checks every mechanism's charges in every slot;
an overspend stops the command.  Then the hyper-parameter sweeps of
Fig. 3 (λ, μ, ζ and the RBA, on COVID-19), the long run of Fig. 11 (``dpi-sound`` alone, in a child process so
that its peak memory is its own) and the privacy audit (TV10, :mod:`benchmarks.dpi_audit`).

Every generator is seeded (``--seed``, then ``seed + 1`` ... for the repeats): the numbers are reproducible and
the releases are NOT private.  Prints a JSON summary and keeps every run in ``--json-out`` (by default beside
the figures), from which ``--render-only`` rewrites the document without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


from benchmarks import dpi_audit
from pipelines.evaluation_data import DEFAULT_DATA_DIR
from benchmarks.dpi_streams import B10K_SIGMAS, B_EPSILONS, B_SIGMAS, DPI_METHODS, EPSILONS, make_streams
from benchmarks.dpi_runs import evaluate, long_run, long_run_child, long_run_result, paired_rows
from benchmarks.dpi_page import epsilon_text, plot, render


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dpi_results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join("docs", "results_dpi.md"))
    parser.add_argument("--figures", default=os.path.join("docs", "results_dpi"), help="directory of the PNGs")
    parser.add_argument("--json-out", default=os.path.join("docs", "results_dpi", "results.json"),
                        help="every run as JSON (the document can be re-rendered from it with --render-only)")
    parser.add_argument("--render-only", action="store_true", help="re-render --out from --json-out, run nothing")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="holds covid19_jhu_daily/ (read only)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--b-repeats", type=int, default=None, help="synthetic B's repeats (default --repeats)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilons", default=",".join(epsilon_text(e) for e in EPSILONS),
                        help="ε of COVID-19, synthetic A and Zipf")
    parser.add_argument("--b-epsilons", default=",".join(epsilon_text(e) for e in B_EPSILONS), help="ε of synthetic B")
    parser.add_argument("--b-sigmas", default=",".join(map(str, B_SIGMAS)), help="σ of the k = 1,000 datasets")
    parser.add_argument("--b10k-sigmas", default=",".join(map(str, B10K_SIGMAS)),
                        help="σ of the k = 10,000 datasets (empty: none)")
    parser.add_argument("--slots", default="covid19=1000,synthetic_a=3000,synthetic_b=2700,zipf=1000",
                        help="slots per stream")
    parser.add_argument("--workers", type=int, default=1, help="processes for the runs (the long run has its own)")
    parser.add_argument("--long-slots", type=int, default=50_000, help="the long run's slots (0: none)")
    parser.add_argument("--long-bins", type=int, default=1000)
    parser.add_argument("--long-run-only", action="store_true", help="run only the long run and print its JSON")
    parser.add_argument("--audit-slots", type=int, default=1000)
    args = parser.parse_args(argv)

    def numbers(text: str, kind=float) -> list:
        return [kind(v) for v in text.split(",") if v.strip()]

    try:
        epsilons, b_epsilons = numbers(args.epsilons), numbers(args.b_epsilons)
        b_sigmas, b10k_sigmas = numbers(args.b_sigmas), numbers(args.b10k_sigmas)
        slots = {k: int(v) for k, v in (item.split("=") for item in args.slots.split(","))}
    except ValueError:
        parser.error("--epsilons, --b-epsilons and the σ lists take numbers and --slots NAME=COUNT pairs, "
                     "separated by commas")
    if set(slots) != {"covid19", "synthetic_a", "synthetic_b", "zipf"} or min(slots.values()) < 1:
        parser.error("--slots needs covid19, synthetic_a, synthetic_b and zipf, each at least 1")
    if args.repeats < 1 or (args.b_repeats is not None and args.b_repeats < 1) or args.long_slots < 0 \
            or args.long_bins < 2 or args.audit_slots < 1 or args.workers < 1 or not epsilons or not b_epsilons \
            or min(epsilons + b_epsilons) <= 0 or min(b_sigmas + b10k_sigmas, default=1) <= 0:
        parser.error("--repeats, --b-repeats, --workers and --audit-slots must be >= 1, --long-slots >= 0, "
                     "--long-bins >= 2, every ε and σ > 0")
    if args.render_only:
        with open(args.json_out) as handle:
            results = json.load(handle)
        with open(args.out, "w") as handle:
            handle.write(render(results, plot(results, args.figures)))
        return 0
    if args.long_run_only:
        print(json.dumps(long_run(args.long_slots, args.long_bins, 2.0, args.seed)))
        return 0
    start = time.perf_counter()
    child = long_run_child(args.long_slots, args.long_bins, 2.0, args.seed) if args.long_slots else None
    streams, missing = make_streams(slots, args.data_dir, b_sigmas, b10k_sigmas, epsilons, b_epsilons)
    results = evaluate(args.repeats, args.seed, streams, args.data_dir, args.workers, args.b_repeats)
    results["missing"] = missing
    results["paired"] = paired_rows(results["runs"])
    results["audit"] = {"slots": args.audit_slots,
                        "variants": {n: dpi_audit.audit(n, args.audit_slots, 2000) for n in DPI_METHODS}}
    if child is not None:
        results["long_run"] = long_run_result(child)
    results["config"] = {"command": "python -m benchmarks.dpi_results " + " ".join(argv if argv is not None
                                                                                  else sys.argv[1:]),
                         "repeats": args.repeats, "b_repeats": args.b_repeats or args.repeats, "seed": args.seed,
                         "slots": slots, "long_slots": args.long_slots, "workers": args.workers,
                         "sweep_stream": results.pop("sweep_stream"), "wall_seconds": time.perf_counter() - start}
    figures = plot(results, args.figures)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as handle:
        handle.write(render(results, figures))
    os.makedirs(os.path.dirname(args.json_out) or ".", exist_ok=True)
    with open(args.json_out, "w") as handle:
        json.dump(results, handle, indent=0)
    no_better = sum(row["verdict"] == "no better than uniform" for row in results["paired"])
    print(json.dumps({"out": args.out, "figures": figures, "wall_seconds": results["config"]["wall_seconds"],
                      "paired_tests": len(results["paired"]), "no_better_than_uniform": no_better,
                      "long_run": {k: v for k, v in results.get("long_run", {}).items() if k != "checkpoints"},
                      "missing": results["missing"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
