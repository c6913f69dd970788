"""What every job's command line shares: strict flags, one-line errors, checks before and after a run.

* ``strict_parse``: a job's own flags, plus Beam's options only when they are
  Beam's; anything else exits 2 with a suggestion among the job's flags.
  ``--help`` shows every default.
* Checks before the pipeline starts (each a one-line ``ConfigError``, exit 2):
  ``--field``, ``--output``, ``--runner``, a CSV header, the first records of
  every input (a format or binning that cannot read them), and whether the
  configured requirements can ever be used by the mechanism
  (``check_requirements_usable``), and a lifetime-budget mechanism (DPI) only
  with a public release range (``check_lifetime_range``).
* The requirement and mechanism flags both jobs share: ``parse_requirement``,
  ``parse_levels``, ``mechanism_params``.
* After a run: ``rejection_error`` turns a dead-letter fraction above
  ``--max-rejected-fraction`` into one line naming the biggest reason (exit 3).
* Stopping (``pipelines.stopping``, re-exported here): ``stops_cleanly`` wraps
  every job's entry point; SIGINT and SIGTERM exit 130 and 143 with one line.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import difflib
import glob
import gzip
import itertools
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import fields as dataclass_fields
from functools import lru_cache
from typing import Any, NoReturn

from pipelines.stopping import (EXIT_SIGNAL, on_interrupt, remove_temporary_files,  # noqa: F401 - every job's
                                signals_deferred, stops_cleanly)  # stopping rules, here with its other rules
from transforms.mechanisms import (MECHANISMS, DynamicRequirement, Family, FixedRequirement, LifetimeRequirement,
                                   params_from_options)

EXIT_CONFIG = 2
"""A bad command line or configuration: nothing ran."""

EXIT_REJECTED = 3
"""The run finished but rejected more records than ``--max-rejected-fraction`` allows, or (``--strict``) read no
record or excluded a user whose declaration it refused."""

SAMPLE_RECORDS = 50
"""How many leading records of each input the checks before a run read."""


class ConfigError(ValueError):
    """A configuration problem, reported as one line before anything runs."""


# ---------------------------------------------------------------------------------------------- strict flags
class _StrictParser(argparse.ArgumentParser):
    """argparse's own errors (a missing value, a bad choice) become a one-line ``ConfigError``."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if not action.help and action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            action.help = "default: %(default)s"  # argparse leaves out a flag without help text
        return action

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message.replace("argument ", "", 1) if message.startswith("argument --") else message)


class _DefaultsFormatter(argparse.HelpFormatter):
    """``--help`` shows every flag's default (not the ``None``/``False`` of a flag that is simply absent)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").strip()
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS) \
                and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def job_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument parser whose ``--help`` shows the defaults and whose errors are one line."""
    return _StrictParser(prog=prog, description=description, formatter_class=_DefaultsFormatter, allow_abbrev=False)


@lru_cache(maxsize=1)
def _beam_parser() -> argparse.ArgumentParser:
    from apache_beam.options.pipeline_options import PipelineOptions

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, conflict_handler="resolve")
    pending, seen = [PipelineOptions], set()
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                pending.append(sub)
                sub._add_argparse_args(parser)  # type: ignore[arg-type]  # a plain parser is enough to list flags
    return parser


def strict_parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The job's arguments and the Beam arguments; an argument that is neither is a ``ConfigError``."""
    args, rest = parser.parse_known_args(list(argv))
    _import_named_runner(rest)
    _, unknown = _beam_parser().parse_known_args(rest)
    if unknown:
        raise ConfigError(unknown_flag_message(parser, unknown[0]))
    return args, rest


def _import_named_runner(beam_args: list[str]) -> None:
    """Imports the runner that ``--runner`` names, so that the options its own module defines (a
    ``PipelineOptions`` subclass there, e.g. the Dask runner's) are known before the flags are checked. A runner
    that cannot be loaded is left to :func:`pipeline_options`, which says so in one line."""
    runner_flag = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    runner_flag.add_argument("--runner")
    runner = runner_flag.parse_known_args(beam_args)[0].runner
    if runner:
        from apache_beam.runners.runner import create_runner

        try:
            create_runner(runner)
        except (ValueError, ImportError):
            return
        _beam_parser.cache_clear()  # the runner's module may have defined options since the parser was built


