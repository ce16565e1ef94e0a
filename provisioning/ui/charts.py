"""Charts as server-rendered SVG: no JavaScript, so they read without it and swap like any
other HTML under htmx.

``stacked_area`` draws groups of values over time buckets as stacked steps (a bucket's
value holds across the whole bucket: the spend series are averages over each bucket), with
time and dollar ticks, a legend, and a ``<title>`` tooltip on every point. The chart is
an image to assistive technology (``role="img"``), named by its ``<title>`` and described
by a ``<desc>`` that states the totals. Every piece of text is escaped here, so callers
may mark the result safe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from html import escape

# Colour-blind-safe (Okabe-Ito), then a few more for large clusters; cycled beyond.
PALETTE = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#f0e442",
    "#000000",
    "#8c564b",
    "#7f7f7f",
)
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 24, 12, 28
LEGEND_ROW = 20
CHAR_WIDTH = 7  # the average width of a 12px label, to lay the legend out without a browser
MAX_TICKS = 7
TICK_STEPS = tuple(
    timedelta(**{unit: n})
    for unit, n in (
        ("minutes", 1),
        ("minutes", 5),
        ("minutes", 10),
        ("minutes", 15),
        ("minutes", 30),
        ("hours", 1),
        ("hours", 2),
        ("hours", 3),
        ("hours", 6),
        ("hours", 12),
        ("days", 1),
        ("days", 2),
        ("days", 7),
    )
)


def stacked_area(
    edges: Sequence[datetime],
    values: Mapping[str, Sequence[float]],
    *,
    chart_id: str,
    title: str,
    unit: str = "/hour",
    width: int = 960,
    height: int = 240,
    colours: Mapping[str, str] | None = None,
) -> str:
    """An SVG of ``values`` (group → one value per bucket) stacked over the buckets
    ``edges[i]`` to ``edges[i + 1]``; ``chart_id`` keeps the ids of several charts on one
    page apart, ``unit`` follows every dollar figure, ``colours`` sets some groups' colours
    (the others take the palette's in turn)."""
    count = len(edges) - 1
    if count < 1:
        raise ValueError("a chart needs at least one bucket (two edges)")
    for group, series in values.items():
        if len(series) != count:
            raise ValueError(f"{group}: {len(series)} values for {count} buckets")
    groups = list(values)
    colour_of = _colours(groups, colours or {})
    legend_rows = _legend_rows(groups, width - MARGIN_LEFT - MARGIN_RIGHT)
    plot_bottom = height - MARGIN_BOTTOM
    total_height = height + LEGEND_ROW * len(legend_rows)
    t0, t1 = edges[0].timestamp(), edges[-1].timestamp()
    totals = [sum(values[g][i] for g in groups) for i in range(count)]
    top, y_step = _nice_top(max(totals, default=0.0))

    def x(t: float) -> float:
        return MARGIN_LEFT + (t - t0) / (t1 - t0) * (width - MARGIN_LEFT - MARGIN_RIGHT)

    def y(value: float) -> float:
        return plot_bottom - value / top * (plot_bottom - MARGIN_TOP)

    xs = [x(edge.timestamp()) for edge in edges]
    ident = escape(chart_id)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {total_height}" '
        f'role="img" aria-labelledby="{ident}-title {ident}-desc">',
        f'<title id="{ident}-title">{escape(title)}</title>',
        f'<desc id="{ident}-desc">{escape(_description(edges, values, unit))}</desc>',
    ]
    parts += _y_axis(top, y_step, y, width, unit)
    parts += _x_axis(edges, x, plot_bottom)

    below = [0.0] * count
    periods = [_period(edges[i], edges[i + 1]) for i in range(count)]  # the same for every group
    for group in groups:
        colour = colour_of[group]
        above = [below[i] + values[group][i] for i in range(count)]
        outline = [(xs[i + step], y(above[i])) for i in range(count) for step in (0, 1)]
        floor = [(xs[i + step], y(below[i])) for i in reversed(range(count)) for step in (1, 0)]
        path = "M" + " L".join(f"{px:.1f},{py:.1f}" for px, py in outline + floor) + " Z"
        parts.append(f'<g class="series" data-group="{escape(group)}">')
        parts.append(
            f'<path class="area" d="{path}" fill="{colour}" fill-opacity="0.75"><title>{escape(group)}</title></path>'
        )
        for i in range(count):
            tip = f"{group}: {_money(values[group][i])}{unit}, {periods[i]}"
            parts.append(
                f'<circle class="point" cx="{(xs[i] + xs[i + 1]) / 2:.1f}" cy="{y(above[i]):.1f}" r="3" '
                f'fill="{colour}"><title>{escape(tip)}</title></circle>'
            )
        parts.append("</g>")
        below = above

    parts += _legend(groups, legend_rows, height, colour_of)
    parts.append("</svg>")
    return "\n".join(parts)


