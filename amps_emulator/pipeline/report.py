"""The ``stats --html`` page: one self-contained HTML file, charts as inline SVG (no scripts,
no chart library, nothing fetched), so it opens anywhere, from a CI artefact too."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterable, Mapping, Sequence

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")


def _ts(x) -> float:
    return x.timestamp() if isinstance(x, dt.datetime) else float(x)


def line_chart(title: str, series: Mapping[str, Sequence[tuple]], y_label: str,
               width: int = 860, height: int = 260) -> str:
    """An SVG line chart of ``{name: [(time, value), ...]}``; time: datetime or seconds."""
    left, right, top, bottom = 60, 160, 28, 34
    pts = [(_ts(x), float(y)) for s in series.values() for x, y in s]
    esc = html.escape
    if not pts:
        return f'<h3>{esc(title)}</h3><p class="empty">no data</p>'
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(max(p[1] for p in pts), 1.0)
    x1 = x1 if x1 > x0 else x0 + 1
    pw, ph = width - left - right, height - top - bottom

    def sx(x):
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y):
        return top + ph - y / y1 * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="{esc(title)}">',
           f'<text x="{left}" y="18" font-weight="bold">{esc(title)}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#444"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#444"/>']
    for frac in (0, 0.5, 1):
        y = y1 * frac
        out.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end" '
                   f'font-size="11">{y:,.0f}</text>')
    for frac in (0, 0.5, 1):
        x = x0 + (x1 - x0) * frac
        label = dt.datetime.fromtimestamp(x, dt.UTC).strftime("%H:%M:%S")
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 16}" text-anchor="middle" '
                   f'font-size="11">{label}</text>')
    out.append(f'<text x="12" y="{top + ph / 2}" font-size="11" transform="rotate(-90 12 {top + ph / 2})" '
               f'text-anchor="middle">{esc(y_label)}</text>')
    for i, (name, s) in enumerate(sorted(series.items())):
        colour = _COLOURS[i % len(_COLOURS)]
        line = " ".join(f"{sx(_ts(x)):.1f},{sy(float(y)):.1f}" for x, y in sorted(s, key=lambda p: _ts(p[0])))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}"/>')
        ly = top + 14 * i + 8
        out.append(f'<rect x="{left + pw + 12}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{left + pw + 26}" y="{ly + 1}" font-size="11">{esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(_cell(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<h3>{esc(title)}</h3><table><tr>{head}</tr>{body or '<tr><td>none</td></tr>'}</table>"


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.2f}"
    return str(v)


def page(title: str, sections: Sequence[str]) -> str:
    style = ("body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
             "margin-bottom:18px}td,th{border:1px solid #ccc;padding:3px 8px;font-size:12px;"
             "text-align:right}th{background:#f3f3f3}.empty{color:#888}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            + "\n".join(sections) + "</body></html>")


def stats_page(title: str, by_publisher, per_second, gaps, queue_depth) -> str:
    """The report from :func:`jobs.stats`' collected rows."""
    per_topic: dict[str, list] = {}
    for r in per_second:
        per_topic.setdefault(r.topic, []).append((r.second, r.messages))
    depth: dict[str, list] = {}
    for r in queue_depth:
        depth.setdefault(r.queue, []).append((r.second, r.depth))
    cols = ["topic", "client_name", "messages", "bytes", "mean_size", "max_size", "per_second", "first",
            "last"]
    return page(title, [
        line_chart("Messages per second per topic", per_topic, "messages/s"),
        line_chart("Queue depth over time", depth, "messages"),
        table("Per topic and publisher", cols, ([getattr(r, c) for c in cols] for r in by_publisher)),
        table("Gaps in publisher sequences", ["client_name", "after_seq", "next_seq", "missing"],
              ((r.client_name, r.after_seq, r.next_seq, r.missing) for r in gaps)),
    ])
