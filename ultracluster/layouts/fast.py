"""Layouts → HBM footprint, step time, throughput and cost, thousands at once: the replay's model over a
layout axis.

The fast path is the model `run` replays, evaluated for many layouts in one pass, not a second model: the HBM
of each stage, the chunk times and the communication plan come from the same functions `run` calls with a batch
of one (`memory.stage_state_gib` and the activation functions, `chip.layer_costs` / `chunk_rows` /
`optimizer_seconds`, `replay.comm`'s pieces), with each distinct per-rank shape priced once (all shapes in one
`evaluate` call per where and phase), each distinct collective once and each piece of the communication plan
once per what it depends on (memos).

The batched parts are in `parts.py`, the layout → scenario and cluster helpers and the per-process memo in
`pricer.py`. The step is then composed with `replay.engine`'s own pieces (`group_speeds`, `cp_exposed`,
`fsdp_exposed`, `chunk_seconds`, `stage_finish`), with the pipeline run for every layout and measured step at once (`schedules.pipeline_times`)
and the gradient-bucket queue in closed form (`bucket_queue_end`). One difference: the engine runs every
data-parallel replica's pipeline with its own jitter and stragglers, step by step, and takes the slowest; the fast
path runs one pipeline whose stages each take their slowest replica's speed, averaged over the measured steps:
exact without jitter and stragglers, within 0.2 % with the default 1 % jitter over the Llama-3.1-70B sweep
(docs/plan.md). Two more: the last microbatch's gradient
sends are priced alone, where the replay prices them sharing links with the first gradient buckets
(`concurrent_time`: a thousand times the cost of the rest of a layout, for at most 0.13 % of a step over the
Llama-3.1-70B sweep; `Pricer(shared_last_sends=True)` prices them as the replay does); and storage stalls
and checkpoints are not in the fast path. The replayed layouts carry all three exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import chip
from .. import operators as opslib
from ..cluster import Layout
from ..memory import infeasible_reason
from ..replay import engine
from ..replay.result import StageMemory
from .parts import (Group, Shapes, _counts, batched_chunks, batched_comm, batched_memory, cluster_columns, groups,
                    shapes)
from .pricer import (LAYOUT_COLUMNS, MEMORY_COLUMNS, PARTS, ClusterInfo, Pricer, calibration_index, has_zero_stages,
                     layout_scenario)
from .schedules import pipeline_times

__all__ = ["LAYOUT_COLUMNS", "MEMORY_COLUMNS", "PARTS", "ClusterInfo", "Group", "Pricer", "Shapes", "bucket_queue_end",
           "evaluate", "has_zero_stages", "layout_scenario", "speeds", "_counts"]


def speeds(pr: Pricer, r, steps: list[int], sigma: float) -> np.ndarray:
    """[steps, pp] each stage's speed factor (>= 1) in each measured step: its slowest replica's, with jitter
    and stragglers drawn as `replay.engine.combine_profiles` draws them."""
    tp, cp, pp, dp = int(r.tp), int(r.cp), int(r.pp), int(r.dp)
    seed, ranks = pr.scenario.seed, tp * cp * pp * dp
    slow, factor = pr.memo(("stragglers", ranks), lambda: chip.stragglers(pr.scenario, ranks))
    layout = Layout(tp=tp, cp=cp, pp=pp, dp=dp)
    out = np.empty((len(steps), pp))
    for i, step in enumerate(steps):
        def stage_max(step=step):
            return engine.group_speeds(layout, chip.group_jitter(seed, step, (dp, pp), tp * cp, sigma), slow,
                                       factor).max(axis=0)
        out[i] = pr.memo(("jitter", step, dp, pp, tp * cp, sigma), stage_max) if slow.size == 0 else stage_max()
    return out


def bucket_queue_end(t0: np.ndarray, t1: np.ndarray, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """When a stage's gradient-bucket queue ends (`replay.engine.gradient_reduction`), in closed form.

    Bucket i of a chunk's n is ready at t0 + (t1 - t0) i / n (evenly over its last backward); buckets run one
    after another, d seconds each. The chunks' windows follow the program and do not overlap, so the queue
    ends at the max over buckets of (ready time + the seconds of it and every later bucket), which within a
    chunk is linear in i: only its first and last bucket count.

    Args:
        t0, t1: [..., segments] start and end of each chunk's last backward, in program order.
        n: [..., segments] buckets; d: [..., segments] seconds per bucket.

    Returns:
        [...] end of the queue.
    """
    work = n * d
    later = np.cumsum(work[..., ::-1], axis=-1)[..., ::-1] - work
    return np.maximum(t0 + (t1 - t0) / n + work + later, t1 + d + later).max(axis=-1)


@dataclass
class _Stack:
    """ZeRO-3 gather and scatter seconds of several layouts, [rows, chunks], where `fsdp_exposed` reads a
    StepComm's [chunks] (its formula broadcasts over rows)."""

    fsdp_gather_s: np.ndarray
    fsdp_scatter_s: np.ndarray


