"""What a job says about its run: ``report.json`` and, only on request, the NOT private evaluation.

Every job writes one ``report.json`` in one schema (``schemas/job_report.avsc``, checked by
:func:`write_job_report`), and its counts are read back from the job's own outputs
(:func:`output_counts`: release records by kind, dead letters, late ones among them, usage,
violations, and the ``accounting-*.jsonl`` lines a Beam job writes with :class:`WriteAccounting`),
never only from runner metrics, which some runners do not deliver: the summary line and the
report agree with the files on disk on every runner.

``report.json`` holds only what the operator needs to run the job: counts of
records by fate (used, duplicates, late, dead letters), slots by kind, the
ledger's verdict, the configuration's release range and warnings.  Nothing in
it is computed from the true histograms (its record counts are exact, so it
stays with the operator like the metrics counters: docs/attack_model.md).

Utility against the true histograms (AMRE, MAE, MRE, AJSD) and the plot of
true counts are functions of the true data: with the releases and everyone
else's data they give a user's bin away.  They are computed only with
``--evaluate`` and written, by the pipeline itself, into
``OUTPUT/evaluation/`` beside a README saying so; they never pass through a
temporary file.
"""

from __future__ import annotations

import glob
import json
import os
from collections import Counter
from collections.abc import Iterable

import apache_beam as beam
import numpy as np

from transforms.mechanisms.metrics import utility_report
from transforms.release_range import RANGE_FROM_DATA_WARNING

EVALUATION_DIR = "evaluation"
EVALUATION_README = (
    "NOT PRIVATE. The files in this folder are computed from the TRUE histograms (utility of the releases "
    "against them, and with --plot a picture of true counts). Together with the releases and other users' data "
    "they can reveal a user's reports. Keep them with the raw data; never publish them beside the releases.\n")
EVALUATION_FILES = ("README.txt", "utility.json", "released_vs_true.png")


def evaluation_dir(output: str) -> str:
    """``OUTPUT/evaluation`` (local paths and gs:// alike)."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.join(output, EVALUATION_DIR)


class Utility(beam.CombineFn):
    """Released vs true histograms of every slot -> the utility metrics, and the series a plot needs."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, row):
        accumulator.append(row)
        return accumulator

    def merge_accumulators(self, accumulators):
        return [row for accumulator in accumulators for row in accumulator]

    def extract_output(self, rows):
        if not rows:
            return {}
        rows = sorted(rows)
        released = np.array([r[2] for r in rows], float)
        true = np.array([r[3] for r in rows], float)
        report = utility_report(released, true)
        return {"metrics": {"amre": report.amre, "ajsd": report.ajsd, "mre": report.mre, "mae": report.mae},
                "released": released, "true": true, "slots": [r[1] for r in rows]}


def write_evaluation(utility: dict, directory: str, plot: dict | None) -> None:
    """Write ``README.txt``, ``utility.json`` (the metrics) and with ``plot`` (the keyword arguments of
    ``pipelines.plots.plot_released_vs_true``: slot_seconds, origin, mechanism) the PNG into ``directory``."""
    _write(directory, "README.txt", EVALUATION_README.encode())
    payload = {"not_private": True, "slots": len(utility.get("slots", [])), **utility.get("metrics", {})}
    _write(directory, "utility.json", json.dumps(payload, indent=2).encode())
    if plot and utility:
        from pipelines.plots import plot_released_vs_true

        _write(directory, "released_vs_true.png", plot_released_vs_true(utility, **plot))


def _write(directory: str, name: str, data: bytes) -> None:
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)
    with FileSystems.create(FileSystems.join(directory, name)) as f:
        f.write(data)


def users_in_several_streams(pairs) -> int:
    """How many user ids appear in more than one stream, from ``(stream, user)`` pairs."""
    streams_per_user = Counter(user for _, user in set(map(tuple, pairs)))
    return sum(1 for n in streams_per_user.values() if n > 1)


def run_warnings(release_range, pairs) -> list[str]:
    """``report.json``'s warnings: a release range taken from the data, users in several streams (each stream
    spends its own budget: docs/attack_model.md, 'Several streams')."""
    warnings = [] if release_range is not None else [RANGE_FROM_DATA_WARNING]
    shared = users_in_several_streams(pairs)
    if shared:
        warnings.append(f"{shared} user(s) appear in more than one stream: each stream is a separate w-event "
                        f"mechanism with its own budget, so a user in k streams can lose up to k times their E in a "
                        f"window (docs/attack_model.md, 'Several streams')")
    return warnings


# ---------------------------------------------------------------------------------------------- report.json
REPORT_SCHEMA_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas",
                                  "job_report.avsc")
JOBS = ("replay", "stream", "watch", "collect", "devices", "client-replay")
ACCOUNTING_PREFIX = "accounting"
"""``OUTPUT/accounting-*.jsonl``: ``{"counter": NAME, "n": N}`` lines, the records read, used and duplicated."""
RELEASE_KINDS = ("fresh", "skipped", "nullified")
LATE_PREFIX = "late"
"""A dead letter whose reason starts with this is counted as late (``transforms.user_state``, the engines)."""


