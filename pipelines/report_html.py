"""``report.html``: a job's result as one self-contained page, from released and public data only.

    python -m pipelines.report_html OUTPUT_DIR      # (re)build it from a finished (or running) job's outputs

The replay (so the main job), the streaming job and the watch loop write it
beside ``report.json``: at the end, and the last two also as slots are
released, at most every ``REFRESH_SECONDS``: the summary, the released values of the busiest
bins over time with their predicted error band, a heat map for a grid
binning, and each requirement level's window usage over time with the bound
1.0.  It is built from the files the job published (``pipelines.report_data``
says which) and never from ``OUTPUT/evaluation/`` (the true histograms).  The
page is inline SVG and CSS: no code runs (its one script block is JSON data), nothing is fetched, no
external font.  It
carries the public configuration it was built with, so the command above
rebuilds it without flags.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
import time
from html import escape

import apache_beam as beam
import numpy as np

from pipelines import cli, report_svg
from pipelines.report_data import BUSIEST_BINS, LEDGER_READ_LIMIT, PublicConfig, ReportData, StreamReleases, load
from pipelines.report_svg import format_number, time_label

_LOGGER = logging.getLogger("pipelines.report_html")
REPORT_HTML = "report.html"
REFRESH_SECONDS = 10.0
MAX_STREAMS = 4
CONFIG_ID = "public-configuration"
_CONFIG_BLOCK = re.compile(r'<script type="application/json" id="public-configuration">(.*?)</script>', re.S)
STYLE = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
td.n{text-align:right}.note{color:#555;font-size:13px;max-width:900px}.panels{display:flex;flex-wrap:wrap;gap:8px}
"""


def bin_label(data: ReportData, index: int) -> str:
    """A bin's name: its grid cell, its category or its index."""
    grid = data.grid
    if grid is not None:
        row, col = divmod(index, grid.cols)
        lon = grid.lon_min + (col + 0.5) * (grid.lon_max - grid.lon_min) / grid.cols
        lat = grid.lat_min + (row + 0.5) * (grid.lat_max - grid.lat_min) / grid.rows
        return f"cell row {row}, col {col} ({lon:.3f}°E, {lat:.3f}°N)"
    if index < len(data.bin_labels):
        return f"{data.bin_labels[index]} (bin {index})"
    return f"bin {index}"


def _cell(value) -> str:
    """A table cell: numbers right-aligned with thousands separators, true/false/null as in JSON."""
    if isinstance(value, bool) or value is None:
        return f"<td>{json.dumps(value)}</td>"
    if isinstance(value, (int, float)):
        return f'<td class="n">{escape(format_number(value))}</td>'
    return f"<td>{escape(str(value))}</td>"


