"""Profiles → seconds: the vectorized step table, launch costs, Neuron's size switches (the envelope or
the monotone floor), `collective_cost` and `collective_time`.

Pure (numpy only); part of the collective model (`network.collectives`).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..cluster import Cluster
from ..frozen import kept
from . import algorithms as algs
from .calibration import NetworkCalibration
from .flows import LinkLoads, members_and_levels, link_loads
from .groups import Group
from .selection import MESH_MAX_BYTES, RDH_MAX_BYTES, size_class, stages
from .topology import Fabric, fabric


@dataclass(frozen=True)
class StepTable:
    """Steps of many collectives' link loads stacked for vectorized costing (the fit evaluates thousands of calibrations).

    Attributes:
        row: [steps] index of the link loads (collective) each step belongs to.
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


def step_table(loads: Sequence[LinkLoads]) -> StepTable:
    steps = [(i, s) for i, p in enumerate(loads) for s in p.steps]
    return StepTable(
        row=np.array([i for i, _ in steps], dtype=np.int64),
        tier_max=np.array([s.tier_max for _, s in steps]).reshape(-1, 3),
        latency_s=np.array([s.latency_s for _, s in steps]),
        repeat=np.array([s.repeat for _, s in steps], dtype=float),
        reduce=np.array([s.reduce for _, s in steps], dtype=bool),
        pipelined=np.array([s.pipelined for _, s in steps], dtype=bool),
        spans_efa=np.array([p.spans_efa for p in loads], dtype=bool),
        generation=np.array([p.generation for p in loads], dtype=object),
    )