def parse_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """A job without Beam options: its own flags only; anything else is a ``ConfigError`` with a suggestion."""
    args, rest = parser.parse_known_args(list(argv))
    if rest:
        raise ConfigError(unknown_flag_message(parser, rest[0]))
    return args


def unknown_flag_message(parser: argparse.ArgumentParser, token: str) -> str:
    """``unknown flag --epsilonn (did you mean --epsilon?)`` with suggestions among the job's flags only."""
    flag = token.split("=", 1)[0]
    if not flag.startswith("-"):
        return f"unexpected argument {token!r} (flags take the form --name value; see --help)"
    own = [option for option in parser._option_string_actions if option.startswith("--")]
    close = difflib.get_close_matches(flag, own, n=2, cutoff=0.6)
    hint = f" (did you mean {' or '.join(close)}?)" if close else " (see --help)"
    return f"unknown flag {flag}{hint}"


def pipeline_options(beam_args: list[str], quiet: bool = False):
    """Beam's options, with ``--runner`` checked here (one line instead of a traceback); quiet workers."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    beam_args = list(beam_args)
    if quiet and not any(a.split("=")[0] == "--default_sdk_harness_log_level" for a in beam_args):
        beam_args.append("--default_sdk_harness_log_level=ERROR")  # SDK workers in other processes too
    options = PipelineOptions(beam_args)
    runner = options.view_as(StandardOptions).runner
    if runner:
        from apache_beam.runners.runner import create_runner

        try:
            create_runner(runner)
        except (ValueError, ImportError) as error:
            raise ConfigError(f"--runner {runner}: {str(error).splitlines()[0]}") from None
    return options


# ---------------------------------------------------------------------------------------------- flag values
def parse_fields(items: Iterable[str]):
    """``--field NAME=FIELD`` (repeatable) into a ``FieldMapping``."""
    from transforms.parse import FieldMapping

    names = [f.name for f in dataclass_fields(FieldMapping)]
    mapping: dict[str, Any] = {}
    for item in items:
        name, equals, source = item.partition("=")
        if not equals or not name.strip() or not source.strip():
            raise ConfigError(f"--field {item}: expected NAME=FIELD, e.g. --field user=taxi_id")
        if name.strip() not in names:
            raise ConfigError(f"--field {item}: unknown name {name.strip()!r}; choose among {', '.join(names)}")
        mapping[name.strip()] = source.strip()
    try:
        return FieldMapping(**mapping)
    except ValueError as error:
        raise ConfigError(f"--field: {flag_names(str(error))}") from None


def check_output(path: str) -> None:
    """``--output`` must be a directory (or not exist yet)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"--output {path!r} is a file; give a directory")


_FLAG_NAMES = (("csv_columns", "--csv-columns"), ("fields.", "--field "), ("ledger_max_window", "--max-window"),
               ("min_epsilon", "--min-epsilon"), ("max_epsilon", "--max-epsilon"), ("max_window", "--max-window"))


def flag_names(message: str) -> str:
    """A library error reworded with the command line's flag names."""
    for internal, flag in _FLAG_NAMES:
        message = message.replace(internal, flag)
    return message


def needs_value(args: argparse.Namespace, flag: str, why: str) -> None:
    if getattr(args, flag.lstrip("-").replace("-", "_"), None) in (None, ""):
        raise ConfigError(f"{flag} is required: {why}")


