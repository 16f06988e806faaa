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

from . import operators as opslib
from .units import GIB
from .replay.result import StageMemory



def in_flight_peak(program: list[tuple[str, int, int]], act_bytes: np.ndarray) -> float:
    """Peak activation bytes a stage holds: forwards add their chunk's saved bytes until their backward."""
    delta = np.array([act_bytes[c] if kind == "F" else -act_bytes[c] for kind, _, c in program])
    return float(np.cumsum(delta).max(initial=0.0))


def stage_memory(scenario, cluster, library, programs) -> list[StageMemory]:
    """HBM footprint of one rank of every pipeline stage."""
    t, layout = scenario.training, cluster.layout
    ops = opslib.applicable(library, scenario)
    v = opslib.shape_variables(scenario, layout)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    n_chunks = layers.size
    ep = scenario.parallelism.ep
    dense, expert = opslib.chunk_params_split(scenario.model, layout.tp, layers, layout.pp, ep)
    params = dense + expert
    # ZeRO-1 and ZeRO-3 shard optimizer state over the data-parallel ranks that hold the same parameters:
    # dp for dense parameters, dp / ep for experts; ZeRO-3 shards weights and gradients the same way
    shard = opslib.sharding(t)
    held = opslib.dp_share(dense, expert, layout.dp, ep)
    opt_params = held if shard.optimizer else params
    unit = params / np.maximum(layers, 1)   # ZeRO-3 gathers one layer at a time (a chunk's embedding or head
                                            # spread over its layers)
    per_layer = opslib.saved_bytes(ops, "layer", v, t.recompute)
    act = layers * per_layer
    act[0] += opslib.saved_bytes(ops, "embedding", v, t.recompute)
    act[-1] += opslib.saved_bytes(ops, "head", v, t.recompute)
    # full recomputation rebuilds one layer's activations at a time during backward
    working = opslib.saved_bytes(ops, "layer", v, "none") if t.recompute == "full" else 0.0

    w_bytes, g_bytes = opslib.weight_bytes(t), opslib.grad_bytes(t)
    if t.precision in opslib.MX_PRECISIONS:      # + the MX copies of the weights, both orientations
        w_bytes += 2 * opslib.PRECISION_BYTES[t.precision]
    o_bytes = opslib.optimizer_bytes(t)
    capacity = cluster.chip.hbm_bytes / cluster.ranks_per_chip / GIB
    reserve = cluster.calibration.runtime_reserve_gib
    out = []
    for s in range(layout.pp):
        mine = np.arange(n_chunks) % layout.pp == s
        p = params[mine].sum()
        acts = (in_flight_peak(programs[s], act) + working) / GIB
        if shard.weights:   # the 1/dp share plus the gathered working set (two layers)
            p = held[mine].sum() + 2 * unit[mine].max()
        w, g, o = p * w_bytes / GIB, p * g_bytes / GIB, opt_params[mine].sum() * o_bytes / GIB
        out.append(StageMemory(stage=s, weights_gib=w, gradients_gib=g, optimizer_gib=o, activations_gib=acts,
                               reserve_gib=reserve, total_gib=w + g + o + acts + reserve, capacity_gib=capacity))
    return out


def infeasible_reason(memory: list[StageMemory]) -> str | None:
    """The reason a layout does not fit in HBM, naming the worst stage and its breakdown, or None."""
    worst = max(memory, key=lambda m: m.total_gib - m.capacity_gib)
    if worst.total_gib <= worst.capacity_gib:
        return None
    return (f"does not fit in HBM: a rank of pipeline stage {worst.stage} needs {worst.total_gib:.1f} GiB of its "
            f"{worst.capacity_gib:.1f} GiB (weights {worst.weights_gib:.1f}, gradients {worst.gradients_gib:.1f}, "
            f"optimizer {worst.optimizer_gib:.1f}, activations {worst.activations_gib:.1f}, "
            f"runtime reserve {worst.reserve_gib:.1f} GiB)")
