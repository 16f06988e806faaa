"""`compare`'s terminal table and verdicts: summaries side by side with their differences against the first run
(`format_compare`, the fields `compare_keys`, a cell `compare_cell`), and every pair of runs against each other
(`pairs`, `pair_line`: step time, days, total dollars and goodput, whether the 80 % intervals overlap, the runs'
flags). Numbers follow `table.fmt` and differences `table.difference` (the one rule); compare.html
(`report.html`) and compare.csv (`report.write`) read the same functions."""
from __future__ import annotations

import textwrap

from ultracluster.replay.result import BREAKDOWN_KEYS
from ultracluster.report.table import (
    REL_ZERO, all_finite, comm_kinds_shown, difference, fmt, fmt_interval, fmt_value, overlap_note, step_ref,
)

COMPARE_WIDTH = 100      # columns of the terminal compare table
CELL_MAX = 24            # characters of a cell of the terminal compare table, then "…" (compare.csv has it whole)


COMPARE_KEYS = ("instance_type", "instances", "chips", "ranks", "layout", "feasible", "step_time_s", "tokens_per_s",
                "seq_per_s", "mfu", "hbm_peak_gib", *BREAKDOWN_KEYS, "cost_per_step_usd", "usd_per_million_tokens",
                # what a buyer decides on (a run with a training budget), and the flags beside the numbers
                "goodput", "time_to_train_days", "total_cost_usd", "storage_cost_usd", "mfu_implausible",
                "extrapolated")
WHOLE_KEYS = ("layout",)   # cells the compare table never cuts (a layout cut in its middle hides its dp)


def compare_keys(summaries: list[dict]) -> list[str]:
    """The fields the compare table shows: `COMPARE_KEYS` (and `calibration_profile` when a run used one), with the exposed seconds of tp, cp and ep after
    `tp_comm_s` when a run splits it (`comm_kinds_shown`), and after `dp_comm_s` the hidden seconds of each
    kind that some run hides."""
    def some(key: str) -> bool:   # above float noise in some run
        return any(all_finite(s.get(key)) and s[key] > REL_ZERO * step_ref(s, key) for s in summaries)

    shown = {k for s in summaries for k in comm_kinds_shown(s)}
    split = [f"comm_{k}_exposed_s" for k in ("tp", "cp", "ep") if k in shown]
    hidden = [f"comm_{k}_hidden_s" for k in ("tp", "cp", "ep", "pp", "dp") if some(f"comm_{k}_hidden_s")]
    keys = list(COMPARE_KEYS)
    if any(s.get("calibration_profile") for s in summaries):      # which calibration each run used
        keys.insert(keys.index("feasible"), "calibration_profile")
    tp, dp = keys.index("tp_comm_s") + 1, keys.index("dp_comm_s") + 1
    return keys[:tp] + split + keys[tp:dp] + hidden + keys[dp:]


def compare_cell(summary: dict, key: str) -> str:
    """One run's value of a field as the compare table shows it (HBM with its capacity)."""
    if key == "hbm_peak_gib":
        peak, cap = summary.get(key), summary.get("hbm_capacity_gib")
        if all_finite(peak, cap):
            return f"{fmt_value(peak, '', 3)} of {fmt(cap, 'hbm_capacity_gib')}"
    value = summary.get(key)
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    if key == "mfu_implausible" and isinstance(value, bool):
        return "yes (!)" if value else "no"
    return fmt(value, key, ref=step_ref(summary, key))


def compare_difference(key: str, base: dict, run: dict) -> tuple[str, str]:
    """`difference` of a field between two runs, the noise reference the larger step time for seconds."""
    return difference(key, base.get(key), run.get(key), max(step_ref(base, key), step_ref(run, key)))


def _short(text: str) -> str:
    """`text` cut to `CELL_MAX` characters in its middle (labels that differ at the end stay apart)."""
    head = (CELL_MAX - 1) // 2
    return text if len(text) <= CELL_MAX else text[:head] + "…" + text[len(text) - (CELL_MAX - 1 - head):]


PAIR_KEYS = ("step_time_s", "time_to_train_days", "total_cost_usd", "goodput")   # what a pair's verdict weighs
PAIR_NAMES = {"step_time_s": "step", "time_to_train_days": "days", "total_cost_usd": "total $",
              "goodput": "goodput"}


def flags_text(summary: dict) -> str:
    """"MFU implausible, extrapolated on tp, pp": a run's evidence flags in words ("" without any)."""
    out = ["MFU implausible"] if summary.get("mfu_implausible") else []
    ex = summary.get("extrapolated")
    if ex:
        out.append("extrapolated on " + (", ".join(map(str, ex)) if isinstance(ex, list) else str(ex)))
    return ", ".join(out)


