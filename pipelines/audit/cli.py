"""The audit's command line: ``wevent audit`` / ``python -m pipelines.audit`` (flags parsed strictly: no prefixes).

Prints one line per audit (``--json``: one JSON object, ``"violation"`` and
``"reason"`` right after the mechanism and variant); exit code 0 when nothing
was flagged, 1 when something was, 2 (one line on stderr) for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from pipelines.audit.results import AuditConfig, AuditResult
from pipelines.audit.runner import audit
from transforms.mechanisms import MECHANISMS, Mechanism, mechanism_class

BROKEN_MODULE = Path(__file__).resolve().parents[2] / "tests" / "pipelines" / "broken_mechanisms.py"
"""The deliberately broken variants: test code, in a source checkout only, loaded only for ``--broken``."""


def load_broken_variants():
    """The module of deliberately broken variants, from a source checkout (it is test code, never shipped)."""
    if not BROKEN_MODULE.is_file():
        raise ArgumentError(f"--broken needs a source checkout: {BROKEN_MODULE} not found")
    name = "wevent_audit_broken_variants"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BROKEN_MODULE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# ---------------------------------------------------------------------- command line
class ArgumentError(Exception):
    """A bad command line; reported as one line with exit code 2."""


class StrictParser(argparse.ArgumentParser):
    """No abbreviated flags (``--run 10`` is an error, not ``--runs 10``); errors raise :class:`ArgumentError`."""

    def __init__(self, **kwargs) -> None:
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ArgumentError(message)


@dataclass(frozen=True)
class Plan:
    """What the command line asked for: (reported name, class) per audit, the config, JSON or not."""

    audits: list[tuple[str, type[Mechanism]]]
    broken: str | None
    config: AuditConfig
    as_json: bool


def parse_args(argv=None) -> Plan:
    parser = StrictParser(prog="wevent audit", description="Empirical privacy audit with power: statistical lower "
                          "bounds on what one user's data leaks (one slot, one window or a lifetime), beside the "
                          "budget and the audit's power, and every run's charges through the privacy ledger.")
    parser.add_argument("--mechanism", required=True, help=f"one of {', '.join(MECHANISMS)}, or all")
    parser.add_argument("--broken", default=None,
                        help="audit a deliberately broken variant of the mechanism (test code, source checkout)")
    parser.add_argument("--runs", type=int, default=AuditConfig.runs,
                        help="runs per neighbouring stream and scenario (default: %(default)s)")
    parser.add_argument("--confidence", type=float, default=AuditConfig.confidence,
                        help="confidence of each lower bound (default: %(default)s)")
    parser.add_argument("--insecure-seed", type=int, default=None,
                        help="seeded, NOT secure noise (reproducible, faster); default: secure noise")
    parser.add_argument("--json", action="store_true", help="one JSON object per audit and line")
    args = parser.parse_args(argv)
    try:
        config = AuditConfig(runs=args.runs, confidence=args.confidence, insecure_seed=args.insecure_seed)
    except ValueError as error:
        raise ArgumentError(str(error)) from None
    if args.mechanism.lower() == "all":
        if args.broken is not None:
            raise ArgumentError("--broken takes one --mechanism, not all")
        names = list(MECHANISMS)
    else:
        try:
            names = [mechanism_class(args.mechanism).name]
        except ValueError as error:
            raise ArgumentError(f"{error} or all") from None
    if args.broken is None:
        return Plan([(name, MECHANISMS[name]) for name in names], None, config, args.json)
    variants = load_broken_variants()
    try:
        cls = variants.broken_class(args.broken, names[0])
    except ValueError as error:
        raise ArgumentError(str(error)) from None
    return Plan([(names[0], cls)], args.broken, config, args.json)


def summary_line(result: AuditResult) -> str:
    name = result.mechanism + (f" ({result.broken})" if result.broken else "")
    parts = [f"{r.scenario.name}: bound {r.estimate.lower_bound:.3f} of E* {r.scenario.bound:.4g} "
             f"(power {r.power:.2f}, flags a 2x over-spend with probability <= {r.detection_power:.2f}), "
             f"ledger {r.ledger_max_ratio:.3f}" for r in result.scenarios]
    verdict = f"VIOLATION ({result.reason})" if result.violation else "pass"
    return f"{name}: {'; '.join(parts)}: {verdict}"


def run(argv=None) -> int:
    """Entry point: returns the process exit code."""
    try:
        plan = parse_args(argv)
    except ArgumentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    flagged = False
    for name, cls in plan.audits:
        result = audit(name, cls, plan.config, plan.broken)
        flagged |= result.violation
        print(json.dumps(result.to_json()) if plan.as_json else summary_line(result), flush=True)
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(run())