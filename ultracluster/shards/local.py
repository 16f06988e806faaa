"""In-process stand-ins with the same interfaces as the Ray ones: the shard set (tests, `predict`, the interval)
and the file system (`emulate`'s default)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ..network.algorithms import schedule
from ..replay.shard_steps import ShardStep, ShardState
from ..storage import StorageServer, fsx_spec
from .worker import ShardWorker


class LocalShards:
    """ShardWorkers called directly; the payload moves in the same steps, and messages, as between actors."""

    def __init__(self, scenario, cluster):
        self.workers = [ShardWorker(scenario, cluster, s) for s in cluster.shards]
        self.nodes = 1
        self._algorithm: str | None = None

    def states(self) -> list[ShardState]:
        return [w.state() for w in self.workers]

    def shard_steps(self, step: int) -> list[ShardStep]:
        return [w.shard_step(step) for w in self.workers]

    def reduce_payload(self, step: int) -> tuple[int, bool]:
        """All-reduce the payload in the steps of the DP group's algorithm (`payload_algorithm`): in each
        step every shard first sends, to each peer the schedule names, the segments it owes it, then every
        receiver adds or stores them. Returns (bytes moved, every shard holds the exact sum)."""
        if self._algorithm is None:
            self._algorithm = self.workers[0].payload_algorithm()
        for w in self.workers:
            w.start_payload(step, self._algorithm)
        moved = 0
        for k, st in enumerate(schedule(self._algorithm, "all_reduce", len(self.workers)).steps):
            pairs = sorted(set(zip(st.src.tolist(), st.dst.tolist())))
            sent = [(s, d, self.workers[s].send_segments(k, d)) for s, d in pairs]
            for s, d, data in sent:
                moved += self.workers[d].recv_segments(k, s, data)
        return moved, all(w.check_payload() for w in self.workers)


@contextmanager
def local_shards(scenario, cluster) -> Iterator[LocalShards]:
    """`shards_factory` for `runner.run`: the shards in this process, no Ray."""
    yield LocalShards(scenario, cluster)


@contextmanager
def local_storage(scenario, cluster) -> Iterator[StorageServer | None]:
    """`storage_factory` for `emulate`: the scenario's file system in this process (None without storage);
    `actors.storage_actor.storage_service` is the same server on a Ray actor."""
    yield None if scenario.storage is None else StorageServer(fsx_spec(scenario.storage, cluster.links.efa_bytes_per_s),
                                                              cluster.instances)
