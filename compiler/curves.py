"""Loss curves as self-contained SVG line charts: no dependency beyond the standard library.

``loss_curve_svg({"gradc c": losses, "PyTorch": torch_losses}, log_y=True)`` returns one
``<svg>`` element that a browser shows on its own (save it as ``.svg``) or inline in an HTML page:
it has no ids, no ``<style>`` and no external references, so several charts share a page without
clashing, and the same input always gives the same bytes. Point ``i`` of a series is drawn at
x = ``first_x + i`` (steps count from 1 by default). Series cycle through ten colours and three
dash patterns, so two curves that coincide (gradc against PyTorch) both stay visible. Points that
cannot be drawn (NaN, infinities, and values <= 0 on a log scale) break the line and are marked
with a cross in the series' colour on the top edge of the plot, whose tooltip names the step and
value; the legend counts them. A series longer than the plot is wide keeps each pixel column's
lowest and highest point, so spikes survive thinning.
"""

from __future__ import annotations

import html
import math
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from gradc.files import write_text_atomically

WIDTH, HEIGHT = 720, 400
TOP, BOTTOM = 40, 52          # room for the title; for the x ticks and label
LEGEND_MIN, LEGEND_MAX = 110, 300  # the legend column, sized to its longest line
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
DASHES = ("", "7 4", "2 3")
GRID = "#e5e7eb"
AXIS = "#374151"
MAX_LABEL = 30  # legend characters before an ellipsis (the tooltip keeps the whole name)


@dataclass(frozen=True)
class Scale:
    """A map from data values to pixels along one axis, with its ticks."""

    lo: float
    hi: float
    p0: float
    p1: float
    log: bool
    ticks: tuple[tuple[float, str], ...]  # (value, label); an empty label is a minor tick

    def __call__(self, v: float) -> float:
        f = self._t(v)
        a, b = self._t(self.lo), self._t(self.hi)
        return self.p0 + (f - a) / (b - a) * (self.p1 - self.p0)

    def _t(self, v: float) -> float:
        return math.log10(v) if self.log else v


def loss_curve_svg(series: Mapping[str, Sequence[float]], title: str = "Loss",
                   xlabel: str = "step", ylabel: str = "loss", log_y: bool = False,
                   first_x: int = 1, width: int = WIDTH, height: int = HEIGHT) -> str:
    """One SVG line chart of ``series`` (name -> y values), with axes, ticks and a legend."""
    data = {str(name): [_float(v) for v in values] for name, values in series.items()}
    shown = [v for vs in data.values() for v in vs if _drawable(v, log_y)]
    longest = max((len(vs) for vs in data.values()), default=0)
    ylabels = _y_scale(shown, log_y, 0.0, 1.0).ticks
    left = 18 + 14 + max((7 * len(t) for _, t in ylabels), default=14)
    right = width - _legend_width(data, log_y)
    xs = _x_scale(first_x, longest, left, right)
    ys = _y_scale(shown, log_y, height - BOTTOM, TOP)
    parts = [_header(width, height, title), _grid(xs, ys), _axes(xs, ys, xlabel, ylabel)]
    for i, (name, values) in enumerate(data.items()):
        parts.append(_series(i, name, values, xs, ys, first_x, log_y))
    parts.append(_legend(data, log_y, right + 16, TOP))
    if not shown:
        parts.append(_text((left + right) / 2, (TOP + height - BOTTOM) / 2, "no data to draw",
                           anchor="middle", fill="#6b7280", size=14))
    parts.append("</svg>\n")
    return "".join(parts)


def write_loss_curve(path: str | os.PathLike[str], series: Mapping[str, Sequence[float]],
                     **options: object) -> None:
    """Write ``loss_curve_svg(series, **options)`` to ``path`` (an .svg file), atomically."""
    write_text_atomically(path, loss_curve_svg(series, **options))  # type: ignore[arg-type]


# -- scales and ticks


def _x_scale(first_x: int, count: int, p0: float, p1: float) -> Scale:
    lo, hi = float(first_x), float(first_x + max(count, 1) - 1)
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    step = max(1.0, _nice_step((hi - lo) / 6))
    ticks = _linear_ticks(lo, hi, step)
    return Scale(lo, hi, p0, p1, False, ticks)


def _y_scale(values: list[float], log: bool, p0: float, p1: float) -> Scale:
    if log:
        return _log_scale(values, p0, p1)
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-300):
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice_step((hi - lo) / 5)
    lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    return Scale(lo, hi, p0, p1, False, _linear_ticks(lo, hi, step))


