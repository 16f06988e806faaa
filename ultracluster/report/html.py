"""Report → report.html, several Reports → compare.html, and the sensitivity page: the run's offline pages.

Made with the HTML kit (`html_kit`: inline CSS, inline SVG charts and a few lines of inline JavaScript to sort a
table by a clicked header); nothing is loaded from anywhere, every text is escaped, every number written by
`table.fmt` (the one rule) and every chart on an axis with its unit. Sections of report.html: the summary
(headline figures, the warnings, every summary.json field), the interval, the breakdown (a table of each part
exposed and hidden, then stacked bars: the measured mean and one bar per step), the pipeline timeline of the
last measured step, HBM per rank of each stage against the capacity, the stages, the slowest ranks (grouped),
the collectives, how it was emulated, and the scenario.
"""
from __future__ import annotations

import json
from html import escape
from typing import TYPE_CHECKING

import pandas as pd

from ultracluster.replay.result import BREAKDOWN_KEYS
from ultracluster.report.html_kit import (
    AXIS_H, LABEL_W, MEMORY_COLORS, OTHER_COLOR, PLOT_W, axis_svg, cell, finite, frame_table, legend, nice_ticks, page,
    rect, stacked_bars, table,
)
from ultracluster.report.ranks import grouped_ranks
from ultracluster.report.compare import PAIR_KEYS, PAIR_NAMES, compare_cell, compare_difference, compare_keys, pairs
from ultracluster.report.table import breakdown_lines, fmt, fmt_interval, fmt_value, hbm_text

if TYPE_CHECKING:
    from ultracluster.report.frames import Report

