"""The planner command: a scenario's model and job → every valid layout evaluated → the best replayed → a plan.

`plan` is the planner's composition root, one call per stage: `layouts.space.enumerate_layouts` (every valid
layout) → the blocks evaluated by `layouts.steps.evaluate`, in this process or as Ray tasks (`actors.plan_tasks`) →
`layouts.ranking.ranked` → the top layouts replayed with `runner.run` → `output.write_plan_dir`. The pure
search and evaluation live in `ultracluster.layouts`, below this command (which sits above `runner`). See
docs/plan.md.
"""
from __future__ import annotations

import gc
import math
import os
import shutil
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .. import stacks
from ..shards.worker import actor_bytes
from ..cluster import fold
from ..calibration.factors import Calibration
from ..calibration.profile import calibration_for
from ..scenario import Scenario, load_scenario
from ..layouts import ranking
from ..report.rundir import move_into_place, staging_beside
from ..layouts.steps import LAYOUT_COLUMNS, Evaluator
from ..layouts.intervals import INTERVAL_COLUMNS, LayoutEvidence, time_for_ranking
from ..layouts.space import SearchSpace, own_row, enumerate_layouts, own_stack, searched
from .options import CATALOG_PRICE, MAX_SEARCH_MINUTES, check_options, check_size, resolve_prices
from .budget import budget_band_columns, budget_columns
from .compare import DECISION_GROUP, compare_with_scenario, decision, decision_groups, stacks_without_a_layout, \
    standing
from .output import check_plan_dir, full_table_name, layout_yaml, write_plan_dir
from .result import PlanResult

__all__ = ["DEFAULT_HBM_HEADROOM", "plan"]
DEFAULT_HBM_HEADROOM = 0.05    # a planning margin, not a measured figure: a layout may use at most 95 % of a rank's
                               # HBM (issue 24: the winners sat at 95-99 %, where the model's HBM estimate leaves
                               # nothing for the allocator); `--hbm-headroom` sets it

EMBEDDED_RAY_START_S = 12.0    # starting an embedded local Ray and warming workers that import the planner (measured
                               # 5-12 s on the 2-CPU development machine): the in-process search must save more
IN_PROCESS_LAYOUTS_PER_S = 5000.0   # a conservative in-process rate (docs/performance.md measures about 10,000/s)
REPLAY_DIFFERENCE_NOTE = 0.01  # a replayed layout further than this from its fast-path step time gets a note
EVALUATED_PIECE_LAYOUTS = 16384  # layouts evaluated per piece in this process, for progress (the same numbers; cut
                               # along pipeline shapes; each repeats its pipelines' runs: 4,096 cost 5-10 % more CPU)


def _evaluate(base: Scenario, table: pd.DataFrame, calibration: Calibration | None, address: str | None,
              log: Callable[[str], None], session: ExitStack, shards: Callable[[], int],
              progress=None) -> ranking.Evaluated:
    """Evaluate every block here or with Ray tasks; times the search itself. A Ray it
    attaches to (or starts) stays attached in `session` for the replays (`shards()`: actor slots they need,
    asked only when a Ray is started: a search evaluated here does not import Ray).
    `progress` (a `report.WorkProgress`) is told the layouts evaluated as pieces come back."""
    t0 = time.perf_counter()
    pr = Evaluator(base, calibration)
    sources = dict(pr.sources)     # every part batched: the functions `run` calls, over a row axis
    from ..actors import plan_tasks          # the only Ray the planner touches

    done = progress.advance if progress is not None else None
    if plan_tasks.wanted(address):
        session.enter_context(plan_tasks.planning_ray(address, shards()))
        pieces = ranking.blocks(table, 2 * plan_tasks.cluster_cpus())
        results, nodes = plan_tasks.evaluate_on_ray(base, calibration, sources, pieces, done)
        return ranking.Evaluated(table, sources, time.perf_counter() - t0, nodes, results)
    cpus = os.cpu_count() or 1
    expected_s = len(table) / IN_PROCESS_LAYOUTS_PER_S
    nodes = 0
    if cpus > 1 and expected_s * (1 - 1 / cpus) > EMBEDDED_RAY_START_S:
        log(f"plan: {len(table):,} layouts: evaluating them on an embedded Ray ({cpus} CPUs)")
        session.enter_context(plan_tasks.planning_ray(None, shards()))
        results, nodes = plan_tasks.evaluate_on_ray(base, calibration, sources, ranking.blocks(table, 2 * cpus), done)
    else:     # here, in pieces (the same numbers in any order: `ranking.assemble` restores it; one: the table's own)
        results, ordered = [], ranking.by_pipe_rows(table) if len(table) > EVALUATED_PIECE_LAYOUTS else table
        for lo in range(0, len(table), EVALUATED_PIECE_LAYOUTS):
            results.append(ranking.evaluate_block(base, calibration, sources,
                                                 ordered.iloc[lo:lo + EVALUATED_PIECE_LAYOUTS], pr))
            if done:
                done(min(len(table), lo + EVALUATED_PIECE_LAYOUTS))
    return ranking.Evaluated(table, sources, time.perf_counter() - t0, nodes, results)


