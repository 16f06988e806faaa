"""A finished plan → plan.html: one offline page (inline CSS and SVG, nothing loaded from anywhere).

Sections: what was searched and how fast, what ranked the layouts and the scenario's own layout; the best layout
of each instance type; the top layouts with the value that ranked them, their fast and replayed step times, the
80 % interval, the axes off the calibrated domain, an MFU above the best published (marked) and the comparison
with the scenario's own layout; the Pareto chart of tokens/s against $ per million tokens (every feasible layout
of a priced instance type a dot, the Pareto front joined, the top layouts numbered; the types without a price
named); tokens/s against HBM use for every instance type, priced or not (a colour per type); the near-misses, the
infeasible layouts closest to fitting, each with the HBM it needs against what a rank has; the notes. Follows
`report.html` (the HTML kit, `report.html_kit`: the same CSS, escaping and sortable tables).
"""
from __future__ import annotations

import math
import re
from html import escape
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import stacks
from ..cluster.catalog import NO_PRICE
from ..layouts.ranking import END_NAMES, pareto_front
from ..report import html_kit as kit
from ..report.html_kit import MEMORY_COLORS, stacked_bars

from .text import OBJECTIVE_SHORT, band_text, mfu_text, mfu_threshold_text, ranking_lines

if TYPE_CHECKING:
    from .result import PlanResult

__all__ = ["DOT_COLOR", "FRONT_COLOR", "TOP_COLOR", "TYPE_COLORS", "pareto_front", "render_plan_html"]

CHART_W, CHART_H, MARGIN = 760, 300, 60   # px
MAX_DOTS = 4000                            # dots drawn per chart (the front and the top layouts always)
NEAR_MISSES = 8
TOP_COLOR, FRONT_COLOR, DOT_COLOR = "#e15759", "#4e79a7", "#bab0ac"
TYPE_COLORS = ("#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#9c755f", "#edc948")   # one per instance type
IMPLAUSIBLE_STROKE = "#000"                # the outline of a dot whose MFU is above the best published


def _scale(lo: float, hi: float, px: float, log: bool):
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    span = (hi - lo) or 1.0
    return (lambda v: (((math.log10(v) if log else v) - lo) / span) * px), lo, hi


def _ranking(t: pd.DataFrame) -> pd.Series:
    """Rows a chart plots: feasible, not folded into an equivalent row, with a speed."""
    ok = t["feasible"] & np.isfinite(t["tokens_per_s"].astype(float))
    if "same_as" in t.columns:
        ok &= t["same_as"] == ""
    return ok


def _thin(keep: np.ndarray) -> np.ndarray:
    """`keep` with at most MAX_DOTS of the other rows added, evenly spread."""
    rest = np.flatnonzero(~keep)
    if rest.size > MAX_DOTS:
        rest = rest[np.linspace(0, rest.size - 1, MAX_DOTS).astype(int)]
    keep = keep.copy()
    keep[rest] = True
    return keep


def _axes(x_label: str, log: bool, xticks, fx, fy, ymax: float, xfmt) -> list[str]:
    X = lambda v: MARGIN + fx(v)                    # noqa: E731
    Y = lambda v: CHART_H + 10 - fy(v)              # noqa: E731
    out = [f'<line x1="{MARGIN}" y1="{CHART_H + 10}" x2="{MARGIN + CHART_W}" y2="{CHART_H + 10}" stroke="#888"/>',
           f'<line x1="{MARGIN}" y1="10" x2="{MARGIN}" y2="{CHART_H + 10}" stroke="#888"/>']
    for v in xticks:
        out.append(f'<text x="{X(v):.1f}" y="{CHART_H + 26}" text-anchor="middle">{xfmt(v)}</text>')
    for v in np.linspace(0, ymax, 5):
        out.append(f'<text x="{MARGIN - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    out.append(f'<text x="{MARGIN + CHART_W / 2}" y="{CHART_H + 44}" text-anchor="middle">{escape(x_label)}'
               f'{" (log scale)" if log else ""}</text>'
               f'<text x="14" y="{CHART_H / 2}" transform="rotate(-90 14 {CHART_H / 2})" text-anchor="middle">'
               f"tokens/s</text>")
    return out


