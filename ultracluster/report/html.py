"""Report → report.html, and several Reports → compare.html: self-contained offline pages.

Inline CSS, inline SVG charts and a few lines of inline JavaScript (click a table header to sort);
nothing is loaded from anywhere, every text is escaped. Sections of report.html: the summary (headline
figures, then every summary.json field), the step-time breakdown (stacked bars: the measured mean, then
one bar per step), the pipeline timeline of the last measured step (one row per stage: compute, and
below it the tp/pp/dp/storage streams), HBM per rank of each stage (stacked bars against the capacity),
the per-stage table, the slowest ranks, the collectives, how it was emulated, and the scenario.
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
HEADLINE = (("step time", "step_time_s", "{:.4g} s"), ("tokens/s", "tokens_per_s", "{:,.0f}"),
            ("MFU", "mfu", "{:.1%}"), ("HBM peak", "hbm_peak_gib", "{:.2f} GiB"),
            ("cost / M tokens", "usd_per_million_tokens", "${:,.3f}"))
CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1150px}
h2{margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
table.sortable th{cursor:pointer}table.sortable th:hover{background:#e8e8e8}
.infeasible{border:2px solid #c0392b;background:#fdecea;padding:12px;font-size:16px;margin:12px 0}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 16px;min-width:120px}
.card b{display:block;font-size:22px}.card span{color:#666}
pre{background:#f7f7f7;padding:12px;overflow:auto}svg text{font-size:11px}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
.note{color:#666}.better{color:#1a7f37}.worse{color:#c0392b}"""
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
        var x = a.children[col].textContent, y = b.children[col].textContent;
        var nx = parseFloat(x.replace(/,/g, "")), ny = parseFloat(y.replace(/,/g, ""));
        if (!isNaN(nx) && !isNaN(ny)) { return dir * (nx - ny); }
        return dir * x.localeCompare(y);
      });
      rows.forEach(function (r) { table.appendChild(r); });
    });
  });
});"""


def fmt(value) -> str:
    """Display text for one cell: 6 significant digits, "n/a" for NaN, "-" for None."""
    if value is None:
        return "-"
    if isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return "n/a" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _table(rows: list[list], header: list[str], sortable: bool = True) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(fmt(v))}</td>" for v in row) + "</tr>" for row in rows)
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}><tr>{head}</tr>{body}</table>"


def _frame_table(frame: pd.DataFrame, sortable: bool = True) -> str:
    if frame.empty:
        return "<p>none</p>"
    return _table(frame.to_numpy(dtype=object).tolist(), [str(c) for c in frame.columns], sortable)


def _rect(x: float, y: float, w: float, h: float, color: str, tip: str) -> str:
    return (f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0.5):.2f}" height="{h:.2f}" fill="{color}">'
            f"<title>{escape(tip)}</title></rect>")


def _legend(colors: dict[str, str]) -> str:
    return '<p class="legend">' + "".join(
        f'<span><i style="background:{c}"></i>{escape(k)}</span>' for k, c in colors.items()) + "</p>"


def _finite(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def stacked_bars(rows: list[tuple[str, dict[str, float]]], colors: dict[str, str], unit: str,
                 limit: float | None = None, limit_label: str = "") -> str:
    """Horizontal stacked bars, one per (label, parts), scaled to the longest bar (or `limit`), with the
    total at the end and an optional dashed limit line (e.g. HBM capacity)."""
    totals = [math.fsum(v for v in parts.values() if _finite(v) and v > 0) for _, parts in rows]
    top = max(totals + ([limit] if _finite(limit) else []) + [1e-30])
    scale, row_h, out = PLOT_W / top, 22, []
    for i, ((label, parts), total) in enumerate(zip(rows, totals)):
        y, x = i * row_h, LABEL_W
        out.append(f'<text x="0" y="{y + 15}">{escape(label)}</text>')
        for part, value in parts.items():
            if _finite(value) and value > 0:
                w = value * scale
                out.append(_rect(x, y + 3, w, row_h - 6, colors.get(part, OTHER_COLOR),
                                 f"{label} {part}: {value:.6g} {unit} of {total:.6g} {unit}"))
                x += w
        out.append(f'<text x="{x + 4:.2f}" y="{y + 15}">{total:.4g} {escape(unit)}</text>')
    height = len(rows) * row_h
    if _finite(limit):
        lx = LABEL_W + limit * scale
        out.append(f'<line x1="{lx:.2f}" y1="0" x2="{lx:.2f}" y2="{height}" stroke="#c0392b" '
                   f'stroke-dasharray="4 3"><title>{escape(limit_label)}</title></line>')
    return (f'<svg width="{LABEL_W + PLOT_W + 80}" height="{height + 4}" role="img">{"".join(out)}</svg>'
            + _legend(colors))


def interval_svg(rows: list[tuple[str, dict]]) -> str:
    """The 80 % interval of each run's step time as a band with its point estimate, on one shared axis from 0
    (runs without an interval show their point only)."""
    pts = [(label, s.get("step_time_s"), s.get("step_time_low_s"), s.get("step_time_high_s")) for label, s in rows
           if _finite(s.get("step_time_s"))]
    if not pts:
        return "<p>no feasible run</p>"
    top = max(max(p for _, p, _, _ in pts), max((h for _, _, _, h in pts if _finite(h)), default=0.0)) * 1.05
    scale, row_h, out = PLOT_W / max(top, 1e-30), 24, []
    for i, (label, point, low, high) in enumerate(pts):
        y = i * row_h
        out.append(f'<text x="0" y="{y + 16}">{escape(label)}</text>')
        if _finite(low) and _finite(high):
            out.append(_rect(LABEL_W + low * scale, y + 5, (high - low) * scale, row_h - 10, "#a0cbe8",
                             f"{label}: 80 % interval {low:.4g} - {high:.4g} s"))
            out.append(f'<text x="{LABEL_W + high * scale + 4:.2f}" y="{y + 16}">{low:.4g} – {high:.4g} s</text>')
        x = LABEL_W + point * scale
        out.append(f'<line x1="{x:.2f}" y1="{y + 2}" x2="{x:.2f}" y2="{y + row_h - 2}" stroke="#2d5a85" '
                   f'stroke-width="3"><title>{escape(label)}: {point:.6g} s</title></line>')
    return f'<svg width="{LABEL_W + PLOT_W + 140}" height="{len(pts) * row_h + 4}" role="img">{"".join(out)}</svg>'


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
    return stacked_bars(rows, PART_COLORS, "s")


def memory_svg(memory: pd.DataFrame) -> str:
    """HBM of one rank of each stage, stacked by kind, against the rank's capacity."""
    if memory.empty:
        return "<p>no memory model</p>"
    rows = [(f"stage {int(m.stage)}", {k: getattr(m, k) for k in MEMORY_COLORS}) for m in memory.itertuples()]
    cap = float(memory["capacity_gib"].max())
    return stacked_bars(rows, MEMORY_COLORS, "GiB", cap, f"HBM per rank: {cap:.4g} GiB")


