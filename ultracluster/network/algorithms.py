"""Collective algorithms as data: for every step, which member sends which segment to whom.

A group has `p` members numbered 0..p-1 in the algorithm's own order (ring order for rings, hypercube
order for recursive halving/doubling). Every member's buffer is split into `segments` equal segments. A
`Schedule` lists the steps; in each step every (src, dst, segment) entry moves one segment, and the receiver
either adds it into its own copy (`reduce`, reduce-scatter phases) or stores it (gather phases).

The same schedules drive the cost model (`collectives.py` maps members onto ranks and links) and the
payload that Ray actors really exchange (`shards/worker.py`): a ring between actors is a ring of sends.

Algorithms (docs/sources.md §3.4, §3.5, §5.3):

- ``ring``: reduce-scatter in p-1 steps (member i sends segment i-k-1 to i+1 at step k), all-gather in p-1
  steps (segment i-k); all-reduce = both. Bandwidth optimal, O(p) steps.
- ``rdh``: recursive halving (reduce-scatter) and doubling (all-gather), p a power of two. Halving
  takes the distances 1, 2, 4, ... in that order, so with members numbered chip-major the first, largest
  exchange stays on a chip; doubling runs them in reverse. O(log p) steps, bandwidth optimal.
- ``mesh``: one step in which every member sends each peer the segment it needs (direct writes); an
  all-reduce is a mesh reduce-scatter then a mesh all-gather. O(1) steps; links are over-subscribed.
- ``pairwise``: all-to-all in p-1 steps (member i sends member i+k its segment at step k).
- ``direct``: a single transfer from member 0 to member 1 (send/recv, pipeline sends).

At the end of a reduce-scatter member i holds reduced segment i; an all-gather starts from member i
holding segment i.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")


@dataclass(frozen=True)
class Step:
    """One step: entry j moves segment `segment[j]` from member `src[j]` to member `dst[j]`."""

    src: np.ndarray
    dst: np.ndarray
    segment: np.ndarray
    reduce: bool


@dataclass(frozen=True)
class Schedule:
    """An algorithm's steps for one op over `members`, buffers split into `segments` segments."""

    algorithm: str
    op: str
    members: int
    segments: int
    steps: tuple[Step, ...]

    def segments_sent(self) -> int:
        """Chunks every member sends in total (the same for every member in these algorithms)."""
        return sum(int(np.sum(s.src == 0)) for s in self.steps)


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _ring_rs(p: int) -> list[Step]:
    i = np.arange(p)
    return [Step(i, (i + 1) % p, (i - k - 1) % p, True) for k in range(p - 1)]


def _ring_ag(p: int) -> list[Step]:
    i = np.arange(p)
    return [Step(i, (i + 1) % p, (i - k) % p, False) for k in range(p - 1)]


def _rdh_rs(p: int) -> list[Step]:
    steps, mask, d = [], 0, 1
    c = np.arange(p)
    while d < p:
        src, dst, segment = [], [], []
        for i in range(p):
            held = (c & mask) == (i & mask)
            give = held & ((c & d) != (i & d))
            idx = np.flatnonzero(give)
            src.append(np.full(idx.size, i))
            dst.append(np.full(idx.size, i ^ d))
            segment.append(idx)
        steps.append(Step(np.concatenate(src), np.concatenate(dst), np.concatenate(segment), True))
        mask |= d
        d <<= 1
    return steps


def _rdh_ag(p: int) -> list[Step]:
    steps = []
    c = np.arange(p)
    d = p >> 1
    while d >= 1:
        low = 2 * d - 1                    # bits not exchanged yet: a member holds the segments equal to it on them
        src, dst, segment = [], [], []
        for i in range(p):
            held = np.flatnonzero(((c ^ i) & low) == 0)
            src.append(np.full(held.size, i))
            dst.append(np.full(held.size, i ^ d))
            segment.append(held)
        steps.append(Step(np.concatenate(src), np.concatenate(dst), np.concatenate(segment), False))
        d >>= 1
    return steps


def _mesh_rs(p: int) -> list[Step]:
    i, j = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    m = i != j
    return [Step(i[m], j[m], j[m], True)]


def _mesh_ag(p: int) -> list[Step]:
    i, j = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    m = i != j
    return [Step(i[m], j[m], i[m], False)]


def _pairwise(p: int) -> list[Step]:
    i = np.arange(p)
    return [Step(i, (i + k) % p, (i + k) % p, False) for k in range(1, p)]


ALGORITHMS = ("ring", "rdh", "mesh", "pairwise", "direct")


