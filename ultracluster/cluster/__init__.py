"""Scenario → Cluster: the hardware catalog, link parameters, rank layout and actor shards.

Pure: plain frozen dataclasses and numpy, no Ray. `build_cluster` is the stage's one entry point.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..calibration.factors import Calibration
from ..calibration.fitted_files import fitted, with_network_calibration
from .catalog import INSTANCES, ChipSpec, InstanceSpec, ranks_per_instance, ultraserver_of
from .degraded import DegradedPart, degraded_links, degraded_parts
from .folding import Capacity, Folding, fold, resolve_instances_per_actor
from .placement import (Layout, group_first_rank, group_ranks, group_span, instance_of, instance_ranks,  # noqa: F401
                        rank_coords, replica_ranks, stage_layers, stage_sum)
from ..units import GBPS

__all__ = [
    "Calibration", "Capacity", "Cluster", "DegradedPart", "Folding", "Links", "Layout", "ShardSpec", "build_cluster",
    "fold", "group_span", "rank_coords", "resolve_instances_per_actor", "stage_layers", "z_links",
]


@dataclass(frozen=True)
class Links:
    """Link parameters after scenario overrides (`cluster.network`), SI units.

    NeuronLink figures are per chip; the ring algorithms Neuron uses drive two of the four torus links of
    a chip in each direction (two disjoint Hamiltonian cycles of the 4x4 torus, reference H11), so a rank
    gets `neuronlink_bytes_per_s_per_chip / 2 / ranks_per_chip` in one direction.
    """

    neuronlink_bytes_per_s_per_chip: float
    neuronlink_latency_s: float
    efa_bytes_per_s: float           # per instance
    efa_latency_s: float
    z_link_bytes_per_s_per_chip: float   # UltraServer only (0 otherwise)
    z_latency_s: float


@dataclass(frozen=True)
class ShardSpec:
    """What one Ray actor stands for: a contiguous range of instances and their ranks."""

    index: int
    first_instance: int
    instances: int
    first_rank: int
    ranks: int

    @property
    def label(self) -> str:
        last = self.first_instance + self.instances - 1
        return f"shard {self.index} (instances {self.first_instance}-{last})"


@dataclass(frozen=True)
class Cluster:
    """The emulated cluster: hardware, links, layout and how it is folded into actors."""

    instance: InstanceSpec
    instances: int
    lnc: int
    ultraserver: bool
    layout: Layout
    links: Links
    shards: tuple[ShardSpec, ...]
    calibration: Calibration
    degraded: tuple[DegradedPart, ...] = ()   # `faults.degraded`, resolved (empty: every instance healthy)

    @property
    def chip(self) -> ChipSpec:
        return self.instance.chip

    @property
    def chips(self) -> int:
        return self.instances * self.instance.chips

    @property
    def neuron_cores(self) -> int:
        return self.instances * self.instance.neuron_cores

    @property
    def ranks_per_instance(self) -> int:
        return ranks_per_instance(self.instance, self.lnc)

    @property
    def ranks_per_chip(self) -> int:
        return self.chip.physical_cores // self.lnc

    @property
    def ranks(self) -> int:
        return self.instances * self.ranks_per_instance

    @property
    def instances_per_actor(self) -> int:
        return self.shards[0].instances

    def stage_layers(self, layers: int) -> "list[int]":
        return stage_layers(layers, self.layout.pp * self.layout.virtual_stages).tolist()

    def degraded_copy(self, part: DegradedPart) -> "Cluster":
        """This cluster with every instance at `part`'s links: where a collective touching one degraded
        instance is timed (the slowest member sets the pace)."""
        return replace(self, links=degraded_links(self.links, part), degraded=())


def z_links(spec: InstanceSpec, ultraserver: bool, neuronlink_bytes_per_s_per_chip: float) -> dict[str, float]:
    """The UltraServer fields of `Links`: Trn2 Z links from the catalog; Trn3's direct links as their share
    of the (possibly overridden) NeuronSwitch per-chip figure; zeros without an UltraServer."""
    us = ultraserver_of(spec) if ultraserver else None
    if us is None:
        return {"z_link_bytes_per_s_per_chip": 0.0, "z_latency_s": 0.0}
    if us.switched and spec.switch_level_shares is not None:
        return {"z_link_bytes_per_s_per_chip": neuronlink_bytes_per_s_per_chip * spec.switch_level_shares[2],
                "z_latency_s": us.z_hop_latency_s}
    return {"z_link_bytes_per_s_per_chip": us.z_link_bytes_per_s_per_chip, "z_latency_s": us.z_hop_latency_s}


def cluster_calibration(scenario, calibration: Calibration | None = None) -> Calibration:
    """The calibration a Cluster of `scenario` holds: `calibration` (default: the fitted one) with the scenario's
    named collective calibration (`cluster.network.calibration`) on top, as `build_cluster` applies it."""
    calibration = calibration or fitted()
    net = scenario.cluster.network
    if net is not None and net.calibration != "default":     # a named collective calibration on top
        calibration = with_network_calibration(calibration, net.calibration)
    return calibration


def build_cluster(scenario, instances_per_actor: int, calibration: Calibration | None = None) -> Cluster:
    """Build the Cluster of a validated scenario.

    Args:
        scenario: a resolved `ultracluster.scenario.Scenario`.
        instances_per_actor: instances folded into one actor (already resolved from "auto").
        calibration: the named calibration factors (default: the fitted ones); `cluster.network.calibration`
            applies a named collective calibration on top of them.

    Returns:
        The Cluster. The last shard may hold fewer instances than the others.
    """
    c, p = scenario.cluster, scenario.parallelism
    spec = INSTANCES[c.instance]
    net = c.network
    links = Links(
        neuronlink_bytes_per_s_per_chip=(net.neuronlink_gbps_per_chip * GBPS) if net and net.neuronlink_gbps_per_chip
        else spec.neuronlink_bytes_per_s_per_chip,
        neuronlink_latency_s=(net.neuronlink_latency_us * 1e-6) if net and net.neuronlink_latency_us
        else spec.neuronlink_hop_latency_s,
        efa_bytes_per_s=(net.efa_gbps * GBPS) if net and net.efa_gbps else spec.efa_bytes_per_s,
        efa_latency_s=(net.efa_latency_us * 1e-6) if net and net.efa_latency_us else spec.efa_latency_s,
        **z_links(spec, c.ultraserver, net.neuronlink_gbps_per_chip * GBPS if net and net.neuronlink_gbps_per_chip
                  else spec.neuronlink_bytes_per_s_per_chip),
    )
    calibration = cluster_calibration(scenario, calibration)
    layout = Layout(tp=p.tp, cp=p.cp, pp=p.pp, dp=p.dp, virtual_stages=p.virtual_stages)
    rpi = ranks_per_instance(spec, c.lnc)
    ipa = max(1, min(int(instances_per_actor), c.instances))
    shards = tuple(
        ShardSpec(index=i, first_instance=first, instances=min(ipa, c.instances - first),
                  first_rank=first * rpi, ranks=min(ipa, c.instances - first) * rpi)
        for i, first in enumerate(range(0, c.instances, ipa))
    )
    return Cluster(instance=spec, instances=c.instances, lnc=c.lnc, ultraserver=c.ultraserver, layout=layout,
                   links=links, shards=shards, calibration=calibration,
                   degraded=degraded_parts(scenario.faults, c.instances, spec.efa_nics, scenario.seed))
