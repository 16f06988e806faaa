"""Cluster → running Ray actors (one per shard) behind the engine's ShardSet interface.

The only module that imports Ray. With no address and no running Ray it starts an embedded local Ray
and stops it afterwards; `address` (or RAY_ADDRESS) connects to an existing cluster. Actors never claim
`neuron_cores` (Ray's resource for real Trainium): they take no CPU for scheduling, so any number of
them fit a laptop, and are spread over the cluster's nodes by Ray.
"""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import ray
from ray.exceptions import RayActorError, RayError

from ..errors import ActorError
from .shard import ShardWorker

AUTO_ACTORS_PER_CPU = 2     # enough actors to keep every core busy while some wait on the payload ring
MAX_AUTO_ACTORS = 16


def resolve_instances_per_actor(scenario, cpus: int | None = None) -> int:
    """Instances per actor: the scenario's number, or for `auto` a count that suits this machine.

    `auto` aims at 2 actors per CPU (at most 16), never splitting an UltraServer (4 instances).
    """
    setting = scenario.emulation.instances_per_actor
    unit = 4 if scenario.cluster.ultraserver else 1
    if setting != "auto":
        return int(setting)
    cpus = cpus or os.cpu_count() or 1
    target = max(1, min(MAX_AUTO_ACTORS, AUTO_ACTORS_PER_CPU * cpus))
    units = math.ceil(scenario.cluster.instances / unit)
    return unit * math.ceil(units / target)


@ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
class ShardActor(ShardWorker):
    """A Ray actor standing for one instance, UltraServer or folded shard of instances."""

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class RayShards:
    """The engine's ShardSet over live actors; every call batches one `ray.get` over all shards."""

    def __init__(self, cluster, actors):
        self.cluster, self.actors = cluster, actors
        self.nodes = len(set(self._get([a.node_id.remote() for a in actors])))

    def _get(self, refs: list) -> list:
        """ray.get that turns a dead actor into an ActorError naming its shard and instances."""
        try:
            return ray.get(refs)
        except RayActorError:
            for shard, ref in zip(self.cluster.shards, refs):
                try:
                    ray.get(ref, timeout=0)
                except (RayActorError, ray.exceptions.GetTimeoutError) as err:
                    if isinstance(err, RayActorError):
                        raise ActorError(f"the actor for {shard.label} died; the run stops here") from None
            raise ActorError("an actor died; the run stops here") from None
        except RayError as err:
            raise ActorError(f"Ray failed: {type(err).__name__}: {err}") from None

    def profiles(self, step: int) -> list[dict[str, np.ndarray]]:
        return self._get([a.profile.remote(step) for a in self.actors])

    def reduce_payload(self, step: int) -> tuple[int, bool]:
        """Ring all-reduce between actors: each step every actor sends one chunk to the next (actor to
        actor through Ray's object store, never via the driver); one ray.get at the end."""
        n = len(self.actors)
        calls = [a.start_payload.remote(step) for a in self.actors]
        for phase in ("rs", "ag"):
            for k in range(n - 1):
                sent = [a.send.remote(phase, k) for a in self.actors]
                calls += [self.actors[(i + 1) % n].recv.remote(phase, k, ref) for i, ref in enumerate(sent)]
        checks = [a.check_payload.remote() for a in self.actors]
        done = self._get(calls + checks)
        moved = sum(done[n:len(calls)])
        return int(moved), all(done[len(calls):])


@contextmanager
def launch_actors(scenario, cluster, address: str | None = None) -> Iterator[RayShards]:
    """Start one actor per shard; stop them (and an embedded Ray) on exit."""
    started = False
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        try:
            if address:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            else:
                # "local": always a new embedded Ray, never a `ray start` cluster that happens to run here
                ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ActorError(f"could not {'connect to Ray at ' + address if address else 'start a local Ray'}: "
                             f"{err}") from None
        started = True
    actors = [ShardActor.options(name=None).remote(scenario, cluster, shard) for shard in cluster.shards]
    try:
        shards = RayShards(cluster, actors)
        yield shards
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()
