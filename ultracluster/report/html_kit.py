"""The HTML kit every offline page of the package is made with (report.html, compare.html, the sensitivity page,
plan.html, sweep.html, calibrate.html): one CSS, the sort-on-click script, escaped table cells whose numbers follow
`table.fmt` (the one rule) with their raw value kept for sorting, SVG pieces (rectangles with a tooltip, legends,
round axis ticks, an axis with its unit, a dashed limit line, stacked bars) and the page around a body.

Nothing here knows a run: the pages are `report.html` (a run, runs compared, the sensitivity page),
`plan.html`, `sweep.html` and `calibrate.html`. Nothing is loaded from anywhere and every text is escaped.
"""
from __future__ import annotations

import math
import numbers
from html import escape
from typing import TYPE_CHECKING

from ultracluster.report.table import fmt, fmt_value

if TYPE_CHECKING:
    import pandas as pd

# the HBM kinds' colours: report.html's memory chart and plan.html's near-misses
MEMORY_COLORS = {"weights_gib": "#4e79a7", "gradients_gib": "#f28e2b", "optimizer_gib": "#59a14f",
                 "activations_gib": "#e15759", "reserve_gib": "#bab0ac"}
OTHER_COLOR = "#bab0ac"     # a part no colour map names
PLOT_W, LABEL_W = 760, 150  # px: a chart's plot area, and the labels left of it

CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1150px}
h2{margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td{white-space:nowrap}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
table.sortable th{cursor:pointer}table.sortable th:hover{background:#e8e8e8}
.infeasible{border:2px solid #c0392b;background:#fdecea;padding:12px;font-size:16px;margin:12px 0}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 16px;min-width:120px}
.card b{display:block;font-size:22px}.card span{color:#666}
pre{background:#f7f7f7;padding:12px;overflow:auto}svg text{font-size:11px}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
.note{color:#666}.better{color:#1a7f37}.worse{color:#c0392b}
.warning{border-left:4px solid #edc948;background:#fdf6e0;padding:6px 10px;margin:6px 0}
.wide{overflow-x:auto}svg text.axis{fill:#444}svg text.tick{fill:#666}"""
# Click a header of a sortable table to sort by it (numbers numerically, then text); again to reverse.
SORT_JS = """document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.querySelectorAll("th");
  heads.forEach(function (th, col) {
    th.addEventListener("click", function () {
      var rows = Array.prototype.slice.call(table.querySelectorAll("tr")).slice(1);
      var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
      heads.forEach(function (h) { h.removeAttribute("data-dir"); });
      th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
      rows.sort(function (a, b) {
        var ca = a.children[col], cb = b.children[col];
        var x = ca.textContent, y = cb.textContent;
        var nx = parseFloat(ca.getAttribute("data-v")), ny = parseFloat(cb.getAttribute("data-v"));
        if (!isNaN(nx) && !isNaN(ny)) { return dir * (nx - ny); }
        return dir * x.localeCompare(y);
      });
      rows.forEach(function (r) { table.appendChild(r); });
    });
  });
});"""


def cell(value, key: str = "", ref: float = 0.0) -> str:
    """A table cell: the number as a person reads it (`table.fmt`), its raw value in `data-v` for sorting."""
    text = escape(fmt(value, key, ref))
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        return f'<td data-v="{float(value)!r}">{text}</td>'
    return f"<td>{text}</td>"


def table(rows: list[list], header: list[str], sortable: bool = True, keys: list[str] | None = None,
          ref: float = 0.0) -> str:
    """An HTML table; each column's numbers in the unit its key (default: its header) names."""
    keys = keys or header
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(v, k, ref) for v, k in zip(row, keys)) + "</tr>" for row in rows)
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}><tr>{head}</tr>{body}</table>"


def frame_table(frame: pd.DataFrame, sortable: bool = True, ref: float = 0.0) -> str:
    if frame.empty:
        return "<p>none</p>"
    return ('<div class="wide">' + table(frame.to_numpy(dtype=object).tolist(), [str(c) for c in frame.columns],
                                         sortable, ref=ref) + "</div>")


def rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0.5):.2f}" height="{h:.2f}" fill="{color}">'
            f"<title>{escape(tip)}</title></rect>")


def legend(colors: dict[str, str]) -> str:
    return '<p class="legend">' + "".join(
        f'<span><i style="background:{c}"></i>{escape(k)}</span>' for k, c in colors.items()) + "</p>"


def finite(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top`: steps of 1, 2, 2.5 or 5 x 10^k, about `count` of them."""
    if not (finite(top) and top > 0):
        return [0.0, 1.0]
    raw = top / count
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-12))
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def axis_svg(x0: float, y: float, ticks: list[float], scale: float, unit: str, title: str) -> str:
    """A horizontal axis at height `y`: its line, a tick and a label (in `unit`, `table.fmt_value`) per value,
    and its title under them."""
    last = ticks[-1]
    out = [f'<line x1="{x0:.2f}" y1="{y}" x2="{x0 + last * scale:.2f}" y2="{y}" stroke="#888"/>']
    for t in ticks:
        x = x0 + t * scale
        out.append(f'<line x1="{x:.2f}" y1="{y}" x2="{x:.2f}" y2="{y + 4}" stroke="#888"/>'
                   f'<text class="tick" x="{x:.2f}" y="{y + 15}" text-anchor="middle">'
                   f"{escape(fmt_value(t, unit, like=last))}</text>")
    out.append(f'<text class="axis" x="{x0 + last * scale / 2:.2f}" y="{y + 31}" text-anchor="middle">'
               f"{escape(title)}</text>")
    return "".join(out)


AXIS_H = 38   # px under a chart for its axis


def limit_mark(x: float, y0: float, y1: float, title: str, label: str, lx: float, ly: float, anchor: str) -> str:
    """A dashed red limit line from y0 to y1 at x (e.g. HBM capacity) with a tooltip and a visible label."""
    return (f'<line x1="{x:.2f}" y1="{y0}" x2="{x:.2f}" y2="{y1}" stroke="#c0392b" stroke-width="2" '
            f'stroke-dasharray="4 3"><title>{escape(title)}</title></line><text class="limit" x="{lx:.2f}" '
            f'y="{ly}" text-anchor="{anchor}" fill="#c0392b">{escape(label)}</text>')


def stacked_bars(rows: list[tuple[str, dict[str, float]]], colors: dict[str, str], unit: str,
                 limit: float | None = None, limit_label: str = "", axis: str = "",
                 limits: list[float | None] | None = None) -> str:
    """Horizontal stacked bars, one per (label, parts), on an axis in `unit` titled `axis` (default: the unit)
    from 0 to past the longest bar (or `limit`), with the total at the end; a dashed line, labelled, at
    `limit` over every bar (e.g. HBM capacity) or at `limits[i]` on bar i."""
    totals = [math.fsum(v for v in parts.values() if finite(v) and v > 0) for _, parts in rows]
    marks = [x for x in [limit, *(limits or [])] if finite(x)]
    ticks = nice_ticks(max(totals + marks + [1e-30]))
    scale, row_h, out = PLOT_W / ticks[-1], 22, []
    pad = 16 if finite(limit) and limit_label else 0      # room above the bars for the limit's label
    for i, ((label, parts), total) in enumerate(zip(rows, totals)):
        y, x = pad + i * row_h, LABEL_W
        out.append(f'<text x="0" y="{y + 15}">{escape(label)}</text>')
        for part, value in parts.items():
            if finite(value) and value > 0:
                w = value * scale
                out.append(rect(x, y + 3, w, row_h - 6, colors.get(part, OTHER_COLOR),
                                f"{label} {part}: {fmt_value(value, unit)} of {fmt_value(total, unit)}"))
                x += w
        out.append(f'<text x="{x + 4:.2f}" y="{y + 15}">{escape(fmt_value(total, unit))}</text>')
        cap = limits[i] if limits and i < len(limits) else None
        if finite(cap):
            cx = LABEL_W + cap * scale
            out.append(limit_mark(cx, y + 1, y + row_h - 1, f"{limit_label}: {fmt_value(cap, unit)}",
                                  f"capacity {fmt_value(cap, unit)}", cx + 4, y + 15, "start"))
    height = pad + len(rows) * row_h
    if finite(limit):
        lx = LABEL_W + limit * scale
        out.append(limit_mark(lx, pad, height, limit_label, limit_label, lx, pad - 4, "middle"))
    out.append(axis_svg(LABEL_W, height + 2, ticks, scale, unit, axis or unit))
    return (f'<svg width="{LABEL_W + PLOT_W + 80}" height="{height + AXIS_H + 4}" role="img">{"".join(out)}</svg>'
            + legend(colors))


def page(title: str, body: str, css: str = "") -> str:
    """The offline page around `body`: the kit's CSS (and the page's own `css` after it), and the script that sorts
    a `sortable` table by a clicked header. `title` is written as given (escape it)."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{CSS}{css}</style></head>
<body>{body}
<script>{SORT_JS}</script>
</body></html>
"""
