"""Shards' per-rank compute times → replayed steps on the virtual clock → StepRecords and Slices.

Each step: the shards (Ray actors, or in-process stand-ins) return the compute seconds of every rank
they own for one microbatch of each of its pipeline chunks, with their speed factors applied; the engine
takes the slowest rank of each tensor/context-parallel group, adds the in-layer collectives, executes
the pipeline schedule for every data-parallel replica at once, then the data-parallel gradient reduction
of each stage (which waits for the slowest replica), then the optimizer. Meanwhile the shards reduce a
real, scaled gradient payload among themselves and check it against the exact sum.

The breakdown is taken on the critical path: the stage that finishes last and, within it, the replica
whose pipeline finished last. Its pipeline time splits into compute, in-layer communication, pipeline
bubble (idle time with sends free) and exposed pipeline sends (the extra time sends add).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from .. import operators as opslib
from ..cluster import Cluster, rank_coords
from ..network import Group, collective_time, group_of
from .events import CollectiveRecord, Slice, StepRecord
from .schedule import Execution, execute, stage_programs

MAX_SLICES = 200_000  # keep the trace bounded: past this, only the last step's slices are kept


class ShardSet(Protocol):
    """What the engine needs from the shards (Ray actors or in-process)."""

    def profiles(self, step: int) -> list[dict[str, np.ndarray]]:
        """Per shard, in shard order: {"fwd": [chunks], "bwd": [chunks], "opt": [stages]} seconds at speed 1,
        and "slow_ranks" / "slow_factors": the shard's ranks that run slower and by how much."""

    def reduce_payload(self, step: int) -> tuple[int, bool]:
        """Reduce the scaled gradient payload among shards; (bytes moved, every result exact)."""


class StepCosts(Protocol):
    """Storage costs of a step (data loading, checkpoints), supplied by the storage model."""

    def __call__(self, step: int, busy_s: float) -> tuple[float, float]:
        """(data_stall_s, checkpoint_s) of `step`, given the seconds the step computes and communicates."""


@dataclass(frozen=True)
class CommPlan:
    """Communication costs of one step that do not depend on rank speeds."""

    tp_fwd: np.ndarray            # [chunks] in-layer collective seconds per microbatch, forward
    tp_bwd: np.ndarray            # [chunks] backward (including recomputed forwards)
    send_fwd: np.ndarray          # [chunks] activation send to the next chunk
    send_bwd: np.ndarray          # [chunks] gradient send to the previous chunk
    dp: np.ndarray                # [stages] exposed data-parallel reduction seconds
    records: list[CollectiveRecord]


def microbatches(scenario) -> int:
    t, p = scenario.training, scenario.parallelism
    return t.global_batch // (p.dp * t.micro_batch)


def _stage_sum(values: np.ndarray, pp: int) -> np.ndarray:
    """Sum a per-chunk array onto the stages that hold the chunks (chunk c on stage c % pp)."""
    out = np.zeros(pp)
    np.add.at(out, np.arange(values.size) % pp, values)
    return out


