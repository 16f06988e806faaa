"""Pieces of the layout table (or a sweep's variants) → Ray tasks across the cluster's nodes → timed pieces, and
the Ray the planner and the sweep run in.

`evaluate_on_ray` sends each piece (a block of rows) of the layout table to a task (`ranking.evaluate_block`,
the same function the in-process search calls), spread over the nodes; the results are gathered in order,
so they do not depend on where, or on how many nodes, the tasks ran. Tasks take one CPU each (they compute).
"""
from __future__ import annotations

import functools
import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import pandas as pd

from ..errors import ActorError
from ..layouts.ranking import evaluate_block

# Ray is imported where it is used: a search timed in this process (no address, no Ray running) never
# imports it, which saves its import time (about 0.3 s on the benchmark machine) from every such search.


def _evaluate(scenario, calibration, sources, table):
    import ray
    return evaluate_block(scenario, calibration, sources, table), ray.get_runtime_context().get_node_id()


@functools.cache
def _evaluate_task():
    import ray
    return ray.remote(num_cpus=1, max_retries=2)(_evaluate)


def _ray_running() -> bool:
    """Whether this process is attached to a Ray (a Ray not imported yet is not running)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def cluster_cpus() -> int:
    """CPUs of the Ray cluster this process is attached to."""
    import ray
    return int(ray.cluster_resources().get("CPU", 0)) or 1


def search_cpus() -> int:
    """CPUs a layout search can spread over: the Ray cluster's when this process is attached to one, else this
    machine's (a cluster named by address is not reached before the search: its CPUs count as this machine's)."""
    return cluster_cpus() if _ray_running() else (os.cpu_count() or 1)


def evaluate_on_ray(scenario, calibration, sources: dict[str, str], pieces: list[pd.DataFrame],
                    on_done: Callable[[int], None] | None = None) -> tuple[list[pd.DataFrame], int]:
    """Time the pieces of the layout table with Ray tasks spread over the cluster (attached already).

    Args:
        on_done: called with the layouts timed so far each time a piece comes back (progress).

    Returns:
        (the timed pieces in order, how many distinct nodes ran them).

    Raises:
        ActorError: a task failed twice or Ray went away.
    """
    import ray
    from ray.exceptions import RayError

    sc, cal = ray.put(scenario), ray.put(calibration)
    refs = [_evaluate_task().options(scheduling_strategy="SPREAD").remote(sc, cal, sources, piece) for piece in pieces]
    sizes = {ref: len(piece) for ref, piece in zip(refs, pieces)}
    pending, finished = list(refs), 0
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            finished += sum(sizes[r] for r in ready)
            if on_done is not None:
                on_done(finished)
        done = ray.get(refs)
    except RayError as err:
        lines = [ln for ln in str(err).splitlines() if ln.strip()]
        raise ActorError(f"a layout-evaluation task failed: {lines[-1] if lines else type(err).__name__}") from None
    return [d[0] for d in done], len({d[1] for d in done})


@functools.cache
def _call_task():
    import ray
    return ray.remote(num_cpus=1, max_retries=2)(_call)


def _call(fn, shared, item):
    import ray
    return fn(shared, item), ray.get_runtime_context().get_node_id()


class TaskFailed:
    """What a task that Ray could not run returns in its place (its worker or node died twice): the cause."""

    def __init__(self, cause: str):
        self.cause = cause


def map_on_ray(fn: Callable, shared, items: list, on_done: Callable[[int, object], None] | None = None
               ) -> tuple[list, int]:
    """`fn(shared, item)` for every item as Ray tasks spread over the cluster (attached already), one CPU each;
    `shared` is put in the object store once. The sweep's variants run here (`ultracluster.sweep`).

    Args:
        on_done: called with (the item's position, its result) as each task comes back, in the order they end.

    Returns:
        (the results in the items' order, a `TaskFailed` for each task Ray could not run; how many distinct nodes
        ran them). An interruption cancels the tasks not yet done and propagates.
    """
    import ray
    from ray.exceptions import RayError

    ref = ray.put(shared)
    refs = [_call_task().options(scheduling_strategy="SPREAD").remote(fn, ref, item) for item in items]
    where = {r: i for i, r in enumerate(refs)}
    results: list = [None] * len(items)
    nodes: set[str] = set()
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for r in ready:
                i = where[r]
                try:
                    results[i], node = ray.get(r)
                    nodes.add(node)
                except RayError as err:
                    lines = [ln for ln in str(err).splitlines() if ln.strip()]
                    results[i] = TaskFailed(f"a Ray task failed: {lines[-1] if lines else type(err).__name__}"[:500])
                if on_done is not None:
                    on_done(i, results[i])
    except BaseException:
        for r in pending:
            try:
                ray.cancel(r, force=True)
            except RayError:
                pass
        raise
    return results, len(nodes)


def alive_nodes() -> int:
    """Live nodes of the Ray cluster this process is attached to."""
    import ray
    return sum(1 for n in ray.nodes() if n.get("Alive"))


def wanted(address: str | None) -> bool:
    """Whether the planner is sent to a Ray cluster: an address, RAY_ADDRESS (inside `ray job submit`), or
    a Ray already running in this process."""
    return bool(address or os.environ.get("RAY_ADDRESS") or _ray_running())


@contextmanager
def planning_ray(address: str | None, shards: int = 0) -> Iterator[float]:
    """Attach to the Ray the planner uses for the length of the block (an embedded local one when no cluster
    is named, advertising `shards` actor slots for the replays); stop it on exit if this call started it.
    Yields the seconds attaching took."""
    from .launch import connect_ray, shutdown

    t0 = time.perf_counter()
    started = connect_ray(address, shards)
    try:
        yield time.perf_counter() - t0
    finally:
        if started:
            shutdown()
