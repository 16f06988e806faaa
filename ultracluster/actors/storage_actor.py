"""One Ray actor per file system: it holds the FSx state (burst buckets, transfers in flight, clock) and
answers every client instance's demand with its max-min fair share.

`StorageActor` wraps the pure `ultracluster.storage.StorageServer`; `RayStorage` is a proxy with the
server's interface (one `ray.get` per call), so `StorageCosts` (the replay engine's storage hook) runs the
same on the actor and on the in-process server. `storage_service` is the context manager the pipeline
composes with the shard actors: the actor when Ray is running, the in-process server otherwise (tests, no
Ray), nothing when the scenario has no storage.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import ray
from ray.exceptions import RayError

from ..errors import ActorError
from ..storage import FsxSpec, StorageServer, fsx_spec
from ..shards.local import local_storage


class _Server(StorageServer):
    """StorageServer with one entry point that also returns the clock and the tags in flight, so that the
    proxy answers `now` and `busy` without another round trip."""

    def call(self, method: str, *args, **kwargs):
        result = getattr(self, method)(*args, **kwargs)
        return result, self.now, tuple(self.transfers)


@ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
class StorageActor(_Server):
    """The Ray actor of one file system (num_cpus=0: it never claims a CPU or a Neuron core)."""


class RayStorage:
    """StorageServer's interface over a StorageActor."""

    def __init__(self, actor, spec: FsxSpec, clients: int):
        self.actor, self.spec, self.clients = actor, spec, clients
        self.bucket_full_s = spec.bucket_full_s
        self.now = 0.0
        self._busy: tuple[str, ...] = ()

    def _call(self, method: str, *args, **kwargs):
        try:
            result, self.now, self._busy = ray.get(self.actor.call.remote(method, *args, **kwargs))
        except RayError as err:
            raise ActorError(f"the storage actor failed: {type(err).__name__}: {err}") from None
        return result

    def submit(self, *args, **kwargs) -> None:
        self._call("submit", *args, **kwargs)

    def advance(self, *args, **kwargs):
        return self._call("advance", *args, **kwargs)

    def cancel(self, tag: str | None = None) -> None:
        self._call("cancel", tag)

    def busy(self, tag: str) -> bool:
        return tag in self._busy

    def remaining(self, tag: str) -> float:
        return self._call("remaining", tag)

    def rates(self):
        return self._call("rates")

    def mark(self, slot: str = "step") -> None:
        self._call("mark", slot)

    def extremes(self, slot: str = "step"):
        return self._call("extremes", slot)

    def state(self):
        return self._call("state")

    def jump(self, *args) -> None:
        self._call("jump", *args)


@contextmanager
def storage_service(scenario, cluster, local: bool | None = None) -> Iterator[StorageServer | RayStorage | None]:
    """The scenario's file system for the duration of a run.

    Args:
        scenario: the resolved scenario (None storage: yields None).
        cluster: its cluster (clients are its instances; their NIC bandwidth caps each client).
        local: True: the in-process server; False: a Ray actor (Ray must be running); None: the actor when
            Ray is running, else in-process.
    """
    if scenario.storage is None or local or (local is None and not ray.is_initialized()):
        with local_storage(scenario, cluster) as fs:
            yield fs
        return
    spec = fsx_spec(scenario.storage, cluster.links.efa_bytes_per_s)
    actor = StorageActor.remote(spec, cluster.instances)
    try:
        yield RayStorage(actor, spec, cluster.instances)
    finally:
        ray.kill(actor)
