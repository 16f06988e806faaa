"""Scenario + cluster + pipeline programs → HBM footprint per rank of each stage, and feasibility.

Per rank: weights (training precision; fp8 training keeps bf16 weights; MX training adds the two MX copies
of its weights that mx_quantize_weights writes, one per contraction orientation, each of 1 byte (MXFP8)
or half a byte (MXFP4) per element plus an 8-bit scale per 32, OCP MX as T3 describes it), gradients (fp32 when fp32 master
weights are kept, as Megatron-LM accumulates bf16 gradients in fp32, else bf16), optimizer state
(fp32 master + Adam m and v = 12 B/param, or bf16 m and v = 4 B/param without master weights; divided
over data-parallel ranks under ZeRO-1 and ZeRO-3; ZeRO paper, Rajbhandari et al. 2020; under ZeRO-3 (FSDP)
weights and gradients too, plus the gathered working set: two layers' weights, the one in use and the one
prefetched, and two layers' whole gradients, the one being computed and the one being reduce-scattered),
activations of the
microbatches in flight as the executed schedule holds them (walked from the stage's own op order, so
1F1B holds up to p on the first stage, GPipe all m, interleaving more), and the runtime reserve. The
capacity of a rank is its chip's HBM divided by the ranks of that chip.
"""
from __future__ import annotations

import numpy as np

from . import chip
from . import operators as opslib
from .cluster import stage_sum
from .frozen import kept, read_only
from .step.hbm import hbm_totals
from .units import GIB
from .replay.result import StageMemory


def bytes_per_param(training) -> tuple[float, float, float]:
    """(weight, gradient, optimizer-state) bytes per parameter a rank stores: the weights at the training
    precision, + the two MX copies (both orientations) under MX training."""
    w_bytes = opslib.weight_bytes(training)
    if training.precision in opslib.MX_PRECISIONS:
        w_bytes += 2 * opslib.PRECISION_BYTES[training.precision]
    return w_bytes, opslib.grad_bytes(training), opslib.optimizer_bytes(training)