@dataclass(frozen=True)
class TableCosts:
    """What `table_times` computes of a StepTable and a calibration before the buffer sizes: per step, the
    seconds per byte of its busiest tier (`per_byte`), its latency and fixed cost (`lat`); per row, the launch."""

    row: np.ndarray
    per_byte: np.ndarray
    lat: np.ndarray
    repeat: np.ndarray
    pipelined: np.ndarray
    launch: np.ndarray

    def times(self, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bandwidth seconds, other seconds) of every row with per-row buffers `nbytes` (see `table_times`);
        [settings, rows] when the costs have a settings axis (`table_costs` of several calibrations)."""
        rows, r = self.launch.shape[-1], self.row
        b = np.asarray(nbytes, dtype=float)[r] * self.per_byte
        lat, n = self.lat, self.repeat
        total = np.where(self.pipelined, b + lat + (n - 1) * np.maximum(b, lat), n * (b + lat))
        # per row, its steps' sums in step order (`np.bincount` adds as `np.add.at` does, in a tenth of the time);
        # each setting's rows bins of their own
        at = r if b.ndim == 1 else (r + rows * np.arange(b.shape[0])[:, None]).ravel()
        busy = np.bincount(at, weights=(n * b).ravel(), minlength=b.size // r.size * rows).reshape(self.launch.shape)
        whole = np.bincount(at, weights=total.ravel(), minlength=b.size // r.size * rows).reshape(self.launch.shape)
        return busy, whole - busy + self.launch


def table_costs(table: StepTable, cal: NetworkCalibration | tuple[NetworkCalibration, ...]) -> TableCosts:
    """The size-independent part of `table_times`; of several calibrations (a tuple), with a leading settings
    axis (each setting's numbers as one calibration's)."""
    rows, r, cals = table.spans_efa.size, table.row, (cal if isinstance(cal, tuple) else (cal,))
    k = len(cals)
    col = _columns(cals)     # a factor of every setting, [settings]
    link_eff = np.array([col(NetworkCalibration.neuronlink_efficiency, g) for g in table.generation]).T.reshape(k, rows)
    eff = np.stack([np.broadcast_to(col("chip_efficiency")[:, None], (k, r.size)), link_eff[:, r],
                    np.broadcast_to(col("efa_efficiency")[:, None], (k, r.size))], axis=2)
    fixed = np.where(table.spans_efa[r], col("efa_step_s")[:, None],
                     np.where(table.reduce, col("reduce_step_s")[:, None], 0.0))
    has = np.bincount(r, minlength=rows) > 0
    launch = np.array([col(NetworkCalibration.launch_s, g) for g in table.generation], dtype=float).T.reshape(k, rows)
    launch = launch * has
    one = (lambda a: a) if isinstance(cal, tuple) else (lambda a: a[0])
    return TableCosts(row=r, per_byte=one((table.tier_max / eff).max(axis=2)), lat=one(table.latency_s + fixed),
                      repeat=table.repeat, pipelined=table.pipelined, launch=one(launch))


def _columns(cals: tuple):
    """`col(name)`: the factor `name` of every one of `cals` as float64 [settings]; `col(method, generation)`: the
    method's value at a chip generation of every one (as it is). Several calibrations' are kept by their identities
    (an interval's settings cost each of their collectives with the same ones)."""
    got = {} if len(cals) == 1 else kept(_COLUMNS, tuple(map(id, cals)), lambda: (cals, {}), 1024)[1]

    def col(f, g=None):
        hit = got.get((f, g))
        if hit is None:
            hit = got[(f, g)] = (np.array([getattr(c, f) for c in cals], dtype=float) if g is None else
                                 np.array([f(c, g) for c in cals]))
        return hit
    return col


_COLUMNS: dict[tuple, tuple] = {}    # `_columns`' columns of a tuple of calibrations, by their identities (held)


def table_times(table: StepTable, nbytes: np.ndarray, cal: NetworkCalibration) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth seconds, other seconds) of every row of a StepTable with per-row buffers `nbytes`.

    The bandwidth part is the pure transfer time (what concurrent transfers share); the other part is
    launch, wire latencies and fixed step costs, including what pipelining does not hide.
    """
    return table_costs(table, cal).times(nbytes)


# The TableCosts of the link loads one collective compares (`_timed`), by the link loads' identities (cached by
# `flows.link_loads`) and calibration; the StepTables of those link loads, whatever the calibrations that cost them.
_COSTS: dict[tuple, tuple[tuple[LinkLoads, ...], TableCosts]] = {}
TABLES: dict[tuple, tuple[tuple[LinkLoads, ...], StepTable]] = {}
COSTS_MAX = 8192


def _link_loads_costs(profs: list[LinkLoads], cal: NetworkCalibration) -> TableCosts:
    ids = tuple(map(id, profs))
    table = kept(TABLES, ids, lambda: (tuple(profs), step_table(profs)), COSTS_MAX)[1]
    return kept(_COSTS, (ids, cal), lambda: (tuple(profs), table_costs(table, cal)), COSTS_MAX)[1]


@functools.lru_cache(maxsize=4096)
def check_collective(op: str, group: Group, fab: Fabric) -> None:
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


def breakpoints(fab: Fabric, op: str, nbytes: float, group: Group, above: bool) -> list[float]:
    """Buffer sizes just over (above) or just under (below) `nbytes`'s neighbouring size thresholds of
    Neuron's algorithm choice (any stage's)."""
    if above:
        return sorted({up for edge, up, _ in _edges(fab, op, group, nbytes) if edge > nbytes})
    return sorted({down for edge, _, down in _edges(fab, op, group, nbytes) if edge <= nbytes})


@functools.lru_cache(maxsize=4096)
def _edges_of(fab: Fabric, op: str, group: Group, fractions: tuple[float, ...]) -> tuple[tuple[float, float, float], ...]:
    return tuple((edge, float(np.nextafter(edge, np.inf)), float(np.nextafter(edge, 0.0)))
                 for f in fractions for edge in (MESH_MAX_BYTES / f, RDH_MAX_BYTES / f))


@functools.lru_cache(maxsize=4096)
def _fractions(fab: Fabric, op: str, group: Group) -> tuple[float, ...] | None:
    """The stages' buffer fractions, which do not depend on the size (only the stages' algorithms do); None
    for a group `stages` cannot split at every size (then asked per size)."""
    _, lv = members_and_levels(fab, group)
    try:
        return tuple(st.fraction for st in stages(fab, op, 1.0, group, lv))
    except ValueError:
        return None


def _edges(fab: Fabric, op: str, group: Group, nbytes: float) -> tuple[tuple[float, float, float], ...]:
    """(threshold, just over it, just under it) of every stage's size switch (MESH_MAX_BYTES, RDH_MAX_BYTES)."""
    fr = _fractions(fab, op, group)
    if fr is None:
        _, lv = members_and_levels(fab, group)
        fr = tuple(st.fraction for st in stages(fab, op, nbytes, group, lv))
    return _edges_of(fab, op, group, fr)