def _svg(chart_id: str, parts: list[str]) -> str:
    return f'<svg id="{chart_id}" width="{MARGIN + CHART_W + 20}" height="{CHART_H + 54}" role="img">{"".join(parts)}</svg>'


def _top_marks(result: PlanResult, sub: pd.DataFrame) -> np.ndarray:
    top_labels = {r["label"]: i + 1 for i, r in enumerate(result.top)}
    return sub["layout"].map(top_labels).fillna(0).astype(int).to_numpy()


def _unpriced(result: PlanResult) -> list[str]:
    t = result.table
    prices = (result.summary.get("prices") or {})
    named = [k for k, v in prices.items() if v.get("usd_per_hour") is None]
    return named or sorted(set(t.loc[_ranking(t) & ~np.isfinite(t["usd_per_million_tokens"].astype(float)),
                                     "instance"]))


def pareto_svg(result: PlanResult) -> str:
    """Scatter of the feasible layouts of priced instance types: $ per million tokens (x) against tokens/s (y);
    the types without a price are named under it (they are on the HBM chart)."""
    t = result.table
    ok = _ranking(t) & np.isfinite(t["usd_per_million_tokens"].astype(float))
    sub = t[ok]
    unpriced = _unpriced(result)
    missing = (f'<p class="note">Not on the cost axis: {escape(", ".join(unpriced))} ({escape(NO_PRICE)}, or '
               f'--price-per-hour TYPE=USD); their layouts are on the chart below.</p>') if unpriced else ""
    if sub.empty:
        why = f"no instance type searched has a price: {', '.join(unpriced)}" if unpriced else "no layout fits"
        return f'<p class="note">No cost axis: {escape(why)}.</p>' + missing
    cost, speed = sub["usd_per_million_tokens"].to_numpy(float), sub["tokens_per_s"].to_numpy(float)
    front = pareto_front(cost, speed)
    is_top = _top_marks(result, sub)
    keep = np.zeros(len(sub), dtype=bool)
    keep[front] = True
    keep[is_top > 0] = True
    keep = _thin(keep)
    log = cost.max() / max(cost.min(), 1e-30) > 20
    fx, *_ = _scale(cost.min() * 0.95, cost.max() * 1.05, CHART_W, log)
    fy, *_ = _scale(0.0, speed.max() * 1.05, CHART_H, False)
    X = lambda v: MARGIN + fx(v)                    # noqa: E731
    Y = lambda v: CHART_H + 10 - fy(v)              # noqa: E731
    ticks = np.geomspace(cost.min(), cost.max(), 5) if log else np.linspace(cost.min(), cost.max(), 5)
    out = _axes("$ per million tokens", log, ticks, fx, fy, speed.max(), lambda v: f"${v:.3g}")
    on_front = set(front.tolist())
    for i in np.flatnonzero(keep):
        if is_top[i] or i in on_front:
            continue
        out.append(f'<circle cx="{X(cost[i]):.1f}" cy="{Y(speed[i]):.1f}" r="2" fill="{DOT_COLOR}"{_outline(sub, i)}>'
                   f"<title>{escape(sub['layout'].iloc[i])}: {speed[i]:,.0f} tokens/s, ${cost[i]:.4g}/M"
                   f"{_flag_text(sub, i)}</title></circle>")
    pts = " ".join(f"{X(cost[i]):.1f},{Y(speed[i]):.1f}" for i in front)
    out.append(f'<polyline points="{pts}" fill="none" stroke="{FRONT_COLOR}" stroke-width="1.5"/>')
    for i in front:
        out.append(f'<circle cx="{X(cost[i]):.1f}" cy="{Y(speed[i]):.1f}" r="3.5" fill="{FRONT_COLOR}"'
                   f'{_outline(sub, i)}><title>Pareto: {escape(sub["layout"].iloc[i])}: {speed[i]:,.0f} tokens/s, '
                   f"${cost[i]:.4g}/M{_flag_text(sub, i)}</title></circle>")
    out += _top_circles(is_top, sub, lambda i: X(cost[i]), lambda i: Y(speed[i]))
    legend = (f'<p class="legend"><span><i style="background:{DOT_COLOR}"></i>feasible layout</span>'
              f'<span><i style="background:{FRONT_COLOR}"></i>Pareto front ({len(front)})</span>'
              f'<span><i style="background:{TOP_COLOR}"></i>top layouts</span>{_legend(result)}</p>')
    return _svg("pareto", out) + legend + missing