def report_schema() -> dict:
    """The parsed Avro schema of ``report.json`` (``schemas/job_report.avsc``)."""
    import fastavro

    with open(REPORT_SCHEMA_FILE, encoding="utf-8") as f:
        return fastavro.parse_schema(json.load(f))


def check_report(report: dict) -> None:
    """Raise ValueError unless ``report`` follows ``schemas/job_report.avsc`` exactly (no key missing, none extra)."""
    from fastavro.validation import ValidationError, validate

    if report.get("job") not in JOBS:
        raise ValueError(f"report.json: job {report.get('job')!r} is not one of {', '.join(JOBS)}")
    try:
        validate(report, report_schema(), strict=True)
    except ValidationError as error:
        raise ValueError(f"report.json does not follow schemas/job_report.avsc: {error}") from None


def _records(pattern: str, file_format: str) -> list[dict]:
    from transforms.sinks import read_records

    return read_records(pattern, file_format) if glob.glob(pattern) else []


def _lines(pattern: str) -> list[dict]:
    records = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def output_counts(output: str, file_format: str = "jsonl", usage_violations: bool = True) -> dict:
    """What the files in ``output`` hold: release records by kind, dead letters (late ones apart), the users
    and the ledger's verdict of the usage files, the violation records, and the accounting lines' totals.

    Every job names its files ``releases*``, ``dead_letters*``, ``usage*``, ``violations*`` and ``accounting*``
    (one file or shards, windowed or per slot; ``.part`` files being written are not read).  With
    ``usage_violations`` the usage records' violation counts are the ledger's verdict when no violation file
    exists (the streaming job writes none)."""
    ext = file_format
    releases = _records(os.path.join(output, f"releases*.{ext}"), file_format)
    letters = _records(os.path.join(output, f"dead_letters*.{ext}"), file_format)
    usage = _records(os.path.join(output, f"usage*.{ext}"), file_format)
    violation_files = glob.glob(os.path.join(output, "violations*.jsonl"))
    kinds = Counter(str(r.get("kind")) for r in releases)
    late = sum(1 for letter in letters if str(letter.get("reason", "")).startswith(LATE_PREFIX))
    accounting: Counter = Counter()
    for line in _lines(os.path.join(output, f"{ACCOUNTING_PREFIX}*.jsonl")):
        accounting[line["counter"]] += int(line["n"])
    if violation_files or not usage_violations:
        violations = len(_lines(os.path.join(output, "violations*.jsonl")))
    else:
        violations = sum(int(u.get("violations", 0)) for u in usage)
    return {"slots": len(releases), **{kind: kinds.get(kind, 0) for kind in RELEASE_KINDS},
            "late": late, "dead_letters": len(letters) - late,
            "users": len({(u.get("stream"), u.get("user")) for u in usage}),
            "ledger_violations": violations,
            "max_window_usage_ratio": float(max((u["max_window_usage_ratio"] for u in usage), default=0.0)),
            "accounting": dict(accounting), "pairs": [(u.get("stream"), u.get("user")) for u in usage]}


def job_report(job: str, mechanism: str, counts: dict, records_read: int, records_used: int, duplicates: int,
               wall_seconds: float, warnings: Iterable[str] = (), unanswered: int = 0, **optional) -> dict:
    """``report.json`` of one job in the one schema: ``counts`` from :func:`output_counts` (or the job's own
    outputs counted the same way), the record totals the files cannot show, and the optional keys."""
    report = {"job": job, "mechanism": mechanism, "records_read": int(records_read),
              "records_used": int(records_used), "duplicates": int(duplicates), "late": int(counts["late"]),
              "dead_letters": int(counts["dead_letters"]), "unanswered": int(unanswered)}
    report["reconciles"] = report["records_read"] == sum(
        report[k] for k in ("records_used", "duplicates", "late", "dead_letters", "unanswered"))
    report.update({key: int(counts[key]) for key in ("slots", *RELEASE_KINDS, "users", "ledger_violations")})
    report["max_window_usage_ratio"] = float(counts["max_window_usage_ratio"])
    report["range_from_data"] = optional.pop("range_from_data", None)
    report["release_range"] = optional.pop("release_range", None)
    report["warnings"] = list(warnings)
    for key in ("clipped", "evaluation", "requests_sent", "trust", "stopped"):
        report[key] = optional.pop(key, None)
    if optional:
        raise ValueError(f"report.json has no key {', '.join(sorted(optional))} (schemas/job_report.avsc)")
    report["wall_seconds"] = float(wall_seconds)
    return report