def plan(scenario: Scenario | str | Path, space: SearchSpace = SearchSpace(), objective: str = "tokens_per_s",
         tokens: float | None = None, max_usd_per_hour: float | None = None, top: int = 5,
         out: str | Path | None = None, address: str | None = None, calibration: Calibration | None = None,
         replay: bool = True, log: Callable[[str], None] | None = None,
         max_search_minutes: float = MAX_SEARCH_MINUTES, progress=None, prices: dict[str, float] | None = None,
         hbm_headroom: float = DEFAULT_HBM_HEADROOM, force: bool = False, keep_runs: bool = False,
         rank_by: str = "low") -> PlanResult:
    """Search every valid layout of a scenario's model and job, replay the best, and write the plan.

    Args:
        scenario: the scenario (or its YAML path): the model, sequence length, global batch and precision are
            fixed; its cluster is the default reservation and its parallelism one candidate.
        space: what to vary (instance types and counts, micro_batch, ...).
        objective: tokens_per_s | usd_per_million_tokens | time_to_train.
        tokens: tokens to train (time_to_train_days; required by time_to_train).
        max_usd_per_hour: keep only clusters that cost at most this per hour.
        top: layouts to replay and to write as top-N.yaml.
        out: plan directory (plan.csv, plan.json, top-N.yaml, plan.html; the replays' run directories in
            runs/top-N/); None: nothing written.
        address: Ray cluster to spread the search and the replays over (None: RAY_ADDRESS, a Ray running in
            this process, or this process, with an embedded Ray only where it is faster).
        calibration: named calibration factors (default: the scenario's calibration profile, else the fitted ones).
        replay: replay the top layouts with `run` (the exact numbers).
        log: progress lines (stderr in the CLI).
        max_search_minutes: a search estimated to take longer (its layouts counted before it starts, at the
            slowest measured evaluation rate) is refused.
        progress: told each phase (enumerating, evaluating, replaying) and how far it got (`report.WorkProgress`).
        prices: US dollars per instance-hour by instance type, over the scenario's `cluster.price_per_hour_usd`
            (its own type) and the catalog (`--price-per-hour TYPE=USD`).
        hbm_headroom: the fraction of a rank's HBM a layout must leave free to be feasible (0.05: at most 95 %).
        force: replace a plan already in `out` (otherwise that raises OutDirError).
        keep_runs: write each replay's run directory in `out`/runs/top-N/ (report.html, trace.json: tens of MB
            for a long pipeline); without it the replays' figures are in plan.json only, and `ultracluster run
            top-N.yaml` writes a layout's run directory.
        rank_by: which end of each layout's 80 % interval ranks it (`ranking.RANK_BY`): `low` (default) the
            pessimistic end, where a layout above the best published MFU ranks after the plausible ones;
            `point`; `high` the optimistic end.

    Returns:
        The PlanResult; `summary["feasible"] == 0` when no layout fits (the CLI exits 3).

    Raises:
        ScenarioError: bad options (each names its flag), a search too large for `max_search_minutes`, or a bad
            scenario.
        OutDirError: `out` holds an earlier plan and `force` is not set.
    """
    log = log or (lambda _: None)
    base = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    price_of, price_sources = resolve_prices(base, space, prices)
    notes = check_options(base, space, objective, tokens, max_usd_per_hour, top, price_of, prices, hbm_headroom,
                           max_search_minutes, rank_by)
    if out is not None and check_plan_dir(out, force):
        log(f"plan: replacing the earlier plan in {out} (--force)")
        notes.append(f"replaced an earlier plan in {out} (--force)")
    # the plan is written beside `out` and moved into place whole when it is complete: an earlier plan stays as it
    # was until then (an interrupted or failed plan leaves it, and nothing of its own)
    staging = None if out is None else staging_beside(out)
    try:
        return _plan_into(base, space, objective, tokens, max_usd_per_hour, top, out, staging, address, calibration,
                          log, max_search_minutes, progress, replay, price_of, price_sources, notes, hbm_headroom,
                          keep_runs, rank_by)
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def _collector_spared():
    """The objects alive before the plan left out of the garbage collector's passes while it runs (`gc.freeze`, unless
    the process froze some itself): the passes over them cost 8 % of a search (0.045 s of 0.55)."""
    ours = gc.get_freeze_count() == 0
    if ours:
        gc.freeze()
    try:
        yield
    finally:
        if ours:
            gc.unfreeze()


