"""How every number a person reads is written, and the terminal tables (`ultracluster run`, `report`, `compare`).

The one formatting rule of the package's human outputs: the terminal summary, report.html, the compare table
and compare.html all write numbers with `fmt` / `fmt_value` and differences with `difference` (files for tools,
the CSVs and JSON, keep full precision):

- significant digits fitted to the quantity (`UNITS`): 4 for times and rates, 3 for GiB, percentages, dollars
  and interval bounds; trailing zeros after the decimal point are dropped, and a value of 10^digits or more is
  written whole (`170,054 tokens/s`, never `1.701e+05`);
- its unit, in the multiple that keeps it readable: seconds as s, ms, µs or ns; bytes as KiB ... TiB; FLOP
  with k ... E; fractions of peak as %;
- thousands separators; no exponent for any magnitude a run produces (only a unitless number below 1e-6 or
  of 1e15 and more gets one);
- float noise reads as 0: a value, or a difference between two runs, within a relative `REL_ZERO` (1e-9) of
  its reference (the value itself, or the step time for the seconds of a step) is written `0` and a
  difference within it is never marked better or worse.
"""
from __future__ import annotations

import math
import numbers
import shutil

from ultracluster.replay.result import BREAKDOWN_KEYS

REL_ZERO = 1e-9          # a difference within this fraction of its reference is float noise: shown as 0

# unit -> (significant digits, multiples as (factor, name), largest first; None: the unit as is)
_TIME = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_BYTES = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B"))
_FLOP = tuple((10.0**(3 * i), p + "FLOP") for i, p in reversed(list(enumerate(("", "k", "M", "G", "T", "P", "E")))))
UNITS: dict[str, tuple[int, tuple | None]] = {
    "s": (4, _TIME), "B": (4, _BYTES), "FLOP": (4, _FLOP), "FLOP/s": (4, tuple((f, n + "/s") for f, n in _FLOP)),
    "GiB": (3, None), "%": (3, None), "$": (3, None), "tokens/s": (4, None), "seq/s": (4, None),
    "GB/s": (4, None), "GB": (4, None), "h": (4, None), "": (4, None),
}
INTERVAL_DIGITS = 3      # the bounds of an 80 % interval


def unit_of(key: str) -> str:
    """The unit of a summary field or table column, from its name (`_s` seconds, `_gib` GiB, ...)."""
    k = key.lower()
    if k in ("mfu", "hfu", "goodput") or k.endswith(("_frac", "_fraction", "_pct")):
        return "%"
    if k.endswith("_usd") or k.startswith("usd_") or "_usd_" in k:
        return "$"
    if k == "tokens_per_s" or k.startswith("tokens_per_s_"):
        return "tokens/s"
    if k == "seq_per_s" or k.startswith("seq_per_s_"):
        return "seq/s"
    if "flop_per_s" in k:
        return "FLOP/s"
    if "flops" in k:
        return "FLOP"
    if k.endswith("_gib"):
        return "GiB"
    if k.endswith("_gb_s"):
        return "GB/s"
    if k.endswith("_gb"):
        return "GB"
    if k == "bytes" or k.endswith("_bytes"):
        return "B"
    if k.endswith("_hours"):
        return "h"
    if k.endswith(("_s", "_us")):
        return "s"
    return ""


def _real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def all_finite(*values) -> bool:
    """Every value a real number (not a bool), none NaN or infinite."""
    return all(_real(v) and math.isfinite(v) for v in values)


def _plain(x: float, digits: int) -> str:
    """x with `digits` significant digits, thousands separators and no exponent; whole from 10^digits up."""
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    if mag >= digits - 1:
        return f"{x:,.0f}"
    text = f"{x:,.{digits - 1 - mag}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _multiple(x: float, steps: tuple, digits: int) -> tuple[float, str]:
    """The multiple of a unit that keeps |x|, rounded to `digits`, at 1 or more (the smallest otherwise)."""
    r = abs(float(f"{x:.{digits - 1}e}"))
    return next(((f, n) for f, n in steps if r >= f), steps[-1])


