"""Layout table → checked sources → blocks timed (here or by Ray tasks) → ranked layouts and plan records.

Pure: no Ray, no files. `actors.plan_tasks` runs `evaluate_block` as Ray tasks; `plan.plan` composes.
Blocks are cut in the table's fixed order, and every layout's numbers depend on that layout alone (the
fast path is elementwise over its layout axis), so the results are the same whatever evaluates them:
one process, or Ray tasks on any number of nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..calibration.factors import Calibration
from ..cluster.catalog import INSTANCES
from ..scenario import Scenario
from ..stacks import SHORT, explicit as stacks_explicit
from ..step import merit
from ..step.hbm import HBM_PARTS, hbm_totals
from ..step.counts import sequence_parallel_default
from . import steps
from .steps import LAYOUT_COLUMNS, Evaluator

OBJECTIVES = {                # objective -> (column, smaller is better)
    "tokens_per_s": ("tokens_per_s", False),
    "usd_per_million_tokens": ("usd_per_million_tokens", True),
    "time_to_train": ("time_to_train_days", True),
}
SCHEDULE_SHORT = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved": "int"}
RECOMPUTE_SHORT = {"none": "no-rc", "selective": "sel-rc", "full": "full-rc"}

_WORKER_EVALUATORS: dict[tuple, Evaluator] = {}     # per process: warm caches across the blocks it evaluates


CLUSTER_COLUMNS = ["instance", "instances", "lnc"]


def blocks(table: pd.DataFrame, pieces: int = 1) -> list[pd.DataFrame]:
    """The table cut into at least `pieces` blocks along its clusters (instance type, count, lnc), largest first,
    each in pipeline-shape order (`by_pipe_rows`).

    A block holds the layouts of one cluster, or a consecutive part of a cluster larger than the table over
    `pieces`: a process that times a block shares across it what a cluster's layouts share (its collectives),
    where blocks that mix clusters make every process time every cluster's (more CPU seconds on two Ray workers:
    docs/performance.md, `benchmarks/plan_limits.py`). Largest first, so the last blocks to finish are small.
    """
    table = by_pipe_rows(table)
    n = len(table)
    size = max(1, math.ceil(n / max(pieces, 1)))
    keys = table[CLUSTER_COLUMNS].astype(str).agg("|".join, axis=1).to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]).tolist() + [n]
    out = []
    for lo, hi in zip(starts[:-1], starts[1:]):
        parts = math.ceil((hi - lo) / size)
        bounds = np.linspace(lo, hi, parts + 1).round().astype(int)
        out += [table.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return sorted(out, key=len, reverse=True)


PIPE_COLUMNS = CLUSTER_COLUMNS + ["stack", "pp", "virtual_stages"]


def by_pipe_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The table's rows ordered by cluster, stack and pipeline shape (pp, virtual stages), otherwise in table order
    (its index kept): consecutive pieces of it share their per-shape work (one pipeline program, its sends and
    its schedule runs per shape; a stack's operators), where pieces of the table's own order each hold every
    shape."""
    return table.sort_values([c for c in PIPE_COLUMNS if c in table.columns], kind="stable")


def evaluate_block(scenario: Scenario, calibration: Calibration | None, sources: dict[str, str],
                   table: pd.DataFrame, evaluator: Evaluator | None = None) -> pd.DataFrame:
    """Time one block; reuses this process's Evaluator for the same scenario (caches stay warm). The `reason` of a
    layout that does not fit is left None: `apply_headroom` words every one."""
    if evaluator is None:
        key = (scenario.model_dump_json(), stacks_explicit(scenario), repr(calibration), tuple(sorted(sources.items())))
        evaluator = _WORKER_EVALUATORS.get(key)
        if evaluator is None:
            _WORKER_EVALUATORS.clear()
            evaluator = _WORKER_EVALUATORS[key] = Evaluator(scenario, calibration, sources)
    out = steps.evaluate(evaluator, table, reasons=False)
    out.index = table.index
    return out