@_collector_spared()
def _plan_into(base, space, objective, tokens, max_usd_per_hour, top, out, staging, address, calibration, log,
               max_search_minutes, progress, replay, price_of, price_sources, notes, hbm_headroom, keep_runs,
               rank_by) -> PlanResult:
    """`plan` after its checks: search, replay (the runs into `staging`/runs/), write `staging`, move it to `out`."""
    calibration = calibration_for(base, calibration)     # the scenario's calibration profile, else the fit
    t0 = time.perf_counter()
    expected = check_size(base, space, max_search_minutes)
    if progress is not None:
        progress.phase("enumerating", expected)
    table = enumerate_layouts(base, space, progress.advance if progress is not None else None)
    enumerate_s = time.perf_counter() - t0
    if progress is not None:
        progress.phase("evaluating", len(table))
    else:
        log(f"plan: {len(table):,} layouts to evaluate")
    with ExitStack() as session:         # one Ray session (if any) for the search and the replays
        ev = _evaluate(base, table, calibration, address, log, session, lambda: _replay_shards(base),
                       progress)
        t1 = time.perf_counter()           # the table, the folds, the front, then the intervals: of every layout
        full = ranking.assemble(table, ev.results, None, base.tokens_per_step, price_of, hbm_headroom)
        own = _own_mask(full, base, space)
        _not_run(full, own, base, space)
        notes += _storage_capacity(full, base, tokens, calibration)
        notes += [f"end of support: {line}" for line in stacks.end_of_support_notes(searched(base, space))]
        folded = ranking.fold_equivalent(full)
        budget = budget_columns(full, base, tokens, calibration)     # with goodput, where a row can rank
        ranking.mark_pareto(full)           # that can rank, the front and the own
        lev = LayoutEvidence(base, calibration)
        lev.flags(full)
        kept = own & (full["same_as"].to_numpy() != "")       # the row the own layout is folded into: shown too
        kept = np.isin(full["layout"].to_numpy(), full["same_as"].to_numpy()[kept]) if kept.any() else kept
        decision_groups(full)              # each (type, count, stack)'s best is timed too: the decision view
        timed = time_for_ranking(full, lev, objective, rank_by, top, max_usd_per_hour,
                                  full["pareto"].to_numpy(dtype=bool) | own | kept, base.tokens_per_step,
                                  ("instance", "stack", DECISION_GROUP))
        del full["_axes"], full["_growth"]
        wall_s = enumerate_s + ev.wall_s + time.perf_counter() - t1
        full["rank_value"] = ranking.at_end(full, objective, rank_by)      # what ranked each row
        best = ranking.ranked(full, objective, max_usd_per_hour, rank_by)
        picks = best.head(top)
        per_type = ranking.best_per_type(full, objective, max_usd_per_hour, rank_by)
        per_stack = ranking.best_per_type(full, objective, max_usd_per_hour, rank_by, by="stack")
        _role_columns(full, own, picks.index, per_type.index, per_stack.index)
        yamls, scenarios = [], []
        overrides = {t: usd for t, usd in price_of.items() if usd is not None and price_sources[t] != CATALOG_PRICE}
        for i, (_, r) in enumerate(picks.iterrows(), 1):
            text, sc = layout_yaml(base, r, i, objective, None, overrides)
            yamls.append(text)
            scenarios.append(sc)
        runs_out = out if keep_runs else None          # where the replays' run directories will be
        replays = _replay(scenarios, staging if keep_runs else None, address, log, progress) \
            if replay and scenarios else []
    planned = full.loc[picks.index, ["step_time_low_s", "step_time_high_s"]].to_numpy()   # before the runs' own
    _interval_columns(full, picks.index, replays)
    decided = decision(full, objective, max_usd_per_hour, rank_by,
                       {"instance": list(space.instance_types or (base.cluster.instance,)),
                        "instances": list(space.instance_counts or (base.cluster.instances,)),
                        "stack": list(searched(base, space))})
    own_summary = compare_with_scenario(full, objective)
    own_summary["standing"] = standing(full, best, objective, rank_by)
    as_stack = own_stack(base, space)[0]
    if as_stack != base.stack:
        own_summary["timed_as"] = own_summary["priced_as"] = f"the scenario names no stack: its own layout is timed " \
            f"as {as_stack} runs it (that stack's defaults for the keys it does not give)"   # priced_as: old, one release
    top_rows = [_record(full.loc[i], rank=k) for k, i in enumerate(picks.index, 1)]
    summary = _summary(base, space, objective, tokens, max_usd_per_hour, top, full, best, ev, wall_s, top_rows,
                       replays, notes, runs_out, rank_by)
    summary["best_per_type"] = _json_clean([_record(full.loc[i]) for i in per_type.index])
    summary["best_per_stack"] = _json_clean([_record(full.loc[i]) for i in per_stack.index])
    summary["stacks_without_a_layout"] = stacks_without_a_layout(full, searched(base, space), per_stack["stack"])
    summary["mfu_best_published"] = _json_clean(lev.thresholds(full))
    summary["decision"] = _json_clean(decided)
    summary.update(_json_clean(budget))
    if budget["budget"] is not None:
        summary["tokens"] = budget["budget"]["tokens"]
    summary["scenario_layout"] = _json_clean(own_summary)
    summary["intervals_timed"] = summary["intervals_priced"] = timed   # intervals_priced: the old name, one release
    for rec, (low, high) in zip(summary["replayed"], planned):        # the plan's own, beside the run's
        rec["fast_step_time_low_s"], rec["fast_step_time_high_s"] = _json_clean([float(low), float(high)])
    summary["prices"] = {t: {"usd_per_hour": price_of[t], "source": price_sources[t]} for t in price_of}
    summary["hbm_headroom"] = hbm_headroom
    summary["folded"] = folded
    summary["full_table"] = full_table_name()
    result = PlanResult(table=full, summary=summary, top=top_rows, yamls=yamls, replays=replays)
    if out is not None:
        write_plan_dir(result, staging)
        move_into_place(staging, Path(os.path.realpath(out)))
    return result