def schedule(algorithm: str, op: str, p: int) -> Schedule:
    """The steps of `algorithm` for `op` over `p` members.

    Args:
        algorithm: ring | rdh | mesh | pairwise | direct.
        op: all_reduce | reduce_scatter | all_gather | all_to_all | send_recv.
        p: members (rdh: a power of two; direct: 2).

    Returns:
        The schedule; all-reduce is the reduce-scatter steps then the all-gather steps.

    Raises:
        ValueError: an op the algorithm does not implement, or a member count it cannot take.
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    if p < 1:
        raise ValueError(f"a group needs at least one member, got {p}")
    if op == "send_recv" or algorithm == "direct":
        if op != "send_recv" or p != 2:
            raise ValueError("direct is send_recv between 2 members")
        return Schedule("direct", op, 2, 1, (Step(np.array([0]), np.array([1]), np.array([0]), False),))
    if op == "all_to_all":
        if algorithm not in ("pairwise", "mesh"):
            raise ValueError(f"all_to_all runs pairwise or mesh, not {algorithm}")
        steps = _pairwise(p) if algorithm == "pairwise" else _mesh_ag_a2a(p)
        return Schedule(algorithm, op, p, p, tuple(steps))
    if algorithm == "rdh" and not is_pow2(p):
        raise ValueError(f"rdh needs a power-of-two group, got {p}")
    parts = {"ring": (_ring_rs, _ring_ag), "rdh": (_rdh_rs, _rdh_ag), "mesh": (_mesh_rs, _mesh_ag)}
    if algorithm not in parts:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    rs, ag = parts[algorithm]
    steps = {"reduce_scatter": rs(p), "all_gather": ag(p), "all_reduce": rs(p) + ag(p)}[op]
    return Schedule(algorithm, op, p, p, tuple(steps))


def _mesh_ag_a2a(p: int) -> list[Step]:
    i, j = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    m = i != j
    return [Step(i[m], j[m], j[m], False)]


@dataclass(frozen=True)
class Pattern:
    """A step's traffic shape for the cost model: flow j carries `segments[j]` segments from `src[j]` to
    `dst[j]`; the step repeats `repeat` times with the same shape (ring steps differ only in segment ids).
    `reduce`: the receivers add what they get; `pipelined`: consecutive repeats overlap (a ring forwards
    one segment while the next hand-shake runs)."""

    src: np.ndarray
    dst: np.ndarray
    segments: np.ndarray
    repeat: int
    reduce: bool = False
    pipelined: bool = False


def patterns(algorithm: str, op: str, p: int, channels: int = 1) -> tuple[int, list[Pattern]]:
    """The traffic of `schedule(algorithm, op, p)` step by step, aggregated per (src, dst), in closed form
    (no O(p^2) segment lists for rings of thousands of members).

    Args:
        algorithm, op, p: as for `schedule`.
        channels: 2 splits every ring step into two half-segments going opposite ways round the ring
            (Neuron drives several cycles on disjoint wires at once; docs/sources.md §3.4).

    Returns:
        (segments the buffer is split into, patterns in step order).
    """
    if op == "send_recv" or algorithm == "direct":
        return 1, [Pattern(np.array([0]), np.array([1]), np.array([1.0]), 1)]
    i = np.arange(p)
    if op == "all_to_all":
        if algorithm == "pairwise":
            return p, [Pattern(i, (i + k) % p, np.ones(p), 1) for k in range(1, p)]
        a, b = np.meshgrid(i, i, indexing="ij")
        m = a != b
        return p, [Pattern(a[m], b[m], np.ones(int(m.sum())), 1)]
    phases = {"reduce_scatter": (True,), "all_gather": (False,), "all_reduce": (True, False)}[op]
    if algorithm == "ring":
        if channels == 2 and p > 2:
            src, dst, segments = np.concatenate([i, i]), np.concatenate([(i + 1) % p, (i - 1) % p]), np.full(2 * p, 0.5)
        else:
            src, dst, segments = i, (i + 1) % p, np.ones(p)
        return p, [Pattern(src, dst, segments, p - 1, red, True) for red in phases]
    if algorithm == "mesh":
        a, b = np.meshgrid(i, i, indexing="ij")
        m = a != b
        return p, [Pattern(a[m], b[m], np.ones(int(m.sum())), 1, red) for red in phases]
    if algorithm == "rdh":
        rs, d = [], 1
        while d < p:
            rs.append(Pattern(i, i ^ d, np.full(p, p / (2 * d)), 1, True))
            d <<= 1
        ag = [Pattern(x.src, x.dst, x.segments, 1, False) for x in reversed(rs)]
        return p, {"reduce_scatter": rs, "all_gather": ag, "all_reduce": rs + ag}[op]
    raise ValueError(f"unknown algorithm {algorithm!r}")