# The fitted launch costs reproduce nccom-test, which times one standalone invocation at a time; its Trn2
# examples (dated, per the Neuron docs) floor at about 0.5 ms. Inside a training step the collectives are
# issued from the compiled graph, where Neuron gives the latency term as 10^0 to 10^1 us (H11, intra-node
# collectives on Trn2). Where the two sources disagree we take H11 for in-step collectives (`in_graph=True`,
# which the replay engine passes): their launch cost is capped at 10 us; standalone ones (`in_graph=False`,
# `ultracluster collectives`) keep the fitted cost. Trn1's fitted launch (about 9 us) is below the cap either way.
IN_GRAPH_LAUNCH_MAX_S = 10e-6


@functools.lru_cache(maxsize=64)
def _in_graph(cal: NetworkCalibration) -> NetworkCalibration:
    """`cal` with its launch costs capped at IN_GRAPH_LAUNCH_MAX_S."""
    return cal.with_(launch_s_trn1=min(cal.launch_s_trn1, IN_GRAPH_LAUNCH_MAX_S),
                     launch_s_trn2=min(cal.launch_s_trn2, IN_GRAPH_LAUNCH_MAX_S),
                     launch_s_trn3=min(cal.launch_s_trn3, IN_GRAPH_LAUNCH_MAX_S))


def collective_cost(cluster: Cluster, op: str, nbytes: float, group: Group,
                    calibration: NetworkCalibration | None = None,
                    in_graph: bool | None = None) -> tuple[float, float, LinkLoads]:
    """(bandwidth seconds, other seconds, link loads) of one collective; their sum is `collective_time`.

    Neuron switches algorithms at fixed sizes (1 MiB, 56 MiB), its measured sweet spots (H11). With
    `calibration.algorithm_envelope` (the default), where the model times the algorithm just above a later
    switch lower than the one chosen for this size, that cheaper choice is taken: this size pays the price
    (and the link loads) of the algorithm above the switch. Without it, the chosen algorithm's time is
    floored at the price just below the previous switch, the extra counting as "other" time. Either way a
    larger message never finishes sooner than a smaller one.

    `in_graph`: the collective is issued from a training step's compiled graph, so its launch cost is capped
    at H11's 10 us (`IN_GRAPH_LAUNCH_MAX_S`); False: a standalone invocation (nccom-test) keeps the fitted
    launch cost. None: as the group says (a group whose like groups all run at once, `group.together`, is a
    training step's).

    Raises:
        ValueError: an unknown op, or a group that does not fit the cluster.
    """
    fab, cal, sync = _setting(cluster, op, group, calibration, in_graph)
    if group.ranks <= 1 or nbytes <= 0:
        return 0.0, 0.0, LinkLoads((), "none", group.ranks, fab.generation)
    busy, other, prof = _timed(fab, op, float(nbytes), group, cal)
    return busy, other + sync, prof


def _setting(cluster: Cluster, op: str, group: Group, calibration: NetworkCalibration | None,
             in_graph: bool | None) -> tuple[Fabric, NetworkCalibration, float]:
    """(fabric, calibration with the in-graph launch cap where it applies, in-graph sync seconds), the group
    checked against the fabric."""
    fab = fabric_of(cluster)
    check_collective(op, group, fab)
    return (fab, *graph_setting(calibration or cluster.calibration.network, group, in_graph, fab.generation))


def graph_setting(cal: NetworkCalibration, group: Group, in_graph: bool | None,
                   generation: str) -> tuple[NetworkCalibration, float]:
    """(calibration with the in-graph launch cap where it applies, in-graph sync seconds) of `_setting`."""
    sync = 0.0
    if group.together if in_graph is None else in_graph:
        cal = _in_graph(cal)
        sync = 1.0                       # the graph's hand-off to the collective cores and back
    return cal, sync * cal.sync_s(generation)


# the Fabric of a Cluster (frozen) by its identity, the entry holding its cluster
_FABRICS: dict[int, tuple[Cluster, Fabric]] = {}