def assemble(table: pd.DataFrame, results: list[pd.DataFrame], tokens: float | None, tokens_per_step: float,
             prices: dict[str, float | None], hbm_headroom: float = 0.0) -> pd.DataFrame:
    """Layout columns + results, one row per layout (the full table), in the table's order: priced with `prices`
    (instance type → USD per instance-hour, None: unknown), the HBM headroom applied (`apply_headroom`), with
    `time_to_train_days` and `total_cost_usd` when `tokens` is given."""
    res = pd.concat(results).loc[table.index]
    out = pd.concat([table.reset_index(drop=True), res.reset_index(drop=True)], axis=1)
    # the plan's prices (`plan.options.resolve_prices`: `--price-per-hour` over the scenario's and the catalog's)
    # replace the fast path's, which knows only the scenario's and the catalog's
    per_instance = out["instance"].map({k: np.nan if v is None else float(v) for k, v in prices.items()})
    fom = merit.figures(out["step_time_s"].to_numpy(float), tokens_per_step, np.nan, np.nan,
                        out["instances"].to_numpy(), per_instance.to_numpy(float))
    # the cluster's USD per hour (all its instances); `price_per_hour_usd`, the old name of the same column, is kept
    # for one release (summary.json's `price_per_hour_usd` is one instance's: docs/plan.md)
    out["cluster_usd_per_hour"] = out["price_per_hour_usd"] = fom["cluster_usd_per_hour"]
    out["usd_per_million_tokens"] = fom["usd_per_million_tokens"]
    apply_headroom(out, hbm_headroom)
    if tokens is not None:
        out["time_to_train_days"] = tokens / out["tokens_per_s"] / 86400.0
        out["total_cost_usd"] = out["cluster_usd_per_hour"] * out["time_to_train_days"] * 24.0
    out.insert(0, "layout", labels(out))
    return out


def apply_headroom(out: pd.DataFrame, headroom: float) -> None:
    """A layout whose worst stage needs more than (1 - headroom) of a rank's HBM is infeasible (in place), and
    every infeasible layout's `reason` names what its worst stage needs against what it has, to 4 decimals (12.0021
    GiB of 12.0000 GiB). Step times are left as the fast path gave them: a layout over the headroom keeps its
    predicted step time, it just cannot rank."""
    cap = out["hbm_capacity_gib"].to_numpy(dtype=float)
    hbm = hbm_totals(*(out[k].to_numpy(float)[:, None] for k in HBM_PARTS), cap[:, None])   # the worst stage's
    need, fits = hbm.worst_total, hbm.fits
    allowed = (1.0 - headroom) * cap
    over = fits & (need > allowed) & out["feasible"].to_numpy(dtype=bool)
    feasible = out["feasible"].to_numpy(dtype=bool) & ~over
    rows = np.flatnonzero(~feasible)
    given = out["reason"].to_numpy(dtype=object) if "reason" in out else np.full(len(out), None, dtype=object)
    reasons = np.full(len(out), None, dtype=object)
    kept = np.array([r is not None and r == r for r in given], dtype=bool)   # the fast path's own (operators)
    reasons[kept] = given[kept]
    rows = rows[~kept[rows]]
    said: dict[tuple, str] = {}                # each distinct reason worded once (many layouts share one)
    for i, key in zip(rows.tolist(), zip(out["worst_stage"].to_numpy()[rows].tolist(), need[rows].tolist(),
                                         cap[rows].tolist(), allowed[rows].tolist(), over[rows].tolist())):
        text = said.get(key)
        if text is None:
            stage, n, c, a, o = key
            text = said[key] = (
                f"over the HBM headroom: a rank of pipeline stage {stage} needs {n:.4f} GiB of its {c:.4f} GiB, more "
                f"than the {100 * (1 - headroom):.4g} % ({a:.4f} GiB) that --hbm-headroom {headroom:g} leaves" if o
                else f"does not fit in HBM: a rank of pipeline stage {stage} needs {n:.4f} GiB of its {c:.4f} GiB")
        reasons[i] = text
    out["feasible"] = feasible
    out["reason"] = reasons
    out["hbm_fraction"] = need / cap


# settings a search varies that can change nothing: rows differing only in one of them, at the same step time
# and HBM, are one layout (the first value listed is the one kept: the simplest)
EQUIVALENT_SETTINGS = {"recompute": ("none", "selective", "full"), "zero": (0, 1, 3),
                       "pp_schedule": ("1f1b", "gpipe", "interleaved")}


