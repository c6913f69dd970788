"""Try any mechanism in a plain loop, without Beam.

    python -m transforms.mechanisms.run --mechanism pbd --dataset sin --users 10000 --slots 2000

runs the papers' setup (spec §5.2: ten user types around ``(E, w)``) on a
synthetic binary stream and prints the utility (AMRE, which is a mean squared
error, AJSD, MRE, MAE), how many slots were fresh, skipped or nullified, the
time per slot, and the privacy ledger's verdict: the largest fraction of any
user's requirement spent in any window (at most 1 for a private mechanism).

Noise comes from the operating system's secure generator unless
``--insecure-seed`` asks for a reproducible, *not private*, replay.

It runs the mechanisms whose input is a bin and whose budget is a w-event one
(:func:`runnable`); ``--mechanism all`` runs each of them and says which it
leaves out: DPI spends a lifetime budget (its own benchmark:
``python -m benchmarks.dpi_eval``) and the numeric methods estimate a mean of
real values (``wevent replay --domain LOW,HIGH``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import NoReturn

import numpy as np

from transforms.mechanisms import (MECHANISMS, Estimate, Family, PrivacyLedger, ReleaseKind, SlotBatch,
                                   mechanism_for_setup)
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.metrics import utility_report
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.scenarios import PaperSetup
from transforms.mechanisms.synthetic import STREAMS, binary_stream, stream_probabilities


def run(name: str, dataset: str, users: int, slots: int, epsilon: float, window: int,
        data_seed: int, insecure_seed: int | None, ledger: bool = True) -> dict:
    """One run; returns the summary as a dict."""
    data_rng = np.random.default_rng(data_seed)
    setup = PaperSetup(users=users, epsilon=epsilon, window=window)
    mechanism = mechanism_for_setup(name, setup, bins=2)
    noise = secure_randomness() if insecure_seed is None else insecure_seeded_randomness(insecure_seed)
    dynamic = Family.of(name) is Family.DYNAMIC
    declarations = setup.dynamic_declarations(data_rng, slots) if dynamic else None
    fixed = None if dynamic else setup.fixed(data_rng)
    book = PrivacyLedger(max_window=setup.max_window) if ledger else None
    engine = Engine(mechanism, noise, book)
    probabilities = stream_probabilities(dataset, slots, data_rng)
    users_index = np.arange(users)
    released, truth, kinds = [], [], {k.value: 0 for k in ReleaseKind}
    for t, values in enumerate(binary_stream(probabilities, users, data_rng), start=1):
        reqs = next(declarations) if dynamic else (fixed if t == 1 else None)
        batch = SlotBatch.of(users_index, values, reqs)
        release = engine.step(batch)
        released.append(release.histogram)
        truth.append(np.bincount(values, minlength=2))
        kinds[release.kind.value] += 1
    engine.close()
    report = utility_report(np.array(released), np.array(truth))
    return {"mechanism": name, "dataset": dataset, "users": users, "slots": slots, "epsilon": epsilon,
            "window": window, "amre": report.amre, "ajsd": report.ajsd, "mre": report.mre, "mae": report.mae,
            **kinds, "seconds_per_slot": engine.mechanism_seconds / slots,
            "max_window_usage_ratio": None if book is None else book.max_usage_ratio,
            "ledger_violations": None if book is None else book.violation_count,
            "noise": "secure" if insecure_seed is None else f"INSECURE seeded replay (seed {insecure_seed})"}


def not_runnable(name: str) -> str | None:
    """Why this tool cannot run mechanism ``name`` on its binary streams, or None when it can."""
    cls = MECHANISMS[name]
    if cls.estimates is Estimate.MEAN:
        return (f"{name} estimates a mean of real values and these streams are bins: run it with "
                "wevent replay --domain LOW,HIGH")
    if Family.of(cls) is Family.LIFETIME:
        return (f"{name} spends a lifetime budget, not a w-event one, so the papers' (E, w) set-up does not apply: "
                "its own benchmark is python -m benchmarks.dpi_eval")
    return None


def runnable() -> list[str]:
    """The mechanisms this tool runs: a bin in, a w-event budget (every family but the lifetime one)."""
    return [name for name in MECHANISMS if not_runnable(name) is None]


class _OneLineParser(argparse.ArgumentParser):
    """No abbreviations; a bad command line is one ``error:`` line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message.replace('argument ', '', 1)}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv=None) -> argparse.Namespace:
    parser = _OneLineParser(prog="python -m transforms.mechanisms.run", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    parser.add_argument("--mechanism", default="pbd", help=f"one of {', '.join(runnable())}, or 'all' (each of "
                        "them in turn)")
    parser.add_argument("--dataset", default="sin", choices=sorted(STREAMS), help="the synthetic stream")
    parser.add_argument("--users", type=int, default=10_000, help="users N")
    parser.add_argument("--slots", type=int, default=2_000, help="slots T")
    parser.add_argument("--epsilon", type=float, default=0.6, help="static E around which users draw E_i (>= E)")
    parser.add_argument("--window", type=int, default=120, help="static w around which users draw w_i (<= w)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic data and requirements")
    parser.add_argument("--insecure-seed", type=int, default=None,
                        help="draw noise from a seeded generator: reproducible, NOT private (tests/replays only)")
    parser.add_argument("--no-ledger", action="store_true", help="skip the ledger check (faster)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per mechanism")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if rest:
        close = difflib.get_close_matches(rest[0].split("=")[0], [o for o in parser._option_string_actions
                                                                  if o.startswith("--")], n=1)
        parser.error(f"unknown flag {rest[0]}" + (f" (did you mean {close[0]}?)" if close else " (see --help)"))
    name = args.mechanism.lower()
    if name == "all":
        names = runnable()
        left_out = [n for n in MECHANISMS if n not in names]
        print(f"running {len(names)} mechanisms; not run here: {', '.join(left_out)} (a lifetime budget or a mean of "
              "real values: --mechanism NAME says where each runs)", file=sys.stderr)
    elif name not in MECHANISMS:
        parser.error(f"unknown mechanism {args.mechanism!r}; choose one of {', '.join(runnable())} or all")
    elif not_runnable(name):
        parser.error(str(not_runnable(name)))
    else:
        names = [name]
    if args.users < 1 or args.slots < 1:
        parser.error("--users and --slots must be >= 1")
    args.names = names
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        PaperSetup(users=args.users, epsilon=args.epsilon, window=args.window)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    worst = 0.0
    for name in args.names:
        summary = run(name, args.dataset, args.users, args.slots, args.epsilon, args.window, args.data_seed,
                      args.insecure_seed, ledger=not args.no_ledger)
        worst = max(worst, summary["max_window_usage_ratio"] or 0.0)
        if args.json:
            print(json.dumps(summary))
        else:
            ledger = ("not checked" if summary["ledger_violations"] is None else
                      f"max window usage {summary['max_window_usage_ratio']:.4f} of the requirement, "
                      f"{summary['ledger_violations']} violations")
            print(f"{name:>8} on {args.dataset} ({args.users} users, {args.slots} slots): "
                  f"AMRE {summary['amre']:.1f}  AJSD {summary['ajsd']:.4f}  "
                  f"fresh/skipped/nullified {summary['fresh']}/{summary['skipped']}/{summary['nullified']}  "
                  f"{summary['seconds_per_slot'] * 1e3:.2f} ms/slot  ledger: {ledger}")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
