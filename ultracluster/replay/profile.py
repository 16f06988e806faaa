"""Shards' answers for one step → one merged compute profile: `ShardProfile` (what an actor returns) and
`merge_profiles` (what the driver makes of them).

A shard owns whole instances, so it holds a contiguous range of global ranks and, with them, a contiguous
range of (replica, stage) groups, group id = replica x pp + stage (`cluster.rank_coords`): its tp x cp ranks
are consecutive. A group wider than a shard (tp x cp over more ranks than one instance holds, with one
instance per actor) is held by two or more shards; each draws its speed at the same position of the same
keyed stream, so their answers for it are identical. The merge is therefore a maximum over
disjoint-or-identical contributions, never a re-draw: the result is the same whichever folding (instances
per actor) the run uses. Cost O(shards x chunks + groups + slow ranks), never O(ranks).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True, eq=False)
class ShardProfile:
    """One shard's compute for one step, over what it owns; sizes do not grow with its cores.

    Attributes:
        shard: the shard's index.
        forward_s, backward_s: [chunks] seconds of one microbatch of each pipeline chunk at speed 1; NaN for
            the chunks of stages the shard holds no rank of.
        optimizer_s: [stages] seconds of the optimizer step at speed 1; NaN for stages it holds no rank of.
        attention_fwd_s, attention_bwd_s: one layer's attention core per microbatch (context-parallel overlap).
        first_group: the first (replica, stage) group the shard holds a rank of.
        group_speed: [groups held] this step's jitter of each held group, first_group onwards: the speed
            factor of its slowest tp x cp member, draw `group` of the stream keyed by (seed, step)
            (`chip.group_jitter_of`).
        slow_ranks, slow_factors: the shard's global ranks that run slower for the whole run, and by how much.
    """

    shard: int
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


def merge_profiles(profiles: Sequence[ShardProfile], groups: int) -> MergedProfile:
    """The shards' disjoint-or-identical answers → one profile over the whole cluster.

    Args:
        profiles: one per shard.
        groups: replicas x stages of the layout.

    Raises:
        ValueError: a chunk, stage or group that no shard answered for (a shard set that does not cover
            the cluster).
    """
    fwd = np.fmax.reduce([p.forward_s for p in profiles])
    bwd = np.fmax.reduce([p.backward_s for p in profiles])
    opt = np.fmax.reduce([p.optimizer_s for p in profiles])
    speed = np.full(groups, np.nan)
    for p in profiles:
        part = speed[p.first_group:p.first_group + p.group_speed.size]
        np.fmax(part, p.group_speed, out=part)
    if np.isnan(fwd).any() or np.isnan(bwd).any() or np.isnan(opt).any() or np.isnan(speed).any():
        raise ValueError("the shards' profiles do not cover every chunk, stage and group of the cluster")
    slow = np.concatenate([p.slow_ranks for p in profiles]).astype(np.int64)
    factor = np.concatenate([p.slow_factors for p in profiles]).astype(float)
    order = np.argsort(slow, kind="stable")
    return MergedProfile(forward_s=fwd, backward_s=bwd, optimizer_s=opt,
                         attention_fwd_s=max(p.attention_fwd_s for p in profiles),
                         attention_bwd_s=max(p.attention_bwd_s for p in profiles),
                         group_speed=speed, slow_ranks=slow[order], slow_factors=factor[order])
