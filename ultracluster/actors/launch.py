"""Cluster → running Ray actors (one per shard) behind the engine's ShardSet interface.

The only module that imports Ray. With no address and no running Ray it starts an embedded local Ray
and stops it afterwards; `address` (or RAY_ADDRESS, which Ray sets inside `ray job submit` jobs)
connects to an existing cluster.

Placement: one placement-group bundle per shard, SPREAD over the cluster's nodes. A bundle asks for one
unit of `ultracluster_shard`, our own logical resource (never `neuron_cores`, which Ray reserves for
real Trainium), when the cluster advertises enough of it: the embedded Ray does, and cluster nodes opt in
with `ray start --resources='{"ultracluster_shard": N}'`. Otherwise (a cluster that does not advertise
it) bundles ask for one byte of `memory`, which every node has, so they take no CPU and are spread
best-effort over every node. The actors themselves claim nothing: any number of them fit a laptop. A
placement group that cannot be placed within the timeout is an ActorError naming what was asked. See
docs/ray-clusters.md.
"""
from __future__ import annotations

import logging
import os
import re
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping

import ray
from ray._private import ray_constants as _ray_constants, utils as _ray_utils   # the embedded Ray's own sizing
from ray.exceptions import AuthenticationError, RayActorError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..cluster import Capacity
from ..errors import ActorError, Problem, RunInterrupted, ScenarioError
from .auth import auth_hint, probe as _probe
from ..replay.shard_steps import ShardStep, ShardState
from ..shards.worker import ShardWorker

log = logging.getLogger(__name__)

SHARD_RESOURCE = "ultracluster_shard"   # one unit per shard actor; advertised by nodes that host them
FALLBACK_BUNDLE = {"memory": 1}         # one byte: a placement token every node offers, no CPU taken
PLACEMENT_STRATEGY = "SPREAD"           # best-effort even spread: more shards than nodes is the usual case
PLACEMENT_TIMEOUT_S = 120.0             # bounded wait for the placement group (an autoscaler may add nodes)
PLACEMENT_TIMEOUT_ENV = "ULTRACLUSTER_PLACEMENT_TIMEOUT_S"
PROBE_TIMEOUT_S = 10.0                  # how long a liveness probe of the actors may take after a failure

def cluster_capacity() -> Capacity:
    """What the Ray cluster this process is attached to offers shard actors, as Ray reports it."""
    return Capacity(cpus=int(ray.cluster_resources().get("CPU", 0)) or 1,
                    memory_bytes=float(ray.available_resources().get("memory", 0.0)))


def machine_capacity() -> Capacity:
    """What an embedded Ray on this machine will offer: its CPUs, and Ray's own estimate of the available memory
    (cgroup-aware) less the object store's default share, as `ray.init` computes its `memory` resource."""
    available = _ray_utils.estimate_available_memory()
    memory = available * (1 - _ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION)
    return Capacity(cpus=os.cpu_count() or 1, memory_bytes=float(memory), where="this machine")


@ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
class ShardActor(ShardWorker):
    """A Ray actor standing for one instance, UltraServer or folded shard of instances."""

    def where(self) -> tuple[str, str]:
        """(Ray node id, Ray actor id) of this actor."""
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ctx.get_actor_id()


