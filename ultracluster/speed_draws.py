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
    if sigma <= 0:
        return np.ones(count)
    rng = np.random.default_rng([seed, step, 0x717])
    rng.bit_generator.advance(first)
    # the normal quantile of the group's maximum; a draw of exactly 0 (2^-53) stays finite, as Acklam's did
    z = normal_quantile(np.clip(rng.random(count) ** (1.0 / group_size), 1e-300, 1 - 1e-16))
    return np.exp(sigma * z)


# Wichura (1988), "Algorithm AS241: The Percentage Points of the Normal Distribution", Applied Statistics 37(3)
# 477-484, PPND16 (relative accuracy about 1e-16; the coefficients as CPython's statistics.NormalDist.inv_cdf
# gives them): the central region |p - 1/2| <= 0.425, the tails r = sqrt(-log(min(p, 1 - p))) <= 5 and beyond
_CENTRAL = ((2.5090809287301226727e+3, 3.3430575583588128105e+4, 6.7265770927008700853e+4, 4.5921953931549871457e+4,
             1.3731693765509461125e+4, 1.9715909503065514427e+3, 1.3314166789178437745e+2, 3.3871328727963666080e+0),
            (5.2264952788528545610e+3, 2.8729085735721942674e+4, 3.9307895800092710610e+4, 2.1213794301586595867e+4,
             5.3941960214247511077e+3, 6.8718700749205790830e+2, 4.2313330701600911252e+1, 1.0))
_NEAR = ((7.7454501427834140764e-4, 2.2723844989269184583e-2, 2.4178072517745061177e-1, 1.2704582524523683826e+0,
          3.6478483247632046050e+0, 5.7694972214606914055e+0, 4.6303378461565452959e+0, 1.4234371107496835773e+0),
         (1.0507500716444168432e-9, 5.4759380849953449460e-4, 1.5198666563616457197e-2, 1.4810397642748007459e-1,
          6.8976733498510000455e-1, 1.6763848301838038494e+0, 2.0531916266377588219e+0, 1.0))
_FAR = ((2.0103343992922881327e-7, 2.7115555687434875782e-5, 1.2426609473880784386e-3, 2.6532189526576123093e-2,
         2.9656057182850489123e-1, 1.7848265399172913358e+0, 5.4637849111641143699e+0, 6.6579046435011037772e+0),
        (2.0442631033899397856e-15, 1.4215117583164458887e-7, 1.8463183175100546818e-5, 7.8686913114561325910e-4,
         1.4875361290850614853e-2, 1.3692988092273580531e-1, 5.9983220655588793769e-1, 1.0))


def _ratio(coefficients: tuple, r: np.ndarray) -> np.ndarray:
    num, den = (np.full_like(r, c[0]) for c in coefficients)
    for a, b in zip(*(c[1:] for c in coefficients)):
        num, den = num * r + a, den * r + b
    return num / den


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """The standard normal quantile Phi^-1(p) of every p in (0, 1), in numpy (AS241 PPND16, above): the same
    numbers as scipy's `ndtri` to about 1e-15 relative, without importing scipy (0.15-0.3 s of a search)."""
    p = np.asarray(p, dtype=float)
    q = p - 0.5
    central = np.abs(q) <= 0.425
    out = np.empty_like(p)
    r = 0.180625 - q[central] ** 2
    out[central] = q[central] * _ratio(_CENTRAL, r)
    tail = ~central
    if tail.any():
        pt, qt = p[tail], q[tail]
        r = np.sqrt(-np.log(np.where(qt <= 0.0, pt, 1.0 - pt)))
        near = r <= 5.0
        x = np.where(near, _ratio(_NEAR, r - 1.6), _ratio(_FAR, r - 5.0))
        out[tail] = np.where(qt < 0.0, -x, x)
    return out
