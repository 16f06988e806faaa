"""Layout → rank placement: which rank sits where, and which ranks form each parallel group.

Ranks are numbered the way NxD/Megatron number them: tensor-parallel innermost, then context parallel,
then pipeline stage, then data parallel outermost, so that a tensor-parallel group occupies consecutive
ranks inside one NeuronLink domain and data parallelism spans instances. Global rank r lives on instance
r // ranks_per_instance, chip (r % ranks_per_instance) // ranks_per_chip.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Layout:
    """Parallel degrees: ranks = tp * cp * pp * dp."""

    tp: int
    cp: int
    pp: int
    dp: int
    virtual_stages: int = 1

    @property
    def ranks(self) -> int:
        return replica_ranks(self.tp, self.cp, self.pp) * self.dp


def group_ranks(tp: int, cp: int) -> int:
    """Ranks of one (replica, stage) group, consecutive: tp x cp (the ranks a group's jitter and a stage's chunk
    times are shared by)."""
    return tp * cp


def replica_ranks(tp: int, cp: int, pp: int) -> int:
    """Ranks of one data-parallel replica, consecutive: tp x cp x pp, the stride between a rank and its
    data-parallel (and expert-parallel) peers."""
    return tp * cp * pp


def group_first_rank(tp: int, cp: int, pp: int, replica, stage):
    """First global rank of the (replica, stage) group(s) (ints or arrays): (replica x pp + stage) x tp x cp."""
    return (replica * pp + stage) * group_ranks(tp, cp)


def instance_of(ranks, ranks_per_instance: int):
    """The instance each global rank lives on (ints or arrays): rank // ranks per instance."""
    return ranks // ranks_per_instance


def instance_ranks(instances, ranks_per_instance: int) -> np.ndarray:
    """The global ranks of the given instances, [instances x ranks per instance], instance by instance."""
    first = np.asarray(instances, dtype=np.int64)[:, None] * ranks_per_instance
    return (first + np.arange(ranks_per_instance)[None, :]).ravel()


def rank_coords(layout: Layout, ranks: np.ndarray) -> dict[str, np.ndarray]:
    """Parallel coordinates of global ranks.

    Args:
        layout: the parallel degrees.
        ranks: int array of global rank ids.

    Returns:
        Dict of int arrays shaped like `ranks`: "tp", "cp", "pp", "dp".
    """
    r = np.asarray(ranks, dtype=np.int64)
    return {
        "tp": r % layout.tp,
        "cp": (r // layout.tp) % layout.cp,
        "pp": (r // group_ranks(layout.tp, layout.cp)) % layout.pp,
        "dp": r // replica_ranks(layout.tp, layout.cp, layout.pp),
    }


def group_span(size: int, stride: int, ranks_per_instance: int) -> tuple[int, int]:
    """Shape of a group of `size` ranks spaced `stride` apart, as (ranks per instance, instances).

    Groups are symmetric (every instance holds the same number of members), as Neuron's hierarchical
    collectives require.
    """
    if size == 1:
        return 1, 1
    span = size * stride
    if span <= ranks_per_instance:
        return size, 1
    per_instance = max(1, ranks_per_instance // stride)
    return per_instance, size // per_instance


def stage_sum(values, pp: int) -> np.ndarray:
    """Per-chunk values summed onto the stages that hold them (chunk c on stage c % pp): [..., chunks] →
    [..., pp], added in chunk order (the same bits whatever else the array holds); no chunks: zeros."""
    v = np.asarray(values, dtype=float)
    if v.shape[-1] == 0:
        return np.zeros(v.shape[:-1] + (pp,))
    return v.reshape(v.shape[:-1] + (-1, pp)).cumsum(axis=-2)[..., -1, :]


def stage_layers(layers: int, chunks: int) -> np.ndarray:
    """Split `layers` over `chunks` pipeline chunks as NxD does for uneven splits.

    Every chunk gets ceil(layers/chunks); the deficit is taken one layer at a time from the chunks that
    also carry the embedding and the LM head (first, last, second, second-to-last, ...), so 126 layers on
    16 stages give 7, 8 x 14, 7 (Llama 3.1 405B).

    Returns:
        int array [chunks] of layer counts, summing to `layers`.
    """
    q = -(-layers // chunks)
    out = np.full(chunks, q, dtype=np.int64)
    deficit = q * chunks - layers
    order = [i for pair in zip(range(chunks), range(chunks - 1, -1, -1)) for i in pair]
    for i in order[:deficit]:
        out[i] -= 1
    if (out <= 0).any():
        raise ValueError(f"cannot split {layers} layers over {chunks} chunks")
    return out