class RayShards:
    """The engine's ShardSet over live actors; every call batches one `ray.get` over all shards.

    Attributes:
        node_ids: the Ray node each actor runs on, in shard order.
        nodes: how many distinct Ray nodes the actors run on (summary.json `ray_nodes`).
        placement: what each actor's placement-group bundle asked for (`ultracluster_shard` or fallback).
    """

    def __init__(self, cluster, actors, placement: str = ""):
        self.cluster, self.actors, self.placement = cluster, actors, placement
        self._actor_ids: list[str] = []          # empty until the actors answer; _dead_shards then pings
        where = self._get([a.where.remote() for a in actors])
        self.node_ids = [node for node, _ in where]
        self._actor_ids = [actor for _, actor in where]
        self.nodes = len(set(self.node_ids))

    def _get(self, refs: list) -> list:
        """ray.get that turns dead actors into one ActorError naming how many died and of what (`dead_actor_message`)."""
        try:
            return ray.get(refs)
        except RayError as err:
            _settle(refs)
            dead = self._dead_shards(err)
            if dead:
                raise ActorError(dead_actor_message(dead, len(self.actors))) from None
            raise ActorError(f"Ray failed: {type(err).__name__}: {_last_line(err)}") from None

    def _dead_shards(self, err: RayError) -> list[tuple[str, str]]:
        """(shard label, Ray's error text) of every dead actor: the one the error names, else those a ping finds
        dead."""
        ids = self._actor_ids
        dead = {ids.index(err.actor_id): str(err)} if isinstance(err, RayActorError) \
            and err.actor_id in ids else {}
        try:
            pings = [a.ping.remote() for a in self.actors]
            ready, _ = ray.wait(pings, num_returns=len(pings), timeout=PROBE_TIMEOUT_S)
        except RayError:   # Ray itself is gone: name what the error named
            pings, ready = [], []
        for i, ref in enumerate(pings):
            if ref in ready and i not in dead:
                try:
                    ray.get(ref)
                except RayError as probe:
                    dead[i] = str(probe)
        return [(self.cluster.shards[i].label, dead[i]) for i in sorted(dead)]

    def states(self) -> list[ShardState]:
        return self._get([a.state.remote() for a in self.actors])

    def shard_steps(self, step: int) -> list[ShardStep]:
        return self._get([a.shard_step.remote(step) for a in self.actors])

    def reduce_payload(self, step: int) -> tuple[int, bool]:
        """All-reduce the payload between actors in the steps of the DP group's algorithm (ring, RDH or
        mesh, as the network model picks it: `shard.payload_algorithm`). Every message goes actor to actor
        through Ray's object store (the sender's returned ref is the receiver's argument), never via the
        driver; each actor runs its sends of a step before its receives; one ray.get at the end, which
        also collects every actor's check against the exact sum."""
        from ..network.algorithms import schedule

        if getattr(self, "_payload_algorithm", None) is None:
            self._payload_algorithm = self._get([self.actors[0].payload_algorithm.remote()])[0]
        alg, n = self._payload_algorithm, len(self.actors)
        calls = [a.start_payload.remote(step, alg) for a in self.actors]
        receives = []
        for k, st in enumerate(schedule(alg, "all_reduce", n).steps):
            pairs = sorted(set(zip(st.src.tolist(), st.dst.tolist())))
            sent = [(s, d, self.actors[s].send_segments.remote(k, d)) for s, d in pairs]
            receives += [self.actors[d].recv_segments.remote(k, s, ref) for s, d, ref in sent]
        checks = [a.check_payload.remote() for a in self.actors]
        done = self._get(calls + receives + checks)
        moved = sum(done[n:n + len(receives)])
        return int(moved), all(done[n + len(receives):])


def _settle(refs: list) -> None:
    """Fetch every answer of a call that failed (waiting up to PROBE_TIMEOUT_S), so that Ray does not print each
    failed one as an "unhandled error" with its full text when its reference is dropped."""
    try:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
    except RayError:
        return
    for ref in ready:
        try:
            ray.get(ref)
        except RayError:
            pass


CAUSES_SHOWN = 4          # causes named in a failed run's message; the rest are counted (the line stays < 2 KiB)
DETAIL_CHARS = 300        # Ray's detail quoted for the first shard of each cause