def _nice_step(raw: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``raw``."""
    e = math.floor(math.log10(raw)) if raw > 0 else 0
    for m in (1, 2, 5, 10):
        if m * 10.0 ** e >= raw * (1 - 1e-9):
            return m * 10.0 ** e
    return 10.0 ** (e + 1)


def _linear_ticks(lo: float, hi: float, step: float) -> tuple[tuple[float, str], ...]:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    big = max(abs(lo), abs(hi)) >= 1e6 or decimals > 6
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    for k in range(first, math.floor(hi / step + 1e-9) + 1):
        v = k * step
        label = f"{v:.3g}" if big else f"{v:.{decimals}f}"
        ticks.append((v, "0" if re.fullmatch(r"-?0(\.0*)?", label) else label))
    return tuple(ticks)


def _log_scale(values: list[float], p0: float, p1: float) -> Scale:
    if values:
        a, b = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    else:
        a, b = -1, 1
    if a == b:
        b += 1
    every = max(1, math.ceil((b - a) / 8))  # at most about eight labelled decades
    ticks: list[tuple[float, str]] = []
    for k in range(a, b + 1):
        ticks.append((10.0 ** k, _decade(k) if (k - a) % every == 0 else ""))
        if k < b and b - a <= 4:
            for m in range(2, 10):
                label = _fmt_plain(m * 10.0 ** k) if b - a <= 2 and m in (2, 5) else ""
                ticks.append((m * 10.0 ** k, label))
    return Scale(10.0 ** a, 10.0 ** b, p0, p1, True, tuple(ticks))


def _decade(k: int) -> str:
    return _fmt_plain(10.0 ** k) if -4 <= k <= 5 else f"1e{k}"


def _fmt_plain(v: float) -> str:
    return f"{v:.10f}".rstrip("0").rstrip(".") if v < 1 else f"{v:.0f}"


# -- drawing


def _header(width: int, height: int, title: str) -> str:
    t = _esc(title)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" font-family="{_esc(FONT)}" '
            f'font-size="12">\n<title>{t}</title>\n'
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>\n'
            + _text(width / 2, 24, title, anchor="middle", size=15, weight="600"))


def _grid(xs: Scale, ys: Scale) -> str:
    out = ['<g stroke-width="1" fill="none">\n']
    for v, label in ys.ticks:
        y = ys(v)
        color = GRID if label else "#f3f4f6"
        out.append(f'<line x1="{xs.p0:.1f}" y1="{y:.1f}" x2="{xs.p1:.1f}" y2="{y:.1f}" '
                   f'stroke="{color}"/>\n')
    for v, _ in xs.ticks:
        x = xs(v)
        out.append(f'<line x1="{x:.1f}" y1="{ys.p1:.1f}" x2="{x:.1f}" y2="{ys.p0:.1f}" '
                   f'stroke="{GRID}"/>\n')
    out.append("</g>\n")
    return "".join(out)


def _axes(xs: Scale, ys: Scale, xlabel: str, ylabel: str) -> str:
    out = [f'<rect x="{xs.p0:.1f}" y="{ys.p1:.1f}" width="{xs.p1 - xs.p0:.1f}" '
           f'height="{ys.p0 - ys.p1:.1f}" fill="none" stroke="{AXIS}" stroke-width="1"/>\n']
    for v, label in xs.ticks:
        x = xs(v)
        out.append(f'<line x1="{x:.1f}" y1="{ys.p0:.1f}" x2="{x:.1f}" y2="{ys.p0 + 5:.1f}" '
                   f'stroke="{AXIS}"/>\n')
        out.append(_text(x, ys.p0 + 18, label, anchor="middle"))
    for v, label in ys.ticks:
        y = ys(v)
        tick = 5 if label else 3
        out.append(f'<line x1="{xs.p0 - tick:.1f}" y1="{y:.1f}" x2="{xs.p0:.1f}" y2="{y:.1f}" '
                   f'stroke="{AXIS}"/>\n')
        if label:
            out.append(_text(xs.p0 - 8, y + 4, label, anchor="end"))
    out.append(_text((xs.p0 + xs.p1) / 2, ys.p0 + 40, xlabel, anchor="middle", size=13))
    cy = (ys.p0 + ys.p1) / 2
    out.append(f'<text x="16" y="{cy:.1f}" text-anchor="middle" font-size="13" fill="{AXIS}" '
               f'transform="rotate(-90 16 {cy:.1f})">{_esc(ylabel)}</text>\n')
    return "".join(out)


def _series(i: int, name: str, values: list[float], xs: Scale, ys: Scale, first_x: int,
            log: bool) -> str:
    color, dash = COLORS[i % len(COLORS)], DASHES[(i // len(COLORS) + i) % len(DASHES)]
    style = f' stroke-dasharray="{dash}"' if dash else ""
    out = [f'<g fill="none" stroke="{color}" stroke-width="2"{style} '
           f'stroke-linejoin="round" stroke-linecap="round">\n<title>{_esc(name)}</title>\n']
    limit = max(2, int(2 * (xs.p1 - xs.p0)))
    for run in _runs(values, log):
        pts = _thin(run, limit)
        if len(pts) == 1:
            x, y = xs(first_x + pts[0][0]), ys(pts[0][1])
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}" '
                       f'stroke="none"/>\n')
            continue
        coords = " ".join(f"{xs(first_x + j):.1f},{ys(v):.1f}" for j, v in pts)
        out.append(f'<polyline points="{coords}"/>\n')
    out.append("</g>\n")
    out.append(_marks(name, values, xs, ys, first_x, log, color))
    return "".join(out)


def _marks(name: str, values: list[float], xs: Scale, ys: Scale, first_x: int,
           log: bool, color: str) -> str:
    """A cross on the plot's top edge where a point could not be drawn (one per pixel)."""
    out, seen = [], set()
    for j, v in enumerate(values):
        if _drawable(v, log):
            continue
        x = xs(first_x + j)
        if round(x) in seen:
            continue
        seen.add(round(x))
        y = ys.p1 + 6
        out.append(f'<path d="M{x - 3.5:.1f},{y - 3.5:.1f}L{x + 3.5:.1f},{y + 3.5:.1f}'
                   f'M{x - 3.5:.1f},{y + 3.5:.1f}L{x + 3.5:.1f},{y - 3.5:.1f}" '
                   f'stroke="{color}" stroke-width="1.8" fill="none"><title>'
                   f'{_esc(name)}: {first_x + j}: {_esc(_fmt_value(v))} not drawn</title>'
                   f'</path>\n')
    return "".join(out)


def _legend(data: dict[str, list[float]], log: bool, x: float, y: float) -> str:
    out = [f'<g font-size="12" fill="{AXIS}">\n']
    for i, (name, values) in enumerate(data.items()):
        color, dash = COLORS[i % len(COLORS)], DASHES[(i // len(COLORS) + i) % len(DASHES)]
        style = f' stroke-dasharray="{dash}"' if dash else ""
        row = y + 8 + 34 * i
        out.append(f'<line x1="{x:.1f}" y1="{row:.1f}" x2="{x + 26:.1f}" y2="{row:.1f}" '
                   f'stroke="{color}" stroke-width="2.5"{style}/>\n')
        short = name if len(name) <= MAX_LABEL else name[:MAX_LABEL - 1] + "\u2026"
        out.append(f'<text x="{x + 34:.1f}" y="{row + 4:.1f}"><title>{_esc(name)}</title>'
                   f'{_esc(short)}</text>\n')
        note = _legend_note(values, log)
        if note:
            out.append(_text(x + 34, row + 19, note, size=10.5, fill="#6b7280"))
    out.append("</g>\n")
    return "".join(out)


def _legend_width(data: dict[str, list[float]], log: bool) -> int:
    """Room for the legend: about 7.4 px per character of a name, 6.4 of a note."""
    need = max((max(7.4 * min(len(name), MAX_LABEL), 6.4 * len(_legend_note(values, log)))
                for name, values in data.items()), default=0.0)
    return int(min(LEGEND_MAX, max(LEGEND_MIN, need + 34 + 16 + 12)))


def _legend_note(values: list[float], log: bool) -> str:
    if not values:
        return "(no data)"
    bad = sum(not _drawable(v, log) for v in values)
    last = next((v for v in reversed(values) if _drawable(v, log)), None)
    note = f"last {_fmt_value(last)}" if last is not None else ""
    if bad:
        what = "NaN/inf/\u22640" if log else "NaN/inf"
        note += f"{', ' if note else ''}{bad} {what} \u00d7"
    return note


def _text(x: float, y: float, s: str, anchor: str = "start", size: float = 12,
          weight: str = "", fill: str = AXIS) -> str:
    w = f' font-weight="{weight}"' if weight else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size:g}" '
            f'fill="{fill}"{w}>{_esc(s)}</text>\n')


# -- data


def _runs(values: list[float], log: bool) -> list[list[tuple[int, float]]]:
    """The stretches of drawable points, as (index, value) lists."""
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for j, v in enumerate(values):
        if _drawable(v, log):
            current.append((j, v))
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _thin(points: list[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    """At most about ``limit`` points: each bucket's lowest and highest, in order."""
    if len(points) <= limit:
        return points
    size = math.ceil(len(points) / (limit // 2))
    out: list[tuple[int, float]] = []
    for b in range(0, len(points), size):
        bucket = points[b:b + size]
        lo, hi = min(bucket, key=lambda p: p[1]), max(bucket, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    return out


def _drawable(v: float, log: bool) -> bool:
    return math.isfinite(v) and (v > 0 or not log)


def _float(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _fmt_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.4g}"


_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _esc(s: str) -> str:
    """Text for XML: escaped, and without the characters XML 1.0 cannot hold."""
    return html.escape(_INVALID_XML.sub("\ufffd", str(s)), quote=True)