def _record(r, rank: int | None = None) -> dict:
    """A ranking row as plan.json holds it: label, layout, figures (with its interval), the settings folded into
    it, where it stands against the evidence, and how it compares with the scenario's own layout."""
    rec = {"rank": rank} if rank is not None else {}
    rec.update({"label": r["layout"], "stack": r["stack"], "instance": r["instance"], "layout": ranking.layout_record(r),
                **ranking.numbers(r), **ranking.numbers(r, INTERVAL_COLUMNS + ("rank_value", "vs_scenario_pct",
                                                                           "mfu_best_published")),
                "equivalent": r.get("equivalent", "") or None,
                "extrapolated": [a for a in str(r.get("extrapolated", "")).split(",") if a],
                "mfu_implausible": bool(r.get("mfu_implausible", False)), "vs_scenario": r.get("vs_scenario") or None,
                "vs_scenario_on": r.get("vs_scenario_on") or None})
    return rec


def _not_run(full: pd.DataFrame, own: np.ndarray, base: Scenario, space: SearchSpace) -> None:
    """The scenario's own layout, when it names no stack and no stack searched runs it, is evaluated with its explicit
    keys (`custom`) for the comparison but cannot rank: infeasible, with each stack's reason (in place)."""
    name, why = own_stack(base, space)
    if name == "custom" and "custom" not in searched(base, space) and own.any():
        i = np.flatnonzero(own)[0]
        full.loc[i, "feasible"] = False
        full.loc[i, "reason"] = ("no stack searched runs it (the scenario names none): " + "; ".join(why))


