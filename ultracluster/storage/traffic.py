"""Scenario and cluster → `StorageTraffic`: the bytes per instance that training reads and writes.

Data per step (the loader ranks' share of the batch), checkpoint bytes from the model and optimizer layout
(NxD's layout, ref §2.2), restore reads (from disk, and from the file servers' cache as far as it holds them).
Pure (numpy only).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cluster.placement import instance_of
from .fsx import GBPS, FsxSpec


@dataclass(frozen=True)
class StorageTraffic:
    """Bytes per instance that training moves, from the scenario's model, layout and storage blocks.

    Attributes:
        data: [instances] training data read per step.
        checkpoint: [instances] bytes written per checkpoint (`checkpoint_bytes_per_rank`).
        checkpoint_files: files per checkpoint (one per writing rank and kind).
        restore: [instances] bytes read from disk on a restart (each checkpoint byte once, plus what the
            cache cannot hold of the further reads).
        restore_cached: [instances] further reads of the same files (other replicas' weights, context-parallel
            copies), served from the file servers' cache as far as it holds them.
        d2h_s: device-to-host copy of the checkpoint (the instance with the most bytes); also the copy back.
    """

    data: np.ndarray
    checkpoint: np.ndarray
    checkpoint_files: int
    restore: np.ndarray
    restore_cached: np.ndarray
    d2h_s: float

    @property
    def checkpoint_bytes(self) -> float:
        return float(self.checkpoint.sum())


def _rank_state(scenario, cluster) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(parallel coordinates, weight bytes, optimizer-state bytes) that each rank holds, [ranks] each.

    Weights at training precision (4 B fp32, else 2 B); optimizer state fp32 master + Adam m, v = 12 B/param
    with fp32 master weights, bf16 m, v = 4 B/param without (`operators.optimizer_bytes`; ref §2.1), divided
    over data-parallel ranks under ZeRO-1 and ZeRO-3 (`operators.sharding`); weights too under ZeRO-3.
    """
    from .. import operators as opslib
    from ..cluster import rank_coords, stage_sum

    t, layout = scenario.training, cluster.layout
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    chunk = opslib.chunk_params(scenario.model, layout.tp, layers, layout.pp)
    stage = stage_sum(chunk, layout.pp)
    c = rank_coords(layout, np.arange(cluster.ranks))
    params = stage[c["pp"]]
    w_bytes = opslib.weight_bytes(t)
    o_bytes = opslib.optimizer_bytes(t)
    shard = opslib.sharding(t)
    return (c, params * w_bytes / (layout.dp if shard.weights else 1),
            params * o_bytes / (layout.dp if shard.optimizer else 1))


def checkpoint_bytes_per_rank(scenario, cluster) -> tuple[np.ndarray, np.ndarray]:
    """(weights, optimizer) bytes each rank writes to one checkpoint, [ranks] each (NxD layout, ref §2.2).

    Weights from data-parallel rank 0, from every rank under ZeRO-3 (its shard); optimizer state from every
    rank under ZeRO-1 and ZeRO-3 (its shard), from data-parallel rank 0 otherwise. Context-parallel ranks
    hold copies: only cp rank 0 writes.
    """
    from ..operators import sharding

    c, w, o = _rank_state(scenario, cluster)
    first = (c["dp"] == 0) & (c["cp"] == 0)
    shard, cp0 = sharding(scenario.training), c["cp"] == 0
    return np.where(cp0 if shard.weights else first, w, 0.0), np.where(cp0 if shard.optimizer else first, o, 0.0)


def storage_traffic(scenario, cluster, spec: FsxSpec | None = None) -> StorageTraffic:
    """What training reads and writes, per instance (see StorageTraffic)."""
    layout, n, st = cluster.layout, cluster.instances, scenario.storage
    inst = instance_of(np.arange(cluster.ranks), cluster.ranks_per_instance)
    c, held_w, held_o = _rank_state(scenario, cluster)
    # data: the first tensor-parallel rank of the first and of the last pipeline stage of every replica reads
    # its share of the batch (tokens and labels, as Megatron/NxD data loaders do); context parallel splits it
    readers = (c["tp"] == 0) & ((c["pp"] == 0) | (c["pp"] == layout.pp - 1))
    per_reader = scenario.tokens_per_step * (st.bytes_per_token if st else 0.0) / (layout.dp * layout.cp)
    data = np.bincount(inst, weights=readers * per_reader, minlength=n)
    weights, opt = checkpoint_bytes_per_rank(scenario, cluster)
    ckpt = np.bincount(inst, weights=weights + opt, minlength=n)
    n_files = int((weights > 0).sum() + (opt > 0).sum())
    # restore: every rank reads back the weights and optimizer shard it holds (as DCP/NxD loads do); a file's
    # first read comes from disk, the further reads of the same files (other replicas' weights, context-parallel
    # copies) from the file servers' RAM cache as far as it holds those files, from disk beyond
    reread = held_w + held_o - weights - opt
    extra = np.bincount(inst, weights=reread, minlength=n)
    files = float(weights.sum() if layout.dp > 1 else 0.0) + float(opt.sum() if layout.cp > 1 else 0.0)
    cached = 1.0 if spec is None or files <= 0 else min(1.0, spec.cache_bytes / files)
    d2h = 0.0
    if scenario.checkpoint is not None:
        per_instance = scenario.checkpoint.d2h_gbps_per_chip * GBPS * cluster.instance.chips
        d2h = float(ckpt.max(initial=0.0) / per_instance)
    return StorageTraffic(data=data, checkpoint=ckpt, checkpoint_files=n_files, restore=ckpt + (1 - cached) * extra,
                       restore_cached=cached * extra, d2h_s=d2h)