def write_job_report(output: str, report: dict) -> dict:
    """Check ``report`` against the schema and write it as ``OUTPUT/report.json``; returns it."""
    check_report(report)
    path = os.path.join(output, "report.json")
    with open(path + ".part", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    os.replace(path + ".part", path)
    return report


def summary_line(report: dict, output: str) -> str:
    """The one line a job ends with, from its report: where every record went, the slots, the output path."""
    unanswered = f" + {report['unanswered']:,} unanswered" if report.get("unanswered") else ""
    stopped = f" (stopped early: {report['stopped']})" if report.get("stopped") else ""
    return (f"{report['job']} done in {report.get('wall_seconds', 0):.1f} s{stopped}: {report['records_read']:,} "
            f"records read = {report['records_used']:,} used + {report['duplicates']:,} duplicates + "
            f"{report['late']:,} late + {report['dead_letters']:,} dead letters{unanswered}; {report['slots']:,} "
            f"slots released ({report['fresh']:,} fresh) for {report['users']:,} users; "
            f"{report['ledger_violations']} ledger violations; outputs in {output}")


def _read_pair(raw) -> tuple[str, int]:
    from transforms.lines import LineBatch

    return ("records_read", len(raw) if type(raw) is LineBatch else 1)


class CountRead(beam.PTransform):
    """Raw records (or ``LineBatch`` es, as ``ParseEvents`` reads them) -> ``("records_read", n)`` pairs."""

    def expand(self, raw):
        return raw | "ReadPairs" >> beam.Map(_read_pair)


def _accounting_line(pair: tuple[str, int]) -> str:
    return json.dumps({"counter": pair[0], "n": int(pair[1])}, sort_keys=True)


class WriteAccounting(beam.PTransform):
    """``(counter, n)`` pairs (records read, used, duplicates, late, dead letters) -> ``PREFIX-*.jsonl`` lines
    with their totals: one file for a bounded input, one per window of ``every`` seconds for an unbounded one.
    ``report.json`` reads them back (:func:`output_counts`)."""

    def __init__(self, prefix: str, every: float | None = None):
        super().__init__()
        self.prefix, self.every = prefix, every

    def expand(self, pairs):
        if pairs.is_bounded:
            return (pairs | "Totals" >> beam.CombinePerKey(sum) | "Lines" >> beam.Map(_accounting_line)
                    | "Write" >> beam.io.WriteToText(self.prefix, file_name_suffix=".jsonl", num_shards=1))
        from apache_beam.transforms.window import FixedWindows

        every = int(self.every or 60)
        return (pairs | "Windows" >> beam.WindowInto(FixedWindows(every)) | "Totals" >> beam.CombinePerKey(sum)
                | "Lines" >> beam.Map(_accounting_line)
                | "Write" >> beam.io.WriteToText(self.prefix, file_name_suffix=".jsonl", num_shards=1,
                                                 triggering_frequency=every))


def _range_keys(release_range) -> dict:
    from transforms.release_range import range_report

    return range_report(release_range)


def stream_report(args, result, seconds: float) -> dict:
    """``report.json`` of a Beam streaming job (the demo, or a drained job) from its output files: slot files,
    windowed dead-letter, usage and accounting files (its usage records carry the ledger's verdict)."""
    from transforms.release_range import ReleaseRange, parse_range
    from transforms.slotting import SlotClock

    counts = output_counts(args.output)
    accounting = counts["accounting"]
    bounds = parse_range(args.start, args.end)
    release_range = None if bounds is None else ReleaseRange.of(
        SlotClock(args.slot_seconds, 0.0, args.allowed_lateness), *bounds)
    optional = {"trust": "local_client"} if getattr(args, "clients", False) else {}
    if not accounting:  # client-device graphs write no accounting lines: their reads come from the runner only
        from transforms.accounting import account

        metrics = account(result)
        accounting = {"records_read": metrics.records_read, "records_used": metrics.records_used,
                      "duplicates": metrics.duplicates}
    report = job_report("stream", args.mechanism.lower(), counts, accounting.get("records_read", 0),
                        accounting.get("records_used", 0), accounting.get("duplicates", 0), seconds,
                        run_warnings(release_range, counts["pairs"]), **_range_keys(release_range), **optional)
    return write_job_report(args.output, report)


def watch_report(args, loop_counts: dict, seconds: float, release_range=None) -> dict:
    """``report.json`` of the watch loop: releases, dead letters, late ones and violations from its ``*-live.jsonl``
    files; the records read, used and duplicated, the users and the worst window from the loop's own counts
    (it writes no usage file; the counts are its checkpointed state)."""
    counts = output_counts(args.output, usage_violations=False)
    counts["users"] = loop_counts.get("users", 0)
    counts["max_window_usage_ratio"] = loop_counts.get("max_window_usage_ratio", 0.0)
    report = job_report("watch", args.mechanism.lower(), counts, loop_counts.get("records_read", 0),
                        loop_counts.get("records_used", 0), loop_counts.get("duplicates", 0), seconds,
                        run_warnings(release_range, loop_counts.get("pairs", ())), **_range_keys(release_range),
                        stopped=loop_counts.get("stopped"))
    return write_job_report(args.output, report)
