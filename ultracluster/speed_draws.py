"""The ranks' speeds drawn from the seed: the stragglers (slow for the whole run) and the per-step compute jitter.

Both are random, and both must come out the same wherever they are drawn: on one node or many, folded into one
actor or many, in a run's shards or in the planner's closed form. So each draw is keyed, never sequential: a
straggler set by walking a split tree keyed by (seed, node) (`stragglers`), a group's jitter as its position in the
step's stream keyed by (seed, step) (`group_jitter_of`). A shard draws only what it holds, and the driver merges
disjoint-or-identical answers, never re-draws (docs/design.md, "Principles"). The chip model (`chip`) times the
kernels; these factors scale its times.
"""
from __future__ import annotations

import numpy as np

STRAGGLER_LEAF_RANKS = 4096   # ranks per leaf of the straggler draw's split tree: a constant, never a shard's size


def stragglers(scenario, total_ranks: int, first: int = 0, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ranks in [first, first + count) that run slower than speed 1, and their slowdown factors.

    `faults.stragglers` slows `round(fraction x ranks)` ranks, a uniform random subset of the global rank
    ids drawn once per run from the seed. The draw splits the ranks in halves down to leaves of
    `STRAGGLER_LEAF_RANKS`: a node holding k of the chosen ranks gives its left half a hypergeometric share
    of them, and a leaf picks its share without replacement, each from a generator keyed by (seed, node).
    A shard walks only the nodes that overlap its ranks, so it computes its own stragglers alone in
    O(log ranks + its leaves), and the set is the same whichever shard asks (folding never changes it).
    Sparse: every other rank runs at speed 1, so the cost does not grow with the number of cores.

    Args:
        scenario: the resolved Scenario.
        total_ranks: ranks of the cluster.
        first, count: the range of global ranks asked for (default: all of them).

    Returns:
        (sorted int64 global ranks, float slowdown factors >= 1).
    """
    st = scenario.faults.stragglers if scenario.faults else None
    k = int(round(st.fraction * total_ranks)) if st is not None and st.slowdown != 1 else 0
    stop = total_ranks if count is None else min(total_ranks, first + count)
    if k == 0 or stop <= first:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    found: list[np.ndarray] = []
    todo = [(1, 0, total_ranks, k)]          # (node id, first rank, end rank, chosen ranks in it)
    while todo:
        node, lo, hi, n = todo.pop()
        if n == 0 or hi <= first or lo >= stop:
            continue
        rng = np.random.default_rng([scenario.seed, 0x57A6, node])
        if hi - lo <= STRAGGLER_LEAF_RANKS:
            picks = lo + rng.choice(hi - lo, size=n, replace=False)
            found.append(picks[(picks >= first) & (picks < stop)])
            continue
        mid = lo + (hi - lo) // 2
        left = int(rng.hypergeometric(mid - lo, hi - mid, n))
        todo += [(2 * node, lo, mid, left), (2 * node + 1, mid, hi, n - left)]
    slow = np.sort(np.concatenate(found)).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
    return slow, np.full(slow.size, float(st.slowdown))


def jitter_sigma(scenario, calibration) -> float:
    """Sigma of the per-rank, per-step log-normal compute noise: the scenario's `faults.jitter`, else the
    documented default of the calibration."""
    given = getattr(scenario.faults, "jitter", None) if scenario.faults else None
    return float(calibration.compute_jitter if given is None else given)


def group_jitter(seed: int, step: int, shape: tuple[int, ...], group_size: int, sigma: float) -> np.ndarray:
    """Speed factors of groups 0 .. prod(shape) - 1 (`group_jitter_of`), shaped `shape` in C order."""
    return group_jitter_of(seed, step, 0, int(np.prod(shape)), group_size, sigma).reshape(shape)


def group_jitter_of(seed: int, step: int, first: int, count: int, group_size: int, sigma: float) -> np.ndarray:
    """Speed factors of groups first .. first + count - 1 of `group_size` ranks that wait for their slowest member.

    Each rank's compute time is scaled by exp(sigma x N(0, 1)), independent per rank and step; a group
    runs at its maximum, drawn directly: with U uniform, max of n standard normals = Phi^-1(U^(1/n)).
    Group g's U is draw g of the step's stream, keyed by (seed, step): the generator jumps to it
    (PCG64 `advance`, one 64-bit output per double), so a group's factor is the same whichever shard draws
    it and whichever other groups are drawn with it. Cost O(count), not O(groups) nor O(ranks).
    """
    from scipy.special import ndtri      # here: importing the chip model loads no scipy

    if sigma <= 0:
        return np.ones(count)
    rng = np.random.default_rng([seed, step, 0x717])
    rng.bit_generator.advance(first)
    # the normal quantile of the group's maximum; a draw of exactly 0 (2^-53) stays finite, as Acklam's did
    z = ndtri(np.clip(rng.random(count) ** (1.0 / group_size), 1e-300, 1 - 1e-16))
    return np.exp(sigma * z)