def pairs(runs: list[tuple[str, dict]]) -> list[dict]:
    """Every pair of the runs compared, each later run against each earlier one (n (n - 1) / 2 of them): for each
    of `PAIR_KEYS` both have, `compare_difference`'s text and class ("-250 ms (-20.0 %)", "better"); whether their
    80 % step-time intervals overlap (`overlap_note`), and the runs' flags (`flags_text`). A pair with an
    infeasible run says so instead ("not comparable")."""
    out = []
    for i, (label_a, a) in enumerate(runs):
        for label_b, b in runs[i + 1:]:
            rec = {"a": label_a, "b": label_b, "diffs": {}, "note": "", "flags": {}}
            for label, s in ((label_a, a), (label_b, b)):
                if flags_text(s):
                    rec["flags"][label] = flags_text(s)
            bad = [label for label, s in ((label_a, a), (label_b, b)) if not s.get("feasible")]
            if bad:
                rec["note"] = "not comparable: " + " and ".join(bad) + (" is" if len(bad) == 1 else " are") + \
                    " infeasible"
                out.append(rec)
                continue
            for k in PAIR_KEYS:
                if all_finite(a.get(k), b.get(k)):
                    rec["diffs"][k] = compare_difference(k, a, b)
            rec["note"] = overlap_note(a, b) or "no interval"
            out.append(rec)
    return out


def pair_line(rec: dict) -> str:
    """One pair in words: "b vs a: step -250 ms (-20.0 %), days -3.1 (-20.0 %), ...; intervals apart: a finding"."""
    head = f"{rec['b']} vs {rec['a']}: "
    body = ", ".join(f"{PAIR_NAMES[k]} {text}" for k, (text, _) in rec["diffs"].items())
    text = head + (body + "; " if body else "") + rec["note"]
    if rec["flags"]:
        text += " (" + "; ".join(f"{label}: {f}" for label, f in rec["flags"].items()) + ")"
    return text


def format_compare(runs: list[tuple[str, dict]], width: int = COMPARE_WIDTH) -> str:
    """Summaries side by side: one row per field (`compare_keys`), a column per run and, for every run after
    the first, its difference against the first ("+53.4 ms (+13.8 %)", "0" within float noise). At most
    `width` columns: runs that do not fit go to further blocks, each beginning with the first run again, and a
    cell is cut in its middle at `CELL_MAX` characters (never the layout: `WHOLE_KEYS`; compare.csv has every
    field whole). Then every pair of runs (`pairs`), one verdict each: step time, days, total dollars and goodput
    against each other, whether the intervals overlap, and the runs' flags.

    Args:
        runs: (label, summary dict) pairs; the first is the baseline.
        width: columns of the terminal (100; compare.csv has the full table).

    Returns:
        Lines of aligned tables without a trailing newline; a note under them when intervals overlap.
    """
    summaries = [s for _, s in runs]
    keys = compare_keys(summaries)
    base = runs[0][1]
    field = ["field", "80 % interval", *keys]
    overlap = [overlap_note(base, s) for s in summaries[1:]]

    def run_col(label: str, s: dict) -> list[str]:
        band = fmt_interval(s.get("step_time_low_s"), s.get("step_time_high_s"), s.get("step_time_s"), "s")
        return [_short(label), band or "n/a", *(compare_cell(s, k) if k in WHOLE_KEYS else _short(compare_cell(s, k))
                                                 for k in keys)]

    def diff_col(s: dict, note: str) -> list[str]:
        return [_short(f"vs {runs[0][0]}"), {"": "n/a"}.get(note, note.split(":")[0].removeprefix("intervals ")),
                *(_short(compare_difference(k, base, s)[0]) for k in keys)]

    groups = [[run_col(*runs[0])]] + [[run_col(label, s), diff_col(s, note)]
                                      for (label, s), note in zip(runs[1:], overlap)]
    fw = max(map(len, field))

    def size(group: list[list[str]]) -> int:
        return sum(2 + max(map(len, col)) for col in group)

    blocks, cur = [], list(groups[0])
    for g in groups[1:]:
        if fw + size(cur) + size(g) <= width or len(cur) == 1 and not blocks:
            cur += g
        else:
            blocks.append(cur)
            cur = (list(groups[0]) if fw + size(groups[0]) + size(g) <= width else []) + g
    blocks.append(cur)
    out = []
    for cols in blocks:
        widths = [max(map(len, c)) for c in cols]
        for i in range(len(field)):
            out.append((f"{field[i]:<{fw}}" + "".join(f"  {c[i]:>{w}}" for c, w in zip(cols, widths))).rstrip())
        out.append("")
    if any(n.startswith("intervals overlap") for n in overlap):
        out.append("overlap: the 80 % step-time intervals overlap, so a faster step time there is not a finding")
    if len(runs) > 1:
        every = pairs(runs)
        out += textwrap.wrap(f"every pair, later vs earlier ({len(every)}; a finding only where the 80 % step-time "
                             f"intervals are apart):", width)
        for rec in every:
            out += textwrap.wrap(pair_line(rec), width, initial_indent="  ", subsequent_indent="      ",
                                 break_on_hyphens=False)
    return "\n".join(out).rstrip()


def numeric_difference(key: str, base: dict, run: dict) -> tuple[float | None, float | None]:
    """(run - base, run / base - 1) of a numeric field, both 0.0 within float noise (as `compare_difference`
    decides); (None, None) for text, booleans and a NaN side; the ratio None when base is 0."""
    a, b = base.get(key), run.get(key)
    if not all_finite(a, b):
        return None, None
    if compare_difference(key, base, run)[0] == "0":
        return 0 * (b - a), 0.0
    return b - a, (float(b / a - 1) if a else None)