def death_cause(text: str) -> tuple[str, str]:
    """(cause, detail) of a dead actor from Ray's error text: the cause names what killed it in words that are the
    same for every shard it killed and read after a count ("20 killed by Ray's memory monitor ...", "3 whose
    worker process exited (SYSTEM_ERROR)"); the detail is Ray's most telling line, cut to DETAIL_CHARS."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    last = lines[-1] if lines else "no reason given"
    if "running low on memory" in text or "OutOfMemory" in text:
        first = next((ln for ln in lines if "running low on memory" in ln), last)
        return "killed by Ray's memory monitor (the node ran out of memory)", first[:DETAIL_CHARS]
    if "ray.kill" in text:
        return "killed with ray.kill", last[:DETAIL_CHARS]
    exit_type = re.search(r"Worker exit type: (\w+)", text)
    if exit_type:
        detail = re.search(r"Worker exit detail: ([^.]*\.)", text)
        return (f"whose worker process exited ({exit_type.group(1)})",
                (detail.group(1) if detail else last)[:DETAIL_CHARS])
    if re.search(r"\bnode\b.*\b(died|dead|failed)\b", text, re.IGNORECASE):
        return "whose Ray node died", last[:DETAIL_CHARS]
    # anything else: the last line with its numbers and ids blanked, so that the same failure groups
    same = re.sub(r"\b[0-9a-f]{8,}\b|\d+(\.\d+)?", "N", last)[:DETAIL_CHARS]
    return f"that failed with: {same}", last[:DETAIL_CHARS]


def dead_actor_message(dead: list[tuple[str, str]], actors: int | None = None) -> str:
    """The one-line error of a run whose actors died: the dead shards grouped by cause (`death_cause`), each
    cause with how many it killed and the first shard's detail once; a cause that killed one shard names it.
    At most CAUSES_SHOWN causes, so the line stays short whatever the number of shards.

    Args:
        dead: (shard label, Ray's error text) of each dead actor, in shard order.
        actors: how many actors the run had (None: not said).
    """
    if len(dead) == 1:
        lead = f"the actor for {dead[0][0]} died ({death_cause(dead[0][1])[1]})"
    else:
        groups: dict[str, list[tuple[str, str]]] = {}
        for label, text in dead:
            cause, detail = death_cause(text)
            groups.setdefault(cause, []).append((label, detail))
        order = sorted(groups.items(), key=lambda kv: -len(kv[1]))        # stable: first shard's order on ties
        parts = []
        for cause, members in order[:CAUSES_SHOWN]:
            label, detail = members[0]
            parts.append(f"{label} ({detail})" if len(members) == 1 else
                         f"{len(members):,} {cause} (the first, {label}: {detail})")
        rest = order[CAUSES_SHOWN:]
        if rest:
            parts.append(f"and {sum(len(m) for _, m in rest):,} more of {len(rest)} other cause(s)")
        of = f" of {actors:,}" if actors else ""
        lead = f"{len(dead):,}{of} actors died: " + "; ".join(parts)
    return f"{lead}; the run stops here (steps.csv keeps the steps that finished)"


def _last_line(err: BaseException) -> str:
    """The last non-empty line of an error: Ray's reason, or the exception of a failed actor __init__."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(err).__name__)[:300]


def placement_timeout_s() -> float:
    """Seconds to wait for the placement group: ULTRACLUSTER_PLACEMENT_TIMEOUT_S, else the default."""
    raw = os.environ.get(PLACEMENT_TIMEOUT_ENV)
    if raw is None:
        return PLACEMENT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ScenarioError([Problem(PLACEMENT_TIMEOUT_ENV, raw, "a number of seconds > 0")])
    return value


def shard_bundles(shards: int, cluster_resources: Mapping[str, float]) -> list[dict[str, float]]:
    """One placement-group bundle per shard: `ultracluster_shard` when the cluster offers enough of it,
    else the CPU-less fallback (one byte of `memory`)."""
    if cluster_resources.get(SHARD_RESOURCE, 0) >= shards:
        return [{SHARD_RESOURCE: 1}] * shards
    return [dict(FALLBACK_BUNDLE)] * shards


def place_shards(bundles: list[dict[str, float]], timeout_s: float) -> PlacementGroup:
    """Reserve the shards' bundles, SPREAD over the nodes; an ActorError if not placed within timeout_s.

    Args:
        bundles: one bundle per shard actor (`shard_bundles`).
        timeout_s: seconds to wait for the placement group to be placed.

    Returns:
        The ready placement group (the caller removes it).

    Raises:
        ActorError: the placement group could not be placed in time; names the bundles asked for and
            what the cluster offers.
    """
    total, shards = ray.cluster_resources(), len(bundles)
    kind = next(iter(bundles[0]))
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    if kind != SHARD_RESOURCE and nodes > 1:
        log.warning("ultracluster: the cluster advertises %g %s (%d needed): spreading %d actors best-effort "
                    "over %d nodes (see docs/ray-clusters.md)", total.get(SHARD_RESOURCE, 0), SHARD_RESOURCE,
                    shards, shards, nodes)
    pg = placement_group(bundles, strategy=PLACEMENT_STRATEGY)
    if not pg.wait(timeout_s):
        free = ray.available_resources().get(kind, 0)
        remove_placement_group(pg)
        raise ActorError(
            f"could not place {shards} shard actors within {timeout_s:g} s: asked for a placement group of "
            f"{shards} bundles of {bundles[0]} ({PLACEMENT_STRATEGY}); the cluster's {nodes} node(s) offer "
            f"{kind} {total.get(kind, 0):g} in total, {free:g} free. Advertise more {SHARD_RESOURCE} "
            f"(`ray start --resources='{{\"{SHARD_RESOURCE}\": N}}'`), fold more instances per actor "
            f"(--set emulation.instances_per_actor=...), or wait longer ({PLACEMENT_TIMEOUT_ENV})")
    return pg


def connect_ray(address: str | None, shards: int) -> bool:
    """Attach to Ray (True when this call started it): a running Ray in the process, else `address` or
    RAY_ADDRESS, else a new embedded local Ray that advertises one `ultracluster_shard` per shard."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    with _signals_held() as held:
        try:
            if address:
                _probe(address)
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            else:
                # "local": always a new embedded Ray, never a `ray start` cluster that happens to run here
                ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                         resources={SHARD_RESOURCE: shards})
        except AuthenticationError:
            raise ActorError(auth_hint(address or "local")) from None
        except (ConnectionError, RuntimeError, ValueError) as err:
            if address and "InvalidAuthToken" in f"{err} {err.__cause__} {err.__context__}":
                raise ActorError(auth_hint(address)) from None
            raise ActorError(f"could not {'connect to Ray at ' + address if address else 'start a local Ray'}: "
                             f"{err}") from None
    _raylet_echo(False)
    if held:                      # a signal came while Ray started: stop it whole, then act on the signal
        shutdown()
        signum, handler = held[0]
        handler(signum, None)
        raise RunInterrupted(signum)   # the handler chose not to raise: Ray is down, the run cannot go on
    return True


def _raylet_echo(on: bool) -> None:
    """Whether the driver prints the raylet's messages (one per worker that dies or starts late). Off in the Ray
    sessions this process opens: a run whose actors die says so in one line (`dead_actor_message`), however
    many there were. Ray's own switch, the one its debugger (`ray.util.rpdb`) turns off."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is not None and hasattr(worker, "_worker_logs_enabled"):
        worker._worker_logs_enabled = on


def shutdown() -> None:
    """Stop the Ray session this process opened (`connect_ray`), and give Ray back its raylet messages."""
    ray.shutdown()
    _raylet_echo(True)


@contextmanager
def _signals_held() -> Iterator[list]:
    """Hold SIGINT, SIGTERM and SIGHUP while Ray starts, for the caller's handlers to act on once it is up.

    A signal in the middle of `ray.init` would leave half-started Ray processes behind (its dashboard and
    runtime-env agents outlive their raylet). So, for each of these signals that has a Python handler (the
    CLI's, or Python's own KeyboardInterrupt), a signal that arrives is recorded instead, and Ray's own
    SIGTERM handler (`sys.exit(15)`, installed by `ray.init`) is not installed; the core worker's native
    handler, which dumps a stack, is replaced by the caller's again on the way out. Yields the list of
    (signal, caller's handler) received.
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    held: list = []
    wanted = [s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s]
    callers = {s: signal.getsignal(s) for s in wanted}
    callers = {s: h for s, h in callers.items() if callable(h)}
    for s in callers:
        signal.signal(s, lambda signum, frame: held.append((signum, callers[signum])))
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    ray_sets = getattr(utils, "set_sigterm_handler", None)
    if ray_sets is not None and signal.SIGTERM in callers:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield held
    finally:
        if ray_sets is not None and signal.SIGTERM in callers:
            utils.set_sigterm_handler = ray_sets
        for s, h in callers.items():
            signal.signal(s, h)


@contextmanager
def attached(address: str | None = None) -> Iterator[Capacity]:
    """Attach to the Ray cluster a run is sent to, for the length of the run, yielding its Capacity.

    Folding (`cluster.fold`: `auto`, and the bound on the actors a run starts) is sized for the cluster that will run
    the actors, not for the driver's machine. When no cluster is named (no running Ray, no address, no
    RAY_ADDRESS) the embedded Ray, started later by `launch_actors`, runs on this machine: its Capacity is the
    one that Ray will report (`machine_capacity`).
    """
    address = address or os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized() and not address:
        yield machine_capacity()
        return
    started = connect_ray(address, 0)
    try:
        yield cluster_capacity()
    finally:
        if started:
            shutdown()


@contextmanager
def launch_actors(scenario, cluster, address: str | None = None,
                  timeout_s: float | None = None) -> Iterator[RayShards]:
    """Place and start one actor per shard; stop them, their placement group and an embedded Ray on exit.

    Args:
        scenario: the resolved Scenario.
        cluster: its Cluster (one actor per `cluster.shards`).
        address: Ray address (None: a Ray already running in this process, RAY_ADDRESS, or an embedded
            local Ray).
        timeout_s: seconds to wait for the placement group (None: ULTRACLUSTER_PLACEMENT_TIMEOUT_S or 120).

    Raises:
        ActorError: Ray could not start or be reached, the actors could not be placed in time, or an
            actor died (the message names the shard and its instances).
    """
    timeout_s = placement_timeout_s() if timeout_s is None else timeout_s
    started = connect_ray(address, len(cluster.shards))
    pg, actors = None, []
    try:
        bundles = shard_bundles(len(cluster.shards), ray.cluster_resources())
        pg = place_shards(bundles, timeout_s)
        placement = f"{bundles[0]} x {len(bundles)} ({PLACEMENT_STRATEGY})"
        actors = [ShardActor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                      pg, placement_group_bundle_index=i)).remote(scenario, cluster, shard)
                  for i, shard in enumerate(cluster.shards)]
        yield RayShards(cluster, actors, placement)
    finally:
        for a in actors:
            try:
                ray.kill(a)
            except RayError:   # already gone with its node
                pass
        if pg is not None:
            try:
                remove_placement_group(pg)
            except RayError:
                pass
        if started:
            shutdown()