def stage_state_gib(dense: np.ndarray, expert: np.ndarray, layers: np.ndarray, pp: int, dp: np.ndarray,
                    ep: np.ndarray, opt_sharded: np.ndarray, weights_sharded: np.ndarray,
                    per_param: tuple[float, float, float],
                    grads_sharded: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weights, gradients and optimizer state (GiB) of one rank of every stage, for n layouts at once.

    Args:
        dense, expert: [n, chunks] parameters per rank of each chunk (`operators.chunk_params_split`).
        layers: [chunks] layers of each chunk; pp: stages (chunk c on stage c % pp).
        dp, ep: [n] data- and expert-parallel degrees.
        opt_sharded, weights_sharded: [n] ZeRO-1 (and up) and ZeRO-3 (`operators.sharding`).
        per_param: `bytes_per_param`.
        grads_sharded: [n] ZeRO-2 (and up): gradients held as ZeRO-3 holds weights (None: as weights_sharded).

    Returns:
        (weights, gradients, optimizer) [n, pp].
    """
    w_bytes, g_bytes, o_bytes = per_param
    n = dense.shape[0]
    params = dense + expert
    # ZeRO-1 and up shard optimizer state over the data-parallel ranks that hold the same parameters:
    # dp for dense parameters, dp / ep for experts; ZeRO-2 shards gradients, ZeRO-3 weights too, the same way
    held = opslib.dp_share(dense, expert, np.asarray(dp)[:, None], np.asarray(ep)[:, None])
    # ZeRO-3 holds its 1/dp share plus the gathered working set: two layers (a chunk's embedding or head
    # spread over its layers), the one in use and the one prefetched; ZeRO-2's gradients likewise: its share
    # plus two layers' full gradients, the ones being produced and the ones being reduce-scattered
    unit = params / np.maximum(layers, 1)[None, :]
    sharded = stage_sum(held, pp) + 2 * unit.reshape(n, layers.size // pp, pp).max(axis=1)
    full = stage_sum(params, pp)
    P = np.where(np.asarray(weights_sharded)[:, None], sharded, full)
    grads = weights_sharded if grads_sharded is None else grads_sharded
    Gp = np.where(np.asarray(grads)[:, None], sharded, full)
    O = chip.optimizer_params(dense, expert, dp, ep, opt_sharded, pp) * o_bytes / GIB
    return P * w_bytes / GIB, Gp * g_bytes / GIB, O


def chunk_activation_bytes(layers: np.ndarray, per_layer: np.ndarray, embedding: np.ndarray,
                           head: np.ndarray) -> np.ndarray:
    """[n, chunks] activation bytes one microbatch leaves saved on each chunk: its layers', the embedding's on
    the first chunk, the LM head's on the last (`operators.saved_bytes` per layout, arrays [n])."""
    act = layers[None, :] * np.asarray(per_layer, dtype=float)[:, None]
    act[:, 0] += embedding
    act[:, -1] += head
    return act


def held_in_flight(forward: np.ndarray, local_chunk: np.ndarray, v: int, distinct: bool = True) -> np.ndarray:
    """The vectors [k, v] of microbatches a stage holds per local chunk along its program (the empty one first):
    forwards add one on their chunk until its backward removes it. A stage's activation peak is the max over
    them of the dot product with its chunks' saved bytes (`activation_peak`).

    Args:
        forward: [ops] True for a forward, False for a backward, in program order.
        local_chunk: [ops] the op's chunk on its stage (chunk id // pp).
        distinct: keep each vector once (the planner reuses them over many layouts); else one per op.
    """
    if distinct:
        return stages_held(forward[None, :], local_chunk[None, :], v)[0]
    return _held_along(forward[None, :], local_chunk[None, :], v)[0].astype(float)


def stages_held(forward: np.ndarray, local_chunk: np.ndarray, v: int) -> list[np.ndarray]:
    """`held_in_flight` (distinct vectors, in the order they first appear) of many stages at once: forward and
    local_chunk [stages, ops] (every stage the same number of ops); a list of [k_s, v]."""
    held = _held_along(forward, local_chunk, v)
    if v == 1 and held.min() >= 0:          # one count, stepping by one from 0: first met in the order 0, 1, ...
        return [np.arange(top + 1, dtype=float)[:, None] for top in held.max(axis=(1, 2)).tolist()]
    ops = forward.shape[1]
    key = held[:, :, 0] if v == 1 else (held * (ops + 2) ** np.arange(v)).sum(axis=2)
    order = np.argsort(key, axis=1, kind="stable")             # equal vectors: the first to appear first
    ranked = np.take_along_axis(key, order, axis=1)
    first = np.zeros(key.shape, dtype=bool)
    np.put_along_axis(first, order, np.concatenate([np.ones((key.shape[0], 1), dtype=bool),
                                                    ranked[:, 1:] != ranked[:, :-1]], axis=1), axis=1)
    return [h[f].astype(float) for h, f in zip(held, first)]


def _held_along(forward: np.ndarray, local_chunk: np.ndarray, v: int) -> np.ndarray:
    """[stages, ops + 1, v] microbatches held per local chunk before the first op and after each (integers)."""
    stages, ops = forward.shape
    step = np.where(forward, 1, -1)[:, :, None]
    delta = step if v == 1 else (local_chunk[:, :, None] == np.arange(v)) * step     # +-1 on the op's chunk
    held = np.zeros((stages, ops + 1, v), dtype=np.int64)
    np.cumsum(delta, axis=1, out=held[:, 1:])
    return held


def activation_peak(held: np.ndarray, act: np.ndarray) -> np.ndarray:
    """[n] a stage's peak activation bytes: max over its held vectors [k, v] of sum_j held_j x act[:, j]
    (act [n, v], its local chunks' bytes), summed in a fixed order (no BLAS: the same bits in any batch)."""
    return stage_peaks(held[None, :, :], act[:, :, None])[:, 0]


def stage_peaks(held: np.ndarray, act: np.ndarray) -> np.ndarray:
    """[n, p] `activation_peak` of every stage at once: held [p, k, v] each stage's vectors (`stacked_held`),
    act [n, v, p] the local chunks' bytes of each stage; the products summed chunk by chunk in order."""
    if np.isfinite(act).all() and not np.signbit(act).any():
        # bytes finite and >= 0 (not -0.0): every product and partial sum is monotone in the held counts (IEEE
        # rounding is), so a vector no larger than another in any chunk is never the peak: the same bits without it
        held = held.max(axis=1, keepdims=True) if held.shape[2] == 1 else _undominated(held)
    per = act.transpose(0, 2, 1)[:, :, None, :]                     # [n, p, 1, v]
    total = held[None, :, :, 0] * per[..., 0]
    for j in range(1, held.shape[2]):
        total += held[None, :, :, j] * per[..., j]
    return total.max(axis=2)


UNDOMINATED_MAX = 256
_UNDOMINATED: dict[tuple, np.ndarray] = {}    # `_undominated` by the held vectors' content


def _undominated(held: np.ndarray) -> np.ndarray:
    """[p, k', v] each stage's held vectors [k, v] without those at most a pivot's in every chunk (pivots: the
    largest total, the largest of each chunk; the pivot itself and the first of equal vectors kept), padded with a
    stage's first kept one (fewer than half the vectors of the 70B plan's long programs). Kept by content; a store
    at UNDOMINATED_MAX entries starts again empty."""
    return kept(_UNDOMINATED, (held.shape, held.dtype.str, held.tobytes()), lambda: read_only(_pruned(held)),
                UNDOMINATED_MAX)


def _pruned(held: np.ndarray) -> np.ndarray:
    """`_undominated`'s vectors, found."""
    p, k, v = held.shape
    at, order = np.arange(k), np.arange(p)
    drop = np.zeros((p, k), dtype=bool)
    for pivot in [held.sum(axis=2).argmax(axis=1)] + [held[:, :, j].argmax(axis=1) for j in range(v)]:
        top = held[order, pivot][:, None, :]                          # [p, 1, v]
        same = (held == top).all(axis=2)
        drop |= (held <= top).all(axis=2) & (~same | (at[None, :] > pivot[:, None]))
    order_k = np.argsort(drop, axis=1, kind="stable")                # each stage's kept first, in order
    count = (~drop).sum(axis=1)
    width = int(count.max())
    idx = np.where(at[None, :width] < count[:, None], order_k[:, :width], order_k[:, :1])
    return np.take_along_axis(held, idx[:, :, None], axis=1)


def stacked_held(per_stage: list[np.ndarray]) -> np.ndarray:
    """[p, k, v] the stages' held vectors [k_s, v], padded with empty vectors (each stage holds the empty one
    already, and bytes are >= 0, so the padding never changes a peak)."""
    k = max(h.shape[0] for h in per_stage)
    out = np.zeros((len(per_stage), k, per_stage[0].shape[1]))
    for s, h in enumerate(per_stage):
        out[s, :h.shape[0]] = h
    return out


def capacity_gib(cluster) -> float:
    """HBM of one rank: its chip's HBM divided by the ranks of that chip."""
    return cluster.chip.hbm_bytes / cluster.ranks_per_chip / GIB


def in_flight_peak(program: list[tuple[str, int, int]], act_bytes: np.ndarray) -> float:
    """Peak activation bytes a stage holds along its program (`act_bytes` per chunk id): the walk of the executed
    program. The planner reads the same peak off a short program's held vectors (`layouts.batched_parts.program_counts`, then
    `stage_peaks`; tests/plan/test_batched_parts.py checks they agree)."""
    if not program:
        return 0.0
    kinds, _, chunk_ids = zip(*program)
    chunk = np.fromiter(chunk_ids, dtype=np.int64, count=len(chunk_ids))
    forward = np.fromiter(map("F".__eq__, kinds), dtype=bool, count=len(kinds))
    ids = np.unique(chunk)
    held = held_in_flight(forward, np.searchsorted(ids, chunk), ids.size, distinct=False)
    return float(activation_peak(held, np.asarray(act_bytes, dtype=float)[None, ids])[0])


def stage_memory(scenario, cluster, library, programs) -> list[StageMemory]:
    """HBM footprint of one rank of every pipeline stage: the layout as a batch of one (the planner times
    thousands with the same functions, `layouts.batched_parts.batched_memory`)."""
    t, layout = scenario.training, cluster.layout
    ops = opslib.applicable(library, scenario)
    v = opslib.shape_variables(scenario, layout)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    ep = scenario.parallelism.ep
    dense, expert = opslib.chunk_params_split(scenario.model, layout.tp, layers, layout.pp, ep)
    shard = opslib.sharding(t)
    W, G, O = (a[0] for a in stage_state_gib(dense[None, :], expert[None, :], layers, layout.pp,
                                             np.array([layout.dp]), np.array([ep]), np.array([shard.optimizer]),
                                             np.array([shard.weights]), bytes_per_param(t),
                                             np.array([shard.gradients])))
    act = chunk_activation_bytes(layers, *(np.array([opslib.saved_bytes(ops, where, v, opslib.recompute_mode(t))])
                                           for where in ("layer", "embedding", "head")))[0]
    # full recomputation rebuilds one layer's activations at a time during backward
    working = opslib.saved_bytes(ops, "layer", v, "none") if t.recompute == "full" else 0.0
    capacity = capacity_gib(cluster)
    reserve = cluster.calibration.runtime_reserve_gib
    A = np.array([(in_flight_peak(programs[s], act) + working) / GIB for s in range(layout.pp)])
    total = hbm_totals(W, G, O, A, reserve, capacity).total
    return [StageMemory(stage=s, weights_gib=float(W[s]), gradients_gib=float(G[s]), optimizer_gib=float(O[s]),
                        activations_gib=float(A[s]), reserve_gib=reserve, total_gib=float(total[s]),
                        capacity_gib=capacity) for s in range(layout.pp)]


def infeasible_reason(memory: list[StageMemory]) -> str | None:
    """The reason a layout does not fit in HBM, naming the worst stage and its breakdown, or None."""
    parts = np.array([[m.weights_gib, m.gradients_gib, m.optimizer_gib, m.activations_gib, m.reserve_gib,
                       m.capacity_gib] for m in memory])
    hbm = hbm_totals(*parts.T)
    if hbm.fits:
        return None
    worst = memory[int(hbm.worst)]
    return (f"does not fit in HBM: a rank of pipeline stage {worst.stage} needs {worst.total_gib:.1f} GiB of its "
            f"{worst.capacity_gib:.1f} GiB (weights {worst.weights_gib:.1f}, gradients {worst.gradients_gib:.1f}, "
            f"optimizer {worst.optimizer_gib:.1f}, activations {worst.activations_gib:.1f}, "
            f"runtime reserve {worst.reserve_gib:.1f} GiB)")
