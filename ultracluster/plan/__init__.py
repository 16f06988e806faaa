"""The layout planner: a scenario's model and job → every valid layout priced → the best replayed → a plan.

`plan` is the planner's composition root, one call per stage: `layouts.space.enumerate_layouts` (every valid
layout) → `layouts.search.check_sources` (the batched parts against the functions they mirror) → the chunks
priced by `layouts.fast.evaluate`, in this process or as Ray tasks (`actors.plan_tasks`) →
`layouts.search.ranked` → the top layouts replayed with `pipeline.run` → `output.write_plan_dir`. The pure
search and pricing live in `ultracluster.layouts`, below this command (which sits above `pipeline`). See
docs/plan.md.
"""
from __future__ import annotations

import math
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..cluster.calibration import Calibration
from ..cluster.catalog import INSTANCES
from ..cluster.profile import calibration_for
from ..errors import Problem, ScenarioError
from ..scenario import Scenario, load_scenario
from ..layouts import search
from ..layouts.fast import Pricer
from ..layouts.space import SearchSpace, clusters, enumerate_layouts, parse_instance_types, parse_instances
from .output import format_plan, layout_yaml, write_plan_dir

__all__ = ["PlanResult", "SearchSpace", "format_plan", "parse_instance_types", "parse_instances", "plan"]

EMBEDDED_RAY_START_S = 12.0    # starting an embedded local Ray and warming workers that import the planner (measured
                               # 5-12 s on the 2-CPU development machine): the in-process search must save more
IN_PROCESS_LAYOUTS_PER_S = 5000.0   # a conservative in-process rate (docs/performance.md measures about 10,000/s)
REPLAY_DIFFERENCE_NOTE = 0.01  # a replayed layout further than this from its fast-path step time gets a note


@dataclass
class PlanResult:
    """A finished plan.

    Attributes:
        table: every layout evaluated, with its figures (plan.csv).
        summary: plan.json.
        top: the best layouts (label, layout, figures), best first.
        yamls: top-N.yaml texts, in the order of `top`.
        replays: the replayed layouts' summary.json dicts, in the order of `top` (empty without replays).
    """

    table: pd.DataFrame
    summary: dict
    top: list[dict] = field(default_factory=list)
    yamls: list[str] = field(default_factory=list)
    replays: list[dict] = field(default_factory=list)


def _check_options(base: Scenario, space: SearchSpace, objective: str, tokens: float | None,
                   max_usd_per_hour: float | None, top: int) -> list[str]:
    """Bad option combinations raise ScenarioError naming the flag; returns notes for the plan."""
    problems, notes = [], []
    if objective not in search.OBJECTIVES:
        problems.append(Problem("--objective", objective, "one of: " + ", ".join(search.OBJECTIVES)))
    if objective == "time_to_train" and tokens is None:
        problems.append(Problem("--tokens", "<missing>", "a number of tokens > 0 with --objective time_to_train"))
    if tokens is not None and not (isinstance(tokens, (int, float)) and math.isfinite(tokens) and tokens > 0):
        problems.append(Problem("--tokens", tokens, "a number of tokens > 0, e.g. 15e12"))
    if max_usd_per_hour is not None and not (math.isfinite(max_usd_per_hour) and max_usd_per_hour > 0):
        problems.append(Problem("--max-usd-per-hour", max_usd_per_hour, "a number of US dollars > 0"))
    if top < 1:
        problems.append(Problem("--top", top, "an integer >= 1"))
    types = space.instance_types or (base.cluster.instance,)
    unpriced = [t for t in types if INSTANCES[t].price_per_hour_usd is None]
    if unpriced and (objective == "usd_per_million_tokens" or max_usd_per_hour is not None):
        if len(unpriced) == len(types):
            flag = "--objective" if objective == "usd_per_million_tokens" else "--max-usd-per-hour"
            problems.append(Problem(flag, objective if flag == "--objective" else max_usd_per_hour,
                                    f"a cost needs an instance price and the catalog has none for "
                                    f"{', '.join(unpriced)}; rank by tokens_per_s or time_to_train, or search "
                                    f"instance types with a price ("
                                    + ", ".join(n for n, s in INSTANCES.items() if s.price_per_hour_usd) + ")"))
        else:
            notes.append(f"the catalog has no price for {', '.join(unpriced)}: their layouts have no cost and are "
                         f"not ranked by cost" + (" nor kept under --max-usd-per-hour" if max_usd_per_hour else ""))
    if not clusters(base, space):
        problems.append(Problem("--instances", ",".join(map(str, space.instance_counts or ())),
                                "instance counts the instance types can form (UltraServers: multiples of 4)"))
    if problems:
        raise ScenarioError(problems)
    return notes


