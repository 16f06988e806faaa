"""Collective op + bytes + group → virtual seconds, the algorithm Neuron would pick, and the link loads.

How a collective is costed (docs/sources.md §3.4-3.8, §5.3):

1. **Members.** The group's ranks are placed by `topology.locate`. With ``Group.together`` (the default)
   every group of the same shape on the same instances runs at once (all TP groups of an instance, all DP
   groups of an instance), so their flows share chips, NeuronLink ports and NICs.
2. **Tiers.** Members split into the ranks of one instance (NeuronLink), the instances of one UltraServer
   (Z rings) and the UltraServers or instances (EFA). A collective spanning several tiers is hierarchical
   (H12): reduce-scatter goes up the tiers, the top tier all-reduces 1/(inner members) of the buffer,
   all-gather comes back down; an all-gather runs the outer tier first.
3. **Algorithm per tier, chosen as Neuron's runtime chooses** (H11, H12): inside an instance Mesh below
   1 MiB, RDH up to 56 MiB (power-of-two groups), KangaRing above (groups holding every rank of their
   chips), Ring otherwise; across instances Mesh for small messages on small groups, RDH for power-of-two
   groups up to 56 MiB (or large groups), Ring for large messages on small groups.
4. **Steps.** Each algorithm is a list of steps (`algorithms.patterns`); a step's flows are routed over the
   fabric (`topology.route`). A step moves its bytes in ``b = max over resources(bytes / achieved
   bandwidth)`` and pays the longest flow's wire latency plus a fixed cost (`reduce_step_s` for a
   reducing step inside an instance, `efa_step_s` for every step of a collective spanning EFA). Steps run
   one after the other, except that ring steps pipeline: each later ring step costs
   ``max(b, latency + fixed cost)``. A collective adds a launch cost.

`concurrent_time` costs several collectives or sends that run at the same time on shared links (max-min
fair fluid sharing of every chip, port and NIC); `collective_time` keeps the engine's
`(seconds, algorithm)` interface.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..cluster import Cluster, group_span
from ..fairshare import progressive_filling
from . import algorithms as algs
from .calibration import NetworkCalibration
from .topology import Fabric, fabric, locate, route, snake_position

MIB = 1 << 20
MESH_MAX_BYTES = 1 * MIB          # H11: Mesh best below 1 MB (intra); H12: Mesh for small messages (inter)
RDH_MAX_BYTES = 56 * MIB          # H11: RDH best 1-56 MB, KangaRing above
EFA_MESH_MAX_MEMBERS = 8          # H12 "Mesh: small groups" (assumption: up to 8 peers; ingress congestion beyond)
EFA_RING_MAX_MEMBERS = 16         # H12 "Ring: small-to-medium groups, large messages" (assumption: up to 16)
RING_CHANNELS = 2                 # H11: rings drive disjoint cycles at once (modelled: both ways round the cycle)
A2A_MESH_MAX_MEMBERS = 64         # all-to-all: direct writes up to 64 members, pairwise exchange beyond (assumption)


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


# ---------------------------------------------------------------------------------------------------------
# Members and tiers


def family(fab: Fabric, group: Group) -> np.ndarray:
    """[groups, members] global ranks of the group (row 0) and, with `together`, every group of the same
    shape on the same instances: the group shifted by whole ranks inside its instances, wherever the
    shifted group overlaps no group already taken (all TP groups of an instance, all DP groups, ...)."""
    rpi = fab.ranks_per_instance
    g0 = group.member_ranks(rpi)
    if not group.together or g0.size <= 1:
        return g0[None, :]
    inst, local = np.divmod(g0, rpi)
    inst0, idx = np.unique(inst, return_inverse=True)
    taken = np.zeros((inst0.size, rpi), dtype=bool)
    rows = []
    shifts = range(-int(local.min()), rpi - int(local.max()))
    for o in [0] + [o for o in shifts if o != 0]:
        if not taken[idx, local + o].any():
            taken[idx, local + o] = True
            rows.append(g0 + o)
    return np.array(rows, dtype=np.int64)


@dataclass(frozen=True)
class Levels:
    """Members of every group of a family split by tier: ranks[g, v, u, y] is member y of instance u of
    UltraServer v of group g (without UltraServers u has size 1 and v runs over instances); inside an
    instance members are chip-major."""

    ranks: np.ndarray

    @property
    def shape(self) -> tuple[int, int, int]:
        v, u, y = self.ranks.shape[1:]
        return int(v), int(u), int(y)


def levels(fab: Fabric, members: np.ndarray) -> Levels | None:
    """Split members by tier; None when instances (or UltraServers) hold unequal numbers of members."""
    g, p = members.shape
    loc = locate(fab, members)
    order = np.lexsort((loc["slot"], loc["chip"], loc["instance"], loc["server"]), axis=-1)
    ranks = np.take_along_axis(members, order, axis=1)
    loc0 = locate(fab, ranks[0])
    n_inst = np.unique(loc0["instance"]).size
    n_srv = np.unique(loc0["server"]).size
    if p % n_inst or n_inst % n_srv:
        return None
    shaped = ranks.reshape(g, n_srv, n_inst // n_srv, p // n_inst)
    check = locate(fab, shaped)
    same_inst = (check["instance"] == check["instance"][..., :1]).all()
    same_srv = (check["server"] == check["server"][..., :1, :1]).all()
    return Levels(shaped) if same_inst and same_srv else None


# ---------------------------------------------------------------------------------------------------------
# Neuron's algorithm choice


def _chips(fab: Fabric, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(locate(fab, local)["chip"], return_counts=True)


def pick_intra(fab: Fabric, local: np.ndarray, nbytes: float) -> str:
    """Neuron's intra-instance algorithm (H11) for one instance's members and a buffer of `nbytes`.

    On a NeuronSwitch server (Trn3) Neuron's notes name ring, mesh and RDH (T8) but publish no thresholds:
    the Trn2 ones are used, and KangaRing, a torus algorithm, is not. The ring there is the intra-server
    ("intra-JBOG") ring in chip order, the ranks (dies) of a chip next to each other.
    """
    if local.size <= 1:
        return "none"
    chips, counts = _chips(fab, local)
    if nbytes < MESH_MAX_BYTES:
        return "mesh"
    if nbytes <= RDH_MAX_BYTES:
        if algs.is_pow2(chips.size) and (counts == counts[0]).all() and algs.is_pow2(int(counts[0])):
            return "rdh"
        return "ring"
    if fab.switched:
        return _switch_ring(fab, local, chips, counts)
    if fab.ranks_per_chip > 1 and chips.size > 1 and (counts == fab.ranks_per_chip).all():
        return "kangaring"      # only for groups holding every rank of each chip they touch (H11)
    return "ring"


def _switch_ring(fab: Fabric, local: np.ndarray, chips: np.ndarray, counts: np.ndarray) -> str:
    """The ring a NeuronSwitch server runs for large buffers (T8: one rank per chip or per die; no rule for
    choosing is published): one member per chip when the group holds every rank of its chips, one per die
    when it holds whole dies, else every rank. The other ranks of a chip (die) reach the ring through the
    chip's DMA engines, as in KangaRing; fewer members mean fewer ring steps and fixed step costs."""
    per_die = fab.ranks_per_chip // fab.dies
    if fab.ranks_per_chip > 1 and chips.size > 1 and (counts == fab.ranks_per_chip).all():
        return "chip-ring"
    slots = locate(fab, local)["slot"]
    dies, per = np.unique(locate(fab, local)["chip"] * fab.dies + slots // max(1, per_die), return_counts=True)
    if per_die > 1 and dies.size > 1 and (per == per_die).all():
        return "die-ring"
    return "ring"


def pick_inter(members: int, nbytes: float) -> str:
    """Neuron's algorithm between instances or UltraServers (H12) for `members` peers and `nbytes` each."""
    if members <= 1:
        return "none"
    if nbytes < MESH_MAX_BYTES and members <= EFA_MESH_MAX_MEMBERS:
        return "mesh"
    if algs.is_pow2(members) and (nbytes <= RDH_MAX_BYTES or members > EFA_RING_MAX_MEMBERS):
        return "rdh"
    return "ring"


@dataclass(frozen=True)
class Stage:
    """One stage of a (possibly hierarchical) collective: `op` over the members of `tier` with `algorithm`,
    on `fraction` of the collective's per-rank buffer."""

    tier: str          # "local" | "z" | "efa" | "flat"
    algorithm: str
    op: str
    fraction: float


def stages(fab: Fabric, op: str, nbytes: float, group: Group, lv: Levels | None) -> tuple[Stage, ...]:
    """Neuron's decomposition of a collective into stages, with the algorithm of each (H11, H12)."""
    if op == "send_recv":
        return (Stage("flat", "direct", op, 1.0),)
    if op == "all_to_all":
        return (Stage("flat", "mesh" if group.ranks <= A2A_MESH_MAX_MEMBERS else "pairwise", op, 1.0),)
    if lv is None:          # instances hold unequal numbers of members: a flat ring in rank order
        return (Stage("flat", "ring", op, 1.0),)
    v, u, y = lv.shape
    tiers = [(t, m) for t, m in (("local", y), ("z", u), ("efa", v)) if m > 1]
    if not tiers:
        return ()
    local = lv.ranks[0, 0, 0]
    frac = [1.0]
    for _, m in tiers[:-1]:
        frac.append(frac[-1] / m)

    def stage(i: int, stage_op: str) -> Stage:
        t, m = tiers[i]
        n = nbytes * frac[i]
        return Stage(t, pick_intra(fab, local, n) if t == "local" else pick_inter(m, n), stage_op, frac[i])

    top = len(tiers) - 1
    if op == "all_reduce":
        return tuple([stage(i, "reduce_scatter") for i in range(top)] + [stage(top, op)]
                     + [stage(i, "all_gather") for i in reversed(range(top))])
    if op == "reduce_scatter":
        return tuple(stage(i, op) for i in range(top + 1))
    if op == "all_gather":
        return tuple(stage(i, op) for i in reversed(range(top + 1)))
    raise ValueError(f"unknown op {op!r}; known: {', '.join(algs.OPS)}")


def algorithm_name(stage_list: Sequence[Stage]) -> str:
    """The algorithm shown in reports: one name, or hierarchical(inner+...+outer) (Z stages prefixed z-)."""
    by_tier: dict[str, str] = {}
    for st in stage_list:
        by_tier.setdefault(st.tier, ("z-" if st.tier == "z" else "") + st.algorithm)
    names = [by_tier[t] for t in ("flat", "local", "z", "efa") if t in by_tier]
    if not names:
        return "none"
    return names[0] if len(names) == 1 else "hierarchical(" + "+".join(names) + ")"


# ---------------------------------------------------------------------------------------------------------
# Stages → flows → loads


@dataclass(frozen=True)
class Flows:
    """One step shape: flows (global ranks) carrying `per_byte` bytes per byte of the collective's buffer,
    repeated `repeat` times."""

    src: np.ndarray
    dst: np.ndarray
    per_byte: np.ndarray
    repeat: int
    reduce: bool = False
    pipelined: bool = False


def _unit_flows(units: np.ndarray, algorithm: str, op: str, fraction: float,
                first_only: bool = False) -> list[Flows]:
    """Flows of `algorithm` run by every row of `units` ([n_units, p] global ranks in algorithm order) on
    `fraction` of the buffer; `first_only` keeps the flows sent by member 0 of each unit."""
    n_units, p = units.shape
    if p <= 1:
        return []
    chunks, pats = algs.patterns(algorithm, op, p, channels=RING_CHANNELS if algorithm == "ring" else 1)
    out = []
    for pat in pats:
        keep = pat.src == 0 if first_only else slice(None)
        src, dst, size = pat.src[keep], pat.dst[keep], pat.chunks[keep] * (fraction / chunks)
        out.append(Flows(units[:, src].ravel(), units[:, dst].ravel(), np.tile(size, n_units), pat.repeat,
                         pat.reduce, pat.pipelined))
    return out


def _ring_order(fab: Fabric, local: np.ndarray) -> np.ndarray:
    """[..., y] ranks of instances reordered along the snake cycle of chips, the ranks of a chip together."""
    loc = locate(fab, local)
    key = snake_position(fab, loc["chip"]) * fab.ranks_per_chip + loc["slot"]
    return np.take_along_axis(local, np.argsort(key, axis=-1, kind="stable"), axis=-1)


def _kangaring_flows(fab: Fabric, local: np.ndarray, st: Stage, k: int = 0) -> list[Flows]:
    """KangaRing (H11): a ring over the chips' primary ranks, both ways round the snake cycle, carrying
    each chip's whole buffer. Its chip-mates take no part in the ring: in a reduce-scatter step the primary
    reads their copy of the chunk it forwards, in an all-gather step it writes the chunk it receives to
    them as well as to itself (1 read, 2 writes), so each step also moves one chunk per chip-mate through
    the chip's DMA engines, in the same step."""
    k = k or fab.ranks_per_chip       # ranks per ring member: a chip's (KangaRing, chip-ring) or a die's
    g, y = local.shape
    chips = _ring_order(fab, local).reshape(g, y // k, k)               # [g, chips in ring order, k]
    primaries, mates = chips[:, :, 0], chips[:, :, 1:]
    out = []
    for fl in _unit_flows(primaries, "ring", st.op, st.fraction):
        # ring flows: primary -> primary; the matching chip traffic per flow: mates <-> the sender (RS) or
        # the receiver (AG), the same bytes each
        per = fl.per_byte
        ends = fl.src if fl.reduce else fl.dst
        pos = np.searchsorted(np.sort(primaries.ravel()), ends)
        order = np.argsort(primaries.ravel())
        mate = mates.reshape(-1, k - 1)[order[pos]]                     # [flows, k-1]
        prim = np.repeat(ends, k - 1)
        mate = mate.ravel()
        src = np.concatenate([fl.src, mate if fl.reduce else prim])
        dst = np.concatenate([fl.dst, prim if fl.reduce else mate])
        out.append(Flows(src, dst, np.concatenate([per, np.repeat(per, k - 1)]), fl.repeat, fl.reduce,
                         fl.pipelined))
    return out


def _stage_flows(fab: Fabric, lv: Levels, st: Stage) -> list[Flows]:
    """Flows of one stage, for every group of the family and every lane of the other tiers.

    By symmetry only the units of the first instance (local stage) or first UltraServer (Z stage) are
    costed: the others put the same loads on their own links at the same time.
    """
    r = lv.ranks                                     # [g, v, u, y]
    if st.tier == "local":
        local = r[:, 0, 0, :]                        # the first instance's units: [g, y], chip-major
        if st.algorithm == "ring":
            return _unit_flows(_ring_order(fab, local), "ring", st.op, st.fraction)
        if st.algorithm in ("mesh", "rdh"):          # rdh: distances 1, 2, ... = intra-chip stage first (H11)
            return _unit_flows(local, st.algorithm, st.op, st.fraction)
        if st.algorithm == "kangaring":
            return _kangaring_flows(fab, local, st)
        if st.algorithm in ("chip-ring", "die-ring"):     # NeuronSwitch: one ring member per chip or die
            per_die = max(1, fab.ranks_per_chip // fab.dies)
            return _kangaring_flows(fab, local, st, fab.ranks_per_chip if st.algorithm == "chip-ring" else per_die)
        raise ValueError(st.algorithm)
    if st.tier == "z":
        units = r[:, 0].transpose(0, 2, 1).reshape(-1, r.shape[2])         # [g*y, u], first UltraServer
        if fab.switched and st.algorithm == "ring":
            units = units[:, _switch_ring_order(fab, units[0])]
        return _unit_flows(units, st.algorithm, st.op, st.fraction)
    if st.tier == "efa":
        # ring, RDH and mesh send and receive the same bytes on every instance: the flows leaving the
        # first UltraServer (or instance) load its NICs, and their receivers' NICs, as every other one
        units = r.transpose(0, 2, 3, 1).reshape(-1, r.shape[1])            # [g*u*y, v], v in server order
        return _unit_flows(units, st.algorithm, st.op, st.fraction, first_only=True)
    raise ValueError(st.tier)


def _switch_ring_order(fab: Fabric, members: np.ndarray) -> np.ndarray:
    """Ring order of one lane's members over the servers of a NeuronSwitch UltraServer: the first half's
    servers ascending, then the second half's descending, so that the ring crosses between the halves only
    over direct links (Gen1: servers 0, 1, 3, 2; Gen2: 0..17, 35..18). Neuron's Trn3 notes speak of ring
    paths that maximize intra-JBOG link use (T8); the exact path is not published."""
    z = locate(fab, members)["z"]
    half = max(1, fab.us_instances // 2)
    return np.argsort(np.where(z < half, z, 3 * half - 1 - z), kind="stable")


@dataclass(frozen=True)
class StepLoad:
    """One costed step shape.

    Attributes:
        resource: global resource ids the step uses (unique).
        per_byte: bytes on each of them per byte of the collective's buffer.
        tier_max: [3] max over the step's resources of each tier (chip, NeuronLink/Z, EFA) of
            per_byte / raw bandwidth: seconds per byte at 100 % efficiency (0 where the tier is unused).
        latency_s: the longest flow's wire latency.
        tier: the highest tier among its flows (0 chip, 1 NeuronLink/Z, 2 EFA).
        repeat: how many times the step runs with this shape.
        reduce: the receivers add what they get.
        pipelined: ring step (later repeats overlap the previous transfer).
    """

    resource: np.ndarray
    per_byte: np.ndarray
    tier_max: np.ndarray
    latency_s: float
    tier: int
    repeat: int
    reduce: bool = False
    pipelined: bool = False


@dataclass(frozen=True)
class Profile:
    """A collective's costed shape: its steps, the algorithm shown, the group size and the chip generation."""

    steps: tuple[StepLoad, ...]
    algorithm: str
    ranks: int
    generation: str = "trainium"

    @property
    def spans_efa(self) -> bool:
        return any(s.tier == 2 for s in self.steps)


def _load(fab: Fabric, fl: Flows) -> StepLoad:
    routed = route(fab, fl.src, fl.dst, fl.per_byte)
    res, inv = np.unique(routed.resource, return_inverse=True)
    per_byte = np.bincount(inv, weights=routed.nbytes, minlength=res.size)
    rpi = fab.resources_per_instance
    slot = res % rpi
    ratio = per_byte / fab.local_bandwidth()[slot]
    tier_max = np.zeros(3)
    np.maximum.at(tier_max, fab.local_tiers()[slot], ratio)
    return StepLoad(res, per_byte, tier_max, float(routed.latency_s.max()) if routed.latency_s.size else 0.0,
                    int(routed.tier.max()) if routed.tier.size else 0, fl.repeat, fl.reduce, fl.pipelined)


@functools.lru_cache(maxsize=256)
def members_and_levels(fab: Fabric, group: Group) -> tuple[np.ndarray, Levels | None]:
    """The family's members (`family`) and their split by tier (`levels`), cached per fabric and group."""
    members = family(fab, group)
    return members, levels(fab, members)


@functools.lru_cache(maxsize=1024)
def _profile(fab: Fabric, op: str, group: Group, stage_list: tuple[Stage, ...]) -> Profile:
    members, lv = members_and_levels(fab, group)
    if op == "send_recv":
        st = _load(fab, Flows(members[:, 0], members[:, 1], np.ones(members.shape[0]), 1))
        loc = locate(fab, members[0])
        name = {0: "chip", 1: "neuronlink", 2: "efa"}[st.tier]
        if st.tier == 1 and loc["instance"][0] != loc["instance"][1]:
            name = "z"
        return Profile((st,), name, 2, fab.generation)
    flows: list[Flows] = []
    for st in stage_list:
        if st.tier == "flat":
            flows += _unit_flows(members, st.algorithm, st.op, st.fraction)
        else:
            flows += _stage_flows(fab, lv, st)
    return Profile(tuple(_load(fab, f) for f in flows), algorithm_name(stage_list), group.ranks, fab.generation)


def profile(fab: Fabric, op: str, nbytes: float, group: Group) -> Profile:
    """The costed steps of `op` on `nbytes` per rank over `group` (and, with `together`, its siblings).

    Cached per algorithm choice: once the algorithms are chosen the loads scale linearly with the bytes.
    """
    _, lv = members_and_levels(fab, group)
    return _profile(fab, op, group, stages(fab, op, nbytes, group, lv))


# ---------------------------------------------------------------------------------------------------------
# Time


@dataclass(frozen=True)
class StepTable:
    """Steps of many profiles stacked for vectorized costing (the fit evaluates thousands of calibrations).

    Attributes:
        row: [steps] index of the profile (collective) each step belongs to.
        tier_max, latency_s, repeat, reduce, pipelined: per step, as in StepLoad.
        spans_efa: [rows] the collective spans EFA.
        generation: [rows] chip generation of each collective ("trainium", "trainium2", "trainium3").
    """

    row: np.ndarray
    tier_max: np.ndarray
    latency_s: np.ndarray
    repeat: np.ndarray
    reduce: np.ndarray
    pipelined: np.ndarray
    spans_efa: np.ndarray
    generation: np.ndarray


def step_table(profiles: Sequence[Profile]) -> StepTable:
    steps = [(i, s) for i, p in enumerate(profiles) for s in p.steps]
    return StepTable(
        row=np.array([i for i, _ in steps], dtype=np.int64),
        tier_max=np.array([s.tier_max for _, s in steps]).reshape(-1, 3),
        latency_s=np.array([s.latency_s for _, s in steps]),
        repeat=np.array([s.repeat for _, s in steps], dtype=float),
        reduce=np.array([s.reduce for _, s in steps], dtype=bool),
        pipelined=np.array([s.pipelined for _, s in steps], dtype=bool),
        spans_efa=np.array([p.spans_efa for p in profiles], dtype=bool),
        generation=np.array([p.generation for p in profiles], dtype=object),
    )


def table_times(table: StepTable, nbytes: np.ndarray, cal: NetworkCalibration) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth seconds, other seconds) of every row of a StepTable with per-row buffers `nbytes`.

    The bandwidth part is the pure transfer time (what concurrent transfers share); the other part is
    launch, wire latencies and fixed step costs, including what pipelining does not hide.
    """
    rows = table.spans_efa.size
    r = table.row
    link_eff = np.array([cal.neuronlink_efficiency(g) for g in table.generation], dtype=float).reshape(rows)
    eff = np.stack([np.full(r.size, cal.chip_efficiency), link_eff[r], np.full(r.size, cal.efa_efficiency)],
                   axis=1)
    b = np.asarray(nbytes, dtype=float)[r] * (table.tier_max / eff).max(axis=1)
    fixed = np.where(table.spans_efa[r], cal.efa_step_s, np.where(table.reduce, cal.reduce_step_s, 0.0))
    lat = table.latency_s + fixed
    n = table.repeat
    total = np.where(table.pipelined, b + lat + (n - 1) * np.maximum(b, lat), n * (b + lat))
    busy = np.zeros(rows)
    np.add.at(busy, r, n * b)
    whole = np.zeros(rows)
    np.add.at(whole, r, total)
    has = np.bincount(r, minlength=rows) > 0
    launch = np.array([cal.launch_s(g) for g in table.generation], dtype=float).reshape(rows) * has
    return busy, whole - busy + launch


def _check(op: str, group: Group, fab: Fabric) -> None:
    if op not in algs.OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(algs.OPS)}")
    if group.per_instance < 1 or group.instances < 1:
        raise ValueError(f"a group needs per_instance >= 1 and instances >= 1, got {group}")
    if op == "send_recv" and group.ranks != 2:
        raise ValueError(f"send_recv is between 2 ranks, got a group of {group.ranks}")
    members = group.member_ranks(fab.ranks_per_instance)
    if int(members.min()) < 0 or int(members.max()) >= fab.ranks_per_instance * fab.instances:
        raise ValueError(f"{group} does not fit a cluster of {fab.instances} instance(s) x "
                         f"{fab.ranks_per_instance} ranks")


def _breakpoints(fab: Fabric, op: str, nbytes: float, group: Group, above: bool) -> list[float]:
    """Buffer sizes just over (above) or just under (below) `nbytes`'s neighbouring size thresholds of
    Neuron's algorithm choice (any stage's)."""
    _, lv = members_and_levels(fab, group)
    out = []
    for st in stages(fab, op, nbytes, group, lv):
        for limit in (MESH_MAX_BYTES, RDH_MAX_BYTES):
            edge = limit / st.fraction
            if above and edge > nbytes:
                out.append(float(np.nextafter(edge, np.inf)))
            elif not above and edge <= nbytes:
                out.append(float(np.nextafter(edge, 0.0)))
    return sorted(set(out))


# The fitted launch costs reproduce nccom-test, which times one standalone invocation at a time; its Trn2
# examples (dated, per the Neuron docs) floor at about 0.5 ms. Inside a training step the collectives are
# issued from the compiled graph, where Neuron gives the latency term as 10^0 to 10^1 us (H11, intra-node
# collectives on Trn2). Where the two sources disagree we take H11 for in-step collectives (`together`):
# their launch cost is capped at 10 us; standalone ones (`together=False`, `ultracluster collectives`)
# keep the fitted cost. Trn1's fitted launch (about 9 us) is below the cap either way.
IN_GRAPH_LAUNCH_MAX_S = 10e-6


def collective_cost(cluster: Cluster, op: str, nbytes: float, group: Group,
                    calibration: NetworkCalibration | None = None) -> tuple[float, float, Profile]:
    """(bandwidth seconds, other seconds, profile) of one collective; their sum is `collective_time`.

    Neuron switches algorithms at fixed sizes (1 MiB, 56 MiB), its measured sweet spots (H11). With
    `calibration.algorithm_envelope` (the default), where the model prices the algorithm just above a later
    switch lower than the one chosen for this size, that cheaper choice is taken: this size pays the price
    (and the link loads) of the algorithm above the switch. Without it, the chosen algorithm's price is
    floored at the price just below the previous switch, the extra counting as "other" time. Either way a
    larger message never finishes sooner than a smaller one.

    Raises:
        ValueError: an unknown op, or a group that does not fit the cluster.
    """
    cal = calibration or cluster.calibration.network
    if group.together:  # inside a training step: the collective is issued from the compiled graph
        cal = cal.with_(launch_s_trn1=min(cal.launch_s_trn1, IN_GRAPH_LAUNCH_MAX_S),
                        launch_s_trn2=min(cal.launch_s_trn2, IN_GRAPH_LAUNCH_MAX_S),
                        launch_s_trn3=min(cal.launch_s_trn3, IN_GRAPH_LAUNCH_MAX_S))
    fab = fabric(cluster)
    _check(op, group, fab)
    if group.ranks <= 1 or nbytes <= 0:
        return 0.0, 0.0, Profile((), "none", group.ranks, fab.generation)
    if cal.algorithm_envelope:
        sizes = [float(nbytes)] + _breakpoints(fab, op, float(nbytes), group, above=True)
        profs = [profile(fab, op, n, group) for n in sizes]
        busy, other = table_times(step_table(profs), np.array(sizes), cal)
        best = int(np.argmin(busy + other))          # 0 unless a larger size's algorithm is cheaper
        return float(busy[best]), float(other[best]), profs[best]
    sizes = _breakpoints(fab, op, float(nbytes), group, above=False) + [float(nbytes)]
    profs = [profile(fab, op, n, group) for n in sizes]
    busy, other = table_times(step_table(profs), np.array(sizes), cal)
    total = busy + other
    floor = float(total[:-1].max()) if len(sizes) > 1 else 0.0
    return float(busy[-1]), float(other[-1]) + max(0.0, floor - float(total[-1])), profs[-1]


def collective_time(cluster: Cluster, op: str, nbytes: float, group: Group,
                    calibration: NetworkCalibration | None = None) -> tuple[float, str]:
    """Virtual seconds of one collective and the algorithm Neuron would use.

    Args:
        cluster: the cluster (fabric, placement).
        op: all_reduce | reduce_scatter | all_gather | all_to_all | send_recv.
        nbytes: per-rank buffer, bytes (all-reduce input, reduce-scatter input, all-gather output,
            all-to-all data a rank sends in total, send/recv message).
        group: the group shape; with `group.together` every group of that shape on the same instances
            runs at the same time and shares links and NICs.
        calibration: collective factors (default: the cluster's, `cluster.calibration.network`).

    Returns:
        (seconds, algorithm name): "mesh", "rdh", "ring", "kangaring", "pairwise",
        "hierarchical(inner+...+outer)" across tiers (Z stages prefixed "z-"); for send_recv the tier
        crossed: "chip", "neuronlink", "z" or "efa"; "none" for a group of one or an empty buffer.

    Raises:
        ValueError: an unknown op, or a group that does not fit the cluster.
    """
    busy, other, prof = collective_cost(cluster, op, nbytes, group, calibration)
    return busy + other, prof.algorithm


def concurrent_time(cluster: Cluster, transfers: Sequence[tuple[str, float, Group]],
                    calibration: NetworkCalibration | None = None) -> np.ndarray:
    """Seconds each of several collectives/sends takes when they all start at once and share links.

    Alone, a transfer takes its bandwidth part plus its other part (`collective_cost`). Together, the
    bandwidth parts are fluids sharing every resource (chip DMA, NeuronLink and Z ports, NIC egress and
    ingress) max-min fairly: all unfinished transfers speed up together until a resource one of them uses
    saturates, which freezes those using it; when one finishes the others speed up again. The other parts
    (latency, fixed costs) are not shared.

    Args:
        cluster: the cluster.
        transfers: (op, nbytes, group) per transfer, e.g. a stage's data-parallel reduce-scatter and the
            pipeline sends overlapping it.
        calibration: collective factors (default: the cluster's, `cluster.calibration.network`).

    Returns:
        [transfers] seconds from the common start to each transfer's end: never less than the transfer
        alone, never more than all of them one after the other.
    """
    cal = calibration or cluster.calibration.network
    fab = fabric(cluster)
    n = len(transfers)
    work, other = np.zeros(n), np.zeros(n)
    usage: list[tuple[np.ndarray, np.ndarray]] = []
    for i, (op, nbytes, group) in enumerate(transfers):
        work[i], other[i], prof = collective_cost(cluster, op, nbytes, group, cal)
        if prof.steps and work[i] > 0:
            res = np.concatenate([s.resource for s in prof.steps])
            amount = np.concatenate([s.per_byte * s.repeat * float(nbytes) for s in prof.steps])
            u, inv = np.unique(res, return_inverse=True)
            usage.append((u, np.bincount(inv, weights=amount, minlength=u.size)))
        else:
            usage.append((np.zeros(0, np.int64), np.zeros(0)))
    if n == 0:
        return np.zeros(0)
    all_res = np.unique(np.concatenate([u for u, _ in usage]))
    bw = fab.local_bandwidth(cal.neuronlink_efficiency(fab.generation), cal.chip_efficiency,
                             cal.efa_efficiency)[all_res % fab.resources_per_instance]
    rate_alone = np.zeros((n, all_res.size))        # bytes/s each transfer puts on each resource when alone
    for i, (u, amount) in enumerate(usage):
        if work[i] > 0:
            rate_alone[i, np.searchsorted(all_res, u)] = amount / work[i]
    finish = np.zeros(n)
    left = work.copy()
    active = left > 0
    now = 0.0
    while active.any():
        # every active transfer's speed (1 = as fast as alone) rises together until a resource saturates
        speed = np.zeros(n)
        speed[active] = progressive_filling(rate_alone[active].T, bw, np.ones(int(active.sum())))
        dt = np.where(active, left / np.maximum(speed, 1e-300), np.inf)
        step = float(dt.min())
        now += step
        left = np.where(active, left - speed * step, 0.0)
        done = active & (left <= work * 1e-9)
        done[int(np.argmin(dt))] = True
        finish[done & active] = now
        active &= ~done
    return finish + other


def busbw_limit_bytes_per_s(cluster: Cluster, group: Group) -> float:
    """The physical ceiling of busbw for a group, at 100 % link efficiency.

    Whatever the algorithm, every rank of an all-reduce sends 2(p-1)/p of its buffer ((p-1)/p for
    reduce-scatter, all-gather and all-to-all; the message for send/recv), which is busbw x time. Those
    bytes leave through the resources of the rank's chip (its DMA engines, its NeuronLink egress: 4 torus
    and 2 Z ports, or the three NeuronSwitch levels; its NIC), shared by the chip's busy ranks: busbw cannot exceed their summed bandwidth over those ranks.
    """
    fab = fabric(cluster)
    members, _ = members_and_levels(fab, group)
    loc = locate(fab, members)
    _, per_chip = np.unique(loc["instance"] * fab.chips + loc["chip"], return_counts=True)
    nic_of_chip = fab.nic_bytes_per_s * max(1, fab.nics // fab.chips)
    chip_out = fab.chip_bytes_per_s + fab.link_egress_bytes_per_s() + nic_of_chip
    return float(chip_out / int(per_chip.max()))