def plan_comm(scenario, cluster: Cluster) -> CommPlan:
    """Cost every collective of a step once (they are the same for every replica and step)."""
    t, layout, par = scenario.training, cluster.layout, scenario.parallelism
    v = opslib.shape_variables(scenario, layout)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    act = v["T"] * v["h"] * v["e"]                     # one microbatch's activation tensor, bytes
    again = 1.0 if t.recompute == "full" else 0.0      # full recomputation repeats the forward collectives
    layer_mbs = _stage_sum(layers, layout.pp)[0] * microbatches(scenario)   # layer-microbatches on stage 0
    records: list[CollectiveRecord] = []

    def priced(name: str, op: str, nbytes: float, group: Group, count: float) -> float:
        secs, alg = collective_time(cluster, op, nbytes, group)
        if secs > 0 and count > 0:
            records.append(CollectiveRecord(group=name, op=op, ranks=group.ranks, instances=group.instances,
                                            bytes=int(nbytes), algorithm=alg, time_s=secs,
                                            count_per_step=int(round(count))))
        return secs

    # Megatron-LM: per layer two all-reduces forward and two backward; with sequence parallelism an
    # all-gather and a reduce-scatter in place of each (Korthikanti et al. 2022).
    tpg = group_of(cluster, layout.tp, 1)
    n_tp = layer_mbs * (4 + 2 * again)
    if par.sequence_parallel:
        per_layer = 2 * (priced("tp", "all_gather", act, tpg, n_tp) + priced("tp", "reduce_scatter", act, tpg, n_tp))
    else:
        per_layer = 2 * priced("tp", "all_reduce", act, tpg, n_tp)
    # context parallel: gather the sequence's K and V forward, reduce-scatter their gradients backward
    cpg = group_of(cluster, layout.cp, layout.tp)
    kv = 2 * v["T"] * v["hkv"] * v["d"] * v["e"] * layout.cp
    cp_fwd = priced("cp", "all_gather", kv, cpg, layer_mbs * (1 + again))
    cp_bwd = priced("cp", "reduce_scatter", kv, cpg, layer_mbs)
    tp_fwd = layers * (per_layer + cp_fwd)
    tp_bwd = layers * ((per_layer + cp_fwd) * again + per_layer + cp_bwd)

    # pipeline sends: chunk c lives on stage c % pp; the send leaves the instance when the stages' first
    # ranks sit on different instances (placement is tp, cp, then pp inside a replica)
    stride, rpi = layout.tp * layout.cp, cluster.ranks_per_instance
    send_bytes = act / layout.tp if par.sequence_parallel else act
    n_chunks = layers.size
    send_fwd = np.zeros(n_chunks)
    for c in range(n_chunks - 1):
        crosses = (c % layout.pp) * stride // rpi != ((c + 1) % layout.pp) * stride // rpi
        grp = Group(per_instance=1, instances=2) if crosses else Group(per_instance=2, instances=1)
        count = 2 * microbatches(scenario) if c == 0 else 0
        send_fwd[c] = priced("pp", "send_recv", send_bytes, grp, count)
    send_bwd = np.concatenate([[0.0], send_fwd[:-1]])  # chunk c's input gradient returns over the c-1 -> c link

    # data-parallel reduction per stage: ZeRO-1 reduce-scatters gradients and all-gathers updated weights
    stage_params = _stage_sum(opslib.chunk_params(scenario.model, layout.tp, layers, layout.pp), layout.pp)
    g_bytes = 4.0 if (t.master_weights == "fp32" or t.precision == "fp32") else 2.0
    w_bytes = 4.0 if t.precision == "fp32" else 2.0
    dpg = group_of(cluster, layout.dp, layout.tp * layout.cp * layout.pp)
    dp = np.zeros(layout.pp)
    for s in range(layout.pp):
        count = 1 if s == 0 else 0   # one stage's collectives in the table (stage 0 carries the embedding)
        if t.zero1:
            dp[s] = priced("dp", "reduce_scatter", stage_params[s] * g_bytes, dpg, count) \
                + priced("dp", "all_gather", stage_params[s] * w_bytes, dpg, count)
        else:
            dp[s] = priced("dp", "all_reduce", stage_params[s] * g_bytes, dpg, count)
    return CommPlan(tp_fwd=tp_fwd, tp_bwd=tp_bwd, send_fwd=send_fwd, send_bwd=send_bwd, dp=dp, records=records)


@dataclass(frozen=True)
class ComputeProfile:
    """One step's compute, per data-parallel replica and pipeline chunk (slowest tp/cp rank of each)."""

    fwd: np.ndarray          # [dp, chunks] seconds per microbatch
    bwd: np.ndarray          # [dp, chunks]
    opt: np.ndarray          # [stages] optimizer seconds (slowest replica)
    slowest_rank: int        # global rank with the largest slowdown (0 when all run at speed 1)


def combine_profiles(profiles: list[dict[str, np.ndarray]], layout) -> ComputeProfile:
    """Shards' profiles → per replica and chunk times. O(replicas x chunks + slow ranks), not O(ranks).

    A tensor/context-parallel group runs at the pace of its slowest rank, so a slow rank raises its
    replica's chunk times to base x its factor.
    """
    fwd = np.max([p["fwd"] for p in profiles], axis=0)
    bwd = np.max([p["bwd"] for p in profiles], axis=0)
    opt = np.max([p["opt"] for p in profiles], axis=0)
    slow = np.concatenate([p["slow_ranks"] for p in profiles]).astype(np.int64)
    factor = np.concatenate([p["slow_factors"] for p in profiles])
    pp, v = layout.pp, layout.virtual_stages
    speed = np.ones((layout.dp, pp))
    if slow.size:
        c = rank_coords(layout, slow)
        np.maximum.at(speed, (c["dp"], c["pp"]), factor)
    chunk_speed = np.tile(speed, (1, v))                        # chunk j*pp + s takes stage s's speed
    opt = opt * speed.max(axis=0)
    slowest = int(slow[np.argmax(factor)]) if slow.size else 0
    return ComputeProfile(fwd=fwd[None, :] * chunk_speed, bwd=bwd[None, :] * chunk_speed, opt=opt,
                          slowest_rank=slowest)


