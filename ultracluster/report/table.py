"""summary dict → aligned plain-text table for the terminal (what `ultracluster run` prints)."""
from __future__ import annotations

import math

from ultracluster.replay.events import BREAKDOWN_KEYS


def _num(value, spec: str, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{spec}}{unit}"


def _finite(*values) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _band(low, high, spec: str) -> str:
    """" (low–high)" for an interval, "" when the summary has none (an older run directory, an infeasible run)."""
    return f" ({low:{spec}}–{high:{spec}})" if _finite(low, high) else ""


def overlap_note(a: dict, b: dict) -> str:
    """Whether two runs' 80 % step-time intervals overlap: "A is faster" inside overlapping intervals is not a
    finding. "" when either run has no interval."""
    lo_a, hi_a, lo_b, hi_b = (x.get(k) for x in (a, b) for k in ("step_time_low_s", "step_time_high_s"))
    if not _finite(lo_a, hi_a, lo_b, hi_b):
        return ""
    return "intervals overlap: not a finding" if lo_a <= hi_b and lo_b <= hi_a else "intervals apart: a finding"


def format_summary(summary: dict) -> str:
    """Format a summary (see `summarize`) as an aligned two-column table.

    Args:
        summary: the summary.json dict.

    Returns:
        Lines of "label  value" without a trailing newline; for a measured step time, the breakdown shows
        each part in s and in % of the step, and the cost in USD when the price is known.
    """
    s, step = summary, summary.get("step_time_s")
    rows = [
        ("scenario", str(s.get("scenario"))),
        ("layout", f"{s.get('instances')} x {s.get('instance_type')}, {s.get('chips')} chips, "
                   f"{s.get('neuron_cores')} NeuronCores, {s.get('ranks')} ranks"
                   + (f" ({s['layout']})" if s.get("layout") else "")),
        ("emulated by", f"{s.get('actors')} actors on {s.get('ray_nodes')} Ray nodes"),
        ("feasible", "yes" if s.get("feasible") else f"NO: {s.get('reason')}"),
        ("step time", f"{_num(step, '.4f', ' s')}{_band(s.get('step_time_low_s'), s.get('step_time_high_s'), '.3f')}"
                      f"  ({s.get('steps_measured')} measured of {s.get('steps_replayed')} replayed)"),
        ("tokens/s", _num(s.get("tokens_per_s"), ",.0f") + _band(s.get("tokens_per_s_low"),
                                                                 s.get("tokens_per_s_high"), ",.0f")),
        ("seq/s", _num(s.get("seq_per_s"), ",.3f")),
        ("MFU", _num(None if s.get("mfu") is None else 100 * s["mfu"], ".2f", " %")),
        ("HBM peak", _num(s.get("hbm_peak_gib"), ".2f", " GiB per rank")),
    ]
    if isinstance(step, (int, float)) and math.isfinite(step) and step > 0:
        rows += [("breakdown", "")] + [(f"  {k.removesuffix('_s')}", f"{s[k]:>8.4f} s  {100 * s[k] / step:5.1f} %")
                                       for k in BREAKDOWN_KEYS]
        if s.get("cost_per_step_usd") is not None:
            rows.append(("cost", f"${s['cost_per_step_usd']:,.4f} per step, "
                                 f"${_num(s.get('usd_per_million_tokens'), ',.4f')} per million tokens"))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}".rstrip() for label, value in rows)


def format_compare(runs: list[tuple[str, dict]]) -> str:
    """Summaries side by side: one row per field, one column per run, and for every run after the first a
    column with its difference against the first ("+0.012 (+4.5 %)", "=" when equal).

    Args:
        runs: (label, summary dict) pairs; the first is the baseline.

    Returns:
        Lines of an aligned table without a trailing newline.
    """
    from ultracluster.report.html import COMPARE_KEYS, difference, fmt

    header = ["field"]
    for i, (label, _) in enumerate(runs):
        header += [label] + ([f"vs {runs[0][0]}"] if i else [])
    rows = [header]
    base = runs[0][1]
    row = ["80 % intervals"]
    for i, (_, s) in enumerate(runs):
        row.append(_band(s.get("step_time_low_s"), s.get("step_time_high_s"), ".3f").strip(" ()") or "n/a")
        if i:
            row.append(overlap_note(base, s) or "n/a")
    rows.append(row)
    for key in COMPARE_KEYS:
        row = [key]
        for i, (_, s) in enumerate(runs):
            v = s.get(key)
            row.append(fmt(v))
            if i:
                row.append(difference(key, base.get(key), v)[0])
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in
                               enumerate(zip(r, widths))).rstrip() for r in rows)
