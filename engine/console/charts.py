"""Charts as SVG drawn on the server: pure functions from figures to markup (no JavaScript library)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

from markupsafe import Markup, escape

LATENESS_EDGES_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
"""Upper edges (ms) of the lateness histogram's buckets; one more bucket holds everything later."""

ROW_H, LABEL_W, BAR_W = 22, 150, 360


def histogram_counts(values_us: Iterable[int], edges_ms: Sequence[int] = LATENESS_EDGES_MS) -> list[int]:
    """How many values fall in each bucket: ``< edges[0]``, ``[edges[i-1], edges[i])``, ..., ``>= edges[-1]``."""
    return weighted_counts(((value, 1) for value in values_us), edges_ms)


def weighted_counts(tallied: Iterable[tuple[int, int]], edges_ms: Sequence[int] = LATENESS_EDGES_MS) -> list[int]:
    """As :func:`histogram_counts`, from (value in µs, how many times) pairs."""
    counts = [0] * (len(edges_ms) + 1)
    for value, times in tallied:
        counts[bisect_right(edges_ms, value / 1000)] += times
    return counts


def bucket_labels(edges_ms: Sequence[int] = LATENESS_EDGES_MS) -> list[str]:
    """The buckets' names, e.g. ``<1ms``, ``1-2ms``, ``>=10s``."""
    names = [_ms(e) for e in edges_ms]
    return [f"<{names[0]}"] + [f"{a}-{b}" for a, b in zip(names, names[1:])] + [f">={names[-1]}"]


def _ms(ms: int) -> str:
    return f"{ms // 1000}s" if ms >= 1000 and ms % 1000 == 0 else f"{ms}ms"


def histogram_svg(counts: Sequence[int], title: str, edges_ms: Sequence[int] = LATENESS_EDGES_MS) -> Markup:
    """A vertical bar per bucket (``counts`` from :func:`histogram_counts`), counts over the bars, names under them."""
    labels = bucket_labels(edges_ms)
    top, col, height = max(counts) or 1, 40, 110
    parts = [_open(col * len(counts) + 20, height + 92, title)]
    for i, (n, label) in enumerate(zip(counts, labels)):
        h = round(height * n / top)
        x = 10 + i * col
        parts.append(f'<rect class="bar" x="{x}" y="{20 + height - h}" width="{col - 6}" height="{h}">'
                     f"<title>{escape(label)}: {n}</title></rect>")
        parts.append(f'<text x="{x + (col - 6) / 2}" y="{15 + height - h}" text-anchor="middle">{n}</text>')
        # Each name ends under its own bar and slants down to the left, clear of its neighbours'.
        parts.append(f'<text class="axis" x="{x + (col - 6) / 2}" y="{height + 32}" text-anchor="end" '
                     f'transform="rotate(-40 {x + (col - 6) / 2} {height + 32})">{escape(label)}</text>')
    return Markup("".join(parts) + "</svg>")


def bars_svg(rows: Sequence[tuple[str, float]], title: str, unit: str = "") -> Markup:
    """One horizontal bar per (label, value), scaled to the largest value."""
    top = max((v for _, v in rows), default=0) or 1
    parts = [_open(LABEL_W + BAR_W + 80, ROW_H * len(rows) + 10, title)]
    for i, (label, value) in enumerate(rows):
        y, w = 5 + i * ROW_H, round(BAR_W * value / top)
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>'
                     f'<rect class="bar" x="{LABEL_W}" y="{y}" width="{w}" height="{ROW_H - 6}"/>'
                     f'<text x="{LABEL_W + w + 4}" y="{y + 14}">{value:g}{escape(unit)}</text>')
    return Markup("".join(parts) + "</svg>")


def share_svg(rows: Sequence[tuple[str, float, float]], title: str) -> Markup:
    """Per tenant two bars: the share of starts it was served, and the share its weight entitles it to (0..1)."""
    row_h = 2 * ROW_H + 6
    parts = [_open(LABEL_W + BAR_W + 90, row_h * len(rows) + 30, title)]
    for i, (tenant, served, weight) in enumerate(rows):
        y = 5 + i * row_h
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 25}" text-anchor="end">{escape(tenant)}</text>')
        for j, (kind, share) in enumerate((("served", served), ("weight", weight))):
            w, yy = round(BAR_W * share), y + j * ROW_H
            parts.append(f'<rect class="bar {kind}" x="{LABEL_W}" y="{yy}" width="{w}" height="{ROW_H - 6}">'
                         f"<title>{escape(tenant)} {kind} share {share:.1%}</title></rect>"
                         f'<text x="{LABEL_W + w + 4}" y="{yy + 14}">{kind} {share:.1%}</text>')
    legend_y = row_h * len(rows) + 22
    parts.append(f'<rect class="bar served" x="{LABEL_W}" y="{legend_y - 10}" width="12" height="12"/>'
                 f'<text x="{LABEL_W + 16}" y="{legend_y}">share of starts served</text>'
                 f'<rect class="bar weight" x="{LABEL_W + 190}" y="{legend_y - 10}" width="12" height="12"/>'
                 f'<text x="{LABEL_W + 206}" y="{legend_y}">share by weight</text>')
    return Markup("".join(parts) + "</svg>")


def _open(width: int, height: int, title: str) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>')


def timeseries_svg(points: Sequence[tuple[str, int, int]], title: str) -> Markup:
    """Stacked columns over time: per (label, succeeded, dead) a blue column of jobs succeeded under a red one of
    jobs dead-lettered, scaled to the tallest; every third label under its column, the scale's top on the left."""
    col, height, left = 26, 110, 44
    top = max((ok + bad for _, ok, bad in points), default=0) or 1
    parts = [_open(left + col * len(points) + 10, height + 58, title),
             f'<text class="axis" x="{left - 6}" y="24" text-anchor="end">{top}</text>'
             f'<text class="axis" x="{left - 6}" y="{20 + height}" text-anchor="end">0</text>'
             f'<line class="axis" x1="{left}" y1="{20 + height}" x2="{left + col * len(points)}" y2="{20 + height}"/>']
    for i, (label, ok, bad) in enumerate(points):
        x, h_ok, h_bad = left + i * col, round(height * ok / top), round(height * bad / top)
        tip = f"{escape(label)}: {ok} succeeded, {bad} dead-lettered"
        parts.append(f'<rect class="bar ok" x="{x + 2}" y="{20 + height - h_ok}" width="{col - 4}" height="{h_ok}">'
                     f"<title>{tip}</title></rect>"
                     f'<rect class="bar dead" x="{x + 2}" y="{20 + height - h_ok - h_bad}" width="{col - 4}" '
                     f'height="{h_bad}"><title>{tip}</title></rect>')
        if i % 3 == 0:
            parts.append(f'<text class="axis" x="{x + col / 2}" y="{height + 36}" text-anchor="middle">'
                         f"{escape(label)}</text>")
    legend = height + 52
    parts.append(f'<rect class="bar ok" x="{left}" y="{legend - 9}" width="10" height="10"/>'
                 f'<text x="{left + 14}" y="{legend}">succeeded</text>'
                 f'<rect class="bar dead" x="{left + 90}" y="{legend - 9}" width="10" height="10"/>'
                 f'<text x="{left + 104}" y="{legend}">dead-lettered</text>')
    return Markup("".join(parts) + "</svg>")
