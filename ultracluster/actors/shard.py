"""One shard of the cluster → per-rank compute times and its part of the gradient payload ring.

`ShardWorker` is plain Python over numpy: Ray wraps it as an actor (`actors.launch`), tests and the
in-process runner call it directly (`actors.local`). It prices its pipeline chunks once on the chip
model (cost by distinct shapes), then per step scales them by each of its ranks' speed factors.
"""
from __future__ import annotations

import numpy as np

from .. import chip
from .. import operators as opslib
from ..cluster import Cluster, ShardSpec

PAYLOAD_MAX_BYTES = 1 << 30   # per actor; beyond it `emulation.payload_scale` is too large for one machine


def payload_elements(scenario, cluster: Cluster) -> int:
    """Float64 elements each shard reduces: the cluster's gradient bytes x payload_scale / shards / 8."""
    layout, t = cluster.layout, scenario.training
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    params = opslib.chunk_params(scenario.model, layout.tp, layers, layout.pp).sum() * layout.tp * layout.cp \
        * layout.dp
    g_bytes = 4.0 if (t.master_weights == "fp32" or t.precision == "fp32") else 2.0
    return max(1, int(params * g_bytes * scenario.emulation.payload_scale / len(cluster.shards) / 8))


def payload(seed: int, shard: int, step: int, n: int) -> np.ndarray:
    """A shard's gradient payload: integers stored as float64, so every summation order is exact."""
    return np.random.default_rng([seed, shard, step, 0xD9]).integers(-1000, 1000, n).astype(np.float64)


def ring_bounds(n: int, parts: int) -> np.ndarray:
    """Chunk boundaries of an n-element buffer split into `parts` ring chunks."""
    return np.linspace(0, n, parts + 1).astype(np.int64)


class ShardWorker:
    """The vectorized chip model of one shard plus its state in the payload ring."""

    def __init__(self, scenario, cluster: Cluster, shard: ShardSpec):
        self.scenario, self.cluster, self.shard = scenario, cluster, shard
        self._times = chip.chunk_times(scenario, cluster)
        slow, factor = chip.stragglers(scenario, cluster.ranks)
        mine = (slow >= shard.first_rank) & (slow < shard.first_rank + shard.ranks)
        self._slow, self._factor = slow[mine], factor[mine]
        self._n = payload_elements(scenario, cluster)
        self._bounds = ring_bounds(self._n, len(cluster.shards))
        self._buf = np.empty(0)
        self._step = -1

    def ping(self) -> int:
        return self.shard.index

    def profile(self, step: int) -> dict[str, np.ndarray]:
        """This shard's compute for one step, in a form whose size does not grow with its cores.

        Returns:
            "fwd", "bwd": [chunks] seconds of one microbatch of each pipeline chunk at speed 1;
            "opt": [stages] seconds of the optimizer step; "slow_ranks" / "slow_factors": the global
            ranks of this shard that run slower, and by how much (every other rank runs at speed 1).
        """
        t = self._times
        return {"fwd": t.forward_s, "bwd": t.backward_s, "opt": t.optimizer_s,
                "slow_ranks": self._slow, "slow_factors": self._factor}

    # --- ring all-reduce of the payload: reduce-scatter then all-gather, one chunk per step -----------
    def _chunk(self, i: int) -> slice:
        n = len(self.cluster.shards)
        i %= n
        return slice(int(self._bounds[i]), int(self._bounds[i + 1]))

    def start_payload(self, step: int) -> int:
        self._buf = payload(self.scenario.seed, self.shard.index, step, self._n)
        self._step = step
        return self._buf.nbytes

    def send(self, phase: str, k: int) -> np.ndarray:
        i = self.shard.index
        return self._buf[self._chunk(i - k if phase == "rs" else i + 1 - k)].copy()

    def recv(self, phase: str, k: int, data: np.ndarray) -> int:
        j = self.shard.index
        if phase == "rs":
            self._buf[self._chunk(j - 1 - k)] += data
        else:
            self._buf[self._chunk(j - k)] = data
        return data.nbytes

    def check_payload(self) -> bool:
        """Is the reduced buffer the exact sum of every shard's payload?"""
        shards = len(self.cluster.shards)
        exact = sum(payload(self.scenario.seed, s, self._step, self._n) for s in range(shards))
        return bool(np.array_equal(self._buf, exact))
