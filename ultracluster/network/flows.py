"""Stages → flows over the fabric → per-step link loads → a collective's `LinkLoads`.

Each stage's algorithm steps (`algorithms.patterns`) become flows between members, routed over the fabric
(`topology.route`); a step's load is its busiest resource per tier. Pure (numpy only); part of the
collective model (`network.collectives`).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from ..frozen import kept, read_only
from . import algorithms as algs
from .groups import Group
from .selection import Levels, Stage, algorithm_name, family, levels, stages
from .topology import Fabric, locate, route, snake_position


RING_CHANNELS = 2                 # H11: rings drive disjoint cycles at once (modelled: both ways round the cycle)


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


def unit_flows(units: np.ndarray, algorithm: str, op: str, fraction: float,
                first_only: bool = False) -> list[Flows]:
    """Flows of `algorithm` run by every row of `units` ([n_units, p] global ranks in algorithm order) on
    `fraction` of the buffer; `first_only` keeps the flows sent by member 0 of each unit."""
    n_units, p = units.shape
    if p <= 1:
        return []
    segments, pats = algs.patterns(algorithm, op, p, channels=RING_CHANNELS if algorithm == "ring" else 1)
    out = []
    for pat in pats:
        keep = pat.src == 0 if first_only else slice(None)
        src, dst, size = pat.src[keep], pat.dst[keep], pat.segments[keep] * (fraction / segments)
        out.append(Flows(units[:, src].ravel(), units[:, dst].ravel(), np.tile(size, n_units), pat.repeat,
                         pat.reduce, pat.pipelined))
    return out


def ring_order(fab: Fabric, local: np.ndarray) -> np.ndarray:
    """[..., y] ranks of instances reordered along the snake cycle of chips, the ranks of a chip together."""
    loc = locate(fab, local)
    key = snake_position(fab, loc["chip"]) * fab.ranks_per_chip + loc["slot"]
    return np.take_along_axis(local, np.argsort(key, axis=-1, kind="stable"), axis=-1)


def kangaring_flows(fab: Fabric, local: np.ndarray, st: Stage, k: int = 0) -> list[Flows]:
    """KangaRing (H11): a ring over the chips' primary ranks, both ways round the snake cycle, carrying
    each chip's whole buffer. Its chip-mates take no part in the ring: in a reduce-scatter step the primary
    reads their copy of the segment it forwards, in an all-gather step it writes the segment it receives to
    them as well as to itself (1 read, 2 writes), so each step also moves one segment per chip-mate through
    the chip's DMA engines, in the same step."""
    k = k or fab.ranks_per_chip       # ranks per ring member: a chip's (KangaRing, chip-ring) or a die's
    g, y = local.shape
    chips = ring_order(fab, local).reshape(g, y // k, k)               # [g, chips in ring order, k]
    primaries, mates = chips[:, :, 0], chips[:, :, 1:]
    out = []
    for fl in unit_flows(primaries, "ring", st.op, st.fraction):
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


def stage_flows(fab: Fabric, lv: Levels, st: Stage) -> list[Flows]:
    """Flows of one stage, for every group of the family and every lane of the other tiers.

    By symmetry only the units of the first instance (local stage) or first UltraServer (Z stage) are
    costed: the others put the same loads on their own links at the same time.
    """
    r = lv.ranks                                     # [g, v, u, y]
    if st.tier == "local":
        local = r[:, 0, 0, :]                        # the first instance's units: [g, y], chip-major
        if st.algorithm == "ring":
            return unit_flows(ring_order(fab, local), "ring", st.op, st.fraction)
        if st.algorithm in ("mesh", "rdh"):          # rdh: distances 1, 2, ... = intra-chip stage first (H11)
            return unit_flows(local, st.algorithm, st.op, st.fraction)
        if st.algorithm == "kangaring":
            return kangaring_flows(fab, local, st)
        if st.algorithm in ("chip-ring", "die-ring"):     # NeuronSwitch: one ring member per chip or die
            per_die = max(1, fab.ranks_per_chip // fab.dies)
            return kangaring_flows(fab, local, st, fab.ranks_per_chip if st.algorithm == "chip-ring" else per_die)
        raise ValueError(st.algorithm)
    if st.tier == "z":
        units = r[:, 0].transpose(0, 2, 1).reshape(-1, r.shape[2])         # [g*y, u], first UltraServer
        if fab.switched and st.algorithm == "ring":
            units = units[:, switch_ring_order(fab, units[0])]
        return unit_flows(units, st.algorithm, st.op, st.fraction)
    if st.tier == "efa":
        # ring, RDH and mesh send and receive the same bytes on every instance: the flows leaving the
        # first UltraServer (or instance) load its NICs, and their receivers' NICs, as every other one
        units = r.transpose(0, 2, 3, 1).reshape(-1, r.shape[1])            # [g*u*y, v], v in server order
        return unit_flows(units, st.algorithm, st.op, st.fraction, first_only=True)
    raise ValueError(st.tier)


def switch_ring_order(fab: Fabric, members: np.ndarray) -> np.ndarray:
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
class LinkLoads:
    """A collective's costed shape: its steps, the algorithm shown, the group size and the chip generation."""

    steps: tuple[StepLoad, ...]
    algorithm: str
    ranks: int
    generation: str = "trainium"

    @property
    def spans_efa(self) -> bool:
        return any(s.tier == 2 for s in self.steps)


def step_load(fab: Fabric, fl: Flows) -> StepLoad:
    routed = route(fab, fl.src, fl.dst, fl.per_byte)
    res, inv = np.unique(routed.resource, return_inverse=True)
    per_byte = np.bincount(inv, weights=routed.nbytes, minlength=res.size)
    bandwidth, tiers = _slots(fab)
    slot = res % fab.resources_per_instance
    ratio, tier = per_byte / bandwidth[slot], tiers[slot]
    tier_max = np.array([ratio[tier == t].max(initial=0.0) for t in range(3)])    # each tier's busiest (0: unused)
    return StepLoad(res, per_byte, tier_max, float(routed.latency_s.max()) if routed.latency_s.size else 0.0,
                    int(routed.tier.max()) if routed.tier.size else 0, fl.repeat, fl.reduce, fl.pipelined)


STEP_LOADS_MAX = 4096
_STEP_LOADS: dict[tuple, StepLoad] = {}   # `kept_step_load`'s, by the flows' content


def kept_step_load(fab: Fabric, fl: Flows) -> StepLoad:
    """`step_load`, its routed part (resources, loads, latency, tier) kept by the flows' content (read-only): a
    search's collectives repeat step shapes (an all-gather's steps route as its reduce-scatter's, sizes on either
    side of a switch share stages), 294 steps routing 98 flow sets in the 70B plan; a store at STEP_LOADS_MAX
    entries starts again empty."""
    key = (fab, fl.src.dtype.str, fl.src.tobytes(), fl.dst.dtype.str, fl.dst.tobytes(), fl.per_byte.dtype.str,
           fl.per_byte.tobytes())
    hit = kept(_STEP_LOADS, key, lambda: read_only(step_load(fab, dataclasses.replace(fl, repeat=1, reduce=False,
                                                                                         pipelined=False))),
               STEP_LOADS_MAX)
    return StepLoad(hit.resource, hit.per_byte, hit.tier_max, hit.latency_s, hit.tier, fl.repeat, fl.reduce,
                    fl.pipelined)


@functools.lru_cache(maxsize=64)
def _slots(fab: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """The raw bandwidth and tier of every resource slot of an instance (`Fabric.local_bandwidth`, `local_tiers`)."""
    return read_only((fab.local_bandwidth(), fab.local_tiers()))


@functools.lru_cache(maxsize=4096)
def members_and_levels(fab: Fabric, group: Group) -> tuple[np.ndarray, Levels | None]:
    """The family's members (`family`) and their split by tier (`levels`), cached per fabric and group."""
    members = family(fab, group)
    return read_only((members, levels(fab, members)))


@functools.lru_cache(maxsize=1024)
def stage_link_loads(fab: Fabric, op: str, group: Group, stage_list: tuple[Stage, ...]) -> LinkLoads:
    members, lv = members_and_levels(fab, group)
    if op == "send_recv":
        st = kept_step_load(fab, Flows(members[:, 0], members[:, 1], np.ones(members.shape[0]), 1))
        loc = locate(fab, members[0])
        name = {0: "chip", 1: "neuronlink", 2: "efa"}[st.tier]
        if st.tier == 1 and loc["instance"][0] != loc["instance"][1]:
            name = "z"
        return read_only(LinkLoads((st,), name, 2, fab.generation))
    flows: list[Flows] = []
    for st in stage_list:
        if st.tier == "flat":
            flows += unit_flows(members, st.algorithm, st.op, st.fraction)
        else:
            flows += stage_flows(fab, lv, st)
    return read_only(LinkLoads(tuple(kept_step_load(fab, f) for f in flows), algorithm_name(stage_list), group.ranks,
                             fab.generation))


def link_loads(fab: Fabric, op: str, nbytes: float, group: Group) -> LinkLoads:
    """The costed steps of `op` on `nbytes` per rank over `group` (and, with `together`, its siblings).

    Cached per algorithm choice: once the algorithms are chosen the loads scale linearly with the bytes.
    """
    _, lv = members_and_levels(fab, group)
    return stage_link_loads(fab, op, group, stages(fab, op, nbytes, group, lv))