PART_COLORS = dict(zip(BREAKDOWN_KEYS, (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#bab0ac", "#edc948", "#b07aa1", "#9c755f")))
# the timeline uses the breakdown's colours: compute blue (forward dark, backward light), tp orange, pp green,
# dp red, storage yellow (data stall)
PHASE_COLORS = {"F": "#4e79a7", "B": "#a0cbe8"}
STREAM_COLORS = {"tp": "#f28e2b", "pp": "#59a14f", "dp": "#e15759", "storage": "#edc948", "optimizer": "#2d5a85"}
MAX_HTML_SLICES = 20_000    # timeline rectangles drawn; beyond, only the compute stream
TOP_RANKS = 20              # rows of the slowest-ranks table
HEADLINE = (("step time", "step_time_s"), ("tokens/s", "tokens_per_s"), ("MFU", "mfu"),
            ("HBM peak per rank", "hbm_peak_gib"), ("cost / M tokens", "usd_per_million_tokens"))
# with a training budget: what a buyer decides on, beside the headline (the total is compute plus the file system)
BUDGET_CARDS = (("goodput", "goodput"), ("days to train", "time_to_train_days"), ("total cost", "total_cost_usd"),
                ("of it FSx", "storage_cost_usd"))
NO_PRICE_HTML = "<span>set cluster.price_per_hour_usd or --price-per-hour</span>"   # the cost card without a price


def interval_svg(rows: list[tuple[str, dict]]) -> str:
    """The 80 % interval of each run's step time as a band with its point estimate, on one labelled axis of
    seconds from 0 (runs without an interval show their point only)."""
    pts = [(label, s.get("step_time_s"), s.get("step_time_low_s"), s.get("step_time_high_s")) for label, s in rows
           if finite(s.get("step_time_s"))]
    if not pts:
        return "<p>no feasible run</p>"
    top = max(max(p for _, p, _, _ in pts), max((h for _, _, _, h in pts if finite(h)), default=0.0))
    ticks = nice_ticks(top * 1.05)
    scale, row_h, out = PLOT_W / ticks[-1], 24, []
    for i, (label, point, low, high) in enumerate(pts):
        y = i * row_h
        out.append(f'<text x="0" y="{y + 16}">{escape(label)}</text>')
        if finite(low) and finite(high):
            band = fmt_interval(low, high, point, "s")
            out.append(rect(LABEL_W + low * scale, y + 5, (high - low) * scale, row_h - 10, "#a0cbe8",
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
    if summary and finite(summary.get("step_time_s")):
        rows.append(("measured mean", {k: summary.get(k) for k in BREAKDOWN_KEYS}))
    for row in breakdown.itertuples(index=False):
        rows.append((f"step {row.step}" + (" (warm-up)" if row.warmup else ""),
                     {k: getattr(row, k) for k in BREAKDOWN_KEYS}))
    return stacked_bars(rows, PART_COLORS, "s", axis="time per step, critical path")


def breakdown_table(summary: dict) -> str:
    """The measured mean breakdown as a table: each part's exposed seconds, share of the step and, for
    communication, seconds hidden behind compute; the in-layer part split into tp, cp and ep when the run
    has cp or ep (`table.breakdown_lines`)."""
    if not finite(summary.get("step_time_s")) or not summary["step_time_s"] > 0:
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
            out.append(rect(LABEL_W + (s.start_s - t0) * scale, y + top, (s.end_s - s.start_s) * scale, h, color,
                            tip))
    y = len(stages) * row_h + 2
    out.append(axis_svg(LABEL_W, y, ticks, scale, "s", "time since the step's start (virtual clock)"))
    replica = sl["replica"].iloc[0] if "replica" in sl.columns else None
    head = f"<p>step {escape(str(step))}" + (f", data-parallel replica {int(replica)} (the critical one)"
                                             if replica is not None and replica >= 0 else "") + "</p>"
    return (head + note + f'<svg width="{LABEL_W + PLOT_W + 40}" height="{y + AXIS_H + 4}" role="img">'
            f'{"".join(out)}</svg>'
            + legend({"forward (F)": PHASE_COLORS["F"], "backward (B)": PHASE_COLORS["B"], **STREAM_COLORS}))


def _cards(s: dict) -> str:
    """The headline cards (a cost without a price says so and what to set, never "-"), then the summary's warnings,
    one line each: figures that are 0 or absent because their model is off or their input missing."""
    out = []
    for label, key in HEADLINE:
        text = hbm_text(s, "") if key == "hbm_peak_gib" else fmt(s.get(key), key)
        why = NO_PRICE_HTML if key == "usd_per_million_tokens" and s.get(key) is None and s.get("feasible") else ""
        out.append(f'<div class="card"><span>{escape(label)}</span><b>{escape("no price" if why else text)}</b>'
                   f'{why}</div>')
    for label, key in BUDGET_CARDS:
        if s.get("train_tokens") is None or (key == "storage_cost_usd" and s.get(key) is None):
            continue
        v = s.get(key)
        text = ("no price" if v is None and key == "total_cost_usd" else fmt(v, key)
                + (" days" if key == "time_to_train_days" and isinstance(v, (int, float)) else ""))
        out.append(f'<div class="card"><span>{escape(label)}</span><b>{escape(text)}</b></div>')
    if s.get("mfu_implausible"):
        out.append('<div class="card"><span>flag</span><b>MFU !</b><span>above the best published run of this '
                   'chip</span></div>')
    if s.get("extrapolated"):
        out.append(f'<div class="card"><span>off the calibrated domain</span><b>'
                   f'{escape(", ".join(s["extrapolated"]))}</b><span>interval widened</span></div>')
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
    return note + table(top.to_numpy(dtype=object).tolist(), list(top.columns), keys=["", "", "", *top.columns[3:]],
                        ref=ref)


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
    step = s.get("step_time_s") if finite(s.get("step_time_s")) else 0.0
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
dashed line: the rank's HBM capacity</p>{memory_svg(report.memory)}{frame_table(report.memory)}
<h2>Stages</h2><p class="note">seconds per step over all ranks of the stage; idle = step time - compute -
exposed comm - data stall - checkpoint - other</p>{frame_table(stages, ref=step)}
<h2>Slowest ranks</h2>{slowest_ranks(report.ranks, step)}
<h2>Collectives</h2><p class="note">each kind as timed once and how often the critical rank runs it per
step</p>{frame_table(report.collectives.drop(columns=["time_us"], errors="ignore"))}
<h2>Emulation</h2><p class="note">how the emulator ran (never a prediction)</p>{_fields_table(report.emulation, False)}
<h2>Scenario</h2><pre>{escape(json.dumps(report.scenario, indent=2, default=str))}</pre>"""
    return page(f"ultracluster: {name}", body)


def _fields_table(fields: dict, sortable: bool = True) -> str:
    """Every field of a dict (summary.json, run.json), each number in the unit its key names, as a key-value
    table; the seconds of a step within float noise of the step time read 0."""
    step = fields.get("step_time_s") if finite(fields.get("step_time_s")) else 0.0
    rows = "".join(f"<tr><td>{escape(k)}</td>"
                   f"{cell(json.dumps(v) if isinstance(v, (list, dict)) else v, k, step if k.endswith('_s') else 0)}"
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
            raw = f' data-v="{float(v)!r}"' if finite(v) else ""
            cells.append(f"<td{raw}>{escape(compare_cell(s, key))}</td>")
            if i:
                text, cls = compare_difference(key, base, s)
                cells.append(f'<td class="{cls}">{escape(text)}</td>' if cls else f"<td>{escape(text)}</td>")
        body_rows.append(f"<tr><td>{escape(key)}</td>{''.join(cells)}</tr>")
    fields = f'<div class="wide"><table class="sortable"><tr><th>field</th>{head}</tr>{"".join(body_rows)}</table></div>'
    every = pairs([(label, s) for label, s in zip(labels, summaries)])
    pair_rows = []
    for rec in every:     # one row per pair: its differences, coloured better/worse, the intervals, the flags
        cells = "".join((f'<td class="{rec["diffs"][k][1]}">' if k in rec["diffs"] and rec["diffs"][k][1] else "<td>")
                        + escape(rec["diffs"][k][0] if k in rec["diffs"] else "–") + "</td>" for k in PAIR_KEYS)
        flags = "; ".join(f"{label}: {f}" for label, f in rec["flags"].items())
        note = f"<b>{escape(rec['note'])}</b>" if "a finding" in rec["note"] else escape(rec["note"])
        pair_rows.append(f"<tr><td>{escape(rec['b'])} vs {escape(rec['a'])}</td>{cells}"
                         f"<td style='text-align:left'>{note}</td>"
                         f"<td class='{'worse' if flags else ''}' style='text-align:left;white-space:normal'>"
                         f"{escape(flags) or '–'}</td></tr>")
    pair_head = "".join(f"<th>{escape(PAIR_NAMES[k])}</th>" for k in PAIR_KEYS)
    pair_table = (f'<div class="wide"><table class="pairs"><tr><th>pair (later vs earlier)</th>{pair_head}'
                  f'<th>80 % intervals</th><th>flags</th></tr>{"".join(pair_rows)}</table></div>')
    bars = [(label, {k: rep.summary.get(k) for k in BREAKDOWN_KEYS}) for label, rep in runs
            if finite(rep.summary.get("step_time_s"))]
    mem = [(label, {"hbm_peak_gib": rep.summary.get("hbm_peak_gib")}) for label, rep in runs]
    caps = [rep.summary.get("hbm_capacity_gib", rep.memory["capacity_gib"].max() if len(rep.memory) else None)
            for _, rep in runs]   # a run directory written before hbm_capacity_gib: memory.csv's
    body = f"""<h1>ultracluster: {len(runs)} runs compared</h1>
<p class="note">differences against {escape(labels[0])}; green is better, red is worse; a difference within float
noise (one part in a billion of the value, or of the step time) reads 0; compare.csv beside this page has every field in full</p>
<h2>Every pair</h2><p class="note">each later run against each earlier one ({len(every)} pair{'s' * (len(every) != 1)}):
the step time, days to train, total dollars (compute and FSx) and goodput; a finding (bold) only where the 80 %
step-time intervals are apart</p>{pair_table}
<h2>Summaries</h2>{fields}
<h2>Step time and 80 % intervals</h2><p class="note">overlapping bands: "faster" is not a finding</p>{interval_svg(
    [(label, rep.summary) for label, rep in runs])}
<h2>Step time breakdown (measured mean)</h2>{stacked_bars(bars, PART_COLORS, "s", axis="time per step, critical path")
                                              if bars else "<p>no feasible run</p>"}
<h2>HBM peak per rank</h2><p class="note">dashed line: the rank's HBM capacity</p>{stacked_bars(
    mem, {"hbm_peak_gib": "#4e79a7"}, "GiB", axis="HBM per rank", limits=caps, limit_label="HBM capacity per rank")}
<h2>Scenarios</h2>""" + "".join(
        f"<details><summary>{escape(label)}</summary><pre>{escape(json.dumps(rep.scenario, indent=2, default=str))}"
        f"</pre></details>" for label, rep in runs)
    return page(f"ultracluster: compare {escape(', '.join(labels))}", body)


def sensitivity_html(scenario_name: str, point_s: float, low_s: float, high_s: float, rows: list[dict]) -> str:
    """Offline page of `ultracluster sensitivity`: a tornado chart of the step time across each uncertain
    factor's range (fast end to slow end, the point marked), and the table with the sources of each range."""
    ends = [v for r in rows for v in (r["step_time_at_low_s"], r["step_time_at_high_s"]) if finite(v)]
    lo_all, hi_all = min(ends + [low_s, point_s]), max(ends + [high_s, point_s])
    span = max(hi_all - lo_all, 1e-30)
    scale, row_h, out = PLOT_W / span, 22, []
    label_w = 300
    for i, r in enumerate(rows):
        y = i * row_h
        a, b = sorted((r["step_time_at_low_s"], r["step_time_at_high_s"]))
        out.append(f'<text x="0" y="{y + 15}">{escape(r["factor"])}</text>')
        out.append(rect(label_w + (a - lo_all) * scale, y + 4, max((b - a) * scale, 1.0), row_h - 8, "#f28e2b",
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
    body = f"""<h1>ultracluster: sensitivity of {escape(scenario_name)}</h1>
<p>step time {fmt_value(point_s, "s")}, 80 % interval {fmt_interval(low_s, high_s, point_s, "s")}
(docs/uncertainty.md)</p>
<h2>Tornado: step time across each factor's range</h2><p class="note">each bar runs from the step time at the
factor's fast end to its slow end, the others at their central values; the line is the point estimate</p>{svg}
<h2>Factors</h2><table class="sortable"><tr>{head}</tr>{body}</table>"""
    return page(f"ultracluster: sensitivity {escape(scenario_name)}", body)
