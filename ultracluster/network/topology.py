"""Cluster → the emulated fabric: where every rank sits, which links a transfer crosses, and what they carry.

Tiers (docs/sources.md §5.2, §3.1, §3.8):

- **chip**: the NeuronCores of one chip exchange data through the chip's DMA engines (one shared resource
  per chip, `dma_bytes_per_s` of the catalog).
- **NeuronLink**: the 16 chips of an instance form a `torus` (4x4) whose chip ``c`` sits at
  ``x = c % 4, y = c // 4`` (assumption: chip index in row-major torus order). Each chip has 4 ports
  (+x, -x, +y, -y); a port carries ``neuronlink_bytes_per_s_per_chip / 4`` in each direction (derived
  per-link figure of docs/sources.md §3.1: the per-chip figure split over 4 neighbours).
- **Z** (Trn2 UltraServer only): the chips with the same (x, y) in the 4 instances of an UltraServer form a
  ring; each chip has 2 Z ports of ``z_link_bytes_per_s_per_chip / 2`` each.
- **EFA**: every instance has `efa_nics` NICs of ``efa_bytes_per_s / efa_nics`` each, egress and ingress
  counted separately; chip ``c`` uses NIC ``c * nics // chips`` (one NIC per chip on Trn2, one per two
  chips on trn1.32xlarge). The EFA fabric itself is non-blocking (SRD sprays packets over many paths;
  docs/sources.md §3.3), so only the NICs are shared.

Routing is dimension-ordered (x, then y, then z) along the shorter way round each ring; when both ways are
equally short (distance 2 on a ring of 4) the bytes are split evenly between them. A flow between
instances that are not in the same UltraServer goes out of its chip's NIC and into the peer chip's NIC.

**NeuronSwitch** (Trainium3, `Fabric.switched`; docs/trainium3.md): no torus. Each chip has three link
levels, each with an egress and an ingress resource (the switches themselves are taken as non-blocking):
level 1 to the chips of its own server through the switch, level 2 to the chips of the other servers of
its half of the UltraServer (Gen1: the server pair on one NeuronSwitch-v1; Gen2: the rack), level 3 a
direct link to the chip in the same position of the partner server in the other half (server s and
s + instances/2). They sit in the same resource slots as the torus ports: the 4 port slots are level-1
out, level-1 in, level-2 out, level-2 in; the 2 Z slots are level-3 out and in. A flow to the other half
crosses its direct link first, then level 1 or 2 inside that half ("data and its semaphore always
traverse the same physical path", T4: one path, no splitting).

Rank placement follows NxD (cluster/placement.py): rank ``r`` lives on instance ``r // ranks_per_instance``,
chip ``(r % ranks_per_instance) // ranks_per_chip``, so tensor-parallel groups (innermost) stay inside a
chip or a NeuronLink domain, pipeline stages come next and data parallelism spans instances.

Pure numpy: no Ray, no I/O. Every function is vectorized over flows.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..cluster import Cluster, rank_coords
from ..frozen import read_only
from ..cluster.catalog import ultraserver_of

US_INSTANCES = 4        # instances per Trn2 UltraServer (docs/sources.md §5.2, H6)
PORTS = 4               # NeuronLink ports per chip inside an instance: +x, -x, +y, -y (H4, H8, H10)
Z_PORTS = 2             # +z, -z ports per chip in an UltraServer (H6)

# Resource kinds, for reports and tests.
CHIP, PORT, ZPORT, NIC_OUT, NIC_IN = "chip", "neuronlink", "z", "efa_out", "efa_in"
SWITCH, DOMAIN, DIRECT = "neuronswitch", "neuronswitch_domain", "direct"     # NeuronSwitch link levels 1-3


@dataclass(frozen=True)
class Fabric:
    """The link tiers of one cluster, raw (uncalibrated) bandwidths in bytes/s per direction.

    Attributes:
        generation: the chip, "trainium" (Trn1, NeuronLink-v2) or "trainium2" (Trn2, NeuronLink-v3).
        torus: chips per dimension of the intra-instance torus (4, 4).
        chips: chips per instance.
        ranks_per_chip: ranks (logical NeuronCores) per chip.
        ranks_per_instance: ranks per instance.
        instances: instances in the cluster.
        nics: EFA NICs per instance.
        ultraserver: instances are joined 4 at a time by Z rings.
        chip_bytes_per_s: one chip's DMA bandwidth, shared by its ranks' intra-chip transfers.
        port_bytes_per_s: one NeuronLink port, one direction.
        z_port_bytes_per_s: one Z port, one direction (0 without UltraServer).
        nic_bytes_per_s: one EFA NIC, one direction.
        hop_s: NeuronLink latency per hop.
        z_hop_s: Z latency per hop.
        efa_s: EFA latency of one transfer (point to point, HBM to HBM).
        switched: a NeuronSwitch fabric (Trainium3): `port_bytes_per_s` is level 1 (intra-server),
            `domain_port_bytes_per_s` level 2, `z_port_bytes_per_s` level 3 (direct links), each per
            direction; `hop_s` is one switch traversal, `z_hop_s` one direct link.
        domain_port_bytes_per_s: level-2 bandwidth of a chip, one direction (switched fabrics only).
        us_instances: instances per UltraServer.
        dies: compute dies per chip (Trainium3: 2).
    """

    generation: str
    torus: tuple[int, int]
    chips: int
    ranks_per_chip: int
    ranks_per_instance: int
    instances: int
    nics: int
    ultraserver: bool
    chip_bytes_per_s: float
    port_bytes_per_s: float
    z_port_bytes_per_s: float
    nic_bytes_per_s: float
    hop_s: float
    z_hop_s: float
    efa_s: float
    switched: bool = False
    domain_port_bytes_per_s: float = 0.0
    us_instances: int = US_INSTANCES
    dies: int = 1

    @property
    def resources_per_instance(self) -> int:
        """Resource slots per instance: chips, ports, Z ports, NIC egress, NIC ingress."""
        return self.chips * (1 + PORTS + Z_PORTS) + 2 * self.nics

    def local_kinds(self) -> np.ndarray:
        """[resources_per_instance] kind name of every resource slot of an instance."""
        c, n = self.chips, self.nics
        if self.switched:
            return np.array([CHIP] * c + [SWITCH, SWITCH, DOMAIN, DOMAIN] * c + [DIRECT] * (Z_PORTS * c)
                            + [NIC_OUT] * n + [NIC_IN] * n)
        return np.array([CHIP] * c + [PORT] * (PORTS * c) + [ZPORT] * (Z_PORTS * c) + [NIC_OUT] * n
                        + [NIC_IN] * n)

    def local_tiers(self) -> np.ndarray:
        """[resources_per_instance] tier of every resource slot: 0 chip DMA, 1 NeuronLink or Z port, 2 NIC."""
        c, n = self.chips, self.nics
        return np.concatenate([np.zeros(c), np.ones((PORTS + Z_PORTS) * c), np.full(2 * n, 2)]).astype(np.int64)

    def local_bandwidth(self, neuronlink_efficiency: float = 1.0, chip_efficiency: float = 1.0,
                        efa_efficiency: float = 1.0) -> np.ndarray:
        """[resources_per_instance] achievable bytes/s of every resource slot of an instance.

        Args:
            neuronlink_efficiency: achieved fraction of a NeuronLink (and Z) port's bandwidth.
            chip_efficiency: achieved fraction of the chip's DMA bandwidth for intra-chip transfers.
            efa_efficiency: achieved fraction of a NIC's bandwidth.
        """
        c, n = self.chips, self.nics
        ports = np.tile(self.port_slot_bytes_per_s(), c)
        return np.concatenate([
            np.full(c, self.chip_bytes_per_s * chip_efficiency),
            ports * neuronlink_efficiency,
            np.full(Z_PORTS * c, self.z_port_bytes_per_s * neuronlink_efficiency),
            np.full(2 * n, self.nic_bytes_per_s * efa_efficiency),
        ])

    def local_bandwidths(self, efficiencies: np.ndarray) -> np.ndarray:
        """[settings, resources_per_instance] `local_bandwidth` under each row of `efficiencies` [settings, 3] (a
        tier's achieved fraction: chip, NeuronLink and Z, EFA), the same products."""
        return self.local_bandwidth() * np.asarray(efficiencies, dtype=float)[:, self.local_tiers()]

    def port_slot_bytes_per_s(self) -> np.ndarray:
        """[PORTS] raw bandwidth of a chip's 4 port slots (torus: +x, -x, +y, -y; switched: level-1 out and
        in, level-2 out and in)."""
        if self.switched:
            l1, l2 = self.port_bytes_per_s, self.domain_port_bytes_per_s
            return np.array([l1, l1, l2, l2])
        return np.full(PORTS, self.port_bytes_per_s)

    def link_egress_bytes_per_s(self) -> float:
        """What one chip can send per second over NeuronLink (all ports and Z ports, one direction)."""
        if self.switched:
            return self.port_bytes_per_s + self.domain_port_bytes_per_s + self.z_port_bytes_per_s
        return PORTS * self.port_bytes_per_s + Z_PORTS * self.z_port_bytes_per_s


def fabric(cluster: Cluster) -> Fabric:
    """The fabric of a cluster (catalog numbers after `cluster.network` overrides).

    On a NeuronSwitch fabric the per-chip figure (`Links.neuronlink_bytes_per_s_per_chip`, times the
    calibration's `neuronswitch_scale_trn3`) splits over the three levels in the catalog's proportions.
    """
    spec, links = cluster.instance, cluster.links
    us = ultraserver_of(spec) if cluster.ultraserver else None
    if spec.switch_level_shares is not None:
        per_chip = links.neuronlink_bytes_per_s_per_chip * cluster.calibration.network.neuronswitch_scale_trn3
        l1, l2, l3 = (per_chip * share for share in spec.switch_level_shares)
        return Fabric(
            generation=spec.chip.name, torus=tuple(spec.torus), chips=spec.chips,
            ranks_per_chip=cluster.ranks_per_chip, ranks_per_instance=cluster.ranks_per_instance,
            instances=cluster.instances, nics=spec.efa_nics, ultraserver=us is not None,
            chip_bytes_per_s=spec.chip.dma_bytes_per_s, port_bytes_per_s=l1,
            z_port_bytes_per_s=l3 if us is not None else 0.0, nic_bytes_per_s=links.efa_bytes_per_s / spec.efa_nics,
            hop_s=links.neuronlink_latency_s, z_hop_s=links.z_latency_s, efa_s=links.efa_latency_s,
            switched=True, domain_port_bytes_per_s=l2 if us is not None else 0.0,
            us_instances=us.instances if us is not None else US_INSTANCES, dies=spec.chip.dies)
    return Fabric(
        generation=spec.chip.name, torus=tuple(spec.torus), chips=spec.chips, ranks_per_chip=cluster.ranks_per_chip,
        ranks_per_instance=cluster.ranks_per_instance, instances=cluster.instances, nics=spec.efa_nics,
        ultraserver=bool(cluster.ultraserver), chip_bytes_per_s=spec.chip.dma_bytes_per_s,
        port_bytes_per_s=links.neuronlink_bytes_per_s_per_chip / PORTS,
        z_port_bytes_per_s=links.z_link_bytes_per_s_per_chip / Z_PORTS,
        nic_bytes_per_s=links.efa_bytes_per_s / spec.efa_nics,
        hop_s=links.neuronlink_latency_s, z_hop_s=links.z_latency_s, efa_s=links.efa_latency_s,
        us_instances=us.instances if us is not None else US_INSTANCES,
    )


def fabric_reads(cluster: Cluster) -> tuple:
    """What `fabric` reads of `cluster`, its objects by identity (a caller holding the clusters compares them): two
    clusters alike here have equal fabrics. An interval's settings, one placement under many calibrations, differ
    only in the calibration, which a fabric reads only on a NeuronSwitch fabric (`neuronswitch_scale_trn3`)."""
    spec = cluster.instance
    return (id(spec), id(cluster.links), cluster.instances, cluster.lnc, bool(cluster.ultraserver),
            cluster.calibration.network.neuronswitch_scale_trn3 if spec.switch_level_shares is not None else None)


def locate(fab: Fabric, ranks: np.ndarray) -> dict[str, np.ndarray]:
    """Where global ranks sit.

    Returns:
        int arrays shaped like `ranks`: "instance", "chip" (in its instance), "slot" (rank on its chip),
        "x", "y" (torus coordinates), "z" (position in the UltraServer, 0 without one), "server"
        (UltraServer index, or the instance index without UltraServers).
    """
    r = np.asarray(ranks, dtype=np.int64)
    inst, local = np.divmod(r, fab.ranks_per_instance)
    chip, slot = np.divmod(local, fab.ranks_per_chip)
    tx = fab.torus[0]
    if fab.ultraserver:
        server, z = np.divmod(inst, fab.us_instances)
    else:
        server, z = inst, np.zeros_like(inst)
    return {"instance": inst, "chip": chip, "slot": slot, "x": chip % tx, "y": chip // tx, "z": z,
            "server": server}


def snake_position(fab: Fabric, chip: np.ndarray) -> np.ndarray:
    """Position of a chip along the snake Hamiltonian cycle of the torus (row 0 left to right, row 1 right
    to left, ...), which Neuron's rings follow so that consecutive ring members are torus neighbours."""
    tx = fab.torus[0]
    x, y = chip % tx, chip // tx
    return y * tx + np.where(y % 2 == 0, x, tx - 1 - x)


@dataclass(frozen=True)
class Routed:
    """Flows mapped onto resources: one entry per (flow, resource) crossing.

    Attributes:
        resource: [entries] global resource id (instance * resources_per_instance + local slot).
        nbytes: [entries] bytes the flow puts on that resource.
        latency_s: [flows] wire latency of each flow's path (hops x per-hop latency, or the EFA latency).
        tier: [flows] 0 same chip, 1 NeuronLink (incl. Z), 2 EFA.
    """

    resource: np.ndarray
    nbytes: np.ndarray
    latency_s: np.ndarray
    tier: np.ndarray


def _ways(a: np.ndarray, b: np.ndarray, size: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The two ways round a ring of `size` from a to b: ((hops, weight) positive way, (hops, weight)
    negative way). The shorter way gets weight 1, the other 0; equally short ways get 0.5 each."""
    d = (b - a) % size
    back = (size - d) % size
    w_pos = np.where(d < back, 1.0, np.where(d == back, 0.5, 0.0))
    w_pos = np.where(d == 0, 1.0, w_pos)
    return (d, w_pos), (back, 1.0 - w_pos)


def route(fab: Fabric, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> Routed:
    """Map flows (global rank → global rank, bytes) onto the resources they cross.

    Args:
        fab: the fabric.
        src, dst: [flows] global ranks (src != dst).
        nbytes: [flows] bytes of each flow.

    Returns:
        The routed entries and each flow's latency and tier.
    """
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    nbytes = np.broadcast_to(np.asarray(nbytes, dtype=float), src.shape).astype(float)
    s, d = locate(fab, src), locate(fab, dst)
    rpi, c = fab.resources_per_instance, fab.chips
    nic_out0 = c * (1 + PORTS + Z_PORTS)
    nic_in0 = nic_out0 + fab.nics
    latency = np.zeros(src.size)
    tier = np.zeros(src.size, dtype=np.int64)
    res_parts: list[np.ndarray] = []
    byte_parts: list[np.ndarray] = []

    same_inst = s["instance"] == d["instance"]
    same_chip = same_inst & (s["chip"] == d["chip"])
    z_link = fab.ultraserver & (s["server"] == d["server"]) & ~same_inst
    efa = ~same_inst & ~z_link

    # same chip: the chip's DMA engines
    i = np.flatnonzero(same_chip)
    res_parts.append(s["instance"][i] * rpi + s["chip"][i])
    byte_parts.append(nbytes[i])

    # NeuronLink: x then y inside the source instance, then z round the UltraServer at the target (x, y);
    # on a NeuronSwitch fabric the switch levels instead
    i = np.flatnonzero((same_inst & ~same_chip) | z_link)
    tier[i] = 1
    if i.size and fab.switched:
        latency[i] = _switch_entries(fab, {k: v[i] for k, v in s.items()}, {k: v[i] for k, v in d.items()},
                                     nbytes[i], res_parts, byte_parts)
    elif i.size:
        latency[i] = _link_entries(fab, {k: v[i] for k, v in s.items()}, {k: v[i] for k, v in d.items()}, nbytes[i],
                                   res_parts, byte_parts)

    # EFA: the source chip's NIC out, the destination chip's NIC in
    i = np.flatnonzero(efa)
    tier[i] = 2
    latency[i] = fab.efa_s
    res_parts.append(s["instance"][i] * rpi + nic_out0 + s["chip"][i] * fab.nics // c)
    res_parts.append(d["instance"][i] * rpi + nic_in0 + d["chip"][i] * fab.nics // c)
    byte_parts += [nbytes[i], nbytes[i]]

    return Routed(resource=np.concatenate(res_parts).astype(np.int64), nbytes=np.concatenate(byte_parts),
                  latency_s=latency, tier=tier)


def _both_ways(a: np.ndarray, b: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """`_ways` stacked: ([2, n] hops, [2, n] weights), the positive way first."""
    (d, w_pos), (back, w_neg) = _ways(a, b, size)
    return np.stack([d, back]), np.stack([w_pos, w_neg])


@lru_cache(maxsize=16)
def _way_grid(tx: int, ty: int, nz: int) -> tuple[np.ndarray, ...]:
    """The ways round x, y and z rings (x outermost, z innermost) as indices into `_both_ways`' rows and signs, and
    each ring's hops 0.. as [1, hops, 1] columns."""
    ix, iy, iz = (a.ravel() for a in np.meshgrid(np.arange(2), np.arange(2), np.arange(nz), indexing="ij"))
    sign = np.array([1, -1])
    return read_only((ix, iy, iz, sign[ix][:, None, None], sign[iy][:, None, None], sign[iz][:, None, None],
                      np.arange(tx // 2 + 1)[None, :, None], np.arange(ty // 2 + 1)[None, :, None],
                      np.arange(US_INSTANCES // 2 + 1)[None, :, None]))


def _link_entries(fab: Fabric, s: dict[str, np.ndarray], d: dict[str, np.ndarray], w: np.ndarray,
                  res_parts: list[np.ndarray], byte_parts: list[np.ndarray]) -> np.ndarray:
    """Route flows over NeuronLink: x then y inside the source instance, then z round the UltraServer at the target
    (x, y), each flow split over the shortest ways round each ring; appends their (resource, bytes) entries way by
    way (x, y, z nested) and, along a way, x's hops, then y's, then z's, and returns each flow's latency (its
    longest way). Every way and hop at once, the entries in that order."""
    rpi, tx, ty = fab.resources_per_instance, fab.torus[0], fab.torus[1]
    port0, z0 = fab.chips, fab.chips * (1 + PORTS)
    x, y, xd, inst = s["x"], s["y"], d["x"], s["instance"]
    hx, wx = _both_ways(x, xd, tx)                                     # [2, n]
    hy, wy = _both_ways(y, d["y"], ty)
    hz, wz = _both_ways(s["z"], d["z"], US_INSTANCES) if fab.ultraserver else (np.zeros((1, x.size), dtype=x.dtype),
                                                                                np.ones((1, x.size)))
    ix, iy, iz, sx, sy, sz, jx, jy, jz = _way_grid(tx, ty, hz.shape[0])
    weight = wx[ix] * wy[iy] * wz[iz]                                  # [ways, n]
    used = weight > 0
    res = [inst * rpi + port0 + (y * tx + (x + sx * jx) % tx) * PORTS + np.where(sx > 0, 0, 1),
           inst * rpi + port0 + (((y + sy * jy) % ty) * tx + xd) * PORTS + np.where(sy > 0, 2, 3)]
    hit = [used[:, None] & (hx[ix][:, None] > jx), used[:, None] & (hy[iy][:, None] > jy)]
    if fab.ultraserver:
        res.append((s["server"] * US_INSTANCES + (s["z"] + sz * jz) % US_INSTANCES) * rpi + z0 + d["chip"] * Z_PORTS
                   + np.where(sz > 0, 0, 1))
        hit.append(used[:, None] & (hz[iz][:, None] > jz))
    hit = np.concatenate(hit, axis=1)                                  # [ways, hops, n]
    res_parts.append(np.concatenate(res, axis=1)[hit])
    byte_parts.append(np.broadcast_to((w * weight)[:, None, :], hit.shape)[hit])
    path = (hx[ix] + hy[iy]) * fab.hop_s + hz[iz] * fab.z_hop_s
    return np.where(used, path, 0.0).max(axis=0, initial=0.0)


def _switch_entries(fab: Fabric, s: dict[str, np.ndarray], d: dict[str, np.ndarray], nbytes: np.ndarray,
                    res_parts: list[np.ndarray], byte_parts: list[np.ndarray]) -> np.ndarray:
    """Route flows between chips of one server or one UltraServer over the NeuronSwitch levels (module
    docstring); appends their (resource, bytes) entries and returns each flow's latency."""
    rpi, c = fab.resources_per_instance, fab.chips
    port0, z0 = c, c * (1 + PORTS)

    def port(inst: np.ndarray, chip: np.ndarray, slot: int) -> np.ndarray:
        return inst * rpi + port0 + chip * PORTS + slot

    def add(mask: np.ndarray, resource: np.ndarray) -> None:
        res_parts.append(resource[mask])
        byte_parts.append(nbytes[mask])

    half = max(1, fab.us_instances // 2)
    same_inst = s["instance"] == d["instance"]
    same_half = ~same_inst & (s["z"] // half == d["z"] // half)
    cross = ~same_inst & ~same_half
    # level 1 inside the server, level 2 to another server of the same half
    add(same_inst, port(s["instance"], s["chip"], 0))
    add(same_inst, port(d["instance"], d["chip"], 1))
    add(same_half, port(s["instance"], s["chip"], 2))
    add(same_half, port(d["instance"], d["chip"], 3))
    # the other half: the direct link to the partner chip, then level 1 or 2 from there
    partner = s["server"] * fab.us_instances + (s["z"] + half) % (2 * half)
    add(cross, s["instance"] * rpi + z0 + s["chip"] * Z_PORTS)
    add(cross, partner * rpi + z0 + s["chip"] * Z_PORTS + 1)
    there = cross & (partner == d["instance"])
    onward = there & (s["chip"] != d["chip"])
    beyond = cross & ~there
    add(onward, port(partner, s["chip"], 0))
    add(onward, port(d["instance"], d["chip"], 1))
    add(beyond, port(partner, s["chip"], 2))
    add(beyond, port(d["instance"], d["chip"], 3))
    return np.where(cross, fab.z_hop_s + np.where(onward | beyond, fab.hop_s, 0.0), fab.hop_s)


def placement_records(cluster: Cluster, max_rows: int = 64) -> list[dict]:
    """Where ranks sit and which parallel groups they belong to, for a sample of ranks (report table).

    The sample is every rank when there are at most `max_rows`, else evenly spaced ranks (always the first
    and last). Columns: rank, instance, ultraserver (index or -1), chip, core (first physical NeuronCore of
    the rank on its chip), x, y, z (torus coordinates; z is the position in the UltraServer or 0), nic
    (EFA NIC of the rank's chip), tp, cp, pp, dp (the rank's index in each parallel dimension), tp_group,
    pp_group, dp_group (index of the group of each kind the rank belongs to).

    Args:
        cluster: the cluster (its layout gives the parallel coordinates).
        max_rows: at most this many rows.

    Returns:
        A list of flat records (one dict per sampled rank) for `pd.DataFrame`.
    """
    fab = fabric(cluster)
    n = cluster.ranks
    ranks = np.arange(n) if n <= max_rows else np.unique(np.linspace(0, n - 1, max(2, max_rows)).round().astype(
        np.int64))
    loc = locate(fab, ranks)
    lay = cluster.layout
    co = rank_coords(lay, ranks)
    tp_group = ranks // lay.tp
    dp_group = co["tp"] + lay.tp * (co["cp"] + lay.cp * co["pp"])
    pp_group = co["tp"] + lay.tp * (co["cp"] + lay.cp * co["dp"])
    rows = []
    for j, r in enumerate(ranks):
        rows.append({
            "rank": int(r), "instance": int(loc["instance"][j]),
            "ultraserver": int(loc["server"][j]) if fab.ultraserver else -1,
            "chip": int(loc["chip"][j]), "core": int(loc["slot"][j] * cluster.lnc),
            "x": int(loc["x"][j]), "y": int(loc["y"][j]), "z": int(loc["z"][j]),
            "nic": int(loc["chip"][j] * fab.nics // fab.chips),
            "tp": int(co["tp"][j]), "cp": int(co["cp"][j]), "pp": int(co["pp"][j]), "dp": int(co["dp"][j]),
            "tp_group": int(tp_group[j]), "pp_group": int(pp_group[j]), "dp_group": int(dp_group[j]),
        })
    return rows
