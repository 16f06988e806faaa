"""One shard of the cluster → its ranks' compute, once per run and then per step, and its part of the gradient
payload exchange.

`ShardWorker` is plain Python over numpy: Ray wraps it as an actor (`actors.launch`), tests and the
in-process runner call it directly (`shards.local`). It owns whole instances, so a contiguous range of ranks
and of (replica, stage) groups. Once, in its `ShardState`, it reports what stays the same in every step: on the
chip model, the times of the stages it is the owner of (those whose first rank in replica 0 it holds,
`replay.shard_steps.timed_stages`: a stage takes the same time in every replica, so each is timed by one shard and
the driver merges disjoint parts): their chunk and optimizer times, hardware FLOPs, unnamed residual and the
matmuls that hide the tensor-parallel collectives (the driver times none of it); and the stragglers among its
ranks. Per step, in its `ShardStep`, only the step's jitter of the groups it holds, drawn from the stream
keyed by (seed, step) at each group's position, so every folding into actors gives the same numbers.
Its answers are frozen and grow with the stages and groups it holds, never with its cores.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import chip, speed_draws
from .. import operators as opslib
from ..cluster import Cluster, ShardSpec, build_cluster
from ..cluster.placement import group_ranks, replica_ranks
from ..network.algorithms import schedule
from ..replay.shard_steps import ShardStep, ShardState, timed_stages, shard_stage_times
from ..units import MIB

PAYLOAD_MAX_BYTES = 1 << 30   # per actor; beyond it `emulation.payload_scale` is too large for one machine
# What one shard actor's process costs, measured by benchmarks/actor_footprint.py (docs/performance.md, "Shard
# actors"): a peak RSS of 155-159 MiB with a 2 MiB payload, growing by 10 x its payload (the buffer, the segments it
# sends and receives, the exact sum it checks against).
ACTOR_BASE_BYTES = 160 * MIB
ACTOR_PAYLOAD_COPIES = 10


def payload_elements(scenario, cluster: Cluster) -> int:
    """Float64 elements of the buffer every shard contributes to the reduction: one model replica's
    gradient bytes (what each data-parallel group reduces) x payload_scale / 8. Independent of dp, so a
    131k-chip scenario moves no more than a small one of the same model."""
    layout, t = cluster.layout, scenario.training
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    params = opslib.chunk_params(scenario.model, layout.tp, layers, layout.pp).sum() * layout.tp
    g_bytes = opslib.grad_bytes(t)
    return max(1, int(params * g_bytes * scenario.emulation.payload_scale / 8))


def actor_bytes(scenario) -> float:
    """One shard actor's memory for this scenario (the bound on a run's actors, `cluster.fold`):
    ACTOR_BASE_BYTES + ACTOR_PAYLOAD_COPIES x its payload (the same for any folding)."""
    whole = build_cluster(scenario, scenario.cluster.instances)       # one shard: the payload does not fold
    return ACTOR_BASE_BYTES + ACTOR_PAYLOAD_COPIES * 8 * payload_elements(scenario, whole)


def payload(seed: int, shard: int, step: int, n: int) -> np.ndarray:
    """A shard's gradient payload: integers stored as float64, so every summation order is exact."""
    return np.random.default_rng([seed, shard, step, 0xD9]).integers(-1000, 1000, n).astype(np.float64)


def ring_bounds(n: int, parts: int) -> np.ndarray:
    """Segment boundaries of an n-element buffer split into `parts` ring segments."""
    return np.linspace(0, n, parts + 1).astype(np.int64)