def _storage_capacity(full: pd.DataFrame, base: Scenario, tokens: float | None, calibration) -> list[str]:
    """The file system must hold the data set (the plan's budget at `storage.bytes_per_token`) and the checkpoints
    kept (`storage.capacity_check`, on the scenario's own layout's checkpoint: every layout writes the same model
    and optimizer state): where it cannot, every row is infeasible with that reason (in place); where it may not
    (an assumed retention), a note. Returns the notes."""
    if base.storage is None:
        return []
    from ..cluster import build_cluster
    from ..storage.estimates import capacity_check, figures
    from .budget import budget_of

    fig = figures(base, build_cluster(base, base.cluster.instances, calibration))
    tok, steps, _ = budget_of(base, tokens)
    tok = tok if tok is not None else (steps * base.tokens_per_step if steps is not None else None)
    cap = capacity_check(base, (fig.checkpoint_gb or 0.0) * 1e9, tok)
    if cap["capacity_reason"]:
        full["feasible"] = False
        full["reason"] = "storage: " + cap["capacity_reason"]
        return ["storage: " + cap["capacity_reason"]]
    return ["storage: " + cap["capacity_warning"]] if cap["capacity_warning"] else []


def _own_mask(full: pd.DataFrame, base: Scenario, space: SearchSpace) -> np.ndarray:
    """The scenario's own layout among the rows (always the first: `enumerate_layouts`), as its stack runs it."""
    own = {**own_row(base), "stack": own_stack(base, space)[0]}
    mask = np.ones(len(full), dtype=bool)
    for k in LAYOUT_COLUMNS:
        mask &= np.broadcast_to(full[k].to_numpy() == own[k], mask.shape)
    return mask


def _role_columns(full: pd.DataFrame, own: np.ndarray, top_rows, best_rows, stack_rows) -> None:
    """plan.csv's columns saying why a row is in it: `rank` (its place among the top layouts), `best_of_type`,
    `best_of_stack`, `scenario_layout` (the scenario's own layout); `pareto` is set by `ranking.mark_pareto`."""
    full["rank"] = pd.array([pd.NA] * len(full), dtype="Int64")
    full.loc[list(top_rows), "rank"] = np.arange(1, len(top_rows) + 1)
    full["best_of_type"] = False
    full.loc[list(best_rows), "best_of_type"] = True
    full["best_of_stack"] = False
    full.loc[list(stack_rows), "best_of_stack"] = True
    full["scenario_layout"] = own


def _interval_columns(full: pd.DataFrame, replayed_rows, replays: list[dict]) -> None:
    """The replayed layouts carry their run's 80 % interval and `mfu_implausible` (authoritative: around the replayed
    step); the others keep the plan's (the same code, on the fast path's); then each row's days and dollars at its ends."""
    for row, rep in zip(replayed_rows, replays):
        for col, v in ((c, rep.get(c)) for c in INTERVAL_COLUMNS):
            full.loc[row, col] = float(v) if isinstance(v, (int, float)) else np.nan
        if isinstance(rep.get("mfu_implausible"), bool):
            full.loc[row, "mfu_implausible"] = rep["mfu_implausible"]
    budget_band_columns(full)


def _replay_shards(base: Scenario) -> int:
    """Actor slots an embedded Ray must advertise for the replays: the most actors a run of this model takes on
    this machine (`cluster.fold`: every replay folds its instances to fit)."""
    from ..actors.launch import machine_capacity

    return machine_capacity().max_actors(actor_bytes(base))


def _replay(scenarios: list[Scenario], out, address: str | None, log, progress=None) -> list[dict]:
    """Run each top layout with the full run path (Ray actors), in one Ray session."""
    from ..actors import plan_tasks
    from ..actors.launch import machine_capacity
    from ..runner import run

    capacity = machine_capacity()
    shards = max(fold(sc, capacity, actor_bytes(sc)).actors for sc in scenarios)
    summaries = []
    if progress is not None:
        progress.phase("replaying", len(scenarios))
    with plan_tasks.planning_ray(address, shards):     # already attached when the search used Ray
        for i, sc in enumerate(scenarios, 1):
            log(f"plan: replaying layout {i} of {len(scenarios)}")
            rep = run(sc, out=None if out is None else Path(out) / "runs" / f"top-{i}", address=address)
            summaries.append(rep.summary)
            if progress is not None:
                progress.advance(i)
    return summaries


