"""What ``report.html`` shows, read from a job's private outputs and its public configuration only.

The page (``pipelines.report_html``) must never show anything computed from the
true data.  Everything here is read from the files a job publishes or keeps
beside its releases (``releases-*``, ``usage-*``, ``ledger-*`` with
``--ledger-detail``, ``report.json``) and from the public configuration (the
binning, the requirement levels and their ratios); ``OUTPUT/evaluation/``,
which is computed from the true histograms, is never opened.

Per-level window usage over time.  No output holds it directly: ``usage-*``
has each user's largest window usage only, and a release's ``epsilon`` is one
publication budget while every level is charged its own.  With
``--ledger-detail`` the ledger writes every charge it checked, so the curve
of a level is computed from those charges: each user is put in the level the
operator's public rule assigns them (``RequirementPolicy.assigned``, a hash
of the id), and kept there only when the largest window usage recomputed
with that level's ``(w, E)`` equals the one the ledger wrote into
``usage-*`` (a user who declared their own requirement does not match and is
counted apart).  A level's curve at slot ``t`` is the largest window usage of
its users over the ``w`` slots ending at ``t`` (everything since the first
slot for a lifetime budget).  Without the charges, the page shows each
level's largest usage from ``usage-*``.
"""

from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from pipelines.cli import ConfigError, parse_levels, parse_requirement
from transforms.binning import CategoryBins, GridBins, binner_from_spec
from transforms.declarations import RequirementPolicy
from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_units
from transforms.mechanisms.requirements import FixedRequirement, LifetimeRequirement
from transforms.sinks import read_records

EVALUATION_DIR = "evaluation"  # never read here: computed from the true histograms
BUSIEST_BINS = 6
LEDGER_READ_LIMIT = 256 * 2**20
"""Ledger files larger than this together are not read (about 1.4 million charges as JSON lines): the page then
shows each level's largest usage from usage-*, and says why."""
USAGE_TOLERANCE = 1e-9
"""How close a recomputed largest window usage must be to the ledger's (both are ratios of the same integers)."""


