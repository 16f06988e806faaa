"""Shards' per-rank compute times → replayed steps on the virtual clock → StepRecords and Slices.

Before the first step the shards (Ray actors, or in-process stand-ins) said once, over what they own, the compute
seconds of one microbatch of each pipeline chunk they time and their slow ranks, merged once (`replay.shard_steps`
`MergedState`). Each step they return only the step's jitter of each (replica, stage) group they hold (its
slowest tensor/context-parallel rank); the engine merges these disjoint answers with the run's state, adds the
in-layer collectives, executes
the pipeline schedule for every data-parallel replica at once, then the data-parallel gradient reduction
of each stage (which waits for the slowest replica), then the optimizer. Meanwhile the shards reduce a
real, scaled gradient payload among themselves and check it against the exact sum.

The breakdown is taken on the critical path: the stage that finishes last and, within it, the replica
whose pipeline finished last. Its pipeline time splits into compute, in-layer communication, pipeline
bubble (idle time with sends free) and exposed pipeline sends (the extra time sends add).

Under ZeRO-3 (FSDP, `training.zero: 3`) every layer all-gathers its weights over the data-parallel group
before its forward and again before its backward, and reduce-scatters its gradients after its backward,
for every microbatch; the next layer's gather is prefetched while the current layer computes, so only what
outlasts the previous layer's compute is exposed (`fsdp_exposed`). The exposed part counts as data-parallel
communication (`dp_comm_s`), the hidden part as `dp_comm_hidden_s`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ..cluster import Cluster, group_first_rank, stage_sum
from ..step.speed import group_speeds, slowed, slowest_replica
from .comm import DP_BUCKET_BYTES, StepComm, send_group, microbatches, step_comm   # noqa: F401 (re-exported: replay.engine.step_comm)
from .result import Slice, StepRecord
from .shard_steps import MergedSteps, MergedState, ShardStep, ShardState, merge_shard_steps
from .records import ComputeTally
from .schedule import Execution, execute

MAX_SLICES = 200_000  # keep the trace bounded: past this, only the last step's slices are kept


class ShardSet(Protocol):
    """What the engine needs from the shards (Ray actors or in-process)."""

    def states(self) -> list[ShardState]:
        """Per shard, in shard order: what it says once, before the first step (`replay.shard_steps.ShardState`)."""

    def shard_steps(self, step: int) -> list[ShardStep]:
        """Per shard, in shard order: its answer for `step` over what it owns, the jitter of its groups
        (`replay.shard_steps`)."""

    def reduce_payload(self, step: int) -> tuple[int, bool]:
        """Reduce the scaled gradient payload among shards; (bytes moved, every result exact)."""


class StepCosts(Protocol):
    """Storage costs of a step (data loading, checkpoints), supplied by the storage model."""

    def __call__(self, step: int, busy_s: float) -> tuple[float, float]:
        """(data_stall_s, checkpoint_s) of `step`, given the seconds the step computes and communicates."""


def gradient_reduction(ex: Execution, comm: StepComm, pp: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """When each stage's bucketed gradient reduction ends, overlapped with its last backward.

    A chunk's gradients become final, bucket by bucket, during its last microbatch's backward (evenly over
    that backward); a bucket's collective can start when every replica has it and the stage's previous
    bucket is through (one queue per stage). Without `comm.dp_overlap` every bucket waits for the stage's
    pipeline to end on every replica (the XLA stacks reduce in the optimizer's graph). With t_i the ready time and d the bucket time, the queue
    ends at D_k + max_{i<=k}(t_i - D_{i-1}) (D the running sum of d), computed with one accumulate. The planner's
    closed form of the same queue is `bucket_queue_end` (below).

    Returns:
        (end of the reduction [stages], seconds of it that ran while the stage still computed [stages]).
    """
    end = np.zeros(pp)
    hidden = np.zeros(pp)
    if comm.dp_buckets.size == 0:
        return end, hidden
    for s in range(pp):
        ready, dur = [], []
        for c in range(s, comm.dp_buckets.size, pp):
            key = ("B", m - 1, c)
            t0, t1 = ex.start[key], ex.end[key]                           # [replicas]
            frac = np.arange(1, comm.dp_buckets[c] + 1) / comm.dp_buckets[c]
            if comm.dp_overlap:
                ready.append((t0[:, None] + (t1 - t0)[:, None] * frac[None, :]).max(axis=0))
            else:
                ready.append(np.full(frac.size, ex.stage_end[:, s].max()))
            dur.append(np.full(comm.dp_buckets[c], comm.dp_bucket_s[c]))
        r, d = np.concatenate(ready), np.concatenate(dur)
        order = np.argsort(r, kind="stable")
        r, d = r[order], d[order]
        cum = np.cumsum(d)
        end[s] = cum[-1] + (r - (cum - d)).max()
        pipe_end = ex.stage_end[:, s].max()
        hidden[s] = d.sum() - max(end[s] - pipe_end, 0.0)
    return end, hidden


def bucket_queue_end(t0: np.ndarray, t1: np.ndarray, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """When a stage's gradient-bucket queue ends, in closed form: the planner's `gradient_reduction` (above), for
    many layouts at once with one pipeline (each stage at its slowest replica's speed); tests/plan/test_schedules.py
    checks the two agree.

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


@dataclass(frozen=True)
class ComputeTimes:
    """One step's compute, per data-parallel replica and pipeline chunk (slowest tp/cp rank of each)."""

    fwd: np.ndarray          # [dp, chunks] seconds per microbatch
    bwd: np.ndarray          # [dp, chunks]
    opt: np.ndarray          # [stages] optimizer seconds (slowest replica)
    attn_fwd: float          # attention core of one layer and microbatch, seconds (context-parallel overlap)
    attn_bwd: float
    slowest_rank: int        # global rank of the slowest straggler (-1 when there is none)


def combine_shard_steps(merged: MergedSteps, layout, with_stragglers: bool = True) -> ComputeTimes:
    """A step's merged shard steps → per replica and chunk times. O(replicas x chunks + slow ranks), not O(ranks).

    A tensor/context-parallel group runs at the pace of its slowest rank: the shards' per-group jitter
    (log-normal per rank, its group maximum drawn in the shard that holds the group from the (seed, step)
    stream at the group's position) scales its chunk times, and a straggler raises them to base x its
    factor when that is more.
    """
    v = layout.virtual_stages
    slow, factor = merged.slow_ranks, merged.slow_factors
    with_slow = bool(slow.size and with_stragglers)
    speed = group_speeds(layout, merged.group_speed, slow if with_slow else slow[:0], factor)
    slowest = int(slow[np.argmax(factor)]) if with_slow else -1
    fwd, bwd, opt = slowed(merged.forward_s[None, :], merged.backward_s[None, :], merged.optimizer_s, speed,
                           slowest_replica(speed), v)          # the planner's: `layouts.steps` (`step.speed`)
    return ComputeTimes(fwd=fwd, bwd=bwd, opt=opt, attn_fwd=merged.attention_fwd_s,
                        attn_bwd=merged.attention_bwd_s, slowest_rank=slowest)


def chunk_seconds(tp_fwd: np.ndarray, tp_bwd: np.ndarray, fc: np.ndarray, bc: np.ndarray, cp_f, cp_b,
                  fs_f: np.ndarray, fs_b: np.ndarray, layers: np.ndarray) -> tuple[np.ndarray, ...]:
    """A microbatch's forward and backward of each chunk as the pipeline runs them: compute (fc, bc), in-layer
    collectives (tp_fwd, tp_bwd), the context-parallel ring's exposed seconds per layer (cp_f, cp_b, `cp_exposed`)
    and exposed ZeRO-3 traffic (fs_f, fs_b, `fsdp_exposed`), broadcast over leading axes (replicas, layouts).

    Returns:
        (in-layer forward, in-layer backward, forward, backward).
    """
    tp_f, tp_b = tp_fwd + layers * cp_f, tp_bwd + layers * cp_b
    return tp_f, tp_b, fc + tp_f + fs_f, bc + tp_b + fs_b


def serial_sends(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                 serial) -> tuple[np.ndarray, ...]:
    """The pipeline's exchanges where the stack runs each as a graph of its own (`comm.serial_exchanges`, a bool or
    [rows]): a 2-rank collective both stages wait in, so it joins both stages' timelines and hides behind no
    compute. A chunk's microbatch forward then receives from chunk c - 1 and sends to c + 1 (NxD: the receive and
    send tasks; NeMo: the exchanges), its backward receives from c + 1 and sends to c - 1; the transfer is on the
    stage's time, so the dependency waits for nothing more. Both sides pay each exchange in full: the rendezvous's
    wait for the later side is not modelled beyond the stages' own order.

    Returns:
        (forward, backward with the exchanges, send_fwd, send_bwd as delays (0 where serial), exchange seconds
        added to the forward and to the backward). The last microbatch's link-sharing sends (`send_bwd_last`) then
        apply nowhere by themselves: both executors let one replace a send only where a send remains.
    """
    if not np.any(serial):
        zero = np.zeros(np.shape(send_fwd))
        return fwd, bwd, send_fwd, send_bwd, zero, zero
    on = np.asarray(serial, dtype=float)[..., None] if np.ndim(serial) else 1.0
    pad = np.zeros(np.shape(send_fwd)[:-1] + (1,))
    ex_f = on * (send_fwd + np.concatenate([pad, send_fwd[..., :-1]], axis=-1))     # to c + 1, from c - 1
    ex_b = on * (send_bwd + np.concatenate([send_bwd[..., 1:], pad], axis=-1))      # to c - 1, from c + 1
    return fwd + ex_f, bwd + ex_b, send_fwd * (1.0 - on), send_bwd * (1.0 - on), ex_f, ex_b


def stage_finish(pipe_end: np.ndarray, reduce_end: np.ndarray, norm_s, opt: np.ndarray,
                 after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(when each stage's optimizer starts, when the stage is done): after its pipeline and its gradient
    reduction, the gradient-norm all-reduce, then the optimizer, then the ZeRO-1 parameter all-gather."""
    start = np.maximum(pipe_end, reduce_end) + norm_s
    return start, start + opt + after


def cp_exposed(comm: StepComm, prof: ComputeTimes, cp: int) -> tuple[float, float]:
    """Seconds per layer and microbatch that the context-parallel ring adds: cp - 1 block passes, each
    hidden behind the attention on the block in hand (attention / cp) where it is shorter. With degraded
    instances (`comm.replica_cp_block_s`), [replicas, 1] arrays. Over layouts (the planner: `cp`, the blocks and
    the attention times as [rows] arrays, every cp > 1), [rows] arrays."""
    if np.ndim(cp):
        return ((cp - 1) * np.maximum(0.0, comm.cp_block_fwd_s - prof.attn_fwd / cp),
                (cp - 1) * np.maximum(0.0, comm.cp_block_bwd_s - prof.attn_bwd / cp))
    if cp <= 1:
        return 0.0, 0.0
    if comm.replica_cp_block_s is not None:
        f, b = comm.replica_cp_block_s[:, :1], comm.replica_cp_block_s[:, 1:]
        return (cp - 1) * np.maximum(0.0, f - prof.attn_fwd / cp), (cp - 1) * np.maximum(0.0, b - prof.attn_bwd / cp)
    return ((cp - 1) * max(0.0, comm.cp_block_fwd_s - prof.attn_fwd / cp),
            (cp - 1) * max(0.0, comm.cp_block_bwd_s - prof.attn_bwd / cp))


def _replica_comm(comm: StepComm, dp: int) -> tuple[np.ndarray, ...]:
    """(tp_fwd, tp_bwd [replicas, chunks], send_fwd, send_bwd, send_bwd_last [chunks], or [replicas, chunks]
    with degraded instances): what each replica's pipeline pays."""
    n = comm.tp_fwd.size
    last = comm.send_bwd_last
    if comm.replica_tp_fwd is None:
        return (np.broadcast_to(comm.tp_fwd, (dp, n)), np.broadcast_to(comm.tp_bwd, (dp, n)), comm.send_fwd,
                comm.send_bwd, last)
    return (comm.replica_tp_fwd, comm.replica_tp_bwd, comm.replica_send_fwd, comm.replica_send_bwd,
            comm.replica_send_bwd_last if last is not None else None)


def fsdp_exposed(comm: StepComm, fwd: np.ndarray, bwd: np.ndarray, layers: np.ndarray) -> tuple[np.ndarray,
                                                                                                np.ndarray]:
    """ZeRO-3 communication seconds a microbatch's forward and backward of each chunk expose, [replicas, chunks].

    A chunk of L layers, each computing cf (forward) or cb (backward) seconds, gathers g and reduce-scatters
    r seconds per layer on one queue. Forward: the first gather is exposed, every later one is prefetched
    while the previous layer computes: g + (L - 1) max(0, g - cf). Backward: the first gather is exposed;
    while the first layer computes the queue gathers the next layer's weights, while the last computes it
    reduce-scatters the previous layer's gradients, in between it does both; the last reduce-scatter is
    exposed: g + r + max(0, g - cb) + max(0, r - cb) + (L - 2) max(0, g + r - cb) for L >= 2, g + r for L = 1.

    Args:
        comm: from `step_comm` (`fsdp_gather_s`, `fsdp_scatter_s` per chunk; empty: not ZeRO-3).
        fwd, bwd: [replicas, chunks] compute seconds of one microbatch of each chunk.
        layers: [chunks] layers of each chunk.
    """
    fwd, bwd = np.asarray(fwd, dtype=float), np.asarray(bwd, dtype=float)
    if comm.fsdp_gather_s.size == 0 or not (comm.fsdp_gather_s.any() or comm.fsdp_scatter_s.any()):
        return np.zeros_like(fwd), np.zeros_like(bwd)
    n = np.asarray(layers, dtype=float)
    g, r, cf, cb = comm.fsdp_gather_s, comm.fsdp_scatter_s, fwd / n, bwd / n
    f_exp = g + (n - 1) * np.maximum(0.0, g - cf)
    b_exp = g + r + np.where(n >= 2, np.maximum(0.0, g - cb) + np.maximum(0.0, r - cb), 0.0) \
        + np.maximum(n - 2, 0) * np.maximum(0.0, g + r - cb)
    return f_exp, b_exp


def replay_steps(scenario, cluster: Cluster, shards: ShardSet, state: MergedState, comm: StepComm, programs: list,
                 on_step: Callable[[StepRecord], None] | None = None, step_costs: StepCosts | None = None,
                 tally: ComputeTally | None = None) -> tuple[list[StepRecord], list[Slice]]:
    """Replay warm-up and measured steps.

    Args:
        scenario: the resolved Scenario.
        cluster: its Cluster.
        shards: the shard set (actors).
        state: what the shards said once, merged (`replay.shard_steps.merge_states`).
        comm: from `step_comm`.
        programs: from `stage_programs` for this scenario.
        on_step: called with each finished StepRecord (the run directory appends it to steps.csv).
        step_costs: storage costs per step; the data stall comes before the step's compute, the
            checkpoint stall after its optimizer. None: storage costs nothing.
        tally: given each step's merged shard steps (the per-rank compute of the result, `ComputeTally`).

    Returns:
        (steps, slices of the critical replica on the virtual clock).
    """
    t, layout = scenario.training, cluster.layout
    m = microbatches(scenario)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    steps: list[StepRecord] = []
    slices: list[Slice] = []
    clock = 0.0
    for step in range(t.warmup_steps + t.steps):
        wall0 = time.perf_counter()
        merged = merge_shard_steps(shards.shard_steps(step), state, layout.dp * layout.pp)
        if tally is not None:
            tally.add(step, merged)
        prof = combine_shard_steps(merged, layout)
        fc, bc = prof.fwd, prof.bwd
        cp_f, cp_b = cp_exposed(comm, prof, layout.cp)
        rtp_f, rtp_b, send_f, send_b, send_last = _replica_comm(comm, layout.dp)
        fs_f, fs_b = fsdp_exposed(comm, fc, bc, layers)
        tp_f, tp_b, fwd, bwd = chunk_seconds(rtp_f, rtp_b, fc, bc, cp_f, cp_b, fs_f, fs_b, layers)   # [replicas, chunks]
        ex_free_sends = execute(programs, fwd, bwd, np.zeros_like(send_f), np.zeros_like(send_b))
        fwd, bwd, send_f, send_b, xf, xb = serial_sends(fwd, bwd, send_f, send_b, comm.serial_exchanges)
        last = {("B", m - 1, c): send_last[..., c] for c in range(fc.shape[1])} \
            if send_last is not None else None
        ex = execute(programs, fwd, bwd, send_f, send_b, last)
        opt = prof.opt                                                                    # [pp]
        pipe_end = ex.stage_end.max(axis=0)                                               # [pp]
        rs_end, dp_hidden = gradient_reduction(ex, comm, layout.pp, m)
        reduce_start, done = stage_finish(pipe_end, rs_end, comm.norm_s, opt, comm.dp_after_s)
        crit_stage = int(np.argmax(done))
        crit_replica = int(np.argmax(ex.stage_end[:, crit_stage]))
        on_stage = np.arange(fc.shape[1]) % layout.pp == crit_stage
        compute = m * (fc[crit_replica, on_stage].sum() + bc[crit_replica, on_stage].sum())
        tp = m * (tp_f[crit_replica, on_stage].sum() + tp_b[crit_replica, on_stage].sum())
        pipe = ex.stage_end[crit_replica, crit_stage]
        pipe_free_sends = ex_free_sends.stage_end[crit_replica, crit_stage]
        fsdp = m * (fs_f[crit_replica, on_stage].sum() + fs_b[crit_replica, on_stage].sum())   # exposed ZeRO-3 traffic
        fsdp_all = m * float((layers * (2 * comm.fsdp_gather_s + comm.fsdp_scatter_s))[on_stage].sum()) \
            if comm.fsdp_gather_s.size else 0.0
        bubble = pipe_free_sends - compute - tp - fsdp
        assert bubble > -1e-9 * pipe_free_sends, "a stage cannot be busier than its pipeline is long"
        bubble = max(bubble, 0.0)  # rounding only
        overhead = cluster.calibration.step_overhead_s
        stall, ckpt = step_costs(step, float(done[crit_stage] + overhead)) if step_costs else (0.0, 0.0)
        straggle = 0.0
        if prof.slowest_rank >= 0:   # what the slow ranks cost: the same step with them at speed 1
            base = combine_shard_steps(merged, layout, with_stragglers=False)
            bf_f, bf_b = fsdp_exposed(comm, base.fwd, base.bwd, layers)
            ex_b = execute(programs, base.fwd + tp_f + bf_f + xf, base.bwd + tp_b + bf_b + xb, send_f, send_b, last)
            done_b = stage_finish(ex_b.stage_end.max(axis=0), gradient_reduction(ex_b, comm, layout.pp, m)[0],
                                  comm.norm_s, base.opt, comm.dp_after_s)[1]
            straggle = float(done.max() - done_b.max())
        payload_bytes, payload_ok = shards.reduce_payload(step)
        rec = StepRecord(
            step=step, warmup=step < t.warmup_steps, step_time_s=float(stall + done[crit_stage] + overhead + ckpt),
            compute_s=float(compute + opt[crit_stage]), tp_comm_s=float(tp), pp_comm_s=float(pipe - pipe_free_sends),
            dp_comm_s=float(reduce_start[crit_stage] - pipe + comm.dp_after_s[crit_stage] + fsdp),
            bubble_s=float(bubble), data_stall_s=float(stall), checkpoint_s=float(ckpt), other_s=float(overhead),
            critical_replica=crit_replica, critical_stage=crit_stage,
            slowest_rank=max(prof.slowest_rank, 0), payload_bytes=int(payload_bytes),
            payload_checked=bool(payload_ok), wall_s=time.perf_counter() - wall0,
            dp_comm_hidden_s=float(dp_hidden[crit_stage] + fsdp_all - fsdp), straggler_cost_s=straggle)
        shard_of = _stage_shards(cluster, crit_replica)
        slices += _slices(ex, crit_replica, comm, rs_end, reduce_start, opt, clock + stall, step, shard_of, layout)
        for name, t0, dur in (("data stall", clock, stall), ("checkpoint", clock + rec.step_time_s - ckpt, ckpt)):
            if dur > 0:
                slices.append(Slice(stage=0, stream="storage", name=name, start_s=t0, end_s=t0 + dur, step=step,
                                    shard=shard_of[0]))
        if len(slices) > MAX_SLICES:
            slices = [s for s in slices if s.step == step]
        clock += rec.step_time_s
        steps.append(rec)
        if on_step:
            on_step(rec)
    return steps, slices


def _stage_shards(cluster: Cluster, replica: int) -> list[int]:
    """Shard holding the first rank of each stage of a data-parallel replica."""
    lay = cluster.layout
    firsts = group_first_rank(lay.tp, lay.cp, lay.pp, replica, np.arange(lay.pp))
    bounds = np.array([sh.first_rank for sh in cluster.shards])
    return (np.searchsorted(bounds, firsts, side="right") - 1).tolist()


def _slices(ex: Execution, d: int, comm: StepComm, rs_end: np.ndarray, reduce_start: np.ndarray, opt: np.ndarray,
            clock: float, step: int, shard_of: Sequence[int], layout) -> list[Slice]:
    """Timeline of replica d: every forward/backward, each stage's gradient reduction (its busy span
    ending when the last bucket is through), optimizer and parameter all-gather."""
    out = []
    reduce_s = stage_sum(comm.dp_bucket_s * comm.dp_buckets, layout.pp) if comm.dp_buckets.size else np.zeros(
        layout.pp)
    for s, prog in enumerate(ex.programs):
        for kind, k, c in prog:
            key = (kind, k, c)
            out.append(Slice(stage=s, stream="compute", name=f"{kind} mb{k} c{c // layout.pp}",
                             start_s=clock + float(ex.start[key][d]), end_s=clock + float(ex.end[key][d]),
                             step=step, shard=shard_of[s], kind=str(kind), microbatch=int(k), chunk=int(c)))
        if reduce_s[s] > 0:
            t1 = clock + float(rs_end[s])
            out.append(Slice(stage=s, stream="dp", name="gradient reduction (bucketed, overlaps backward)",
                             start_s=t1 - float(reduce_s[s]), end_s=t1, step=step, shard=shard_of[s]))
        t0 = clock + float(reduce_start[s])
        if comm.norm_s > 0:
            out.append(Slice(stage=s, stream="dp", name="gradient-norm all-reduce", start_s=t0 - comm.norm_s,
                             end_s=t0, step=step, shard=shard_of[s]))
        out.append(Slice(stage=s, stream="optimizer", name="optimizer", start_s=t0, end_s=t0 + float(opt[s]),
                         step=step, shard=shard_of[s]))
        if comm.dp_after_s[s] > 0:
            t2 = t0 + float(opt[s])
            out.append(Slice(stage=s, stream="dp", name="parameter all-gather", start_s=t2,
                             end_s=t2 + float(comm.dp_after_s[s]), step=step, shard=shard_of[s]))
    return out