def fmt_value(value, unit: str = "", digits: int | None = None, ref: float = 0.0, like: float | None = None) -> str:
    """One number as a person reads it (the module's rule), with its unit.

    Args:
        value: a number (None reads "-", NaN "n/a"; a bool or text as is).
        unit: a key of `UNITS` (`unit_of` gives it from a field's name).
        digits: significant digits (default: the unit's).
        ref: the value's reference; within `REL_ZERO` of it the value is float noise and reads 0 (a part of a
            step against the step time). Seconds below 1e-12 read 0 without one.
        like: write the value in the multiple `like` would take (the bounds of an interval in their point's).
    """
    if value is None:
        return "-"
    if isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "-∞"
    digits, steps = UNITS.get(unit, (4, None)) if digits is None else (digits, UNITS.get(unit, (4, None))[1])
    x = float(value)
    if abs(x) <= REL_ZERO * abs(ref) or (unit == "s" and abs(x) < 1e-12):
        x = 0.0
    if isinstance(value, numbers.Integral) and steps is None:
        text = f"{int(value):,}"
    elif steps is not None:   # 0 reads in the unit itself: "0 s", "0 B"
        factor, name = (_multiple(x if not like else like, steps, digits) if x or like
                        else steps[0] if unit == "s" else steps[-1])
        return f"{_plain(x / factor, digits)} {name}"
    elif unit == "%":
        return f"{_plain(100 * x, digits)} %"
    elif unit == "$":
        return ("-" if x < 0 else "") + "$" + _plain(abs(x), digits)
    elif unit == "" and x != 0 and (abs(x) < 1e-6 or abs(x) >= 1e15):
        return f"{x:.{digits - 1}e}"
    else:
        text = _plain(x, digits)
    return f"{text} {unit}" if unit else text


def fmt(value, key: str = "", ref: float = 0.0) -> str:
    """Display text of one summary field or table cell: `fmt_value` in the unit its name gives (a `_us`
    column is microseconds)."""
    if key.endswith("_us") and all_finite(value):
        value = value * 1e-6
    return fmt_value(value, unit_of(key), ref=ref)


def fmt_interval(low, high, point, unit: str = "") -> str:
    """"327–455 ms": the bounds in the multiple of their point, `INTERVAL_DIGITS` significant digits, the unit
    once; "" without bounds (an older run directory, an infeasible run)."""
    if not all_finite(low, high):
        return ""
    like = point if all_finite(point) and point else high
    lo, hi = (fmt_value(v, unit, INTERVAL_DIGITS, like=like) for v in (low, high))
    lo_num, _, lo_unit = lo.partition(" ")
    return f"{lo_num}–{hi}" if lo_unit and lo_unit == hi.partition(" ")[2] else f"{lo}–{hi}"


def _pct(rel: float) -> str:
    p = 100 * rel
    return f"{p:+.1f} %" if abs(p) >= 1 else ("+" if p >= 0 else "-") + f"{_plain(abs(p), 2)} %"


HIGHER_IS_BETTER = {"tokens_per_s", "seq_per_s", "mfu", "hfu", "goodput"}
NEUTRAL = {"instances", "chips", "neuron_cores", "ranks", "hbm_capacity_gib", "price_per_hour_usd"}


def difference(key: str, base, value, ref: float = 0.0) -> tuple[str, str]:
    """Text and CSS class ("better", "worse" or "") of `value` against `base` for one field.

    "0" when the difference is within `REL_ZERO` of the larger of |base|, |value| and `ref` (float noise:
    never coloured), "+53.4 ms (+13.8 %)" otherwise (a fraction's in percentage points: "+0.5 points (+7 %)");
    "=" or "differs" for text, "n/a" when a side is NaN. Hidden seconds are neither better nor worse.
    """
    if not (_real(base) and _real(value)):
        return ("=" if base == value else "differs"), ""
    if not all_finite(base, value):
        return ("0", "") if base == value else ("n/a", "")
    d = value - base
    if d == 0 or abs(d) <= REL_ZERO * max(abs(base), abs(value), abs(ref)):
        return "0", ""
    sign, unit = ("+" if d > 0 else "-"), unit_of(key)
    if unit == "%":
        size = f"{_plain(100 * abs(d), UNITS['%'][0])} points"
    else:   # a rate's difference reads in the unit its value shows beside it
        size = fmt_value(abs(d), "" if unit in ("tokens/s", "seq/s") else unit, UNITS[unit][0]).lstrip("-")
    text = sign + size + (f" ({_pct(d / base)})" if base else "")
    cls = "" if key in NEUTRAL or key.endswith("_hidden_s") else ("better" if (d > 0) == (key in HIGHER_IS_BETTER) else "worse")
    return text, cls


