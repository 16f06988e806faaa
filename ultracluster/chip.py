"""Operator work → seconds: the vectorized NeuronCore chip model.

An operator's time on one rank is the roofline over the engines it uses and the HBM bytes it moves,
with the engines overlapping: max(tensor / TensorE rate, vector / VectorE rate, scalar / ScalarE rate,
bytes / HBM share), each rate being the catalog peak times a named calibration factor. A rank is a
logical NeuronCore: `lnc` physical cores with their engines, and its chip's HBM bandwidth divided by the
ranks of that chip. Everything is numpy over operators and pipeline chunks; per-rank speed factors
(stragglers) multiply the results as arrays, so the cost grows with distinct shapes, not with cores.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import operators as opslib
from .cluster import Cluster


@dataclass(frozen=True)
class RankRates:
    """Achievable rates of one rank, after calibration (per second)."""

    tensor_flop_per_s: float
    vector_flop_per_s: float
    scalar_flop_per_s: float
    hbm_bytes_per_s: float


def rank_rates(cluster: Cluster, precision: str) -> RankRates:
    """Calibrated engine rates of one rank of `cluster` at a training precision."""
    chip, cal, lnc = cluster.chip, cluster.calibration, cluster.lnc
    return RankRates(
        tensor_flop_per_s=chip.tensor_flop_per_s_per_core[precision] * lnc * cal.tensor_efficiency,
        vector_flop_per_s=chip.vector_flop_per_s_per_core * lnc * cal.vector_efficiency,
        scalar_flop_per_s=chip.scalar_flop_per_s_per_core * lnc * cal.vector_efficiency,
        hbm_bytes_per_s=chip.hbm_bytes_per_s / cluster.ranks_per_chip * cal.hbm_efficiency,
    )


def op_seconds(work: dict[str, np.ndarray], rates: RankRates) -> np.ndarray:
    """Roofline time of each operator: arrays of engine work in, array of seconds out."""
    return np.maximum.reduce([
        work["tensor"] / rates.tensor_flop_per_s,
        work["vector"] / rates.vector_flop_per_s,
        work["scalar"] / rates.scalar_flop_per_s,
        work["bytes"] / rates.hbm_bytes_per_s,
    ])


@dataclass(frozen=True)
class ChunkTimes:
    """Compute seconds per microbatch of each pipeline chunk on a rank at speed 1.

    Arrays are indexed by chunk id = virtual stage x pp + stage (Megatron's interleaved order), so chunk
    c lives on stage c % pp.
    """

    forward_s: np.ndarray
    backward_s: np.ndarray       # including recomputation
    optimizer_s: np.ndarray      # per stage: the optimizer step of its ranks


def chunk_times(scenario, cluster: Cluster, library: tuple[opslib.Operator, ...]) -> ChunkTimes:
    """Price every pipeline chunk of a scenario on the chip model."""
    ops = opslib.applicable(library, scenario)
    layout = cluster.layout
    v = opslib.shape_variables(scenario, layout)
    rates = rank_rates(cluster, scenario.training.precision)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    n_chunks = layers.size
    recompute = scenario.training.recompute

    def secs(where: str, phase: str) -> tuple[np.ndarray, np.ndarray]:
        work = opslib.evaluate(ops, where, phase, v)
        return op_seconds(work, rates), work["recompute"]

    lf, marks = secs("layer", "forward")
    again = {"none": 0.0, "selective": lf[marks == "selective"].sum(), "full": lf.sum()}[recompute]
    fwd = layers * lf.sum()
    bwd = layers * (secs("layer", "backward")[0].sum() + again)
    fwd[0] += secs("embedding", "forward")[0].sum()
    bwd[0] += secs("embedding", "backward")[0].sum()
    fwd[-1] += secs("head", "forward")[0].sum()
    bwd[-1] += secs("head", "backward")[0].sum()

    params = opslib.chunk_params(scenario.model, layout.tp, layers, layout.pp)
    stage_params = np.zeros(layout.pp)
    np.add.at(stage_params, np.arange(n_chunks) % layout.pp, params)
    shard = stage_params / (layout.dp if scenario.training.zero1 else 1)
    opt_work = opslib.evaluate(ops, "optimizer", "forward", dict(v, T=np.ones(layout.pp), P=shard))
    opt = op_seconds(opt_work, rates).sum(axis=0)
    return ChunkTimes(forward_s=fwd, backward_s=bwd, optimizer_s=opt)



def speed_factors(scenario, ranks: np.ndarray, total_ranks: int) -> np.ndarray:
    """Per-rank slowdown factors (>= 1) of the given global ranks, drawn from the scenario seed.

    `faults.stragglers` slows `round(fraction x ranks)` ranks, chosen once per run over the global rank
    ids, so the draw is the same whichever shard asks (folding never changes it).
    """
    speed = np.ones(len(ranks))
    st = scenario.faults.stragglers if scenario.faults else None
    if st is None or st.fraction == 0 or st.slowdown == 1:
        return speed
    k = int(round(st.fraction * total_ranks))
    slow = np.random.default_rng([scenario.seed, 0x57A6]).choice(total_ranks, size=k, replace=False)
    speed[np.isin(ranks, slow)] = st.slowdown
    return speed
