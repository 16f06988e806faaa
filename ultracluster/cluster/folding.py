"""A run's instances → shard actors: how many instances each actor holds, sized for the Ray cluster that runs them
and never more actors than it takes.

Pure: the Ray adapter reads what the cluster offers (`actors.launch.cluster_capacity`, `machine_capacity`), the
shard worker times what one actor needs (`shards.worker.actor_bytes`, measured by benchmarks/actor_footprint.py),
and `emulate` folds with both. Folding never changes a prediction (tests/actors/test_folding.py).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..units import GIB, MIB
from .catalog import INSTANCES, ultraserver_of

AUTO_ACTORS_PER_CPU = 2     # enough actors to keep every core busy while some wait on the payload ring
MAX_AUTO_ACTORS = 16
ACTOR_MEMORY_SHARE = 0.5    # actors take at most half the memory the cluster reports: the driver, the object
                            # store's copies and whatever else runs there keep the rest (Ray's memory monitor
                            # kills workers once a node's memory is 95 % used: docs/sources.md §4.9)
MAX_ACTORS_PER_CPU = 16     # each takes about 1 CPU second to start (benchmarks/actor_footprint.py,
                            # docs/performance.md): 16 per CPU start in about 16 s


@dataclass(frozen=True)
class Capacity:
    """What the Ray cluster that runs the actors offers them.

    Attributes:
        cpus: its CPUs (`ray.cluster_resources()`).
        memory_bytes: its memory not yet claimed (`ray.available_resources()["memory"]`); for an embedded Ray
            not started yet, the figure it will report (this machine's available memory less the object store).
        where: how messages name it: "the Ray cluster" or "this machine".
    """

    cpus: int
    memory_bytes: float
    where: str = "the Ray cluster"

    def max_actors(self, actor_bytes: float) -> int:
        """The most shard actors it takes, each needing `actor_bytes`: MAX_ACTORS_PER_CPU per CPU, and their
        footprints within ACTOR_MEMORY_SHARE of its memory; at least one."""
        by_memory = int(ACTOR_MEMORY_SHARE * self.memory_bytes // max(actor_bytes, 1))
        return max(1, min(MAX_ACTORS_PER_CPU * max(self.cpus, 1), by_memory))


@dataclass(frozen=True)
class Folding:
    """How a run's instances fold into shard actors.

    Attributes:
        instances_per_actor: instances each actor holds (the last may hold fewer).
        actors: actors the run starts.
        note: one line when an explicit `emulation.instances_per_actor` was raised to fit the cluster, else None.
    """

    instances_per_actor: int
    actors: int
    note: str | None = None


def fold(scenario, capacity: Capacity | None = None, actor_bytes: float | None = None) -> Folding:
    """Instances per actor for a run: the scenario's number, or for `auto` a count that suits the cluster; with
    a `capacity` (and `actor_bytes`, one actor's memory), never more actors than it takes
    (`Capacity.max_actors`), folding more instances per actor.

    `auto` aims at 2 actors per CPU (at most 16), never splitting an UltraServer (4 or 36 instances). An explicit
    number that would start more actors than the capacity takes is raised to fit, whole UltraServers per actor,
    with a note saying so. `capacity` None (in-process shards): no bound, `auto` for this machine's CPUs.
    """
    setting = scenario.emulation.instances_per_actor
    instances = scenario.cluster.instances
    us = ultraserver_of(INSTANCES[scenario.cluster.instance]) if scenario.cluster.ultraserver else None
    unit = us.instances if us is not None else 1
    units = math.ceil(instances / unit)
    most = capacity.max_actors(actor_bytes or 0.0) if capacity is not None else None
    if setting == "auto":
        cpus = capacity.cpus if capacity is not None else (os.cpu_count() or 1)
        target = max(1, min(MAX_AUTO_ACTORS, AUTO_ACTORS_PER_CPU * cpus, most or MAX_AUTO_ACTORS))
        ipa = unit * math.ceil(units / target)
        return Folding(ipa, math.ceil(instances / ipa))
    ipa = max(1, min(int(setting), instances))
    actors = math.ceil(instances / ipa)
    if most is None or actors <= most:
        return Folding(ipa, actors)
    raised = unit * math.ceil(units / most)
    now = math.ceil(instances / raised)
    note = (f"note: emulation.instances_per_actor {setting} would start {actors:,} actors, more than "
            f"{capacity.where} takes ({most:,}: {capacity.cpus} CPUs, {capacity.memory_bytes / GIB:.1f} GiB free, "
            f"{(actor_bytes or 0.0) / MIB:,.0f} MiB per actor); folding {raised:,} instances per actor instead "
            f"({now:,} actors, the same results)")
    return Folding(raised, now, note)


def resolve_instances_per_actor(scenario, capacity: Capacity | None = None, actor_bytes: float | None = None) -> int:
    """Instances per actor for a run (`fold`), without its note."""
    return fold(scenario, capacity, actor_bytes).instances_per_actor