class ShardWorker:
    """The vectorized chip model of one shard plus its state in the payload ring."""

    def __init__(self, scenario, cluster: Cluster, shard: ShardSpec):
        self.scenario, self.cluster, self.shard = scenario, cluster, shard
        lay = cluster.layout
        size = group_ranks(lay.tp, lay.cp)           # ranks of a (replica, stage) group, consecutive
        first, last = shard.first_rank // size, (shard.first_rank + shard.ranks - 1) // size
        self._groups = np.arange(first, last + 1, dtype=np.int64)      # group id = replica x pp + stage
        self._group_size = size
        self._sigma = speed_draws.jitter_sigma(scenario, cluster.calibration)
        stages = timed_stages(lay, shard.first_rank, shard.ranks)
        # the chip model only where this shard is a stage's owner (none: it times nothing)
        times = chip.chunk_times(scenario, cluster, opslib.library_for(scenario)) if stages.size else None
        self._stage_times = shard_stage_times(times, stages, lay.pp, lay.pp * lay.virtual_stages)
        self._slow_ranks, self._slow_factors = speed_draws.stragglers(scenario, cluster.ranks, shard.first_rank,
                                                               shard.ranks)
        self._payload_elements = payload_elements(scenario, cluster)
        self._ring_bounds = ring_bounds(self._payload_elements, len(cluster.shards))
        self._payload = np.empty(0)
        self._payload_step = -1

    def ping(self) -> int:
        return self.shard.index

    def state(self) -> ShardState:
        """What it says once: its instances and, of the scenario's degraded ones (`faults.degraded`), those it owns,
        its times of the stages it times and its slow ranks. The driver merges the shards' states once
        (`replay.shard_steps.merge_states`), times the collectives on the degraded parts and composes every step
        from them."""
        lo, n = self.shard.first_instance, self.shard.instances
        mine = []
        for entry, part in enumerate(self.cluster.degraded):
            own = tuple(i for i in part.instances if lo <= i < lo + n)
            if own:
                mine.append((entry, replace(part, instances=own)))
        return ShardState(shard=self.shard.index, first_instance=lo, instances=n, degraded=tuple(mine),
                          stage_times=self._stage_times, slow_ranks=self._slow_ranks, slow_factors=self._slow_factors)

    def shard_step(self, step: int) -> ShardStep:
        """This shard's answer for `step`: the step's jitter of the groups it holds (draw `group` of the (seed,
        step) stream, so a group two shards hold gets one value). See `replay.shard_steps.ShardStep`."""
        jitter = speed_draws.group_jitter_of(self.scenario.seed, step, int(self._groups[0]), self._groups.size,
                                      self._group_size, self._sigma)
        return ShardStep(shard=self.shard.index, first_group=int(self._groups[0]), group_speed=jitter)

    # --- the payload all-reduce between shards, in the steps of the DP group's algorithm --------------
    def payload_algorithm(self) -> str:
        """The algorithm the actors use to all-reduce the payload (see `payload_algorithm`)."""
        return payload_algorithm(self.scenario, self.cluster)

    def _segment_slice(self, c: int) -> slice:
        """Ring segment c of the payload buffer."""
        return slice(int(self._ring_bounds[c]), int(self._ring_bounds[c + 1]))

    def start_payload(self, step: int, algorithm: str = "ring") -> int:
        """This shard's contribution for `step` (its instances' gradients, already reduced inside the
        shard), and the schedule the exchange will follow. Returns its bytes."""
        self._payload = payload(self.scenario.seed, self.shard.index, step, self._payload_elements)
        self._payload_step = step
        self._payload_schedule = schedule(algorithm, "all_reduce", len(self.cluster.shards))
        return self._payload.nbytes

    def _ring_segments(self, k: int, src: int, dst: int) -> np.ndarray:
        """The ring segments that step k of the payload schedule moves from shard src to shard dst."""
        st = self._payload_schedule.steps[k]
        return st.segment[(st.src == src) & (st.dst == dst)]

    def send_segments(self, k: int, dst: int) -> np.ndarray:
        """Step k's segments from this shard to shard `dst`, concatenated in schedule order."""
        segments = self._ring_segments(k, self.shard.index, dst)
        return np.concatenate([self._payload[self._segment_slice(int(c))] for c in segments])

    def recv_segments(self, k: int, src: int, data: np.ndarray) -> int:
        """Apply step k's message from shard `src`: add (reduce-scatter steps) or store (gather steps).
        Returns the bytes received."""
        reduce = self._payload_schedule.steps[k].reduce
        at = 0
        for c in self._ring_segments(k, src, self.shard.index):
            sl = self._segment_slice(int(c))
            size = sl.stop - sl.start
            if reduce:
                self._payload[sl] += data[at:at + size]
            else:
                self._payload[sl] = data[at:at + size]
            at += size
        if at != data.size:
            raise ValueError(f"shard {self.shard.index}: step {k} message from shard {src} has {data.size} "
                             f"elements, the schedule expects {at}")
        return int(data.nbytes)

    def check_payload(self) -> bool:
        """Is the reduced buffer the exact sum of every shard's payload?"""
        shards = len(self.cluster.shards)
        exact = sum(payload(self.scenario.seed, s, self._payload_step, self._payload_elements) for s in range(shards))
        return bool(np.array_equal(self._payload, exact))


def payload_algorithm(scenario, cluster: Cluster) -> str:
    """How the shards all-reduce the payload: the algorithm the network model picks for the outermost tier
    of the data-parallel group's gradient all-reduce (shards stand for the instances it spans), "ring"
    when the model picks ring or KangaRing, when there is no data parallelism, or when RDH would need a
    power-of-two number of shards that the run does not have.
    """
    from ..network import collective_time, group_of
    from ..network.algorithms import is_pow2

    shards = len(cluster.shards)
    lay = cluster.layout
    if shards <= 1 or lay.dp <= 1:
        return "ring"
    per_rank = payload_elements(scenario, cluster) * 8 / max(scenario.emulation.payload_scale, 1e-30) \
        / replica_ranks(lay.tp, lay.cp, lay.pp)
    name = collective_time(cluster, "all_reduce", per_rank, group_of(cluster, lay.dp, replica_ranks(lay.tp, lay.cp, lay.pp)))[1]
    outer = name[len("hierarchical("):-1].split("+")[-1] if name.startswith("hierarchical(") else name
    outer = outer.removeprefix("z-")
    if outer == "mesh" or (outer == "rdh" and is_pow2(shards)):
        return outer
    return "ring"
