"""Operator work → seconds: the vectorized NeuronCore chip model.

An operator's time on one rank is the roofline over the engines it uses and the HBM bytes it moves,
with the engines overlapping: max(tensor / TensorE rate, vector / VectorE rate, scalar / ScalarE rate,
bytes / HBM share), each rate being the catalog peak times a named calibration factor. A rank is a
logical NeuronCore: `lnc` physical cores with their engines, and its chip's HBM bandwidth divided by the
ranks of that chip. Everything is numpy over operators and pipeline chunks; per-rank speed factors
(stragglers, jitter: drawn by `speed_draws`) multiply the results as arrays, so the cost grows with distinct shapes,
not with cores.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from . import operators as opslib, stacks
from .cluster import Cluster, stage_sum
from .frozen import kept, read_only


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
# TensorE's peak from its structure: each of the 128 x 128 processing elements does one multiply-accumulate (2
# FLOPs) per cycle on BF16/FP16/TF32/cFP8 inputs (H4 "2x128 (input)" elements per cycle at 2.8 GHz on
# NeuronCore-v2: 92 TFLOPS; H8 2.4 GHz on v3: 79), the other precisions at the catalog's ratio to BF16 (FP32 4x
# slower, H4; double-FP8 2x faster, H8; MX 4x, T3).
PE_FLOPS_PER_CYCLE = 2 * PE_ROWS * PE_COLS
# Fast LoadStationary: a 128 x 128 stationary tile loads up to 4x faster than a MultiplyMoving of the same free
# size (H4, H24: LS_II ~ 128 / 4 = 32 cycles) and in the background of the previous MultiplyMoving, so a
# MultiplyMoving shorter than 32 cycles waits for the next stationary load.
LS_CYCLES = PE_COLS / 4


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
    structure: bool = True          # TensorE's instruction stream and PSUM eviction (`Calibration.tensor_structure`)


def rank_rates(cluster: Cluster, precision: str) -> RankRates:
    """Calibrated engine rates of one rank of `cluster` at a training precision."""
    chip, cal, lnc, per_chip = cluster.chip, cluster.calibration, cluster.lnc, cluster.ranks_per_chip
    if cal.engine_clock_rates and chip.vector_hz > 0 and chip.scalar_hz > 0:
        vector, scalar = ENGINE_LANES * chip.vector_hz, ENGINE_LANES * chip.scalar_hz
    else:   # the product pages' FP32 TFLOPS, read as element passes (the switch's "off" position)
        vector, scalar = chip.vector_flop_per_s_per_core, chip.scalar_flop_per_s_per_core
    peak = chip.tensor_flop_per_s_per_core[precision]
    hbm = min(chip.hbm_bytes_per_s * cal.hbm_peak_scale(chip.name), chip.dma_bytes_per_s) / per_chip * cal.hbm_efficiency
    if cal.tensor_structure and chip.tensor_hz > 0:
        # the PE array's clock rate, the catalog's precision ratio; HBM <-> SBUF through 16 DMA engines per physical
        # core (464, 368, 528 GB/s on Trainium 1, 2, 3), above a core's HBM share at hbm_efficiency 0.8 on all three
        peak = PE_FLOPS_PER_CYCLE * chip.tensor_hz * peak / chip.tensor_flop_per_s_per_core["bf16"]
        if chip.dma_core_bytes_per_s > 0:
            hbm = min(hbm, chip.dma_core_bytes_per_s * lnc)
    return RankRates(
        tensor_flop_per_s=peak * cal.tensor_peak_scale(chip.name, precision) * lnc * cal.tensor_efficiency,
        vector_elem_per_s=vector * lnc * cal.vector_efficiency,
        scalar_elem_per_s=scalar * lnc * cal.vector_efficiency,
        gpsimd_elem_per_s=chip.gpsimd_hz * GPSIMD_LANES * lnc * cal.vector_efficiency,
        hbm_bytes_per_s=hbm,
        sbuf_bytes=chip.sbuf_bytes_per_core * lnc,
        kernel_launch_s=cal.kernel_launch_s,
        fusion=cal.fusion,
        serial_engines=cal.attention_serial,
        structure=cal.tensor_structure,
    )


def _fill(dim: np.ndarray, tile: int) -> np.ndarray:
    """Fraction of tiles of size `tile` that a dimension of size `dim` fills (1 where dim is 0)."""
    dim = np.asarray(dim, dtype=float)
    return np.where(dim > 0, dim / (tile * np.ceil(np.maximum(dim, 1) / tile)), 1.0)


def _moving_fill(m: np.ndarray, structure: bool = False) -> np.ndarray:
    """Fraction of TensorE cycles a moving dimension of `m` columns uses: full tiles of 512 plus a last
    tile that costs at least 64 cycles (H4); with `structure`, every MultiplyMoving also waits for its
    stationary tile's background load (LS_CYCLES, H4 and H24), which binds only below 32 columns."""
    m = np.asarray(m, dtype=float)
    rest = np.mod(m, MOVING_TILE)
    floor = np.maximum(MM_INIT_CYCLES, LS_CYCLES) if structure else MM_INIT_CYCLES
    cycles = MOVING_TILE * np.floor(m / MOVING_TILE) + np.where(rest > 0, np.maximum(rest, floor), 0.0)
    return np.where(m > 0, m / np.maximum(cycles, 1.0), 1.0)