def timeline_svg(timeline: pd.DataFrame, breakdown: pd.DataFrame) -> str:
    """Pipeline timeline of the last measured step: per stage, compute slices (F/B colored) above a thin
    band per other stream (tp, pp, dp, storage, optimizer)."""
    measured = breakdown.loc[~breakdown["warmup"], "step"]
    step = measured.iloc[-1] if len(measured) else (breakdown["step"].iloc[-1] if len(breakdown) else None)
    sl = timeline[timeline["step"] == step] if step is not None else timeline.iloc[:0]
    if sl.empty:
        return "<p>no timeline slices</p>"
    note = ""
    if len(sl) > MAX_HTML_SLICES:
        sl = sl[sl["stream"] == "compute"]
        note = f'<p class="note">{len(sl)} compute slices shown; other streams are in trace.json.</p>'
    t0, t1 = float(sl["start_s"].min()), float(sl["end_s"].max())
    scale, row_h = PLOT_W / max(t1 - t0, 1e-30), 40
    stages = sorted(sl["stage"].unique())
    bands = {"tp": 23, "pp": 28, "dp": 33, "optimizer": 2, "storage": 33}
    out = []
    for i, stage in enumerate(stages):
        y = i * row_h
        out.append(f'<text x="0" y="{y + 16}">stage {stage}</text>')
        for s in sl[sl["stage"] == stage].itertuples(index=False):
            compute = s.stream == "compute"
            color = PHASE_COLORS.get(s.name[:1], OTHER_COLOR) if compute else STREAM_COLORS.get(s.stream, OTHER_COLOR)
            tip = f"{s.name} [{s.stream}] {(s.start_s - t0) * 1e3:.4g}-{(s.end_s - t0) * 1e3:.4g} ms"
            top, h = (2, 20) if compute or s.stream == "optimizer" else (bands.get(s.stream, 33), 4)
            out.append(_rect(LABEL_W + (s.start_s - t0) * scale, y + top, (s.end_s - s.start_s) * scale, h, color,
                             tip))
    y = len(stages) * row_h + 12
    span = f"{t1 - t0:.4g} s" if t1 - t0 >= 1 else f"{(t1 - t0) * 1e3:.4g} ms"
    out.append(f'<text x="{LABEL_W}" y="{y}">0</text>'
               f'<text x="{LABEL_W + PLOT_W}" y="{y}" text-anchor="end">{span}</text>')
    replica = sl["replica"].iloc[0] if "replica" in sl.columns else None
    head = f"<p>step {escape(str(step))}" + (f", data-parallel replica {int(replica)} (the critical one)"
                                             if replica is not None and replica >= 0 else "") + "</p>"
    return (head + note + f'<svg width="{LABEL_W + PLOT_W + 10}" height="{y + 6}" role="img">{"".join(out)}</svg>'
            + _legend({"forward (F)": PHASE_COLORS["F"], "backward (B)": PHASE_COLORS["B"], **STREAM_COLORS}))