# ---------------------------------------------------------------------------------------------- CSV headers
def _open_text(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return open(path, encoding="utf-8", errors="replace", newline="")


def first_lines(pattern: str, count: int = SAMPLE_RECORDS) -> tuple[str, list[str]]:
    """The first file a pattern matches and its first ``count`` non-empty lines."""
    paths = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    if not paths:
        return pattern, []
    with _open_text(paths[0]) as f:
        return paths[0], list(itertools.islice((line.rstrip("\r\n") for line in f if line.strip()), count))


def csv_columns(flag: str, given: str | None, patterns: Sequence[str], names: Iterable[str]) -> tuple[str, ...]:
    """The CSV columns: ``given`` (comma-separated), else the first input's header row, which must name
    the fields the job reads."""
    if given:
        return tuple(name.strip() for name in given.split(","))
    path, lines = first_lines(patterns[0])
    if not lines:
        raise ConfigError(f"{flag}: {path} is empty; give the columns with --csv-columns")
    import csv

    header = tuple(cell.strip() for cell in next(csv.reader([lines[0]])))
    wanted = set(names)
    if not wanted & set(header):
        raise ConfigError(f"{flag}: {path} has no header row naming {', '.join(sorted(wanted))} "
                          f"(first line {lines[0][:60]!r}); give the columns with --csv-columns")
    return header


def drop_header(batch, header: tuple[str, ...]):
    """A ``LineBatch`` without the CSV header lines (a header is not a record: neither read nor dead)."""
    import csv

    from transforms.lines import LineBatch

    if type(batch) is not LineBatch:
        return batch
    kept = LineBatch(line for line in batch if not (isinstance(line, str) and header and line.startswith(header[0])
                                                    and tuple(c.strip() for c in next(csv.reader([line]))) == header))
    return kept if len(kept) != len(batch) else batch


def csv_dicts(batch, columns: tuple[str, ...]) -> list[dict]:
    """CSV lines to records (column name to cell text, empty cells ``None``), header lines left out: for files
    whose rows need not carry every event field (requirement declarations have no value)."""
    import csv

    from transforms.loaders import malformed

    records = []
    for line in batch:
        try:
            cells = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            records.append(malformed(line))
            continue
        if tuple(cell.strip() for cell in cells) == columns:
            continue
        if len(cells) != len(columns):
            records.append(malformed(line))
            continue
        records.append({name: cell.strip() or None for name, cell in zip(columns, cells)})
    return records


# ---------------------------------------------------------------------------------------------- first records
_MAGIC = {"avro": b"Obj\x01", "parquet": b"PAR1"}


def sample_records(input_format: str, pattern: str, poi: str | None = None) -> tuple[str, list]:
    """The first records of an input as the job will read them (lines, or decoded dicts)."""
    if input_format in ("jsonl", "csv"):
        return first_lines(pattern)
    if input_format in _MAGIC:
        paths = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        if not paths:
            return pattern, []
        with open(paths[0], "rb") as f:
            head = f.read(4)
        if head != _MAGIC[input_format]:
            raise ConfigError(f"--input-format {input_format}: {paths[0]} is not a {input_format} file "
                              f"(it starts with {head!r}); check --input-format")
        if input_format == "avro":
            import fastavro

            with open(paths[0], "rb") as f:
                return paths[0], list(itertools.islice(fastavro.reader(f), SAMPLE_RECORDS))
        import pyarrow.parquet as pq

        batches = pq.ParquetFile(paths[0]).iter_batches(batch_size=SAMPLE_RECORDS)
        first = next(batches, None)
        return paths[0], first.to_pylist() if first is not None else []
    from transforms import loaders

    try:
        records = loaders.iter_tdrive(pattern) if input_format == "tdrive" else loaders.iter_checkins(pattern, poi)
        return pattern, list(itertools.islice(records, SAMPLE_RECORDS))
    except (ValueError, OSError, EOFError) as error:
        raise ConfigError(f"--input {pattern} (--input-format {input_format}): {error}") from None


def check_first_records(flag: str, input_format: str, patterns: Sequence[str], parse, translator=None,
                        poi: str | None = None, csv_header: tuple[str, ...] = ()) -> None:
    """Refuse an input none of whose first records the job could use (wrong format, binning, fields,
    or requirements the mechanism must refuse), naming the first reason."""
    from transforms.parse import parse_record
    from transforms.records import Event

    for pattern in patterns:
        path, records = sample_records(input_format, pattern, poi)
        if csv_header:
            records = csv_dicts(records, csv_header)
        if not records:
            continue  # an empty input: nothing to judge
        reasons: collections.Counter = collections.Counter()
        for record in records:
            parsed = parse_record(record, parse)
            if not isinstance(parsed, Event):
                reasons[parsed["reason"]] += 1
                continue
            refused = None if translator is None else translator.row(parsed.requirement)[1]
            if refused is None:
                break  # this input has a usable record
            reasons[refused] += 1
        else:
            reason, _ = reasons.most_common(1)[0]
            raise ConfigError(f"{flag} {path}: none of the first {len(records)} records can be used as "
                              f"--input-format {input_format} (most common reason: {flag_names(reason)}); "
                              f"check --input-format, --binning and --field")


def check_requirements_usable(mechanism, policy, used_levels: Iterable[str] | None = None) -> Any:
    """Refuse a configured requirement (``--requirement``, ``--levels``) the mechanism would refuse for every
    user (outside the operator's bounds, or stricter than a homogeneous mechanism's parameters); returns the
    translator for further checks."""
    from transforms.declarations import DeclarationTranslator

    translator = DeclarationTranslator(mechanism, policy)
    if policy.default is not None:
        _, refused = translator.row(None)
        if refused:
            raise ConfigError(f"--requirement can never be used, every record would be refused: {flag_names(refused)}")
    for name in (policy.levels if used_levels is None else used_levels):
        _, refused = translator.row(("level", name))
        if refused:
            raise ConfigError(f"--levels {name}: can never be used, every record would be refused: "
                              f"{flag_names(refused)}")
    return translator


def check_requirement_source(args: argparse.Namespace, declarations_flag: str | None = None) -> None:
    """The one rule of every job: say whose requirements apply (a user who declares nothing gets none)."""
    given = [getattr(args, "requirement", None), getattr(args, "level_ratios", None)]
    if declarations_flag:
        given.append(getattr(args, declarations_flag.lstrip("-").replace("-", "_"), None))
    if getattr(args, "requirement", None) and getattr(args, "level_ratios", None):
        raise ConfigError("give either --requirement (one for all) or --level-ratios, not both")
    if not any(given):
        options = ["--requirement", "--levels with --level-ratios"] + ([declarations_flag] if declarations_flag else [])
        raise ConfigError(f"say whose requirements apply: {', '.join(options[:-1])} or {options[-1]}")


# ---------------------------------------------------------------------------------------------- after a run
def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Flags every job shares for judging its run."""
    parser.add_argument("--max-rejected-fraction", type=_fraction, default=0.5,
                        help="exit 3 when more than this fraction of the records read ended late or as dead letters")
    parser.add_argument("--strict", action="store_true",
                        help="exit 3 also when the input is empty or a refused requirement declaration excluded a user "
                             "(both are warnings in the summary and report.json otherwise)")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in [0, 1]")
    return value


_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def reason_counts(letters: Iterable[dict]) -> collections.Counter:
    """Dead letters by reason, numbers folded (``late: slot 7 closed`` and ``... 8 ...`` count as one reason,
    shown as the first of them)."""
    first: dict[str, str] = {}
    counts: collections.Counter = collections.Counter()
    for letter in letters:
        reason = str(letter.get("reason", "?"))
        counts[first.setdefault(_NUMBERS.sub("N", reason), reason)] += 1
    return counts


def rejection_error(counts: dict, reasons: collections.Counter, max_fraction: float) -> str | None:
    """One line when more than ``max_fraction`` of the records read were rejected (late or dead), else None."""
    read = counts.get("records_read", 0)
    rejected = counts.get("late", 0) + counts.get("dead_letters", 0)
    if not read or rejected / read <= max_fraction:
        return None
    top = f"; biggest reason ({reasons.most_common(1)[0][1]} records): {reasons.most_common(1)[0][0]}" \
        if reasons else ""
    return (f"{rejected} of {read} records ({rejected / read:.1%}) were rejected (late or dead letters), above "
            f"--max-rejected-fraction {max_fraction:g}{top}")


def fail(message: str, code: int = EXIT_CONFIG) -> int:
    """Print one ``error:`` line on stderr and return the exit code."""
    print(f"error: {message}", file=sys.stderr)
    return code


# ---------------------------------------------------------------------------------------------- the replay job
def check_config(config, transform) -> None:
    """Before a replay starts: the configured requirements are usable and every input's first records are."""
    mechanism = transform.config.build()
    used = [name for name, _ in config.policy.level_shares] if config.policy.level_shares else None
    translator = check_requirements_usable(mechanism, config.policy, used)
    # users without a declaration get a level or a declaration from a file: only a record's own can be judged
    judge = None if config.policy.level_shares or config.requirements_files else translator
    check_first_records("--input", config.input_format, config.inputs, config.parse, judge, config.poi)
    if config.requirements_files:
        check_first_records("--requirements-file", "csv" if config.requirements_csv else "jsonl",
                            config.requirements_files, config.requirements_parse, translator,
                            csv_header=config.requirements_csv)
    import logging

    predict_fresh(config, transform, logging.getLogger("pipelines.replay"))


def dead_letter_reasons(pattern: str, file_format: str = "jsonl") -> collections.Counter:
    """The reasons of the dead letters in the files ``pattern`` matches."""
    from transforms.sinks import read_records

    return reason_counts(read_records(pattern, file_format)) if glob.glob(pattern) else collections.Counter()


def summary(job: str, report: dict, output: str) -> str:
    """The one line a job ends with (``pipelines.report.summary_line``)."""
    from pipelines.job_report import summary_line

    return summary_line({"job": job, **report}, output)


def finish(job: str, report: dict, output: str, max_rejected_fraction: float, dead_letters: str,
           file_format: str = "jsonl", fresh_needs: int | None = None, strict: bool = False) -> int:
    """After a run: the summary line, then the exit code (1: ledger violations, 3: more rejected records than
    ``max_rejected_fraction``, their biggest reason read from the ``dead_letters`` files, or with ``strict`` an
    empty input or a user excluded by a refused declaration), and a warning when no slot was published fresh."""
    import logging

    logger = logging.getLogger(f"pipelines.{job}")
    logger.info("%s", summary(job, report, output))
    if report["ledger_violations"]:
        return fail(f"{report['ledger_violations']} ledger violations (see {output}/violations-*)", 1)
    if rejection_error(report, collections.Counter(), max_rejected_fraction):
        reasons = dead_letter_reasons(dead_letters, file_format)
        return fail(str(rejection_error(report, reasons, max_rejected_fraction)), EXIT_REJECTED)
    if strict and (not report["records_read"] or report.get("excluded_users")):
        return fail(f"--strict: {'; '.join(report_input_warnings(report))}", EXIT_REJECTED)
    if report["slots"] and not report["fresh"]:
        needs = f"; the error model wants about {fresh_needs} users reporting per slot, this run had " \
            f"{report['records_used'] / report['slots']:.1f} records per slot" if fresh_needs else ""
        logger.warning("warning: none of the %d slots released was fresh (each repeats an earlier release or is "
                       "empty)%s: use fewer bins, longer slots or larger budgets (epsilon)", report["slots"], needs)
    return 0


def report_input_warnings(report: dict) -> list[str]:
    """The report's warnings on its input (an empty one, excluded users) that ``--strict`` fails on."""
    from pipelines.job_report import EMPTY_INPUT_WARNING

    return [w for w in report["warnings"] if w == EMPTY_INPUT_WARNING or "excluded" in w]


def finish_stream(args: argparse.Namespace, result, seconds: float) -> int:
    """A Beam streaming job that ended (the demo, or a drained job): report.json from its output files, the
    summary line, the checks."""
    from pipelines.job_report import stream_report

    report = stream_report(args, result, seconds)
    return finish("stream", report, args.output, args.max_rejected_fraction,
                  os.path.join(args.output, "dead_letters-*.jsonl"), strict=args.strict)


def finish_watch(args: argparse.Namespace, counts: dict, seconds: float, release_range=None) -> int:
    """The watch loop's end (also when a signal stopped it: call it from the stop path with the loop's counts so
    far): report.json from its output files and the loop's own counts, the summary line, the checks."""
    from pipelines.job_report import watch_report

    report = watch_report(args.output, args.mechanism, counts, seconds, release_range)
    return finish("watch", report, args.output, args.max_rejected_fraction,
                  os.path.join(args.output, "dead_letters-live.jsonl"), strict=args.strict)


# ---------------------------------------------------------------------------------------------- fresh slots
def fresh_threshold(mechanism, policy, levels: Iterable[str] | None = None) -> int | None:
    """The error model's prediction: how many users must report in a slot before a fresh release can beat
    repeating the last one, or None for a mechanism that publishes on a schedule (uniform, sample).

    A slot is published fresh when its dissimilarity to the last release (at most ``2n/d`` per bin for ``n``
    users reporting, ``n/d`` from an empty start) exceeds the publication's noise (the standard deviation of
    noise calibrated to the budget the slot can get: at most half a window's ``epsilon``, the largest of the
    configured requirements).  Below ``d * sd / 2`` users a fresh slot can only come from the noise.
    """
    import math

    from transforms.mechanisms import DynamicRequirement

    params = mechanism.params
    if mechanism.publishes_on_schedule:
        return None
    if params.shared_epsilon is not None:
        epsilons = [params.shared_epsilon]
    else:
        requirements = [policy.default] if policy.default is not None else []
        requirements += [policy.levels[name] for name in (policy.levels if levels is None else levels)]
        epsilons = [r.backward_epsilon if isinstance(r, DynamicRequirement) else r.epsilon for r in requirements]
    if not epsilons:
        return None  # every user declares their own: nothing to predict from
    sd = math.sqrt(params.error_model.noise_variance(float(max(epsilons)) / 2, params.sensitivity))
    return max(1, math.ceil(params.bins * sd / 2))


def busiest_slot_users(records: Iterable, parse, slot_seconds: float, origin: float) -> int:
    """The most distinct users reporting in one slot among ``records`` (a sample: a lower bound)."""
    from transforms.parse import parse_record
    from transforms.records import Event

    users: dict[int, set] = {}
    for record in records:
        event = parse_record(record, parse)
        if isinstance(event, Event):
            users.setdefault(int((event.time - origin) // slot_seconds), set()).add(event.user)
    return max(map(len, users.values()), default=0)


def predict_fresh(config, transform, logger) -> None:
    """Before a replay: say how many users a fresh slot needs; warn when the input's first slots have fewer."""
    if getattr(config, "numeric", None) is not None:  # a numeric stream releases every slot with reports
        return
    needed = fresh_threshold(transform.config.build(), config.policy,
                             [name for name, _ in config.policy.level_shares] if config.policy.level_shares else None)
    if needed is None:
        return
    logger.info("error model: a slot needs about %d users reporting for a fresh release (%d bins)", needed,
                config.parse.bins)
    if config.input_format not in ("jsonl", "csv"):
        return
    _, lines = first_lines(config.inputs[0], 20_000)
    seen = busiest_slot_users(lines, config.parse, config.slot_seconds, config.origin)
    if 0 < seen < needed / 4:
        logger.warning("warning: the error model predicts no fresh slot: the busiest slot among the first %d "
                       "records has %d users, a fresh release needs about %d; use fewer bins (--binning), longer "
                       "slots (--slot-seconds) or larger budgets (epsilon)", len(lines), seen, needed)


# ---------------------------------------------------------------------------------------------- requirements and mechanism
def parse_requirement(text: str) -> FixedRequirement | DynamicRequirement | LifetimeRequirement:
    """``fixed:W,E``, ``dynamic:WB,EB,WF,EF`` or ``lifetime:E``."""
    kind, _, numbers = text.partition(":")
    parts = numbers.split(",")
    try:
        if kind == "fixed" and len(parts) == 2:
            return FixedRequirement(window=int(parts[0]), epsilon=float(parts[1]))
        if kind == "dynamic" and len(parts) == 4:
            return DynamicRequirement(int(parts[0]), float(parts[1]), int(parts[2]), float(parts[3]))
        if kind == "lifetime" and len(parts) == 1:
            return LifetimeRequirement(epsilon=float(parts[0]))
    except ValueError as error:
        raise ConfigError(f"requirement {text!r}: {error}") from None
    raise ConfigError(f"requirement {text!r} must be fixed:W,E, dynamic:WB,EB,WF,EF or lifetime:E")


def parse_levels(levels: str, ratios: str | None) -> tuple[dict, list[tuple[str, float]]]:
    """``high=fixed:40,1.0;low=fixed:120,0.6`` and ``high=0.5,low=0.5``."""
    mapping = {}
    for item in filter(None, levels.split(";")):
        name, _, requirement = item.partition("=")
        if not name or not requirement:
            raise ConfigError(f"level {item!r} must be NAME=fixed:W,E, NAME=dynamic:WB,EB,WF,EF or NAME=lifetime:E")
        mapping[name.strip()] = parse_requirement(requirement.strip())
    shares = []
    for item in filter(None, (ratios or "").split(",")):
        name, _, share = item.partition("=")  # RequirementPolicy checks the names and the sum
        try:
            shares.append((name, float(share)))
        except ValueError:
            raise ConfigError(f"level ratio {item!r} is not NAME=FRACTION") from None
    return mapping, shares


def add_mechanism_parameter_option(parser: argparse.ArgumentParser) -> None:
    """``--param NAME=VALUE`` (repeatable): a mechanism parameter the other flags do not name."""
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a mechanism's own parameter, e.g. beta=0.3 or simulation=aggregate for the local-DP "
                             "methods (repeatable; see each mechanism's parameters)")


def _parameter_value(text: str):
    """A ``--param`` value: an integer, a number, ``none``, or the text itself (the parameters validate it)."""
    if text.lower() == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def mechanism_params(args, bins: int, **common) -> tuple[str, dict]:
    """The mechanism's name and its parameters from the command line (shared by both jobs), as keywords."""
    name = args.mechanism.lower()
    if name not in MECHANISMS:
        raise ConfigError(f"unknown mechanism {args.mechanism!r}; choose one of {', '.join(MECHANISMS)}")
    accepted = {f.name for f in dataclasses.fields(MECHANISMS[name].params_type)}
    for item in getattr(args, "param", []):
        key, equals, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not equals or key in ("bins", "epsilon", "window", "max_window", "carry_forward", "sensitivity"):
            raise ConfigError(f"--param {item!r} must be NAME=VALUE for a parameter no other flag sets")
        if key not in accepted:
            raise ConfigError(f"--param {key}: {name} has no such parameter; it takes {', '.join(sorted(accepted))}")
        common[key] = _parameter_value(value.strip())
    try:
        params = params_from_options(name, bins, epsilon=args.epsilon, window=args.window,
                                     max_window=args.max_window, carry_forward=getattr(args, "carry_forward", False),
                                     **common)
    except ValueError as error:
        raise ConfigError(f"{name}: {error}".replace("epsilon and window", "--epsilon and --window")) from None
    check_lifetime_range(name, args)
    return name, params.kwargs()


def check_lifetime_range(name: str, args) -> None:
    """A lifetime-budget mechanism (DPI) releases only a public range: without ``--start``/``--end`` the released
    slots would run from the first to the last slot with data, so they would say whether a user exists (DPI's
    neighbours differ by all of one user's records).  Every job that builds a mechanism from its command line
    (replay, stream, watch) passes here."""
    if Family.of(name) is Family.LIFETIME and getattr(args, "start", None) is None \
            and getattr(args, "end", None) is None:
        raise ConfigError(f"{name} releases under a lifetime budget: give --start and --end (the public release "
                          "range); without them the released slots follow the data and reveal whether a user exists")
