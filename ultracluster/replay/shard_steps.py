"""Shards' answers → what the driver composes the step from. Once per run, each shard's `ShardState`: its times of
the stages it times (`StageTimes`), its slow ranks and its degraded instances, merged once into a `MergedState`
(`merge_states`: `merge_stage_times`, `merge_slow_ranks`, `merge_degraded`). Per step, its `ShardStep`: only
the step's jitter of the groups it holds, merged with the run's `MergedState` into the step's `MergedSteps`
(`merge_shard_steps`). Nothing the shards say once is sent or merged again in a step.

A shard owns whole instances, so it holds a contiguous range of global ranks and, with them, a contiguous
range of (replica, stage) groups, group id = replica x pp + stage (`cluster.rank_coords`): its tp x cp ranks
are consecutive.

- Chunk times: a pipeline stage's chunks take the same time in every replica, so each stage is timed by
  exactly one shard, the one holding the stage's first rank in replica 0 (`timed_stages`); every other
  shard of that stage times nothing for it. One owner per stage, not a merge of identical answers: the
  chip model times a layer's kernels once whatever the number of stages asked, so the fewer shards time,
  the less the run computes. With folding one shard may time every stage; with data parallelism the
  replica-0 shards time them and the others answer with none. The owner reports its stages' chunk times, their
  hardware (TensorE) FLOPs, their unnamed residual and, per layer, the backward matmuls that hide the
  tensor-parallel collectives (`StageTimes`); the driver times nothing of the chip (`ultracluster.emulate`).
  The merge puts these disjoint parts together and checks that every stage and chunk is covered exactly once;
  what every owner computes alike (the attention core, the hiding matmuls: one layer's kernels) must agree.
- Stragglers: each shard reports the slow ranks among its own ranks (the same for the whole run); these are
  disjoint.
- Jitter: a group wider than a shard (tp x cp over more ranks than one instance holds, with one instance
  per actor) is held by two or more shards; each draws its speed at the same position of the same keyed
  stream, so their answers for it are identical, and the merge takes a maximum over disjoint-or-identical
  contributions, never a re-draw.

The result is the same whichever folding (instances per actor) the run uses. Cost once per run O(shards +
chunks + slow ranks), per step O(shards + groups), never O(ranks).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..chip import ChunkTimes
from ..cluster.placement import group_ranks


def timed_stages(layout, first_rank: int, ranks: int) -> np.ndarray:
    """The pipeline stages a shard holding global ranks [first_rank, first_rank + ranks) times: those whose
    first rank in replica 0 (rank stage x tp x cp, `cluster.rank_coords`) it holds. Every stage has exactly
    one such shard, and it runs that stage."""
    group = group_ranks(layout.tp, layout.cp)
    first_of_stage = np.arange(layout.pp, dtype=np.int64) * group
    return np.flatnonzero((first_of_stage >= first_rank) & (first_of_stage < first_rank + ranks))


def stage_chunks(stages: np.ndarray, pp: int, chunks: int) -> np.ndarray:
    """Chunk ids, ascending, of the given stages of a pipeline of `chunks` chunks (chunk c lives on stage
    c % pp, Megatron's interleaved order)."""
    ids = np.arange(chunks, dtype=np.int64)
    return ids[np.isin(ids % pp, stages)]


@dataclass(frozen=True, eq=False)
class StageTimes:
    """One shard's times of the pipeline stages it times (`timed_stages`), on the chip model at speed 1; the
    same every step, so reported once, in its `ShardState`.

    Attributes:
        stages: [k] ascending ids of the pipeline stages it times; often empty.
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


def shard_stage_times(times: ChunkTimes | None, stages: np.ndarray, pp: int, n_chunks: int) -> StageTimes:
    """The part of a pipeline's `chip.ChunkTimes` (every chunk, every stage; None when `stages` is empty) on the
    given stages (ascending) of a pipeline of pp stages and n_chunks chunks."""
    stages = np.asarray(stages, dtype=np.int64)
    chunks = stage_chunks(stages, pp, n_chunks)
    if times is None or not stages.size:
        nothing = np.zeros(0)
        return StageTimes(stages=stages, chunks=chunks, forward_s=nothing, backward_s=nothing,
                          optimizer_s=nothing, flops_per_microbatch=nothing, residual_s=nothing,
                          attention_fwd_s=float("nan"), attention_bwd_s=float("nan"), tp_hide_bwd_s=nothing)
    return StageTimes(stages=stages, chunks=chunks, forward_s=times.forward_s[chunks],
                      backward_s=times.backward_s[chunks], optimizer_s=times.optimizer_s[stages],
                      flops_per_microbatch=times.flops_per_microbatch[chunks], residual_s=times.residual_s[chunks],
                      attention_fwd_s=float(times.attention_fwd_s), attention_bwd_s=float(times.attention_bwd_s),
                      tp_hide_bwd_s=np.asarray(times.tp_hide_bwd_s, dtype=float))


def merge_stage_times(parts: Sequence[StageTimes], pp: int, n_chunks: int) -> ChunkTimes:
    """The shards' `StageTimes` → the whole pipeline's `chip.ChunkTimes`, each stage from the one shard that
    timed it.

    Raises:
        ValueError: a stage or chunk no shard timed or two shards timed, or shards that disagree on what every
            one of them computes alike (one layer's attention core or hiding matmuls).
    """
    _covered_once([p.stages for p in parts], pp, "pipeline stage", "stage times")
    _covered_once([p.chunks for p in parts], n_chunks, "pipeline chunk", "stage times")
    fwd, bwd, flops, residual, opt = (np.empty(n) for n in (n_chunks,) * 4 + (pp,))
    for p in parts:
        fwd[p.chunks], bwd[p.chunks], opt[p.stages] = p.forward_s, p.backward_s, p.optimizer_s
        flops[p.chunks], residual[p.chunks] = p.flops_per_microbatch, p.residual_s
    owners = [p for p in parts if p.stages.size]
    first = owners[0]
    for p in owners[1:]:
        if (p.attention_fwd_s, p.attention_bwd_s) != (first.attention_fwd_s, first.attention_bwd_s) \
                or not np.array_equal(p.tp_hide_bwd_s, first.tp_hide_bwd_s):
            raise ValueError(f"the shards' stage times disagree on one layer's kernels: stages {first.stages.tolist()} "
                             f"and {p.stages.tolist()} were timed on different models")
    return ChunkTimes(forward_s=fwd, backward_s=bwd, optimizer_s=opt, attention_fwd_s=first.attention_fwd_s,
                      attention_bwd_s=first.attention_bwd_s, flops_per_microbatch=flops,
                      tp_hide_bwd_s=first.tp_hide_bwd_s, residual_s=residual)


@dataclass(frozen=True, eq=False)
class ShardStep:
    """One shard's answer for one step: this step's jitter of the (replica, stage) groups it holds. What is the
    same every step (its stage times, its slow ranks) it said once, in its `ShardState`.

    Attributes:
        shard: the shard's index.
        first_group: the first (replica, stage) group the shard holds a rank of.
        group_speed: [groups held] this step's jitter of each held group, first_group onwards: the speed
            factor of its slowest tp x cp member, draw `group` of the stream keyed by (seed, step)
            (`speed_draws.group_jitter_of`).
    """

    shard: int
    first_group: int
    group_speed: np.ndarray


@dataclass(frozen=True, eq=False)
class MergedSteps:
    """One step's compute over the whole cluster: the run's pipeline at speed 1 and slow ranks (the
    `MergedState`'s arrays, shared, not copied) with the step's jitter of each group."""

    forward_s: np.ndarray       # [chunks]
    backward_s: np.ndarray      # [chunks]
    optimizer_s: np.ndarray     # [stages]
    attention_fwd_s: float
    attention_bwd_s: float
    group_speed: np.ndarray     # [replicas x stages] jitter, group id = replica x pp + stage
    slow_ranks: np.ndarray      # sorted int64 global ranks
    slow_factors: np.ndarray


def _covered_once(parts: list[np.ndarray], n: int, what: str, answers: str = "stage times") -> None:
    """Raise ValueError unless the id arrays `parts` cover 0 .. n - 1 exactly once between them (`answers`: what
    the shards answered, for the message)."""
    ids = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    if ((ids < 0) | (ids >= n)).any():
        raise ValueError(f"the shards' {answers} name {what} {sorted(set(ids[(ids < 0) | (ids >= n)].tolist()))}, "
                         f"outside 0-{n - 1}")
    count = np.bincount(ids, minlength=n)
    if (count == 0).any():
        raise ValueError(f"the shards' {answers} do not cover every {what} of the cluster: no shard timed "
                         f"{what} {np.flatnonzero(count == 0).tolist()}")
    if (count > 1).any():
        raise ValueError(f"the shards' {answers} overlap: {what} {np.flatnonzero(count > 1).tolist()} timed by "
                         f"more than one shard")


def merge_shard_steps(shard_steps: Sequence[ShardStep], state: MergedState, groups: int) -> MergedSteps:
    """The shards' answers for one step → one merged step over the whole cluster: the run's `state` (merged once)
    with the step's group speeds, those two shards share taken once (they are equal).

    Args:
        steps: one per shard.
        state: the shards' once-per-run answers, merged (`merge_states`).
        groups: replicas x stages of the layout.

    Raises:
        ValueError: a group that no shard answered for (a shard set that does not cover the cluster).
    """
    speed = np.full(groups, np.nan)
    for p in shard_steps:
        part = speed[p.first_group:p.first_group + p.group_speed.size]
        np.fmax(part, p.group_speed, out=part)
    if np.isnan(speed).any():
        raise ValueError(f"the shards' steps do not cover every group of the cluster: no speed for group(s) "
                         f"{np.flatnonzero(np.isnan(speed))[:10].tolist()}")
    times = state.times
    return MergedSteps(forward_s=times.forward_s, backward_s=times.backward_s, optimizer_s=times.optimizer_s,
                         attention_fwd_s=times.attention_fwd_s, attention_bwd_s=times.attention_bwd_s,
                         group_speed=speed, slow_ranks=state.slow_ranks, slow_factors=state.slow_factors)


@dataclass(frozen=True, eq=False)
class ShardState:
    """What a shard says once, before the first step: the instances it stands for and what stays the same in
    every step.

    Attributes:
        shard: shard index.
        first_instance, instances: the contiguous range of instances it owns.
        stage_times: its times of the stages it times (`timed_stages`; `merge_stage_times`).
        slow_ranks, slow_factors: its global ranks that run slower for the whole run, and by how much.
        degraded: per `faults.degraded` entry touching them, (entry index, that entry's part restricted to
            this shard's instances); `cluster.DegradedPart`.
    """

    shard: int
    first_instance: int
    instances: int
    stage_times: StageTimes
    slow_ranks: np.ndarray
    slow_factors: np.ndarray
    degraded: tuple = ()


@dataclass(frozen=True, eq=False)
class MergedState:
    """Every shard's once-per-run answer, merged once (`merge_states`): the whole pipeline's chunk times, the
    run's slow ranks and the cluster's degraded parts as the shards own them."""

    times: ChunkTimes
    slow_ranks: np.ndarray      # sorted int64 global ranks
    slow_factors: np.ndarray
    degraded: tuple


def merge_slow_ranks(states: Sequence[ShardState]) -> tuple[np.ndarray, np.ndarray]:
    """The shards' slow ranks (disjoint) → (sorted global ranks, their factors)."""
    slow = np.concatenate([s.slow_ranks for s in states]).astype(np.int64) if states else np.zeros(0, np.int64)
    factor = np.concatenate([s.slow_factors for s in states]).astype(float) if states else np.zeros(0)
    order = np.argsort(slow, kind="stable")
    return slow[order], factor[order]


def merge_states(states: Sequence[ShardState], pp: int, n_chunks: int, instances: int) -> MergedState:
    """The shards' `ShardState`s → the run's `MergedState`, once: their stage times (`merge_stage_times`), slow
    ranks (`merge_slow_ranks`) and degraded parts (`merge_degraded`) put together and checked."""
    slow, factor = merge_slow_ranks(states)
    return MergedState(times=merge_stage_times([s.stage_times for s in states], pp, n_chunks),
                       slow_ranks=slow, slow_factors=factor, degraded=merge_degraded(states, instances))


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
