"""Report → report.html: one self-contained offline page (inline CSS and SVG, nothing loaded from anywhere).

Sections: summary, step-time breakdown (stacked bars, one per step), pipeline timeline of the last measured
step (one row per stage), HBM per stage, collectives, and the resolved scenario. Every text is escaped.
"""
from __future__ import annotations

import json
import math
import numbers
from html import escape
from typing import TYPE_CHECKING

import pandas as pd

from ultracluster.replay.events import BREAKDOWN_KEYS

if TYPE_CHECKING:
    from ultracluster.report.frames import Report

PART_COLORS = dict(zip(BREAKDOWN_KEYS, (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#bab0ac", "#edc948", "#b07aa1", "#9c755f")))
PHASE_COLORS = {"F": "#4e79a7", "B": "#f28e2b"}
STREAM_COLORS = {"tp": "#59a14f", "pp": "#76b7b2", "dp": "#e15759", "storage": "#edc948", "optimizer": "#b07aa1"}
OTHER_COLOR = "#bab0ac"
PLOT_W, LABEL_W = 760, 110  # px
CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.infeasible{border:2px solid #c0392b;background:#fdecea;padding:12px;font-size:16px;margin:12px 0}
pre{background:#f7f7f7;padding:12px;overflow:auto}svg text{font-size:11px}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}"""


def fmt(value) -> str:
    """Display text for one cell: 6 significant digits, "n/a" for NaN, "-" for None."""
    if value is None:
        return "-"
    if isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return "n/a" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _table(rows: list[list], header: list[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(fmt(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _frame_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p>none</p>"
    return _table(frame.to_numpy(dtype=object).tolist(), list(frame.columns))


def _rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0.5):.2f}" height="{h:.2f}" fill="{color}">'
            f"<title>{escape(tip)}</title></rect>")


def _legend(colors: dict[str, str]) -> str:
    return '<p class="legend">' + "".join(
        f'<span><i style="background:{c}"></i>{escape(k)}</span>' for k, c in colors.items()) + "</p>"


def breakdown_svg(breakdown: pd.DataFrame) -> str:
    """Stacked horizontal bar per step: the eight critical-path parts, scaled to the longest step."""
    if breakdown.empty:
        return "<p>no steps replayed</p>"
    scale = PLOT_W / max(float(breakdown["step_time_s"].max()), 1e-30)
    out, row_h = [], 22
    for i, row in enumerate(breakdown.itertuples(index=False)):
        y, x = i * row_h, LABEL_W
        label = f"step {row.step}" + (" (warmup)" if row.warmup else "")
        out.append(f'<text x="0" y="{y + 15}">{escape(label)}</text>')
        for part in BREAKDOWN_KEYS:
            w = getattr(row, part) * scale
            if w > 0:
                out.append(_rect(x, y + 3, w, row_h - 6, PART_COLORS[part], f"step {row.step} {part}: "
                                 f"{getattr(row, part):.6g} s of {row.step_time_s:.6g} s"))
                x += w
        out.append(f'<text x="{x + 4:.2f}" y="{y + 15}">{row.step_time_s:.4g} s</text>')
    height = len(breakdown) * row_h
    return (f'<svg width="{LABEL_W + PLOT_W + 70}" height="{height}" role="img">{"".join(out)}</svg>'
            + _legend(PART_COLORS))


def timeline_svg(timeline: pd.DataFrame, breakdown: pd.DataFrame) -> str:
    """Pipeline timeline of the last measured step: per stage, compute slices (F/B colored) above a thin band
    with the other streams (tp, pp, dp, storage, optimizer)."""
    measured = breakdown.loc[~breakdown["warmup"], "step"]
    step = measured.iloc[-1] if len(measured) else (breakdown["step"].iloc[-1] if len(breakdown) else None)
    sl = timeline[timeline["step"] == step] if step is not None else timeline.iloc[:0]
    if sl.empty:
        return "<p>no timeline slices</p>"
    t0, t1 = float(sl["start_s"].min()), float(sl["end_s"].max())
    scale, row_h = PLOT_W / max(t1 - t0, 1e-30), 34
    stages = sorted(sl["stage"].unique())
    out = []
    for i, stage in enumerate(stages):
        y = i * row_h
        out.append(f'<text x="0" y="{y + 16}">stage {stage}</text>')
        for s in sl[sl["stage"] == stage].itertuples(index=False):
            compute = s.stream == "compute"
            color = PHASE_COLORS.get(s.name[:1], OTHER_COLOR) if compute else STREAM_COLORS.get(s.stream, OTHER_COLOR)
            tip = f"{s.name} [{s.stream}] {(s.start_s - t0) * 1e3:.4g}-{(s.end_s - t0) * 1e3:.4g} ms"
            out.append(_rect(LABEL_W + (s.start_s - t0) * scale, y + (2 if compute else 24),
                             (s.end_s - s.start_s) * scale, 20 if compute else 6, color, tip))
    y = len(stages) * row_h + 12
    out.append(f'<text x="{LABEL_W}" y="{y}">0 ms</text>'
               f'<text x="{LABEL_W + PLOT_W}" y="{y}" text-anchor="end">{(t1 - t0) * 1e3:.4g} ms</text>')
    return (f"<p>step {escape(str(step))}</p>"
            f'<svg width="{LABEL_W + PLOT_W + 10}" height="{y + 6}" role="img">{"".join(out)}</svg>'
            + _legend({"forward (F)": PHASE_COLORS["F"], "backward (B)": PHASE_COLORS["B"], **STREAM_COLORS}))


def render_html(report: Report) -> str:
    """Render the report as one offline HTML page.

    Args:
        report: the built report.

    Returns:
        The HTML text; it references no external URL.
    """
    s = report.summary
    name = escape(str(s.get("scenario")))
    banner = "" if s.get("feasible", True) else \
        f'<div class="infeasible"><b>Infeasible:</b> {escape(str(s.get("reason")))}</div>'
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ultracluster: {name}</title><style>{CSS}</style></head>
<body><h1>ultracluster: {name}</h1>{banner}
<h2>Summary</h2>{_table([[k, v] for k, v in s.items()], ["key", "value"])}
<h2>Step time breakdown</h2>{breakdown_svg(report.breakdown)}
<h2>Pipeline timeline</h2>{timeline_svg(report.timeline, report.breakdown)}
<h2>HBM per stage (GiB per rank)</h2>{_frame_table(report.memory)}
<h2>Collectives</h2>{_frame_table(report.collectives)}
<h2>Scenario</h2><pre>{escape(json.dumps(report.scenario, indent=2, default=str))}</pre>
</body></html>
"""