def _close_key(x: np.ndarray) -> np.ndarray:
    """Equal for numbers within about 1e-10 of each other (relative): a grouping key."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, np.round(np.log(np.where(x > 0, x, 1.0)) * 1e10), np.nan)


def fold_equivalent(out: pd.DataFrame) -> int:
    """Feasible rows that differ from another only in settings of EQUIVALENT_SETTINGS (the pipeline schedule
    with its virtual stages) at the same step time and HBM peak are one layout: the row with the simplest values
    is kept and lists the others in `equivalent` ("recompute selective; zero 1"); each other row names the kept
    one in `same_as` and does not rank. Adds both columns in place; returns how many rows were folded."""
    n = len(out)
    same_as = np.full(n, "", dtype=object)
    equivalent = np.full(n, "", dtype=object)
    rows = np.flatnonzero(out["feasible"].to_numpy(dtype=bool))
    if rows.size > 1:
        sub = out.iloc[rows]
        keys = [c for c in LAYOUT_COLUMNS if c not in EQUIVALENT_SETTINGS and c != "virtual_stages"]
        frame = sub[keys].assign(_s=_close_key(sub["step_time_s"].to_numpy(float)),
                                 _h=_close_key(sub["hbm_peak_gib"].to_numpy(float)))
        gid = frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()
        ranks = [sub[c].map({v: i for i, v in enumerate(order)}).to_numpy() for c, order in
                 EQUIVALENT_SETTINGS.items()]
        # by group, then the simplest values (recompute, then ZeRO, then schedule and virtual stages), then order
        pos = np.lexsort((np.arange(rows.size), sub["virtual_stages"].to_numpy(), *ranks[::-1], gid))
        first = np.ones(rows.size, dtype=bool)
        first[1:] = gid[pos][1:] != gid[pos][:-1]
        keeper = pos[np.maximum.accumulate(np.where(first, np.arange(rows.size), 0))]
        labels_ = out["layout"].to_numpy()
        values = {c: sub[c].to_numpy() for c in (*EQUIVALENT_SETTINGS, "virtual_stages")}
        alternatives: dict[int, list[str]] = {}
        for j, k in zip(pos[~first], keeper[~first]):
            same_as[rows[j]] = labels_[rows[k]]
            what = []
            for c in EQUIVALENT_SETTINGS:
                if values[c][j] != values[c][k] or (c == "pp_schedule" and
                                                    values["virtual_stages"][j] != values["virtual_stages"][k]):
                    v = values[c][j]
                    v = f"interleaved {values['virtual_stages'][j]}" if v == "interleaved" else v
                    what.append(f"{'schedule' if c == 'pp_schedule' else c} {v}")
            alternatives.setdefault(int(rows[k]), []).append(" + ".join(what))
        for row, alts in alternatives.items():
            equivalent[row] = "; ".join(alts)
    out["equivalent"] = equivalent
    out["same_as"] = same_as
    return int((same_as != "").sum())


def pareto_front(cost: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both (lower cost, higher speed), cheapest first."""
    order = np.lexsort((-speed, cost))
    front, best = [], -np.inf
    for i in order:
        if speed[i] > best:
            front.append(i)
            best = speed[i]
    return np.array(front, dtype=np.int64)


def mark_pareto(out: pd.DataFrame) -> None:
    """`pareto` (in place): a ranking row (feasible, not folded) that no other is both faster than and cheaper
    than: within its instance type by instance-hours per token (whatever the price), and across the priced types
    by US dollars per token."""
    ok = (out["feasible"] & (out["same_as"] == "") & np.isfinite(out["tokens_per_s"].astype(float))).to_numpy()
    mark = np.zeros(len(out), dtype=bool)
    speed = out["tokens_per_s"].to_numpy(float)
    hours = out["instances"].to_numpy(float) / np.where(speed > 0, speed, np.nan)
    for _, idx in out[ok].groupby("instance", sort=False).indices.items():
        rows = np.flatnonzero(ok)[idx]
        mark[rows[pareto_front(hours[rows], speed[rows])]] = True
    usd = out["usd_per_million_tokens"].to_numpy(float)
    priced = np.flatnonzero(ok & np.isfinite(usd))
    if priced.size:
        mark[priced[pareto_front(usd[priced], speed[priced])]] = True
    out["pareto"] = mark