def step_ref(summary: dict, key: str) -> float:
    """The noise reference of a field: the step time for seconds per step, else 0 (the value itself)."""
    step = summary.get("step_time_s")
    return float(step) if unit_of(key) == "s" and all_finite(step) else 0.0


def overlap_note(a: dict, b: dict) -> str:
    """Whether two runs' 80 % step-time intervals overlap: "A is faster" inside overlapping intervals is not a
    finding. "" when either run has no interval."""
    lo_a, hi_a, lo_b, hi_b = (x.get(k) for x in (a, b) for k in ("step_time_low_s", "step_time_high_s"))
    if not all_finite(lo_a, hi_a, lo_b, hi_b):
        return ""
    return "intervals overlap: not a finding" if lo_a <= hi_b and lo_b <= hi_a else "intervals apart: a finding"


KIND_NAMES = {"tp": "tensor parallel", "cp": "context parallel", "ep": "expert parallel", "pp": "pipeline sends",
              "dp": "data parallel"}


def comm_kinds_shown(summary: dict) -> list[str]:
    """The in-layer kinds the breakdown splits `tp_comm_s` into: tp, with cp and ep when the run has them
    (their seconds, exposed or hidden, are above 0); [] for a run without `comm_*` keys or without cp and ep."""
    def busy(k: str) -> bool:
        return any(all_finite(summary.get(f"comm_{k}_{p}_s")) and summary[f"comm_{k}_{p}_s"] > 0
                   for p in ("exposed", "hidden"))
    extra = [k for k in ("cp", "ep") if busy(k)]
    return ["tp", *extra] if extra else []


def hidden_of(summary: dict, part: str) -> float | None:
    """Seconds per step of a breakdown part's communication that ran behind compute (None: not a
    communication part, or a run directory written before the `comm_*` keys)."""
    kinds = {"tp_comm_s": ("tp", "cp", "ep"), "pp_comm_s": ("pp",), "dp_comm_s": ("dp",)}.get(part)
    if kinds is None:
        return None
    if part == "dp_comm_s" and all_finite(summary.get("dp_comm_hidden_s")):
        return summary["dp_comm_hidden_s"]
    values = [summary.get(f"comm_{k}_hidden_s") for k in kinds]
    return math.fsum(values) if all_finite(*values) else None


def breakdown_lines(summary: dict) -> list[tuple[str, str, str, str]]:
    """(label, exposed, share of the step, hidden) per part of the breakdown, the in-layer communication split
    by kind below `tp_comm`: what the terminal and report.html show. The parts' exposed seconds add up to the
    step; the kinds' to `tp_comm`."""
    step = summary["step_time_s"]
    rows = []

    def add(label: str, exposed, hidden) -> None:
        rows.append((label, fmt_value(exposed, "s", ref=step), f"{100 * exposed / step:.1f} %",
                     "" if hidden is None else fmt_value(hidden, "s", ref=step)))

    kinds = comm_kinds_shown(summary)
    for key in BREAKDOWN_KEYS:
        add(key.removesuffix("_s"), summary[key], hidden_of(summary, key))
        if key == "tp_comm_s":
            for k in kinds:
                add(f"  {k} ({KIND_NAMES[k]})", summary[f"comm_{k}_exposed_s"], summary[f"comm_{k}_hidden_s"])
    return rows


def hbm_text(summary: dict, per_rank: str = " per rank") -> str:
    """"1.38 GiB per rank of 16 GiB (8.6 %)": the peak with the capacity of a rank when the summary has it."""
    peak, cap = summary.get("hbm_peak_gib"), summary.get("hbm_capacity_gib")
    text = fmt(peak, "hbm_peak_gib") + per_rank
    if all_finite(peak, cap) and cap > 0:
        text += f" of {fmt(cap, 'hbm_capacity_gib')} ({_plain(100 * peak / cap, 3)} %)"
    return text


