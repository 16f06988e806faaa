"""Pipeline programs → op times of many layouts at once: the engine's schedule, executed over a row axis.

`replay.schedule.execute` runs one layout's stage programs event by event, vectorized over its data-parallel
replicas. The planner needs the same times for thousands of layouts, so `pipeline_times` runs the same
programs (`replay.schedule.stage_programs`, the same start rule: an op starts when its stage is free and its
producer has ended plus the send) level by level over a row axis: every row is one layout (and step) with
its own per-chunk forward, backward and send seconds. One numpy call per dependency level, whatever the
number of rows.

Exact shortcut for long pipelines. Every microbatch costs the same, so after a transient a 1F1B or
interleaved pipeline repeats itself: each block of ops (one forward and one backward per stage for 1F1B;
p microbatches of every chunk for interleaved) ends exactly λ later than the block before. Op times are
max-plus functions of earlier op times, homogeneous and non-expansive, so once r + 1 consecutive blocks
(r: how many blocks back a dependency reaches) are in that progression every later block is too, and the
cool-down of a run with more microbatches is this run's cool-down shifted by λ per extra block. The
evaluator runs a shorter program (m' ≡ m mod the block's microbatches), checks the progression row by row
and extrapolates; rows that have not settled run again with twice the microbatches, up to the full m.
GPipe (all forwards, then all backwards) has no such block and always runs in full. The block structure is
read off the engine's own programs (the ops that m + P microbatches insert), never assumed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..replay.schedule import stage_programs

F, B = 0, 1
# relative tolerance of "the same increment" (floating-point noise is ~1e-13 of the times; a looser
# tolerance could extrapolate a pipeline whose bottleneck has not settled)
SETTLED_RTOL = 1e-11
MAX_CELLS = 4_000_000          # rows x ops evaluated at once (memory bound: ~100 MB of float64 arrays)


@dataclass(frozen=True)
class Compiled:
    """One (schedule, p, m, v) program as flat arrays, with its dependency levels and block structure.

    Attributes:
        ops: number of ops; arrays below are [ops] unless noted. Index `ops` is a sentinel (time 0).
        kind, chunk: F/B and chunk id of each op.
        pred: the previous op on the same stage (sentinel when first).
        dep: the producer (previous chunk's forward, next chunk's backward, own forward on the last chunk).
        delay: column of the row's delay table [0, send_fwd, send_bwd, send_bwd_last] that the op waits.
        levels: op indices by dependency depth (ops of one level depend only on earlier levels).
        last_op: [p] the last op of each stage; last_b: [chunks] op B(m - 1, c).
        microbatches_per_block: P (1, or p for interleaved); 0 when the program has no repeating block.
        blocks: [R + 1, size] op indices of the last R + 1 repeating blocks (row 0 the last), aligned so that
            blocks[j, i] is blocks[j + 1, i] one block later; empty when not compressible.
        shiftable: [ops] True where the op lies after the first checked block (its time in a longer run is
            this run's time plus λ per extra block).
    """

    schedule: str
    p: int
    m: int
    v: int
    ops: int
    kind: np.ndarray
    chunk: np.ndarray
    pred: np.ndarray
    dep: np.ndarray
    delay: np.ndarray
    levels: tuple[np.ndarray, ...]
    last_op: np.ndarray
    last_b: np.ndarray
    microbatches_per_block: int = 0
    blocks: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    shiftable: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def _flatten(programs: list[list[tuple[str, int, int]]], n_chunks: int, m: int):
    """Ops of every stage in an order the engine could execute them, with their dependencies and depths."""
    index: dict[tuple[str, int, int], int] = {}
    stage_of, kinds, chunks, preds, deps, delays, depth = [], [], [], [], [], [], []
    ptr = [0] * len(programs)
    last = [-1] * len(programs)
    remaining = sum(len(pr) for pr in programs)
    while remaining:
        progressed = False
        for s, prog in enumerate(programs):
            while ptr[s] < len(prog):
                kind, k, c = prog[ptr[s]]
                if kind == "F":
                    dep = ("F", k, c - 1) if c > 0 else None
                    col = c if c > 0 else 0                       # 1 + (c - 1): send_fwd[c - 1]
                else:
                    dep = ("B", k, c + 1) if c < n_chunks - 1 else ("F", k, c)
                    if c < n_chunks - 1:                          # send_bwd[c + 1], or send_bwd_last for the
                        col = (1 + 2 * n_chunks if k == m - 1 else 1 + n_chunks) + c + 1   # last microbatch
                    else:
                        col = 0
                if dep is not None and dep not in index:
                    break
                i = len(kinds)
                index[(kind, k, c)] = i
                d = index[dep] if dep is not None else -1
                stage_of.append(s)
                kinds.append(F if kind == "F" else B)
                chunks.append(c)
                preds.append(last[s])
                deps.append(d)
                delays.append(col)
                depth.append(1 + max(depth[last[s]] if last[s] >= 0 else 0, depth[d] if d >= 0 else 0))
                last[s] = i
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise AssertionError("pipeline schedule deadlocked")   # a bug in stage_programs, not bad input
    return index, np.array(stage_of), np.array(kinds), np.array(chunks), np.array(preds), np.array(deps), \
        np.array(delays), np.array(depth), last


@dataclass(frozen=True)
class _Raw:
    """A flattened program with its op identities (for the block analysis)."""

    ops: list                    # (kind, k, c) of op i
    index: dict                  # (kind, k, c) -> i
    stage: np.ndarray
    kind: np.ndarray
    chunk: np.ndarray
    pred: np.ndarray             # -1: none
    dep: np.ndarray              # -1: none
    delay: np.ndarray
    depth: np.ndarray
    last: list
    programs: list


@lru_cache(maxsize=512)
def _raw(schedule: str, p: int, m: int, v: int) -> _Raw:
    programs = stage_programs(schedule, p, m, v)
    index, stage, kind, chunk, pred, dep, delay, depth, last = _flatten(programs, p * v, m)
    ops = [None] * len(index)
    for op, i in index.items():
        ops[i] = op
    return _Raw(ops, index, stage, kind, chunk, pred, dep, delay, depth, last, programs)


@lru_cache(maxsize=512)
def compile_programs(schedule: str, p: int, m: int, v: int = 1) -> Compiled:
    """The engine's stage programs of (schedule, p, m, v) as a Compiled (cached)."""
    raw = _raw(schedule, p, m, v)
    ops = len(raw.ops)
    order = np.argsort(raw.depth, kind="stable")
    cuts = np.flatnonzero(np.diff(raw.depth[order])) + 1
    comp = Compiled(schedule=schedule, p=p, m=m, v=v, ops=ops, kind=raw.kind, chunk=raw.chunk,
                    pred=np.where(raw.pred < 0, ops, raw.pred), dep=np.where(raw.dep < 0, ops, raw.dep),
                    delay=raw.delay, levels=tuple(np.split(order, cuts)), last_op=np.array(raw.last),
                    last_b=np.array([raw.index[("B", m - 1, c)] for c in range(p * v)]))
    blocks = _blocks(schedule, p, m, v)
    if blocks is None:
        return comp
    P, aligned, shiftable = blocks
    return Compiled(**{**comp.__dict__, "microbatches_per_block": P, "blocks": aligned, "shiftable": shiftable})


def _blocks(schedule: str, p: int, m: int, v: int):
    """(P, blocks 0..R aligned, shiftable ops) of a program whose longer runs repeat its last blocks, else None.

    Read off the engine's programs for m and m + P microbatches: the longer one must be this one with one
    block of ops inserted on every stage (the block before it, P microbatches later), and
      (i) every op before the insertion has the same dependencies and send in the longer run (its time is
          the same there);
     (ii) the last blocks repeat (block j is block j + 1 shifted by P microbatches) far enough back;
    (iii) the ops of the last block and of the cool-down depend only on checked blocks and the cool-down,
          and the same dependencies, shifted, hold in the longer run.
    Then, with blocks 0..R in arithmetic progression, every longer run continues it (see the module doc).
    """
    if schedule == "gpipe":
        return None
    P = p if schedule == "interleaved" else 1
    a, b = _raw(schedule, p, m, v), _raw(schedule, p, m + P, v)

    def shift(op, by=P):
        return (op[0], op[1] + by, op[2])

    block_of = np.full(len(a.ops), 1 << 30)      # 1 << 30: before the checked blocks; -1: cool-down
    spans = []
    for prog, prog2 in zip(a.programs, b.programs):
        q = len(prog2) - len(prog)
        ins = next((i for i, (x, y) in enumerate(zip(prog, prog2)) if x != y), len(prog))
        if q <= 0 or ins < q or prog2[ins + q:] != [shift(o) for o in prog[ins:]] \
                or prog2[ins:ins + q] != [shift(o) for o in prog[ins - q:ins]]:
            return None
        n = 1
        while ins - (n + 1) * q >= 0 and prog[ins - n * q:ins - (n - 1) * q] == \
                [shift(o) for o in prog[ins - (n + 1) * q:ins - n * q]]:
            n += 1
        spans.append((prog, ins, q, n))
    n_blocks = min(n for *_, n in spans)
    for prog, ins, q, _ in spans:
        for pos, op in enumerate(prog):
            j = -1 if pos >= ins else (ins - 1 - pos) // q
            if j < n_blocks:
                block_of[a.index[op]] = j
    # (i) the prefix runs the same in the longer program
    for i, op in enumerate(a.ops):
        if block_of[i] == -1:
            continue
        k = b.index[op]
        if (a.delay[i], a.kind[i]) != (b.delay[k], b.kind[k]) or any(
                (x < 0) != (y < 0) or x >= 0 and a.ops[x] != b.ops[y] for x, y in ((a.pred[i], b.pred[k]),
                                                                                   (a.dep[i], b.dep[k]))):
            return None
    # (iii) block 0 and the cool-down: dependencies inside checked blocks, shifted the same in the longer run
    reach = 1
    for i in np.flatnonzero((block_of == 0) | (block_of == -1)):
        k = b.index[shift(a.ops[i])]
        if a.delay[i] != b.delay[k]:
            return None
        for x, y in ((a.pred[i], b.pred[k]), (a.dep[i], b.dep[k])):
            if (x < 0) != (y < 0):
                return None
            if x < 0:
                continue
            if b.ops[y] != shift(a.ops[x]) or block_of[x] == 1 << 30:
                return None
            reach = max(reach, int(block_of[x]))
    R = reach
    if n_blocks < R + 1:
        return None
    aligned = [[a.index[op] for prog, ins, q, _ in spans for op in prog[ins - (j + 1) * q:ins - j * q]]
               for j in range(R + 1)]
    shiftable = (block_of == -1) | ((block_of >= 0) & (block_of <= R))
    return P, np.array(aligned, dtype=np.int64), shiftable


def evaluate(comp: Compiled, fwd: np.ndarray, bwd: np.ndarray, delays: np.ndarray) -> np.ndarray:
    """End time of every op for every row.

    Args:
        comp: the compiled program.
        fwd, bwd: [rows, chunks] seconds of one microbatch's forward / backward of each chunk.
        delays: [rows, 1 + 3 x chunks] the row's delay table: 0, send_fwd, send_bwd, send_bwd_last.

    Returns:
        [rows, ops + 1] end times (the last column is the sentinel, 0).
    """
    rows = fwd.shape[0]
    dur = np.where(comp.kind == F, fwd[:, comp.chunk], bwd[:, comp.chunk])
    wait = delays[:, comp.delay]
    end = np.zeros((rows, comp.ops + 1))
    for lv in comp.levels:
        t = np.maximum(end[:, comp.pred[lv]], end[:, comp.dep[lv]] + wait[:, lv])
        end[:, lv] = t + dur[:, lv]
    return end


@dataclass(frozen=True)
class PipeTimes:
    """What the step needs from the pipeline, per row: arrays [rows, stages] and [rows, chunks]."""

    stage_end: np.ndarray
    last_b_start: np.ndarray
    last_b_end: np.ndarray
    evaluated_microbatches: np.ndarray   # [rows] the microbatches actually run (m, or fewer when extrapolated)


def _run_lengths(schedule: str, p: int, m: int, v: int) -> list[int]:
    """Microbatch counts to try for an m-microbatch pipeline: short runs first (same m mod P), then m."""
    if schedule == "gpipe" or p == 1 and m <= 8:
        return [m]
    P = p if schedule == "interleaved" else 1
    first = max(2 * p + 6, 4 * P + (m % P)) if P > 1 else 2 * p + 6
    first += (m - first) % P
    out = []
    while first < m:
        out.append(first)
        first = 2 * first - (first % P if P > 1 else 0)
        first += (m - first) % P
    return out + [m]


def pipeline_times(schedule: str, p: int, v: int, m: int, fwd: np.ndarray, bwd: np.ndarray,
                   send_fwd: np.ndarray, send_bwd: np.ndarray, send_bwd_last: np.ndarray) -> PipeTimes:
    """Stage end times and the last microbatch's backward of every chunk, for many rows of one program.

    Args:
        schedule, p, v, m: the program (as `stage_programs`).
        fwd, bwd: [rows, chunks] per-microbatch seconds (compute and in-layer communication).
        send_fwd, send_bwd, send_bwd_last: [rows, chunks] send seconds as the engine's CommPlan has them
            (send_bwd_last replaces send_bwd for the last microbatch where send_bwd > 0).

    Returns:
        The PipeTimes, equal (to floating-point noise) to `replay.schedule.execute` row by row.
    """
    rows, chunks = fwd.shape
    last = np.where(send_bwd > 0, send_bwd_last, send_bwd)
    delays = np.concatenate([np.zeros((rows, 1)), send_fwd, send_bwd, last], axis=1)
    out_end = np.zeros((rows, p))
    out_b0 = np.zeros((rows, chunks))
    out_b1 = np.zeros((rows, chunks))
    ran = np.zeros(rows, dtype=np.int64)
    todo = np.arange(rows)
    for m_run in _run_lengths(schedule, p, m, v):
        if todo.size == 0:
            break
        comp = compile_programs(schedule, p, m_run, v)
        full = m_run == m
        if not full and comp.blocks.size == 0:
            continue
        step = max(1, MAX_CELLS // (comp.ops + 1))
        settled_all = []
        for lo in range(0, todo.size, step):
            idx = todo[lo:lo + step]
            end = evaluate(comp, fwd[idx], bwd[idx], delays[idx])
            if full:
                settled, extra = np.ones(idx.size, dtype=bool), np.zeros(idx.size)
            else:
                blk = end[:, comp.blocks]                              # [rows, R + 1, size]
                inc = blk[:, :-1, :] - blk[:, 1:, :]
                lam = inc[:, 0, :1]
                scale = np.abs(blk).max(axis=(1, 2))[:, None, None] + 1e-300
                settled = (np.abs(inc - lam[:, :, None]) <= SETTLED_RTOL * scale).all(axis=(1, 2))
                extra = lam[:, 0] * ((m - m_run) // comp.microbatches_per_block)
            dur_b = bwd[idx][:, np.arange(chunks)]
            keep = idx[settled]
            e = end[settled]
            out_end[keep] = e[:, comp.last_op] + extra[settled, None]
            out_b1[keep] = e[:, comp.last_b] + extra[settled, None]
            out_b0[keep] = out_b1[keep] - dur_b[settled]
            ran[keep] = m_run
            settled_all.append(settled)
        todo = todo[~np.concatenate(settled_all)] if settled_all else todo
    assert todo.size == 0, "every row runs in full at the last length"
    return PipeTimes(stage_end=out_end, last_b_start=out_b0, last_b_end=out_b1, evaluated_microbatches=ran)