_LABEL_COLUMNS = ("stack", "instances", "instance", "lnc", "tp", "pp", "dp", "cp", "ep", "pp_schedule",
                  "virtual_stages", "micro_batch", "recompute", "zero", "sequence_parallel")


def labels(t: pd.DataFrame) -> list[str]:
    """`label` of every row (from the columns as Python lists: no per-row Series): `_label`'s text in three pieces,
    each worded once per distinct value of what it reads (a search's rows share them: the 70B plan's 8,586 labels
    from about 300 pieces, in a third of the time)."""
    cols = [t[c].tolist() if c in t.columns else ["custom"] * len(t) for c in _LABEL_COLUMNS]
    heads: dict[tuple, str] = {}
    mids: dict[tuple, str] = {}
    tails: dict[tuple, str] = {}
    out = []
    for stack, instances, instance, lnc, tp, pp, dp, cp, ep, sched, v, mb, rc, zero, sp in zip(*cols):
        h = heads.get(k1 := (stack, instances, instance, lnc))
        if h is None:
            h = heads[k1] = _label_head(*k1)
        m = mids.get(k2 := (tp, pp, dp, cp, ep, sched, v))
        if m is None:
            m = mids[k2] = _label_mid(*k2)
        e = tails.get(k3 := (mb, rc, zero, tp, sp))
        if e is None:
            e = tails[k3] = _label_tail(*k3)
        out.append(h + m + e)
    return out


def label(r) -> str:
    """Short text of a layout: "nxd: 32 x trn1.32xlarge tp32 pp8 dp4 1f1b mb1 sel-rc zero1" (its stack's short name
    first, `stacks.SHORT`; none for `custom`)."""
    return _label(*(r.get(c, "custom") if c == "stack" else r[c] for c in _LABEL_COLUMNS))


_PREFIX = {name: "" if name == "custom" else f"{short}: " for name, short in SHORT.items()}
_HAS_LNC = {name: len(spec.allowed_lnc) > 1 for name, spec in INSTANCES.items()}


def _label(stack, instances, instance, lnc, tp, pp, dp, cp, ep, pp_schedule, virtual_stages, micro_batch, recompute,
           zero, sequence_parallel) -> str:
    return (_label_head(stack, instances, instance, lnc) + _label_mid(tp, pp, dp, cp, ep, pp_schedule, virtual_stages)
            + _label_tail(micro_batch, recompute, zero, tp, sequence_parallel))


def _label_head(stack, instances, instance, lnc) -> str:
    return f"{_PREFIX.get(stack, stack + ': ')}{instances} x {instance}" + (f" lnc{lnc}" if _HAS_LNC.get(instance) else "")


def _label_mid(tp, pp, dp, cp, ep, pp_schedule, virtual_stages) -> str:
    text = f" tp{tp} pp{pp} dp{dp}"
    if cp > 1:
        text += f" cp{cp}"
    if ep > 1:
        text += f" ep{ep}"
    if pp > 1:
        text += " " + SCHEDULE_SHORT.get(pp_schedule, pp_schedule) + (f"{virtual_stages}" if
                                                                     pp_schedule == "interleaved" else "")
    return text


def _label_tail(micro_batch, recompute, zero, tp, sequence_parallel) -> str:
    text = f" mb{micro_batch} {RECOMPUTE_SHORT.get(recompute, recompute)} zero{zero}"
    return text + (" no-sp" if sequence_parallel_default(tp) and not sequence_parallel else "")


RANK_BY = {             # --rank-by → the end of each layout's 80 % interval that ranks it, and how a reader says it
    "low": ("step_time_high_s", "the pessimistic end of the 80 % interval (its slow end)"),
    "point": ("step_time_s", "the point prediction"),
    "high": ("step_time_low_s", "the optimistic end of the 80 % interval (its fast end)"),
}
END_NAMES = {"low": "slow end", "point": "point", "high": "fast end"}