IMPLAUSIBLE_LEGEND = (f'<span><i style="background:#fff;border:1.5px solid {IMPLAUSIBLE_STROKE}"></i>MFU above the '
                      f'best published for the chip (outlined: {{thresholds}})</span>')


def _legend(result: PlanResult) -> str:
    """IMPLAUSIBLE_LEGEND with each chip's threshold."""
    best = result.summary.get("mfu_best_published") or {}
    known = ", ".join(f"{k} {100 * v:.1f} %" for k, v in best.items() if v is not None) or "none published"
    return IMPLAUSIBLE_LEGEND.replace("{thresholds}", escape(known))


def _outline(sub: pd.DataFrame, i: int) -> str:
    """A dot's outline when its MFU is above the best published (`mfu_implausible`)."""
    flagged = "mfu_implausible" in sub.columns and bool(sub["mfu_implausible"].iloc[i])
    return f' stroke="{IMPLAUSIBLE_STROKE}" stroke-width="1.2"' if flagged else ""


def _flag_text(sub: pd.DataFrame, i: int) -> str:
    """What a dot's tooltip adds: the axes off the calibrated domain, an MFU above the best published."""
    r = sub.iloc[i]
    out = f"; off the calibrated domain: {r['extrapolated']}" if r.get("extrapolated") else ""
    best = r.get("mfu_best_published")
    above = "; MFU above the best published for the chip" + (
        f" ({100 * best:.1f} %)" if best is not None and math.isfinite(best) else "")
    return escape(out + (above if r.get("mfu_implausible") else ""))


def _top_circles(is_top: np.ndarray, sub: pd.DataFrame, x, y) -> list[str]:
    return [f'<circle cx="{x(i):.1f}" cy="{y(i):.1f}" r="6" fill="none" stroke="{TOP_COLOR}" stroke-width="2">'
            f'<title>#{is_top[i]} {escape(sub["layout"].iloc[i])}</title></circle>'
            f'<text x="{x(i) + 8:.1f}" y="{y(i) - 6:.1f}" fill="{TOP_COLOR}">#{is_top[i]}</text>'
            for i in np.flatnonzero(is_top)]


def types_svg(result: PlanResult) -> str:
    """Every instance type's feasible layouts, priced or not: HBM use of the worst stage (% of a rank's HBM, x)
    against tokens/s (y), a colour per type, the best of each type and the top layouts marked."""
    t = result.table
    sub = t[_ranking(t)]
    if sub.empty:
        return '<p class="note">No layout fits.</p>'
    types = list(dict.fromkeys(t["instance"]))
    color = {k: TYPE_COLORS[i % len(TYPE_COLORS)] for i, k in enumerate(types)}
    frac = 100 * (sub["hbm_fraction"] if "hbm_fraction" in sub.columns
                  else sub["hbm_peak_gib"] / sub["hbm_capacity_gib"]).to_numpy(float)
    speed = sub["tokens_per_s"].to_numpy(float)
    is_top = _top_marks(result, sub)
    best = sub["best_of_type"].to_numpy(bool) if "best_of_type" in sub.columns else np.zeros(len(sub), bool)
    keep = np.zeros(len(sub), dtype=bool)
    keep[best | (is_top > 0)] = True
    keep = _thin(keep)
    lo = max(0.0, math.floor(frac.min() / 10) * 10)
    fx, *_ = _scale(lo, 100.0, CHART_W, False)
    fy, *_ = _scale(0.0, speed.max() * 1.05, CHART_H, False)
    X = lambda v: MARGIN + fx(v)                    # noqa: E731
    Y = lambda v: CHART_H + 10 - fy(v)              # noqa: E731
    out = _axes("HBM used by the worst stage, % of a rank's HBM", False, np.linspace(lo, 100, 6), fx, fy,
                speed.max(), lambda v: f"{v:.0f}%")
    headroom = result.summary.get("hbm_headroom")
    if headroom:
        x = X(100 * (1 - headroom))
        out.append(f'<line x1="{x:.1f}" y1="10" x2="{x:.1f}" y2="{CHART_H + 10}" stroke="#888" '
                   f'stroke-dasharray="4 3"><title>--hbm-headroom {headroom:g}</title></line>')
    inst = sub["instance"].to_numpy()
    for i in np.flatnonzero(keep):
        r = 4.5 if best[i] else 2
        out.append(f'<circle cx="{X(frac[i]):.1f}" cy="{Y(speed[i]):.1f}" r="{r}" fill="{color[inst[i]]}"'
                   f"{_outline(sub, i)}><title>{escape(sub['layout'].iloc[i])}: {speed[i]:,.0f} tokens/s, "
                   f"{frac[i]:.2f} % of HBM{' (best of its type)' if best[i] else ''}{_flag_text(sub, i)}"
                   f"</title></circle>")
    out += _top_circles(is_top, sub, lambda i: X(frac[i]), lambda i: Y(speed[i]))
    counts = sub["instance"].value_counts()
    legend = '<p class="legend">' + "".join(
        f'<span><i style="background:{color[k]}"></i>{escape(k)} ({int(counts.get(k, 0)):,})</span>' for k in types
    ) + f'<span><i style="background:{TOP_COLOR}"></i>top layouts</span>{_legend(result)}</p>'
    return _svg("types", out) + legend


