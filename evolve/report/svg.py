"""A few inline-SVG charts (scatter, lines, heatmap) written as plain strings.

Why not a plotting library: the report must open with the network off and stay small, and
the charts need per-point links (click a point, open its program page) and hover titles;
SVG ``<a>`` and ``<title>`` give both with no JavaScript and no vendored code (so there is
no licence to track). Charts are pure functions of their data: same data, same bytes.

Coordinates: a chart has a plot area inside margins; :class:`Scale` maps data to pixels
(linear or log10) and chooses "nice" ticks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

MARGIN = (14, 16, 44, 62)  # top, right, bottom, left (px)
LEGEND_PX = 18  # extra top margin for a one-line legend above the plot area


def _fmt(v: float) -> str:
    """A tick label: short, no trailing zeros."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:.3g}"


@dataclass
class Scale:
    """Data interval [lo, hi] -> pixel interval [p0, p1] (linear or log10)."""

    lo: float
    hi: float
    p0: float
    p1: float
    log: bool = False

    @classmethod
    def fit(cls, values: Sequence[float], p0: float, p1: float, log: bool = False,
            pad: float = 0.04) -> Scale:
        """A scale covering ``values`` (non-finite and, for log, non-positive ignored)."""
        vals = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
        if not vals:
            vals = [1.0, 10.0] if log else [0.0, 1.0]
        lo, hi = min(vals), max(vals)
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5, hi + 0.5
        span = hi - lo
        lo, hi = lo - pad * span, hi + pad * span
        if log:
            return cls(10 ** lo, 10 ** hi, p0, p1, True)
        return cls(lo, hi, p0, p1, False)

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(max(v, 1e-300))
            lo, hi = math.log10(self.lo), math.log10(self.hi)
        else:
            lo, hi = self.lo, self.hi
        return self.p0 + (v - lo) / (hi - lo) * (self.p1 - self.p0)

    def ticks(self, n: int = 5) -> list[float]:
        """About ``n`` round values inside the interval."""
        if self.log:
            a, b = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            step = max(1, math.ceil((b - a) / n))
            for mults in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
                out = [m * 10.0 ** e for e in range(a, b + 1, step) for m in mults]
                out = [t for t in out if self.lo <= t <= self.hi]
                if len(out) >= 3:  # under a decade or two: 1-2-5 (or finer) ticks
                    return out
            return out or [self.lo, self.hi]
        raw = (self.hi - self.lo) / max(n, 1)
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
        t = math.ceil(self.lo / step) * step
        out = []
        while t <= self.hi + 1e-9 * step:
            out.append(round(t, 12))
            t += step
        return out


@dataclass
class Point:
    """One marker: position, CSS class, optional link and hover text, data-id."""

    x: float
    y: float
    cls: str = "pt"
    href: str | None = None
    title: str = ""
    pid: str = ""
    r: float = 3.0


