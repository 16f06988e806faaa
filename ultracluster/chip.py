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


# TensorE is a 128 x 128 systolic array: the contraction dimension fills its 128 rows (partitions), the
# stationary operand's free dimension its 128 columns, and the moving operand streams through in tiles of up
# to 512 columns; one MultiplyMoving instruction over N moving columns takes max(N, 64) cycles (H4: the
# initiation interval, MM_INIT_LATENCY = 64 cycles), so only a moving dimension under 64 (or a last tile
# under 64) wastes TensorE time. A contraction or stationary dimension that is not a multiple of 128 leaves
# part of the array idle in its last tile.
PE_ROWS, PE_COLS, MOVING_TILE, MM_INIT_CYCLES = 128, 128, 512, 64
# VectorE, ScalarE and GpSimd: 128 lanes (H4); VectorE and ScalarE stream one element per lane and cycle
# (`ChipSpec.vector_hz`, `scalar_hz`); GpSimd is 8 processors of 512-bit SIMD, 16 fp32 lanes each (H4).
ENGINE_LANES = 128
GPSIMD_LANES = 8 * 16


@dataclass(frozen=True)
class RankRates:
    """Achievable rates of one rank (one logical NeuronCore), after calibration (per second)."""

    tensor_flop_per_s: float
    vector_elem_per_s: float        # VectorE element passes per second
    scalar_elem_per_s: float        # ScalarE element passes per second
    gpsimd_elem_per_s: float
    hbm_bytes_per_s: float          # min(HBM share, DMA share) of the chip, x hbm_efficiency
    sbuf_bytes: float               # SBUF of the rank's physical cores
    kernel_launch_s: float          # fixed cost per kernel instance (after fusion)
    fusion: bool = True             # fused elementwise operators run inside their host kernel
    serial_engines: bool = True     # kernels marked `serial` sum their engines' times instead of overlapping


def rank_rates(cluster: Cluster, precision: str) -> RankRates:
    """Calibrated engine rates of one rank of `cluster` at a training precision."""
    chip, cal, lnc, per_chip = cluster.chip, cluster.calibration, cluster.lnc, cluster.ranks_per_chip
    if cal.engine_clock_rates and chip.vector_hz > 0 and chip.scalar_hz > 0:
        vector, scalar = ENGINE_LANES * chip.vector_hz, ENGINE_LANES * chip.scalar_hz
    else:   # the product pages' FP32 TFLOPS, read as element passes (the switch's "off" position)
        vector, scalar = chip.vector_flop_per_s_per_core, chip.scalar_flop_per_s_per_core
    return RankRates(
        tensor_flop_per_s=chip.tensor_flop_per_s_per_core[precision] * cal.tensor_peak_scale(chip.name, precision)
        * lnc * cal.tensor_efficiency,
        vector_elem_per_s=vector * lnc * cal.vector_efficiency,
        scalar_elem_per_s=scalar * lnc * cal.vector_efficiency,
        gpsimd_elem_per_s=chip.gpsimd_hz * GPSIMD_LANES * lnc * cal.vector_efficiency,
        hbm_bytes_per_s=min(chip.hbm_bytes_per_s * cal.hbm_peak_scale(chip.name), chip.dma_bytes_per_s) / per_chip
        * cal.hbm_efficiency,
        sbuf_bytes=chip.sbuf_bytes_per_core * lnc,
        kernel_launch_s=cal.kernel_launch_s,
        fusion=cal.fusion,
        serial_engines=cal.attention_serial,
    )


def _fill(dim: np.ndarray, tile: int) -> np.ndarray:
    """Fraction of tiles of size `tile` that a dimension of size `dim` fills (1 where dim is 0)."""
    dim = np.asarray(dim, dtype=float)
    return np.where(dim > 0, dim / (tile * np.ceil(np.maximum(dim, 1) / tile)), 1.0)


