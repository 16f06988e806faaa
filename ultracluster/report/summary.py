"""RunResult → summary dict: the fields of summary.json (docs/design.md "Output contract"), read off the result's
fields: the replayed steps, then the storage figures and the 80 % interval when the result has them.

Means are over the measured (non-warmup) steps, or over all steps when every step is warmup. An infeasible
run reports every measured float as NaN (JSON `NaN`), keeps `hbm_peak_gib` when the memory model ran, and
gives the reason.
"""
from __future__ import annotations

import math

from ultracluster.replay.result import BREAKDOWN_KEYS, RunResult
from ultracluster.step.merit import budget_figures, busy_step_s, figures
from ultracluster.step.split import inlayer_split
from ultracluster.storage.estimates import back_to_back_write_s
from ultracluster.storage.fsx import price_per_tib_month, storage_usd_per_hour

NAN = float("nan")
#: The collective kinds of `comm_<kind>_exposed_s` and `comm_<kind>_hidden_s`: tensor, context and expert
#: parallel (in-layer: their exposed seconds add up to `tp_comm_s`), pipeline sends, data parallel.
COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
COMM_KEYS = tuple(f"comm_{k}_{part}_s" for k in COMM_KINDS for part in ("exposed", "hidden"))
#: collectives.csv groups counted under a kind: the expert gradients' reduction and the gradient-norm
#: all-reduce are data-parallel traffic (the replay counts them in `dp_comm_s`)
KIND_OF_GROUP = {"dp-expert": "dp", "norm": "dp"}


def emulation_info(result: RunResult) -> dict:
    """How the run was emulated (run.json): never a prediction, so kept out of summary.json, which must
    not change when the same scenario is folded into fewer or more actors."""
    return {
        "actors": int(result.actors),
        "shard_instances": [list(map(int, s)) for s in result.shard_instances],
        "wall_s": float(math.fsum(s.wall_s for s in result.steps)),
        "payload_bytes_per_step": int(result.steps[-1].payload_bytes) if result.steps else 0,
    }


def comm_by_kind(result: RunResult, measured: list) -> dict[str, float]:
    """Each collective kind's exposed and hidden seconds per step on the critical path, means over `measured`.

    Exposed: what the kind adds to the step. The replay's in-layer time `tp_comm_s` of a step is the step comm's
    tensor- and expert-parallel collectives of the critical (replica, stage) (`StageComm.tp_comm_s`, or the
    replica's own with degraded instances, `RunResult.replica_tp_comm_s`) plus the context-parallel ring's
    exposed blocks: `step.split.inlayer_split` splits it between tp, cp and ep (the expert all-to-alls' seconds
    from collectives.csv, scaled from stage 0's layers to the critical stage's). `pp` is `pp_comm_s`,
    `dp` is `dp_comm_s`.

    Hidden: the kind's seconds per step on the critical stage that ran behind compute. For tp, cp and ep, its
    collectives.csv seconds (`time_s` x `count_per_step`, counted on stage 0, scaled by layers) less the
    exposed ones; for pp, the sends the critical stage issues (`StageComm.pp_send_s`) less `pp_comm_s`; for dp,
    `dp_comm_hidden_s`. At least 0 (the table times healthy links: on a degraded replica a kind can expose
    more than the table holds).
    """
    lay = result.layout
    degree = {k: getattr(lay, k) if lay is not None else 1 for k in ("tp", "cp", "ep")}
    layers = {c.stage: c.layers for c in result.stage_comm}
    per_kind = dict.fromkeys(COMM_KINDS, 0.0)
    for r in result.collectives:
        kind = KIND_OF_GROUP.get(r.group, r.group)
        if kind in per_kind:
            per_kind[kind] += r.time_s * r.count_per_step
    sums = dict.fromkeys(COMM_KEYS, 0.0)
    for st in measured:
        stage, replica = st.critical_stage, st.critical_replica
        comm = next((c for c in result.stage_comm if c.stage == stage), None)
        if comm is None:   # nothing to split by: the in-layer time counts as tp
            parts = {"tp": (st.tp_comm_s, 0.0), "cp": (0.0, 0.0), "ep": (0.0, 0.0)}
        else:
            scale = comm.layers / layers[0] if layers.get(0) else 1.0
            total = {k: per_kind[k] * scale for k in ("tp", "cp", "ep")}
            planned = (result.replica_tp_comm_s[replica][stage] if replica in result.replica_tp_comm_s
                       else comm.tp_comm_s)
            parts = inlayer_split(st.tp_comm_s, planned, total, degree)     # the overlap rule: `step.split`
        parts["pp"] = (st.pp_comm_s, max((comm.pp_send_s if comm else 0.0) - st.pp_comm_s, 0.0))
        parts["dp"] = (st.dp_comm_s, max(st.dp_comm_hidden_s, 0.0))   # the replay's -1e-18 is 0
        for k, (exposed, hidden) in parts.items():
            sums[f"comm_{k}_exposed_s"] += exposed
            sums[f"comm_{k}_hidden_s"] += hidden
    return {k: float(v / len(measured)) if measured else NAN for k, v in sums.items()}


