"""A sweep's table → sweep.html: one offline page (inline CSS and SVG, nothing loaded from anywhere).

Sections: what was swept; a heatmap when two or more keys vary (the first key's values across, every
combination of the others down, a cell per variant coloured by its goodput, or its tokens/s when goodput does not
move, with the value and its 80 % interval written in it); a line chart per varied key and figure (step time, goodput,
days to train, tokens/s): the key's values along x, one line per combination of the other keys, each point with
its 80 % interval drawn as a whisker; the warnings; the table. Follows `report.html` (the HTML kit,
`report.html_kit`: its CSS, escaping and sortable tables).
"""
from __future__ import annotations

import json
import math
from html import escape

import pandas as pd

from ..report import html_kit as kit
from .evaluate import WARNING_JOIN

__all__ = ["HEAT_HIGH", "HEAT_LOW", "LINE_COLORS", "sweep_html"]

CHART_W, CHART_H, MARGIN = 520, 230, 56
LINE_COLORS = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#9c755f", "#edc948")
HEAT_LOW, HEAT_HIGH = (0xf2, 0xf0, 0xf7), (0x54, 0x27, 0x8f)     # light to dark purple: worse to better
MAX_SERIES = len(LINE_COLORS)
# figure column → (title, interval columns or None, scale, unit)
FIGURES = {
    "step_time_s": ("step time", ("step_time_low_s", "step_time_high_s"), 1.0, "s"),
    "goodput": ("goodput", None, 100.0, "%"),
    "time_to_train_days": ("days to train", ("time_to_train_low_days", "time_to_train_high_days"), 1.0, "days"),
    "tokens_per_s": ("tokens/s", ("tokens_per_s_low", "tokens_per_s_high"), 1.0, ""),
}


def _text(v) -> str:
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v).lower() if isinstance(v, bool) else str(v)


def _fin(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v: float, unit: str) -> str:
    if not _fin(v):
        return "-"
    text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return f"{text} {unit}".strip()


def _order(values) -> list:
    """A key's distinct values: numbers ascending, otherwise in the order they come."""
    seen = list(dict.fromkeys(_text(v) for v in values))
    raw = {_text(v): v for v in values}
    if all(_fin(raw[s]) for s in seen):
        return sorted(seen, key=lambda s: raw[s])
    return seen


def _figures(frame: pd.DataFrame) -> list[str]:
    ok = frame[frame["status"] == "ok"]
    out = []
    for col in FIGURES:
        vals = pd.to_numeric(ok[col], errors="coerce") if col in ok else pd.Series(dtype=float)
        if vals.notna().any() and not (col == "goodput" and vals.nunique() <= 1 and not ok.empty
                                       and frame["goodput"].max() == 1.0):
            out.append(col)
    return out