def format_summary(summary: dict) -> str:
    """Format a summary (see `summarize`) as an aligned two-column table.

    Args:
        summary: the summary.json dict (with run.json's `actors`, when known).

    Returns:
        Lines of "label  value" without a trailing newline; for a measured step time, the breakdown shows each
        part's exposed seconds, its share of the step and, for communication, the seconds hidden behind compute
        (the in-layer part split into tp, cp and ep when the run has cp or ep); then the cost when the price is
        known, and one `warning` line per figure that is 0 because its model is off.
    """
    s, step = summary, summary.get("step_time_s")
    nodes = s.get("ray_nodes")
    rows = [
        ("scenario", str(s.get("scenario"))),
        ("layout", f"{s.get('instances')} x {s.get('instance_type')}, {fmt(s.get('chips'))} chips, "
                   f"{fmt(s.get('neuron_cores'))} NeuronCores, {fmt(s.get('ranks'))} ranks"
                   + (f" ({s['layout']})" if s.get("layout") else "")),
        ("emulated by", f"{s.get('actors')} actors on {nodes} Ray node{'' if nodes == 1 else 's'}"),
        ("feasible", "yes" if s.get("feasible") else f"NO: {s.get('reason')}"),
    ]
    if s.get("calibration_profile"):
        rows.append(("calibration", f"profile {s['calibration_profile']}"))
    band = fmt_interval(s.get("step_time_low_s"), s.get("step_time_high_s"), step, "s")
    rows.append(("step time", f"{fmt(step, 'step_time_s')}" + (f" ({band})" if band else "")
                 + f"  ({s.get('steps_measured')} measured of {s.get('steps_replayed')} replayed)"))
    band = fmt_interval(s.get("tokens_per_s_low"), s.get("tokens_per_s_high"), s.get("tokens_per_s"))
    rows += [
        ("tokens/s", fmt_value(s.get("tokens_per_s")) + (f" ({band})" if band else "")),
        ("seq/s", fmt_value(s.get("seq_per_s"))),
        ("MFU", fmt(s.get("mfu"), "mfu") + (f" (HFU {fmt(s['hfu'], 'hfu')})" if all_finite(s.get("hfu")) else "")),
        ("HBM peak", hbm_text(s)),
    ]
    block: list[str] = []
    if all_finite(step) and step > 0:
        lines = [("breakdown", "exposed", "share", "hidden")] + [(f"  {a}", b, c, d) for a, b, c, d in
                                                                  breakdown_lines(s)]
        w = [max(len(r[c]) for r in lines) for c in range(4)]
        block = [f"{a:<{w[0]}}  {b:>{w[1]}}  {c:>{w[2]}}  {d:>{w[3]}}".rstrip() for a, b, c, d in lines]
        if s.get("cost_per_step_usd") is not None:
            rows.append(("cost", f"{fmt(s['cost_per_step_usd'], 'cost_per_step_usd')} per step, "
                                 f"{fmt(s.get('usd_per_million_tokens'), 'usd_per_million_tokens')} per million "
                                 f"tokens"))
        elif "price_source" in s:
            rows.append(("cost", str(s["price_source"])))
        if all_finite(s.get("goodput")):
            how = "" if s.get("goodput_method") == "emulated" else " expected"     # emulated: its source says so
            rows.append(("goodput", f"{100 * s['goodput']:.2f} %{how} ({s.get('goodput_source')})"))
        if "time_to_train_days" in s:
            from ultracluster.goodput import budget_text

            tokens = s.get("train_tokens")
            lead = f"{tokens:.4g} tokens: " if all_finite(tokens) else ""
            rows.append(("to train", lead + budget_text(s.get("time_to_train_days"), s.get("total_cost_usd"),
                                                        s.get("price_source"), "with failures and checkpoints")))
    if all_finite(s.get("checkpoint_block_s")):     # a configured checkpoint, whether or not a replayed step held one
        every = s.get("checkpoint_every_steps")
        rows.append(("checkpoint", (f"every {every} steps: " if every else "")
                     + f"blocks {fmt(s['checkpoint_block_s'], 'checkpoint_block_s')}, writes "
                       f"{fmt(s.get('checkpoint_write_s'), 'checkpoint_write_s')}, restores in "
                       f"{fmt(s.get('restore_s'), 'restore_s')}"
                     + (f" ({fmt(s['checkpoint_gb'])} GB)" if all_finite(s.get("checkpoint_gb")) else "")))
    if s.get("extrapolated"):
        rows.append(("evidence", "extrapolated on " + ", ".join(s["extrapolated"])
                     + ": no calibration row spans this; the interval is widened (docs/uncertainty.md)"))
    if s.get("mfu_implausible"):
        rows.append(("evidence", "MFU above the best any published run of this chip reached: implausible"))
    rows += [("warning", w) for w in s.get("warnings") or []]
    width = max(len(label) for label, _ in rows)
    text = [f"{label:<{width}}  {value}".rstrip() for label, value in rows]
    at = next((i for i, (label, _) in enumerate(rows) if label == "HBM peak"), len(rows) - 1) + 1
    return "\n".join(text[:at] + block + text[at:])