def warnings_for(scenario: dict, summary: dict | None = None) -> list[str]:
    """One line per figure of the summary that is zero or absent only because its model is off or its input is
    missing (summary.json `warnings`): no storage, no checkpoint, a checkpoint interval no replayed step ends, no
    price."""
    s = summary or {}
    out = []
    if not scenario.get("storage"):
        out.append("no storage configured: data loading and checkpoint writes are not modelled "
                   "(data_stall_s and checkpoint_s are 0; see `storage` in docs/scenarios.md)")
    elif not (scenario.get("checkpoint") or {}).get("every_steps"):
        out.append("no checkpoint configured: checkpoint writes are not modelled (checkpoint_s is 0; see `checkpoint` "
                   "in docs/scenarios.md)")
    elif s.get("feasible") and s.get("checkpoint_s") == 0 and isinstance(s.get("checkpoint_block_s"), float):
        every, block = scenario["checkpoint"]["every_steps"], s["checkpoint_block_s"]
        out.append(f"checkpoint_s is 0: none of the {s.get('steps_measured')} measured steps ends a checkpoint "
                   f"interval (checkpoint.every_steps {every}); each checkpoint blocks training {block:.4g} s "
                   f"(checkpoint_block_s), {block / every:.4g} s per step over its interval, writes "
                   f"{s.get('checkpoint_write_s', NAN):.4g} s and restores in {s.get('restore_s', NAN):.4g} s "
                   f"(`run --hours H` counts them over a long run)")
    if "price_per_hour_usd" in s and s["price_per_hour_usd"] is None:
        out.append(f"no price for {s.get('instance_type')}: cost_per_step_usd and usd_per_million_tokens are null "
                   f"(the catalog has no public price for it); set cluster.price_per_hour_usd in the scenario or "
                   f"`run --price-per-hour USD`")
    return out


def goodput_warnings(goodput: dict) -> list[str]:
    """One line per figure of a long run (goodput.json) that is 0 only because its model is off."""
    out = []
    if goodput.get("mtbf_system_hours") is None:
        out.append("no failures configured: goodput counts no failure, lost work or restore (set "
                   "faults.instance_mtbf_hours; see docs/scenarios.md)")
    if not goodput.get("checkpoint_every_steps"):
        out.append("no checkpoints modelled: checkpoint time is 0 (set storage and checkpoint.every_steps; "
                   "see docs/scenarios.md)")
    return out


WRITING_WARNING = 0.5    # a checkpoint interval in which the file system writes more than half the time is warned of


def storage_warnings(result: RunResult, summary: dict) -> list[str]:
    """The file system's warnings: checkpoints it may not hold (an assumed retention, `StorageFigures`), async
    writes that outlast the checkpoint interval (back-pressure the closed-form goodput does not count), and a
    Young's interval that keeps the file system writing most of the time."""
    st = result.storage
    if st is None:
        return []
    out = [st.capacity_warning] if st.capacity_warning else []
    sc = result.scenario
    ck, f = sc.get("checkpoint") or {}, sc.get("faults") or {}
    write, block, every = st.checkpoint_write_s, st.checkpoint_block_s, ck.get("every_steps")
    step = summary.get("step_time_s")
    if not (every and write and summary.get("feasible") and isinstance(step, float) and math.isfinite(step)):
        return out
    busy = busy_step_s(step, summary.get("data_stall_s", 0.0), summary.get("checkpoint_s", 0.0))
    interval = every * busy
    if ck.get("mode") == "async" and write > interval:
        out.append(f"async checkpoint writes ({write:,.0f} s each) outlast the interval (checkpoint.every_steps "
                   f"{every} x {busy:.3g} s = {interval:,.0f} s): each checkpoint waits for the previous write "
                   f"(back-pressure); the closed-form goodput counts that wait in the checkpoint's block, `run "
                   f"--hours H` emulates it with the data loading and burst credits that share the file system")
    mtbf = f.get("instance_mtbf_hours")
    if mtbf and block and block > 0:
        from ultracluster.goodput import young_interval

        young = young_interval(block, mtbf * 3600.0 / result.instances)
        share = write / (young + block) if ck.get("mode") == "async" else write / (young + write)
        if share > WRITING_WARNING:
            out.append(f"Young's interval ({young:,.0f} s = sqrt(2 x block {block:.3g} s x system MTBF "
                       f"{mtbf / result.instances:.3g} h)) keeps the file system writing checkpoints "
                       f"{100 * min(share, 1.0):.0f} % of the time ({write:,.0f} s per write): a checkpoint cannot "
                       f"come faster than its write; more throughput (storage.capacity_tib, "
                       f"storage.throughput_mbps_per_tib) or a longer interval")
    return out