def near_misses(table: pd.DataFrame, n: int = NEAR_MISSES) -> pd.DataFrame:
    """The infeasible layouts closest to fitting, nearest first."""
    bad = table[~table["feasible"]]
    if bad.empty:
        return bad
    ratio = bad["hbm_peak_gib"] / bad["hbm_capacity_gib"]
    return bad.assign(over=ratio).sort_values("over", kind="stable").head(n)


def _gib(v) -> str:
    return "n/a" if v is None or not math.isfinite(float(v)) else f"{float(v):.4f}"


NO_PRICE_CELL = "no price: set cluster.price_per_hour_usd or --price-per-hour"


def _cost(row: dict):
    """$ per M tokens, or why there is none."""
    return row.get("usd_per_million_tokens") if row.get("cluster_usd_per_hour") is not None else NO_PRICE_CELL


def _days_cost(row: dict, tokens) -> list:
    if tokens is None:
        return []
    return [row.get("time_to_train_days"), row.get("total_cost_usd") if row.get("cluster_usd_per_hour") is not None
            else NO_PRICE_CELL]


def _step(row: dict) -> str:
    """The fast path's step with its 80 % interval."""
    return band_text(row.get("step_time_s"), row.get("step_time_low_s"), row.get("step_time_high_s"))


def _hbm(row: dict) -> str:
    return f"{_gib(row.get('hbm_peak_gib'))} of {_gib(row.get('hbm_capacity_gib'))}"


def _boxed(table_html: str) -> str:
    """A wide table in a box that scrolls sideways, so the page itself fits its window."""
    return f'<div class="wide">{table_html}</div>'