@dataclass
class Series:
    """A polyline with a legend label (NaN/inf values break the line)."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    cls: str = "s0"
    step: bool = False


@dataclass
class Chart:
    """One chart: axes, labels, and what is drawn on them."""

    width: int = 560
    height: int = 340
    xlabel: str = ""
    ylabel: str = ""
    xlog: bool = False
    ylog: bool = False
    css_id: str = ""
    points: list[Point] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    diagonal: bool = False  # a dashed y = x line (predicted vs measured)

    def scales(self) -> tuple[Scale, Scale]:
        t, r, b, left = MARGIN
        t += LEGEND_PX if self.series else 0
        xs = [p.x for p in self.points] + [x for s in self.series for x in s.xs]
        ys = [p.y for p in self.points] + [y for s in self.series for y in s.ys]
        if self.diagonal:
            xs = ys = xs + ys
        return (Scale.fit(xs, left, self.width - r, self.xlog),
                Scale.fit(ys, self.height - b, t, self.ylog))

    def render(self) -> str:
        sx, sy = self.scales()
        out = [f'<svg class="chart" viewBox="0 0 {self.width} {self.height}" '
               f'width="{self.width}" height="{self.height}" role="img"'
               + (f' id="{escape(self.css_id)}"' if self.css_id else "") + ">"]
        out.append(_axes(sx, sy, self.width, self.height, self.xlabel, self.ylabel,
                         LEGEND_PX if self.series else 0))
        if self.diagonal:
            lo, hi = max(sx.lo, sy.lo), min(sx.hi, sy.hi)
            if lo < hi:
                out.append(f'<line class="diag" x1="{sx(lo):.1f}" y1="{sy(lo):.1f}" '
                           f'x2="{sx(hi):.1f}" y2="{sy(hi):.1f}"/>')
        for s in self.series:
            out.append(_polyline(s, sx, sy))
        # frontier and pick markers are drawn last so they sit on top
        for p in sorted(self.points, key=lambda p: ("pick" in p.cls, "front" in p.cls)):
            out.append(_marker(p, sx, sy))
        if self.series:
            out.append(_legend(self.series, self.width))
        out.append("</svg>")
        return "".join(out)


def _axes(sx: Scale, sy: Scale, w: int, h: int, xlabel: str, ylabel: str,
          extra_top: int = 0) -> str:
    t, r, b, left = MARGIN
    t += extra_top
    parts = [f'<rect class="frame" x="{left}" y="{t}" width="{w - left - r}" '
             f'height="{h - t - b}"/>']
    for v in sx.ticks():
        x = sx(v)
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{t}" x2="{x:.1f}" y2="{h - b}"/>'
                     f'<text class="tick" x="{x:.1f}" y="{h - b + 14}" '
                     f'text-anchor="middle">{_fmt(v)}</text>')
    for v in sy.ticks():
        y = sy(v)
        parts.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{w - r}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{left - 5}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{_fmt(v)}</text>')
    parts.append(f'<text class="label" x="{(left + w - r) / 2:.0f}" y="{h - 8}" '
                 f'text-anchor="middle">{escape(xlabel)}</text>')
    parts.append(f'<text class="label" transform="translate(14 {(t + h - b) / 2:.0f}) '
                 f'rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>')
    return "".join(parts)


def _marker(p: Point, sx: Scale, sy: Scale) -> str:
    if not (math.isfinite(p.x) and math.isfinite(p.y)):
        return ""
    if (sx.log and p.x <= 0) or (sy.log and p.y <= 0):
        return ""
    data = f' data-id="{escape(p.pid)}"' if p.pid else ""
    title = f"<title>{escape(p.title)}</title>" if p.title else ""
    dot = (f'<circle class="{escape(p.cls)}" cx="{sx(p.x):.1f}" cy="{sy(p.y):.1f}" '
           f'r="{p.r:g}"{data}>{title}</circle>')
    if p.href:
        return f'<a href="{escape(p.href)}">{dot}</a>'
    return dot


def _polyline(s: Series, sx: Scale, sy: Scale) -> str:
    """The series as one path; a non-finite value starts a new segment."""
    d: list[str] = []
    pen_up = True
    last_y: float | None = None
    for x, y in zip(s.xs, s.ys, strict=True):
        ok = math.isfinite(x) and math.isfinite(y) and (y > 0 or not sy.log)
        if not ok:
            pen_up, last_y = True, None
            continue
        px, py = sx(x), sy(y)
        if pen_up:
            d.append(f"M{px:.1f},{py:.1f}")
        else:
            if s.step and last_y is not None:
                d.append(f"H{px:.1f}")
            d.append(f"L{px:.1f},{py:.1f}")
        pen_up, last_y = False, py
    return f'<path class="line {escape(s.cls)}" d="{"".join(d)}"/>' if d else ""


def _legend(series: Sequence[Series], w: int) -> str:
    """One line of legend entries above the plot area."""
    t, _r, _b, left = MARGIN
    parts, x = [], left
    for s in series:
        parts.append(f'<line class="line {escape(s.cls)}" x1="{x}" y1="{t - 2}" x2="{x + 18}" '
                     f'y2="{t - 2}"/><text class="legend" x="{x + 22}" y="{t + 2}">'
                     f"{escape(s.label)}</text>")
        x += 30 + 6 * len(s.label)
    return "".join(parts)


@dataclass
class HeatCell:
    """One heatmap cell: its row and column, a value (None: empty) and hover text."""

    row: int
    col: int
    value: float | None
    title: str = ""
    href: str | None = None


def heatmap(cells: Sequence[HeatCell], rows: Sequence[str], cols: Sequence[str],
            xlabel: str, ylabel: str, log: bool = True, cw: int = 40, ch: int = 22) -> str:
    """A grid of coloured cells (blue = low value, yellow = high; grey = empty)."""
    t, r, b, left = MARGIN
    w = left + r + cw * len(cols)
    h = t + b + ch * len(rows)
    vals = [c.value for c in cells if c.value is not None and math.isfinite(c.value)
            and (c.value > 0 or not log)]
    if log:
        vals = [math.log10(v) for v in vals]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    out = [f'<svg class="chart heat" viewBox="0 0 {w} {h}" width="{w}" height="{h}">']
    for i in range(len(rows)):
        for j in range(len(cols)):
            out.append(f'<rect class="empty" x="{left + j * cw}" y="{t + i * ch}" '
                       f'width="{cw - 1}" height="{ch - 1}"/>')
    for c in cells:
        v = c.value
        if v is None or not math.isfinite(v) or (log and v <= 0):
            frac = 1.0
        else:
            v = math.log10(v) if log else v
            frac = 0.0 if hi - lo < 1e-12 else (v - lo) / (hi - lo)
        rect = (f'<rect class="cell" x="{left + c.col * cw}" y="{t + c.row * ch}" '
                f'width="{cw - 1}" height="{ch - 1}" fill="{_viridis(frac)}">'
                f"<title>{escape(c.title)}</title></rect>")
        out.append(f'<a href="{escape(c.href)}">{rect}</a>' if c.href else rect)
    for j, name in enumerate(cols):
        out.append(f'<text class="tick" x="{left + j * cw + cw / 2:.0f}" '
                   f'y="{h - b + 14}" text-anchor="middle">{escape(name)}</text>')
    for i, name in enumerate(rows):
        out.append(f'<text class="tick" x="{left - 5}" y="{t + i * ch + ch / 2 + 4:.0f}" '
                   f'text-anchor="end">{escape(name)}</text>')
    out.append(f'<text class="label" x="{(left + w - r) / 2:.0f}" y="{h - 8}" '
               f'text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text class="label" transform="translate(14 {(t + h - b) / 2:.0f}) '
               f'rotate(-90)" text-anchor="middle">{escape(ylabel)}</text></svg>')
    return "".join(out)


_VIRIDIS = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))


def _viridis(frac: float) -> str:
    """A colour on a 5-stop viridis ramp (0 = dark blue, 1 = yellow)."""
    f = min(max(frac, 0.0), 1.0) * (len(_VIRIDIS) - 1)
    i = min(int(f), len(_VIRIDIS) - 2)
    a, b = _VIRIDIS[i], _VIRIDIS[i + 1]
    u = f - i
    return "#" + "".join(f"{round(x + (y - x) * u):02x}" for x, y in zip(a, b, strict=True))