def _evaluate(base: Scenario, table: pd.DataFrame, calibration: Calibration | None, address: str | None,
              log: Callable[[str], None], session: ExitStack, shards: int) -> search.Evaluated:
    """Check the sources, then price every chunk here or with Ray tasks; times the search itself. A Ray it
    attaches to (or starts) stays attached in `session` for the replays (`shards`: actor slots they need)."""
    t0 = time.perf_counter()
    pr = Pricer(base, calibration)
    sources, mismatches = search.check_sources(pr, table)
    from ..actors import plan_tasks          # the only Ray the planner touches

    if plan_tasks.wanted(address):
        session.enter_context(plan_tasks.planning_ray(address, shards))
        pieces = search.chunks(table, 2 * plan_tasks.cluster_cpus())
        results, nodes = plan_tasks.evaluate_on_ray(base, calibration, sources, pieces)
        return search.Evaluated(table, sources, mismatches, time.perf_counter() - t0, nodes, results)
    cpus = os.cpu_count() or 1
    expected_s = len(table) / IN_PROCESS_LAYOUTS_PER_S
    nodes = 0
    if cpus > 1 and expected_s * (1 - 1 / cpus) > EMBEDDED_RAY_START_S:
        log(f"plan: {len(table):,} layouts: pricing them on an embedded Ray ({cpus} CPUs)")
        session.enter_context(plan_tasks.planning_ray(None, shards))
        results, nodes = plan_tasks.evaluate_on_ray(base, calibration, sources, search.chunks(table, 2 * cpus))
    else:                          # here, in one piece (the fewest, largest batches; the same numbers)
        results = [search.evaluate_chunk(base, calibration, sources, table, pr)]
    return search.Evaluated(table, sources, mismatches, time.perf_counter() - t0, nodes, results)


def plan(scenario: Scenario | str | Path, space: SearchSpace = SearchSpace(), objective: str = "tokens_per_s",
         tokens: float | None = None, max_usd_per_hour: float | None = None, top: int = 5,
         out: str | Path | None = None, address: str | None = None, calibration: Calibration | None = None,
         replay: bool = True, log: Callable[[str], None] | None = None) -> PlanResult:
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

    Returns:
        The PlanResult; `summary["feasible"] == 0` when no layout fits (the CLI exits 3).

    Raises:
        ScenarioError: bad options (each names its flag) or a bad scenario.
    """
    log = log or (lambda _: None)
    base = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    calibration = calibration_for(base, calibration)     # the scenario's calibration profile, else the fit
    notes = _check_options(base, space, objective, tokens, max_usd_per_hour, top)
    t0 = time.perf_counter()
    table = enumerate_layouts(base, space)
    enumerate_s = time.perf_counter() - t0
    log(f"plan: {len(table):,} layouts to price")
    with ExitStack() as session:         # one Ray session (if any) for the search and the replays
        ev = _evaluate(base, table, calibration, address, log, session, _replay_shards(base, space))
        wall_s = enumerate_s + ev.wall_s
        full = search.assemble(table, ev.results, tokens)
        best = search.ranked(full, objective, max_usd_per_hour)
        picks = best.head(top)
        top_rows = [{"rank": i, "label": r["layout"], "layout": search.layout_record(r), **search.numbers(r)}
                    for i, (_, r) in enumerate(picks.iterrows(), 1)]
        yamls, scenarios = [], []
        for i, (_, r) in enumerate(picks.iterrows(), 1):
            text, sc = layout_yaml(base, r, i, objective, None)
            yamls.append(text)
            scenarios.append(sc)
        replays = _replay(scenarios, out, address, log) if replay and scenarios else []
    _interval_columns(full, picks.index, replays)
    summary = _summary(base, space, objective, tokens, max_usd_per_hour, top, full, best, ev, wall_s, top_rows,
                       replays, notes, out)
    result = PlanResult(table=full, summary=summary, top=top_rows, yamls=yamls, replays=replays)
    if out is not None:
        write_plan_dir(result, out)
    return result


INTERVAL_COLUMNS = ("step_time_low_s", "step_time_high_s", "tokens_per_s_low", "tokens_per_s_high")


def _interval_columns(full: pd.DataFrame, replayed_rows, replays: list[dict]) -> None:
    """The 80 % interval columns of plan.csv: the replayed layouts carry their run's interval (it prices every
    uncertain factor's ends, which the search does not repeat for every layout); the others are empty."""
    for col in INTERVAL_COLUMNS:
        full[col] = np.nan
    for row, rep in zip(replayed_rows, replays):
        for col in INTERVAL_COLUMNS:
            v = rep.get(col)
            full.loc[row, col] = float(v) if isinstance(v, (int, float)) else np.nan


