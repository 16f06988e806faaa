"""`faults.degraded` in the step's comm: the collectives and sends that touch a degraded instance
at the times of the degraded links (`replay.engine.step_comm` times the comm once more on each degraded
copy of the cluster, `Cluster.degraded_copy`, and merges it here).

Pure (numpy only). The model, an approximation, is in docs/collectives.md ("Degraded instances").
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..cluster import Cluster, DegradedPart, instance_ranks, rank_coords


def degraded_groups(cluster: Cluster, instances: Sequence[int]) -> np.ndarray:
    """[replicas, stages] True where a (data-parallel replica, pipeline stage) group has a rank on one of
    `instances`. O(instances x ranks per instance), vectorized."""
    lay, rpi = cluster.layout, cluster.ranks_per_instance
    ranks = instance_ranks(instances, rpi)
    hit = np.zeros((lay.dp, lay.pp), dtype=bool)
    c = rank_coords(lay, ranks)
    hit[c["dp"], c["pp"]] = True
    return hit


def degraded_comm(comm, slow, cluster: Cluster, part: DegradedPart):
    """`comm` with the collectives and sends that touch `part`'s instances at `slow`'s times (the comm on
    the degraded links), the slowest member setting the pace (an approximation: docs/collectives.md).

    Per (replica, stage) group with a rank on a degraded instance: its in-layer tensor/context/expert
    parallel collectives; per replica: a pipeline send whose sending or receiving group is hit; per stage
    with any hit group: its data-parallel reduction, ZeRO-1 all-gather and ZeRO-3 traffic (every replica
    waits for it); the gradient-norm all-reduce over every rank. Never faster than `comm`.
    """
    lay = cluster.layout
    hit = degraded_groups(cluster, part.instances)                 # [dp, pp]
    n = comm.tp_fwd.size
    stage_of = np.arange(n) % lay.pp
    on_chunk = hit[:, stage_of]                                     # [dp, chunks]
    stage_hit = hit.any(axis=0)                                     # [pp]
    chunk_hit = stage_hit[stage_of]                                 # [chunks]

    def per_replica(mine: np.ndarray | None, base: np.ndarray, worse: np.ndarray, where: np.ndarray) -> np.ndarray:
        cur = np.broadcast_to(base, where.shape) if mine is None else mine
        return np.where(where, np.maximum(cur, worse), cur)

    send_hit = on_chunk | np.roll(on_chunk, -1, axis=1)             # chunk c sends to chunk c + 1's stage
    recv_hit = on_chunk | np.roll(on_chunk, 1, axis=1)              # and its gradient back to chunk c - 1
    last = comm.send_bwd_last if comm.send_bwd_last is not None else comm.send_bwd
    slow_last = slow.send_bwd_last if slow.send_bwd_last is not None else slow.send_bwd
    cp_base = np.array([comm.cp_block_fwd_s, comm.cp_block_bwd_s])
    cp_cur = np.broadcast_to(cp_base, (lay.dp, 2)) if comm.replica_cp_block_s is None else comm.replica_cp_block_s
    rep_hit = hit.any(axis=1)[:, None]
    cp = np.where(rep_hit, np.maximum(cp_cur, [slow.cp_block_fwd_s, slow.cp_block_bwd_s]), cp_cur)

    def staged(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.where(mask, np.maximum(a, b), a) if a.size else a

    return replace(
        comm,
        replica_tp_fwd=per_replica(comm.replica_tp_fwd, comm.tp_fwd, slow.tp_fwd, on_chunk),
        replica_tp_bwd=per_replica(comm.replica_tp_bwd, comm.tp_bwd, slow.tp_bwd, on_chunk),
        replica_send_fwd=per_replica(comm.replica_send_fwd, comm.send_fwd, slow.send_fwd, send_hit),
        replica_send_bwd=per_replica(comm.replica_send_bwd, comm.send_bwd, slow.send_bwd, recv_hit),
        replica_send_bwd_last=per_replica(comm.replica_send_bwd_last, last, slow_last, recv_hit),
        replica_cp_block_s=cp,
        dp=staged(comm.dp, slow.dp, stage_hit),
        dp_bucket_s=staged(comm.dp_bucket_s, slow.dp_bucket_s, chunk_hit),
        dp_after_s=staged(comm.dp_after_s, slow.dp_after_s, stage_hit),
        fsdp_gather_s=staged(comm.fsdp_gather_s, slow.fsdp_gather_s, chunk_hit),
        fsdp_scatter_s=staged(comm.fsdp_scatter_s, slow.fsdp_scatter_s, chunk_hit),
        norm_s=max(comm.norm_s, slow.norm_s) if hit.any() else comm.norm_s)


def replica_tp_records(comm, pp: int, microbatches: int) -> dict[int, list[float]]:
    """Per replica whose in-layer collectives differ from the comm's (degraded instances), its tensor-parallel
    seconds per step of each stage, as `StageComm.tp_comm_s` counts them; {} when every replica is alike."""
    if getattr(comm, "replica_tp_fwd", None) is None:
        return {}
    per = comm.replica_tp_fwd + comm.replica_tp_bwd                      # [replicas, chunks]
    base = comm.tp_fwd + comm.tp_bwd
    stage_of = np.arange(base.size) % pp
    out = np.zeros((per.shape[0], pp))
    np.add.at(out, (slice(None), stage_of), microbatches * per)
    differs = np.flatnonzero((per != base[None, :]).any(axis=1))
    return {int(d): out[d].tolist() for d in differs}


def touched_alike(hits: Sequence[np.ndarray]) -> bool:
    """Whether every data-parallel replica the degraded parts touch is touched alike: the same (replica, stage)
    groups hit by each part (`hits`: each part's `degraded_groups`). Then that replica's comm is the slowest
    everywhere (a replica's every collective and send is at least the healthy one's, and a pipeline's times only
    grow with its durations), and it alone sets the step: `slowest_replica_comm`."""
    if not hits:
        return True
    touched = np.flatnonzero(np.logical_or.reduce([h.any(axis=1) for h in hits]))
    return all((h[touched] == h[touched[:1]]).all() for h in hits) if touched.size else True


def slowest_replica_comm(comm, slows: Sequence, hits: Sequence[np.ndarray]):
    """The comm of the replica the degraded parts slow (`touched_alike` must hold): `comm` with, for each part in
    turn, its slow comm (`slows`, on the part's degraded links) where that replica's groups are hit, as
    `degraded_comm` gives each hit replica; and the stage-wide pieces (data-parallel reduction, ZeRO traffic, the
    gradient norm) as every replica waits for them. No replica axis: the fields keep `comm`'s shapes, per-chunk
    masks on the last axis, so it holds over the planner's row axis too (`layouts.steps`, the interval of a
    degraded run: one evaluation for every setting)."""
    touched = np.flatnonzero(np.logical_or.reduce([h.any(axis=1) for h in hits])) if hits else np.zeros(0, int)
    if touched.size == 0:
        return comm
    d = int(touched[0])
    n = np.shape(comm.tp_fwd)[-1]
    out = comm
    for slow, hit in zip(slows, hits):
        pp = hit.shape[1]
        stage_of = np.arange(n) % pp
        on = hit[d, stage_of]                                         # [chunks]: replica d's groups on this part
        sends, recvs = on | np.roll(on, -1), on | np.roll(on, 1)
        stage_hit = hit.any(axis=0)                                   # [pp]: every replica waits for these
        chunk_hit = stage_hit[stage_of]

        def worse(a, b, mask):
            return np.where(mask, np.maximum(a, b), a) if np.size(a) else a

        last = out.send_bwd_last
        slow_last = slow.send_bwd_last if slow.send_bwd_last is not None else slow.send_bwd
        rep = bool(hit[d].any())
        out = replace(
            out, tp_fwd=worse(out.tp_fwd, slow.tp_fwd, on), tp_bwd=worse(out.tp_bwd, slow.tp_bwd, on),
            send_fwd=worse(out.send_fwd, slow.send_fwd, sends), send_bwd=worse(out.send_bwd, slow.send_bwd, recvs),
            send_bwd_last=None if last is None else worse(last, slow_last, recvs),
            cp_block_fwd_s=worse(out.cp_block_fwd_s, slow.cp_block_fwd_s, rep),
            cp_block_bwd_s=worse(out.cp_block_bwd_s, slow.cp_block_bwd_s, rep),
            dp=worse(out.dp, slow.dp, stage_hit), dp_bucket_s=worse(out.dp_bucket_s, slow.dp_bucket_s, chunk_hit),
            dp_after_s=worse(out.dp_after_s, slow.dp_after_s, stage_hit),
            fsdp_gather_s=worse(out.fsdp_gather_s, slow.fsdp_gather_s, chunk_hit),
            fsdp_scatter_s=worse(out.fsdp_scatter_s, slow.fsdp_scatter_s, chunk_hit),
            norm_s=worse(out.norm_s, slow.norm_s, bool(hit.any())))
    return out
