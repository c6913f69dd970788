"""``wevent``: one command for every job (installed by ``setup.py``; the ``python -m`` forms still work).

    wevent replay   --input 'logs/*.jsonl' --binning int:100 --requirement fixed:120,0.6 --output out/
    wevent stream   --demo --requirement fixed:120,0.6 --output demo/
    wevent evaluate --datasets sin --sweep epsilon --output results/
    wevent audit    --mechanism all
    wevent run      (the main job of ./run_local.sh)

``wevent SUBCOMMAND --help`` shows each job's flags with their defaults; ``wevent --version`` the version.
Every subcommand parses its flags by the same rules (``pipelines.cli``): no abbreviations, and a bad flag or
value is one ``error:`` line on stderr with exit code 2.
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
    "client-replay": ("pipelines.client_replay", "run", "batch replay of recorded client reports (local DP)"),
}

DISTRIBUTION = "wevent-beam"


def version() -> str:
    """The installed distribution's version (``setup.py``), or ``unknown`` when run from a bare checkout."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {about}" for name, (_, _, about) in COMMANDS.items()]
    return ("usage: wevent SUBCOMMAND [flags]   (wevent SUBCOMMAND --help for its flags; wevent --version)\n\n"
            + "\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a job's entry point; returns the process exit code."""
    from pipelines.cli import EXIT_CONFIG, ConfigError, fail

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else EXIT_CONFIG
    if argv[0] in ("-V", "--version"):
        print(f"wevent {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else f"; choose one of {', '.join(COMMANDS)}"
        what = "flag" if name.startswith("-") else "subcommand"
        return fail(f"unknown {what} {name!r}{hint}")
    module, function, _ = COMMANDS[name]
    entry = getattr(importlib.import_module(module), function)
    sys.argv = [f"wevent {name}", *rest]
    try:
        return int(entry(rest) or 0)
    except ConfigError as error:  # a job that lets one through still ends in one line
        return fail(str(error), EXIT_CONFIG)


if __name__ == "__main__":
    sys.exit(main())