def _summary(base, space, objective, tokens, max_usd_per_hour, top, full, best, ev, wall_s, top_rows, replays,
             notes, out, rank_by="point") -> dict:
    from ..speed_draws import jitter_sigma
    from ..calibration.fitted_files import fitted
    from ..replay.result import BREAKDOWN_KEYS

    n = len(full)
    feasible = int(full["feasible"].sum())
    notes = list(notes)
    approx = []
    if jitter_sigma(base, fitted()) > 0:
        approx.append("compute jitter: each stage at its slowest replica's speed (the replay runs every replica)")
    if base.faults is not None and base.faults.stragglers is not None:
        approx.append("stragglers: each stage at its slowest replica's speed")
    if base.faults is not None and base.faults.degraded:
        approx.append("faults.degraded: left out (layouts are searched and replayed on healthy links; run a "
                      "chosen layout with it)")
    approx.append("the last microbatch's gradient sends timed alone (the replay shares their links with the "
                  "first gradient buckets)")
    if base.storage is not None or base.checkpoint is not None:
        approx.append("storage: data-loading stalls and checkpoints are not in the fast path")
    replayed = []
    for row, rep in zip(top_rows, replays):
        fast_s, rep_s = row["step_time_s"], rep.get("step_time_s")
        diff = (rep_s / fast_s - 1) if fast_s and rep_s and math.isfinite(rep_s) else None
        replayed.append({"rank": row["rank"], "label": row["label"], "layout": row["layout"],
                         "fast_step_time_s": fast_s, "replay_step_time_s": rep_s, "difference": diff,
                         "replay_tokens_per_s": rep.get("tokens_per_s"), "replay_mfu": rep.get("mfu"),
                         **{f"replay_{k}": rep.get(k) for k in ("goodput", "time_to_train_days", "total_cost_usd")},
                         **{k: rep.get(k) for k in INTERVAL_COLUMNS},
                         "breakdown": {k: rep.get(k) for k in BREAKDOWN_KEYS},
                         "run_dir": None if out is None else str(Path(out) / "runs" / f"top-{row['rank']}")})
        if diff is not None and abs(diff) > REPLAY_DIFFERENCE_NOTE:
            notes.append(f"layout {row['rank']} replays at {rep_s:.6g} s, {100 * diff:+.2f} % from the fast path")

    def best_by(obj: str):
        b = ranking.ranked(full, obj, max_usd_per_hour, rank_by if obj == objective else "point")
        if b.empty:
            return None
        r = b.iloc[0]
        rec = {"label": r["layout"], "layout": ranking.layout_record(r), **ranking.numbers(r)}
        match = next((x for x in replayed if x["label"] == r["layout"]), None)
        if match:
            rec["replay_step_time_s"] = match["replay_step_time_s"]
        return rec

    best_cost = best_by("usd_per_million_tokens")
    if best_cost is None and feasible:
        notes.append("no cost: " + ("no feasible layout has a known price" if full["feasible"].any() else ""))
    summary = {
        "scenario": base.name,
        "objective": objective,
        "rank_by": rank_by,
        "rank_by_means": ranking.RANK_BY[rank_by][1],
        "tokens": tokens,
        "max_usd_per_hour": max_usd_per_hour,
        "top": top,
        "search": {"instance_types": list(space.instance_types or (base.cluster.instance,)),
                   "instance_counts": list(space.instance_counts or (base.cluster.instances,)),
                   "tp": None if space.tp is None else list(space.tp),
                   "pp": None if space.pp is None else list(space.pp),
                   "micro_batches": list(space.micro_batches), "recompute": list(space.recompute),
                   "schedules": list(space.schedules), "virtual_stages": list(space.virtual_stages),
                   "max_cp": space.max_cp, "zero": sorted(int(z) for z in full["zero"].unique()),
                   "stacks": list(searched(base, space)), "lnc": sorted(int(x) for x in full["lnc"].unique())},
        "layouts_evaluated": n,
        "feasible": feasible,
        "ranked": int(len(best)),
        "wall_s": wall_s,
        "layouts_per_s": n / wall_s if wall_s > 0 else None,
        "ray_nodes": int(ev.ray_nodes),
        "evaluated_by": f"Ray tasks on {ev.ray_nodes} node(s)" if ev.ray_nodes else "in-process",
        "fast_path": {"parts": ev.sources,
                      "exact": not approx, "approximations": approx},
        "best_tokens_per_s": best_by("tokens_per_s"),
        "best_usd_per_million_tokens": best_cost,
        "replayed": replayed,
        "closest": ranking.closest(full[~full["feasible"]]) if feasible == 0 else None,
        "notes": notes,
    }
    return _json_clean(summary)


def _json_clean(value):
    """NaN and infinities → None, numpy scalars → Python (plan.json is strict JSON)."""
    if isinstance(value, dict):
        return {k: _json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