def decision_html(s: dict) -> str:
    """The decision view: a row per (instance type, count, stack) with its best layout, days and dollars (compute
    and storage) with their 80 % intervals, goodput and the flags; then the verdicts between neighbours, the
    findings in bold. Narrow enough for a 1,400 px window (the layout the last column)."""
    d = s.get("decision") or {}
    rows = d.get("rows") or []
    if not rows:
        return ""
    budget = any(r.get("time_to_train_days") is not None for r in rows if r.get("fits"))
    cells = []
    for r in rows:
        base = [r["instance"], r["instances"], r["chips"], stacks.SHORT.get(r["stack"], r["stack"])]
        if not r.get("fits"):
            cells.append(base + [""] * (8 if budget else 5) + [r["reason"]])
            continue
        band = (f"{r['time_to_train_low_days']:,.1f}-{r['time_to_train_high_days']:,.1f}"
                if r.get("time_to_train_low_days") is not None else "")
        usd_band = (f"{r['total_cost_low_usd']:,.0f}-{r['total_cost_high_usd']:,.0f}"
                    if r.get("total_cost_low_usd") is not None else "")
        money = ([r.get("time_to_train_days"), band, r.get("total_cost_usd") if r.get("total_cost_usd") is not None
                  else NO_PRICE, usd_band, r.get("storage_cost_usd"), r.get("goodput")] if budget else
                 [r.get("tokens_per_s"), band_text(r.get("tokens_per_s"), r.get("tokens_per_s_low"),
                                                   r.get("tokens_per_s_high")), r.get("usd_per_million_tokens")])
        cells.append(base + money + [mfu_text(r), ", ".join(r.get("extrapolated") or []) or "-",
                                     r["label"].split(": ", 1)[-1]])
    head = ["instance type", "instances", "chips", "stack"] + (
        ["days", "days, 80 %", "total $", "total $, 80 %", "of it FSx", "goodput"] if budget else
        ["tokens/s", "tokens/s, 80 %", "$ per M tokens"]) + ["MFU", "off domain", "best layout"]
    keys = ["instance", "instances", "chips", "stack"] + (
        ["days", "band", "total_cost_usd", "usd_band", "storage_cost_usd", "goodput"] if budget else
        ["tokens_per_s", "band", "usd_per_million_tokens"]) + ["mfu_text", "off", "layout"]
    verdicts = "".join(f"<li>{'<b>' if v.get('finding') else ''}{escape(v['verdict'])}{'</b>' if v.get('finding') else ''}"
                       f"</li>" for v in d.get("verdicts") or [])
    return (f'<h2>Decision</h2><p class="note">the best layout of each instance type, count and stack (ranked by '
            f'{escape(str(d.get("ranked_by")))}); days and dollars with the 80 % interval of the step; the total is '
            f'compute plus the file system (FSx)</p>'
            + re.sub(r"<td>([^<]*)</td></tr>", r'<td style="white-space:normal;text-align:left;min-width:200px">'
                     r"\1</td></tr>", kit.table(cells, head, keys=keys))
            + (f'<p class="note">verdicts between neighbours: a finding (bold) only where the 80 % intervals are '
               f'apart</p><ul class="verdicts">{verdicts}</ul>' if verdicts else ""))


