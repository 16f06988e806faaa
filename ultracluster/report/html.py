"""Report → report.html, and several Reports → compare.html: self-contained offline pages.

Inline CSS, inline SVG charts and a few lines of inline JavaScript (click a table header to sort);
nothing is loaded from anywhere, every text is escaped, every number written by `table.fmt` (the one rule)
and every chart on an axis with its unit. Sections of report.html: the summary (headline figures, the
warnings, every summary.json field), the interval, the breakdown (a table of each part exposed and hidden,
then stacked bars: the measured mean and one bar per step), the pipeline timeline of the last measured step,
HBM per rank of each stage against the capacity, the stages, the slowest ranks (grouped), the collectives,
how it was emulated, and the scenario.
"""
from __future__ import annotations

import json
import math
import numbers
from html import escape
from typing import TYPE_CHECKING

import pandas as pd

from ultracluster.replay.result import BREAKDOWN_KEYS
from ultracluster.report.ranks import grouped_ranks
from ultracluster.report.table import (
    breakdown_lines, compare_cell, compare_difference, compare_keys, fmt, fmt_interval, fmt_value, hbm_text,
)

if TYPE_CHECKING:
    from ultracluster.report.frames import Report

PART_COLORS = dict(zip(BREAKDOWN_KEYS, (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#bab0ac", "#edc948", "#b07aa1", "#9c755f")))
# the timeline uses the breakdown's colours: compute blue (forward dark, backward light), tp orange, pp green,
# dp red, storage yellow (data stall)
PHASE_COLORS = {"F": "#4e79a7", "B": "#a0cbe8"}
STREAM_COLORS = {"tp": "#f28e2b", "pp": "#59a14f", "dp": "#e15759", "storage": "#edc948", "optimizer": "#2d5a85"}
MEMORY_COLORS = {"weights_gib": "#4e79a7", "gradients_gib": "#f28e2b", "optimizer_gib": "#59a14f",
                 "activations_gib": "#e15759", "reserve_gib": "#bab0ac"}
OTHER_COLOR = "#bab0ac"
PLOT_W, LABEL_W = 760, 150  # px
MAX_HTML_SLICES = 20_000    # timeline rectangles drawn; beyond, only the compute stream
TOP_RANKS = 20              # rows of the slowest-ranks table
HEADLINE = (("step time", "step_time_s"), ("tokens/s", "tokens_per_s"), ("MFU", "mfu"),
            ("HBM peak per rank", "hbm_peak_gib"), ("cost / M tokens", "usd_per_million_tokens"))
NO_PRICE_HTML = "<span>set cluster.price_per_hour_usd or --price-per-hour</span>"   # the cost card without a price
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


def _cell(value, key: str = "", ref: float = 0.0) -> str:
    """A table cell: the number as a person reads it (`table.fmt`), its raw value in `data-v` for sorting."""
    text = escape(fmt(value, key, ref))
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        return f'<td data-v="{float(value)!r}">{text}</td>'
    return f"<td>{text}</td>"


def _table(rows: list[list], header: list[str], sortable: bool = True, keys: list[str] | None = None,
           ref: float = 0.0) -> str:
    """An HTML table; each column's numbers in the unit its key (default: its header) names."""
    keys = keys or header
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v, k, ref) for v, k in zip(row, keys)) + "</tr>" for row in rows)
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}><tr>{head}</tr>{body}</table>"


def _frame_table(frame: pd.DataFrame, sortable: bool = True, ref: float = 0.0) -> str:
    if frame.empty:
        return "<p>none</p>"
    return ('<div class="wide">' + _table(frame.to_numpy(dtype=object).tolist(), [str(c) for c in frame.columns],
                                          sortable, ref=ref) + "</div>")


def _rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0.5):.2f}" height="{h:.2f}" fill="{color}">'
            f"<title>{escape(tip)}</title></rect>")


def _legend(colors: dict[str, str]) -> str:
    return '<p class="legend">' + "".join(
        f'<span><i style="background:{c}"></i>{escape(k)}</span>' for k, c in colors.items()) + "</p>"


