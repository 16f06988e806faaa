"""`ultracluster sensitivity`: which assumption a decision hangs on, as a table and a tornado for the terminal,
from an interval (`ultracluster.uncertainty.Interval`: its factor swings and its fit and release parts)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..uncertainty import Interval


SENSITIVITY_COLUMNS = ("factor", "central", "low", "high", "step_time_at_low_s", "step_time_at_high_s",
                       "swing_s", "swing_pct", "why")


def sensitivity_rows(iv: Interval) -> list[dict]:
    """One row per uncertain factor, largest swing first (the CSV's and the table's rows), then the fit and
    release parts of the interval as two more rows."""
    base = iv.point_s
    rows = [{"factor": s.factor.name, "central": s.central, "low": s.factor.low, "high": s.factor.high,
             "step_time_at_low_s": s.step_low_s, "step_time_at_high_s": s.step_high_s, "swing_s": s.swing_s,
             "swing_pct": 100 * s.swing_s / base if base else float("nan"), "why": s.factor.why} for s in iv.swings]
    for name, log, why in ((iv.fit_label, iv.fit_log, iv.fit_source),
                           (iv.release_label, iv.release_log, iv.release_source)):
        lo, hi = base * math.exp(-log), base * math.exp(log)
        rows.append({"factor": name, "central": float("nan"), "low": float("nan"), "high": float("nan"),
                     "step_time_at_low_s": lo, "step_time_at_high_s": hi, "swing_s": hi - lo,
                     "swing_pct": 100 * (hi - lo) / base if base else float("nan"), "why": why})
    return sorted(rows, key=lambda r: -r["swing_s"])


def tornado_text(iv: Interval, rows: list[dict], width: int = 40) -> str:
    """The tornado table for a terminal: a bar per factor from its fast end to its slow end around the point."""
    lo_all = min([r["step_time_at_low_s"] for r in rows] + [r["step_time_at_high_s"] for r in rows] + [iv.low_s])
    hi_all = max([r["step_time_at_low_s"] for r in rows] + [r["step_time_at_high_s"] for r in rows] + [iv.high_s])
    span = max(hi_all - lo_all, 1e-30)
    name_w = max(len(r["factor"]) for r in rows) if rows else 6
    out = [f"step time {iv.point_s:.4g} s, 80 % interval {iv.low_s:.4g} – {iv.high_s:.4g} s",
           f"{'factor':<{name_w}}  {'fast end':>10}  {'slow end':>10}  {'swing':>7}"]
    for r in rows:
        a, b = sorted((r["step_time_at_low_s"], r["step_time_at_high_s"]))
        i0, i1 = int((a - lo_all) / span * width), max(int((b - lo_all) / span * width), int((a - lo_all) / span * width) + 1)
        mid = int((iv.point_s - lo_all) / span * width)
        bar = "".join("|" if i == mid else ("#" if i0 <= i < i1 else " ") for i in range(width + 1))
        out.append(f"{r['factor']:<{name_w}}  {a:>10.4g}  {b:>10.4g}  {r['swing_pct']:>6.1f}%  {bar}")
    return "\n".join(out)