def _moving_fill(m: np.ndarray) -> np.ndarray:
    """Fraction of TensorE cycles a moving dimension of `m` columns uses: full tiles of 512 plus a last
    tile that costs at least 64 cycles (H4)."""
    m = np.asarray(m, dtype=float)
    rest = np.mod(m, MOVING_TILE)
    cycles = MOVING_TILE * np.floor(m / MOVING_TILE) + np.where(rest > 0, np.maximum(rest, MM_INIT_CYCLES), 0.0)
    return np.where(m > 0, m / np.maximum(cycles, 1.0), 1.0)


def tensor_utilization(m: np.ndarray, k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Fraction of TensorE peak a matmul's shape can use: contraction over rows, stationary over columns,
    moving dimension over its initiation interval."""
    return _fill(k, PE_ROWS) * _fill(n, PE_COLS) * _moving_fill(m)


def sbuf_rereads(m: np.ndarray, k: np.ndarray, n: np.ndarray, e: float, w: float, sbuf: float) -> np.ndarray:
    """Extra HBM bytes when a matmul's stationary operand (k x n) does not fit in half the SBUF: the
    moving operand (m x k) is streamed once more for every further SBUF-sized block of it."""
    blocks = np.ceil(k * n * w / (sbuf / 2))
    return np.maximum(blocks - 1, 0) * m * k * e


def fuse_kernels(work: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Operators → kernels: each fused operator's engine work joins its host kernel's row (`work["host"]`),
    its own HBM bytes vanish (its operands stay in SBUF) and its row becomes empty (no launch of its own)."""
    host = work.get("host")
    if host is None or not np.any(host != np.arange(host.size)):
        return work
    out = dict(work)
    member = host != np.arange(host.size)
    for eng in ("tensor", "vector", "scalar", "gpsimd"):
        merged = np.where(member[(...,) + (None,) * (work[eng].ndim - 1)], 0.0, work[eng])
        np.add.at(merged, host[member], work[eng][member])
        out[eng] = merged
    out["bytes"] = np.where(member[(...,) + (None,) * (work["bytes"].ndim - 1)], 0.0, work["bytes"])
    return out


def op_seconds(work: dict[str, np.ndarray], rates: RankRates, e: float = 2.0, w: float = 2.0) -> np.ndarray:
    """Roofline time of each kernel with its engines overlapping: arrays of engine work in, seconds out.

    Args:
        work: arrays "tensor" (FLOPs), "vector", "scalar", "gpsimd" (element passes), "bytes" (HBM), and
            optionally the matmul shape "m", "k", "n" (0 where the operator has no matmul) and "host" (the
            kernel each operator runs in; fused when `rates.fusion`).
        rates: the rank's calibrated rates.
        e, w: bytes per activation and per weight element (for SBUF re-reads).

    Returns:
        Seconds per operator row: a kernel's time (its roofline plus the fixed kernel launch) on its host's
        row, 0 on the rows of operators fused into it and of operators that do no work.
    """
    if rates.fusion:
        work = fuse_kernels(work)
    zero = np.zeros_like(work["tensor"])
    m, k, n = (work.get(d, zero) for d in ("m", "k", "n"))
    util = tensor_utilization(m, k, n)
    hbm = work["bytes"] + np.where(work["tensor"] > 0, sbuf_rereads(m, k, n, e, w, rates.sbuf_bytes), 0.0)
    engines = np.stack([
        work["tensor"] / (rates.tensor_flop_per_s * util),
        work["vector"] / rates.vector_elem_per_s,
        work["scalar"] / rates.scalar_elem_per_s,
        work.get("gpsimd", zero) / rates.gpsimd_elem_per_s,
    ])
    serial = work.get("serial", np.zeros(engines.shape[1], dtype=bool))
    serial = serial.reshape(serial.shape + (1,) * (engines.ndim - 2)) & rates.serial_engines
    busy = np.maximum(np.where(serial, engines.sum(axis=0), engines.max(axis=0)), hbm / rates.hbm_bytes_per_s)
    return np.where(busy > 0, busy + rates.kernel_launch_s, 0.0)


@dataclass(frozen=True)
class ChunkTimes:
    """Compute seconds per microbatch of each pipeline chunk on a rank at speed 1.

    Arrays are indexed by chunk id = virtual stage x pp + stage (Megatron's interleaved order), so chunk
    c lives on stage c % pp.
    """

    forward_s: np.ndarray
    backward_s: np.ndarray       # including recomputation
    optimizer_s: np.ndarray      # per stage: gradient norm and clipping, and the optimizer step of its ranks
    attention_fwd_s: float = 0.0  # one layer's attention core per microbatch (context-parallel overlap)
    attention_bwd_s: float = 0.0
    flops_per_microbatch: np.ndarray | None = None   # [chunks] TensorE FLOPs of one microbatch, fwd + bwd
                                                      # + recompute (hardware FLOPs, HFU)
    tp_hide_bwd_s: np.ndarray | None = None   # one layer's backward seconds of the matmuls that hide the
                                              # tensor-parallel collectives (`tp_hide_seconds`)
    residual_s: np.ndarray | None = None      # [chunks] of forward_s + backward_s: the unnamed per-layer
                                              # residual (`Calibration.layer_overhead_s`) per microbatch

    def residual_fraction(self) -> float:
        """Share of the chunks' compute that is the unnamed residual (0 when it is off)."""
        total = float(self.forward_s.sum() + self.backward_s.sum())
        return float(self.residual_s.sum()) / total if self.residual_s is not None and total > 0 else 0.0


def _kernels(ops, where: str, phase: str, v: dict, rates: RankRates) -> tuple[np.ndarray, dict]:
    work = opslib.evaluate(ops, where, phase, v)
    return op_seconds(work, rates, v["e"], v["w"]), work


def tp_hide_seconds(scenario, cluster: Cluster, library: tuple[opslib.Operator, ...] | None = None) -> np.ndarray:
    """Backward seconds of one layer's matmuls that hide tensor-parallel collectives (`hides_tp` kernels, in
    library order: the attention block's, then the MLP block's), per microbatch at speed 1."""
    cal = cluster.calibration
    ops = opslib.applicable(library if library is not None else opslib.library_for(scenario), scenario, cal)
    v = opslib.shape_variables(scenario, cluster.layout, cal)
    lb, work = _kernels(ops, "layer", "backward", v, rank_rates(cluster, scenario.training.precision))
    return lb[work["hides_tp"]]      # chunk_times carries the same (tp_hide_bwd_s) for a caller that has it


def chunk_times(scenario, cluster: Cluster, library: tuple[opslib.Operator, ...] | None = None,
                stages: np.ndarray | None = None) -> ChunkTimes:
    """Price every pipeline chunk of a scenario on the chip model (library: default the scenario's).

    With `stages` (ascending stage ids), only those stages: forward_s, backward_s and flops_per_microbatch
    hold the chunks on them (chunk c lives on stage c % pp) in chunk order, optimizer_s one entry per given
    stage; every number is the one the full table has. The per-layer kernels are priced either way."""
    cal = cluster.calibration
    ops = opslib.applicable(library if library is not None else opslib.library_for(scenario), scenario, cal)
    layout = cluster.layout
    v = opslib.shape_variables(scenario, layout, cal)
    rates = rank_rates(cluster, scenario.training.precision)
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    n_chunks = layers.size
    recompute = scenario.training.recompute

    lf, wf = _kernels(ops, "layer", "forward", v, rates)
    lb, wb = _kernels(ops, "layer", "backward", v, rates)
    marks = wf["recompute"]
    # selective recomputation repeats the marked operators' forward; the flash kernel's backward recomputes
    # the scores itself, so under flash_attention the attention core is not run twice
    selective = marks == "selective"
    if cal.flash_attention:
        selective &= wf["names"] != "attention_core"
    repeat = {"none": np.zeros_like(lf, dtype=bool), "selective": selective, "full": np.ones_like(lf, dtype=bool)}[recompute]
    recompute_s = lf[repeat].sum()
    recompute_passes = {"none": 0.0, "selective": 0.0, "full": 1.0}[recompute]
    residual = layers * cal.layer_overhead_s * (3.0 + recompute_passes)   # passes: forward 1, backward 2, recompute
    fwd = layers * (lf.sum() + cal.layer_overhead_s)
    bwd = layers * (lb.sum() + recompute_s + cal.layer_overhead_s * (2.0 + recompute_passes))
    ef, wef = _kernels(ops, "embedding", "forward", v, rates)
    eb, web = _kernels(ops, "embedding", "backward", v, rates)
    hf, whf = _kernels(ops, "head", "forward", v, rates)
    hb, whb = _kernels(ops, "head", "backward", v, rates)
    if cal.stage_ends:   # NxD and NeMo: the embedding on the first chunk, norm, LM head and loss on the last
        fwd[0] += ef.sum()
        bwd[0] += eb.sum()
        fwd[-1] += hf.sum()
        bwd[-1] += hb.sum()
    else:                # the switch's off position: the same work spread evenly over the chunks
        fwd += (ef.sum() + hf.sum()) / n_chunks
        bwd += (eb.sum() + hb.sum()) / n_chunks
    fwd += cal.microbatch_launch_s        # each microbatch's forward and backward graph is launched by the host
    bwd += cal.microbatch_launch_s
    flops = layers * (wf["tensor"].sum() + wb["tensor"].sum() + wf["tensor"][repeat].sum())
    flops[0] += wef["tensor"].sum() + web["tensor"].sum()
    flops[-1] += whf["tensor"].sum() + whb["tensor"].sum()

    ep = scenario.parallelism.ep
    dense, expert = opslib.chunk_params_split(scenario.model, layout.tp, layers, layout.pp, ep)
    on_stage = np.arange(n_chunks) % layout.pp
    shard = np.zeros(layout.pp)
    if opslib.sharding(scenario.training).optimizer:   # ZeRO-1 and up: the optimizer state's dp share
        np.add.at(shard, on_stage, opslib.dp_share(dense, expert, layout.dp, ep))
    else:
        np.add.at(shard, on_stage, dense + expert)
    on = np.arange(layout.pp) if stages is None else np.asarray(stages, dtype=np.int64)
    opt_work = opslib.evaluate(ops, "optimizer", "forward", dict(v, T=np.ones(on.size), P=shard[on]))
    opt = op_seconds(opt_work, rates, v["e"], v["w"]).sum(axis=0)
    attn = np.isin(wf["names"], ("attention_core", "attention_materialized"))   # whichever kernel the job runs
    if stages is not None:
        mine = np.isin(on_stage, on)
        fwd, bwd, flops, residual = fwd[mine], bwd[mine], flops[mine], residual[mine]
    return ChunkTimes(forward_s=fwd, backward_s=bwd, optimizer_s=opt, attention_fwd_s=float(lf[attn].sum()),
                      attention_bwd_s=float(lb[attn].sum()), flops_per_microbatch=flops,
                      tp_hide_bwd_s=lb[wb["hides_tp"]], residual_s=residual)


STRAGGLER_LEAF_RANKS = 4096   # ranks per leaf of the straggler draw's split tree: a constant, never a shard's size


def stragglers(scenario, total_ranks: int, first: int = 0, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ranks in [first, first + count) that run slower than speed 1, and their slowdown factors.

    `faults.stragglers` slows `round(fraction x ranks)` ranks, a uniform random subset of the global rank
    ids drawn once per run from the seed. The draw splits the ranks in halves down to leaves of
    `STRAGGLER_LEAF_RANKS`: a node holding k of the chosen ranks gives its left half a hypergeometric share
    of them, and a leaf picks its share without replacement, each from a generator keyed by (seed, node).
    A shard walks only the nodes that overlap its ranks, so it computes its own stragglers alone in
    O(log ranks + its leaves), and the set is the same whichever shard asks (folding never changes it).
    Sparse: every other rank runs at speed 1, so the cost does not grow with the number of cores.

    Args:
        scenario: the resolved Scenario.
        total_ranks: ranks of the cluster.
        first, count: the range of global ranks asked for (default: all of them).

    Returns:
        (sorted int64 global ranks, float slowdown factors >= 1).
    """
    st = scenario.faults.stragglers if scenario.faults else None
    k = int(round(st.fraction * total_ranks)) if st is not None and st.slowdown != 1 else 0
    stop = total_ranks if count is None else min(total_ranks, first + count)
    if k == 0 or stop <= first:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    found: list[np.ndarray] = []
    todo = [(1, 0, total_ranks, k)]          # (node id, first rank, end rank, chosen ranks in it)
    while todo:
        node, lo, hi, n = todo.pop()
        if n == 0 or hi <= first or lo >= stop:
            continue
        rng = np.random.default_rng([scenario.seed, 0x57A6, node])
        if hi - lo <= STRAGGLER_LEAF_RANKS:
            picks = lo + rng.choice(hi - lo, size=n, replace=False)
            found.append(picks[(picks >= first) & (picks < stop)])
            continue
        mid = lo + (hi - lo) // 2
        left = int(rng.hypergeometric(mid - lo, hi - mid, n))
        todo += [(2 * node, lo, mid, left), (2 * node + 1, mid, hi, n - left)]
    slow = np.sort(np.concatenate(found)).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
    return slow, np.full(slow.size, float(st.slowdown))


def jitter_sigma(scenario, calibration) -> float:
    """Sigma of the per-rank, per-step log-normal compute noise: the scenario's `faults.jitter`, else the
    documented default of the calibration."""
    given = getattr(scenario.faults, "jitter", None) if scenario.faults else None
    return float(calibration.compute_jitter if given is None else given)


def group_jitter(seed: int, step: int, shape: tuple[int, ...], group_size: int, sigma: float) -> np.ndarray:
    """Speed factors of groups 0 .. prod(shape) - 1 (`group_jitter_of`), shaped `shape` in C order."""
    return group_jitter_of(seed, step, 0, int(np.prod(shape)), group_size, sigma).reshape(shape)


def group_jitter_of(seed: int, step: int, first: int, count: int, group_size: int, sigma: float) -> np.ndarray:
    """Speed factors of groups first .. first + count - 1 of `group_size` ranks that wait for their slowest member.

    Each rank's compute time is scaled by exp(sigma x N(0, 1)), independent per rank and step; a group
    runs at its maximum, drawn directly: with U uniform, max of n standard normals = Phi^-1(U^(1/n)).
    Group g's U is draw g of the step's stream, keyed by (seed, step): the generator jumps to it
    (PCG64 `advance`, one 64-bit output per double), so a group's factor is the same whichever shard draws
    it and whichever other groups are drawn with it. Cost O(count), not O(groups) nor O(ranks).
    """
    if sigma <= 0:
        return np.ones(count)
    rng = np.random.default_rng([seed, step, 0x717])
    rng.bit_generator.advance(first)
    z = _norm_ppf(rng.random(count) ** (1.0 / group_size))
    return np.exp(sigma * z)


def _norm_ppf(p: np.ndarray) -> np.ndarray:
    """Inverse standard normal CDF, vectorized (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = [-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00]
    b = [-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01]
    c = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00]
    d = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00]
    p = np.clip(np.asarray(p, dtype=float), 1e-300, 1 - 1e-16)
    q = np.where(p < 0.5, p, 1 - p)
    low = q < 0.02425
    r = np.sqrt(-2 * np.log(np.where(low, q, 0.5)))
    tail = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / \
        ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1)
    qq = q - 0.5
    t = qq * qq
    mid = (((((a[0] * t + a[1]) * t + a[2]) * t + a[3]) * t + a[4]) * t + a[5]) * qq / \
        (((((b[0] * t + b[1]) * t + b[2]) * t + b[3]) * t + b[4]) * t + 1)
    z = np.where(low, tail, mid)             # z is Phi^-1(q) for q <= 0.5
    return np.where(p < 0.5, z, -z)