def line_chart(frame: pd.DataFrame, key: str, keys: list[str], col: str, standalone: bool = False) -> str:
    """One figure against one varied key: a line per combination of the other keys, whiskers for the interval.
    `standalone`: an SVG document alone, its legend inside it (docs/sweeps.md's chart)."""
    title, band, scale, unit = FIGURES[col]
    xs = _order(frame[key].tolist())
    others = [k for k in keys if k != key]
    ok = frame[(frame["status"] == "ok") & pd.to_numeric(frame[col], errors="coerce").notna()]
    series: dict[str, list] = {}
    for _, r in ok.iterrows():
        name = ", ".join(f"{k}={_text(r[k])}" for k in others) or title
        series.setdefault(name, []).append(r)
    names = list(series)[:MAX_SERIES]
    ys = []
    for n in names:
        for r in series[n]:
            ys.append(r[col] * scale)
            if band and _fin(r[band[0]]):
                ys += [r[band[0]] * scale, r[band[1]] * scale]
    if not ys:
        return ""
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    w, h = CHART_W - 2 * MARGIN, CHART_H - 2 * MARGIN

    def px(i: int) -> float:
        return MARGIN + (w * (i + 0.5) / len(xs))

    def py(v: float) -> float:
        return MARGIN + h - (v - lo) / (hi - lo) * h
    height = CHART_H + (18 * len(names) + 14 if standalone else 0)
    xmlns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    parts = [f'<svg{xmlns} class="chart" data-key="{escape(key)}" data-figure="{col}" width="{CHART_W}" '
             f'height="{height}" viewBox="0 0 {CHART_W} {height}" role="img"><title>{escape(title)} by '
             f'{escape(key)}</title>' + ('<rect width="100%" height="100%" fill="#fff"/>' if standalone else ""),
             f'<line x1="{MARGIN}" y1="{MARGIN + h}" x2="{MARGIN + w}" y2="{MARGIN + h}" stroke="#888"/>',
             f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{MARGIN + h}" stroke="#888"/>']
    for frac in (0.0, 0.5, 1.0):
        v = lo + frac * (hi - lo)
        parts.append(f'<text x="{MARGIN - 6}" y="{py(v) + 4:.1f}" font-size="11" text-anchor="end">'
                     f'{escape(_fmt(v, ""))}</text>')
    for i, x in enumerate(xs):
        parts.append(f'<text x="{px(i):.1f}" y="{MARGIN + h + 16}" font-size="11" text-anchor="middle">'
                     f'{escape(x[:14])}</text>')
    parts.append(f'<text x="{MARGIN + w / 2}" y="{CHART_H - 8}" font-size="12" text-anchor="middle">'
                 f'{escape(key)}</text>')
    parts.append(f'<text x="{MARGIN}" y="{MARGIN - 14}" font-size="12">{escape(title)}'
                 f'{" (" + unit + ")" if unit else ""}{", 80 % interval" if band else ""}</text>')
    colors = {}
    for s, n in enumerate(names):
        color = LINE_COLORS[s % len(LINE_COLORS)]
        colors[n] = color
        pts = sorted(((xs.index(_text(r[key])), r) for r in series[n]), key=lambda t: t[0])
        if len(pts) > 1:
            path = " ".join(f"{px(i):.1f},{py(r[col] * scale):.1f}" for i, r in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2.5"/>')
        for i, r in pts:
            x, y = px(i), py(r[col] * scale)
            tip = f"{n}: {key}={_text(r[key])}: {_fmt(r[col] * scale, unit)}"
            if band and _fin(r[band[0]]):
                y0, y1 = py(r[band[0]] * scale), py(r[band[1]] * scale)
                tip += f" ({_fmt(r[band[0]] * scale, unit)}–{_fmt(r[band[1]] * scale, unit)})"
                parts.append(f'<line class="interval" x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" '
                             f'stroke="{color}" stroke-width="7" stroke-opacity="0.35"/>')
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{color}"><title>{escape(tip)}</title>'
                         f'</circle>')
    if standalone:
        for s_, n in enumerate(names):
            y = CHART_H + 16 + 18 * s_
            parts.append(f'<rect x="{MARGIN}" y="{y - 9}" width="12" height="10" fill="{colors[n]}"/>'
                         f'<text x="{MARGIN + 18}" y="{y}" font-size="12">{escape(n)}</text>')
        return "".join(parts) + "</svg>\n"
    parts.append("</svg>")
    more = f"<p>{len(series) - len(names)} more lines not drawn (see the table)</p>" if len(series) > len(names) else ""
    return '<div class="chart">' + "".join(parts) + (kit.legend(colors) if len(names) > 1 or others else "") + more + \
        "</div>"


def _mix(t: float) -> str:
    c = [round(a + (b - a) * t) for a, b in zip(HEAT_LOW, HEAT_HIGH)]
    return "#%02x%02x%02x" % tuple(c)


def heatmap(frame: pd.DataFrame, keys: list[str]) -> str:
    """The first key's values across, each combination of the others down; a cell per variant."""
    col = "goodput" if frame["goodput"].nunique(dropna=True) > 1 else "tokens_per_s"
    title, band, scale, unit = FIGURES[col]
    across, down = keys[0], keys[1:]
    xs = _order(frame[across].tolist())
    ok = frame[frame["status"] == "ok"]
    vals = pd.to_numeric(ok[col], errors="coerce").dropna()
    lo, hi = (float(vals.min()), float(vals.max())) if len(vals) else (0.0, 1.0)
    rows: dict[str, dict[str, object]] = {}
    for _, r in frame.iterrows():
        label = ", ".join(f"{k}={_text(r[k])}" for k in down)
        rows.setdefault(label, {})[_text(r[across])] = r
    head = "".join(f"<th>{escape(across)}={escape(x)}</th>" for x in xs)
    body = []
    for label, cells in rows.items():
        tds = []
        for x in xs:
            r = cells.get(x)
            if r is None:
                tds.append("<td></td>")
                continue
            if r["status"] != "ok" or not _fin(r[col]):
                tds.append(f'<td class="cell" style="background:#ddd">{escape(str(r["status"]))}</td>')
                continue
            t = (r[col] - lo) / (hi - lo) if hi > lo else 1.0
            fg = "#fff" if t > 0.55 else "#111"
            text = f"{r[col] * scale:.2f} %" if col == "goodput" else _fmt(r[col] * scale, unit)
            step = f'<br><small>step {_fmt(r["step_time_s"], "s")} ({_fmt(r["step_time_low_s"], "")}–' \
                   f'{_fmt(r["step_time_high_s"], "")})</small>' if _fin(r["step_time_low_s"]) else ""
            tds.append(f'<td class="cell" style="background:{_mix(t)};color:{fg}" title="{escape(label)}">'
                       f'{escape(text)}{step}</td>')
        body.append(f"<tr><th>{escape(label)}</th>{''.join(tds)}</tr>")
    return (f'<h2>{escape(title)} by {escape(across)} and {escape(", ".join(down))}</h2>'
            f'<p>Darker is better; each cell says its step time and 80 % interval.</p>'
            f'<table class="heatmap"><tr><th></th>{head}</tr>{"".join(body)}</table>')


CSS = """table.heatmap td.cell{padding:8px 12px;text-align:center;font-variant-numeric:tabular-nums}
div.charts{display:flex;flex-wrap:wrap;gap:12px}div.chart{border:1px solid #ddd;padding:4px}"""


def sweep_html(frame: pd.DataFrame, summary: dict, keys: list[str]) -> str:
    """The page of a sweep (see the module's text)."""
    name = escape(str(summary.get("scenario")))
    what = (f"{len(frame)} of {summary.get('variants')} variants, the {'pairs' if summary.get('zip') else 'grid'} "
            f"of {', '.join(keys)}" + (f"; {summary['hours']:g} h of each emulated with failures and checkpoints"
                                       if summary.get("hours") else "; goodput expected in closed form")
            + f"; assumptions {summary.get('assumptions', 'on')}; evaluated by {summary.get('evaluated_by', '?')}")
    parts = [f"<style>{CSS}</style><h1>ultracluster sweep: {name}</h1><p>{escape(what)}</p>"]
    if not summary.get("finished", True):
        parts.append("<p><b>Not finished:</b> the rows evaluated so far; run the sweep again into this directory to "
                     "evaluate the rest.</p>")
    if len(keys) >= 2 and len(frame):
        parts.append(heatmap(frame, keys))
    figs = _figures(frame)
    for key in keys:
        charts = "".join(line_chart(frame, key, keys, col) for col in figs)
        if charts:
            parts.append(f"<h2>By {escape(key)}</h2><div class=\"charts\">{charts}</div>")
    warnings = list(dict.fromkeys(p for w in frame["warnings"].fillna("") for p in str(w).split(WARNING_JOIN) if p))
    if warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in warnings) + "</ul>")
    if summary.get("failures"):
        parts.append("<h2>Failures</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in summary["failures"])
                     + "</ul>")
    shown = ["variant", *keys, "status", "step_time_s", "step_time_low_s", "step_time_high_s", "tokens_per_s", "mfu",
             "hbm_peak_gib", "goodput", "time_to_train_days", "total_cost_usd", "price_source", "reason"]
    rows = [[(_text(v) if k in keys else v) for k, v in zip(shown, r)]
            for r in frame[shown].to_numpy(dtype=object).tolist()]
    parts.append("<h2>Every variant</h2><div class=\"wide\">" + kit.table(rows, shown) + "</div>")
    return kit.page(f"ultracluster sweep {name}", "".join(parts))
