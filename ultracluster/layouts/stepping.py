"""Long pipelines block by block: the run of a program of m0 + kP microbatches carried on from the run of m0.

Where a pipeline has not settled in a short run (`schedules`; near-equal stages, as serial exchanges make them,
settle over hundreds of microbatches) the planner runs a longer one. The longer program is the short one with
blocks of ops inserted before its cool-down (the structure `programs.repeats` reads off the programs of m0 and
m0 + P), so every op of the short run before the insertion runs the same in the longer one. Instead of compiling
the longer program and running it from its first op, the run carries on from where the short one stands: a
`Part` computes the next block from the last blocks (the ops the program of m0 + P inserts, from the ops they
depend on), another the cool-down from the last blocks. Every op is computed from the same operands as in the
longer program's own run (its predecessor's end, its producer's end plus the send, its seconds), so its time is
the same bits; a Part is a short program, compiled once per (schedule, p, m0, v) instead of once per length.

Checked, not assumed: the longer program's ops (`programs.program_arrays`) must be m0's with k blocks inserted
(`spliced`), else `schedules` compiles and runs it as before. The settled check of a run of m0 + kP reads the
last J blocks, J = `programs.cycle_blocks` of the m0 run's repeating blocks plus the k inserted (each repeats
the one before it; tests/plan/test_schedules.py checks J against `repeats` of the longer program).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..frozen import read_only
from .programs import F, depths, raw_arrays, level_runs, program_arrays, repeats


@dataclass(frozen=True)
class Part:
    """Ops computed from given ones, in dependency levels. The columns of its work array: the given ops' end times
    (0..inputs - 1), the computed ops in level order, a sentinel (time 0) last.

    Attributes:
        inputs: I, the columns given; ops: K, the columns computed (I..I + K - 1).
        levels: as `Compiled.levels`, in the work array's columns.
        pred_col, dep_col, dur_col, wait_col: [I + K] per column (the given ones' unread), as `Compiled`'s.
        out: the columns the caller reads (a step: the new block, aligned as `repeats`' blocks; a cool-down: each
            stage's last op, then B(m - 1, c) of each chunk c).
    """

    inputs: int
    ops: int
    levels: tuple
    pred_col: np.ndarray
    dep_col: np.ndarray
    dur_col: np.ndarray
    wait_col: np.ndarray
    out: np.ndarray


def _levels(I: int, K: int, pred: np.ndarray, dep: np.ndarray, start: np.ndarray, dur: np.ndarray, wait: np.ndarray,
            out: np.ndarray) -> Part:
    """The Part computing K ops (numbered stage by stage in program order: stage s holds start[s]..start[s + 1] - 1)
    from I given ones. pred, dep: [K] each op's predecessor and producer, an op number (>= 0), a given column
    (-1 - column) or none (-1 - I); dur, wait: [K] their table columns; out: op numbers or given columns alike."""
    depth = depths(np.where(pred >= 0, pred, -1), np.where(dep >= 0, dep, -1), start)   # given: depth 0
    order = np.argsort(depth, kind="stable")
    col = np.empty(K + I + 1, dtype=np.int64)        # [ops, then given -1 - c at K + c... ] -> work column
    col[order] = I + np.arange(K)
    col[K:K + I] = np.arange(I)
    col[K + I] = I + K                               # none: the sentinel
    def work(x):                                     # noqa: E306
        return col[np.where(x >= 0, x, K - 1 - x)]
    cuts = np.flatnonzero(np.diff(depth[order])) + 1
    first, end = I + np.concatenate([[0], cuts]), I + np.concatenate([cuts, [K]])
    pad = np.zeros(I, dtype=np.int64)
    pred_col, dep_col = np.concatenate([pad, work(pred[order])]), np.concatenate([pad, work(dep[order])])
    part = Part(inputs=I, ops=K, levels=(first.tolist(), end.tolist(), *level_runs(pred_col, first, end),
                                         *level_runs(dep_col, first, end)),
                pred_col=pred_col, dep_col=dep_col, dur_col=np.concatenate([pad, dur[order]]),
                wait_col=np.concatenate([pad, wait[order]]), out=work(out))
    return read_only((part.pred_col, part.dep_col, part.dur_col, part.wait_col, part.out)) and part


def _refs(raw, given: np.ndarray, ops: np.ndarray, of: np.ndarray) -> np.ndarray | None:
    """`of` (raw op numbers, -1: none) as `_levels` numbers them: the op's number among `ops`, -1 - its column
    among `given`, -1 - given.size for none; None where one is neither."""
    num = np.full(raw.kind.size + 1, -(1 << 40), dtype=np.int64)   # the last entry: raw's -1, none
    num[-1] = -1 - given.size
    num[given] = -1 - np.arange(given.size)
    num[ops] = np.arange(ops.size)
    got = num[of]
    return None if (got == -(1 << 40)).any() else got


@lru_cache(maxsize=256)
def _template(schedule: str, p: int, m: int, v: int):
    """What one inserted block of (schedule, p, m, v) runs, read off the program of m + P: per op of the block
    (aligned as `repeats`' blocks), its predecessor's and producer's (blocks back, op) (0 back: this block; -1:
    none), its seconds' and send's table columns; and B, the blocks back they reach. None without repeating
    blocks or where one reaches further back than they hold."""
    rep = repeats(schedule, p, m, v)
    if rep is None:
        return None
    P, q, ins, back = rep.microbatches_per_block, rep.per_stage, rep.insert, rep.reach + 1
    if back > rep.blocks.shape[0]:
        return None
    b = raw_arrays(schedule, p, m + P, v)
    new = ((b.start[:-1] + ins)[:, None] + np.arange(q)[None, :]).ravel()      # the inserted block, aligned
    given = ((b.start[:-1] + ins)[None, :, None] - q * (np.arange(back) + 1)[:, None, None]
             + np.arange(q)[None, None, :]).ravel()                           # blocks 1..back back, aligned
    refs = [_refs(b, given, new, x) for x in (b.pred[new], b.dep[new])]
    if refs[0] is None or refs[1] is None:
        return None
    size = new.size

    def split(x):              # -> (blocks back, aligned op), -1 back for none
        g = -1 - x
        return np.where(x >= 0, 0, np.where(g < back * size, 1 + g // size, -1)), np.where(x >= 0, x, g % size)
    kind, chunk = b.kind[new], b.chunk[new]
    return (*split(refs[0]), *split(refs[1]), np.where(kind == F, chunk, p * v + chunk), 2 * p * v + b.delay[new],
            back)


@lru_cache(maxsize=256)
def extension(schedule: str, p: int, m: int, v: int, k: int) -> tuple[Part, int] | None:
    """(the Part running k blocks past the run of m microbatches, B): from the last B blocks of that run (latest
    first), every op of the k blocks the program of m + kP inserts; out: the k blocks, oldest first, aligned. The
    blocks together, not one by one: a block's ops reach across the whole pipeline, and run as one program they
    overlap as they do in the longer program (cached)."""
    t = _template(schedule, p, m, v)
    if t is None:
        return None
    pb, pj, db, dj, dur, wait, back = t
    size, q = pb.size, repeats(schedule, p, m, v).per_stage
    i = np.arange(k)[:, None]                        # block i of the k (0: the first run)
    stage_major = np.arange(k * size).reshape(p, k, q).transpose(1, 0, 2).reshape(k, size)   # (i, j) -> op number

    def number(blocks_back, j):        # (i, j)'s reference -> `_levels`' numbering
        src = i - blocks_back
        inside = (blocks_back >= 0) & (src >= 0)
        return np.where(blocks_back < 0, -1 - back * size,
                        np.where(inside, stage_major[np.clip(src, 0, k - 1), j], -1 - ((-1 - src) * size + j)))
    pred, dep = np.empty(k * size, dtype=np.int64), np.empty(k * size, dtype=np.int64)
    pred[stage_major] = number(pb[None, :], pj[None, :])
    dep[stage_major] = number(db[None, :], dj[None, :])
    cols = np.empty((2, k * size), dtype=np.int64)
    cols[0][stage_major], cols[1][stage_major] = dur[None, :], wait[None, :]
    return _levels(back * size, k * size, pred, dep, np.arange(p + 1) * k * q, cols[0], cols[1],
                   stage_major.ravel()), back


@lru_cache(maxsize=256)
def cooldown(schedule: str, p: int, m: int, v: int) -> tuple[Part, int] | None:
    """(the Part running the cool-down of (schedule, p, m, v) and of every longer program `spliced` from it, B):
    from the last B blocks before the insertion (latest first); out: each stage's last op, then B(m - 1, c) of
    each chunk c (cached)."""
    t = _template(schedule, p, m, v)
    if t is None:
        return None
    back = t[-1]
    rep = repeats(schedule, p, m, v)
    q, ins = rep.per_stage, rep.insert
    a = raw_arrays(schedule, p, m, v)
    given = ((a.start[:-1] + ins)[None, :, None] - q * (np.arange(back) + 1)[:, None, None]
             + np.arange(q)[None, None, :]).ravel()
    cool = np.concatenate([np.arange(a.start[s] + ins[s], a.start[s + 1]) for s in range(p)])
    last_b = np.flatnonzero((a.kind == 1) & (a.mb == m - 1))
    refs = [_refs(a, given, cool, x) for x in (a.pred[cool], a.dep[cool], np.concatenate(
        [a.start[1:] - 1, last_b[np.argsort(a.chunk[last_b])]]))]
    if any(r is None for r in refs):
        return None
    kind, chunk = a.kind[cool], a.chunk[cool]
    return _levels(given.size, cool.size, refs[0], refs[1], np.concatenate([[0], np.cumsum(a.start[1:] - a.start[:-1]
                                                                                        - ins)]),
                   np.where(kind == F, chunk, p * v + chunk), 2 * p * v + a.delay[cool], refs[2]), back


@lru_cache(maxsize=512)
def spliced(schedule: str, p: int, v: int, m0: int, m: int) -> bool:
    """Whether the engine's program of m microbatches is m0's with (m - m0) / P blocks inserted: on every stage
    m0's ops before the insertion, block 0 again P, 2P, ... microbatches later, then m0's cool-down (m - m0)
    microbatches later."""
    rep = repeats(schedule, p, m0, v)
    if rep is None:
        return False
    P, q, ins = rep.microbatches_per_block, rep.per_stage, rep.insert[:, None]
    k, r = divmod(m - m0, P)
    _, kind_a, mb_a, chunk_a, start_a = program_arrays(schedule, p, m0, v)
    _, kind_b, mb_b, chunk_b, start_b = program_arrays(schedule, p, m, v)
    La, Lb = int(start_a[1]), int(start_b[1])
    if r or k < 0 or Lb != La + k * q:
        return False
    pos = np.arange(Lb)[None, :]
    src = np.where(pos < ins, pos, np.where(pos < ins + k * q, ins - q + (pos - ins) % q, pos - k * q))
    later = np.where(pos < ins, 0, np.where(pos < ins + k * q, P * (1 + (pos - ins) // q), k * P))
    src = src + (np.arange(p) * La)[:, None]
    return bool(np.array_equal(kind_b.reshape(p, Lb), kind_a[src]) and np.array_equal(
        chunk_b.reshape(p, Lb), chunk_a[src]) and np.array_equal(mb_b.reshape(p, Lb), mb_a[src] + later))


def run_levels(levels: tuple, pred: np.ndarray, dep: np.ndarray, dur: np.ndarray, wait: np.ndarray | None,
               end: np.ndarray, waits: bool) -> None:
    """Every level's end times into `end` [columns, rows], op-major: an op ends its seconds after the later of its
    predecessor's end and its producer's end plus the send. `waits` False: every send is 0 (serial exchanges) and
    x + 0.0 is x (times are >= 0), so the addition is left out, the same bits."""
    take, maximum = end.take, np.maximum              # the bound method: np.take's wrapper costs as much again
    for a, b, p0, p1, d0, d1 in zip(*levels):
        here = end[a:b]
        if not waits:
            ready = end[d0:d1] if d0 >= 0 else take(dep[a:b], 0)
        elif d0 >= 0:
            ready = end[d0:d1] + wait[a:b]
        else:
            ready = take(dep[a:b], 0)
            ready += wait[a:b]
        maximum(end[p0:p1] if p0 >= 0 else take(pred[a:b], 0), ready, out=here)
        here += dur[a:b]


def tables(part: Part, table: np.ndarray, waits: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(seconds, sends) of every column of a Part for the rows of `table` (op-major [fwd, bwd(, delays)], as
    `schedules.evaluate` makes it)."""
    return table.take(part.dur_col, axis=0), table.take(part.wait_col, axis=0) if waits else None


def run_part(part: Part, dur: np.ndarray, wait: np.ndarray | None, given: list[np.ndarray], waits: bool) -> np.ndarray:
    """[out, rows] the end times a Part's caller reads, from the given blocks' end times (each [ops, rows])."""
    end = np.empty((part.inputs + part.ops + 1, dur.shape[1]))
    np.concatenate(given, axis=0, out=end[:part.inputs])
    end[-1] = 0.0
    run_levels(part.levels, part.pred_col, part.dep_col, dur, wait, end, waits)
    return end[part.out]