def _finite(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top`: steps of 1, 2, 2.5 or 5 x 10^k, about `count` of them."""
    if not (_finite(top) and top > 0):
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


def _limit_mark(x: float, y0: float, y1: float, title: str, label: str, lx: float, ly: float, anchor: str) -> str:
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
    totals = [math.fsum(v for v in parts.values() if _finite(v) and v > 0) for _, parts in rows]
    marks = [x for x in [limit, *(limits or [])] if _finite(x)]
    ticks = nice_ticks(max(totals + marks + [1e-30]))
    scale, row_h, out = PLOT_W / ticks[-1], 22, []
    pad = 16 if _finite(limit) and limit_label else 0      # room above the bars for the limit's label
    for i, ((label, parts), total) in enumerate(zip(rows, totals)):
        y, x = pad + i * row_h, LABEL_W
        out.append(f'<text x="0" y="{y + 15}">{escape(label)}</text>')
        for part, value in parts.items():
            if _finite(value) and value > 0:
                w = value * scale
                out.append(_rect(x, y + 3, w, row_h - 6, colors.get(part, OTHER_COLOR),
                                 f"{label} {part}: {fmt_value(value, unit)} of {fmt_value(total, unit)}"))
                x += w
        out.append(f'<text x="{x + 4:.2f}" y="{y + 15}">{escape(fmt_value(total, unit))}</text>')
        cap = limits[i] if limits and i < len(limits) else None
        if _finite(cap):
            cx = LABEL_W + cap * scale
            out.append(_limit_mark(cx, y + 1, y + row_h - 1, f"{limit_label}: {fmt_value(cap, unit)}",
                                   f"capacity {fmt_value(cap, unit)}", cx + 4, y + 15, "start"))
    height = pad + len(rows) * row_h
    if _finite(limit):
        lx = LABEL_W + limit * scale
        out.append(_limit_mark(lx, pad, height, limit_label, limit_label, lx, pad - 4, "middle"))
    out.append(axis_svg(LABEL_W, height + 2, ticks, scale, unit, axis or unit))
    return (f'<svg width="{LABEL_W + PLOT_W + 80}" height="{height + AXIS_H + 4}" role="img">{"".join(out)}</svg>'
            + _legend(colors))


def interval_svg(rows: list[tuple[str, dict]]) -> str:
    """The 80 % interval of each run's step time as a band with its point estimate, on one labelled axis of
    seconds from 0 (runs without an interval show their point only)."""
    pts = [(label, s.get("step_time_s"), s.get("step_time_low_s"), s.get("step_time_high_s")) for label, s in rows
           if _finite(s.get("step_time_s"))]
    if not pts:
        return "<p>no feasible run</p>"
    top = max(max(p for _, p, _, _ in pts), max((h for _, _, _, h in pts if _finite(h)), default=0.0))
    ticks = nice_ticks(top * 1.05)
    scale, row_h, out = PLOT_W / ticks[-1], 24, []
    for i, (label, point, low, high) in enumerate(pts):
        y = i * row_h
        out.append(f'<text x="0" y="{y + 16}">{escape(label)}</text>')
        if _finite(low) and _finite(high):
            band = fmt_interval(low, high, point, "s")
            out.append(_rect(LABEL_W + low * scale, y + 5, (high - low) * scale, row_h - 10, "#a0cbe8",
                             f"{label}: 80 % interval {band}"))
            out.append(f'<text x="{LABEL_W + high * scale + 4:.2f}" y="{y + 16}">{escape(band)}</text>')
        x = LABEL_W + point * scale
        out.append(f'<line x1="{x:.2f}" y1="{y + 2}" x2="{x:.2f}" y2="{y + row_h - 2}" stroke="#2d5a85" '
                   f'stroke-width="3"><title>{escape(label)}: {escape(fmt_value(point, "s"))}</title></line>')
    height = len(pts) * row_h
    out.append(axis_svg(LABEL_W, height + 2, ticks, scale, "s",
                        "step time (band: 80 % interval; line: point estimate)"))
    return f'<svg width="{LABEL_W + PLOT_W + 140}" height="{height + AXIS_H + 4}" role="img">{"".join(out)}</svg>'


def breakdown_svg(breakdown: pd.DataFrame, summary: dict | None = None) -> str:
    """Stacked bar of the measured mean (from the summary), then one per step: the eight critical-path parts."""
    if breakdown.empty:
        return "<p>no steps replayed</p>"
    rows = []
    if summary and _finite(summary.get("step_time_s")):
        rows.append(("measured mean", {k: summary.get(k) for k in BREAKDOWN_KEYS}))
    for row in breakdown.itertuples(index=False):
        rows.append((f"step {row.step}" + (" (warm-up)" if row.warmup else ""),
                     {k: getattr(row, k) for k in BREAKDOWN_KEYS}))
    return stacked_bars(rows, PART_COLORS, "s", axis="time per step, critical path")


def breakdown_table(summary: dict) -> str:
    """The measured mean breakdown as a table: each part's exposed seconds, share of the step and, for
    communication, seconds hidden behind compute; the in-layer part split into tp, cp and ep when the run
    has cp or ep (`table.breakdown_lines`)."""
    if not _finite(summary.get("step_time_s")) or not summary["step_time_s"] > 0:
        return ""
    body = "".join(f"<tr><td>{escape(label).replace('  ', '&emsp;')}</td><td>{escape(exposed)}</td>"
                   f"<td>{escape(share)}</td><td>{escape(hidden)}</td></tr>"
                   for label, exposed, share, hidden in breakdown_lines(summary))
    return ("<table><tr><th>part</th><th>exposed</th><th>share of the step</th><th>hidden behind compute</th>"
            f"</tr>{body}</table>")


def memory_svg(memory: pd.DataFrame) -> str:
    """HBM of one rank of each stage, stacked by kind, against the rank's capacity."""
    if memory.empty:
        return "<p>no memory model</p>"
    rows = [(f"stage {int(m.stage)}", {k: getattr(m, k) for k in MEMORY_COLORS}) for m in memory.itertuples()]
    cap = float(memory["capacity_gib"].max())
    return stacked_bars(rows, MEMORY_COLORS, "GiB", cap, f"capacity: {fmt_value(cap, 'GiB')} of HBM per rank",
                        axis="HBM per rank")


def timeline_svg(timeline: pd.DataFrame, breakdown: pd.DataFrame) -> str:
    """Pipeline timeline of the last measured step: per stage, compute slices (F/B colored) above a thin
    band per other stream (tp, pp, dp, storage, optimizer), on an axis of time since the step's start."""
    measured = breakdown.loc[~breakdown["warmup"], "step"]
    step = measured.iloc[-1] if len(measured) else (breakdown["step"].iloc[-1] if len(breakdown) else None)
    sl = timeline[timeline["step"] == step] if step is not None else timeline.iloc[:0]
    if sl.empty:
        return "<p>no timeline slices</p>"
    note = ""
    if len(sl) > MAX_HTML_SLICES:
        sl = sl[sl["stream"] == "compute"]
        note = f'<p class="note">{len(sl):,} compute slices shown; other streams are in trace.json.</p>'
    t0, t1 = float(sl["start_s"].min()), float(sl["end_s"].max())
    ticks = nice_ticks(t1 - t0)
    scale, row_h = PLOT_W / ticks[-1], 40
    stages = sorted(sl["stage"].unique())
    bands = {"tp": 23, "pp": 28, "dp": 33, "optimizer": 2, "storage": 33}
    out = []
    for i, stage in enumerate(stages):
        y = i * row_h
        out.append(f'<text x="0" y="{y + 16}">stage {stage}</text>')
        for s in sl[sl["stage"] == stage].itertuples(index=False):
            compute = s.stream == "compute"
            color = PHASE_COLORS.get(s.name[:1], OTHER_COLOR) if compute else STREAM_COLORS.get(s.stream, OTHER_COLOR)
            tip = f"{s.name} [{s.stream}] {fmt_value(s.start_s - t0, 's')} – {fmt_value(s.end_s - t0, 's')}"
            top, h = (2, 20) if compute or s.stream == "optimizer" else (bands.get(s.stream, 33), 4)
            out.append(_rect(LABEL_W + (s.start_s - t0) * scale, y + top, (s.end_s - s.start_s) * scale, h, color,
                             tip))
    y = len(stages) * row_h + 2
    out.append(axis_svg(LABEL_W, y, ticks, scale, "s", "time since the step's start (virtual clock)"))
    replica = sl["replica"].iloc[0] if "replica" in sl.columns else None
    head = f"<p>step {escape(str(step))}" + (f", data-parallel replica {int(replica)} (the critical one)"
                                             if replica is not None and replica >= 0 else "") + "</p>"
    return (head + note + f'<svg width="{LABEL_W + PLOT_W + 40}" height="{y + AXIS_H + 4}" role="img">'
            f'{"".join(out)}</svg>'
            + _legend({"forward (F)": PHASE_COLORS["F"], "backward (B)": PHASE_COLORS["B"], **STREAM_COLORS}))


def _cards(s: dict) -> str:
    """The headline cards (a cost without a price says so and what to set, never "-"), then the summary's warnings,
    one line each: figures that are 0 or absent because their model is off or their input missing."""
    out = []
    for label, key in HEADLINE:
        text = hbm_text(s, "") if key == "hbm_peak_gib" else fmt(s.get(key), key)
        why = NO_PRICE_HTML if key == "usd_per_million_tokens" and s.get(key) is None and s.get("feasible") else ""
        out.append(f'<div class="card"><span>{escape(label)}</span><b>{escape("no price" if why else text)}</b>'
                   f'{why}</div>')
    return '<div class="cards">' + "".join(out) + "</div>" + "".join(
        f'<p class="warning"><b>warning:</b> {escape(str(w))}</p>' for w in s.get("warnings") or [])


def slowest_ranks(ranks: pd.DataFrame, ref: float = 0.0) -> str:
    """The slowest ranks of ranks.csv, slowest first, ranks whose figures read the same on one row with their
    count (`ranks.grouped_ranks`)."""
    if ranks.empty:
        return "<p>none</p>"
    groups = grouped_ranks(ranks, ref)
    note = (f'<p class="note">{min(TOP_RANKS, len(groups))} of {len(groups)} groups of the {len(ranks):,} ranks in '
            f"ranks.csv (each replica-stage group's pacing rank and the stragglers), slowest first; ranks with the "
            f"same figures share a row.</p>")
    top = groups.head(TOP_RANKS)
    return note + _table(top.to_numpy(dtype=object).tolist(), list(top.columns), keys=["", "", "", *top.columns[3:]],
                         ref=ref)


def _page(title: str, body: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{CSS}</style></head>
<body>{body}
<script>{SORT_JS}</script>
</body></html>
"""


def render_html(report: Report) -> str:
    """Render the report as one offline HTML page.

    Args:
        report: the built report (or one read back with `Report.from_run_dir`).

    Returns:
        The HTML text; it references no external URL.
    """
    s = report.summary
    name = escape(str(s.get("scenario")))
    banner = "" if s.get("feasible", True) else \
        f'<div class="infeasible"><b>Infeasible:</b> {escape(str(s.get("reason")))}</div>'
    stages = report.stages.drop(columns=[c for c in MEMORY_COLORS if c in report.stages.columns])
    step = s.get("step_time_s") if _finite(s.get("step_time_s")) else 0.0
    body = f"""<h1>ultracluster: {name}</h1>{banner}
<h2>Summary</h2>{_cards(s)}
<details><summary>every summary.json field</summary>{_fields_table(s)}</details>
<h2>Step time and its 80 % interval</h2><p class="note">the band: fit residuals (leave-one-layout-out), the spread
between Neuron releases, and the factors no measurement pins on this hardware (docs/uncertainty.md)</p>{interval_svg([(
    str(s.get("scenario")), s)])}
<h2>Step time breakdown</h2><p class="note">critical path (the rank that finishes the step last); the exposed
parts add up to the step time; hidden: communication that ran behind compute</p>{breakdown_table(s)}{
        breakdown_svg(report.breakdown, s)}
<h2>Pipeline timeline</h2>{timeline_svg(report.timeline, report.breakdown)}
<h2>HBM per rank</h2><p class="note">one rank of each pipeline stage (every rank of a stage holds the same);
dashed line: the rank's HBM capacity</p>{memory_svg(report.memory)}{_frame_table(report.memory)}
<h2>Stages</h2><p class="note">seconds per step over all ranks of the stage; idle = step time - compute -
exposed comm - data stall - checkpoint - other</p>{_frame_table(stages, ref=step)}
<h2>Slowest ranks</h2>{slowest_ranks(report.ranks, step)}
<h2>Collectives</h2><p class="note">each kind as priced once (time) and how often the critical rank runs it per
step</p>{_frame_table(report.collectives.drop(columns=["time_us"], errors="ignore"))}
<h2>Emulation</h2><p class="note">how the emulator ran (never a prediction)</p>{_fields_table(report.emulation, False)}
<h2>Scenario</h2><pre>{escape(json.dumps(report.scenario, indent=2, default=str))}</pre>"""
    return _page(f"ultracluster: {name}", body)


def _fields_table(fields: dict, sortable: bool = True) -> str:
    """Every field of a dict (summary.json, run.json), each number in the unit its key names, as a key-value
    table; the seconds of a step within float noise of the step time read 0."""
    step = fields.get("step_time_s") if _finite(fields.get("step_time_s")) else 0.0
    rows = "".join(f"<tr><td>{escape(k)}</td>"
                   f"{_cell(json.dumps(v) if isinstance(v, (list, dict)) else v, k, step if k.endswith('_s') else 0)}"
                   f"</tr>" for k, v in fields.items())
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}><tr><th>key</th><th>value</th></tr>{rows}</table>"


def render_compare_html(runs: list[tuple[str, Report]]) -> str:
    """One offline page comparing runs: summaries side by side (differences against the first run, 0 and
    uncoloured within float noise), the 80 % intervals, the measured mean breakdown and the HBM peak of each
    run against its capacity.

    Args:
        runs: (label, report) pairs; the first is the baseline.

    Returns:
        The HTML text.
    """
    labels = [label for label, _ in runs]
    summaries = [rep.summary for _, rep in runs]
    base = summaries[0]
    head = "".join(f"<th>{escape(label)}</th>" + (f"<th>vs {escape(labels[0])}</th>" if i else "")
                   for i, label in enumerate(labels))
    body_rows = []
    for key in compare_keys(summaries):
        cells = []
        for i, s in enumerate(summaries):
            v = s.get(key)
            raw = f' data-v="{float(v)!r}"' if _finite(v) else ""
            cells.append(f"<td{raw}>{escape(compare_cell(s, key))}</td>")
            if i:
                text, cls = compare_difference(key, base, s)
                cells.append(f'<td class="{cls}">{escape(text)}</td>' if cls else f"<td>{escape(text)}</td>")
        body_rows.append(f"<tr><td>{escape(key)}</td>{''.join(cells)}</tr>")
    table = f'<div class="wide"><table class="sortable"><tr><th>field</th>{head}</tr>{"".join(body_rows)}</table></div>'
    bars = [(label, {k: rep.summary.get(k) for k in BREAKDOWN_KEYS}) for label, rep in runs
            if _finite(rep.summary.get("step_time_s"))]
    mem = [(label, {"hbm_peak_gib": rep.summary.get("hbm_peak_gib")}) for label, rep in runs]
    caps = [rep.summary.get("hbm_capacity_gib", rep.memory["capacity_gib"].max() if len(rep.memory) else None)
            for _, rep in runs]   # a run directory written before hbm_capacity_gib: memory.csv's
    body = f"""<h1>ultracluster: {len(runs)} runs compared</h1>
<p class="note">differences against {escape(labels[0])}; green is better, red is worse; a difference within float
noise (one part in a billion of the value, or of the step time) reads 0; compare.csv beside this page has every field in full</p>
<h2>Summaries</h2>{table}
<h2>Step time and 80 % intervals</h2><p class="note">overlapping bands: "faster" is not a finding</p>{interval_svg(
    [(label, rep.summary) for label, rep in runs])}
<h2>Step time breakdown (measured mean)</h2>{stacked_bars(bars, PART_COLORS, "s", axis="time per step, critical path")
                                              if bars else "<p>no feasible run</p>"}
<h2>HBM peak per rank</h2><p class="note">dashed line: the rank's HBM capacity</p>{stacked_bars(
    mem, {"hbm_peak_gib": "#4e79a7"}, "GiB", axis="HBM per rank", limits=caps, limit_label="HBM capacity per rank")}
<h2>Scenarios</h2>""" + "".join(
        f"<details><summary>{escape(label)}</summary><pre>{escape(json.dumps(rep.scenario, indent=2, default=str))}"
        f"</pre></details>" for label, rep in runs)
    return _page(f"ultracluster: compare {escape(', '.join(labels))}", body)


def sensitivity_html(scenario_name: str, point_s: float, low_s: float, high_s: float, rows: list[dict]) -> str:
    """Offline page of `ultracluster sensitivity`: a tornado chart of the step time across each uncertain
    factor's range (fast end to slow end, the point marked), and the table with the sources of each range."""
    ends = [v for r in rows for v in (r["step_time_at_low_s"], r["step_time_at_high_s"]) if _finite(v)]
    lo_all, hi_all = min(ends + [low_s, point_s]), max(ends + [high_s, point_s])
    span = max(hi_all - lo_all, 1e-30)
    scale, row_h, out = PLOT_W / span, 22, []
    label_w = 300
    for i, r in enumerate(rows):
        y = i * row_h
        a, b = sorted((r["step_time_at_low_s"], r["step_time_at_high_s"]))
        out.append(f'<text x="0" y="{y + 15}">{escape(r["factor"])}</text>')
        out.append(_rect(label_w + (a - lo_all) * scale, y + 4, max((b - a) * scale, 1.0), row_h - 8, "#f28e2b",
                         f"{r['factor']}: {fmt_value(a, 's')} – {fmt_value(b, 's')} ({r['swing_pct']:.1f} %)"))
        out.append(f'<text x="{label_w + (b - lo_all) * scale + 4:.2f}" y="{y + 15}">{r["swing_pct"]:.1f} %</text>')
    height = len(rows) * row_h
    px = label_w + (point_s - lo_all) * scale
    out.append(f'<line x1="{px:.2f}" y1="0" x2="{px:.2f}" y2="{height}" stroke="#2d5a85" stroke-width="2">'
               f'<title>point estimate {fmt_value(point_s, "s")}</title></line>')
    svg = f'<svg width="{label_w + PLOT_W + 80}" height="{height + 4}" role="img">{"".join(out)}</svg>'
    head = "".join(f"<th>{escape(c)}</th>" for c in ("factor", "central", "range", "step at low",
                                                      "step at high", "swing", "why"))
    body = "".join(
        f"<tr><td>{escape(r['factor'])}</td><td>{escape(fmt(r['central']))}</td>"
        f"<td>{escape(fmt(r['low']))} – {escape(fmt(r['high']))}</td><td>{fmt_value(r['step_time_at_low_s'], 's')}</td>"
        f"<td>{fmt_value(r['step_time_at_high_s'], 's')}</td><td>{r['swing_pct']:.1f} %</td><td>{escape(r['why'])}</td></tr>"
        for r in rows)
    page = f"""<h1>ultracluster: sensitivity of {escape(scenario_name)}</h1>
<p>step time {fmt_value(point_s, "s")}, 80 % interval {fmt_interval(low_s, high_s, point_s, "s")}
(docs/uncertainty.md)</p>
<h2>Tornado: step time across each factor's range</h2><p class="note">each bar runs from the step time at the
factor's fast end to its slow end, the others at their central values; the line is the point estimate</p>{svg}
<h2>Factors</h2><table class="sortable"><tr>{head}</tr>{body}</table>"""
    return _page(f"ultracluster: sensitivity {escape(scenario_name)}", page)