def days_and_dollars(result: RunResult, summary: dict) -> dict:
    """The goodput, the wall-clock step and tokens/s at it, and the training budget's days and dollars, by
    `step.merit.budget_figures` (the one path `plan` and `sweep` take too): summary.json's `train_tokens`,
    `train_steps`, `goodput`, `goodput_method` (`closed form`, or `emulated` when the run has a long run,
    `run --hours`: then the headline goodput is the long run's, the one goodput.json gives), `goodput_source` (in
    words), `wall_step_time_s`, `wall_tokens_per_s`, `time_to_train_days`, `total_cost_usd` and `price_source`
    (where the price comes from, or `step.price.NO_PRICE_HINT`). The days and dollars are None without a budget
    (`training.budget_tokens` or `budget_steps`), the dollars without a price."""
    from ultracluster.step.price import price_source

    sc = result.scenario
    t, ck, f = sc.get("training") or {}, sc.get("checkpoint") or {}, sc.get("faults") or {}
    step = summary["step_time_s"]
    ok = summary["feasible"] and isinstance(step, float) and math.isfinite(step)
    stall = summary.get("data_stall_s", 0.0) if ok else NAN
    busy = busy_step_s(step, stall, summary.get("checkpoint_s", 0.0)) if ok else NAN
    st = result.storage
    mtbf = f.get("instance_mtbf_hours")
    restore = float(st.restore_s or 0.0) if st is not None else 0.0
    recovery = 60.0 * (f.get("detect_minutes", 0.0) + f.get("restart_minutes", 0.0)) + restore if f else restore
    every = int(ck.get("every_steps") or 0)
    block = float(st.checkpoint_block_s or 0.0) if st is not None and every else 0.0
    system_mtbf = mtbf * 3600.0 / result.instances if mtbf else math.inf
    wait = back_to_back_write_s(st, every * (busy + stall)) if ok and st is not None and every and \
        ck.get("mode") == "async" else 0.0
    tokens, steps = t.get("budget_tokens"), t.get("budget_steps")
    lr = result.long_run if ok else None
    fig = budget_figures(busy, stall, result.tokens_per_step, result.instances,
                         NAN if result.price_per_hour_usd is None else result.price_per_hour_usd, every, block,
                         recovery, system_mtbf, tokens=tokens, steps=steps,
                         emulated_goodput=lr.goodput if lr is not None else None,
                         storage_usd_per_hour=storage_usd_per_hour(sc.get("storage")), async_write_s=wait)
    if lr is not None:
        source = (f"emulated over {lr.hours:g} h ({len(lr.failures)} failures; seed {sc.get('seed', 0)}): "
                  + (f"{lr.checkpoints} checkpoints blocking {lr.checkpoint_block_s:.3g} s each"
                     if lr.every_steps else "no checkpoints")
                  + (f", system MTBF {lr.mtbf_system_s / 3600:.3g} h, {lr.recovery_s:.0f} s per recovery"
                     if math.isfinite(lr.mtbf_system_s) else ", no failures"))
    else:
        source = ("closed form (Daly 2006): " + (f"checkpoints every {every} steps blocking {block:.3g} s"
                                                 if every else "no checkpoints")
                  + (f", system MTBF {system_mtbf / 3600:.3g} h, {recovery:.0f} s per recovery" if mtbf else
                     ", no failures")
                  + (f", {100 * stall / (busy + stall):.3g} % data stall" if ok and stall > 0 else "")
                  + (f", each checkpoint waiting {wait - every * (busy + stall):.3g} s for the previous async write "
                     f"(back-pressure)" if ok and wait > every * (busy + stall) else ""))
    out = {"train_tokens": None, "train_steps": None, "goodput": fig["goodput"] if ok else NAN,
           "goodput_method": fig["goodput_method"], "goodput_source": source,
           **({"goodput_hours": float(lr.hours)} if lr is not None else {}),
           "wall_step_time_s": fig["wall_step_time_s"] if ok else NAN,
           "wall_tokens_per_s": fig["wall_tokens_per_s"] if ok else NAN,
           "time_to_train_days": None, "total_cost_usd": None,
           "price_source": price_source(result.instance_type, (sc.get("cluster") or {}).get("price_per_hour_usd"),
                                        result.price_source)}
    if sc.get("storage"):
        out["storage_price_source"] = price_per_tib_month(sc["storage"])[1]
    if tokens is None and steps is None:
        return out
    out["train_tokens"] = float(tokens if tokens is not None else steps * result.tokens_per_step)
    out["train_steps"] = float(fig["train_steps"])
    for k in ("time_to_train_days", "total_cost_usd"):
        out[k] = None if not math.isfinite(fig[k]) else fig[k]
    if sc.get("storage"):    # the file system over the same wall time joins the instances' cost
        for k in ("compute_cost_usd", "storage_cost_usd"):
            out[k] = None if not math.isfinite(fig[k]) else fig[k]
    if not ok:
        out["time_to_train_days"] = NAN
    return out


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
    fom = figures(step_s, result.tokens_per_step, result.model_flops_per_step, result.peak_flop_per_s,
                  result.instances, NAN if result.price_per_hour_usd is None else result.price_per_hour_usd)
    cost_s = None if result.price_per_hour_usd is None else float(fom["cost_per_step_usd"])
    hbm = max((m.total_gib for m in result.memory), default=0.0 if result.feasible else NAN)
    every = (result.scenario.get("checkpoint") or {}).get("every_steps") if result.storage is not None else None
    out = {
        "scenario": result.scenario_name,
        "feasible": bool(result.feasible),
        "reason": None if result.feasible else (result.reason or "infeasible"),
        "instance_type": result.instance_type,
        "instances": int(result.instances),
        "chips": int(result.chips),
        "neuron_cores": int(result.neuron_cores),
        "ranks": int(result.ranks),
        "layout": result.layout.label() if result.layout is not None else "",
        "stack": str(result.scenario.get("stack") or "custom"),     # the training stack that timed the run
        "ray_nodes": int(result.ray_nodes),
        "steps_replayed": len(result.steps),
        "steps_measured": len(measured) if ok else 0,
        "step_time_s": float(step_s),
        "tokens_per_s": float(fom["tokens_per_s"]) if ok else NAN,
        "seq_per_s": float(global_batch / step_s) if ok and global_batch else NAN,
        "mfu": float(fom["mfu"]) if ok else NAN,
        "hfu": float(result.hardware_flops_per_step / (result.peak_flop_per_s * step_s))
        if ok and result.hardware_flops_per_step else NAN,
        "hbm_peak_gib": float(hbm),
        **{k: float(v) for k, v in mean.items() if k != "step_time_s"},
        "tokens_per_step": int(result.tokens_per_step),
        "model_flops_per_step": float(result.model_flops_per_step),
        "peak_flop_per_s": float(result.peak_flop_per_s),
        "price_per_hour_usd": None if result.price_per_hour_usd is None else float(result.price_per_hour_usd),
        "cost_per_step_usd": None if cost_s is None else float(cost_s),
        "usd_per_million_tokens": None if cost_s is None else float(fom["usd_per_million_tokens"]),
        "payload_checked": bool(result.steps) and all(s.payload_checked for s in result.steps),
        # beside the breakdown (not part of it): reduction hidden behind backward, what stragglers cost
        "dp_comm_hidden_s": float(math.fsum(s.dp_comm_hidden_s for s in measured) / len(measured)) if ok else NAN,
        "residual_s": float(mean["compute_s"] * result.residual_fraction) if ok else NAN,   # part of compute_s
        "straggler_cost_s": float(math.fsum(s.straggler_cost_s for s in measured) / len(measured)) if ok else NAN,
        "slowest_ranks": sorted({int(s.slowest_rank) for s in measured if s.straggler_cost_s > 0}) if ok else [],
        **(result.storage.summary_keys() if result.storage is not None else {}),   # checkpoint, restore, FSx
        **({"checkpoint_every_steps": int(every)} if every else {}),
        **result.interval,
        "hbm_capacity_gib": float(max((m.capacity_gib for m in result.memory), default=NAN)),
        # every collective kind, exposed (the breakdown's share) and hidden behind compute
        **(comm_by_kind(result, measured) if ok else dict.fromkeys(COMM_KEYS, NAN)),
        "warnings": [],
        # the calibration profile the run used (`calibration.profile`, `--calibration`); None: the shipped fit
        "calibration_profile": (result.scenario.get("calibration") or {}).get("profile"),
    }
    out["warnings"] = warnings_for(result.scenario, out) + storage_warnings(result, out)
    # the in-layer time's context- and expert-parallel parts under the contract's names, beside tp_comm_s (which
    # holds them: tp_comm_s = comm_tp_exposed_s + cp_comm_s + ep_comm_s)
    at = list(out).index("tp_comm_s") + 1
    items = list(out.items())
    out = dict(items[:at] + [("cp_comm_s", out["comm_cp_exposed_s"]), ("ep_comm_s", out["comm_ep_exposed_s"])]
               + items[at:])
    return {**out, **days_and_dollars(result, out)}
