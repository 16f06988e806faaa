"""Shards' per-rank compute times → replayed steps on the virtual clock → StepRecords and Slices.

Each step: the shards (Ray actors, or in-process stand-ins) return, over what they own, the compute seconds
of one microbatch of each pipeline chunk, the step's jitter of each (replica, stage) group they hold (its
slowest tensor/context-parallel rank) and their slow ranks (`replay.profile`); the engine merges these
disjoint answers, adds the in-layer collectives, executes
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
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from .. import chip
from .. import operators as opslib
from ..cluster import Cluster, rank_coords
from ..network import Group, collective_time, group_of
from ..network.collectives import concurrent_time
from .degraded import degraded_plan
from .result import CollectiveRecord, Slice, StepRecord
from .profile import MergedProfile, ShardProfile, merge_profiles
from .records import ComputeTally
from .schedule import Execution, execute, stage_programs

MAX_SLICES = 200_000  # keep the trace bounded: past this, only the last step's slices are kept
# Gradients are reduced in buckets as backward produces them; 25 MiB is PyTorch DDP's default bucket_cap_mb
# (an assumption for NxD's ZeRO-1 reduce-scatter buckets, which it does not document).
DP_BUCKET_BYTES = 25 * (1 << 20)


class ShardSet(Protocol):
    """What the engine needs from the shards (Ray actors or in-process)."""

    def profiles(self, step: int) -> list[ShardProfile]:
        """Per shard, in shard order: its compute for `step` over what it owns (`replay.profile`)."""

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
    dp: np.ndarray                # [stages] data-parallel reduction seconds if nothing overlapped it
    records: list[CollectiveRecord]
    dp_bucket_s: np.ndarray = field(default_factory=lambda: np.zeros(0))   # [chunks] seconds per gradient bucket
    dp_buckets: np.ndarray = field(default_factory=lambda: np.zeros(0, int))  # [chunks] buckets per chunk
    dp_after_s: np.ndarray = field(default_factory=lambda: np.zeros(0))    # [stages] after the optimizer (ZeRO-1 all-gather)
    fsdp_gather_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [chunks] ZeRO-3: one layer's weights
                                                                            # all-gathered (forward, and again backward)
    fsdp_scatter_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [chunks] ZeRO-3: one layer's gradients
                                                                             # reduce-scattered (backward)
    cp_block_fwd_s: float = 0.0   # one K/V block passed to the next context-parallel rank (forward)
    cp_block_bwd_s: float = 0.0   # K/V block and its gradient (backward)
    send_bwd_last: np.ndarray | None = None   # [chunks] gradient sends of the last microbatch, sharing links
                                              # with the overlapping gradient reduction
    dp_overlap: bool = True       # buckets start during the last backward (else after the pipeline ends)
    norm_s: float = 0.0           # all-reduce of the gradient norm over every rank, before the optimizer
    # `faults.degraded`: per data-parallel replica where a replica's groups sit on degraded instances
    # (None: every replica at the per-chunk values above)
    replica_tp_fwd: np.ndarray | None = None     # [replicas, chunks] as tp_fwd
    replica_tp_bwd: np.ndarray | None = None     # [replicas, chunks] as tp_bwd
    replica_send_fwd: np.ndarray | None = None   # [replicas, chunks] as send_fwd
    replica_send_bwd: np.ndarray | None = None   # [replicas, chunks] as send_bwd
    replica_send_bwd_last: np.ndarray | None = None   # [replicas, chunks] as send_bwd_last
    replica_cp_block_s: np.ndarray | None = None      # [replicas, 2] as (cp_block_fwd_s, cp_block_bwd_s)


def microbatches(scenario) -> int:
    t, p = scenario.training, scenario.parallelism
    return t.global_batch // (p.dp * t.micro_batch)


def _stage_sum(values: np.ndarray, pp: int) -> np.ndarray:
    """Sum a per-chunk array onto the stages that hold the chunks (chunk c on stage c % pp)."""
    out = np.zeros(pp)
    np.add.at(out, np.arange(values.size) % pp, values)
    return out


def plan_comm(scenario, cluster: Cluster, tp_hide_s: np.ndarray | None = None) -> CommPlan:
    """Cost every collective of a step once (they are the same for every replica and step), and, with
    degraded instances (`cluster.degraded`), once more on each degraded copy of the links (`degraded_plan`).

    `tp_hide_s`: one layer's backward seconds of the matmuls that hide tensor-parallel collectives
    (`ChunkTimes.tp_hide_bwd_s`, from a caller that priced the chunks already; None: priced here)."""
    if tp_hide_s is None and cluster.calibration.tp_overlap and scenario.parallelism.tp_comm_overlap \
            and cluster.layout.tp > 1:
        tp_hide_s = chip.tp_hide_seconds(scenario, cluster)
    comm = _plan_uniform(scenario, cluster, tp_hide_s)
    for part in cluster.degraded:     # degraded links do not change the chip: the same hiding matmuls
        comm = degraded_plan(comm, _plan_uniform(scenario, cluster.degraded_copy(part), tp_hide_s), cluster, part)
    return comm


def _plan_uniform(scenario, cluster: Cluster, tp_hide_s: np.ndarray | None) -> CommPlan:
    """`plan_comm` with every instance at the cluster's links."""
    t, layout, par = scenario.training, cluster.layout, scenario.parallelism
    v = opslib.shape_variables(scenario, layout)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    act = v["T"] * v["h"] * v["e"]                     # one microbatch's activation tensor, bytes
    # times full recomputation repeats the forward's collectives (a count, not seconds)
    recompute_repeats = 1.0 if t.recompute == "full" else 0.0
    layer_mbs = _stage_sum(layers, layout.pp)[0] * microbatches(scenario)   # layer-microbatches on stage 0
    records: list[CollectiveRecord] = []

    def priced(name: str, op: str, nbytes: float, group: Group, count: float) -> float:
        secs, alg = collective_time(cluster, op, nbytes, group, in_graph=True)
        if secs > 0 and count > 0:
            records.append(CollectiveRecord(group=name, op=op, ranks=group.ranks, instances=group.instances,
                                            bytes=int(nbytes), algorithm=alg, time_s=secs,
                                            count_per_step=int(round(count))))
        return secs

    # Megatron-LM, per layer (Korthikanti et al. 2022): without sequence parallelism two all-reduces forward
    # (the row-parallel outputs) and two backward (the column-parallel input gradients). With SP, per block
    # (attention, MLP): forward an all-gather before the column-parallel matmul and a reduce-scatter after the
    # row-parallel one; backward an all-gather of the output gradient (the reduce-scatter's transpose), the
    # reduce-scatter of the input gradient and a second all-gather of the block's input, which is not kept
    # from forward and which the weight gradient needs: 1.5 x the forward's traffic.
    tpg = group_of(cluster, layout.tp, 1)
    if par.sequence_parallel:
        ag = priced("tp", "all_gather", act, tpg, layer_mbs * (2 + 4 + 2 * recompute_repeats))
        rs = priced("tp", "reduce_scatter", act, tpg, layer_mbs * (2 + 2 + 2 * recompute_repeats))
        per_layer = 2 * (ag + rs)
        block_exposed, block_hideable = ag, ag + rs      # the output-gradient gather feeds the backward
    else:
        ar = priced("tp", "all_reduce", act, tpg, layer_mbs * (2 + 2 + 2 * recompute_repeats))
        per_layer = 2 * ar
        block_exposed, block_hideable = 0.0, ar
    # Backward: the hideable collectives of a block (the input gradient's reduction, the input's re-gather)
    # run on the collective-communication cores while TensorE computes that block's column-parallel matmul
    # backward, which does not wait for them (Megatron-LM overlaps them the same way; H18: the CC cores run
    # collectives in parallel to compute): only what outlasts the matmul is exposed. Forward collectives feed
    # the next matmul and stay exposed.
    if cluster.calibration.tp_overlap and par.tp_comm_overlap and layout.tp > 1:
        hide = np.asarray(tp_hide_s, dtype=float)
        hide = np.concatenate([hide, np.zeros(max(0, 2 - hide.size))])[:2]
        bwd_exposed = 2 * block_exposed + float(np.maximum(block_hideable - hide, 0.0).sum())
    else:
        bwd_exposed = 2 * (block_exposed + block_hideable)
    # context parallel: ring attention passes each rank's K/V block to the next cp rank, cp - 1 times per
    # layer, overlapped with the attention on the block in hand; backward passes K/V and their gradients.
    # The exposed part depends on the attention time, so the replay decides it per step.
    cp_fwd = cp_bwd = 0.0
    if layout.cp > 1:
        cpg = group_of(cluster, 2, layout.tp)
        kv = 2 * v["T"] * v["hkv"] * v["d"] * v["e"]
        n_blocks = layer_mbs * (layout.cp - 1)
        cp_fwd = priced("cp", "send_recv", kv, cpg, n_blocks * (1 + recompute_repeats))
        cp_bwd = priced("cp", "send_recv", 2 * kv, cpg, n_blocks)
    # mixture of experts: an all-to-all dispatches each token's hidden state to its top_k experts' ranks and
    # another combines the results, forward and (transposed) backward; the busiest rank moves imb x more
    moe = scenario.model.moe
    a2a = 0.0
    if moe is not None and par.ep > 1:
        epg = group_of(cluster, par.ep, layout.tp * layout.cp * layout.pp)
        a2a_bytes = v["T"] * moe.top_k * moe.imbalance * v["h"] * v["e"] / (layout.tp if par.sequence_parallel else 1)
        a2a = 2 * priced("ep", "all_to_all", a2a_bytes, epg, layer_mbs * (4 + 2 * recompute_repeats))
    tp_fwd = layers * (per_layer + a2a)
    tp_bwd = layers * (bwd_exposed + a2a + (per_layer + a2a) * recompute_repeats)

    # pipeline sends: chunk c lives on stage c % pp; placement is tp, cp, then pp inside a replica, so the
    # two stages' ranks share an instance, an UltraServer (NeuronLink Z links) or neither (EFA)
    send_bytes = act / layout.tp if par.sequence_parallel else act
    n_chunks = layers.size
    send_groups = [_send_group(cluster, c % layout.pp, (c + 1) % layout.pp) for c in range(n_chunks - 1)]
    send_fwd = np.zeros(n_chunks)
    for c, grp in enumerate(send_groups):
        send_fwd[c] = priced("pp", "send_recv", send_bytes, grp, 2 * microbatches(scenario) if c == 0 else 0)
    send_bwd = np.concatenate([[0.0], send_fwd[:-1]])  # chunk c's input gradient returns over the c-1 -> c link

    # data-parallel reduction per stage: ZeRO-1 reduce-scatters gradients and all-gathers updated weights
    g_bytes, w_bytes = opslib.grad_bytes(t), opslib.weight_bytes(t)
    # Expert parameters are replicated over dp / ep replicas only: their gradients reduce over that group.
    stride = layout.tp * layout.cp * layout.pp
    dpg = group_of(cluster, layout.dp, stride)
    xpg = group_of(cluster, layout.dp // par.ep, stride * par.ep)
    shard = opslib.sharding(t)
    reduce_op = "reduce_scatter" if shard.optimizer else "all_reduce"
    dense, expert = opslib.chunk_params_split(scenario.model, layout.tp, layers, layout.pp, par.ep)
    chunk_grad = (dense + expert) * g_bytes
    buckets = np.maximum(1, np.ceil(chunk_grad / DP_BUCKET_BYTES)).astype(int)
    # a bucket holds dense and expert gradients in the chunk's proportion; each part reduces over its group
    bucket_s = np.array([collective_time(cluster, reduce_op, gd / n, dpg, in_graph=True)[0] + collective_time(
        cluster, reduce_op, ge / n, xpg, in_graph=True)[0] for gd, ge, n in zip(dense * g_bytes, expert * g_bytes, buckets)])
    after = np.zeros(layout.pp)
    if layout.dp > 1 and not shard.weights:
        priced("dp", reduce_op, dense[0] * g_bytes / buckets[0], dpg, buckets[0])   # the table: chunk 0's buckets
        if expert.any():
            priced("dp-expert", reduce_op, expert[0] * g_bytes / buckets[0], xpg, buckets[0])
        if shard.optimizer:
            stage_dense, stage_expert = _stage_sum(dense, layout.pp), _stage_sum(expert, layout.pp)
            for s in range(layout.pp):
                n = 1 if s == 0 else 0
                after[s] = priced("dp", "all_gather", stage_dense[s] * w_bytes, dpg, n) + priced(
                    "dp-expert", "all_gather", stage_expert[s] * w_bytes, xpg, n)
    # ZeRO-3 (FSDP): no bucketed reduction after backward and no gather after the optimizer; instead, per
    # layer and microbatch, the layer's weights are all-gathered before forward and again before backward and
    # its gradients reduce-scattered (PyTorch FSDP with reshard_after_forward; XLA's FSDP sharding does the
    # same). A chunk's parameters are spread evenly over its layers (its embedding or head included).
    # With `parallelism.fsdp_schedule: compiler` (the default) the gradients are not reduce-scattered per layer:
    # the Neuron compiler schedules FSDP reduce-scatters at the end of the backward pass, just before the
    # optimizer, and its combiners merge them (H21), so they are the ZeRO-1 buckets above, once per step after
    # the last backward; only the per-layer weight gathers remain.
    fsdp_gather, fsdp_scatter = np.zeros(n_chunks), np.zeros(n_chunks)
    if shard.weights:
        layerwise = par.fsdp_schedule == "layerwise"
        unit_d, unit_e = dense / layers, expert / layers
        fsdp_gather = np.array([collective_time(cluster, "all_gather", d * w_bytes, dpg, in_graph=True)[0] + collective_time(
            cluster, "all_gather", e * w_bytes, xpg, in_graph=True)[0] for d, e in zip(unit_d, unit_e)])
        if layerwise:
            buckets, bucket_s = np.zeros(0, int), np.zeros(0)
            fsdp_scatter = np.array([collective_time(cluster, "reduce_scatter", d * g_bytes, dpg, in_graph=True)[0] + collective_time(
                cluster, "reduce_scatter", e * g_bytes, xpg, in_graph=True)[0] for d, e in zip(unit_d, unit_e)])
        if layout.dp > 1:   # the table: chunk 0's layers
            priced("dp", "all_gather", unit_d[0] * w_bytes, dpg, 2 * layer_mbs)
            if layerwise:
                priced("dp", "reduce_scatter", unit_d[0] * g_bytes, dpg, layer_mbs)
            else:
                priced("dp", "reduce_scatter", dense[0] * g_bytes / buckets[0], dpg, buckets[0])
            if expert.any():
                priced("dp-expert", "all_gather", unit_e[0] * w_bytes, xpg, 2 * layer_mbs)
                if layerwise:
                    priced("dp-expert", "reduce_scatter", unit_e[0] * g_bytes, xpg, layer_mbs)
                else:
                    priced("dp-expert", "reduce_scatter", expert[0] * g_bytes / buckets[0], xpg, buckets[0])
    dp = _stage_sum(bucket_s * buckets, layout.pp) + after + microbatches(scenario) * _stage_sum(
        layers * (2 * fsdp_gather + fsdp_scatter), layout.pp)
    # a gradient send leaving a stage's last backward runs while that stage's buckets are reduced: both
    # share the links and NICs (max-min fair), so it takes longer than alone
    send_bwd_last = send_bwd.copy()
    if layout.dp > 1 and buckets.size:
        for c in range(1, n_chunks):
            if send_bwd[c] > 0:
                send_bwd_last[c] = concurrent_time(cluster, [
                    ("send_recv", send_bytes, send_groups[c - 1]),
                    (reduce_op, dense[c] * g_bytes / buckets[c], dpg)], in_graph=True)[0]
    # gradient clipping by global norm: every rank's partial sum of squares is all-reduced (one fp32 number)
    norm_s = 0.0
    if cluster.calibration.step_costs and cluster.ranks > 1:
        norm_s = priced("norm", "all_reduce", 4, group_of(cluster, cluster.ranks, 1), 1)
    return CommPlan(tp_fwd=tp_fwd, tp_bwd=tp_bwd, send_fwd=send_fwd, send_bwd=send_bwd, dp=dp, records=records,
                    dp_overlap=cluster.calibration.dp_overlap, norm_s=norm_s,
                    dp_bucket_s=bucket_s, dp_buckets=buckets, dp_after_s=after,
                    fsdp_gather_s=fsdp_gather, fsdp_scatter_s=fsdp_scatter, cp_block_fwd_s=cp_fwd,
                    cp_block_bwd_s=cp_bwd, send_bwd_last=send_bwd_last)


def _send_group(cluster: Cluster, a: int, b: int) -> Group:
    """The two members of a send from stage a to stage b of replica 0, placed where they sit: the first
    ranks of the two stages (placement is tp, cp, then pp inside a replica). The network model routes
    it over the chip, NeuronLink, the UltraServer's Z links or EFA accordingly."""
    stride = cluster.layout.tp * cluster.layout.cp
    lo, hi = sorted((a * stride, b * stride))
    rpi = cluster.ranks_per_instance
    if lo // rpi == hi // rpi:
        return Group(per_instance=2, instances=1, stride=hi - lo, first_rank=lo)
    return Group(per_instance=1, instances=2, instance_step=hi - lo, first_rank=lo)


def gradient_reduction(ex: Execution, comm: CommPlan, pp: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """When each stage's bucketed gradient reduction ends, overlapped with its last backward.

    A chunk's gradients become final, bucket by bucket, during its last microbatch's backward (evenly over
    that backward); a bucket's collective can start when every replica has it and the stage's previous
    bucket is through (one queue per stage). Without `comm.dp_overlap` every bucket waits for the stage's
    pipeline to end on every replica (the XLA stacks reduce in the optimizer's graph). With t_i the ready time and d the bucket time, the queue
    ends at D_k + max_{i<=k}(t_i - D_{i-1}) (D the running sum of d), computed with one accumulate.

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


@dataclass(frozen=True)
class ComputeProfile:
    """One step's compute, per data-parallel replica and pipeline chunk (slowest tp/cp rank of each)."""

    fwd: np.ndarray          # [dp, chunks] seconds per microbatch
    bwd: np.ndarray          # [dp, chunks]
    opt: np.ndarray          # [stages] optimizer seconds (slowest replica)
    attn_fwd: float          # attention core of one layer and microbatch, seconds (context-parallel overlap)
    attn_bwd: float
    slowest_rank: int        # global rank of the slowest straggler (-1 when there is none)


def combine_profiles(profiles: Sequence[ShardProfile] | MergedProfile, layout,
                     with_stragglers: bool = True) -> ComputeProfile:
    """Shards' profiles → per replica and chunk times. O(replicas x chunks + slow ranks), not O(ranks).

    A tensor/context-parallel group runs at the pace of its slowest rank: the shards' per-group jitter
    (log-normal per rank, its group maximum drawn in the shard that holds the group from the (seed, step)
    stream at the group's position) scales its chunk times, and a straggler raises them to base x its
    factor when that is more.
    """
    merged = profiles if isinstance(profiles, MergedProfile) else merge_profiles(profiles, layout.dp * layout.pp)
    pp, v = layout.pp, layout.virtual_stages
    speed = merged.group_speed.reshape(layout.dp, pp).copy()
    slow, factor = merged.slow_ranks, merged.slow_factors
    slowest = -1
    if slow.size and with_stragglers:
        c = rank_coords(layout, slow)
        np.maximum.at(speed, (c["dp"], c["pp"]), factor)
        slowest = int(slow[np.argmax(factor)])
    chunk_speed = np.tile(speed, (1, v))                        # chunk j*pp + s takes stage s's speed
    return ComputeProfile(fwd=merged.forward_s[None, :] * chunk_speed,
                          bwd=merged.backward_s[None, :] * chunk_speed, opt=merged.optimizer_s * speed.max(axis=0),
                          attn_fwd=merged.attention_fwd_s, attn_bwd=merged.attention_bwd_s, slowest_rank=slowest)


def cp_exposed(comm: CommPlan, prof: ComputeProfile, cp: int) -> tuple[float, float]:
    """Seconds per layer and microbatch that the context-parallel ring adds: cp - 1 block passes, each
    hidden behind the attention on the block in hand (attention / cp) where it is shorter. With degraded
    instances (`comm.replica_cp_block_s`), [replicas, 1] arrays."""
    if cp <= 1:
        return 0.0, 0.0
    if comm.replica_cp_block_s is not None:
        f, b = comm.replica_cp_block_s[:, :1], comm.replica_cp_block_s[:, 1:]
        return (cp - 1) * np.maximum(0.0, f - prof.attn_fwd / cp), (cp - 1) * np.maximum(0.0, b - prof.attn_bwd / cp)
    return ((cp - 1) * max(0.0, comm.cp_block_fwd_s - prof.attn_fwd / cp),
            (cp - 1) * max(0.0, comm.cp_block_bwd_s - prof.attn_bwd / cp))


def _replica_comm(comm: CommPlan, dp: int) -> tuple[np.ndarray, ...]:
    """(tp_fwd, tp_bwd [replicas, chunks], send_fwd, send_bwd, send_bwd_last [chunks], or [replicas, chunks]
    with degraded instances): what each replica's pipeline pays."""
    n = comm.tp_fwd.size
    last = comm.send_bwd_last
    if comm.replica_tp_fwd is None:
        return (np.broadcast_to(comm.tp_fwd, (dp, n)), np.broadcast_to(comm.tp_bwd, (dp, n)), comm.send_fwd,
                comm.send_bwd, last)
    return (comm.replica_tp_fwd, comm.replica_tp_bwd, comm.replica_send_fwd, comm.replica_send_bwd,
            comm.replica_send_bwd_last if last is not None else None)


def fsdp_exposed(comm: CommPlan, fwd: np.ndarray, bwd: np.ndarray, layers: np.ndarray) -> tuple[np.ndarray,
                                                                                                np.ndarray]:
    """ZeRO-3 communication seconds a microbatch's forward and backward of each chunk expose, [replicas, chunks].

    A chunk of L layers, each computing cf (forward) or cb (backward) seconds, gathers g and reduce-scatters
    r seconds per layer on one queue. Forward: the first gather is exposed, every later one is prefetched
    while the previous layer computes: g + (L - 1) max(0, g - cf). Backward: the first gather is exposed;
    while the first layer computes the queue gathers the next layer's weights, while the last computes it
    reduce-scatters the previous layer's gradients, in between it does both; the last reduce-scatter is
    exposed: g + r + max(0, g - cb) + max(0, r - cb) + (L - 2) max(0, g + r - cb) for L >= 2, g + r for L = 1.

    Args:
        comm: from `plan_comm` (`fsdp_gather_s`, `fsdp_scatter_s` per chunk; empty: not ZeRO-3).
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


def replay_steps(scenario, cluster: Cluster, shards: ShardSet, comm: CommPlan, programs: list,
                 on_step: Callable[[StepRecord], None] | None = None, step_costs: StepCosts | None = None,
                 tally: ComputeTally | None = None) -> tuple[list[StepRecord], list[Slice]]:
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
        tally: given each step's merged profile (the per-rank compute of the result, `ComputeTally`).

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
        merged = merge_profiles(shards.profiles(step), layout.dp * layout.pp)
        if tally is not None:
            tally.add(step, merged)
        prof = combine_profiles(merged, layout)
        fc, bc = prof.fwd, prof.bwd
        cp_f, cp_b = cp_exposed(comm, prof, layout.cp)
        rtp_f, rtp_b, send_f, send_b, send_last = _replica_comm(comm, layout.dp)
        tp_f, tp_b = rtp_f + layers * cp_f, rtp_b + layers * cp_b                   # [replicas, chunks]
        fs_f, fs_b = fsdp_exposed(comm, fc, bc, layers)
        fwd, bwd = fc + tp_f + fs_f, bc + tp_b + fs_b
        last = {("B", m - 1, c): send_last[..., c] for c in range(fc.shape[1])} \
            if send_last is not None else None
        ex = execute(programs, fwd, bwd, send_f, send_b, last)
        ex_free_sends = execute(programs, fwd, bwd, np.zeros_like(send_f), np.zeros_like(send_b))
        opt = prof.opt                                                                    # [pp]
        pipe_end = ex.stage_end.max(axis=0)                                               # [pp]
        rs_end, dp_hidden = gradient_reduction(ex, comm, layout.pp, m)
        reduce_start = np.maximum(pipe_end, rs_end) + comm.norm_s
        done = reduce_start + opt + comm.dp_after_s
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
            base = combine_profiles(merged, layout, with_stragglers=False)
            bf_f, bf_b = fsdp_exposed(comm, base.fwd, base.bwd, layers)
            ex_b = execute(programs, base.fwd + tp_f + bf_f, base.bwd + tp_b + bf_b, send_f, send_b, last)
            end_b = np.maximum(ex_b.stage_end.max(axis=0), gradient_reduction(ex_b, comm, layout.pp, m)[0]) + comm.norm_s
            straggle = float(done.max() - (end_b + base.opt + comm.dp_after_s).max())
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
    firsts = [(replica * lay.pp + s) * lay.tp * lay.cp for s in range(lay.pp)]
    bounds = np.array([sh.first_rank for sh in cluster.shards])
    return [int(np.searchsorted(bounds, r, side="right") - 1) for r in firsts]


def _slices(ex: Execution, d: int, comm: CommPlan, rs_end: np.ndarray, reduce_start: np.ndarray, opt: np.ndarray,
            clock: float, step: int, shard_of: Sequence[int], layout) -> list[Slice]:
    """Timeline of replica d: every forward/backward, each stage's gradient reduction (its busy span
    ending when the last bucket is through), optimizer and parameter all-gather."""
    out = []
    reduce_s = _stage_sum(comm.dp_bucket_s * comm.dp_buckets, layout.pp) if comm.dp_buckets.size else np.zeros(
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
