"""How jitter and stragglers slow a step: each (replica, stage) group runs at its slowest rank's pace, its
chunks at that speed, the optimizer at the slowest replica's. The one rule of the replay
(`replay.engine.combine_shard_steps`, per replica) and the planner (`layouts.steps`, each stage at its slowest
replica's speed)."""
from __future__ import annotations

import numpy as np

from ..cluster import rank_coords


def group_speeds(layout, group_speed: np.ndarray, slow: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """[dp, pp] the speed factor of each (replica, stage) group: its jitter (`group_speed`, dp x pp in group
    order), raised to a slow rank's factor where one of its ranks (`slow`, global ids) is slower still."""
    speed = np.asarray(group_speed, dtype=float).reshape(layout.dp, layout.pp).copy()
    if slow.size:
        c = rank_coords(layout, slow)
        np.maximum.at(speed, (c["dp"], c["pp"]), factor)
    return speed


def slowest_replica(speed: np.ndarray) -> np.ndarray:
    """[..., pp] each stage's speed factor at its slowest replica: `group_speeds` [..., dp, pp] → max over dp."""
    return speed.max(axis=-2)


def slowed(forward: np.ndarray, backward: np.ndarray, optimizer: np.ndarray, speed: np.ndarray,
           optimizer_speed: np.ndarray, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunk and optimizer seconds at their groups' speeds: chunk j x pp + s takes stage s's speed (`speed`
    [..., pp], per replica or per layout), the optimizer of each stage `optimizer_speed` [..., pp] (its slowest
    replica's); `forward`, `backward` [..., chunks] and `optimizer` [..., pp] broadcast against them.

    Returns:
        (forward, backward [..., chunks], optimizer [..., pp]) seconds.
    """
    per_chunk = np.tile(speed, (1, v))
    return forward * per_chunk, backward * per_chunk, optimizer * optimizer_speed
