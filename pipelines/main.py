"""``wevent``: one command for every job (installed by ``setup.py``; the ``python -m`` forms still work).

    wevent replay   --input 'logs/*.jsonl' --binning int:100 --requirement fixed:120,0.6 --output out/
    wevent stream   --demo --requirement fixed:120,0.6 --output demo/
    wevent evaluate --datasets sin --sweep epsilon --output results/
    wevent audit    --mechanism all
    wevent run      (the main job of ./run_local.sh)

``wevent SUBCOMMAND --help`` shows each job's flags with their defaults.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence

COMMANDS = {
    "replay": ("pipelines.replay", "run", "batch replay of historical logs through the private release graph"),
    "stream": ("pipelines.streaming", "run", "the continuous job: --watch DIR, --demo, Pub/Sub or Kafka"),
    "evaluate": ("pipelines.evaluation.cli", "main", "utility and running-time sweeps over the evaluation datasets"),
    "audit": ("pipelines.audit", "run", "empirical privacy audit of every mechanism"),
    "run": ("pipelines.local", "main", "the main job: a private replay of the project's own taxi stream"),
    "collect": ("pipelines.collector", "run", "local DP with client devices: requests out, reports in, live"),
    "devices": ("pipelines.devices", "run", "a fleet of simulated devices answering the collector's requests"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {about}" for name, (_, _, about) in COMMANDS.items()]
    return "usage: wevent SUBCOMMAND [flags]   (wevent SUBCOMMAND --help for its flags)\n\n" + "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a job's entry point; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else f"; choose one of {', '.join(COMMANDS)}"
        print(f"error: unknown subcommand {name!r}{hint}", file=sys.stderr)
        return 2
    module, function, _ = COMMANDS[name]
    entry = getattr(importlib.import_module(module), function)
    sys.argv = [f"wevent {name}", *rest]
    return int(entry(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