def fabric_of(cluster: Cluster) -> Fabric:
    return kept(_FABRICS, id(cluster), lambda: (cluster, fabric(cluster)), 1024)[1]


@functools.lru_cache(maxsize=64)
def _unsized(fab: Fabric) -> Fabric:
    """`fab` without its instance count: what a collective costs does not depend on it (only the check does)."""
    return dataclasses.replace(fab, instances=0)


def canonical_place(fab: Fabric, group: Group) -> tuple[Fabric, Group]:
    """The same collective moved to the cluster's first instances: the fabric repeats itself every instance
    (every UltraServer on an UltraServer fabric), so a group shifted by whole periods costs the same (its
    link loads' resources move with it; only `collective_time`'s seconds and algorithm are read from it)."""
    period = fab.ranks_per_instance * (fab.us_instances if fab.ultraserver else 1)
    shift = group.first_rank // period * period
    return _unsized(fab), (dataclasses.replace(group, first_rank=group.first_rank - shift) if shift else group)


def placed_alike(cluster: Cluster, group: Group) -> Group:
    """`group` moved to the cluster's first instances (`canonical_place`): every collective over it costs what it
    costs over `group`, so groups with the same `placed_alike` need timing once."""
    return canonical_place(fabric_of(cluster), group)[1]


# (fabric, op, bytes, group, calibration) in canonical place (`canonical_place`) -> (bandwidth s, other s, algorithm);
# (fabric, op, bytes, group, envelope) -> what `_timed` compares
SECONDS: dict[tuple, tuple[float, float, str]] = {}
_COMPARED: dict[tuple, tuple[list[LinkLoads], np.ndarray]] = {}


def _seconds(fab: Fabric, op: str, nbytes: float, group: Group, cal: NetworkCalibration) -> tuple[float, float, str]:
    """`_timed`'s seconds and algorithm of the collective in canonical place, memoized."""
    fab, group = canonical_place(fab, group)

    def timed() -> tuple[float, float, str]:
        busy, other, prof = _timed(fab, op, nbytes, group, cal)
        return busy, other, prof.algorithm

    return kept(SECONDS, (fab, op, nbytes, group, cal), timed)


def compared(fab: Fabric, op: str, nbytes: float, group: Group, envelope: bool) -> tuple[list[LinkLoads], np.ndarray]:
    """(link loads, sizes) a collective of `nbytes` compares: its own and those just over the later switches
    (envelope), or those just under the earlier ones and its own (the floor). They do not depend on the
    calibration's numbers, so a search timing one collective at many calibrations finds them once."""
    def find() -> tuple[list[LinkLoads], np.ndarray]:
        if envelope:
            sizes = [nbytes] + breakpoints(fab, op, float(nbytes), group, above=True)
            profs = [link_loads(fab, op, nbytes, group)] + [_link_loads_at(fab, op, n, group) for n in sizes[1:]]
        else:
            sizes = breakpoints(fab, op, float(nbytes), group, above=False) + [float(nbytes)]
            profs = [_link_loads_at(fab, op, n, group) for n in sizes[:-1]] + [link_loads(fab, op, nbytes, group)]
        return profs, np.array(sizes)

    return kept(_COMPARED, (fab, op, nbytes, group, envelope), find)


# (fabric, op, group, calibration, size class) -> (the link loads compared, the other sizes, their TableCosts): what
# `compared` finds and `_link_loads_costs` costs is the same for every size on the same side of each of Neuron's
# switches (`breakpoints`' edges and each stage's: `selection.size_class`), so a search's sizes share it
_CLASSES: dict[tuple, tuple[list[LinkLoads], list[float], TableCosts]] = {}


def _class_costs(fab: Fabric, op: str, nbytes: float, group: Group,
                 cal: NetworkCalibration) -> tuple[list[LinkLoads], np.ndarray, TableCosts] | None:
    """`compared`'s link loads and sizes and their TableCosts at `cal`, kept per size class; None where the stages
    cannot be split at every size (`_fractions`), which `compared` finds per size."""
    fr = _fractions(fab, op, group)
    if fr is None:
        return None
    edges = _edges_of(fab, op, group, fr)
    _, lv = members_and_levels(fab, group)
    key = (fab, op, group, cal, tuple(edge > nbytes for edge, _, _ in edges), size_class(op, nbytes, lv))
    hit = _CLASSES.get(key)
    if hit is None:
        profs, sizes = compared(fab, op, nbytes, group, cal.algorithm_envelope)
        others = sizes[1:] if cal.algorithm_envelope else sizes[:-1]
        hit = kept(_CLASSES, key, lambda: (profs, others.tolist(), _link_loads_costs(profs, cal)), COSTS_MAX)
    profs, others, costs = hit
    return profs, np.array([nbytes] + others if cal.algorithm_envelope else others + [nbytes]), costs