@dataclass(frozen=True)
class PublicConfig:
    """The public part of a job's configuration the page needs (each a command-line spec, or None)."""

    binning: str | None = None
    levels: str | None = None
    level_ratios: str | None = None
    requirement: str | None = None

    def __post_init__(self):
        for name in ("binning", "levels", "level_ratios", "requirement"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a command-line spec string or None, got {value!r}")
        if self.binning is not None:
            binner_from_spec(self.binning)  # raises ValueError naming the problem
        self.policy()

    @classmethod
    def from_args(cls, args) -> PublicConfig:
        """From a job's parsed command line (flags it does not have are None)."""
        return cls(*(getattr(args, name, None) for name in ("binning", "levels", "level_ratios", "requirement")))

    @classmethod
    def from_json(cls, payload: dict) -> PublicConfig:
        return cls(**{name: payload.get(name) for name in ("binning", "levels", "level_ratios", "requirement")})

    def to_json(self) -> dict:
        return {"binning": self.binning, "levels": self.levels, "level_ratios": self.level_ratios,
                "requirement": self.requirement}

    def binner(self):
        return binner_from_spec(self.binning) if self.binning else None

    def policy(self) -> RequirementPolicy:
        """The requirement levels, their shares and the default, as the job read them."""
        try:
            levels, shares = parse_levels(self.levels or "", self.level_ratios)
            default = parse_requirement(self.requirement) if self.requirement else None
            return RequirementPolicy(levels, default, level_shares=tuple(shares))
        except ConfigError as error:
            raise ValueError(str(error)) from None


@dataclass(frozen=True)
class StreamReleases:
    """One stream's releases in slot order: the estimate of every bin, the predicted error, the kind."""

    stream: str
    slots: np.ndarray           # absolute slot indices
    starts: np.ndarray          # slot start, epoch seconds
    values: np.ndarray          # slots x bins: the released estimate
    predicted_error: np.ndarray  # per slot, squared units (nan where none was released)
    kinds: tuple
    epsilons: tuple
    statistic: str
    mechanism: str
    trust: str

    def __post_init__(self):
        n = self.slots.size
        if self.values.shape[0] != n or self.starts.size != n or self.predicted_error.size != n or len(self.kinds) != n:
            raise ValueError("a stream's release columns must have one row per slot")

    def mean_per_bin(self) -> np.ndarray:
        return self.values.mean(axis=0) if self.slots.size else np.zeros(self.values.shape[1])

    def busiest_bins(self, count: int = BUSIEST_BINS) -> list[int]:
        """The bins with the largest mean released value (ties: the lower bin first): released values only."""
        means = self.mean_per_bin()
        order = np.lexsort((np.arange(means.size), -means))
        return [int(b) for b in order[:count]]


@dataclass(frozen=True)
class LevelUsage:
    """A requirement level's window usage: over time (from the ledger's charges) or its largest (from usage-*)."""

    name: str
    requirement: str
    users: int
    largest: float
    slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    usage: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class ReportData:
    """Everything the page shows."""

    output: str
    config: PublicConfig
    report: dict
    streams: tuple
    levels: tuple
    usage_source: str     # "ledger", "usage" or "none": where the level usage came from
    unmatched_users: int  # users whose usage the public levels do not explain (their own declarations)
    users: int
    release_files: int
    grid: GridBins | None
    bin_labels: tuple
    ledger_not_read: int = 0  # bytes of ledger files above LEDGER_READ_LIMIT, left unread


def _output_files(output: str, prefix: str) -> list[str]:
    """``prefix-*`` files of the output folder (not temporary ``.part`` files), in name order."""
    return sorted(p for p in glob.glob(os.path.join(glob.escape(output), f"{prefix}-*"))
                  if os.path.isfile(p) and p.endswith((".jsonl", ".avro", ".parquet")))


def _read_file(path: str) -> list[dict]:
    """One output file's records; a JSON-lines file still being appended to loses its unfinished last line."""
    if path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        complete = text if text.endswith("\n") else text[:text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]
    return read_records(glob.escape(path), "avro" if path.endswith(".avro") else "parquet")


def read_outputs(output: str, prefix: str) -> list[dict]:
    return [record for path in _output_files(output, prefix) for record in _read_file(path)]


def streams_of(releases: list[dict]) -> tuple:
    """Release records -> one :class:`StreamReleases` per stream (a slot written twice counts once: the last)."""
    by_stream: dict = {}
    for record in releases:
        by_stream.setdefault(record["stream"], {})[int(record["slot"])] = record
    streams = []
    for stream in sorted(by_stream):
        records = [by_stream[stream][slot] for slot in sorted(by_stream[stream])]
        width = max(len(_estimate(r)) for r in records)
        values = np.array([_estimate(r) + [math.nan] * (width - len(_estimate(r))) for r in records], float)
        errors = np.array([math.nan if r.get("predicted_error") is None else float(r["predicted_error"])
                           for r in records])
        streams.append(StreamReleases(
            stream, np.array([int(r["slot"]) for r in records], np.int64),
            np.array([float(r["slot_start"]) for r in records]), values, errors,
            tuple(r["kind"] for r in records), tuple(str(r["epsilon"]) for r in records),
            records[-1].get("statistic", "counts"), records[-1]["mechanism"], records[-1].get("trust", "central")))
    return tuple(streams)


def _estimate(record: dict) -> list[float]:
    """The released estimate (``histogram`` in outputs written before ``estimate`` existed)."""
    return [float(v) for v in (record.get("estimate") or record.get("histogram") or [])]


def _units(decimal_text: str) -> int:
    """An exact decimal charge (12 places at most) as integer budget units; "0" included."""
    return int(Decimal(decimal_text) * UNITS_PER_EPSILON)


def _requirement_text(requirement) -> str:
    if isinstance(requirement, FixedRequirement):
        return f"w = {requirement.window}, E = {requirement.epsilon:g}"
    if isinstance(requirement, LifetimeRequirement):
        return f"lifetime E = {requirement.epsilon:g}"
    return f"dynamic w_B = {requirement.backward_window}, E_B = {requirement.backward_epsilon:g}, " \
           f"w_F = {requirement.forward_window}, E_F = {requirement.forward_epsilon:g}"


DEFAULT_LEVEL = "all users"
"""The name a requirement given to every user who declares none (``--requirement``) is shown under."""


def public_levels(policy: RequirementPolicy) -> dict:
    """Level name -> requirement: the named levels, and the default requirement under ``DEFAULT_LEVEL``."""
    levels = dict(policy.levels)
    if policy.default is not None:
        levels[DEFAULT_LEVEL] = policy.default
    return levels


def _level_of(policy: RequirementPolicy, user: str) -> str | None:
    """The level the operator's public rule gives a user who declares nothing (None: no rule)."""
    if policy.level_shares:
        assigned = policy.assigned(user)
        return None if assigned is None else assigned[1]
    return DEFAULT_LEVEL if policy.default is not None else None


def _window_usage(slots: np.ndarray, charges: np.ndarray, requirement, grid: np.ndarray) -> np.ndarray:
    """The usage of the window ending at every slot of ``grid`` for a user charged ``charges`` at ``slots``
    (a fixed or a lifetime requirement: a dynamic one's windows follow each user's own declarations)."""
    totals = np.concatenate([[0], np.cumsum(charges)])
    upto = totals[np.searchsorted(slots, grid, "right")]
    if isinstance(requirement, LifetimeRequirement):
        return upto / to_units(requirement.epsilon)
    before = totals[np.searchsorted(slots, grid - requirement.window + 1, "left")]
    return (upto - before) / to_units(requirement.epsilon)


def ledger_charges(paths: list[str]) -> dict:
    """``(stream, user) -> [(slot, charge units), ...]`` from ledger files, read record by record (the ledger is
    the largest output: one line per user and slot)."""
    charged: dict = {}

    def add(entry: dict) -> None:
        charged.setdefault((entry["stream"], entry["user"]), []).append((int(entry["slot"]), _units(entry["charge"])))

    for path in paths:
        if path.endswith(".jsonl"):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.endswith("\n") and line.strip():  # an unfinished last line is not read yet
                        add(json.loads(line))
        else:
            for entry in _read_file(path):
                add(entry)
    return charged


def level_usage(policy: RequirementPolicy, usage: list[dict], charged: dict | None, stream: str | None):
    """``(levels, unmatched users, source)``: each public level's usage (over time for ``stream`` when the
    ledger's ``charged`` are there, its largest over every stream), how many users the public levels do not explain,
    and where the usage came from (``ledger``, ``usage`` or ``none``)."""
    levels = public_levels(policy)
    largest_of: dict = {}  # a streaming job writes a user's usage again at every firing: the largest counts
    for u in usage:
        key = (u["stream"], u["user"])
        largest_of[key] = max(largest_of.get(key, 0.0), float(u["max_window_usage_ratio"]))
    members: dict = {name: [] for name in levels}
    for key in sorted(largest_of):
        name = _level_of(policy, key[1])
        if name in members:
            members[name].append(key)
    if not charged:  # the ledger's largest usage per user, grouped by the public rule (not checkable here)
        assigned = sum(len(keys) for keys in members.values())
        return (tuple(LevelUsage(name, _requirement_text(levels[name]), len(keys),
                                 max((largest_of[k] for k in keys), default=0.0)) for name, keys in members.items()),
                len(largest_of) - assigned, "usage" if usage else "none")
    stream_slots = np.array(sorted({slot for (s, _), rows in charged.items() if s == stream for slot, _ in rows}),
                            np.int64)
    results, explained = [], 0
    for name, requirement in levels.items():
        users, largest, curve = _level_curve(requirement, members[name], charged, largest_of, stream, stream_slots)
        explained += users
        results.append(LevelUsage(name, _requirement_text(requirement), users, largest,
                                  stream_slots if curve is not None else np.zeros(0, np.int64),
                                  curve if curve is not None else np.zeros(0)))
    return tuple(results), len(largest_of) - explained, "ledger"


def _level_curve(requirement, keys: list, charged: dict, largest_of: dict, stream: str | None,
                 stream_slots: np.ndarray) -> tuple[int, float, np.ndarray | None]:
    """One level: its users the ledger agrees with, their largest usage, the largest usage at every slot of
    ``stream`` (None for a dynamic requirement, whose windows follow each user's declarations)."""
    fixed_windows = isinstance(requirement, (FixedRequirement, LifetimeRequirement))
    curve = np.zeros(stream_slots.size) if fixed_windows else None
    users, largest = 0, 0.0
    computed: dict = {}  # users charged alike (one cohort) are computed once
    for key in keys:
        if not fixed_windows:
            users, largest = users + 1, max(largest, largest_of[key])
            continue
        rows = sorted(charged.get(key, []))
        slots = np.array([s for s, _ in rows], np.int64)
        charges = np.array([c for _, c in rows], np.int64)
        signature = (key[0], slots.tobytes(), charges.tobytes())
        if signature not in computed:
            own = _window_usage(slots, charges, requirement, slots)
            on_stream = _window_usage(slots, charges, requirement, stream_slots) if key[0] == stream else None
            computed[signature] = (float(own.max(initial=0.0)), on_stream)
        mine, on_stream = computed[signature]
        if abs(mine - largest_of[key]) > USAGE_TOLERANCE:
            continue  # the ledger checked another requirement: the user declared their own
        users, largest = users + 1, max(largest, mine)
        if on_stream is not None and curve is not None:
            curve = np.maximum(curve, on_stream)
    return users, largest, curve


def load(output: str, config: PublicConfig) -> ReportData:
    """Read a job's outputs (never ``evaluation/``) into what the page shows."""
    if not os.path.isdir(output):
        raise ValueError(f"{output!r} is not a directory")
    report_path = os.path.join(output, "report.json")
    report = {}
    if os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
    release_files = _output_files(output, "releases")
    streams = streams_of([r for path in release_files for r in _read_file(path)])
    usage = read_outputs(output, "usage")
    ledger_paths = _output_files(output, "ledger")
    ledger_bytes = sum(os.path.getsize(p) for p in ledger_paths)
    charged = ledger_charges(ledger_paths) if ledger_bytes <= LEDGER_READ_LIMIT else None
    first = streams[0].stream if streams else None
    levels, unmatched, source = level_usage(config.policy(), usage, charged, first)
    binner = config.binner()
    labels: tuple = ()
    if isinstance(binner, CategoryBins):
        labels = tuple(binner.categories)
    users = len({(u["stream"], u["user"]) for u in usage})
    return ReportData(output, config, report, streams, levels, source, unmatched, users, len(release_files),
                      binner if isinstance(binner, GridBins) else None, labels,
                      ledger_bytes if charged is None else 0)