def _nice_top(highest: float) -> tuple[float, float]:
    """The top of the value axis and its tick step: 1, 2 or 5 times a power of ten, at
    most five steps."""
    if highest <= 0:
        return 1.0, 0.2
    raw = highest / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return step * math.ceil(highest / step - 1e-9), step


def _y_axis(top: float, step: float, y, width: int, unit: str) -> list[str]:
    parts = ['<g class="axis y">']
    ticks = round(top / step)
    for k in range(ticks + 1):
        value = k * step
        py = y(value)
        parts.append(f'<line class="grid" x1="{MARGIN_LEFT}" x2="{width - MARGIN_RIGHT}" y1="{py:.1f}" y2="{py:.1f}"/>')
        label = _tick_label(value, step)
        parts.append(f'<text x="{MARGIN_LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{escape(label)}</text>')
    parts.append("</g>")
    return parts


def _x_axis(edges: Sequence[datetime], x, plot_bottom: float) -> list[str]:
    start, end = edges[0], edges[-1]
    step = next((s for s in TICK_STEPS if (end - start) / s <= MAX_TICKS), TICK_STEPS[-1])
    seconds = step.total_seconds()
    label = "%b %d" if step >= timedelta(days=1) else "%H:%M"
    parts = ['<g class="axis x">']
    parts.append(
        f'<line x1="{x(start.timestamp()):.1f}" x2="{x(end.timestamp()):.1f}" y1="{plot_bottom}" y2="{plot_bottom}"/>'
    )
    tick = math.ceil(start.timestamp() / seconds) * seconds
    while tick <= end.timestamp():
        px = x(tick)
        text = datetime.fromtimestamp(tick, UTC).strftime(label)
        parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{plot_bottom}" y2="{plot_bottom + 4}"/>')
        parts.append(f'<text x="{px:.1f}" y="{plot_bottom + 17}" text-anchor="middle">{escape(text)}</text>')
        tick += seconds
    parts.append("</g>")
    return parts


def _legend_rows(groups: Sequence[str], room: float) -> list[list[int]]:
    """Indexes of the groups on each legend row, wrapping when a row is full."""
    rows: list[list[int]] = []
    used = 0.0
    for index, group in enumerate(groups):
        need = _legend_width(group)
        if not rows or used + need > room:
            rows.append([])
            used = 0.0
        rows[-1].append(index)
        used += need
    return rows


def _legend_width(group: str) -> float:
    return 12 + 6 + len(group) * CHAR_WIDTH + 16


def _colours(groups: Sequence[str], fixed: Mapping[str, str]) -> dict[str, str]:
    """Each group's colour: a fixed one, or the palette's next."""
    others = iter(range(len(groups)))
    return {group: fixed.get(group) or PALETTE[next(others) % len(PALETTE)] for group in groups}


def _legend(groups: Sequence[str], rows: list[list[int]], top: float, colour_of: Mapping[str, str]) -> list[str]:
    parts = ['<g class="legend">']
    for row_number, row in enumerate(rows):
        px = float(MARGIN_LEFT)
        py = top + row_number * LEGEND_ROW
        for index in row:
            colour = colour_of[groups[index]]
            parts.append(
                f'<g class="legend-item"><rect x="{px:.0f}" y="{py:.0f}" width="12" height="12" fill="{colour}"/>'
                f'<text x="{px + 18:.0f}" y="{py + 10:.0f}">{escape(groups[index])}</text></g>'
            )
            px += _legend_width(groups[index])
    parts.append("</g>")
    return parts


def _description(edges: Sequence[datetime], values: Mapping[str, Sequence[float]], unit: str) -> str:
    """The chart in words: the period, and each group's average over it."""
    lengths = [(edges[i + 1] - edges[i]).total_seconds() for i in range(len(edges) - 1)]
    span = sum(lengths)
    averages = [
        f"{group} {_money(sum(v * s for v, s in zip(series, lengths, strict=True)) / span)}{unit} on average"
        for group, series in values.items()
    ]
    period = _period(edges[0], edges[-1])
    return f"{period}: " + ("; ".join(averages) if averages else "nothing") + "."


def _period(start: datetime, end: datetime) -> str:
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if start.date() == end.date():
        return f"{start:%Y-%m-%d %H:%M}–{end:%H:%M} UTC"
    return f"{start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC"


def _money(value: float) -> str:
    """Dollars as the dashboard shows rates: four decimals below $100."""
    return f"${value:,.4f}" if abs(value) < 100 else f"${value:,.2f}"


def _tick_label(value: float, step: float) -> str:
    """Dollars with as many decimals as the tick step needs (steps are 1, 2 or 5 × 10^k)."""
    decimals = 0 if step >= 1 else max(2, -math.floor(math.log10(step)))
    return f"${value:,.{decimals}f}"