def _replay_shards(base: Scenario, space: SearchSpace) -> int:
    """Actor slots an embedded Ray must advertise for the replays: the most shards any searched cluster folds into."""
    from ..cluster import resolve_instances_per_actor

    per_actor = resolve_instances_per_actor(base)
    return max(math.ceil(n / max(1, min(per_actor, n))) for _, n, _, _ in clusters(base, space))


def _replay(scenarios: list[Scenario], out, address: str | None, log) -> list[dict]:
    """Run each top layout with the full run path (Ray actors), in one Ray session."""
    from ..actors import plan_tasks
    from ..cluster import resolve_instances_per_actor
    from ..pipeline import run

    shards = max(math.ceil(sc.cluster.instances / resolve_instances_per_actor(sc)) for sc in scenarios)
    summaries = []
    with plan_tasks.planning_ray(address, shards):     # already attached when the search used Ray
        for i, sc in enumerate(scenarios, 1):
            log(f"plan: replaying layout {i} of {len(scenarios)}")
            rep = run(sc, out=None if out is None else Path(out) / "runs" / f"top-{i}", address=address)
            summaries.append(rep.summary)
    return summaries


def _summary(base, space, objective, tokens, max_usd_per_hour, top, full, best, ev, wall_s, top_rows, replays,
             notes, out) -> dict:
    from ..chip import jitter_sigma
    from ..cluster.calibration import fitted
    from ..replay.events import BREAKDOWN_KEYS

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
    approx.append("the last microbatch's gradient sends priced alone (the replay shares their links with the "
                  "first gradient buckets)")
    if base.storage is not None or base.checkpoint is not None:
        approx.append("storage: data-loading stalls and checkpoints are not in the fast path")
    for part, msg in ev.mismatches.items():
        if msg:
            notes.append(f"fast path: the batched {part} differ from the replay's own function ({msg}); every "
                         f"layout's {part} came from that function, one layout at a time")
    replayed = []
    for row, rep in zip(top_rows, replays):
        fast_s, rep_s = row["step_time_s"], rep.get("step_time_s")
        diff = (rep_s / fast_s - 1) if fast_s and rep_s and math.isfinite(rep_s) else None
        replayed.append({"rank": row["rank"], "label": row["label"], "layout": row["layout"],
                         "fast_step_time_s": fast_s, "replay_step_time_s": rep_s, "difference": diff,
                         "replay_tokens_per_s": rep.get("tokens_per_s"), "replay_mfu": rep.get("mfu"),
                         **{k: rep.get(k) for k in INTERVAL_COLUMNS},
                         "breakdown": {k: rep.get(k) for k in BREAKDOWN_KEYS},
                         "run_dir": None if out is None else str(Path(out) / "runs" / f"top-{row['rank']}")})
        if diff is not None and abs(diff) > REPLAY_DIFFERENCE_NOTE:
            notes.append(f"layout {row['rank']} replays at {rep_s:.6g} s, {100 * diff:+.2f} % from the fast path")

    def best_by(obj: str):
        b = search.ranked(full, obj, max_usd_per_hour)
        if b.empty:
            return None
        r = b.iloc[0]
        rec = {"label": r["layout"], "layout": search.layout_record(r), **search.numbers(r)}
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
        "tokens": tokens,
        "max_usd_per_hour": max_usd_per_hour,
        "top": top,
        "search": {"instance_types": list(space.instance_types or (base.cluster.instance,)),
                   "instance_counts": list(space.instance_counts or (base.cluster.instances,)),
                   "micro_batches": list(space.micro_batches), "recompute": list(space.recompute),
                   "schedules": list(space.schedules), "virtual_stages": list(space.virtual_stages),
                   "max_cp": space.max_cp, "zero": sorted(int(z) for z in full["zero"].unique())},
        "layouts_evaluated": n,
        "feasible": feasible,
        "ranked": int(len(best)),
        "wall_s": wall_s,
        "layouts_per_s": n / wall_s if wall_s > 0 else None,
        "ray_nodes": int(ev.ray_nodes),
        "evaluated_by": f"Ray tasks on {ev.ray_nodes} node(s)" if ev.ray_nodes else "in-process",
        "fast_path": {"parts": ev.sources, "checked_layouts": len(search.sample_rows(full)),
                      "exact": not approx, "approximations": approx},
        "best_tokens_per_s": best_by("tokens_per_s"),
        "best_usd_per_million_tokens": best_cost,
        "replayed": replayed,
        "closest": search.closest(full[~full["feasible"]]) if feasible == 0 else None,
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
