"""The report's charts as small SVG documents, written directly.

matplotlib drew them before: importing it and drawing three charts cost
~0.6 s of CPU in the step that publishes (most of a small run's report), and
its text engine parsed labels as math unless told not to. These charts need
only bars, filled steps, axes, ticks and text, so they are written as SVG
here: every label is XML-escaped text (never markup, never math), the page
embeds each as a data: URI image, and the browser lays out the text.

Text widths are not measured (that would need the font): margins are sized
from the character count at an average glyph width, generously.
"""
from __future__ import annotations

import html
import math
from typing import Callable, Sequence

FONT = 12.0                   # px; ticks and legends use SMALL
SMALL = 10.0
CHAR = 0.6                    # average glyph width / font size (sans-serif), rounded up
FAMILY = "DejaVu Sans,Helvetica,Arial,sans-serif"
AXIS = "#444"
GRID = "#ddd"


def _text_width(text: str, size: float) -> float:
    return len(text) * size * CHAR


def _n(v: float) -> str:
    """A coordinate: at most 1 decimal, no trailing zeros."""
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _attr(v) -> str:
    return html.escape(str(v), quote=True)


def escape(text: str) -> str:
    """Text content for XML (the html module is imported anyway; xml.sax is not)."""
    return html.escape(text, quote=False)


def nice_ticks(top: float, most: int = 6, integer: bool = True) -> list:
    """Tick values from 0 to at least `top` at a step of 1, 2, 2.5 or 5 x 10^k,
    at most `most` + 1 of them (whole numbers only when `integer`)."""
    top = max(float(top), 1.0 if integer else 1e-9)
    raw = top / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw and (not integer or m * power >= 1))
    if integer:
        step = max(1, round(step)) if step >= 1 else 1
    count = math.ceil(top / step - 1e-9)
    return [step * i for i in range(count + 1)]


def fmt_count(v: float) -> str:
    return f"{v:,.0f}"


class Svg:
    """An SVG document under construction."""

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self.parts: list = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str, opacity: float = 1.0) -> None:
        op = f' fill-opacity="{opacity:g}"' if opacity < 1 else ""
        self.parts.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0))}" height="{_n(max(h, 0))}" '
                          f'fill="{fill}"{op}/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = AXIS, width: float = 1.0) -> None:
        self.parts.append(f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{stroke}" '
                          f'stroke-width="{width:g}"/>')

    def path(self, d: str, fill: str, opacity: float = 1.0, stroke: str = "none") -> None:
        self.parts.append(f'<path d="{d}" fill="{fill}" fill-opacity="{opacity:g}" stroke="{stroke}"/>')

    def text(self, x: float, y: float, text: str, size: float = FONT, anchor: str = "start",
             rotate: float = 0.0, bold: bool = False, baseline: str = "") -> None:
        extra = f' transform="rotate({rotate:g} {_n(x)} {_n(y)})"' if rotate else ""
        extra += ' font-weight="bold"' if bold else ""
        extra += f' dominant-baseline="{baseline}"' if baseline else ""
        self.parts.append(f'<text x="{_n(x)}" y="{_n(y)}" font-size="{size:g}" text-anchor="{anchor}"{extra}>'
                          f"{escape(text)}</text>")

    def document(self) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(self.width)}" height="{_n(self.height)}" '
                f'viewBox="0 0 {_n(self.width)} {_n(self.height)}" font-family="{_attr(FAMILY)}" fill="#222">'
                f'<rect width="100%" height="100%" fill="#fff"/>{"".join(self.parts)}</svg>')


