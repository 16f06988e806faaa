"""Group → members, tiers and the algorithm stages Neuron would run (docs/sources.md §3.4-3.8).

Members are placed by `topology.locate` and split into tiers (instance, UltraServer, EFA); per tier the
algorithm is chosen as Neuron's runtime chooses it (H11, H12); a collective spanning tiers is staged
hierarchically (`stages`). Pure (numpy only); part of the collective model (`network.collectives`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import algorithms as algs
from .groups import Group
from .topology import Fabric, locate
from ..units import MIB


MESH_MAX_BYTES = 1 * MIB          # H11: Mesh best below 1 MB (intra); H12: Mesh for small messages (inter)
RDH_MAX_BYTES = 56 * MIB          # H11: RDH best 1-56 MB, KangaRing above
EFA_MESH_MAX_MEMBERS = 8          # H12 "Mesh: small groups" (assumption: up to 8 peers; ingress congestion beyond)
EFA_RING_MAX_MEMBERS = 16         # H12 "Ring: small-to-medium groups, large messages" (assumption: up to 16)
A2A_MESH_MAX_MEMBERS = 64         # all-to-all: direct writes up to 64 members, pairwise exchange beyond (assumption)


def family(fab: Fabric, group: Group) -> np.ndarray:
    """[groups, members] global ranks of the group (row 0) and, with `together`, every group of the same
    shape on the same instances: the group shifted by whole ranks inside its instances, wherever the
    shifted group overlaps no group already taken (all TP groups of an instance, all DP groups, ...)."""
    rpi = fab.ranks_per_instance
    g0 = group.member_ranks(rpi)
    if not group.together or g0.size <= 1:
        return g0[None, :]
    inst, local = np.divmod(g0, rpi)
    slots = (inst * rpi + local).tolist()     # a member's (instance, local rank) as one number; shifts stay inside
    taken: set[int] = set()
    offsets = []
    shifts = range(-int(local.min()), rpi - int(local.max()))
    for o in [0] + [o for o in shifts if o != 0]:
        moved = [x + o for x in slots]
        if taken.isdisjoint(moved):
            taken.update(moved)
            offsets.append(o)
    return g0[None, :] + np.array(offsets, dtype=np.int64)[:, None]


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


def chips_of(fab: Fabric, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(locate(fab, local)["chip"], return_counts=True)


def pick_intra(fab: Fabric, local: np.ndarray, nbytes: float) -> str:
    """Neuron's intra-instance algorithm (H11) for one instance's members and a buffer of `nbytes`.

    On a NeuronSwitch server (Trn3) Neuron's notes name ring, mesh and RDH (T8) but publish no thresholds:
    the Trn2 ones are used, and KangaRing, a torus algorithm, is not. The ring there is the intra-server
    ("intra-JBOG") ring in chip order, the ranks (dies) of a chip next to each other.
    """
    if local.size <= 1:
        return "none"
    chips, counts = chips_of(fab, local)
    if nbytes < MESH_MAX_BYTES:
        return "mesh"
    if nbytes <= RDH_MAX_BYTES:
        if algs.is_pow2(chips.size) and (counts == counts[0]).all() and algs.is_pow2(int(counts[0])):
            return "rdh"
        return "ring"
    if fab.switched:
        return switch_ring(fab, local, chips, counts)
    if fab.ranks_per_chip > 1 and chips.size > 1 and (counts == fab.ranks_per_chip).all():
        return "kangaring"      # only for groups holding every rank of each chip they touch (H11)
    return "ring"


def switch_ring(fab: Fabric, local: np.ndarray, chips: np.ndarray, counts: np.ndarray) -> str:
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


# (fabric, op, levels' identity, each tier's side of Neuron's size switches) -> `stages`: a stage's
# algorithm reads its size only through `pick_intra` / `pick_inter`'s two comparisons, so a collective's sizes on the
# same side of every switch share their stages (the entry holds its Levels, so the identity is not reused)
_STAGES: dict[tuple, tuple[Levels | None, tuple[Stage, ...]]] = {}
_STAGES_MAX = 1 << 14


def stages(fab: Fabric, op: str, nbytes: float, group: Group, lv: Levels | None) -> tuple[Stage, ...]:
    """Neuron's decomposition of a collective into stages, with the algorithm of each (H11, H12)."""
    if op == "send_recv" or op == "all_to_all" or lv is None:
        return _stages(fab, op, nbytes, group, lv)
    key = (fab, op, id(lv), size_class(op, nbytes, lv))
    hit = _STAGES.get(key)
    if hit is None:
        if len(_STAGES) >= _STAGES_MAX:
            _STAGES.clear()
        hit = _STAGES[key] = (lv, _stages(fab, op, nbytes, group, lv))
    return hit[1]


def size_class(op: str, nbytes: float, lv: Levels | None) -> tuple:
    """Which side of Neuron's two size switches each tier's buffer of a collective of `nbytes` falls on: sizes of
    one class have the same `stages` (an op whose stages no size moves: ())."""
    if op == "send_recv" or op == "all_to_all" or lv is None:
        return ()
    v, u, y = lv.shape
    f, side = 1.0, []
    for m in (y, u, v):          # `_stages`' tiers and buffers (the same products)
        if m > 1:
            n = nbytes * f
            side.append((n < MESH_MAX_BYTES, n <= RDH_MAX_BYTES))
            f = f / m
    return tuple(side)


def _stages(fab: Fabric, op: str, nbytes: float, group: Group, lv: Levels | None) -> tuple[Stage, ...]:
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