def _cards(s: dict) -> str:
    out = []
    for label, key, spec in HEADLINE:
        v = s.get(key)
        text = spec.format(v) if _finite(v) else "n/a"
        out.append(f'<div class="card"><span>{escape(label)}</span><b>{escape(text)}</b></div>')
    return '<div class="cards">' + "".join(out) + "</div>"


def _slowest_ranks(ranks: pd.DataFrame) -> str:
    if ranks.empty:
        return "<p>none</p>"
    top = ranks.sort_values(["compute_s", "rank"], ascending=[False, True], kind="stable").head(TOP_RANKS)
    cols = ["rank", "replica", "stage", "instance", "shard", "compute_s", "exposed_comm_s", "idle_s", "hbm_gib",
            "slowdown", "paces_group"]
    note = (f'<p class="note">{min(TOP_RANKS, len(ranks))} of the {len(ranks)} ranks in ranks.csv, slowest first '
            f"(ranks.csv lists each replica-stage group's pacing rank and the stragglers).</p>")
    return note + _frame_table(top[[c for c in cols if c in top.columns]])


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
    body = f"""<h1>ultracluster: {name}</h1>{banner}
<h2>Summary</h2>{_cards(s)}
<details><summary>every summary.json field</summary>{_table([[k, v] for k, v in s.items()], ["key", "value"])}</details>
<h2>Step time and its 80 % interval</h2><p class="note">the band: fit residuals (leave-one-layout-out), the spread
between Neuron releases, and the factors no measurement pins on this hardware (docs/uncertainty.md)</p>{interval_svg([(
    str(s.get("scenario")), s)])}
<h2>Step time breakdown</h2><p class="note">critical path (the rank that finishes the step last); the parts
add up to the step time</p>{breakdown_svg(report.breakdown, s)}
<h2>Pipeline timeline</h2>{timeline_svg(report.timeline, report.breakdown)}
<h2>HBM per rank</h2><p class="note">one rank of each pipeline stage (every rank of a stage holds the same);
dashed line: the rank's HBM</p>{memory_svg(report.memory)}{_frame_table(report.memory)}
<h2>Stages</h2><p class="note">seconds per step over all ranks of the stage; idle = step time - compute -
exposed comm - data stall - checkpoint - other</p>{_frame_table(stages)}
<h2>Slowest ranks</h2>{_slowest_ranks(report.ranks)}
<h2>Collectives</h2>{_frame_table(report.collectives)}
<h2>Emulation</h2><p class="note">how the emulator ran (never a prediction)</p>{_table(
        [[k, json.dumps(v) if isinstance(v, (list, dict)) else v] for k, v in report.emulation.items()],
        ["key", "value"], False)}
<h2>Scenario</h2><pre>{escape(json.dumps(report.scenario, indent=2, default=str))}</pre>"""
    return _page(f"ultracluster: {name}", body)


COMPARE_KEYS = ("instance_type", "instances", "chips", "ranks", "layout", "feasible", "step_time_s", "step_time_low_s",
                "step_time_high_s", "tokens_per_s",
                "seq_per_s", "mfu", "hbm_peak_gib", *BREAKDOWN_KEYS, "cost_per_step_usd", "usd_per_million_tokens")
HIGHER_IS_BETTER = {"tokens_per_s", "seq_per_s", "mfu"}
NEUTRAL = {"instances", "chips", "ranks"}


