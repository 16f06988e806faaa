"""Each plan row against the scenario's own layout, on the objective the plan ranks by.

A row on the own layout's cluster (instance type and count) is compared on the objective itself: tokens/s, $ per
million tokens, or days to train. A row on another cluster is not compared on tokens/s or days, which grow with
the instances bought: it is compared on $ per million tokens where both rows have a price, else on tokens/s per
instance; `vs_scenario_on` says which. "A finding" only when the two rows' 80 % intervals, on that same measure,
are apart (`compare`'s wording: docs/plan.md "Against the scenario's own layout").
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..layouts import ranking
from ..layouts.intervals import INTERVAL_COLUMNS
from ..step.merit import budget_bands

# measure -> (column, larger is better, the words for better, worse and within 0.5 %)
MEASURES = {
    "tokens/s": ("tokens_per_s", True, ("faster", "slower", "as fast")),
    "$ per M tokens": ("usd_per_million_tokens", False, ("cheaper per token", "dearer per token", "as cheap")),
    "days": ("time_to_train_days", False, ("sooner", "later", "as soon")),
    "tokens/s per instance": ("tokens_per_s_per_instance", True, ("more tokens/s per instance",
                                                                 "fewer tokens/s per instance",
                                                                 "as many tokens/s per instance")),
}
OBJECTIVE_MEASURE = {"tokens_per_s": "tokens/s", "usd_per_million_tokens": "$ per M tokens", "time_to_train": "days"}


def measures(full: pd.DataFrame, own: pd.Series, objective: str) -> np.ndarray:
    """The measure each row is compared with the own layout on (MEASURES' keys): the objective on the own layout's
    cluster, else $ per M tokens where both are priced, else tokens/s per instance."""
    same = (full["instance"].to_numpy() == own["instance"]) & (full["instances"].to_numpy() == own["instances"])
    col = MEASURES[OBJECTIVE_MEASURE[objective]][0]
    has_obj = np.isfinite(full[col].to_numpy(float)) & np.isfinite(float(own[col])) if col in full.columns \
        else np.zeros(len(full), dtype=bool)
    priced = np.isfinite(full["usd_per_million_tokens"].to_numpy(float)) & \
        np.isfinite(float(own["usd_per_million_tokens"]))
    return np.where(same & has_obj, OBJECTIVE_MEASURE[objective],
                    np.where(same, "tokens/s", np.where(priced, "$ per M tokens", "tokens/s per instance")))


def _on(t: pd.DataFrame, measure: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(point, slow end, fast end) of every row on a measure: the point scaled by each end's step time."""
    col, larger, _ = MEASURES[measure]
    point = t["tokens_per_s"].to_numpy(float) / t["instances"].to_numpy(float) if col == "tokens_per_s_per_instance" \
        else t[col].to_numpy(float)
    step = t["step_time_s"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        slow, fast = (t[c].to_numpy(float) / step for c in ("step_time_high_s", "step_time_low_s"))
        return (point, point / slow, point / fast) if larger else (point, point * slow, point * fast)


def compare_with_scenario(full: pd.DataFrame, objective: str = "tokens_per_s") -> dict:
    """`vs_scenario_pct` (how much better each row's point is than the own layout's on its measure, %: more
    tokens/s, or a lower cost or fewer days), `vs_scenario_on` (the measure, `measures`) and `vs_scenario` ("9 %
    faster (intervals overlap: not a finding)", "12 % cheaper per token, 64 vs 32 x trn1.32xlarge (intervals
    apart: a finding)"; "" without an interval), in place; returns the own layout's record, or why it cannot be
    compared (it does not fit, or no stack searched runs it)."""
    own = full[full["scenario_layout"]]
    full["vs_scenario_pct"] = np.nan
    full["vs_scenario_on"] = ""
    full["vs_scenario"] = ""
    if own.empty:
        return {"feasible": False, "reason": "not among the layouts searched"}
    o = own.iloc[0]
    if not bool(o["feasible"]):
        why = "is not run by a stack searched" if str(o["reason"]).startswith("no stack") else "does not fit"
        return {"label": o["layout"], "stack": o["stack"], "feasible": False, "reason": o["reason"],
                "comparison": f"the scenario's own layout {why}: {o['reason']}"}
    on = measures(full, o, objective)
    ok = full["feasible"].to_numpy(dtype=bool).copy()
    pct, apart, known = np.full(len(full), np.nan), np.zeros(len(full), dtype=bool), np.zeros(len(full), dtype=bool)
    for m in dict.fromkeys(on.tolist()):
        rows = on == m
        point, slow, fast = _on(full, m)
        p0, s0, f0 = (float(x[full.index.get_loc(o.name)]) for x in (point, slow, fast))
        larger = MEASURES[m][1]
        with np.errstate(divide="ignore", invalid="ignore"):
            pct[rows] = (100 * (point / p0 - 1) if larger else 100 * (1 - point / p0))[rows]
        lo, hi = np.minimum(slow, fast), np.maximum(slow, fast)
        known[rows] = (np.isfinite(lo) & np.isfinite(hi))[rows] & np.isfinite(min(s0, f0))
        apart[rows] = ((hi < min(s0, f0)) | (lo > max(s0, f0)))[rows]
    ok &= np.isfinite(pct)
    full.loc[ok, "vs_scenario_pct"] = pct[ok]
    full["vs_scenario_on"] = np.where(ok, on, "")
    text = np.full(len(full), "", dtype=object)
    inst, count = full["instance"].to_numpy(), full["instances"].to_numpy()
    for i in np.flatnonzero(ok & known):
        if bool(full["scenario_layout"].iat[i]):
            text[i] = "the scenario's own layout"
            continue
        better, worse, same = MEASURES[on[i]][2]
        how = same if round(abs(pct[i])) == 0 else f"{abs(pct[i]):.0f} % {better if pct[i] > 0 else worse}"
        where = "" if (inst[i], count[i]) == (o["instance"], o["instances"]) else \
            f", {count[i]} vs {o['instances']} x {o['instance']}" if inst[i] == o["instance"] else \
            f", {count[i]} x {inst[i]} vs {o['instances']} x {o['instance']}"
        note = "intervals apart: a finding" if apart[i] else "intervals overlap: not a finding"
        text[i] = f"{how}{where} ({note})"
    full["vs_scenario"] = text
    return {"label": o["layout"], "stack": o["stack"], "feasible": True, **ranking.numbers(o),
            **ranking.numbers(o, INTERVAL_COLUMNS), "extrapolated": [a for a in str(o["extrapolated"]).split(",") if a],
            "mfu_implausible": bool(o["mfu_implausible"])}


def standing(full: pd.DataFrame, best: pd.DataFrame, objective: str, rank_by: str) -> str:
    """Where the scenario's own layout ranks, in words: "ranks #3 by tokens_per_s at its slow end; 2 layouts better
    there, the top one by 9 %", as the equivalent row it is folded into where it is; or why it does not rank (does
    not fit, no stack searched runs it, over the budget)."""
    own = full[full["scenario_layout"]]
    if own.empty:
        return "not among the layouts searched"
    o = own.iloc[0]
    if not bool(o["feasible"]):
        return f"does not rank: {o['reason']}"
    as_row, note = o.name, ""
    if str(o.get("same_as", "")):                # folded: it ranks as the equivalent row it is folded into
        kept = np.flatnonzero(full["layout"].to_numpy() == o["same_as"])
        as_row, note = (full.index[kept[0]] if kept.size else o.name), f", as {o['same_as']} (the same step and HBM)"
    if as_row not in best.index:
        return "does not rank: not within --max-usd-per-hour, or no value at the ranking's end"
    place = int(best.index.get_loc(as_row)) + 1
    end = ranking.END_NAMES[rank_by]
    return f"ranks #{place:,} by {objective} at its {end}{note}" + (
        "" if place == 1 else f"; {place - 1:,} layout{'s' * (place > 2)} better there, the top one by "
                              f"{_gain(best, as_row, objective):.0f} %")


def _gain(best: pd.DataFrame, row, objective: str) -> float:
    """How much better the top row's ranking value is than `row`'s, %."""
    col = "rank_value" if "rank_value" in best.columns else ranking.OBJECTIVES[objective][0]
    top, own = float(best[col].iloc[0]), float(best.loc[row, col])
    return 100 * (top / own - 1) if not ranking.OBJECTIVES[objective][1] else 100 * (1 - top / own)


def stacks_without_a_layout(full: pd.DataFrame, stacks: tuple[str, ...], ranked_stacks) -> dict[str, str]:
    """Each stack searched that has no ranked layout, and why: it runs none of the layouts searched on these
    instance types, or none it runs fits (its closest, with what it needs)."""
    out = {}
    for name in stacks:
        if name in set(ranked_stacks):
            continue
        rows = full[full["stack"] == name]
        if rows.empty:
            out[name] = "runs none of the layouts searched on these instance types"
        elif not rows["feasible"].any():
            c = ranking.closest(rows)
            out[name] = f"none of the {len(rows):,} layouts it runs fits; closest: {c['label']}: {c['reason']}"
        else:
            out[name] = "none of the layouts it runs that fit is within --max-usd-per-hour or has a ranking value"
    return out


# --- the decision view: the best layout of each (instance type, count, stack) and verdicts between neighbours ----
DECISION_GROUP = "_decision_group"     # the column `time_for_ranking` scopes by, so each group's best is timed
DECISION_KEYS = ("instance", "instances", "stack")


def decision_groups(full: pd.DataFrame) -> None:
    """Add the column naming each row's (instance type, count, stack) group (in place; `decision` drops it)."""
    full[DECISION_GROUP] = (full["instance"].astype(str) + "|" + full["instances"].astype(str) + "|"
                            + full["stack"].astype(str))


def _row(r: pd.Series, chips_per_instance: int) -> dict:
    step = float(r["step_time_s"])
    low, high = float(r.get("step_time_low_s", np.nan)), float(r.get("step_time_high_s", np.nan))
    out = {k: r[k] for k in DECISION_KEYS}
    out["instances"] = int(out["instances"])
    out["chips"] = int(r["instances"]) * chips_per_instance
    out["fits"] = True
    out["label"] = r["layout"]
    out["layout"] = ranking.layout_record(r)
    out.update(ranking.numbers(r, ("step_time_s", "step_time_low_s", "step_time_high_s", "tokens_per_s",
                                   "tokens_per_s_low", "tokens_per_s_high", "mfu", "usd_per_million_tokens",
                                   "cluster_usd_per_hour", "price_per_hour_usd", "goodput", "time_to_train_days",
                                   "total_cost_usd",
                                   "compute_cost_usd", "storage_cost_usd", "rank_value")))
    bands = budget_bands(out.get("time_to_train_days"), out.get("total_cost_usd"), step, low, high)
    out.update({k: v if math.isfinite(v) else None for k, v in bands.items()})
    out["extrapolated"] = [a for a in str(r.get("extrapolated", "")).split(",") if a]
    out["mfu_implausible"] = bool(r.get("mfu_implausible", False))
    return out


def _usd(v: float) -> str:
    a = abs(v)
    return f"${a / 1e6:.1f} M" if a >= 1e6 else f"${a / 1e3:.0f} k" if a >= 1e3 else f"${a:.0f}"


def verdict(a: dict, b: dict) -> tuple[str, bool | None]:
    """How row `a` stands against row `b` ("0.5 % faster, $2.0 M dearer, intervals overlap: not a finding"), and
    whether it is a finding (their 80 % intervals apart: days with a budget, else tokens/s; None without intervals).
    """
    parts = []
    if a.get("time_to_train_days") and b.get("time_to_train_days"):
        pct = 100 * (b["time_to_train_days"] / a["time_to_train_days"] - 1)
        lo = ("time_to_train_low_days", "time_to_train_high_days")
        kind = "faster" if pct >= 0 else "slower"
        parts.append(f"{abs(pct):.1f} % {kind} ({a['time_to_train_days']:,.1f} vs {b['time_to_train_days']:,.1f} days)")
    else:
        pct = 100 * (a["tokens_per_s"] / b["tokens_per_s"] - 1)
        lo = ("tokens_per_s_low", "tokens_per_s_high")
        parts.append(f"{abs(pct):.1f} % {'faster' if pct >= 0 else 'slower'}")
    if a.get("total_cost_usd") is not None and b.get("total_cost_usd") is not None:
        d = a["total_cost_usd"] - b["total_cost_usd"]
        parts.append(f"{_usd(d)} {'dearer' if d > 0 else 'cheaper'}" if abs(d) >= 0.5 else "as dear")
    elif a.get("usd_per_million_tokens") is not None and b.get("usd_per_million_tokens") is not None:
        d = a["usd_per_million_tokens"] - b["usd_per_million_tokens"]
        parts.append(f"${abs(d):.3f} per M tokens {'dearer' if d > 0 else 'cheaper'}")
    else:
        parts.append("no price")
    ends = [a.get(lo[0]), a.get(lo[1]), b.get(lo[0]), b.get(lo[1])]
    if any(e is None for e in ends):
        return ", ".join(parts) + ", no interval", None
    apart = max(ends[0], ends[1]) < min(ends[2], ends[3]) or max(ends[2], ends[3]) < min(ends[0], ends[1])
    return ", ".join(parts) + (", intervals apart: a finding" if apart else ", intervals overlap: not a finding"), apart


def _short(instance: str) -> str:
    return instance.split(".")[0]


def decision(full: pd.DataFrame, objective: str, max_usd_per_hour: float | None, rank_by: str,
             space_order: dict[str, list]) -> dict:
    """plan.json's `decision`: one row per (instance type, count, stack) searched, its best layout by the ranking
    (`ranking.ranked`: the objective at the `rank_by` end) with days, dollars (compute and storage), goodput and the
    80 % interval, or why none fits; and the verdicts between neighbours: each instance type against the first
    searched at the same count and stack, each count against the next smaller at the same type and stack, each
    stack against the best stack at the same type and count. Drops the group column (`decision_groups`)."""
    from ..cluster.catalog import INSTANCES

    best = ranking.ranked(full, objective, max_usd_per_hour, rank_by).drop_duplicates(DECISION_GROUP)
    rows = []
    for inst in space_order["instance"]:
        for n in space_order["instances"]:
            for st in space_order["stack"]:
                key = f"{inst}|{n}|{st}"
                hit = best[best[DECISION_GROUP] == key]
                chips = INSTANCES[inst].chips
                if len(hit):
                    rows.append(_row(hit.iloc[0], chips))
                    continue
                members = full[full[DECISION_GROUP] == key]
                if members.empty:
                    why = f"{st} does not run on {inst}"
                elif not members["feasible"].any():
                    why = f"none of its {len(members):,} layouts fits: " + str(members["reason"].iloc[0])
                else:
                    why = "no layout can rank (no value on the objective)"
                rows.append({"instance": inst, "instances": int(n), "chips": int(n) * chips, "stack": st,
                             "fits": False, "reason": why})
    del full[DECISION_GROUP]
    fit = {(r["instance"], r["instances"], r["stack"]): r for r in rows if r["fits"]}
    verdicts = []

    def add(kind: str, a: dict, b: dict, words: str) -> None:
        text, finding = verdict(a, b)
        verdicts.append({"kind": kind, "a": {k: a[k] for k in DECISION_KEYS}, "b": {k: b[k] for k in DECISION_KEYS},
                         "verdict": f"{words}: {text}", "finding": finding})
    types, counts, stacks_ = space_order["instance"], sorted(space_order["instances"]), space_order["stack"]
    from .. import stacks as stk
    short = stk.SHORT
    for n in counts:
        for st in stacks_:
            b = fit.get((types[0], n, st))
            for t in types[1:]:
                a = fit.get((t, n, st))
                if a and b:
                    add("instance", a, b, f"{_short(t)} vs {_short(types[0])} ({n:,} x, {short.get(st, st)})")
    for t in types:
        for st in stacks_:
            for n0, n1 in zip(counts, counts[1:]):
                a, b = fit.get((t, n1, st)), fit.get((t, n0, st))
                if a and b:
                    add("instances", a, b, f"{a['chips']:,} vs {b['chips']:,} chips ({_short(t)}, {short.get(st, st)})")
    col, smaller = ranking.OBJECTIVES[objective]
    for t in types:
        for n in counts:
            group = [fit[(t, n, st)] for st in stacks_ if (t, n, st) in fit]
            if len(group) < 2:
                continue
            lead = sorted(group, key=lambda r: (r["rank_value"] if smaller else -r["rank_value"]))[0]
            for r in group:
                if r is not lead:
                    add("stack", r, lead, f"{short.get(r['stack'], r['stack'])} vs {short.get(lead['stack'], lead['stack'])}"
                                           f" ({_short(t)} x {n:,})")
    return {"rows": rows, "verdicts": verdicts, "ranked_by": f"{objective} at the {ranking.END_NAMES[rank_by]}"}
