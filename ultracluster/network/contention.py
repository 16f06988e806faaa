"""Transfers sharing links → seconds each (`concurrent_time`, max-min fair through `fairshare`), and the
physical ceiling of a group's bus bandwidth (`busbw_limit_bytes_per_s`).

Pure (numpy only); part of the collective model (`network.collectives`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..cluster import Cluster
from ..fairshare import progressive_filling
from .calibration import NetworkCalibration
from .flows import members_and_levels
from .groups import Group
from .timing import fabric_of, kept, collective_cost, collective_costs
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
        calibration: collective factors (default: the cluster's, `cluster.calibration.network`).
        in_graph: issued from a training step's compiled graph (launch capped); see `collective_cost`.

    Returns:
        [transfers] seconds from the common start to each transfer's end: never less than the transfer
        alone, never more than all of them one after the other.
    """
    cal = calibration or cluster.calibration.network
    costs = [collective_cost(cluster, op, nbytes, group, cal, in_graph) for op, nbytes, group in transfers]
    return _shared(fabric(cluster), cal, transfers, costs)


def concurrent_times(clusters: Sequence[Cluster], transfers: Sequence[tuple[str, float, Group]],
                     in_graph: bool | None = None) -> np.ndarray:
    """[clusters, transfers] `concurrent_time(c, transfers, in_graph=in_graph)` of each of `clusters`: one
    placement under several calibrations (an interval's settings), every transfer's costs found at once
    (`timing.collective_costs`)."""
    costs = [collective_costs(clusters, op, nbytes, group, in_graph) for op, nbytes, group in transfers]
    out = np.zeros((len(clusters), len(transfers)))
    for s, cluster in enumerate(clusters):
        out[s] = _shared(fabric_of(cluster), cluster.calibration.network, transfers, [c[s] for c in costs])
    return out


def _shared(fab, cal: NetworkCalibration, transfers: Sequence[tuple[str, float, Group]], costs: list) -> np.ndarray:
    """`concurrent_time` of transfers whose `collective_cost`s are `costs`."""
    n = len(transfers)
    work, other = np.zeros(n), np.zeros(n)
    usage: list[tuple[np.ndarray, np.ndarray]] = []
    for i, ((op, nbytes, group), cost) in enumerate(zip(transfers, costs)):
        work[i], other[i], prof = cost
        if prof.steps and work[i] > 0:
            usage.append(_usage(prof, float(nbytes)))
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
