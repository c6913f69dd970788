"""The main job of ``./run_local.sh``: a private replay of the project's own taxi-like stream.

Generates (once) a synthetic stream of 1,000 taxis driving for a day over
Beijing's T-Drive box, then replays it with PBD: 10-minute slots, a 5x5 grid
over the papers' box, each taxi's last cell carried forward, and two user
types as in the papers' experiment: half the taxis protect any hour with
E = 2.0 (w = 6 slots), half any two hours with E = 1.0 (w = 12).  The
released slots are fixed in advance (``--start``/``--end``: the generated
day).  Prints a short summary and where the outputs are.  Arguments after the
script name are passed to ``pipelines.replay`` and override these defaults.

The grid is 5x5, not the papers' 10x10: with 1,000 taxis a 10x10 grid leaves
10 per cell, about the noise of a PBD publication at E/4, so PBD published 4
of 144 slots; at 40 per cell it published 12 and 14 (two runs, secure noise)
and its AJSD dropped from 0.054 to 0.015 (docs/results.md, "Where the
mechanisms publish something useful").

The stream is the project's own synthetic data, so the job also measures
utility against its true histograms (``--evaluate``): that goes to
``output/local/evaluation/``, apart from the private outputs, because it is
not private.
"""

from __future__ import annotations

import json
import os
import sys

from pipelines import cli, replay

OUTPUT = os.path.join("output", "local")
DATA = os.path.join("output", "default_stream.jsonl")
DAY_START, DAY_END = "2008-02-02T00:00:00Z", "2008-02-03T00:00:00Z"  # the generated day (loaders.TDRIVE_START)
GRID = "grid:116,116.8,39.5,40.3,5x5"
"""The papers' T-Drive box (lon [116, 116.8), lat [39.5, 40.3)) in 5 x 5 cells."""
DEFAULTS = ["--input", DATA, "--binning", GRID, "--slot-seconds", "600", "--carry-forward",
            "--start", DAY_START, "--end", DAY_END, "--evaluate",
            "--mechanism", "pbd", "--levels", "hour=fixed:6,2.0;two_hours=fixed:12,1.0",
            "--level-ratios", "hour=0.5,two_hours=0.5", "--output", OUTPUT, "--overwrite", "--quiet"]
"""The main job's replay flags; the command line's own come after them and win."""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(flag in ("-h", "--help") for flag in argv):  # help writes nothing (the stream is generated on a run)
        print(f"usage: wevent run [replay flags]\n\n{__doc__.split(chr(10) + chr(10))[0]}\n\nIts defaults: "
              f"{' '.join(DEFAULTS)} (the stream is generated into {DATA} on the first run). Any flag of wevent "
              "replay (below) overrides them.\n")
        return replay.run(["--help"])
    try:  # a bad flag is one line before the stream is generated
        cli.strict_parse(replay.parser(), DEFAULTS + list(argv))
    except cli.ConfigError as error:
        return cli.fail(str(error))
    output = next((argv[i + 1] for i in range(len(argv) - 2, -1, -1) if argv[i] == "--output"), None) or next(
        (flag.partition("=")[2] for flag in reversed(argv) if flag.startswith("--output=")), OUTPUT)
    if not os.path.exists(DATA):
        from transforms.loaders import synthetic_taxi_stream

        os.makedirs(os.path.dirname(DATA), exist_ok=True)
        lines = synthetic_taxi_stream(DATA, taxis=1000, hours=24)
        print(f"generated {lines} taxi reports into {DATA}")
    code = replay.run(DEFAULTS + list(argv))
    report_path = os.path.join(output, "report.json")
    if os.path.exists(report_path):
        with open(report_path) as f:
            report = json.load(f)
        print(f"released {report['slots']} slots ({report['fresh']} fresh, {report['skipped']} skipped, "
              f"{report['nullified']} nullified) with {report['mechanism']}")
        print(f"records: {report['records_read']} read = {report['records_used']} used + "
              f"{report['duplicates']} duplicates + {report['late']} late + {report['dead_letters']} dead letters")
        print(f"ledger: largest window usage {report['max_window_usage_ratio']:.3f} of a requirement, "
              f"{report['ledger_violations']} violations")
        utility_path = os.path.join(output, "evaluation", "utility.json")
        if os.path.exists(utility_path):
            with open(utility_path) as f:
                utility = json.load(f)
            print(f"utility (NOT private, in {output}/evaluation/): AMRE {utility.get('amre', float('nan')):.1f} "
                  f"(a mean squared error), AJSD {utility.get('ajsd', float('nan')):.4f}")
        print(f"outputs in {output}/: releases-*, usage-*, dead_letters-*, violations-*, accounting-*, report.json, "
              "report.html")
    return code


if __name__ == "__main__":
    sys.exit(main())
