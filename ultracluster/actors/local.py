"""In-process shard set with the same interface as the Ray one: for tests and determinism checks."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

from .shard import ShardWorker


class LocalShards:
    """ShardWorkers called directly; the payload ring runs the same send/recv steps as between actors."""

    def __init__(self, scenario, cluster):
        self.workers = [ShardWorker(scenario, cluster, s) for s in cluster.shards]
        self.nodes = 1

    def profiles(self, step: int) -> list[dict[str, np.ndarray]]:
        return [w.profile(step) for w in self.workers]

    def reduce_payload(self, step: int) -> tuple[int, bool]:
        for w in self.workers:
            w.start_payload(step)
        n, moved = len(self.workers), 0
        for phase in ("rs", "ag"):
            for k in range(n - 1):
                sent = [w.send(phase, k) for w in self.workers]
                for i, data in enumerate(sent):
                    moved += self.workers[(i + 1) % n].recv(phase, k, data)
        return moved, all(w.check_payload() for w in self.workers)


@contextmanager
def local_shards(scenario, cluster) -> Iterator[LocalShards]:
    """`shards_factory` for `pipeline.run`: the shards in this process, no Ray."""
    yield LocalShards(scenario, cluster)
