"""Concurrent flows and their limits → max-min fair rates, by progressive filling.

Pure (numpy only). One algorithm for every shared resource of the emulator: the file system and its clients
(`storage.server`; AWS documents no fairness algorithm for FSx for Lustre, docs/sources.md ref §1.5, so
max-min is a modelling choice) and the links, ports and DMA engines that overlapping collectives share
(`network.collectives.concurrent_time`).
"""
from __future__ import annotations

import math

import numpy as np


def progressive_filling(usage: np.ndarray, capacity: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Max-min fair rates of F flows under K linear limits, by progressive filling.

    Every unfrozen flow's rate rises at the same pace; when a limit is reached (a flow's demand, or a
    resource whose `usage @ rate` hits its capacity), the flows it binds freeze. A limit counts as reached
    within 1e-9 of the rise (relative, or absolute below 1).

    Args:
        usage: [K, F] >= 0: what one unit of flow f's rate takes of resource k.
        capacity: [K] what resource k holds, in the rate's units x usage's.
        demand: [F] the most each flow may take (inf: as much as it can get).

    Returns:
        [F] rates.

    Raises:
        ValueError: a flow has no finite limit (infinite demand and no resource it uses).
    """
    usage = np.asarray(usage, dtype=float)
    capacity = np.asarray(capacity, dtype=float)
    n = usage.shape[1]
    rate = np.zeros(n)
    active = np.ones(n, dtype=bool)
    while active.any():
        load = usage[:, active].sum(axis=1)                # what one more unit of every active flow takes
        head_k = np.full(len(capacity), np.inf)
        np.divide(capacity - usage @ rate, load, out=head_k, where=load > 0)
        head_f = np.where(active, demand - rate, np.inf)
        lam = min(head_k.min(initial=np.inf), head_f.min())
        if not math.isfinite(lam):
            raise ValueError("progressive_filling: a flow has no finite limit")
        lam = max(lam, 0.0)
        tol = 1e-9 * max(lam, 1.0)
        rate[active] += lam
        bound = (head_k - lam) <= tol
        freeze = active & (((head_f - lam) <= tol) | (usage[bound] > 0).any(axis=0))
        active &= ~freeze
    return rate


def progressive_filling_many(usage: np.ndarray, capacity: np.ndarray, demand: np.ndarray,
                             flows: np.ndarray) -> np.ndarray:
    """`progressive_filling` of S problems at once (a leading axis: an interval's settings), each over its flows
    `flows` [S, F] (bool; the others take no rate): usage [S, K, F], capacity [S, K], demand [S, F] -> rates [S, F],
    each problem's the same numbers as `progressive_filling` of its own flows (tests/network/test_contention.py)."""
    rate = np.zeros(demand.shape)
    active = np.asarray(flows, dtype=bool).copy()
    positive = usage > 0
    while active.any():
        run = active.any(axis=1)
        load = np.where(active[:, None, :], usage, 0.0).sum(axis=2)
        head_k = np.full(capacity.shape, np.inf)
        np.divide(capacity - np.matmul(usage, rate[..., None])[..., 0], load, out=head_k, where=load > 0)
        head_f = np.where(active, demand - rate, np.inf)
        lam = np.minimum(head_k.min(axis=1, initial=np.inf), head_f.min(axis=1))
        if not np.isfinite(lam[run]).all():
            raise ValueError("progressive_filling: a flow has no finite limit")
        lam = np.where(run, np.maximum(lam, 0.0), 0.0)
        tol = 1e-9 * np.maximum(lam, 1.0)
        rate = np.where(active, rate + lam[:, None], rate)
        bound = (head_k - lam[:, None]) <= tol[:, None]
        freeze = active & (((head_f - lam[:, None]) <= tol[:, None]) | (positive & bound[:, :, None]).any(axis=1))
        active &= ~freeze
    return rate


def max_min_fair(groups: np.ndarray, group_cap: np.ndarray, flow_cap: np.ndarray,
                 shared: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Max-min fair rates of flows grouped by client, under shared limits (`progressive_filling`).

    Args:
        groups: [F] int: each flow's client group (one client in one direction); a group carries at most
            `group_cap[g]` in total.
        group_cap: [G] bytes/s per group.
        flow_cap: [F] bytes/s a flow may take (its demand; inf = as much as it can get).
        shared: (coefficients [F], capacity) limits sum_f coef_f x rate_f <= capacity (the file system).

    Returns:
        [F] rates, bytes/s.
    """
    groups = np.asarray(groups)
    n = len(groups)
    member = np.zeros((len(group_cap), n))
    member[groups, np.arange(n)] = 1.0
    usage = np.vstack([member] + [np.asarray(coef, dtype=float)[None, :] for coef, _ in shared])
    capacity = np.concatenate([np.asarray(group_cap, dtype=float), [float(cap) for _, cap in shared]])
    return progressive_filling(usage, capacity, np.asarray(flow_cap, dtype=float))
