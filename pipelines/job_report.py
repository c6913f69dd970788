"""``report.json``: one schema for every job, its counts read back from the job's own outputs.

Every job (replay, stream, watch, collect, devices, client-replay) writes one ``report.json`` that follows
``schemas/job_report.avsc`` (checked by :func:`write_job_report`, strictly: no key missing, none extra).  Its
counts are read back from what the job wrote (:func:`output_counts`: release records by kind, dead letters and
the late ones among them, usage, violations, and the ``accounting-*.jsonl`` lines of records read, used and
duplicated a Beam job writes with ``pipelines.report.WriteAccounting``), never only from runner metrics, which
some runners do not deliver: the summary line (:func:`summary_line`) and the report agree with the files on disk
on every runner.  This module does not import Beam (the collector and the devices run without it).
"""

from __future__ import annotations

import functools
import glob
import json
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

REPORT_SCHEMA_FILE = "job_report.avsc"
"""In the ``schemas`` package (beside the record schemas, installed with them)."""
JOBS = ("replay", "stream", "watch", "collect", "devices", "client-replay")
ACCOUNTING_PREFIX = "accounting"
"""``OUTPUT/accounting-*.jsonl`` (``pipelines.report.WriteAccounting``): the records read, used and duplicated."""
RELEASE_KINDS = ("fresh", "skipped", "nullified")
LATE_PREFIX = "late"
"""A dead letter whose reason starts with this is counted as late (``transforms.user_state``, the engines)."""


def users_in_several_streams(pairs) -> int:
    """How many user ids appear in more than one stream, from ``(stream, user)`` pairs."""
    streams_per_user = Counter(user for _, user in set(map(tuple, pairs)))
    return sum(1 for n in streams_per_user.values() if n > 1)


def run_warnings(release_range, pairs) -> list[str]:
    """``report.json``'s warnings: a release range taken from the data, users in several streams (each stream
    spends its own budget: docs/attack_model.md, 'Several streams')."""
    from transforms.release_range import RANGE_FROM_DATA_WARNING  # (imports Beam: only when a job reports)

    warnings = [] if release_range is not None else [RANGE_FROM_DATA_WARNING]
    shared = users_in_several_streams(pairs)
    if shared:
        warnings.append(f"{shared} user(s) appear in more than one stream: each stream is a separate w-event "
                        f"mechanism with its own budget, so a user in k streams can lose up to k times their E in a "
                        f"window (docs/attack_model.md, 'Several streams')")
    return warnings


@functools.cache
def report_schema() -> dict:
    """The parsed Avro schema of ``report.json`` (``schemas/job_report.avsc``)."""
    import importlib.resources

    import fastavro

    text = importlib.resources.files("schemas").joinpath(REPORT_SCHEMA_FILE).read_text(encoding="utf-8")
    schema = fastavro.parse_schema(json.loads(text))
    assert isinstance(schema, dict)  # a record schema parses to a dict
    return schema


def check_report(report: dict) -> None:
    """Raise ValueError unless ``report`` follows ``schemas/job_report.avsc`` exactly (no key missing, none extra)."""
    from fastavro.validation import ValidationError, validate

    if report.get("job") not in JOBS:
        raise ValueError(f"report.json: job {report.get('job')!r} is not one of {', '.join(JOBS)}")
    names = [field["name"] for field in report_schema()["fields"]]
    extra, missing = sorted(set(report) - set(names)), [name for name in names if name not in report]
    if extra or missing:
        raise ValueError(f"report.json does not follow schemas/job_report.avsc: keys {extra} not in it, "
                         f"{missing} missing")
    try:
        validate(report, report_schema(), strict=True)
    except ValidationError as error:
        raise ValueError(f"report.json does not follow schemas/job_report.avsc: {error}") from None


def _records(pattern: str, file_format: str) -> list[dict]:
    if file_format == "jsonl":  # without Beam: the collector and the devices do not import it
        return _lines(pattern)
    from transforms.sinks import read_records

    return read_records(pattern, file_format) if glob.glob(pattern) else []


def _lines(pattern: str) -> list[dict]:
    records = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            records += [json.loads(line) for line in f if line.strip()]  # .part files: not matched by *.jsonl
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
    if violation_files or not usage_violations:  # windows an explicit opt-in accepted are reported apart
        violations = sum(1 for line in _lines(os.path.join(output, "violations*.jsonl")) if "accepted_by" not in line)
    else:
        violations = sum(int(u.get("violations", 0)) for u in usage)
    return {"slots": len(releases), **{kind: kinds.get(kind, 0) for kind in RELEASE_KINDS},
            "late": late, "dead_letters": len(letters) - late,
            "users_in_ledger": len({(u.get("stream"), u.get("user")) for u in usage}),
            "ledger_violations": violations,
            "max_window_usage_ratio": float(max((u["max_window_usage_ratio"] for u in usage), default=0.0)),
            "accounting": dict(accounting), "pairs": [(u.get("stream"), u.get("user")) for u in usage]}


