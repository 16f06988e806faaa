"""A finished plan → plan.html: one offline page (inline CSS and SVG, nothing loaded from anywhere).

Sections: what was searched and how fast; the Pareto chart of tokens/s against $ per million tokens (every
feasible layout a dot, the Pareto front joined, the top layouts numbered); the top layouts with their fast and
replayed step times; the near-misses, the infeasible layouts closest to fitting, each with the HBM it needs
against what a rank has; the notes. Follows `report.html` (same CSS, escaping and sortable tables).
"""
from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..report.html import MEMORY_COLORS, _page, _table, stacked_bars

if TYPE_CHECKING:
    from . import PlanResult

CHART_W, CHART_H, MARGIN = 760, 380, 60   # px
MAX_DOTS = 4000                            # dots drawn (the front and the top layouts always)
NEAR_MISSES = 8
TOP_COLOR, FRONT_COLOR, DOT_COLOR = "#e15759", "#4e79a7", "#bab0ac"


def pareto_front(cost: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both (lower cost, higher speed), cheapest first."""
    order = np.lexsort((-speed, cost))
    front, best = [], -np.inf
    for i in order:
        if speed[i] > best:
            front.append(i)
            best = speed[i]
    return np.array(front, dtype=np.int64)


def _scale(lo: float, hi: float, px: float, log: bool):
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    span = (hi - lo) or 1.0
    return (lambda v: (((math.log10(v) if log else v) - lo) / span) * px), lo, hi


def pareto_svg(result: PlanResult) -> str:
    """Scatter of feasible layouts: $ per million tokens (x) against tokens/s (y)."""
    t = result.table
    ok = t["feasible"] & np.isfinite(t["usd_per_million_tokens"].astype(float)) & np.isfinite(t["tokens_per_s"])
    sub = t[ok]
    if sub.empty:
        no_price = sorted(set(t.loc[t["feasible"] & ~np.isfinite(t["usd_per_million_tokens"].astype(float)),
                                    "instance"]))
        why = f"the catalog has no price for {', '.join(no_price)}" if no_price else "no layout fits"
        return f'<p class="note">No cost axis: {escape(why)}.</p>'
    cost, speed = sub["usd_per_million_tokens"].to_numpy(float), sub["tokens_per_s"].to_numpy(float)
    front = pareto_front(cost, speed)
    top_labels = {r["label"]: i + 1 for i, r in enumerate(result.top)}
    is_top = sub["layout"].map(top_labels).fillna(0).astype(int).to_numpy()
    keep = np.zeros(len(sub), dtype=bool)
    keep[front] = True
    keep[is_top > 0] = True
    rest = np.flatnonzero(~keep)
    if rest.size > MAX_DOTS:
        rest = rest[np.linspace(0, rest.size - 1, MAX_DOTS).astype(int)]
    keep[rest] = True
    log = cost.max() / max(cost.min(), 1e-30) > 20
    fx, *_ = _scale(cost.min() * 0.95, cost.max() * 1.05, CHART_W, log)
    fy, *_ = _scale(0.0, speed.max() * 1.05, CHART_H, False)
    X = lambda v: MARGIN + fx(v)                    # noqa: E731
    Y = lambda v: CHART_H + 10 - fy(v)              # noqa: E731
    out = [f'<line x1="{MARGIN}" y1="{CHART_H + 10}" x2="{MARGIN + CHART_W}" y2="{CHART_H + 10}" stroke="#888"/>',
           f'<line x1="{MARGIN}" y1="10" x2="{MARGIN}" y2="{CHART_H + 10}" stroke="#888"/>']
    for i in np.flatnonzero(keep):
        if is_top[i] or i in set(front.tolist()):
            continue
        out.append(f'<circle cx="{X(cost[i]):.1f}" cy="{Y(speed[i]):.1f}" r="2" fill="{DOT_COLOR}">'
                   f"<title>{escape(sub['layout'].iloc[i])}: {speed[i]:,.0f} tokens/s, ${cost[i]:.4g}/M</title></circle>")
    pts = " ".join(f"{X(cost[i]):.1f},{Y(speed[i]):.1f}" for i in front)
    out.append(f'<polyline points="{pts}" fill="none" stroke="{FRONT_COLOR}" stroke-width="1.5"/>')
    for i in front:
        out.append(f'<circle cx="{X(cost[i]):.1f}" cy="{Y(speed[i]):.1f}" r="3.5" fill="{FRONT_COLOR}">'
                   f"<title>Pareto: {escape(sub['layout'].iloc[i])}: {speed[i]:,.0f} tokens/s, "
                   f"${cost[i]:.4g}/M</title></circle>")
    for i in np.flatnonzero(is_top):
        out.append(f'<circle cx="{X(cost[i]):.1f}" cy="{Y(speed[i]):.1f}" r="6" fill="none" stroke="{TOP_COLOR}" '
                   f'stroke-width="2"><title>#{is_top[i]} {escape(sub["layout"].iloc[i])}</title></circle>'
                   f'<text x="{X(cost[i]) + 8:.1f}" y="{Y(speed[i]) - 6:.1f}" fill="{TOP_COLOR}">#{is_top[i]}</text>')
    ticks = np.geomspace(cost.min(), cost.max(), 5) if log else np.linspace(cost.min(), cost.max(), 5)
    for v in ticks:
        out.append(f'<text x="{X(v):.1f}" y="{CHART_H + 26}" text-anchor="middle">${v:.3g}</text>')
    for v in np.linspace(0, speed.max(), 5):
        out.append(f'<text x="{MARGIN - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    out.append(f'<text x="{MARGIN + CHART_W / 2}" y="{CHART_H + 44}" text-anchor="middle">$ per million tokens'
               f'{" (log scale)" if log else ""}</text>'
               f'<text x="14" y="{CHART_H / 2}" transform="rotate(-90 14 {CHART_H / 2})" text-anchor="middle">'
               f"tokens/s</text>")
    legend = (f'<p class="legend"><span><i style="background:{DOT_COLOR}"></i>feasible layout</span>'
              f'<span><i style="background:{FRONT_COLOR}"></i>Pareto front ({len(front)})</span>'
              f'<span><i style="background:{TOP_COLOR}"></i>top layouts</span></p>')
    return (f'<svg id="pareto" width="{MARGIN + CHART_W + 20}" height="{CHART_H + 54}" role="img">'
            f'{"".join(out)}</svg>{legend}')


def near_misses(table: pd.DataFrame, n: int = NEAR_MISSES) -> pd.DataFrame:
    """The infeasible layouts closest to fitting, nearest first."""
    bad = table[~table["feasible"]]
    if bad.empty:
        return bad
    ratio = bad["hbm_peak_gib"] / bad["hbm_capacity_gib"]
    return bad.assign(over=ratio).sort_values("over", kind="stable").head(n)


def render_plan_html(result: PlanResult) -> str:
    """plan.html of a finished plan (no external URL)."""
    s = result.summary
    name = escape(str(s["scenario"]))
    head = (f"<p>{s['layouts_evaluated']:,} layouts evaluated in {s['wall_s']:.3g} s ({s['layouts_per_s']:,.0f} "
            f"layouts/s, {escape(s['evaluated_by'])}); {s['feasible']:,} fit in HBM; ranked by "
            f"<b>{escape(s['objective'])}</b>.</p>")
    if not result.top:
        c = s.get("closest")
        head += ('<div class="infeasible"><b>No layout fits.</b> ' + (
            f"Closest: {escape(c['label'])}: {escape(str(c['reason']))}" if c else "") + "</div>")
    rows = []
    rep = {r["rank"]: r for r in s["replayed"]}
    for i, row in enumerate(result.top, 1):
        r = rep.get(i, {})
        rows.append([i, row["label"], row["step_time_s"], r.get("replay_step_time_s"), r.get("difference"),
                     row["tokens_per_s"], row["mfu"], row["usd_per_million_tokens"], row["hbm_peak_gib"],
                     row.get("time_to_train_days")])
    top = _table(rows, ["#", "layout", "fast step (s)", "replayed step (s)", "difference", "tokens/s", "MFU",
                        "$ per M tokens", "HBM peak (GiB)", "days to train"]) if rows else "<p>none</p>"
    misses = near_misses(result.table)
    if misses.empty:
        miss_html = "<p>none: every layout fits</p>"
    else:
        bars = stacked_bars([(f"near miss {i}", {k: getattr(r, k) for k in MEMORY_COLORS})
                             for i, r in enumerate(misses.itertuples(index=False), 1)], MEMORY_COLORS, "GiB",
                            float(misses["hbm_capacity_gib"].max()),
                            f"HBM per rank: {float(misses['hbm_capacity_gib'].max()):.4g} GiB")
        miss_html = bars + _table([[i, r.layout, r.hbm_peak_gib, r.hbm_capacity_gib, r.reason]
                                   for i, r in enumerate(misses.itertuples(index=False), 1)],
                                  ["near miss", "layout", "needs (GiB per rank)", "has (GiB per rank)", "why"])
    notes = "".join(f"<li>{escape(n)}</li>" for n in s.get("notes", []))
    body = f"""<h1>ultracluster plan: {name}</h1>{head}
<h2>Tokens/s against cost</h2>{pareto_svg(result)}
<h2>Top layouts</h2><p class="note">fast path, and the same layout replayed with the full run path</p>{top}
<h2>Near misses</h2><p class="note">the infeasible layouts closest to fitting: the HBM a rank of their worst
stage needs against what it has</p>{miss_html}
<h2>Notes</h2><ul>{notes or "<li>none</li>"}</ul>"""
    return _page(f"ultracluster plan: {name}", body)
