"""Concurrent flows and their limits → max-min fair rates, by progressive filling.

Pure (numpy only). Storage shares a file system among its clients with it (`storage.server`); AWS documents
no fairness algorithm for FSx for Lustre (docs/sources.md ref §1.5): max-min is a modelling choice.
"""
from __future__ import annotations

import math

import numpy as np


def max_min_fair(groups: np.ndarray, group_cap: np.ndarray, flow_cap: np.ndarray,
                 shared: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Max-min fair rates of concurrent flows by progressive filling.

    Every unfrozen flow's rate rises at the same pace; when a limit is reached, the flows it binds freeze.

    Args:
        groups: [F] int: each flow's client group (one client in one direction); a group carries at most
            `group_cap[g]` in total.
        group_cap: [G] bytes/s per group.
        flow_cap: [F] bytes/s a flow may take (its demand; inf = as much as it can get).
        shared: (coefficients [F], capacity) limits sum_f coef_f x rate_f <= capacity (the file system).

    Returns:
        [F] rates, bytes/s.
    """
    n = len(groups)
    rate = np.zeros(n)
    active = np.ones(n, dtype=bool)
    n_groups = len(group_cap)
    while active.any():
        n_g = np.bincount(groups[active], minlength=n_groups)
        used_g = np.bincount(groups, weights=rate, minlength=n_groups)
        head_g = np.full(n_groups, np.inf)
        np.divide(group_cap - used_g, n_g, out=head_g, where=n_g > 0)
        head_f = np.where(active, flow_cap - rate, np.inf)
        heads_s = []
        for coef, cap in shared:
            c = coef[active].sum()
            heads_s.append((cap - float(coef @ rate)) / c if c > 0 else np.inf)
        lam = min(head_g.min(), head_f.min(), min(heads_s, default=np.inf))
        if not math.isfinite(lam):
            raise ValueError("max_min_fair: a flow has no finite limit")
        lam = max(lam, 0.0)
        tol = 1e-9 * max(lam, 1.0)
        rate[active] += lam
        freeze = active & (((head_g - lam) <= tol)[groups] | ((head_f - lam) <= tol))
        for (coef, _), h in zip(shared, heads_s):
            if h - lam <= tol:
                freeze |= active & (coef > 0)
        active &= ~freeze
    return rate
