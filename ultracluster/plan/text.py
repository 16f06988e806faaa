"""The few phrases the terminal (`output.format_plan`) and plan.html (`html`) both print: numbers as the plan
shows them, an MFU with its mark, and what ranked the layouts against the scenario's own layout."""
from __future__ import annotations

import math


def fmt_number(v, spec: str, unit: str = "") -> str:
    """A number with `spec`, or "n/a" (None, NaN)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:{spec}}{unit}"


OBJECTIVE_SHORT = {"tokens_per_s": ("tokens/s", ",.0f"), "usd_per_million_tokens": ("$/M tok", ",.3f"),
                   "time_to_train": ("days", ",.1f")}


def mfu_text(row: dict) -> str:
    """MFU in %, marked `!` where it is above the best published for the chip (`mfu_implausible`)."""
    mfu = None if row.get("mfu") is None else 100 * row["mfu"]
    return fmt_number(mfu, ".1f", "%") + ("!" if row.get("mfu_implausible") else "")


def band_text(point, low, high) -> str:
    """A step time with its 80 % interval: `78.73 (70.1-88.4)`."""
    return fmt_number(point, ".4g") + ("" if low is None else f" ({fmt_number(low, '.4g')}-{fmt_number(high, '.4g')})")


def ranking_lines(s: dict) -> list[str]:
    """What ranked the layouts, and the scenario's own layout they are compared with."""
    rank_by = s.get("rank_by", "point")
    name = OBJECTIVE_SHORT[s["objective"]][0]
    lines = [f"ranked by {s['objective']} at {s.get('rank_by_means', 'the point prediction')} (--rank-by {rank_by})"
             + ("" if rank_by == "point" else f"; the point beside it ({name})")]
    stacks = (s.get("search") or {}).get("stacks") or []
    if stacks:
        lines.append(f"stacks searched, each within what it runs: {', '.join(stacks)}")
    lines.append(f"  {mfu_threshold_text(s)}")
    own = s.get("scenario_layout") or {}
    if own.get("feasible"):
        band = band_text(own.get("step_time_s"), own.get("step_time_low_s"), own.get("step_time_high_s"))
        lines.append(f"scenario's own layout: {own['label']}: step {band} s, MFU {mfu_text(own)}"
                     + (f", off the calibrated domain: {', '.join(own['extrapolated'])}" if own.get("extrapolated")
                        else ""))
    elif own.get("comparison"):
        lines.append(own["comparison"])
    if own.get("timed_as"):
        lines.append(f"  {own['timed_as']}")
    if own.get("standing") and own.get("feasible"):
        lines.append(f"  it {own['standing']}")
    return lines


def mfu_threshold_text(s: dict) -> str:
    """What `!` after an MFU means, with its thresholds: "MFU marked ! is above the best published run of its chip
    (trn1.32xlarge 35.2 %, trn2.48xlarge 23.5 %): a flag; it moves no row"."""
    best = s.get("mfu_best_published") or {}
    known = ", ".join(f"{k} {100 * v:.1f} %" if v is not None else f"{k} none published" for k, v in best.items())
    return ("MFU marked ! is above the best published run of its chip" + (f" ({known})" if known else "")
            + ": a flag beside the interval, which is what ranks; it moves no row")
