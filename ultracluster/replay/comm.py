"""A step's collectives → their seconds: the step's comm, one implementation for `run` and `comm`.

`step_comm` times one layout's comm (`run`): every collective of a step once (they are the same for every
replica and step), recorded for the report, and once more on each degraded copy of the links. It is composed of
the pieces below, each a function of a few numbers and a `CommTimes` (how a collective is timed): in-layer
collectives (`layer_comm`), pipeline sends (`pipeline_sends`, `last_sends`), the data-parallel reduction and
ZeRO traffic (`dp_comm`), the gradient norm (`norm_seconds`), assembled by `assemble`. The planner
(`layouts.batched_parts.batched_comm`) composes the same pieces for thousands of layouts, with its collectives memoized
and each piece memoized by what it depends on; nothing here is written twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import operators as opslib
from ..cluster import Cluster, group_ranks, replica_ranks, stage_sum
from ..network import Group, collective_time, group_of, placed_alike
from ..network.collectives import concurrent_time
from ..stacks import STACKS
from .degraded import degraded_comm
from .result import CollectiveRecord
from ..step.counts import scenario_microbatches as microbatches   # the one rule (`step.counts`)

# Gradients are reduced in buckets as backward produces them; 25 MiB is PyTorch DDP's default bucket_cap_mb
# (an assumption for NxD's ZeRO-1 reduce-scatter buckets, which it does not document).
DP_BUCKET_BYTES = 25 * (1 << 20)


@dataclass(frozen=True)
class StepComm:
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
    serial_exchanges: bool = False   # each send on both stages' timelines (`serial_exchanges`); [rows] in a batch
    norm_s: float = 0.0           # all-reduce of the gradient norm over every rank, before the optimizer
    # `faults.degraded`: per data-parallel replica where a replica's groups sit on degraded instances
    # (None: every replica at the per-chunk values above)
    replica_tp_fwd: np.ndarray | None = None     # [replicas, chunks] as tp_fwd
    replica_tp_bwd: np.ndarray | None = None     # [replicas, chunks] as tp_bwd
    replica_send_fwd: np.ndarray | None = None   # [replicas, chunks] as send_fwd
    replica_send_bwd: np.ndarray | None = None   # [replicas, chunks] as send_bwd
    replica_send_bwd_last: np.ndarray | None = None   # [replicas, chunks] as send_bwd_last
    replica_cp_block_s: np.ndarray | None = None      # [replicas, 2] as (cp_block_fwd_s, cp_block_bwd_s)


class CommTimes:
    """How a comm times its collectives: `collective_time` as issued from the step's graph; a collective timed
    with a name and a count per step is recorded for the report (`records`; None: records are not kept, and the
    collectives timed only for the report's table are skipped)."""

    shares_links = True     # the last gradient sends share links with the first buckets (`last_sends`)

    def __init__(self, cluster: Cluster, keep_records: bool = True):
        self.cluster = cluster
        self.records: list[CollectiveRecord] | None = [] if keep_records else None

    def __call__(self, op: str, nbytes: float, group: Group, name: str | None = None, count: float = 0) -> float:
        secs, alg = collective_time(self.cluster, op, nbytes, group, in_graph=True)
        if self.records is not None and name and secs > 0 and count > 0:
            self.records.append(CollectiveRecord(group=name, op=op, ranks=group.ranks, instances=group.instances,
                                                 bytes=int(nbytes), algorithm=alg, time_s=secs,
                                                 count_per_step=int(round(count))))
        return secs

    def many(self, op: str, nbytes: np.ndarray, group: Group) -> np.ndarray:
        """Seconds of `op` over `group` at each of the buffer sizes `nbytes` (an array; not recorded), each
        distinct size timed once (the chunks of a stage share their sizes)."""
        sizes = np.asarray(nbytes, dtype=float)
        seen: dict[float, float] = {}
        for b in sizes.ravel().tolist():
            if b not in seen:
                seen[b] = self(op, b, group)
        out = np.array([seen[b] for b in sizes.ravel().tolist()], dtype=float)
        # a times with a settings axis (`layouts.batched_parts`' one layout under many calibrations): [settings, ...]
        return out.reshape(sizes.shape) if out.ndim == 1 else np.moveaxis(out, 1, 0).reshape((-1,) + sizes.shape)

    def shared(self, transfers: tuple) -> float:
        """Seconds of the first of `transfers` ((op, bytes, group), ...) run at once, sharing links."""
        return float(concurrent_time(self.cluster, list(transfers), in_graph=True)[0])


def recomputed_collectives(recompute):
    """(share of a layer's forward tensor-parallel collectives, share of its expert all-to-alls) that the backward's
    recomputation runs again, by `operators.recompute_mode` (a string, or [rows] of them): all under full
    recomputation; with the MLP block checkpointed ("selective_mlp": NxD's seq-8192 pipeline scripts checkpoint
    LlamaMLP, whose column- and row-parallel linears gather and reduce-scatter in their forward) that block's half
    and its all-to-alls; none otherwise (the core attention recomputed under "selective" issues none)."""
    full, mlp = np.asarray(recompute) == "full", np.asarray(recompute) == "selective_mlp"
    return np.where(full, 1.0, np.where(mlp, 0.5, 0.0))[()], np.where(full | mlp, 1.0, 0.0)[()]


def layer_comm(times: CommTimes, cluster: Cluster, tp: int, cp: int, pp: int, ep: int, sp: bool, v: dict, moe,
               recompute: str, overlap: bool, hide: np.ndarray | None,
               layer_mbs: float = 0) -> tuple[float, float, float, float, float]:
    """One layer's in-layer collectives per microbatch: (forward seconds, exposed backward seconds without the
    recomputed forward's, context-parallel K/V block forward and backward, expert all-to-alls).

    Args:
        v: the shape variables (`operators.shape_variables`: T, h, e, hkv, d).
        recompute: `operators.recompute_mode` (what the records count again: `recomputed_collectives`).
        overlap: the hideable backward collectives run behind `hide` (one layer's backward seconds of the
            matmuls that hide them, `ChunkTimes.tp_hide_bwd_s`).
        layer_mbs: layer-microbatches of stage 0 per step (the records' counts).
    """
    act = v["T"] * v["h"] * v["e"]                     # one microbatch's activation tensor, bytes
    again, a2a_again = (float(x) for x in recomputed_collectives(recompute))   # (the records' counts)
    # Megatron-LM, per layer (Korthikanti et al. 2022): without sequence parallelism two all-reduces forward
    # (the row-parallel outputs) and two backward (the column-parallel input gradients). With SP, per block
    # (attention, MLP): forward an all-gather before the column-parallel matmul and a reduce-scatter after the
    # row-parallel one; backward an all-gather of the output gradient (the reduce-scatter's transpose), the
    # reduce-scatter of the input gradient and a second all-gather of the block's input, which is not kept
    # from forward and which the weight gradient needs: 1.5 x the forward's traffic.
    tpg = group_of(cluster, tp, 1)
    if sp:
        ag = times("all_gather", act, tpg, "tp", layer_mbs * (2 + 4 + 2 * again))
        rs = times("reduce_scatter", act, tpg, "tp", layer_mbs * (2 + 2 + 2 * again))
        per_layer = 2 * (ag + rs)
        block_exposed, block_hideable = ag, ag + rs      # the output-gradient gather feeds the backward
    else:
        ar = times("all_reduce", act, tpg, "tp", layer_mbs * (2 + 2 + 2 * again))
        per_layer = 2 * ar
        block_exposed, block_hideable = 0.0, ar
    # Backward: the hideable collectives of a block (the input gradient's reduction, the input's re-gather)
    # run on the collective-communication cores while TensorE computes that block's column-parallel matmul
    # backward, which does not wait for them (Megatron-LM overlaps them the same way; H18: the CC cores run
    # collectives in parallel to compute): only what outlasts the matmul is exposed. Forward collectives feed
    # the next matmul and stay exposed.
    if overlap:
        h = np.asarray(hide, dtype=float)      # [2], or [settings, 2] with a settings axis (`CommTimes.many`)
        h = np.concatenate([h, np.zeros(h.shape[:-1] + (max(0, 2 - h.shape[-1]),))], axis=-1)[..., :2]
        exposed = np.maximum(np.asarray(block_hideable)[..., None] - h, 0.0).sum(axis=-1)
        bwd_exposed = 2 * block_exposed + (float(exposed) if exposed.ndim == 0 else exposed)
    else:
        bwd_exposed = 2 * (block_exposed + block_hideable)
    # context parallel: ring attention passes each rank's K/V block to the next cp rank, cp - 1 times per
    # layer, overlapped with the attention on the block in hand; backward passes K/V and their gradients.
    # Every rank passes at once and takes the next block from its predecessor, so the ring steps at the pace
    # of its slowest hop (`ring_hops`: across instances when the ring spans several). The exposed part depends
    # on the attention time, so the replay decides it per step.
    cp_fwd = cp_bwd = 0.0
    if cp > 1:
        hops = ring_hops(cluster, tp, cp)
        kv = 2 * v["T"] * v["hkv"] * v["d"] * v["e"]
        n_blocks = layer_mbs * (cp - 1)
        cp_fwd = _slowest_hop(times, hops, kv, n_blocks * (2 if recompute == "full" else 1))
        cp_bwd = _slowest_hop(times, hops, 2 * kv, n_blocks)
    # mixture of experts: an all-to-all dispatches each token's hidden state to its top_k experts' ranks and
    # another combines the results, forward and (transposed) backward; the busiest rank moves imb x more
    a2a = 0.0
    if moe is not None and ep > 1:
        epg = group_of(cluster, ep, replica_ranks(tp, cp, pp))
        a2a_bytes = v["T"] * moe.top_k * moe.imbalance * v["h"] * v["e"] / (tp if sp else 1)
        a2a = 2 * times("all_to_all", a2a_bytes, epg, "ep", layer_mbs * (4 + 2 * a2a_again))
    return per_layer, bwd_exposed, cp_fwd, cp_bwd, a2a


def pipeline_sends(times: CommTimes, cluster: Cluster, send_bytes: float, chunks: int,
                   m: int = 0, pairs: tuple | None = None) -> tuple[tuple[Group, ...], np.ndarray]:
    """(send groups, [chunks] seconds of the activation send from chunk c to c + 1); `cluster.layout` places the
    stages, `m` microbatches count the records; `pairs`: `send_pairs`' (else found here).

    Chunk c lives on stage c % pp; placement is tp, cp, then pp inside a replica, so the two stages' ranks share
    an instance, an UltraServer (NeuronLink Z links) or neither (EFA)."""
    pp = cluster.layout.pp
    # chunk c sends from stage c % pp: the pp stage pairs' groups, each pair placed alike timed once (the other
    # chunks' sends, counted 0 times in the records, are the same collectives)
    pairs, alike = pairs or send_pairs(times, cluster, chunks)
    seconds: list[float] = []
    for s, grp in enumerate(pairs):
        seconds.append(times("send_recv", send_bytes, grp, "pp", 2 * m if s == 0 else 0) if alike[s] == s
                       else seconds[alike[s]])
    groups = tuple(pairs[c % pp] for c in range(chunks - 1))
    send_fwd = np.zeros(np.shape(seconds[0] if seconds else 0.0) + (chunks,))     # ([settings,] chunks)
    if chunks > 1:
        send_fwd[..., :chunks - 1] = np.stack([seconds[c % pp] for c in range(chunks - 1)], axis=-1)
    return groups, send_fwd


def send_pairs(times: CommTimes, cluster: Cluster, chunks: int) -> tuple[tuple[Group, ...], tuple[int, ...]]:
    """The send groups of the pipeline's stage pairs (s, s + 1), and for each the first pair placed alike on the
    cluster its collectives are timed on (`network.placed_alike`: the same seconds), whose seconds it takes."""
    pp = cluster.layout.pp
    pairs = tuple(send_group(cluster, s, (s + 1) % pp) for s in range(min(pp, chunks - 1)))
    first: dict[Group, int] = {}
    return pairs, tuple(first.setdefault(placed_alike(times.cluster, g), s) for s, g in enumerate(pairs))


def dp_comm(times: CommTimes, cluster: Cluster, dense: np.ndarray, expert: np.ndarray, layers: np.ndarray,
            training, dp: int, ep: int, stride: int, pp: int, layerwise: bool,
            layer_mbs: float = 0) -> tuple[np.ndarray, ...]:
    """The data-parallel reduction: (buckets [chunks], seconds per bucket [chunks], the ZeRO-1 all-gather after
    the optimizer [stages], ZeRO-3 per-layer gathers and reduce-scatters [chunks]).

    Args:
        dense, expert: [chunks] parameters per rank (`operators.chunk_params_split`); layers: [chunks].
        stride: tp x cp x pp (ranks between data-parallel replicas); layerwise: `parallelism.fsdp_schedule`.
    """
    g_bytes, w_bytes = opslib.grad_bytes(training), opslib.weight_bytes(training)
    # Expert parameters are replicated over dp / ep replicas only: their gradients reduce over that group.
    dpg = group_of(cluster, dp, stride)
    xpg = group_of(cluster, dp // ep, stride * ep)
    shard = opslib.sharding(training)
    reduce_op = "reduce_scatter" if shard.optimizer else "all_reduce"
    table = times.records is not None and dp > 1     # what the report's table adds: chunk 0's collectives
    buckets = np.maximum(1, np.ceil((dense + expert) * g_bytes / DP_BUCKET_BYTES)).astype(int)
    # a bucket holds dense and expert gradients in the chunk's proportion; each part reduces over its group
    bucket_s = times.many(reduce_op, dense * g_bytes / buckets, dpg) + times.many(reduce_op, expert * g_bytes / buckets,
                                                                                 xpg)
    after = np.zeros(pp)
    gather, scatter = np.zeros(layers.size), np.zeros(layers.size)
    if not shard.weights:
        if table:
            times(reduce_op, dense[0] * g_bytes / buckets[0], dpg, "dp", buckets[0])
            if expert.any():
                times(reduce_op, expert[0] * g_bytes / buckets[0], xpg, "dp-expert", buckets[0])
        if dp > 1 and shard.optimizer:          # ZeRO-1 all-gathers the updated weights
            stage_dense, stage_expert = stage_sum(dense, pp), stage_sum(expert, pp)
            if table:                           # stage 0's, once per step
                times("all_gather", stage_dense[0] * w_bytes, dpg, "dp", 1)
                times("all_gather", stage_expert[0] * w_bytes, xpg, "dp-expert", 1)
            after = times.many("all_gather", stage_dense * w_bytes, dpg) + times.many("all_gather",
                                                                                      stage_expert * w_bytes, xpg)
        return buckets, bucket_s, after, gather, scatter
    # ZeRO-3 (FSDP): no bucketed reduction after backward and no gather after the optimizer; instead, per
    # layer and microbatch, the layer's weights are all-gathered before forward and again before backward and
    # its gradients reduce-scattered (PyTorch FSDP with reshard_after_forward; XLA's FSDP sharding does the
    # same). A chunk's parameters are spread evenly over its layers (its embedding or head included).
    # With `parallelism.fsdp_schedule: compiler` (the default) the gradients are not reduce-scattered per layer:
    # the Neuron compiler schedules FSDP reduce-scatters at the end of the backward pass, just before the
    # optimizer, and its combiners merge them (H21), so they are the ZeRO-1 buckets above, once per step after
    # the last backward; only the per-layer weight gathers remain.
    unit_d, unit_e = dense / layers, expert / layers
    gather = times.many("all_gather", unit_d * w_bytes, dpg) + times.many("all_gather", unit_e * w_bytes, xpg)
    if layerwise:
        scatter = times.many("reduce_scatter", unit_d * g_bytes, dpg) + times.many("reduce_scatter", unit_e * g_bytes,
                                                                                   xpg)
    if table:   # chunk 0's layers
        times("all_gather", unit_d[0] * w_bytes, dpg, "dp", 2 * layer_mbs)
        if layerwise:
            times("reduce_scatter", unit_d[0] * g_bytes, dpg, "dp", layer_mbs)
        else:
            times("reduce_scatter", dense[0] * g_bytes / buckets[0], dpg, "dp", buckets[0])
        if expert.any():
            times("all_gather", unit_e[0] * w_bytes, xpg, "dp-expert", 2 * layer_mbs)
            if layerwise:
                times("reduce_scatter", unit_e[0] * g_bytes, xpg, "dp-expert", layer_mbs)
            else:
                times("reduce_scatter", expert[0] * g_bytes / buckets[0], xpg, "dp-expert", buckets[0])
    if layerwise:
        return np.zeros(0, int), np.zeros(0), after, gather, scatter
    return buckets, bucket_s, after, gather, scatter


def last_sends(times: CommTimes, cluster: Cluster, send_fwd: np.ndarray, send_bytes: float, groups: tuple,
               dense: np.ndarray, training, dp: int, stride: int, buckets: np.ndarray) -> np.ndarray:
    """[chunks] the last microbatch's gradient sends: a send leaving a stage's last backward runs while that
    stage's buckets are reduced; both share the links and NICs (max-min fair), so it takes longer than alone.
    Without `times.shares_links` they are timed alone (`training` is then not read)."""
    send_bwd = gradient_sends(send_fwd)
    last = send_bwd.copy()
    if dp > 1 and buckets.size and times.shares_links:
        dpg = group_of(cluster, dp, stride)
        reduce_op = "reduce_scatter" if opslib.sharding(training).optimizer else "all_reduce"
        g_bytes = opslib.grad_bytes(training)
        for c in range(1, send_bwd.shape[-1]):
            if np.any(send_bwd[..., c] > 0):       # (with a settings axis: every setting's, or none)
                last[..., c] = times.shared((("send_recv", float(send_bytes), groups[c - 1]),
                                        (reduce_op, float(dense[c] * g_bytes / buckets[c]), dpg)))
    return last


def norm_seconds(times: CommTimes, cluster: Cluster) -> float:
    """Gradient clipping by global norm: every rank's partial sum of squares is all-reduced (one fp32 number)."""
    if cluster.calibration.step_costs and cluster.ranks > 1:
        return times("all_reduce", 4, group_of(cluster, cluster.ranks, 1), "norm", 1)
    return 0.0


def gradient_sends(send_fwd: np.ndarray) -> np.ndarray:
    """[..., chunks] gradient send seconds: chunk c's input gradient returns over the c-1 -> c link."""
    send_fwd = np.asarray(send_fwd, dtype=float)
    return np.concatenate([np.zeros(send_fwd.shape[:-1] + (1,)), send_fwd[..., :-1]], axis=-1)


def assemble(layers: np.ndarray, layer: tuple, send_fwd: np.ndarray, send_bwd_last: np.ndarray, dp_parts: tuple,
             norm_s, recompute, dp_overlap, records: list | None = None,
             dp_total: np.ndarray | None = None, serial=False) -> StepComm:
    """The StepComm of one layout from its pieces (`layer_comm`, `pipeline_sends`, `last_sends`, `dp_comm`).

    Over a row axis (the planner's batch) the same: `layer`'s five and `norm_s`, `recompute`, `dp_overlap`
    as [rows] arrays, the per-chunk and per-stage pieces as [rows, chunks] and [rows, stages]; every field of
    the StepComm then has that leading axis; `serial`: `serial_exchanges`, [rows] over a row axis."""
    per_layer, bwd_exposed, cp_fwd, cp_bwd, a2a = layer
    again, a2a_again = recomputed_collectives(recompute)
    col = lambda x: np.asarray(x, dtype=float)[..., None]       # noqa: E731  (a row's figure along its chunks)
    buckets, bucket_s, after, gather, scatter = dp_parts
    return StepComm(tp_fwd=layers * col(per_layer + a2a), tp_bwd=layers * col(bwd_exposed + a2a + per_layer * again + a2a * a2a_again),
                    send_fwd=send_fwd, send_bwd=gradient_sends(send_fwd),
                    dp=dp_total if dp_total is not None else np.zeros(np.shape(after)), records=records or [],
                    dp_overlap=dp_overlap, norm_s=norm_s, dp_bucket_s=bucket_s, dp_buckets=buckets,
                    dp_after_s=after, fsdp_gather_s=gather, fsdp_scatter_s=scatter, cp_block_fwd_s=cp_fwd,
                    cp_block_bwd_s=cp_bwd, send_bwd_last=send_bwd_last, serial_exchanges=serial)


def step_comm(scenario, cluster: Cluster, tp_hide_s: np.ndarray) -> StepComm:
    """Cost every collective of a step once (they are the same for every replica and step), and, with
    degraded instances (`cluster.degraded`), once more on each degraded copy of the links (`degraded_comm`).

    `tp_hide_s`: one layer's backward seconds of the matmuls that hide tensor-parallel collectives
    (`ChunkTimes.tp_hide_bwd_s`: in a run, what the shards reported, `replay.shard_steps.merge_states`); the comm
    times no chip of its own."""
    comm = _comm_uniform(scenario, cluster, tp_hide_s)
    for part in cluster.degraded:     # degraded links do not change the chip: the same hiding matmuls
        comm = degraded_comm(comm, _comm_uniform(scenario, cluster.degraded_copy(part), tp_hide_s), cluster, part)
    return comm


def serial_exchanges(stack: str, calibration) -> bool:
    """Whether a stack's pipeline exchanges run on both stages' timelines (`Calibration.serial_exchanges`, the
    stack's `Engine.serial_exchanges`)."""
    return bool(calibration.serial_exchanges and STACKS[stack].engine.serial_exchanges)


def hides_tp(calibration, parallelism, tp: int) -> bool:
    """Whether the backward's hideable tensor-parallel collectives run behind the matmuls (`layer_comm`)."""
    return bool(calibration.tp_overlap and parallelism.tp_comm_overlap and tp > 1)


def activation_send_bytes(v: dict, tp: int, sp: bool) -> float:
    """Bytes of one microbatch's activation sent to the next pipeline stage (sequence parallel: 1 / tp of it)."""
    return v["T"] * v["h"] * v["e"] / (tp if sp else 1)


def _comm_uniform(scenario, cluster: Cluster, tp_hide_s: np.ndarray | None) -> StepComm:
    """`step_comm` with every instance at the cluster's links: the pieces, timed and recorded."""
    t, layout, par = scenario.training, cluster.layout, scenario.parallelism
    v = opslib.shape_variables(scenario, layout)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    m = microbatches(scenario)
    layer_mbs = stage_sum(layers, layout.pp)[0] * m   # layer-microbatches on stage 0
    mode = opslib.recompute_mode(t)
    times = CommTimes(cluster)
    layer = layer_comm(times, cluster, layout.tp, layout.cp, layout.pp, par.ep, par.sequence_parallel, v,
                       scenario.model.moe, mode, hides_tp(cluster.calibration, par, layout.tp), tp_hide_s, layer_mbs)
    sent = activation_send_bytes(v, layout.tp, par.sequence_parallel)
    groups, send_fwd = pipeline_sends(times, cluster, sent, layers.size, m)
    dense, expert = opslib.chunk_params_split(scenario.model, layout.tp, layers, layout.pp, par.ep)
    stride = replica_ranks(layout.tp, layout.cp, layout.pp)
    parts = dp_comm(times, cluster, dense, expert, layers, t, layout.dp, par.ep, stride, layout.pp,
                    par.fsdp_schedule == "layerwise", layer_mbs)
    buckets, bucket_s, after, gather, scatter = parts
    dp = stage_sum(bucket_s * buckets, layout.pp) + after + m * stage_sum(layers * (2 * gather + scatter), layout.pp)
    last = last_sends(times, cluster, send_fwd, sent, groups, dense, t, layout.dp, stride, buckets)
    norm_s = norm_seconds(times, cluster)
    return assemble(layers, layer, send_fwd, last, parts, norm_s, mode, cluster.calibration.dp_overlap,
                    times.records, dp, serial_exchanges(scenario.stack, cluster.calibration))


def ring_hops(cluster: Cluster, tp: int, cp: int) -> tuple[Group, ...]:
    """The distinct hops of a context-parallel ring (replica 0, stage 0: cp members tp ranks apart, the last
    passing to the first): the pair inside an instance, every such pair at once, where consecutive members
    share one, and each pair that crosses instances (over the UltraServer's Z links or EFA), in ring order."""
    rpi = cluster.ranks_per_instance
    members = [i * tp for i in range(cp)]
    pairs = {tuple(sorted((a, b))) for a, b in zip(members, members[1:] + members[:1])}
    inside = [group_of(cluster, 2, tp)] if any(lo // rpi == hi // rpi for lo, hi in pairs) else []
    across = [_pair(cluster, lo, hi) for lo, hi in sorted(pairs) if lo // rpi != hi // rpi]
    return tuple(inside + across)


def _slowest_hop(times: CommTimes, hops: tuple[Group, ...], nbytes: float, count: float) -> float:
    """Seconds of one ring step: `nbytes` over the slowest of `hops`, which is recorded (`count` per step)."""
    secs = [times("send_recv", nbytes, g) for g in hops]
    if np.ndim(secs[0]):       # a settings axis: each setting's slowest hop (nothing recorded)
        return np.max(np.stack(secs), axis=0)
    return times("send_recv", nbytes, hops[int(np.argmax(secs))], "cp", count)


def send_group(cluster: Cluster, a: int, b: int) -> Group:
    """The two members of a send from stage a to stage b of replica 0, placed where they sit: the first
    ranks of the two stages (placement is tp, cp, then pp inside a replica)."""
    stride = group_ranks(cluster.layout.tp, cluster.layout.cp)
    return _pair(cluster, a * stride, b * stride)


def _pair(cluster: Cluster, a: int, b: int) -> Group:
    """Ranks a and b as a group of two (with every pair of the same shape on their instances at once). The
    network model routes it over the chip, NeuronLink, the UltraServer's Z links or EFA accordingly."""
    lo, hi = sorted((a, b))
    rpi = cluster.ranks_per_instance
    if lo // rpi == hi // rpi:
        return Group(per_instance=2, instances=1, stride=hi - lo, first_rank=lo)
    return Group(per_instance=1, instances=2, instance_step=hi - lo, first_rank=lo)