def _timed(fab, op: str, nbytes: float, group: Group, cal: NetworkCalibration) -> tuple[float, float, LinkLoads]:
    """(bandwidth seconds, other seconds, link loads) of one collective at its size, before any in-graph sync."""
    found = _class_costs(fab, op, nbytes, group, cal)
    if found is None:
        profs, sizes = compared(fab, op, nbytes, group, cal.algorithm_envelope)
        found = profs, sizes, _link_loads_costs(profs, cal)
    profs, sizes, costs = found
    return chosen(*costs.times(sizes), profs, bool(cal.algorithm_envelope))


def chosen(busy: np.ndarray, other: np.ndarray, profs: list, envelope: bool) -> tuple[float, float, LinkLoads]:
    """(bandwidth s, other s, link loads) of the size compared (`compared`'s, timed) that a collective pays."""
    (b,), (o,), (p,) = chosen_many(busy[None, :], other[None, :], profs, envelope)
    return b, o, p


def chosen_many(busy: np.ndarray, other: np.ndarray, profs: list, envelope: bool) -> tuple[list, list, list]:
    """`chosen` of each row of [settings, sizes] seconds: (bandwidth s, other s, link loads), a list each. With the
    envelope the cheapest size (0 unless a larger size's algorithm is cheaper); without, the collective's own size,
    floored at the dearest size compared below it."""
    total = busy + other
    if envelope:
        best = np.argmin(total, axis=1)
        every = np.arange(total.shape[0])
        return busy[every, best].tolist(), other[every, best].tolist(), [profs[b] for b in best.tolist()]
    floor = total[:, :-1].max(axis=1) if total.shape[1] > 1 else 0.0
    return (busy[:, -1].tolist(), (other[:, -1] + np.maximum(0.0, floor - total[:, -1])).tolist(),
            [profs[-1]] * total.shape[0])


@functools.lru_cache(maxsize=4096)
def _link_loads_at(fab: Fabric, op: str, nbytes: float, group: Group) -> LinkLoads:
    """`link_loads` at a size just over or under one of Neuron's switches (`breakpoints`): every size of the
    collective compares these, so they are kept."""
    return link_loads(fab, op, nbytes, group)


def collective_time(cluster: Cluster, op: str, nbytes: float, group: Group,
                    calibration: NetworkCalibration | None = None, in_graph: bool | None = None) -> tuple[float, str]:
    """Virtual seconds of one collective and the algorithm Neuron would use.

    Args:
        cluster: the cluster (fabric, placement).
        op: all_reduce | reduce_scatter | all_gather | all_to_all | send_recv.
        nbytes: per-rank buffer, bytes (all-reduce input, reduce-scatter input, all-gather output,
            all-to-all data a rank sends in total, send/recv message).
        group: the group shape; with `group.together` every group of that shape on the same instances
            runs at the same time and shares links and NICs.
        calibration: collective factors (default: the cluster's, `calibration.factors.network`).
        in_graph: issued from a training step's compiled graph (launch capped); see `collective_cost`.

    Returns:
        (seconds, algorithm name): "mesh", "rdh", "ring", "kangaring", "pairwise",
        "hierarchical(inner+...+outer)" across tiers (Z stages prefixed "z-"); for send_recv the tier
        crossed: "chip", "neuronlink", "z" or "efa"; "none" for a group of one or an empty buffer.

    Raises:
        ValueError: an unknown op, or a group that does not fit the cluster.
    """
    fab, cal, sync = _setting(cluster, op, group, calibration, in_graph)
    if group.ranks <= 1 or nbytes <= 0:
        return 0.0, "none"
    busy, other, alg = _seconds(fab, op, float(nbytes), group, cal)
    return busy + (other + sync), alg