@dataclass
class _Pending:
    """One layout waiting for its pipeline: its row, per-step chunk seconds and what the step adds after."""

    i: int
    m: int                       # microbatches per replica
    fwd: np.ndarray              # [steps, chunks]
    bwd: np.ndarray
    comm: engine.StepComm
    opt: np.ndarray              # [steps, pp]
    overhead_s: float


def evaluate(pr: Pricer, table: pd.DataFrame, reasons: bool = True) -> pd.DataFrame:
    """Predict every layout of `table` (LAYOUT_COLUMNS and `microbatches`, one row per layout).

    `reasons`: write `run`'s reason for every layout that does not fit (False: None everywhere, for a caller
    that words its own from the memory columns, as the planner's `search.apply_headroom` does).

    Returns:
        DataFrame indexed like `table`: feasible, reason, MEMORY_COLUMNS, step_time_s, tokens_per_s, mfu,
        price_per_hour_usd (the cluster's), usd_per_million_tokens (NaN where the price is unknown).
    """
    sc = pr.scenario
    t = sc.training
    table = table.reset_index(drop=True)
    # string columns as Python objects: the per-row reads below (itertuples, cluster keys) iterate them in C
    table = table.astype({c: object for c, d in table.dtypes.items() if isinstance(d, pd.StringDtype)})
    rows = list(table.itertuples(index=False))
    sh, srow = shapes(pr, rows)
    grps = groups(pr, table)
    mem = batched_memory(pr, table, sh, srow, grps)
    out = pd.DataFrame(mem)
    out["worst_stage"] = out["worst_stage"].astype(int)
    worst_total = out[["weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "reserve_gib"]].sum(axis=1)
    out["feasible"] = (worst_total <= out["hbm_capacity_gib"]).to_numpy()
    out["reason"] = None if not reasons else [None if ok else infeasible_reason([StageMemory(
        stage=int(r.worst_stage), weights_gib=r.weights_gib, gradients_gib=r.gradients_gib,
        optimizer_gib=r.optimizer_gib, activations_gib=r.activations_gib, reserve_gib=r.reserve_gib,
        total_gib=tot, capacity_gib=r.hbm_capacity_gib)]) for ok, r, tot in
        zip(out["feasible"], out.itertuples(index=False), worst_total)]

    measured = list(range(t.warmup_steps, t.warmup_steps + t.steps))
    feasible = out["feasible"].to_numpy()
    pending: dict[tuple, list[_Pending]] = {}
    for g in grps:
        js = np.flatnonzero(feasible[g.rows])
        if js.size == 0:
            continue
        idx = g.rows[js]
        F, B, OPT, attn_f, attn_b = batched_chunks(pr, table, sh, srow, g, js)
        comms = [batched_comm(pr, rows[int(i)], sh, int(srow[int(i)]), g, int(j)) for i, j in zip(idx, js)]
        cals = [pr.cluster(rows[int(i)].instance, rows[int(i)].instances, rows[int(i)].lnc,
                           calibration_index(rows[int(i)])).cluster.calibration for i in idx]
        # [n, pp]: each stage at its slowest replica's speed, averaged over the measured steps
        G = np.concatenate([pr.memo(("speed", int(r.tp), int(r.cp), int(r.pp), int(r.dp), sig),
                                    lambda r=r, sig=sig: speeds(pr, r, measured, sig).mean(axis=0, keepdims=True))
                            for r, sig in ((rows[int(i)], chip.jitter_sigma(sc, cal)) for i, cal in zip(idx, cals))])
        Gc = np.tile(G, (1, g.v))                                                    # chunk c: stage c % pp
        fc, bc = F * Gc, B * Gc
        cp_f, cp_b = np.zeros(idx.size), np.zeros(idx.size)
        for n, i in enumerate(idx):
            cp = int(rows[int(i)].cp)
            if cp > 1:
                prof = engine.ComputeProfile(fwd=fc[n:n + 1], bwd=bc[n:n + 1], opt=OPT[n], attn_fwd=float(attn_f[n]),
                                             attn_bwd=float(attn_b[n]), slowest_rank=-1)
                cp_f[n], cp_b[n] = engine.cp_exposed(comms[n], prof, cp)
        stacked = lambda name: np.array([getattr(c, name) for c in comms])           # noqa: E731
        fs_f, fs_b = np.zeros_like(fc), np.zeros_like(bc)
        z3 = np.array([c.fsdp_gather_s.size > 0 for c in comms])
        if z3.any():                  # ZeRO-3 rows: the engine's exposure of per-layer gathers, [rows, chunks] at once
            both = _Stack(fsdp_gather_s=np.array([c.fsdp_gather_s for c, z in zip(comms, z3) if z]),
                          fsdp_scatter_s=np.array([c.fsdp_scatter_s for c, z in zip(comms, z3) if z]))
            fs_f[z3], fs_b[z3] = engine.fsdp_exposed(both, fc[z3], bc[z3], g.layers)
        _, _, fwd, bwd = engine.chunk_seconds(stacked("tp_fwd"), stacked("tp_bwd"), fc, bc, cp_f[:, None], cp_b[:, None],
                                              fs_f, fs_b, g.layers[None, :])
        opt = OPT * G
        for n, i in enumerate(idx):
            r = rows[int(i)]
            pending.setdefault((str(r.pp_schedule), g.pp, g.v), []).append(_Pending(
                i=int(i), m=int(r.microbatches), fwd=fwd[n:n + 1], bwd=bwd[n:n + 1], comm=comms[n], opt=opt[n:n + 1],
                overhead_s=cals[n].step_overhead_s))
    step_time = np.full(len(rows), np.nan)
    for (schedule, pp, v), items in pending.items():
        n_rows, chunks = len(items), pp * v
        stack = lambda name: np.array([getattr(it.comm, name) for it in items])     # noqa: E731
        sf, sb = stack("send_fwd"), stack("send_bwd")
        last = np.array([it.comm.send_bwd_last if it.comm.send_bwd_last is not None else it.comm.send_bwd
                         for it in items])
        pt = pipeline_times(schedule, pp, v, np.array([it.m for it in items]), np.concatenate([it.fwd for it in items]),
                            np.concatenate([it.bwd for it in items]), sf, sb, last)
        end = pt.stage_end                                                           # [rows, pp]
        # gradient buckets, every stage of every row at once: [rows, pp, v] segments in program order
        # (a stage's last backwards run its chunks from the last down)
        has = np.array([it.comm.dp_buckets.size > 0 for it in items])
        nb = np.array([it.comm.dp_buckets if it.comm.dp_buckets.size else np.ones(chunks) for it in items], dtype=float)
        d = np.array([it.comm.dp_bucket_s if it.comm.dp_buckets.size else np.zeros(chunks) for it in items])
        seg = lambda a: a.reshape(n_rows, v, pp)[:, ::-1, :].transpose(0, 2, 1)     # noqa: E731
        overlap = np.array([it.comm.dp_overlap for it in items])
        queued = np.where(overlap[:, None], bucket_queue_end(seg(pt.last_b_start), seg(pt.last_b_end), seg(nb), seg(d)),
                          end + (seg(nb) * seg(d)).sum(axis=2))
        rs_end = np.where(has[:, None], queued, 0.0)
        norm = np.array([it.comm.norm_s for it in items])
        opt = np.concatenate([it.opt for it in items])
        after = stack("dp_after_s")
        done = engine.stage_finish(end, rs_end, norm[:, None], opt, after)[1]
        step = done.max(axis=1) + np.array([it.overhead_s for it in items])
        step_time[[it.i for it in items]] = step
    price, peak = cluster_columns(pr, table, ("price_per_hour_usd", "peak_flop_per_s"))
    price = price * table["instances"].to_numpy()
    tokens = t.global_batch * t.seq_len
    out["step_time_s"] = step_time
    out["tokens_per_s"] = tokens / step_time
    out["mfu"] = opslib.model_flops_per_step(sc) / (peak * step_time)
    out["price_per_hour_usd"] = price
    out["usd_per_million_tokens"] = price * step_time / 3600 / tokens * 1e6
    return out