def tensor_utilization(m: np.ndarray, k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Fraction of TensorE peak a matmul's shape can use: contraction over rows, stationary over columns,
    moving dimension over its initiation interval."""
    return _fill(k, PE_ROWS) * _fill(n, PE_COLS) * _moving_fill(m)


def psum_evictions(work: dict[str, np.ndarray], phase: str) -> np.ndarray:
    """Elements a matmul kernel's outputs take from PSUM back to SBUF: TensorE writes FP32 to PSUM only, and
    VectorE or ScalarE copies every output element out once its accumulation over the contraction tiles is done
    (H4: "TensorE must read input matrices from SBUF and write output matrices to PSUM"). Forward: the m x n output
    (FLOPs / 2k); backward: the input gradient m x k and the weight gradient k x n (FLOPs / 4n + FLOPs / 4m), per
    expert for mixture-of-experts matmuls. 0 for operators whose own vector work already reads their PSUM tiles
    (`evicts: false`: the attention kernels' softmax) and for operators without a matmul."""
    zero = np.zeros_like(work["tensor"])
    m, k, n = (work.get(d, zero) for d in ("m", "k", "n"))
    flops = work["tensor"]
    with np.errstate(divide="ignore", invalid="ignore"):
        if phase == "forward":
            out = np.where(k > 0, flops / (2.0 * np.maximum(k, 1.0)), 0.0)
        else:
            out = np.where((m > 0) & (n > 0), flops / (4.0 * np.maximum(n, 1.0)) + flops / (4.0 * np.maximum(m, 1.0)),
                           0.0)
    evicts = work.get("evicts")
    if evicts is not None:
        out = np.where(evicts.reshape(evicts.shape + (1,) * (out.ndim - 1)), out, 0.0)
    return np.where((flops > 0) & (m > 0) & (k > 0) & (n > 0), out, 0.0)


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


def kernel_work(work: dict[str, np.ndarray], structure: bool, fusion: bool, phase: str = "forward") -> dict:
    """What `op_seconds` reads of the work before any rate: the work with its PSUM evictions on VectorE (`structure`)
    and fused kernels (`fusion`), "m", "k", "n", "gpsimd" (0 where not given) and "util" (TensorE's share of peak at
    each matmul's shape). Kept by the work's identity where its arrays are read-only (`kept_layer_work`'s, held by
    the entry): a run's kernels and its interval's settings time the same shapes under many rates."""
    if isinstance(work.get("tensor"), np.ndarray) and not work["tensor"].flags.writeable:
        return kept(_KERNEL_WORK, (id(work), structure, fusion, phase),
                    lambda: (work, read_only(_kernel_work(work, structure, fusion, phase))), 256)[1]
    return _kernel_work(work, structure, fusion, phase)


def _kernel_work(work: dict[str, np.ndarray], structure: bool, fusion: bool, phase: str) -> dict:
    if structure and "tensor" in work:
        work = dict(work)
        work["vector"] = work["vector"] + psum_evictions(work, phase)   # the evictions run on VectorE (H4)
    if fusion:
        work = fuse_kernels(work)
    zero = np.zeros_like(work["tensor"])
    m, k, n = (work.get(d, zero) for d in ("m", "k", "n"))
    out = {**work, "m": m, "k": k, "n": n, "gpsimd": work.get("gpsimd", zero),
           "util": _fill(k, PE_ROWS) * _fill(n, PE_COLS) * _moving_fill(m, structure)}
    return out


_KERNEL_WORK: dict[tuple, tuple] = {}     # `kernel_work` of kept work, by its identity (the entry holding it)


def op_seconds(work: dict[str, np.ndarray], rates: RankRates, e: float = 2.0, w: float = 2.0,
               phase: str = "forward", at: np.ndarray | None = None) -> np.ndarray:
    """Roofline time of each kernel with its engines overlapping: arrays of engine work in, seconds out.

    Args:
        work: arrays "tensor" (FLOPs), "vector", "scalar", "gpsimd" (element passes), "bytes" (HBM), and
            optionally the matmul shape "m", "k", "n" (0 where the operator has no matmul) and "host" (the
            kernel each operator runs in; fused when `rates.fusion`). rates: the rank's calibrated rates.
        e, w: bytes per activation and per weight element (for SBUF re-reads).
        phase: "forward" or "backward" (which outputs a matmul evicts from PSUM, `psum_evictions`).
        at: the column of `work` (at distinct shapes) each entry of `rates` takes (an interval's settings); None:
            work at the rates' entries. `kernel_work` is found at the distinct shapes: the same numbers either way.
    Returns seconds per operator row: a kernel's time (its roofline plus the fixed kernel launch) on its host's
    row, 0 on the rows of operators fused into it and of operators that do no work."""
    return _roofline(kernel_work(work, _structure(rates), bool(rates.fusion), phase), rates, e, w, at)


def _structure(rates: RankRates) -> bool:
    """`rates.structure` as one switch (a `stack_rates` holds the first rank's)."""
    return bool(np.all(rates.structure)) if not isinstance(rates.structure, bool) else rates.structure


def _roofline(kw: dict, rates: RankRates, e, w, at) -> np.ndarray:
    """`op_seconds` of `kernel_work`'s `kw`, elementwise (several works joined: each its own seconds, `layer_costs`)."""
    if at is not None:
        kw = {**kw, **{x: kw[x][:, at] for x in ("tensor", "vector", "scalar", "gpsimd", "bytes", "m", "k", "n", "util")}}
    m, k, n = kw["m"], kw["k"], kw["n"]
    hbm = kw["bytes"] + np.where(kw["tensor"] > 0, sbuf_rereads(m, k, n, e, w, rates.sbuf_bytes), 0.0)
    engines = np.stack([kw["tensor"] / (rates.tensor_flop_per_s * kw["util"]), kw["vector"] / rates.vector_elem_per_s,
                        kw["scalar"] / rates.scalar_elem_per_s, kw["gpsimd"] / rates.gpsimd_elem_per_s])
    serial = kw.get("serial", np.zeros(engines.shape[1], dtype=bool))
    serial = serial.reshape(serial.shape + (1,) * (engines.ndim - 2)) & rates.serial_engines
    busy = np.maximum(np.where(serial, engines.sum(axis=0), engines.max(axis=0)), hbm / rates.hbm_bytes_per_s)
    return np.where(busy > 0, busy + rates.kernel_launch_s, 0.0)


@dataclass(frozen=True)
class ChunkTimes:
    """Compute seconds per microbatch of each pipeline chunk on a rank at speed 1, arrays indexed by chunk id =
    virtual stage x pp + stage (Megatron's interleaved order), so chunk c lives on stage c % pp."""

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


def stack_rates(rates: list[RankRates]) -> RankRates:
    """Several ranks' rates as one RankRates of arrays [K] (the switches, bools, from the first)."""
    return RankRates(**{f.name: getattr(rates[0], f.name) if isinstance(getattr(rates[0], f.name), bool)
                        else np.array([getattr(r, f.name) for r in rates], dtype=float) for f in fields(RankRates)})


def _sum0(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0, each column as numpy sums a 1-D array (pairwise): the same bits whatever the other
    columns hold, and the same as one layout's `a[:, 0].sum()`."""
    return np.ascontiguousarray(a.T if a.ndim <= 2 else np.moveaxis(a, 0, -1)).sum(axis=-1)     # (.T: the same, cheaper)


@dataclass(frozen=True)
class LayerCosts:
    """Seconds and TensorE FLOPs of one microbatch at speed 1 for K per-rank shapes, arrays [K]."""

    layer_fwd: np.ndarray        # one layer's forward, its unnamed residual included
    layer_bwd: np.ndarray        # its backward and recomputation, the residual of both included
    overhead: np.ndarray         # `Calibration.layer_overhead_s`: the unnamed residual of one layer's pass
    passes: np.ndarray           # its passes per microbatch: forward 1, backward 2, + 1 recomputed under full
    emb_fwd: np.ndarray
    emb_bwd: np.ndarray
    head_fwd: np.ndarray
    head_bwd: np.ndarray
    attn_fwd: np.ndarray         # one layer's attention core (whichever kernel the job runs)
    attn_bwd: np.ndarray
    hide: np.ndarray             # [K, kernels] backward seconds of the matmuls hiding the TP collectives
    layer_flops: np.ndarray      # forward + backward + recomputed forward of one layer
    emb_flops: np.ndarray        # forward + backward
    head_flops: np.ndarray


LAYER_WORK = (("layer", "forward"), ("layer", "backward"), ("embedding", "forward"), ("embedding", "backward"),
              ("head", "forward"), ("head", "backward"))


def layer_work(ops, v: dict[str, np.ndarray], wheres: tuple = LAYER_WORK) -> dict[tuple[str, str], dict]:
    """The engine work `layer_costs` times (or of other `wheres`), by (where, phase): `operators.evaluate` of K
    shapes (no calibration's rates in it: shapes timed under many calibrations can share it, `layer_costs`' `at`)."""
    return {wp: opslib.evaluate(ops, *wp, v) for wp in wheres}


def kept_layer_work(ops, v: dict[str, np.ndarray], wheres: tuple = LAYER_WORK) -> dict:
    """`layer_work`, kept by the operators' identities and the variables' values (the last 64; arrays read-only): a
    run's per-layer kernels (`chunk_times`) and its interval's settings, timing one shape, evaluate it once."""
    key = (tuple(map(id, ops)), wheres) + tuple((n, a.dtype.str, a.shape, a.tobytes())
                                         for n, a in sorted((n, np.asarray(x)) for n, x in v.items()))
    def make():         # (the operators held: their identities stay theirs)
        work = layer_work(ops, v, wheres)
        return tuple(ops), read_only(work)
    return kept(_LAYER_WORK, key, make, 64)[1]


_LAYER_WORK: dict[tuple, tuple] = {}


def _distinct_work(ops, v: dict[str, np.ndarray], wheres: tuple) -> tuple[dict, np.ndarray]:
    """`layer_work(ops, v, wheres)` at v's distinct entries (by their bytes) in the order they first appear, kept
    (`kept_layer_work`), and [entries] the distinct entry of each."""
    m = np.ascontiguousarray(np.stack([np.asarray(v[x], dtype=float) for x in sorted(v)]).T)     # [entries, v]
    _, first, inv = np.unique(m.view(np.dtype((np.void, m.itemsize * m.shape[1]))).ravel(), return_index=True, return_inverse=True)
    firsts = np.sort(first)
    return (kept_layer_work(ops, {x: a[firsts] for x, a in v.items()}, wheres),
            np.searchsorted(firsts, first)[inv.reshape(-1)])


def layer_costs(ops, v: dict[str, np.ndarray], rates: RankRates, recompute: np.ndarray, overhead: np.ndarray,
                flash_attention: bool, work: dict | None = None, at: np.ndarray | None = None) -> LayerCosts:
    """Time the layer, embedding and head kernels of K shapes at once (one `evaluate` per where and phase; their
    kernels in one roofline, `_roofline`).

    Args:
        ops: the applicable operator library; v: shape variables, arrays [K]; rates: `stack_rates` [K].
        recompute: [K] "none", "selective", "selective_mlp" (`operators.recompute_mode`) or "full"; overhead: [K]
            `Calibration.layer_overhead_s`. flash_attention: the calibration's switch (the flash kernel's backward
            recomputes the scores itself, so selective recomputation does not run the attention core twice).
        work: `layer_work(ops, v)` when the caller has it (`kept_layer_work`'s: what the rates do not enter is kept
            with it, `op_seconds`). at: [K] the shape of `work` each of the K takes (`work` at distinct shapes:
            the settings of an interval share theirs); None: `work` is at the K shapes.
    """
    works = layer_work(ops, v) if work is None else work
    kws = tuple(kernel_work(works[wp], _structure(rates), bool(rates.fusion), wp[1]) for wp in LAYER_WORK)

    def join():         # the six kernels' works as one (one roofline, the same numbers), with them
        return kws, {x: np.concatenate([kw.get(x, np.zeros(kw["tensor"].shape[0], dtype=bool)) for kw in kws])
                     for x in ("tensor", "vector", "scalar", "gpsimd", "bytes", "m", "k", "n", "util", "serial")}
    kept_too = all(not kw["tensor"].flags.writeable for kw in kws)      # kept where they are
    joined = (kept(_KERNEL_WORK, ("joined",) + tuple(map(id, kws)), lambda: read_only(join()), 256) if kept_too
              else join())[1]
    secs = dict(zip(LAYER_WORK, np.split(_roofline(joined, rates, v["e"], v["w"], at),
                                         np.cumsum([kw["tensor"].shape[0] for kw in kws])[:-1])))

    def kernels(where: str, phase: str):
        w = works[(where, phase)]
        return secs[(where, phase)], (w if at is None else {**w, "tensor": w["tensor"][:, at]})

    lf, wf = kernels("layer", "forward")
    lb, wb = kernels("layer", "backward")
    # selective recomputation repeats the marked operators' forward, full recomputation all of it
    selective = wf["recompute"] == "selective"
    if flash_attention:
        selective &= wf["names"] != "attention_core"
    with_mlp = selective | (wf["recompute"] == "mlp")   # "selective_mlp": the MLP block checkpointed as well
    mode = np.asarray(recompute)
    full, sel, sel_mlp = mode == "full", mode == "selective", mode == "selective_mlp"

    def repeated(a: np.ndarray) -> np.ndarray:      # [K] the recomputed operators' share of a [ops, K] array
        return np.where(full, _sum0(a), np.where(sel, _sum0(a[selective]),
                                                 np.where(sel_mlp, _sum0(a[with_mlp]), 0.0)))
    ef, wef = kernels("embedding", "forward")
    eb, web = kernels("embedding", "backward")
    hf, whf = kernels("head", "forward")
    hb, whb = kernels("head", "backward")
    attn = np.isin(wf["names"], ("attention_core", "attention_materialized"))
    again = full.astype(float)
    return LayerCosts(
        layer_fwd=_sum0(lf) + overhead, layer_bwd=_sum0(lb) + repeated(lf) + overhead * (2.0 + again),
        overhead=np.asarray(overhead, dtype=float), passes=3.0 + again, emb_fwd=_sum0(ef), emb_bwd=_sum0(eb),
        head_fwd=_sum0(hf), head_bwd=_sum0(hb), attn_fwd=_sum0(lf[attn]), attn_bwd=_sum0(lb[attn]),
        hide=lb[wb["hides_tp"]].T, layer_flops=_sum0(wf["tensor"]) + _sum0(wb["tensor"]) + repeated(wf["tensor"]),
        emb_flops=_sum0(wef["tensor"]) + _sum0(web["tensor"]), head_flops=_sum0(whf["tensor"]) + _sum0(whb["tensor"]))


def chunk_rows(costs: LayerCosts, k: np.ndarray, layers: np.ndarray, stage_ends: bool,
               launch: np.ndarray, graphs: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """(forward, backward, TensorE FLOPs, residual) seconds per microbatch of every chunk, [n, chunks], of n
    layouts with shapes k [n] of `costs`, chunks of `layers` layers, host launches `launch` [n], and the
    training stack's pipeline engine (`graphs`: seconds its graph executions add to a microbatch's forward and
    backward on every stage, [n] each; `stacks.graph_seconds`)."""
    fwd = layers[None, :] * costs.layer_fwd[k, None]
    bwd = layers[None, :] * costs.layer_bwd[k, None]
    if stage_ends:   # NxD and NeMo: the embedding on the first chunk, norm, LM head and loss on the last
        fwd[:, 0] += costs.emb_fwd[k]
        bwd[:, 0] += costs.emb_bwd[k]
        fwd[:, -1] += costs.head_fwd[k]
        bwd[:, -1] += costs.head_bwd[k]
    else:            # the switch's off position: the same work spread evenly over the chunks
        fwd += ((costs.emb_fwd[k] + costs.head_fwd[k]) / layers.size)[:, None]
        bwd += ((costs.emb_bwd[k] + costs.head_bwd[k]) / layers.size)[:, None]
    fwd += launch[:, None]          # each microbatch's forward and backward graph is launched by the host
    bwd += launch[:, None]
    if graphs is not None:          # the stack's engine: each mark_step of a microbatch is one graph execution
        fwd += np.asarray(graphs[0], dtype=float)[:, None]
        bwd += np.asarray(graphs[1], dtype=float)[:, None]
    flops = layers[None, :] * costs.layer_flops[k, None]
    flops[:, 0] += costs.emb_flops[k]
    flops[:, -1] += costs.head_flops[k]
    return fwd, bwd, flops, layers[None, :] * costs.overhead[k, None] * costs.passes[k, None]


def optimizer_seconds(ops, v: dict[str, np.ndarray], rates: RankRates, k: np.ndarray,
                      params: np.ndarray, kept: bool = False) -> np.ndarray:
    """[n, stages] gradient norm, clipping and optimizer step of a rank holding `params` [n, stages]
    parameters (its optimizer-state share), layouts of shapes k [n] (v, rates arrays [K]). `kept`: the work of
    each distinct shape and parameters evaluated once and kept (a run's and its interval's settings')."""
    n, s = params.shape
    V = {name: np.repeat(val[k], s) for name, val in v.items()}
    V["T"], V["P"] = np.ones(n * s), params.reshape(-1)
    R = RankRates(**{f.name: np.repeat(getattr(rates, f.name)[k], s) if isinstance(getattr(rates, f.name), np.ndarray)
                     else getattr(rates, f.name) for f in fields(RankRates)})
    if kept:
        work, at = _distinct_work(ops, V, (("optimizer", "forward"),))
        work = work[("optimizer", "forward")]
    else:
        work, at = opslib.evaluate(ops, "optimizer", "forward", V), None
    return op_seconds(work, R, V["e"], V["w"], at=at).sum(axis=0).reshape(n, s)


def optimizer_params(dense: np.ndarray, expert: np.ndarray, dp: np.ndarray, ep: np.ndarray, opt_sharded: np.ndarray,
                     pp: int) -> np.ndarray:
    """[n, pp] parameters whose optimizer state a rank of each stage updates: its dp share under ZeRO-1 and up."""
    held = np.where(np.asarray(opt_sharded)[:, None],
                    opslib.dp_share(dense, expert, np.asarray(dp)[:, None], np.asarray(ep)[:, None]), dense + expert)
    return stage_sum(held, pp)


def tp_hide_seconds(scenario, cluster: Cluster, library: tuple[opslib.Operator, ...] | None = None) -> np.ndarray:
    """Backward seconds of one layer's matmuls that hide tensor-parallel collectives (`hides_tp` kernels, in
    library order: the attention block's, then the MLP block's), per microbatch at speed 1."""
    return chunk_times(scenario, cluster, library).tp_hide_bwd_s


def chunk_times(scenario, cluster: Cluster, library: tuple[opslib.Operator, ...] | None = None,
                stages: np.ndarray | None = None) -> ChunkTimes:
    """Time every pipeline chunk of a scenario on the chip model (library: default the scenario's), as a
    batch of one (`layer_costs`, `chunk_rows`, `optimizer_seconds`: the planner times thousands with them).

    With `stages` (ascending stage ids), only those stages: forward_s, backward_s and flops_per_microbatch
    hold the chunks on them (chunk c lives on stage c % pp) in chunk order, optimizer_s one entry per given
    stage; every number is the one the full table has. The per-layer kernels are timed either way."""
    cal, layout, t = cluster.calibration, cluster.layout, scenario.training
    ops = opslib.applicable(library if library is not None else opslib.library_for(scenario), scenario, cal)
    v = {name: np.array([x], dtype=float) for name, x in opslib.shape_variables(scenario, layout, cal).items()}
    rates = stack_rates([rank_rates(cluster, t.precision)])
    costs = layer_costs(ops, v, rates, np.array([opslib.recompute_mode(t)]), np.array([cal.layer_overhead_s]),
                        cal.flash_attention, kept_layer_work(ops, v))
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    k = np.zeros(1, dtype=np.int64)
    graph_f, graph_b = stacks.graph_seconds(scenario.stack, layout.pp, cal)
    fwd, bwd, flops, residual = (a[0] for a in chunk_rows(costs, k, layers, cal.stage_ends,
                                                          np.array([cal.microbatch_launch_s]),
                                                          (np.array([graph_f]), np.array([graph_b]))))
    ep = scenario.parallelism.ep
    dense, expert = opslib.chunk_params_split(scenario.model, layout.tp, layers, layout.pp, ep)
    params = optimizer_params(dense[None, :], expert[None, :], np.array([layout.dp]), np.array([ep]),
                              np.array([opslib.sharding(t).optimizer]), layout.pp)
    on = np.arange(layout.pp) if stages is None else np.asarray(stages, dtype=np.int64)
    opt = optimizer_seconds(ops, v, rates, k, params[:, on], kept=True)[0]
    if stages is not None:
        mine = np.isin(np.arange(layers.size) % layout.pp, on)
        fwd, bwd, flops, residual = fwd[mine], bwd[mine], flops[mine], residual[mine]
    return ChunkTimes(forward_s=fwd, backward_s=bwd, optimizer_s=opt, attention_fwd_s=float(costs.attn_fwd[0]),
                      attention_bwd_s=float(costs.attn_bwd[0]), flops_per_microbatch=flops,
                      tp_hide_bwd_s=costs.hide[0], residual_s=residual)