def job_report(job: str, mechanism: str, counts: dict, records_read: int, records_used: int, duplicates: int,
               wall_seconds: float, warnings: Iterable[str] = (), unanswered: int = 0, **optional) -> dict:
    """``report.json`` of one job in the one schema: ``counts`` from :func:`output_counts` (or the job's own
    outputs counted the same way), the record totals the files cannot show, and the optional keys."""
    report: dict[str, Any] = {"job": job, "mechanism": mechanism, "records_read": int(records_read),
              "records_used": int(records_used), "duplicates": int(duplicates), "late": int(counts["late"]),
              "dead_letters": int(counts["dead_letters"]), "unanswered": int(unanswered)}
    report["reconciles"] = report["records_read"] == sum(
        report[k] for k in ("records_used", "duplicates", "late", "dead_letters", "unanswered"))
    report.update({key: int(counts[key])
                   for key in ("slots", *RELEASE_KINDS, "users_in_ledger", "ledger_violations")})
    report["max_window_usage_ratio"] = float(counts["max_window_usage_ratio"])
    report["range_from_data"] = optional.pop("range_from_data", None)
    report["release_range"] = optional.pop("release_range", None)
    report["warnings"] = list(warnings)
    for key in ("clipped", "evaluation", "requests_sent", "trust", "stopped", "not_w_event_private"):
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
    if report["job"] == "devices":
        return (f"devices done in {report.get('wall_seconds', 0):.1f} s{stopped}: {report['records_read']:,} "
                f"requests read = {report['records_used']:,} answered + {report['dead_letters']:,} refused"
                f"{unanswered}; {report['users_in_ledger']:,} devices; report in {output}")
    return (f"{report['job']} done in {report.get('wall_seconds', 0):.1f} s{stopped}: {report['records_read']:,} "
            f"records read = {report['records_used']:,} used + {report['duplicates']:,} duplicates + "
            f"{report['late']:,} late + {report['dead_letters']:,} dead letters{unanswered}; {report['slots']:,} "
            f"slots released ({report['fresh']:,} fresh) for {report['users_in_ledger']:,} users; "
            f"{report['ledger_violations']} ledger violations{opted_in_note(report)}; outputs in {output}")


def opted_in_note(report: dict) -> str:
    """The summary's note on a run an explicit opt-in made not w-event private (empty otherwise)."""
    opted = report.get("not_w_event_private")
    if not opted:
        return ""
    return (f"; not w-event private ({opted['opt_in']}): max window usage {opted['max_window_usage_ratio']:.2f}, "
            f"{opted['windows_over_budget']} windows over budget accepted")


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
    optional: dict[str, Any] = {"trust": "local_client"} if getattr(args, "clients", False) else {}
    if not accounting:  # the client-device graphs (Pub/Sub) write no accounting lines yet: the runner's counters,
        from transforms.accounting import account  # every fate from them (their dead letters hold duplicates)

        metrics = account(result)
        accounting = {"records_read": metrics.records_read, "records_used": metrics.records_used,
                      "duplicates": metrics.duplicates}
        counts.update(late=metrics.late, dead_letters=metrics.dead_letters)
    report = job_report("stream", args.mechanism.lower(), counts, accounting.get("records_read", 0),
                        accounting.get("records_used", 0), accounting.get("duplicates", 0), seconds,
                        run_warnings(release_range, counts["pairs"]), **_range_keys(release_range), **optional)
    return write_job_report(args.output, report)


def watch_report(output: str, mechanism: str, loop_counts: dict, seconds: float, release_range=None) -> dict:
    """``report.json`` of the watch loop: releases, dead letters, late ones and violations from its ``*-live.jsonl``
    files; the records read, used and duplicated, the users and the worst window from the loop's own counts
    (it writes no usage file; the counts are its checkpointed state)."""
    counts = output_counts(output, usage_violations=False)
    counts["users_in_ledger"] = loop_counts.get("users", 0)
    counts["max_window_usage_ratio"] = loop_counts.get("max_window_usage_ratio", 0.0)
    report = job_report("watch", mechanism.lower(), counts, loop_counts.get("records_read", 0),
                        loop_counts.get("records_used", 0), loop_counts.get("duplicates", 0), seconds,
                        run_warnings(release_range, loop_counts.get("pairs", ())), **_range_keys(release_range),
                        stopped=loop_counts.get("stopped"))
    return write_job_report(output, report)
