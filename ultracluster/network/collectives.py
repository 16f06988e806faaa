"""Collective op + bytes + group shape → virtual seconds and the algorithm Neuron would pick.

Costs are alpha-beta per algorithm step (reference network-storage-ray.md §3.5): latency per step plus
bytes over the bandwidth of the links the step uses. Inside an instance the algorithms are Neuron's
intra-node ones (Mesh below 1 MiB, recursive doubling/halving up to 56 MiB, ring above; H11); across
instances the collective is hierarchical (intra reduce-scatter, inter all-reduce on 1/Y of the buffer,
intra all-gather; H12), with the inter stage a ring or RDH. Every rank of an instance shares its EFA
bandwidth, and every rank of a chip its NeuronLink ring bandwidth (all groups of a kind run at once).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..cluster import Cluster, group_span

MIB = 1 << 20
MESH_MAX_BYTES = 1 * MIB          # H11: Mesh best below 1 MB
RDH_MAX_BYTES = 56 * MIB          # H11: RDH best 1-56 MB, ring/KangaRing above
MESH_OVERSUBSCRIPTION = 2.0       # assumption: mean hop count of routed writes on a 4x4 torus (H11 "over-subscription")


@dataclass(frozen=True)
class Group:
    """A communication group: `per_instance` members on each of `instances` instances."""

    per_instance: int
    instances: int

    @property
    def ranks(self) -> int:
        return self.per_instance * self.instances


def group_of(cluster: Cluster, size: int, stride: int) -> Group:
    """The group of `size` ranks spaced `stride` apart in the global rank order."""
    local, inter = group_span(size, stride, cluster.ranks_per_instance)
    return Group(per_instance=local, instances=inter)


def _intra_bw(cluster: Cluster) -> float:
    """NeuronLink bytes/s one rank gets in a collective step (two ring directions of 4 links per chip)."""
    l = cluster.links
    return l.neuronlink_bytes_per_s_per_chip / 2 / cluster.ranks_per_chip * cluster.calibration.neuronlink_efficiency


def _inter_bw(cluster: Cluster) -> float:
    """EFA bytes/s one rank gets when every rank of its instance communicates at once."""
    return cluster.links.efa_bytes_per_s / cluster.ranks_per_instance * cluster.calibration.efa_efficiency


def _flat(op: str, p: int, n: float, alpha: float, bw: float, algorithm: str) -> float:
    """Alpha-beta time of one flat algorithm (p ranks, n bytes per-rank buffer)."""
    if p <= 1:
        return 0.0
    frac = (p - 1) / p * n / bw
    steps = {"ring": p - 1, "mesh": 1, "rdh": math.ceil(math.log2(p))}[algorithm]
    over = MESH_OVERSUBSCRIPTION if algorithm == "mesh" else 1.0
    if op == "all_reduce":
        return 2 * steps * alpha + 2 * frac * over
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return steps * alpha + frac * over
    raise ValueError(op)


def _pick(p: int, n: float) -> str:
    """Neuron's size-based algorithm choice (H11, H12); RDH needs a power-of-two group."""
    if n < MESH_MAX_BYTES:
        return "mesh"
    if n <= RDH_MAX_BYTES and p & (p - 1) == 0:
        return "rdh"
    return "ring"


def collective_time(cluster: Cluster, op: str, nbytes: float, group: Group) -> tuple[float, str]:
    """Virtual seconds of one collective and the algorithm used.

    Args:
        cluster: the cluster (links, calibration, ranks per chip and instance).
        op: all_reduce | reduce_scatter | all_gather | send_recv.
        nbytes: per-rank buffer (all-reduce input, reduce-scatter input, all-gather output, message).
        group: the group shape.

    Returns:
        (seconds, algorithm name).
    """
    l = cluster.links
    if group.ranks <= 1 or nbytes <= 0:
        return 0.0, "none"
    if op == "send_recv":
        if group.instances > 1:
            return l.efa_latency_s + nbytes / _inter_bw(cluster), "efa"
        return l.neuronlink_latency_s + nbytes / _intra_bw(cluster), "neuronlink"
    y, x = group.per_instance, group.instances
    intra_alg = _pick(y, nbytes)
    intra = lambda o, n: _flat(o, y, n, l.neuronlink_latency_s, _intra_bw(cluster), intra_alg)  # noqa: E731
    if x == 1:
        return intra(op, nbytes), intra_alg
    m = nbytes / y
    inter_alg = "rdh" if (x & (x - 1) == 0 and m <= RDH_MAX_BYTES) else "ring"
    inter = lambda o, n: _flat(o, x, n, l.efa_latency_s, _inter_bw(cluster), inter_alg)  # noqa: E731
    name = f"hierarchical({intra_alg}+{inter_alg})" if y > 1 else inter_alg
    if op == "all_reduce":
        return intra("reduce_scatter", nbytes) + inter("all_reduce", m) + intra("all_gather", nbytes), name
    if op == "reduce_scatter":
        return intra("reduce_scatter", nbytes) + inter("reduce_scatter", m), name
    if op == "all_gather":
        return inter("all_gather", m) + intra("all_gather", nbytes), name
    raise ValueError(op)
