"""The collective model under many settings at once: one placement's collectives timed under each of an
interval's calibrations (`collective_times`, `collective_costs`), the settings' fabrics and in-graph calibrations
found once per settings (`settings_of`), every calibration not timed yet costed in one `table_costs`.

Pure (numpy only); part of the collective model (`network.collectives`). Each function gives, setting by setting,
the numbers `timing`'s one-setting form gives.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..cluster import Cluster
from .calibration import NetworkCalibration
from .flows import LinkLoads
from .groups import Group
from .timing import (COSTS_MAX, SECONDS, TABLES, canonical_place, compared, graph_setting,
                     check_collective, chosen_many, fabric_of, kept, step_table, table_costs)
from .topology import Fabric, fabric_reads


def collective_times(clusters: Sequence[Cluster], op: str, nbytes: float, group: Group,
                     in_graph: bool | None = None) -> np.ndarray:
    """`collective_time(c, op, nbytes, group, in_graph=in_graph)[0]` of each of `clusters` (one placement under an
    interval's settings), those not timed yet costed at once (the link loads compared are the same for all).

    A loop over the settings (each one's seconds a dictionary look-up once timed, the most a second interval pays):
    what does not depend on the setting is found before it (the group's size, each fabric's canonical place), and
    the seconds are gathered in a list (a NumPy element set per setting costs more than the look-up)."""
    nbytes = float(nbytes)
    settings = settings_of(clusters, op, group, in_graph)
    if group.ranks <= 1 or nbytes <= 0:
        return np.zeros(len(clusters))
    out = [0.0] * len(clusters)
    todo: dict[tuple, tuple] = {}
    get, last, fab_c, placed, sub = SECONDS.get, None, None, None, {}   # the last fabric, its group's canonical
    for i, (fab, cal, sync) in enumerate(settings):                     # place, and its `_BY_COLLECTIVE` entry
        if fab is not last:
            last = fab
            fab_c, placed = canonical_place(fab, group)
            sub = kept(_BY_COLLECTIVE, (fab_c, op, nbytes, placed), dict, 1024)
        hit = sub.get(cal)
        if hit is None:
            hit = get((fab_c, op, nbytes, placed, cal))
            if hit is not None:
                kept(sub, cal, lambda hit=hit: hit, 256)
        if hit is None:      # (by identities: `settings_of` gives one object per fabric, `_in_graph` per setting)
            todo.setdefault((id(fab_c), bool(cal.algorithm_envelope)), (fab_c, placed, []))[2].append((i, cal, sync))
        else:
            out[i] = hit[0] + (hit[1] + sync)
    for (_, envelope), (fab, placed, items) in todo.items():
        cals = tuple({id(cal): cal for _, cal, _ in items}.values())
        seconds = {id(cal): kept(SECONDS, (fab, op, nbytes, placed, cal), lambda b=b, o=o, p=p: (b, o, p.algorithm))
                   for cal, (b, o, p) in zip(cals, _costs_of(fab, op, nbytes, placed, cals, envelope))}
        for i, cal, sync in items:
            out[i] = seconds[id(cal)][0] + (seconds[id(cal)][1] + sync)
    return np.array(out)


def collective_costs(clusters: Sequence[Cluster], op: str, nbytes: float, group: Group,
                     in_graph: bool | None = None) -> list[tuple[float, float, LinkLoads]]:
    """`collective_cost(c, op, nbytes, group, in_graph=in_graph)` of each of `clusters` (as `collective_times`)."""
    out: list = [None] * len(clusters)
    nbytes = float(nbytes)
    todo: dict[tuple, list[tuple[int, NetworkCalibration, float]]] = {}
    for i, (fab, cal, sync) in enumerate(settings_of(clusters, op, group, in_graph)):
        if group.ranks <= 1 or nbytes <= 0:
            out[i] = (0.0, 0.0, LinkLoads((), "none", group.ranks, fab.generation))
        else:
            todo.setdefault((id(fab), bool(cal.algorithm_envelope)), (fab, []))[1].append((i, cal, sync))
    for (_, envelope), (fab, items) in todo.items():
        cals = tuple({id(cal): cal for _, cal, _ in items}.values())
        got = dict(zip(map(id, cals), _costs_of(fab, op, nbytes, group, cals, envelope)))
        for i, cal, sync in items:
            out[i] = (got[id(cal)][0], got[id(cal)][1] + sync, got[id(cal)][2])
    return out


def settings_of(clusters: Sequence[Cluster], op: str, group: Group,
                 in_graph: bool | None) -> list[tuple[Fabric, NetworkCalibration, float]]:
    """(fabric, calibration as timed, in-graph sync s) of each of `clusters` (`_setting`), kept by the sequence's
    identity (an interval's settings ask for each of their collectives); the collective checked on each fabric."""
    def make():
        fabs: dict[Fabric, Fabric] = {}       # one object per distinct fabric (the same, mostly)
        alike: dict[tuple, Fabric] = {}       # by what `fabric` reads: the settings' clusters share theirs
        timed: dict[tuple, tuple] = {}        # `graph_setting` by the calibration's identity (clusters share theirs)
        out = []
        for cl in clusters:
            reads = fabric_reads(cl)
            fab = alike.get(reads)
            if fab is None:
                fab = fabric_of(cl)
                fab = alike[reads] = fabs.setdefault(fab, fab)
            key = (id(cl.calibration.network), fab.generation)
            got = timed.get(key)
            if got is None:
                got = timed[key] = graph_setting(cl.calibration.network, group, in_graph, fab.generation)
            out.append((fab, *got))
        return clusters, out, tuple(fabs.values())

    _, out, fabs = kept(_SETTINGS, (id(clusters), group.together if in_graph is None else in_graph), make, 256)
    for fab in fabs:
        check_collective(op, group, fab)
    return out


# `timing.SECONDS` by (fabric, op, bytes, group) in canonical place, then by calibration (as timed): a collective's
# settings each a look-up by its calibration alone (its hash kept), not by a key hashing the fabric and group again
_BY_COLLECTIVE: dict[tuple, dict] = {}
_SETTINGS: dict[tuple, tuple] = {}       # `settings_of` and its distinct fabrics, by the clusters' identity (the
                                         # entry holding them)


def _costs_of(fab: Fabric, op: str, nbytes: float, group: Group, cals: tuple, envelope: bool) -> list[tuple]:
    """`_timed` of one collective under each of `cals` (one `algorithm_envelope`), in one `table_costs`, the size
    each pays (`timing.chosen_many`) found for all at once."""
    profs, sizes = compared(fab, op, nbytes, group, envelope)
    table = kept(TABLES, tuple(map(id, profs)), lambda: (tuple(profs), step_table(profs)), COSTS_MAX)[1]
    return list(zip(*chosen_many(*table_costs(table, cals).times(sizes), profs, envelope)))   # [settings, sizes]