def render_plan_html(result: PlanResult) -> str:
    """plan.html of a finished plan (no external URL)."""
    s = result.summary
    name = escape(str(s["scenario"]))
    headroom = s.get("hbm_headroom")
    fit = f"{s['feasible']:,} fit in HBM" + (f" with {100 * headroom:.4g} % headroom" if headroom else "")
    folded = (f" {s['folded']:,} layouts that differ from another only in a setting that changes nothing (same step "
              f"time and HBM) are folded into it (the <i>equivalent</i> column).") if s.get("folded") else ""
    head = (f"<p>{s['layouts_evaluated']:,} layouts evaluated in {s['wall_s']:.3g} s ({s['layouts_per_s']:,.0f} "
            f"layouts/s, {escape(s['evaluated_by'])}); {fit}; ranked by <b>{escape(s['objective'])}</b>.{folded}</p>")
    if not result.top:
        c = s.get("closest")
        head += ('<div class="infeasible"><b>No layout fits.</b> ' + (
            f"Closest: {escape(c['label'])}: {escape(str(c['reason']))}" if c else "") + "</div>")
    tokens = s.get("tokens")
    extra_head = ["days to train", "total cost ($)"] if tokens is not None else []
    rows = []
    rep = {r["rank"]: r for r in s["replayed"]}
    rank_by = s.get("rank_by", "point")
    ranks = [] if rank_by == "point" else [f"{OBJECTIVE_SHORT[s['objective']][0]} {END_NAMES[rank_by]}"]
    for i, row in enumerate(result.top, 1):
        r = rep.get(i, {})
        rows.append([i, row["label"], row.get("equivalent") or "", *([row.get("rank_value")] if ranks else []),
                     _step(row), r.get("replay_step_time_s"), r.get("difference"), row["tokens_per_s"], mfu_text(row),
                     _cost(row), *_days_cost(row, tokens), _hbm(row),
                     ", ".join(row.get("extrapolated") or []) or "-", row.get("vs_scenario") or "n/a"])
    top = _boxed(kit.table(rows, ["#", "layout", "equivalent", *ranks, "step s (80 %)", "replayed step (s)",
                           "difference", "tokens/s", "MFU", "$ per M tokens", *extra_head, "HBM GiB",
                           "off domain", "vs scenario's layout"])) if rows else "<p>none</p>"
    per_type = s.get("best_per_type") or []
    best_rows = [[row["instance"], row["label"], row.get("equivalent") or "", *([row.get("rank_value")] if ranks else []),
                  _step(row), row["tokens_per_s"], mfu_text(row),
                  row.get("cluster_usd_per_hour") if row.get("cluster_usd_per_hour") is not None else NO_PRICE,
                  _cost(row), *_days_cost(row, tokens), _hbm(row),
                  ", ".join(row.get("extrapolated") or []) or "-", row.get("vs_scenario") or "n/a"] for row in per_type]
    best = _boxed(kit.table(best_rows, ["instance type", "layout", "equivalent", *ranks, "step s (80 %)",
                                 "tokens/s", "MFU", "$ per hour (cluster)", "$ per M tokens", *extra_head,
                                 "HBM GiB", "off domain", "vs scenario's layout"])) \
        if best_rows else "<p>none</p>"
    per_stack = s.get("best_per_stack") or []
    stack_rows = [[row["stack"], row["label"], *([row.get("rank_value")] if ranks else []), _step(row),
                   row["tokens_per_s"], mfu_text(row), _cost(row), *_days_cost(row, tokens), _hbm(row),
                   row.get("vs_scenario") or "n/a"] for row in per_stack]
    without = s.get("stacks_without_a_layout") or {}
    by_stack = "" if len(stack_rows) + len(without) < 2 else (
        '<h2>Best of each stack</h2><p class="note">fast path; each stack searched within what it runs</p>'
        + _boxed(kit.table(stack_rows, ["stack", "layout", *ranks, "step s (80 %)", "tokens/s", "MFU",
                                        "$ per M tokens", *extra_head, "HBM GiB", "vs scenario's layout"]))
        + "".join(f'<p class="note">{escape(k)}: {escape(v)}</p>' for k, v in without.items()))
    ranking = "<br>".join(escape(line.strip()) for line in ranking_lines(s))
    misses = near_misses(result.table)
    if misses.empty:
        miss_html = "<p>none: every layout fits</p>"
    else:
        bars = stacked_bars([(f"near miss {i}", {k: getattr(r, k) for k in MEMORY_COLORS})
                             for i, r in enumerate(misses.itertuples(index=False), 1)], MEMORY_COLORS, "GiB",
                            float(misses["hbm_capacity_gib"].max()),
                            f"HBM per rank: {float(misses['hbm_capacity_gib'].max()):.4f} GiB")
        miss_html = bars + _boxed(kit.table([[i, r.layout, _gib(r.hbm_peak_gib), _gib(r.hbm_capacity_gib), r.reason]
                                   for i, r in enumerate(misses.itertuples(index=False), 1)],
                                     ["near miss", "layout", "needs (GiB per rank)", "has (GiB per rank)", "why"]))
    notes = "".join(f"<li>{escape(n)}</li>" for n in s.get("notes", []))
    body = f"""<h1>ultracluster plan: {name}</h1>{head}
{decision_html(s)}
<h2>Best of each instance type</h2><p class="note">fast path; ranked by {escape(s['objective'])}</p>{best}
{by_stack}
<h2>Top layouts</h2><p class="note">{ranking}<br>fast path, and the same layout replayed with the full run path (a
replayed layout's interval is its run's)</p>{top}
<h2>Tokens/s against cost</h2>{pareto_svg(result)}
<h2>Tokens/s against HBM use, every instance type</h2>{types_svg(result)}
<h2>Near misses</h2><p class="note">the infeasible layouts closest to fitting: the HBM a rank of their worst
stage needs against what it has</p>{miss_html}
<h2>Notes</h2><ul>{notes or "<li>none</li>"}</ul>"""
    return kit.page(f"ultracluster plan: {name}", body)
