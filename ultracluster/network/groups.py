"""Communication groups: the ranks a collective spans (`Group`, `group_of`), and its bus factor.

Pure (numpy only); part of the collective model (`network.collectives`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cluster import Cluster, group_span
from . import algorithms as algs


@dataclass(frozen=True)
class Group:
    """A communication group: `per_instance` members on each of `instances` instances.

    Member ``a * per_instance + b`` (instance a, local member b) is global rank
    ``first_rank + a * instance_step + b * stride``.

    Attributes:
        per_instance: members on each instance (every instance holds the same number, as Neuron requires).
        instances: instances the group spans.
        stride: global-rank spacing of consecutive members on an instance (0: 1 inside one instance, else
            ranks_per_instance // per_instance, the members spread evenly over each instance).
        together: cost the collective with every group of this shape on the same instances running at once
            (the TP groups, or the DP groups, of every replica); False: this group alone (nccom-test).
        instance_step: global-rank spacing between the first members of consecutive instances
            (0: per_instance x stride, as for `group_of` groups).
        first_rank: global rank of member 0 (where the group sits; matters when transfers share links
            in `concurrent_time`).
    """

    per_instance: int
    instances: int
    stride: int = 0
    together: bool = True
    instance_step: int = 0
    first_rank: int = 0

    @property
    def ranks(self) -> int:
        return self.per_instance * self.instances

    def resolved_stride(self, ranks_per_instance: int) -> int:
        """The stride, with 0 resolved as documented."""
        if self.stride > 0:
            return self.stride
        if self.instances == 1:
            return 1
        return max(1, ranks_per_instance // self.per_instance)

    def member_ranks(self, ranks_per_instance: int) -> np.ndarray:
        """[ranks] global rank of every member (the group that starts at rank 0)."""
        s = self.resolved_stride(ranks_per_instance)
        step = self.instance_step or self.per_instance * s
        a, b = np.divmod(np.arange(self.ranks, dtype=np.int64), self.per_instance)
        return self.first_rank + a * step + b * s


def group_of(cluster: Cluster, size: int, stride: int) -> Group:
    """The group of `size` ranks spaced `stride` apart in the global rank order (all such groups run at once)."""
    local, inter = group_span(size, stride, cluster.ranks_per_instance)
    return Group(per_instance=local, instances=inter, stride=stride)


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests bus-bandwidth factor (docs/sources.md §3.6): AR 2(n-1)/n; RS, AG, A2A (n-1)/n; send/recv 1.

    NaN for an op outside `algorithms.OPS` or for no ranks (the report's collectives table shows it blank).
    """
    if op not in algs.OPS or ranks <= 0:
        return float("nan")
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (ranks - 1) / ranks
    return 1.0