def difference(key: str, base, value) -> tuple[str, str]:
    """Text and CSS class of `value` against `base` for one summary key: "+0.12 (+4.5 %)", better/worse."""
    if isinstance(base, bool) or isinstance(value, bool) or not (_finite(base) and _finite(value)):
        if isinstance(base, numbers.Real) and isinstance(value, numbers.Real) and not (
                isinstance(base, bool) or isinstance(value, bool)):
            return "n/a", ""     # NaN on a side: an infeasible run has no step time
        return ("=" if base == value else "differs"), ""
    d = value - base
    if d == 0:
        return "=", ""
    pct = f" ({d / base:+.1%})" if base else ""
    cls = "" if key in NEUTRAL else ("better" if (d > 0) == (key in HIGHER_IS_BETTER) else "worse")
    return f"{d:+.4g}{pct}", cls


def render_compare_html(runs: list[tuple[str, Report]]) -> str:
    """One offline page comparing runs: summaries side by side (differences against the first run) and
    the measured mean breakdown of each.

    Args:
        runs: (label, report) pairs; the first is the baseline.

    Returns:
        The HTML text.
    """
    labels = [label for label, _ in runs]
    base = runs[0][1].summary
    head = "".join(f"<th>{escape(label)}</th>" + (f"<th>vs {escape(labels[0])}</th>" if i else "")
                   for i, label in enumerate(labels))
    body_rows = []
    for key in COMPARE_KEYS:
        cells = []
        for i, (_, rep) in enumerate(runs):
            v = rep.summary.get(key)
            cells.append(f"<td>{escape(fmt(v))}</td>")
            if i:
                text, cls = difference(key, base.get(key), v)
                cells.append(f'<td class="{cls}">{escape(text)}</td>')
        body_rows.append(f"<tr><td>{escape(key)}</td>{''.join(cells)}</tr>")
    table = f'<table class="sortable"><tr><th>field</th>{head}</tr>{"".join(body_rows)}</table>'
    bars = [(label, {k: rep.summary.get(k) for k in BREAKDOWN_KEYS}) for label, rep in runs
            if _finite(rep.summary.get("step_time_s"))]
    mem = [(label, {"hbm_peak_gib": rep.summary.get("hbm_peak_gib")}) for label, rep in runs]
    body = f"""<h1>ultracluster: {len(runs)} runs compared</h1>
<p class="note">differences against {escape(labels[0])}; green is better, red is worse</p>
<h2>Summaries</h2>{table}
<h2>Step time and 80 % intervals</h2><p class="note">overlapping bands: "faster" is not a finding</p>{interval_svg(
    [(label, rep.summary) for label, rep in runs])}
<h2>Step time breakdown (measured mean)</h2>{stacked_bars(bars, PART_COLORS, "s") if bars else "<p>no feasible run</p>"}
<h2>HBM peak per rank</h2>{stacked_bars(mem, {"hbm_peak_gib": "#4e79a7"}, "GiB")}
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
                         f"{r['factor']}: {a:.4g} - {b:.4g} s ({r['swing_pct']:.1f} %)"))
        out.append(f'<text x="{label_w + (b - lo_all) * scale + 4:.2f}" y="{y + 15}">{r["swing_pct"]:.1f} %</text>')
    height = len(rows) * row_h
    px = label_w + (point_s - lo_all) * scale
    out.append(f'<line x1="{px:.2f}" y1="0" x2="{px:.2f}" y2="{height}" stroke="#2d5a85" stroke-width="2">'
               f'<title>point estimate {point_s:.6g} s</title></line>')
    svg = f'<svg width="{label_w + PLOT_W + 80}" height="{height + 4}" role="img">{"".join(out)}</svg>'
    head = "".join(f"<th>{escape(c)}</th>" for c in ("factor", "central", "range", "step at low (s)",
                                                      "step at high (s)", "swing", "why"))
    body = "".join(
        f"<tr><td>{escape(r['factor'])}</td><td>{escape(fmt(r['central']))}</td>"
        f"<td>{escape(fmt(r['low']))} – {escape(fmt(r['high']))}</td><td>{r['step_time_at_low_s']:.4g}</td>"
        f"<td>{r['step_time_at_high_s']:.4g}</td><td>{r['swing_pct']:.1f} %</td><td>{escape(r['why'])}</td></tr>"
        for r in rows)
    page = f"""<h1>ultracluster: sensitivity of {escape(scenario_name)}</h1>
<p>step time {point_s:.4g} s, 80 % interval {low_s:.4g} – {high_s:.4g} s (docs/uncertainty.md)</p>
<h2>Tornado: step time across each factor's range</h2><p class="note">each bar runs from the step time at the
factor's fast end to its slow end, the others at their central values; the line is the point estimate</p>{svg}
<h2>Factors</h2><table class="sortable"><tr>{head}</tr>{body}</table>"""
    return _page(f"ultracluster: sensitivity {escape(scenario_name)}", page)