class Frame:
    """A plot area inside an Svg: data coordinates to pixels, axes, ticks."""

    def __init__(self, svg: Svg, left: float, top: float, right: float, bottom: float,
                 x_range: tuple, y_range: tuple):
        self.svg = svg
        self.left, self.top, self.right, self.bottom = left, top, right, bottom
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_range

    def x(self, v: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return self.left + (v - self.x0) / span * (self.right - self.left)

    def y(self, v: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.bottom - (v - self.y0) / span * (self.bottom - self.top)

    def y_ticks(self, ticks: list, fmt: Callable = fmt_count, grid: bool = True, label: str = "") -> None:
        s = self.svg
        for t in ticks:
            y = self.y(t)
            if grid and t:
                s.line(self.left, y, self.right, y, GRID)
            s.line(self.left - 4, y, self.left, y)
            s.text(self.left - 6, y + SMALL * 0.35, fmt(t), SMALL, "end")
        if label:
            width = max((_text_width(fmt(t), SMALL) for t in ticks), default=0)
            x = self.left - 12 - width - FONT * 0.4
            s.text(x, (self.top + self.bottom) / 2, label, FONT, "middle", rotate=-90)

    def x_ticks(self, ticks: list, fmt: Callable = fmt_count, grid: bool = False) -> None:
        s = self.svg
        for t in ticks:
            x = self.x(t)
            if grid and t:
                s.line(x, self.top, x, self.bottom, GRID)
            s.line(x, self.bottom, x, self.bottom + 4)
            s.text(x, self.bottom + 6 + SMALL, fmt(t), SMALL, "middle")

    def category_labels(self, labels: Sequence[str], rotate: bool) -> None:
        for i, name in enumerate(labels):
            x = self.x(i)
            self.svg.line(x, self.bottom, x, self.bottom + 4)
            if rotate:
                self.svg.text(x + 3, self.bottom + 8, name, SMALL, "end", rotate=-45 if rotate is True else -rotate,
                              baseline="hanging")
            else:
                self.svg.text(x, self.bottom + 6 + SMALL, name, SMALL, "middle")

    def axes(self) -> None:
        self.svg.line(self.left, self.bottom, self.right, self.bottom)
        self.svg.line(self.left, self.top, self.left, self.bottom)

    def title(self, text: str) -> None:
        self.svg.text((self.left + self.right) / 2, self.top - 8, text, FONT + 1, "middle", bold=True)


def legend(svg: Svg, right: float, top: float, items: Sequence[tuple]) -> None:
    """Colour swatches and names [(name, colour)] in a box at the top right."""
    if not items:
        return
    width = max(_text_width(n, SMALL) for n, _ in items) + 30
    height = 8 + 16 * len(items)
    x = right - width - 6
    svg.rect(x, top + 4, width, height, "#fff", 0.85)
    svg.parts.append(f'<rect x="{_n(x)}" y="{_n(top + 4)}" width="{_n(width)}" height="{_n(height)}" fill="none" '
                     f'stroke="#ccc"/>')
    for i, (name, colour) in enumerate(items):
        y = top + 10 + 16 * i
        svg.rect(x + 6, y, 14, 10, colour)
        svg.text(x + 24, y + 9, name, SMALL)


def grouped_bars(title: str, categories: Sequence[str], series: Sequence[tuple], ylabel: str,
                 width: float, height: float) -> str:
    """Vertical bars, one group per category, one bar per series
    [(name, values, colour)]; category labels rotated when there are many."""
    longest = max((_text_width(c, SMALL) for c in categories), default=0)
    rotate = len(categories) > 6 or longest > 0.9 * (width - 80) / max(1, len(categories))
    top_value = max((v for _, vs, _ in series for v in vs), default=0)
    ticks = nice_ticks(top_value)
    tick_w = max(_text_width(fmt_count(t), SMALL) for t in ticks)
    bottom_room = (longest * 0.72 + 20) if rotate else 28
    svg = Svg(width, height + (bottom_room - 28 if rotate else 0))
    frame = Frame(svg, 30 + tick_w + FONT, 30, width - 12, svg.height - bottom_room,
                  (-0.6, len(categories) - 0.4), (0, ticks[-1]))
    frame.y_ticks(ticks, label=ylabel)
    k = max(1, len(series))
    bar = 0.8 / k
    for i, (_, values, colour) in enumerate(series):
        for j, v in enumerate(values):
            centre = j + (i - (k - 1) / 2) * bar
            x0, x1 = frame.x(centre - bar / 2), frame.x(centre + bar / 2)
            svg.rect(x0, frame.y(v), x1 - x0, frame.y(0) - frame.y(v), colour)
    frame.axes()
    frame.category_labels(categories, rotate)
    frame.title(title)
    legend(svg, frame.right, frame.top, [(n, c) for n, _, c in series])
    return svg.document()


def sorted_curves(title: str, series: Sequence[tuple], xlabel: str, ylabel: str, width: float, height: float) -> str:
    """One filled step curve per series [(legend text, values sorted
    descending, colour)], drawn half transparent over each other."""
    n = max((len(vs) for _, vs, _ in series), default=1)
    ticks = nice_ticks(max((v for _, vs, _ in series for v in vs), default=0))
    tick_w = max(_text_width(fmt_count(t), SMALL) for t in ticks)
    svg = Svg(width, height)
    frame = Frame(svg, 30 + tick_w + FONT, 30, width - 12, height - 46, (0, max(n - 1, 1)), (0, ticks[-1]))
    frame.y_ticks(ticks, label=ylabel)
    for _, values, colour in series:
        if not values:
            continue
        pts = [f"M{_n(frame.x(-0.5 if len(values) > 1 else 0))},{_n(frame.y(0))}"]
        for i, v in enumerate(values):  # steps centred on each index ("mid")
            pts.append(f"L{_n(frame.x(max(i - 0.5, 0)))},{_n(frame.y(v))}L{_n(frame.x(min(i + 0.5, n - 1)))},"
                       f"{_n(frame.y(v))}")
        pts.append(f"L{_n(frame.x(min(len(values) - 0.5, n - 1)))},{_n(frame.y(0))}Z")
        svg.path("".join(pts), colour, 0.55)
    frame.axes()
    frame.x_ticks([t for t in nice_ticks(n - 1, 8) if t <= n - 1])
    svg.text((frame.left + frame.right) / 2, height - 8, xlabel, FONT, "middle")
    frame.title(title)
    legend(svg, frame.right, frame.top, [(name, c) for name, _, c in series])
    return svg.document()


def horizontal_bars(title: str, names: Sequence[str], values: Sequence[int], xlabel: str, colour: str,
                    width: float) -> str:
    """One bar per name, top to bottom, each with its value written after it."""
    name_w = max((_text_width(n, SMALL) for n in names), default=0)
    height = 70 + 27 * len(names)
    svg = Svg(width, height)
    top_value = max(values, default=0)
    ticks = nice_ticks(top_value * 1.12 + 1e-9, 6)
    value_w = _text_width(fmt_count(top_value), SMALL)
    frame = Frame(svg, 14 + name_w, 30, width - 14 - value_w, height - 40, (0, ticks[-1]),
                  (len(names) - 0.5, -0.5))
    for t in ticks:
        if t:
            svg.line(frame.x(t), frame.top, frame.x(t), frame.bottom, GRID)
    for i, (name, v) in enumerate(zip(names, values)):
        y0, y1 = frame.y(i - 0.4), frame.y(i + 0.4)
        top, bar_h = min(y0, y1), abs(y1 - y0)
        svg.rect(frame.x(0), top, frame.x(v) - frame.x(0), bar_h, colour)
        svg.text(frame.x(v) + 4, top + bar_h / 2 + SMALL * 0.35, fmt_count(v), SMALL)
        svg.text(frame.left - 6, top + bar_h / 2 + SMALL * 0.35, name, SMALL, "end")
    frame.axes()
    frame.x_ticks(ticks)
    svg.text((frame.left + frame.right) / 2, height - 6, xlabel, FONT, "middle")
    frame.title(title)
    return svg.document()


def histograms(panels: Sequence[tuple], width: float, height: float) -> str:
    """Side-by-side bar histograms [(title, bin labels, counts, colour)];
    a panel without counts is left empty."""
    svg = Svg(width, height)
    k = max(1, len(panels))
    cell = width / k
    longest = max((_text_width(b, SMALL) for _, bins, _, _ in panels for b in bins), default=0)
    bottom = height - min(longest * 0.87 + 16, height * 0.4)
    for p, (title, bins, counts, colour) in enumerate(panels):
        if not counts:
            continue
        ticks = nice_ticks(max(counts), 5)
        tick_w = max(_text_width(fmt_count(t), SMALL) for t in ticks)
        left = p * cell + 16 + tick_w
        frame = Frame(svg, left, 30, (p + 1) * cell - 14, bottom, (-0.6, len(counts) - 0.4), (0, ticks[-1]))
        frame.y_ticks(ticks)
        for i, c in enumerate(counts):
            x0, x1 = frame.x(i - 0.4), frame.x(i + 0.4)
            svg.rect(x0, frame.y(c), x1 - x0, frame.y(0) - frame.y(c), colour)
        frame.axes()
        frame.category_labels(bins, rotate=60)
        frame.title(title)
    return svg.document()
