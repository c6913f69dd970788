"""Inline SVG for ``report.html``: line panels with a band, a heat map, a multi-line usage chart.

Pure string building (no plotting library, no script, no external font), so
the page is one self-contained file any browser shows offline.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from html import escape

import numpy as np

FONT = "font-family:sans-serif;font-size:11px"
LINE_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
HEAT_STOPS = ((0.0, (247, 251, 255)), (0.35, (158, 202, 225)), (0.7, (49, 130, 189)), (1.0, (8, 48, 107)))


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About ``count`` round numbers covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else [0.0]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step + 1e-9) + 1)]


def format_number(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    if value == int(value) and abs(value) < 1e9:
        return f"{int(value):,}"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def time_label(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%m-%d %H:%M")


class Frame:
    """A plot area inside an SVG of ``width`` x ``height``: maps data to pixels."""

    def __init__(self, width: int, height: int, x_range: tuple, y_range: tuple, left: int = 46, bottom: int = 22,
                 top: int = 20, right: int = 10):
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = left, width - right, top, height - bottom
        self.x0, self.x1 = x_range if x_range[1] > x_range[0] else (x_range[0] - 0.5, x_range[0] + 0.5)
        self.y0, self.y1 = y_range if y_range[1] > y_range[0] else (y_range[0] - 1, y_range[0] + 1)

    def x(self, value) -> np.ndarray:
        return self.left + (np.asarray(value, float) - self.x0) / (self.x1 - self.x0) * (self.right - self.left)

    def y(self, value) -> np.ndarray:
        return self.bottom - (np.asarray(value, float) - self.y0) / (self.y1 - self.y0) * (self.bottom - self.top)

    def axes(self, x_ticks: list, x_labels: list, y_ticks: list, y_format=format_number) -> str:
        parts = [f'<rect x="{self.left}" y="{self.top}" width="{self.right - self.left}" '
                 f'height="{self.bottom - self.top}" fill="#fff" stroke="#bbb"/>']
        for tick in y_ticks:
            y = float(self.y(tick))
            parts.append(f'<line x1="{self.left}" x2="{self.right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                         f'<text x="{self.left - 4}" y="{y + 3.5:.1f}" text-anchor="end">{escape(y_format(tick))}'
                         f'</text>')
        for i, (tick, label) in enumerate(zip(x_ticks, x_labels)):
            x = float(self.x(tick))
            anchor = "start" if i == 0 else "end" if i == len(x_ticks) - 1 else "middle"  # inside the frame
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.bottom}" y2="{self.bottom + 3}" stroke="#888"/>'
                         f'<text x="{x:.1f}" y="{self.bottom + 14}" text-anchor="{anchor}">{escape(label)}</text>')
        return "".join(parts)


def _points(xs, ys) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y))


def _time_ticks(starts: np.ndarray, count: int = 3) -> tuple[list, list]:
    if starts.size == 0:
        return [], []
    ticks = list(np.linspace(starts[0], starts[-1], count)) if starts[-1] > starts[0] else [starts[0]]
    return ticks, [time_label(t) for t in ticks]


def svg(width: int, height: int, body: str, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}" style="{FONT}">'
            f'<title>{escape(label)}</title>{body}</svg>')


def band_panel(title: str, starts: np.ndarray, values: np.ndarray, spread: np.ndarray, fresh: np.ndarray,
               width: int = 300, height: int = 170) -> str:
    """One bin over time: the released value, a band of ± ``spread`` around it, fresh publications as dots."""
    lower, upper = values - spread, values + spread
    finite = np.concatenate([values[np.isfinite(values)], lower[np.isfinite(lower)], upper[np.isfinite(upper)]])
    y_range = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    ticks = nice_ticks(*y_range)
    y_range = (min(y_range[0], ticks[0]), max(y_range[1], ticks[-1]))
    frame = Frame(width, height, (float(starts[0]), float(starts[-1])) if starts.size else (0.0, 1.0), y_range)
    x_ticks, x_labels = _time_ticks(starts)
    xs, ys = frame.x(starts), frame.y(values)
    has_band = np.isfinite(spread)
    body = [frame.axes(x_ticks, x_labels, ticks)]
    if has_band.any():
        upper_points = _points(xs[has_band], frame.y(upper[has_band]))
        lower_points = _points(xs[has_band][::-1], frame.y(lower[has_band])[::-1])
        body.append(f'<polygon class="band" points="{upper_points} {lower_points}" fill="#1f77b4" '
                    f'fill-opacity="0.18" stroke="none"/>')
    if 0 > y_range[0] and 0 < y_range[1]:
        body.append(f'<line x1="{frame.left}" x2="{frame.right}" y1="{float(frame.y(0)):.1f}" '
                    f'y2="{float(frame.y(0)):.1f}" stroke="#999" stroke-dasharray="2,2"/>')
    body.append(f'<polyline class="released" points="{_points(xs, ys)}" fill="none" stroke="#1f77b4" '
                f'stroke-width="1.4"/>')
    body.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="#d62728"/>'
                for x, y in zip(xs[fresh], ys[fresh]) if math.isfinite(y))
    body.append(f'<text x="{frame.left}" y="13" font-weight="bold">{escape(title)}</text>')
    return svg(width, height, "".join(body), title)


def heat_colour(fraction: float) -> str:
    """A light-to-dark blue for ``fraction`` in [0, 1] (clipped)."""
    fraction = min(1.0, max(0.0, fraction)) if math.isfinite(fraction) else 0.0
    for (f0, c0), (f1, c1) in zip(HEAT_STOPS, HEAT_STOPS[1:]):
        if fraction <= f1:
            t = (fraction - f0) / (f1 - f0)
            return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(c0, c1))
    return "#08306b"


def heat_map(title: str, cells: np.ndarray, rows: int, cols: int, low: float, high: float,
             row_labels: list, col_labels: list, cell: int = 44) -> str:
    """``cells`` (bin ``row * cols + col``) as a grid with row 0 at the bottom (the south side), each cell's value
    written in it; the colour runs from ``low`` to ``high`` (values below ``low`` get its colour)."""
    left, top = 64, 22
    width, height = left + cols * cell + 70, top + rows * cell + 34
    span = high - low if high > low else 1.0
    body = [f'<text x="{left}" y="14" font-weight="bold">{escape(title)}</text>']
    for row in range(rows):
        y = top + (rows - 1 - row) * cell
        body.append(f'<text x="{left - 4}" y="{y + cell / 2 + 4:.1f}" text-anchor="end">{escape(row_labels[row])}'
                    f'</text>')
        for col in range(cols):
            value = float(cells[row * cols + col])
            fraction = (value - low) / span
            x = left + col * cell
            ink = "#fff" if fraction > 0.55 else "#000"
            body.append(f'<rect class="cell" x="{x}" y="{y}" width="{cell}" height="{cell}" '
                        f'fill="{heat_colour(fraction)}" stroke="#fff"><title>bin {row * cols + col}: '
                        f'{value:,.2f}</title></rect>'
                        f'<text x="{x + cell / 2:.1f}" y="{y + cell / 2 + 4:.1f}" text-anchor="middle" '
                        f'fill="{ink}">{escape(format_number(round(value, 1)))}</text>')
    for col in range(cols):
        body.append(f'<text x="{left + col * cell + cell / 2:.1f}" y="{top + rows * cell + 14}" '
                    f'text-anchor="middle">{escape(col_labels[col])}</text>')
    legend_x = left + cols * cell + 14
    steps = 20
    for i in range(steps):
        legend_y = top + rows * cell - (i + 1) * rows * cell / steps
        body.append(f'<rect x="{legend_x}" y="{legend_y:.1f}" width="12" height="{rows * cell / steps + 0.5:.1f}" '
                    f'fill="{heat_colour((i + 0.5) / steps)}"/>')
    body.append(f'<text x="{legend_x + 16}" y="{top + 8}">{escape(format_number(round(high, 1)))}</text>'
                f'<text x="{legend_x + 16}" y="{top + rows * cell}">{escape(format_number(round(low, 1)))}</text>')
    return svg(width, height, "".join(body), title)


def usage_chart(title: str, starts: np.ndarray, series: list[tuple[str, np.ndarray]], width: int = 640,
                height: int = 240) -> str:
    """Each level's window usage over time, with the bound 1.0 drawn."""
    top_value = max([1.0] + [float(np.nanmax(values)) for _, values in series if values.size])
    ticks = nice_ticks(0.0, top_value * 1.05)
    frame = Frame(width, height, (float(starts[0]), float(starts[-1])) if starts.size else (0.0, 1.0),
                  (0.0, max(ticks[-1], top_value * 1.05)), top=24, right=130)
    x_ticks, x_labels = _time_ticks(starts, 4)
    body = [frame.axes(x_ticks, x_labels, ticks, lambda v: f"{v:g}")]
    bound = float(frame.y(1.0))
    body.append(f'<line class="bound" x1="{frame.left}" x2="{frame.right}" y1="{bound:.1f}" y2="{bound:.1f}" '
                f'stroke="#000" stroke-width="1.2" stroke-dasharray="6,3"/>'
                f'<text x="{frame.right - 4}" y="{bound - 4:.1f}" text-anchor="end">bound 1.0</text>')
    for i, (name, values) in enumerate(series):
        colour = LINE_COLOURS[i % len(LINE_COLOURS)]
        body.append(f'<polyline class="usage" points="{_points(frame.x(starts), frame.y(values))}" fill="none" '
                    f'stroke="{colour}" stroke-width="1.5"><title>{escape(name)}</title></polyline>')
        legend_y = frame.top + 18 + 16 * i
        body.append(f'<line x1="{frame.right + 4}" x2="{frame.right + 22}" y1="{legend_y - 4}" y2="{legend_y - 4}" '
                    f'stroke="{colour}" stroke-width="2"/><text x="{frame.right + 26}" y="{legend_y}">'
                    f'{escape(name)}</text>')
    body.append(f'<text x="{frame.left}" y="14" font-weight="bold">{escape(title)}</text>')
    return svg(width, height, "".join(body), title)
