"""Shards' answers → what the driver composes the step from: once per run, each shard's prices of the stages
it prices (`StagePrices`, inside its `ShardState`; `merge_prices` puts them together) and its degraded instances
(`merge_degraded`); per step, its `ShardProfile` (`merge_profiles`).

A shard owns whole instances, so it holds a contiguous range of global ranks and, with them, a contiguous
range of (replica, stage) groups, group id = replica x pp + stage (`cluster.rank_coords`): its tp x cp ranks
are consecutive.

- Chunk times: a pipeline stage's chunks take the same time in every replica, so each stage is priced by
  exactly one shard, the one holding the stage's first rank in replica 0 (`priced_stages`); every other
  shard of that stage prices nothing for it. One owner per stage, not a merge of identical answers: the
  chip model prices a layer's kernels once whatever the number of stages asked, so the fewer shards price,
  the less the run computes. With folding one shard may price every stage; with data parallelism the
  replica-0 shards price and the others answer with none. The pricer reports its stages' chunk times, their
  hardware (TensorE) FLOPs, their unnamed residual and, per layer, the backward matmuls that hide the
  tensor-parallel collectives (`StagePrices`); the driver prices nothing of the chip (`ultracluster.emulate`).
  The merges put these disjoint parts together and check that every stage and chunk is covered exactly once;
  what every pricer computes alike (the attention core, the hiding matmuls: one layer's kernels) must agree.
- Jitter: a group wider than a shard (tp x cp over more ranks than one instance holds, with one instance
  per actor) is held by two or more shards; each draws its speed at the same position of the same keyed
  stream, so their answers for it are identical, and the merge takes a maximum over disjoint-or-identical
  contributions, never a re-draw.
- Stragglers: each shard reports the slow ranks among its own ranks; these are disjoint.

The result is the same whichever folding (instances per actor) the run uses. Cost O(shards + chunks +
groups + slow ranks), never O(ranks).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..chip import ChunkTimes


def priced_stages(layout, first_rank: int, ranks: int) -> np.ndarray:
    """The pipeline stages a shard holding global ranks [first_rank, first_rank + ranks) prices: those whose
    first rank in replica 0 (rank stage x tp x cp, `cluster.rank_coords`) it holds. Every stage has exactly
    one such shard, and it runs that stage."""
    group = layout.tp * layout.cp
    first_of_stage = np.arange(layout.pp, dtype=np.int64) * group
    return np.flatnonzero((first_of_stage >= first_rank) & (first_of_stage < first_rank + ranks))


def stage_chunks(stages: np.ndarray, pp: int, chunks: int) -> np.ndarray:
    """Chunk ids, ascending, of the given stages of a pipeline of `chunks` chunks (chunk c lives on stage
    c % pp, Megatron's interleaved order)."""
    ids = np.arange(chunks, dtype=np.int64)
    return ids[np.isin(ids % pp, stages)]


@dataclass(frozen=True, eq=False)
class StagePrices:
    """One shard's prices of the pipeline stages it prices (`priced_stages`), on the chip model at speed 1; the
    same every step, so reported once, in its `ShardState`.

    Attributes:
        stages: [k] ascending ids of the pipeline stages it prices; often empty.
        chunks: ids of the chunks on those stages, ascending (`stage_chunks`).
        forward_s, backward_s: [chunks] seconds of one microbatch of each of those chunks.
        optimizer_s: [k] seconds of the optimizer step of each of those stages.
        flops_per_microbatch: [chunks] TensorE FLOPs of one microbatch (forward, backward, recomputation:
            the hardware FLOPs of `hfu`).
        residual_s: [chunks] the part of forward_s + backward_s that is the unnamed per-layer residual.
        attention_fwd_s, attention_bwd_s: one layer's attention core per microbatch; NaN when k is 0.
        tp_hide_bwd_s: one layer's backward seconds of the matmuls that hide the tensor-parallel
            collectives (`chip.ChunkTimes.tp_hide_bwd_s`; the same on every stage); empty when k is 0.
    """

    stages: np.ndarray
    chunks: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    optimizer_s: np.ndarray
    flops_per_microbatch: np.ndarray
    residual_s: np.ndarray
    attention_fwd_s: float
    attention_bwd_s: float
    tp_hide_bwd_s: np.ndarray


def stage_prices(times: ChunkTimes | None, stages: np.ndarray, pp: int, n_chunks: int) -> StagePrices:
    """The part of a pipeline's `chip.ChunkTimes` (every chunk, every stage; None when `stages` is empty) on the
    given stages (ascending) of a pipeline of pp stages and n_chunks chunks."""
    stages = np.asarray(stages, dtype=np.int64)
    chunks = stage_chunks(stages, pp, n_chunks)
    if times is None or not stages.size:
        nothing = np.zeros(0)
        return StagePrices(stages=stages, chunks=chunks, forward_s=nothing, backward_s=nothing,
                           optimizer_s=nothing, flops_per_microbatch=nothing, residual_s=nothing,
                           attention_fwd_s=float("nan"), attention_bwd_s=float("nan"), tp_hide_bwd_s=nothing)
    return StagePrices(stages=stages, chunks=chunks, forward_s=times.forward_s[chunks],
                       backward_s=times.backward_s[chunks], optimizer_s=times.optimizer_s[stages],
                       flops_per_microbatch=times.flops_per_microbatch[chunks], residual_s=times.residual_s[chunks],
                       attention_fwd_s=float(times.attention_fwd_s), attention_bwd_s=float(times.attention_bwd_s),
                       tp_hide_bwd_s=np.asarray(times.tp_hide_bwd_s, dtype=float))


def merge_prices(parts: Sequence[StagePrices], pp: int, n_chunks: int) -> ChunkTimes:
    """The shards' `StagePrices` → the whole pipeline's `chip.ChunkTimes`, each stage from the one shard that
    priced it.

    Raises:
        ValueError: a stage or chunk no shard priced or two shards priced, or pricers that disagree on what
            every one of them computes alike (one layer's attention core or hiding matmuls).
    """
    _covered_once([p.stages for p in parts], pp, "pipeline stage", "prices")
    _covered_once([p.chunks for p in parts], n_chunks, "pipeline chunk", "prices")
    fwd, bwd, flops, residual, opt = (np.empty(n) for n in (n_chunks,) * 4 + (pp,))
    for p in parts:
        fwd[p.chunks], bwd[p.chunks], opt[p.stages] = p.forward_s, p.backward_s, p.optimizer_s
        flops[p.chunks], residual[p.chunks] = p.flops_per_microbatch, p.residual_s
    pricers = [p for p in parts if p.stages.size]
    first = pricers[0]
    for p in pricers[1:]:
        if (p.attention_fwd_s, p.attention_bwd_s) != (first.attention_fwd_s, first.attention_bwd_s) \
                or not np.array_equal(p.tp_hide_bwd_s, first.tp_hide_bwd_s):
            raise ValueError(f"the shards' prices disagree on one layer's kernels: stages {first.stages.tolist()} "
                             f"and {p.stages.tolist()} were priced on different models")
    return ChunkTimes(forward_s=fwd, backward_s=bwd, optimizer_s=opt, attention_fwd_s=first.attention_fwd_s,
                      attention_bwd_s=first.attention_bwd_s, flops_per_microbatch=flops,
                      tp_hide_bwd_s=first.tp_hide_bwd_s, residual_s=residual)


@dataclass(frozen=True, eq=False)
class ShardProfile:
    """One shard's compute for one step, over what it owns; sizes do not grow with its cores.

    Attributes:
        shard: the shard's index.
        pipeline_stages, pipeline_chunks: pp and pp x virtual stages of the whole pipeline.
        stages: [k] ascending ids of the pipeline stages this shard prices (`priced_stages`); often empty.
        chunks: ids of the chunks on those stages, ascending (`stage_chunks`).
        forward_s, backward_s: [chunks] seconds of one microbatch of each of those chunks at speed 1.
        optimizer_s: [k] seconds of the optimizer step of each of those stages at speed 1.
        attention_fwd_s, attention_bwd_s: one layer's attention core per microbatch (context-parallel
            overlap); NaN when the shard prices no stage.
        first_group: the first (replica, stage) group the shard holds a rank of.
        group_speed: [groups held] this step's jitter of each held group, first_group onwards: the speed
            factor of its slowest tp x cp member, draw `group` of the stream keyed by (seed, step)
            (`chip.group_jitter_of`).
        slow_ranks, slow_factors: the shard's global ranks that run slower for the whole run, and by how much.
    """

    shard: int
    pipeline_stages: int
    pipeline_chunks: int
    stages: np.ndarray
    chunks: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    optimizer_s: np.ndarray
    attention_fwd_s: float
    attention_bwd_s: float
    first_group: int
    group_speed: np.ndarray
    slow_ranks: np.ndarray
    slow_factors: np.ndarray


@dataclass(frozen=True, eq=False)
class MergedProfile:
    """Every shard's answer for one step, merged: the whole pipeline's compute at speed 1, each group's
    jitter, and the run's slow ranks."""

    forward_s: np.ndarray       # [chunks]
    backward_s: np.ndarray      # [chunks]
    optimizer_s: np.ndarray     # [stages]
    attention_fwd_s: float
    attention_bwd_s: float
    group_speed: np.ndarray     # [replicas x stages] jitter, group id = replica x pp + stage
    slow_ranks: np.ndarray      # sorted int64 global ranks
    slow_factors: np.ndarray


def _covered_once(parts: list[np.ndarray], n: int, what: str, answers: str = "profiles") -> None:
    """Raise ValueError unless the id arrays `parts` cover 0 .. n - 1 exactly once between them (`answers`: what
    the shards answered, for the message)."""
    ids = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    if ((ids < 0) | (ids >= n)).any():
        raise ValueError(f"the shards' {answers} name {what} {sorted(set(ids[(ids < 0) | (ids >= n)].tolist()))}, "
                         f"outside 0-{n - 1}")
    count = np.bincount(ids, minlength=n)
    if (count == 0).any():
        raise ValueError(f"the shards' {answers} do not cover every {what} of the cluster: no shard priced "
                         f"{what} {np.flatnonzero(count == 0).tolist()}")
    if (count > 1).any():
        raise ValueError(f"the shards' {answers} overlap: {what} {np.flatnonzero(count > 1).tolist()} priced by "
                         f"more than one shard")


def merge_profiles(profiles: Sequence[ShardProfile], groups: int) -> MergedProfile:
    """The shards' answers → one profile over the whole cluster: disjoint stage parts put together, group
    speeds that two shards share taken once (they are equal), slow ranks concatenated.

    Args:
        profiles: one per shard.
        groups: replicas x stages of the layout.

    Raises:
        ValueError: a stage, chunk or group that no shard answered for (a shard set that does not cover
            the cluster), a stage or chunk two shards priced, or shards that disagree on the pipeline.
    """
    if not profiles:
        raise ValueError("the shards' profiles do not cover every stage of the cluster: no profiles")
    shape = {(p.pipeline_stages, p.pipeline_chunks) for p in profiles}
    if len(shape) != 1:
        raise ValueError(f"the shards' profiles disagree on the pipeline (stages, chunks): {sorted(shape)}")
    pp, n_chunks = shape.pop()
    _covered_once([p.stages for p in profiles], pp, "pipeline stage")
    _covered_once([p.chunks for p in profiles], n_chunks, "pipeline chunk")
    fwd, bwd, opt = np.empty(n_chunks), np.empty(n_chunks), np.empty(pp)
    for p in profiles:
        fwd[p.chunks], bwd[p.chunks], opt[p.stages] = p.forward_s, p.backward_s, p.optimizer_s
    speed = np.full(groups, np.nan)
    for p in profiles:
        part = speed[p.first_group:p.first_group + p.group_speed.size]
        np.fmax(part, p.group_speed, out=part)
    if np.isnan(speed).any():
        raise ValueError(f"the shards' profiles do not cover every group of the cluster: no speed for group(s) "
                         f"{np.flatnonzero(np.isnan(speed))[:10].tolist()}")
    pricing = next(p for p in profiles if p.stages.size)    # every stage's pricer has the same attention times
    slow = np.concatenate([p.slow_ranks for p in profiles]).astype(np.int64)
    factor = np.concatenate([p.slow_factors for p in profiles]).astype(float)
    order = np.argsort(slow, kind="stable")
    return MergedProfile(forward_s=fwd, backward_s=bwd, optimizer_s=opt,
                         attention_fwd_s=pricing.attention_fwd_s, attention_bwd_s=pricing.attention_bwd_s,
                         group_speed=speed, slow_ranks=slow[order], slow_factors=factor[order])


@dataclass(frozen=True)
class ShardState:
    """What a shard says of the instances it stands for, once, before the first step.

    Attributes:
        shard: shard index.
        first_instance, instances: the contiguous range of instances it owns.
        prices: its prices of the stages it prices (`priced_stages`; `merge_prices`).
        degraded: per `faults.degraded` entry touching them, (entry index, that entry's part restricted to
            this shard's instances); `cluster.DegradedPart`.
    """

    shard: int
    first_instance: int
    instances: int
    prices: StagePrices
    degraded: tuple = ()


def merge_degraded(states: Sequence[ShardState], instances: int) -> tuple:
    """The cluster's degraded parts as the shards own them: each entry's instances put back together, in
    entry order. Every instance must be owned by exactly one shard (a gap or an overlap is an error naming
    the instances)."""
    owned = np.zeros(instances, dtype=np.int64)
    for s in states:
        owned[s.first_instance:s.first_instance + s.instances] += 1
    bad = np.flatnonzero(owned != 1)
    if bad.size:
        raise ValueError(f"instances {bad[:8].tolist()}{' ...' if bad.size > 8 else ''} are owned by "
                         f"{sorted(set(owned[bad].tolist()))} shards each; every instance needs exactly one")
    parts: dict[int, object] = {}
    for s in states:
        for entry, part in s.degraded:
            have = parts.get(entry)
            parts[entry] = part if have is None else replace(have, instances=tuple(sorted(have.instances
                                                                                          + part.instances)))
    return tuple(parts[e] for e in sorted(parts))