def _table(rows: list[tuple], header: tuple | None = None, css: str = "") -> str:
    head = "<tr>" + "".join(f"<th>{escape(str(h))}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}">{head}{body}</table>'


def summary_section(data: ReportData) -> str:
    report = data.report
    rows: list[tuple] = []
    for key, value in report.items():  # every job's report.json as it is, in its own order
        if key == "warnings":
            continue
        if key == "release_range" and isinstance(value, dict) and "start" in value:
            value = f"{time_label(value['start'])} to {time_label(value['end'])} UTC"
        elif isinstance(value, (dict, list)):
            value = json.dumps(value, sort_keys=True)
        rows.append((key, value))
    for stream in data.streams:
        kinds = {kind: stream.kinds.count(kind) for kind in ("fresh", "skipped", "nullified")}
        rows.append((f"stream {stream.stream!r}: release records on disk", stream.slots.size))
        rows.append((f"stream {stream.stream!r}: fresh / skipped / nullified",
                     f"{kinds['fresh']} / {kinds['skipped']} / {kinds['nullified']}"))
        if stream.slots.size:
            rows.append((f"stream {stream.stream!r}: slots",
                         f"{time_label(stream.starts[0])} to {time_label(stream.starts[-1])} UTC "
                         f"({stream.statistic}, {stream.values.shape[1]} bins, {stream.mechanism}, {stream.trust})"))
    rows.append(("users in usage files", data.users))
    warnings = "".join(f"<li>{escape(str(w))}</li>" for w in report.get("warnings", []))
    missing = "" if report else '<p class="note">No report.json yet (a running job writes it when it stops).</p>'
    return (f'<section id="summary"><h2>Summary</h2>{missing}{_table(rows, ("", "value"), "summary")}'
            + (f"<p>Warnings:</p><ul>{warnings}</ul>" if warnings else "") + "</section>")


def busiest_section(data: ReportData) -> str:
    parts = ['<section id="busiest-bins"><h2>Released values of the busiest bins over time</h2>'
             f'<p class="note">For each stream, the {BUSIEST_BINS} bins with the largest mean released value '
             "(chosen from the releases alone). Line: the released value; red dots: fresh publications (the "
             "other slots repeat or approximate an earlier one); shaded band: ± the square root of the release's "
             "predicted_error (the mechanism's predicted per-bin squared error, computed without the true data)."
             "</p>"]
    if not data.streams:
        parts.append('<p class="note">No releases yet.</p>')
    for stream in data.streams[:MAX_STREAMS]:
        busiest = stream.busiest_bins()
        means = stream.mean_per_bin()
        spread = np.sqrt(stream.predicted_error)
        fresh = np.array([kind == "fresh" for kind in stream.kinds], bool)
        name = (lambda b: f"the released {stream.statistic}") if stream.values.shape[1] == 1 \
            else (lambda b: bin_label(data, b))  # a numeric stream releases one value
        parts.append(f"<h3>Stream {escape(stream.stream)}</h3>")
        parts.append(_table([(rank + 1, name(b), f"{float(means[b]):,.2f}") for rank, b in
                             enumerate(busiest)], ("rank", "bin", "mean released"), "busiest"))
        parts.append('<div class="panels">' + "".join(
            report_svg.band_panel(name(b), stream.starts, stream.values[:, b], spread, fresh)
            for b in busiest) + "</div>")
    if len(data.streams) > MAX_STREAMS:
        parts.append(f'<p class="note">{len(data.streams) - MAX_STREAMS} more stream(s) not drawn.</p>')
    return "".join(parts) + "</section>"


def heat_map_section(data: ReportData) -> str:
    grid = data.grid
    if grid is None or not data.streams:
        return ""
    stream: StreamReleases = data.streams[0]
    if stream.values.shape[1] != grid.rows * grid.cols or not stream.slots.size:
        return ""
    mean, last = stream.mean_per_bin(), stream.values[-1]
    high = float(max(np.nanmax(mean), np.nanmax(last), 1.0))
    row_labels = [f"{grid.lat_min + (r + 0.5) * (grid.lat_max - grid.lat_min) / grid.rows:.2f}°N"
                  for r in range(grid.rows)]
    col_labels = [f"{grid.lon_min + (c + 0.5) * (grid.lon_max - grid.lon_min) / grid.cols:.2f}°E"
                  for c in range(grid.cols)]
    cell = max(18, min(48, 420 // max(grid.rows, grid.cols)))
    maps = [report_svg.heat_map(f"Mean released count per cell, {stream.slots.size} slots", mean, grid.rows,
                                grid.cols, 0.0, high, row_labels, col_labels, cell),
            report_svg.heat_map(f"Last slot, {time_label(stream.starts[-1])} UTC ({stream.kinds[-1]})", last,
                                grid.rows, grid.cols, 0.0, high, row_labels, col_labels, cell)]
    return ('<section id="heat-map"><h2>Grid heat map</h2>'
            f'<p class="note">Stream {escape(stream.stream)}, north at the top; one colour scale for both maps '
            "(noise makes some released counts negative: they get the lightest colour, their value is written in "
            f'the cell).</p><div class="panels">{"".join(maps)}</div></section>')


def usage_section(data: ReportData) -> str:
    parts = ['<section id="level-usage"><h2>Window usage per requirement level</h2>']
    if not data.levels:
        parts.append('<p class="note">The public configuration names no requirement level (users declared their '
                     "own requirements, or the page was built without the job's --levels/--requirement).</p>")
        return "".join(parts) + "</section>"
    rows = [(level.name, level.requirement, level.users, round(level.largest, 6)) for level in data.levels]
    curves = [(level.name, level.usage) for level in data.levels if level.usage.size]
    if data.usage_source == "ledger" and curves and data.streams:
        stream = data.streams[0]
        slots = next(level.slots for level in data.levels if level.usage.size)  # the stream's slots, every level
        seconds = float(np.median(np.diff(stream.starts) / np.maximum(np.diff(stream.slots), 1))) \
            if stream.slots.size > 1 else 0.0
        starts = stream.starts[0] + (slots - stream.slots[0]) * seconds
        parts.append('<p class="note">At each slot, the largest fraction of its requirement any user of the level '
                     "spent in the window ending there (everything since the first slot for a lifetime budget), from "
                     "the ledger's own charges (ledger-*, written with --ledger-detail); the ledger refuses anything "
                     f"above the bound 1.0. Stream {escape(stream.stream)}.</p>")
        parts.append(report_svg.usage_chart("Window usage per level", starts, curves))
    elif data.usage_source == "ledger":
        parts.append('<p class="note">No curve: the levels\' windows follow each user\'s own declarations.</p>')
    elif data.ledger_not_read:
        parts.append(f'<p class="note">Each level\'s largest window usage from the usage files: the ledger files '
                     f"({data.ledger_not_read / 2**20:,.0f} MiB) are larger than this page reads "
                     f"({LEDGER_READ_LIMIT / 2**20:,.0f} MiB).</p>")
    else:
        parts.append('<p class="note">Each level\'s largest window usage from the usage files. The curve over time '
                     "needs every charge: run the replay with --ledger-detail"
                     + (" (no usage files here: the watch loop writes no per-user usage)" if data.usage_source == "none" else "")
                     + ".</p>")
    if data.usage_source == "none":  # nothing on disk says what anyone spent: the levels only
        parts.append(_table([row[:2] for row in rows], ("level", "requirement"), "levels"))
    else:
        parts.append(_table(rows, ("level", "requirement", "users", "largest window usage"), "levels"))
    if data.unmatched_users:
        parts.append(f'<p class="note">{data.unmatched_users} user(s) are in no level: their own declarations, '
                     "which the ledger checked against their own requirement (usage files).</p>")
    return "".join(parts) + "</section>"


def render(data: ReportData) -> str:
    """The whole page."""
    mechanism = data.report.get("mechanism") or (data.streams[0].mechanism if data.streams else "")
    title = f"wevent-beam job report: {mechanism}" if mechanism else "wevent-beam job report"
    config = json.dumps(data.config.to_json(), sort_keys=True).replace("</", "<\\/")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1>"
            f'<p class="note">Built from {escape(os.path.abspath(data.output))} by python -m pipelines.report_html: '
            "from the releases, the usage and ledger files, report.json and the public configuration only; "
            "nothing here is computed from the true data (evaluation/ is never read). Times are UTC.</p>"
            + summary_section(data) + busiest_section(data) + heat_map_section(data) + usage_section(data)
            + f'<script type="application/json" id="{CONFIG_ID}">{config}</script>'
            + "</body></html>\n")


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` into a temporary file beside ``path``, then rename it: a reader never sees half a page."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".html.part", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temporary, 0o644)  # as the job's other outputs (mkstemp makes it private to its owner)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def build(output: str, config: PublicConfig) -> str:
    """Read ``output``'s files, write ``output/report.html``; returns its path."""
    path = os.path.join(output, REPORT_HTML)
    write_atomically(path, render(load(output, config)))
    return path


def public_config(args) -> PublicConfig:
    """The public configuration from a job's parsed command line (an empty one, with a warning, if the job's own
    checks let through something the page cannot read: the page must never stop a job)."""
    try:
        return PublicConfig.from_args(args)
    except ValueError as error:
        _LOGGER.warning("warning: report.html drawn without the job's binning and levels: %s", error)
        return PublicConfig()


def write_after_job(output: str, config: PublicConfig) -> None:
    """A job's hook: build the page, and only warn if that fails (the releases are already written)."""
    if "://" in output:
        return  # a remote file system: rebuild it locally with python -m pipelines.report_html
    try:
        build(output, config)
    except Exception as error:  # noqa: BLE001  the page is a view: it must not fail the job
        _LOGGER.warning("warning: report.html not written: %s", error)


class Refresher:
    """Rebuilds the page while a job runs: after a round that released something, at most every ``min_seconds``
    (a release that came too soon is drawn by the next call after that)."""

    def __init__(self, output: str, config: PublicConfig, min_seconds: float = REFRESH_SECONDS, clock=time.monotonic):
        if not min_seconds >= 0:
            raise ValueError(f"min_seconds must be >= 0, got {min_seconds!r}")
        self.output, self.config, self.min_seconds, self.clock = output, config, min_seconds, clock
        self.last: float | None = None
        self.pending = False

    def refresh(self, released: bool = True) -> bool:
        """Note a round (``released``: it released slots); rebuild when something is pending and it is time."""
        self.pending = self.pending or bool(released)
        now = self.clock()
        if not self.pending or (self.last is not None and now - self.last < self.min_seconds):
            return False
        self.last, self.pending = now, False
        write_after_job(self.output, self.config)
        return True


class RefreshFn(beam.DoFn):
    """The streaming job's hook after each written release file: ``Refresher.refresh`` (one per worker)."""

    def __init__(self, output: str, config: PublicConfig, min_seconds: float = REFRESH_SECONDS):
        super().__init__()
        self.output, self.config, self.min_seconds = output, config, min_seconds
        self.refresher: Refresher | None = None

    def setup(self):
        self.refresher = Refresher(self.output, self.config, self.min_seconds)

    def process(self, written_path):
        self.refresher.refresh()
        return []


def config_from_page(output: str) -> PublicConfig | None:
    """The public configuration an earlier ``report.html`` in ``output`` was built with."""
    path = os.path.join(output, REPORT_HTML)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        match = _CONFIG_BLOCK.search(f.read())
    return PublicConfig.from_json(json.loads(match.group(1).replace("<\\/", "</"))) if match else None


def main(argv=None) -> int:
    parser = cli.job_parser("python -m pipelines.report_html", __doc__.split("\n\n")[0])
    parser.add_argument("output", metavar="OUTPUT_DIR", help="a job's output folder")
    parser.add_argument("--binning", help="the job's --binning (default: the one the existing report.html names)")
    parser.add_argument("--levels", help="the job's --levels")
    parser.add_argument("--level-ratios", help="the job's --level-ratios")
    parser.add_argument("--requirement", help="the job's --requirement")
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, rest = parser.parse_known_args(argv)
        if rest:
            raise cli.ConfigError(cli.unknown_flag_message(parser, rest[0]))
        if not os.path.isdir(args.output):
            raise cli.ConfigError(f"{args.output!r} is not a directory")
        flags = (args.binning, args.levels, args.level_ratios, args.requirement)
        config = PublicConfig(*flags) if any(flags) else (config_from_page(args.output) or PublicConfig())
        path = build(args.output, config)
    except cli.ConfigError as error:
        return cli.fail(str(error))
    except ValueError as error:
        return cli.fail(str(error))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