def at_end(table: pd.DataFrame, objective: str, rank_by: str) -> np.ndarray:
    """The objective of every row at the end of its interval `rank_by` names (`RANK_BY`): the point's value scaled
    by that end's step time (tokens/s inversely, cost and days in proportion); NaN where it has no interval."""
    col, _ = OBJECTIVES[objective]
    value = table[col].to_numpy(float)
    if rank_by == "point":
        return value
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = table[RANK_BY[rank_by][0]].to_numpy(float) / table["step_time_s"].to_numpy(float)
        return value / ratio if objective == "tokens_per_s" else value * ratio


def eligible(table: pd.DataFrame, objective: str, max_usd_per_hour: float | None) -> pd.Series:
    """Rows that can rank: feasible, not folded into an equivalent row (`same_as`), with a finite objective, and
    within the budget when one is given (a layout whose price is unknown cannot be shown to be within it)."""
    col, _ = OBJECTIVES[objective]
    ok = table["feasible"] & np.isfinite(table[col].astype(float))
    if "same_as" in table.columns:
        ok &= table["same_as"] == ""
    if max_usd_per_hour is not None:
        ok &= table["cluster_usd_per_hour"].astype(float) <= max_usd_per_hour
    return ok


def ranked(table: pd.DataFrame, objective: str, max_usd_per_hour: float | None = None,
           rank_by: str = "point") -> pd.DataFrame:
    """Eligible rows with a value at the `rank_by` end, best first by that value alone (ties: the table's order).
    Nothing else moves a row: `mfu_implausible` is a flag beside it (the interval, widened where the evidence
    ends, is what ranks); docs/plan.md "The ranking" says so and tests/plan/test_plan_ranking.py holds a real
    plan to it."""
    _, ascending = OBJECTIVES[objective]
    value = at_end(table, objective, rank_by)
    ok = eligible(table, objective, max_usd_per_hour).to_numpy() & np.isfinite(value)
    sub = table[ok].assign(_rank_value=value[ok])
    out = sub.sort_values("_rank_value", ascending=ascending, kind="stable")
    return out.drop(columns="_rank_value")


def best_per_type(table: pd.DataFrame, objective: str, max_usd_per_hour: float | None = None,
                  rank_by: str = "point", by: str = "instance") -> pd.DataFrame:
    """The best ranking row of each instance type (`by`: or of each value of another column, e.g. `stack`), in the
    order the table first holds them, by the objective."""
    best = ranked(table, objective, max_usd_per_hour, rank_by)
    firsts = best.drop_duplicates(by, keep="first")
    order = {t: i for i, t in enumerate(dict.fromkeys(table[by]))}
    return firsts.iloc[np.argsort(firsts[by].map(order).to_numpy(), kind="stable")]


def closest(table: pd.DataFrame) -> dict | None:
    """The infeasible layout nearest to fitting (smallest HBM need over capacity), as a record."""
    if table.empty:
        return None
    ratio = table["hbm_peak_gib"] / table["hbm_capacity_gib"]
    r = table.loc[ratio.idxmin()]
    return {"layout": layout_record(r), "label": r["layout"], "hbm_peak_gib": float(r["hbm_peak_gib"]),
            "hbm_capacity_gib": float(r["hbm_capacity_gib"]), "reason": r["reason"]}


def layout_record(r) -> dict:
    """The layout columns of a row as plain JSON values."""
    out = {}
    for c in LAYOUT_COLUMNS:
        v = r[c]
        out[c] = v.item() if hasattr(v, "item") else v
    return out


def numbers(r, columns=("step_time_s", "tokens_per_s", "mfu", "hbm_peak_gib", "hbm_capacity_gib", "hbm_fraction",
                        "usd_per_million_tokens", "cluster_usd_per_hour", "price_per_hour_usd", "goodput",
                        "time_to_train_days",
                        "total_cost_usd", "compute_cost_usd", "storage_cost_usd")) -> dict:
    """A row's figures as JSON values (None for NaN or absent)."""
    out = {}
    for c in columns:
        if c in r.index:
            v = float(r[c])
            out[c] = v if math.isfinite(v) else None
    return out


@dataclass
class Evaluated:
    """A searched space: every layout with its figures, and how the search ran."""

    table: pd.DataFrame
    sources: dict[str, str]
    wall_s: float
    ray_nodes: int
    results: list[pd.DataFrame]
