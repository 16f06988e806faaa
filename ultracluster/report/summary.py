"""RunResult → summary dict: the fields of summary.json (docs/design.md "Output contract"), read off the result's
fields: the replayed steps, then the storage figures and the 80 % interval when the result has them.

Means are over the measured (non-warmup) steps, or over all steps when every step is warmup. An infeasible
run reports every measured float as NaN (JSON `NaN`), keeps `hbm_peak_gib` when the memory model ran, and
gives the reason.
"""
from __future__ import annotations

import math

from ultracluster.replay.events import BREAKDOWN_KEYS, RunResult

NAN = float("nan")


def layout(scenario: dict) -> str:
    """Short parallelism label, e.g. "tp=8 pp=2 dp=2 1f1b" (cp/ep only when above 1).

    Args:
        scenario: the resolved scenario dict.

    Returns:
        The label, "" when the scenario has no parallelism block.
    """
    par = scenario.get("parallelism") or {}
    parts = [f"{k}={par[k]}" for k in ("tp", "pp", "dp", "cp", "ep")
             if par.get(k) is not None and (k in ("tp", "pp", "dp") or par[k] > 1)]
    return " ".join(parts + ([str(par["pp_schedule"])] if par.get("pp_schedule") else []))


def emulation_info(result: RunResult) -> dict:
    """How the run was emulated (run.json): never a prediction, so kept out of summary.json, which must
    not change when the same scenario is folded into fewer or more actors."""
    return {
        "actors": int(result.actors),
        "shard_instances": [list(map(int, s)) for s in result.shard_instances],
        "wall_s": float(math.fsum(s.wall_s for s in result.steps)),
        "payload_bytes_per_step": int(result.steps[-1].payload_bytes) if result.steps else 0,
    }


def summarize(result: RunResult) -> dict:
    """Summarize one run for summary.json.

    Args:
        result: the replayed run.

    Returns:
        JSON-ready dict: times in s per step, `tokens_per_s`, `seq_per_s`, `mfu` as a fraction of peak,
        `hbm_peak_gib` in GiB, costs in USD (None when the instance price is unknown). Ints stay ints and
        floats are Python floats.
    """
    measured = [s for s in result.steps if not s.warmup] or result.steps
    ok = result.feasible and bool(measured)
    mean = {k: math.fsum(getattr(s, k) for s in measured) / len(measured) if ok else NAN
            for k in ("step_time_s", *BREAKDOWN_KEYS)}
    step_s = mean["step_time_s"]
    global_batch = (result.scenario.get("training") or {}).get("global_batch")
    cost_s = None if result.price_per_hour_usd is None else result.instances * result.price_per_hour_usd * step_s / 3600
    hbm = max((m.total_gib for m in result.memory), default=0.0 if result.feasible else NAN)
    return {
        "scenario": result.scenario_name,
        "feasible": bool(result.feasible),
        "reason": None if result.feasible else (result.reason or "infeasible"),
        "instance_type": result.instance_type,
        "instances": int(result.instances),
        "chips": int(result.chips),
        "neuron_cores": int(result.neuron_cores),
        "ranks": int(result.ranks),
        "layout": layout(result.scenario),
        "ray_nodes": int(result.ray_nodes),
        "steps_replayed": len(result.steps),
        "steps_measured": len(measured) if ok else 0,
        "step_time_s": float(step_s),
        "tokens_per_s": float(result.tokens_per_step / step_s) if ok else NAN,
        "seq_per_s": float(global_batch / step_s) if ok and global_batch else NAN,
        "mfu": float(result.model_flops_per_step / (result.peak_flop_per_s * step_s)) if ok else NAN,
        "hfu": float(result.hardware_flops_per_step / (result.peak_flop_per_s * step_s))
        if ok and result.hardware_flops_per_step else NAN,
        "hbm_peak_gib": float(hbm),
        **{k: float(v) for k, v in mean.items() if k != "step_time_s"},
        "tokens_per_step": int(result.tokens_per_step),
        "model_flops_per_step": float(result.model_flops_per_step),
        "peak_flop_per_s": float(result.peak_flop_per_s),
        "price_per_hour_usd": None if result.price_per_hour_usd is None else float(result.price_per_hour_usd),
        "cost_per_step_usd": None if cost_s is None else float(cost_s),
        "usd_per_million_tokens": None if cost_s is None else float(
            cost_s / result.tokens_per_step * 1e6 if result.tokens_per_step else NAN),
        "payload_checked": bool(result.steps) and all(s.payload_checked for s in result.steps),
        # beside the breakdown (not part of it): reduction hidden behind backward, what stragglers cost
        "dp_comm_hidden_s": float(math.fsum(s.dp_comm_hidden_s for s in measured) / len(measured)) if ok else NAN,
        "residual_s": float(mean["compute_s"] * result.residual_fraction) if ok else NAN,   # part of compute_s
        "straggler_cost_s": float(math.fsum(s.straggler_cost_s for s in measured) / len(measured)) if ok else NAN,
        "slowest_ranks": sorted({int(s.slowest_rank) for s in measured if s.straggler_cost_s > 0}) if ok else [],
        **(result.storage.summary_keys() if result.storage is not None else {}),   # checkpoint, restore, FSx
        **result.interval,
    }