def replay_steps(scenario, cluster: Cluster, shards: ShardSet, comm: CommPlan, programs: list,
                 on_step: Callable[[StepRecord], None] | None = None,
                 step_costs: StepCosts | None = None) -> tuple[list[StepRecord], list[Slice]]:
    """Replay warm-up and measured steps.

    Args:
        scenario: the resolved Scenario.
        cluster: its Cluster.
        shards: the shard set (actors).
        comm: from `plan_comm`.
        programs: from `stage_programs` for this scenario.
        on_step: called with each finished StepRecord (the run directory appends it to steps.csv).
        step_costs: storage costs per step; the data stall comes before the step's compute, the
            checkpoint stall after its optimizer. None: storage costs nothing.

    Returns:
        (steps, slices of the critical replica on the virtual clock).
    """
    t, layout = scenario.training, cluster.layout
    m = microbatches(scenario)
    shard_of_rank0 = _stage_shards(cluster)
    steps: list[StepRecord] = []
    slices: list[Slice] = []
    clock = 0.0
    for step in range(t.warmup_steps + t.steps):
        wall0 = time.perf_counter()
        prof = combine_profiles(shards.profiles(step), layout)
        fc, bc = prof.fwd, prof.bwd
        fwd, bwd = fc + comm.tp_fwd, bc + comm.tp_bwd
        ex = execute(programs, fwd, bwd, comm.send_fwd, comm.send_bwd)
        ex0 = execute(programs, fwd, bwd, np.zeros_like(comm.send_fwd), np.zeros_like(comm.send_bwd))
        opt = prof.opt                                                                    # [pp]
        reduce_start = ex.stage_end.max(axis=0)                                          # [pp]
        done = reduce_start + comm.dp + opt
        s_c = int(np.argmax(done))
        d_c = int(np.argmax(ex.stage_end[:, s_c]))
        on_stage = np.arange(fc.shape[1]) % layout.pp == s_c
        compute = m * (fc[d_c, on_stage].sum() + bc[d_c, on_stage].sum())
        tp = m * (comm.tp_fwd[on_stage].sum() + comm.tp_bwd[on_stage].sum())
        pipe = ex.stage_end[d_c, s_c]
        pipe0 = ex0.stage_end[d_c, s_c]
        bubble = pipe0 - compute - tp
        assert bubble > -1e-9 * pipe0, "a stage cannot be busier than its pipeline is long"
        bubble = max(bubble, 0.0)  # rounding only
        overhead = cluster.calibration.step_overhead_s
        stall, ckpt = step_costs(step, float(done[s_c] + overhead)) if step_costs else (0.0, 0.0)
        payload_bytes, payload_ok = shards.reduce_payload(step)
        rec = StepRecord(
            step=step, warmup=step < t.warmup_steps, step_time_s=float(stall + done[s_c] + overhead + ckpt),
            compute_s=float(compute + opt[s_c]), tp_comm_s=float(tp), pp_comm_s=float(pipe - pipe0),
            dp_comm_s=float(comm.dp[s_c]), bubble_s=float(bubble), data_stall_s=float(stall),
            checkpoint_s=float(ckpt), other_s=float(overhead), critical_replica=d_c, critical_stage=s_c,
            slowest_rank=prof.slowest_rank, payload_bytes=int(payload_bytes),
            payload_checked=bool(payload_ok), wall_s=time.perf_counter() - wall0)
        slices += _slices(ex, d_c, comm, reduce_start, opt, clock + stall, step, shard_of_rank0, layout)
        for name, t0, dur in (("data stall", clock, stall), ("checkpoint", clock + rec.step_time_s - ckpt, ckpt)):
            if dur > 0:
                slices.append(Slice(stage=0, stream="storage", name=name, start_s=t0, end_s=t0 + dur, step=step,
                                    shard=shard_of_rank0[0]))
        if len(slices) > MAX_SLICES:
            slices = [s for s in slices if s.step == step]
        clock += rec.step_time_s
        steps.append(rec)
        if on_step:
            on_step(rec)
    return steps, slices


def _stage_shards(cluster: Cluster) -> list[int]:
    """Shard holding the first rank of each stage of replica 0."""
    firsts = [s * cluster.layout.tp * cluster.layout.cp for s in range(cluster.layout.pp)]
    bounds = np.array([sh.first_rank for sh in cluster.shards])
    return [int(np.searchsorted(bounds, r, side="right") - 1) for r in firsts]


def _slices(ex: Execution, d: int, comm: CommPlan, reduce_start: np.ndarray, opt: np.ndarray, clock: float,
            step: int, shard_of: Sequence[int], layout) -> list[Slice]:
    """Timeline of replica d: every forward/backward, then each stage's reduction and optimizer."""
    out = []
    for s, prog in enumerate(ex.programs):
        for kind, k, c in prog:
            key = (kind, k, c)
            out.append(Slice(stage=s, stream="compute", name=f"{kind} mb{k} c{c // layout.pp}",
                             start_s=clock + float(ex.start[key][d]), end_s=clock + float(ex.end[key][d]),
                             step=step, shard=shard_of[s]))
        t0 = clock + float(reduce_start[s])
        if comm.dp[s] > 0:
            out.append(Slice(stage=s, stream="dp", name="gradient reduction", start_s=t0, end_s=t0 + float(comm.dp[s]),
                             step=step, shard=shard_of[s]))
        t1 = t0 + float(comm.dp[s])
        out.append(Slice(stage=s, stream="optimizer", name="optimizer", start_s=t1, end_s=t1 + float(opt[s]),
                         step=step, shard=shard_of[s]))
    return out
