"""Transfers sharing links → seconds each (`concurrent_time`, max-min fair through `fairshare`), and the
physical ceiling of a group's bus bandwidth (`busbw_limit_bytes_per_s`).

Pure (numpy only); part of the collective model (`network.collectives`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..cluster import Cluster
from ..fairshare import progressive_filling_many
from ..frozen import kept, read_only
from .calibration import NetworkCalibration
from .flows import members_and_levels
from .groups import Group
from .settings import collective_costs, settings_of
from .timing import collective_cost
from .topology import fabric, locate


def concurrent_time(cluster: Cluster, transfers: Sequence[tuple[str, float, Group]],
                    calibration: NetworkCalibration | None = None, in_graph: bool | None = None) -> np.ndarray:
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
        calibration: collective factors (default: the cluster's, `calibration.factors.network`).
        in_graph: issued from a training step's compiled graph (launch capped); see `collective_cost`.

    Returns:
        [transfers] seconds from the common start to each transfer's end: never less than the transfer
        alone, never more than all of them one after the other.
    """
    cal = calibration or cluster.calibration.network
    costs = [collective_cost(cluster, op, nbytes, group, cal, in_graph) for op, nbytes, group in transfers]
    return _shared(fabric(cluster), [cal], transfers, [costs])[0]


def concurrent_times(clusters: Sequence[Cluster], transfers: Sequence[tuple[str, float, Group]],
                     in_graph: bool | None = None) -> np.ndarray:
    """[clusters, transfers] `concurrent_time(c, transfers, in_graph=in_graph)` of each of `clusters`: one
    placement under several calibrations (an interval's settings), every transfer's costs found at once
    (`settings.collective_costs`). Each setting's seconds kept by what they depend on (`_KEPT`: its fabric and
    collective calibration, the transfers, `in_graph`), as `timing.SECONDS` keeps a collective's: a setting
    timed before is a look-up (each setting's sharing is its own: `fairshare.progressive_filling_many`)."""
    transfers = tuple(transfers)
    out = np.zeros((len(clusters), len(transfers)))
    if not transfers:
        return out
    fabs = [fab for fab, _, _ in settings_of(clusters, *transfers[0][::2], in_graph)]
    by_setting = kept(_KEPT, (transfers, in_graph), dict, 1024)
    keys = [(fab, cl.calibration.network) for fab, cl in zip(fabs, clusters)]
    todo = []
    for s, key in enumerate(keys):
        row = by_setting.get(key)
        if row is None:
            todo.append(s)
        else:
            out[s] = row
    if todo:
        got = _times(clusters if len(todo) == len(clusters) else [clusters[s] for s in todo], transfers, in_graph)
        for j, s in enumerate(todo):
            out[s] = kept(by_setting, keys[s], lambda r=got[j]: read_only(r.copy()), 256)
    return out


# `concurrent_times`' seconds by the transfers and `in_graph`, then by each setting's fabric and collective
# calibration (bounded: 1,024 x 256)
_KEPT: dict[tuple, dict] = {}


def _times(clusters: Sequence[Cluster], transfers: tuple, in_graph: bool | None) -> np.ndarray:
    """`concurrent_times` of settings none of which is kept."""
    costs = [collective_costs(clusters, op, nbytes, group, in_graph) for op, nbytes, group in transfers]
    out = np.zeros((len(clusters), len(transfers)))
    alike: dict[tuple, tuple] = {}     # the settings whose transfers pay the same link loads, on one fabric
    fabs = [fab for fab, _, _ in settings_of(clusters, *transfers[0][::2], in_graph)] if transfers else []
    for s, fab in enumerate(fabs):       # (one object per fabric: `settings_of`)
        alike.setdefault((id(fab), tuple(id(c[s][2]) for c in costs)), (fab, []))[1].append(s)
    for fab, ss in alike.values():
        out[ss] = _shared(fab, [clusters[s].calibration.network for s in ss], transfers,
                          [[c[s] for c in costs] for s in ss])
    return out


def _shared(fab, cals: list[NetworkCalibration], transfers: Sequence[tuple[str, float, Group]],
            costs: list[list]) -> np.ndarray:
    """[settings, transfers] `concurrent_time` of transfers under each of `cals`, their `collective_cost`s
    `costs[setting]` (the same link loads in every setting), all the settings' fair sharing at once
    (`fairshare.progressive_filling_many`)."""
    k, n = len(cals), len(transfers)
    if n == 0:
        return np.zeros((k, 0))
    work = np.array([[c[0] for c in cs] for cs in costs], dtype=float).reshape(k, n)
    other = np.array([[c[1] for c in cs] for cs in costs], dtype=float).reshape(k, n)
    usage = [_usage(cost[2], float(nbytes)) if cost[2].steps else (np.zeros(0, np.int64), np.zeros(0))
             for (_, nbytes, _), cost in zip(transfers, costs[0])]
    all_res = np.unique(np.concatenate([u for u, _ in usage]))
    bw = fab.local_bandwidths([[cal.chip_efficiency, cal.neuronlink_efficiency(fab.generation), cal.efa_efficiency]
                               for cal in cals])[:, all_res % fab.resources_per_instance]
    rate_alone = np.zeros((k, n, all_res.size))     # bytes/s each transfer puts on each resource when alone
    for i, (u, amount) in enumerate(usage):
        w = work[:, i, None]
        rate_alone[:, i, np.searchsorted(all_res, u)] = np.where(w > 0, amount / np.where(w > 0, w, 1.0), 0.0)
    finish = np.zeros((k, n))
    left = work.copy()
    active = left > 0
    now = np.zeros(k)
    every = np.arange(k)
    while active.any():
        run = active.any(axis=1)
        # every active transfer's speed (1 = as fast as alone) rises together until a resource saturates
        speed = np.where(active, progressive_filling_many(np.swapaxes(rate_alone, 1, 2), bw, np.ones((k, n)),
                                                          active), 0.0)
        dt = np.where(active, left / np.maximum(speed, 1e-300), np.inf)
        now = now + np.where(run, dt.min(axis=1, initial=np.inf), 0.0)
        left = np.where(active, left - speed * np.where(run, dt.min(axis=1, initial=np.inf), 0.0)[:, None], 0.0)
        done = active & (left <= work * 1e-9)
        done[every[run], np.argmin(dt, axis=1)[run]] = True
        finish = np.where(done & active, now[:, None], finish)
        active &= ~done
    return finish + other


# the resources a collective's link loads use and the bytes it moves on each, by the link loads' identity (the
# entry holding them) and size
_USAGE: dict[tuple, tuple] = {}


def _usage(prof, nbytes: float) -> tuple[np.ndarray, np.ndarray]:
    def make():
        res = np.concatenate([s.resource for s in prof.steps])
        amount = np.concatenate([s.per_byte * s.repeat * nbytes for s in prof.steps])
        u, inv = np.unique(res, return_inverse=True)
        return prof, (u, np.bincount(inv, weights=amount, minlength=u.size))

    return kept(_USAGE, (id(prof), nbytes), make, 4096)[1]


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
