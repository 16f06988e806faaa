"""Pipeline programs → the structure the planner's evaluator runs: the engine's stage programs
(`replay.schedule.program_table`) as dependency levels (`compile_programs`) and the blocks their longer runs
repeat (`repeats`), each made once per (schedule, p, m, v) and cached. `schedules` evaluates them over a row axis
and extrapolates long pipelines from short runs (its module doc says why that is exact).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..frozen import read_only
from ..replay.schedule import program_table

F, B = 0, 1
MAX_CYCLE_PER_STAGE = 2        # the longest repeat looked for, in blocks per stage: sends that differ along the
                               # pipeline (an EFA hop every few stages) make the slowest cycle span several blocks


@dataclass(frozen=True)
class Compiled:
    """One (schedule, p, m, v) program in dependency levels, as `evaluate` runs it (its blocks: `repeats`). Columns
    number the ops in level order (a level depends only on earlier ones); column `ops` is a sentinel (time 0).

    Attributes:
        ops: number of ops; at: [ops + 1] each op's column (ops numbered stage by stage in program order).
        pred_col, dep_col: [ops] per column, the column of the op's predecessor (the previous op on the stage) and
            producer (previous chunk's forward, next chunk's backward, own forward on the last chunk).
        levels: six lists, one entry per level: its (first, end) column, and where its ops' predecessors and
            their producers are consecutive columns, their (first, end) column, else (-1, -1) (`level_runs`; the
            evaluator reads a view there instead of gathering a copy: the same values). Lists, not an object per
            level: a long program has thousands of levels.
        dur_col, wait_col: [ops] per column, the column of the row's table [fwd, bwd, delays] (`evaluate`) with
            the op's seconds and the send it waits for its producer.
        last_op: [p] the last op of each stage; last_b: [chunks] op B(m - 1, c).
    """

    schedule: str
    p: int
    m: int
    v: int
    ops: int
    at: np.ndarray
    pred_col: np.ndarray
    dep_col: np.ndarray
    levels: tuple
    dur_col: np.ndarray
    wait_col: np.ndarray
    last_op: np.ndarray
    last_b: np.ndarray


@dataclass(frozen=True)
class Repeats:
    """The block structure of a program whose longer runs repeat its last blocks (`repeats`).

    Attributes:
        microbatches_per_block: P (1, or p for interleaved).
        reach: R, how many blocks back the last block's and the cool-down's dependencies reach.
        blocks: [J, size] op indices of the last J >= R + 1 repeating blocks (row 0 the last), aligned so that
            blocks[j, i] is blocks[j + 1, i] one block later.
        insert: [p] where each stage's block goes in (ops of the stage before it); per_stage: q, ops a block
            holds on each stage; run: n, how many blocks in a row repeat before the insertion (J = min(n, R +
            max(4, MAX_CYCLE_PER_STAGE p))). What `stepping` needs to run longer programs block by block.
    """

    microbatches_per_block: int
    reach: int
    blocks: np.ndarray
    insert: np.ndarray
    per_stage: int
    run: int


@dataclass(frozen=True)
class _Raw:
    """A program as flat arrays, ops numbered stage by stage in program order.

    Attributes:
        kind, mb, chunk: [ops] what each op is.
        start: [p + 1] first op of each stage (stage s holds ops start[s]..start[s + 1] - 1).
        pred: the previous op on the stage (-1: first); dep: the producer (-1: none).
        delay: column of the delay table the op waits for its producer.
    """

    kind: np.ndarray
    mb: np.ndarray
    chunk: np.ndarray
    start: np.ndarray
    pred: np.ndarray
    dep: np.ndarray
    delay: np.ndarray
    kmax: int

    def key(self, kind: np.ndarray, mb: np.ndarray, chunk: np.ndarray, base: int | None = None) -> np.ndarray:
        """Dense integer identity of ops (kind, microbatch, chunk); `base` > every microbatch index compared."""
        n_chunks = int(self.chunk.max()) + 1 if self.chunk.size else 1
        base = self.kmax + 1 if base is None else base
        return (np.asarray(kind) * base + np.asarray(mb)) * n_chunks + np.asarray(chunk)


@lru_cache(maxsize=512)
def program_arrays(schedule: str, p: int, m: int, v: int) -> tuple[np.ndarray, ...]:
    """The engine's stage programs as arrays, ops numbered stage by stage in program order:
    (stage, kind, microbatch, chunk, start), start[s] the first op of stage s."""
    back, mb, chunk = program_table(schedule, p, m, v)            # back: F 0, B 1
    stage, start = np.arange(p).repeat(back.shape[1]), np.arange(p + 1) * back.shape[1]
    return read_only((stage, back.astype(np.int64).ravel(), mb.ravel(), chunk.ravel(), start))   # shared: read-only


@lru_cache(maxsize=512)
def raw_arrays(schedule: str, p: int, m: int, v: int) -> _Raw:
    n_chunks = p * v
    stage, kind, mb, chunk, start = program_arrays(schedule, p, m, v)
    pos = np.arange(kind.size) - start[stage]
    kmax = int(mb.max()) if mb.size else 0
    raw = _Raw(kind, mb, chunk, start, np.zeros(0), np.zeros(0), np.zeros(0), kmax)
    lookup = np.full(2 * (kmax + 1) * n_chunks, -1, dtype=np.int64)
    lookup[raw.key(kind, mb, chunk)] = np.arange(kind.size)
    pred = np.where(pos > 0, np.arange(kind.size) - 1, -1)
    fwd = kind == F
    dep_kind = np.where(fwd, F, np.where(chunk < n_chunks - 1, B, F))
    dep_chunk = np.where(fwd, chunk - 1, np.where(chunk < n_chunks - 1, chunk + 1, chunk))
    has_dep = ~(fwd & (chunk == 0))
    dep = np.where(has_dep, lookup[raw.key(dep_kind, mb, np.clip(dep_chunk, 0, n_chunks - 1))], -1)
    if (has_dep & (dep < 0)).any():
        raise AssertionError("an op's producer is not in the program")   # a bug in stage_programs, not bad input
    # delay table columns: 0 none, 1 + c - 1 send_fwd[c - 1], 1 + n + c + 1 send_bwd[c + 1], 1 + 2n + c + 1 the
    # last microbatch's send_bwd_last[c + 1]
    delay = np.where(fwd, np.where(chunk > 0, chunk, 0),
                     np.where(chunk < n_chunks - 1, np.where(mb == m - 1, 1 + 2 * n_chunks, 1 + n_chunks) + chunk + 1, 0))
    return read_only(dataclasses.replace(raw, pred=pred, dep=dep, delay=delay))


def depths(pred: np.ndarray, dep: np.ndarray, start: np.ndarray) -> np.ndarray:
    """1 + the longest chain before each op (ops numbered stage by stage). Along a stage depth[i] = 1 +
    max(depth[i - 1], x[i]), x the producer's depth: a running maximum, i + 1 + max over j <= i of (x[j] - j).
    Sweeps up and down the stages (forwards' producers are on the stage before, backwards' after) apply it until
    every op has 1 + the larger depth of its predecessor and producer (checked over all ops at once instead of a
    sweep that changes nothing; a DAG has one such fixpoint): from 0 the depths grow to the longest chains (3-4
    sweeps), or without end if deadlocked."""
    n = dep.size
    depth = np.zeros(n + 1, dtype=np.int64)            # depth[n]: no producer
    src = np.where(dep >= 0, dep, n)
    spans = list(zip(start[:-1].tolist(), start[1:].tolist()))
    j = np.arange(max((b - a for a, b in spans), default=0) + 1)
    prev = np.where(pred >= 0, pred, n)
    sweep = 0
    while sweep == 0 or not np.array_equal(depth[:n], np.maximum(depth.take(prev), depth.take(src)) + 1):
        for a, b in spans if sweep % 2 == 0 else spans[::-1]:
            x = depth.take(src[a:b])
            x -= j[:b - a]
            np.maximum.accumulate(x, out=x)
            x += j[1:b - a + 1]
            depth[a:b] = x
        sweep += 1
        if depth.max() > n:
            raise AssertionError("pipeline schedule deadlocked")   # a bug in stage_programs, not bad input
    return depth[:n]


def level_runs(cols: np.ndarray, first: np.ndarray, end: np.ndarray) -> tuple[list, list]:
    """Per piece [first, end) of `cols`, the (lo, hi) its columns run over where they are consecutive, else
    (-1, -1)."""
    steps = np.concatenate([[0], np.cumsum(np.diff(cols) != 1)])   # steps[i]: breaks in cols[:i + 1]
    run = steps[end - 1] == steps[first]
    lo = np.where(run, cols[first], -1)
    return lo.tolist(), np.where(run, lo + (end - first), -1).tolist()


@lru_cache(maxsize=512)
def compile_programs(schedule: str, p: int, m: int, v: int = 1) -> Compiled:
    """The engine's stage programs of (schedule, p, m, v) as a Compiled (cached)."""
    raw = raw_arrays(schedule, p, m, v)
    ops = raw.kind.size
    depth = depths(raw.pred, raw.dep, raw.start)
    order = np.argsort(depth, kind="stable")
    cuts = np.flatnonzero(np.diff(depth[order])) + 1
    last_b = np.flatnonzero((raw.kind == B) & (raw.mb == m - 1))             # B(m - 1, c), one per chunk c
    last_op = raw.start[1:] - 1
    pred, dep = np.where(raw.pred < 0, ops, raw.pred), np.where(raw.dep < 0, ops, raw.dep)
    at = np.empty(ops + 1, dtype=np.int64)                  # op -> its column in level order (sentinel last)
    at[order], at[ops] = np.arange(ops), ops
    first, end = np.concatenate([[0], cuts]), np.concatenate([cuts, [ops]])
    cols_pred, cols_dep = at[pred[order]], at[dep[order]]
    n_chunks, chunk_o = p * v, raw.chunk[order]
    comp = Compiled(schedule=schedule, p=p, m=m, v=v, ops=ops, at=at, pred_col=cols_pred, dep_col=cols_dep,
                    levels=(first.tolist(), end.tolist(), *level_runs(cols_pred, first, end),
                            *level_runs(cols_dep, first, end)),
                    dur_col=np.where(raw.kind[order] == F, chunk_o, n_chunks + chunk_o),
                    wait_col=2 * n_chunks + raw.delay[order], last_op=last_op,
                    last_b=last_b[np.argsort(raw.chunk[last_b])])
    return read_only((comp.at, comp.pred_col, comp.dep_col, comp.dur_col, comp.wait_col, comp.last_op,
                      comp.last_b)) and comp   # (not the level lists: plain ints, walked one by one)


@lru_cache(maxsize=512)
def repeats(schedule: str, p: int, m: int, v: int = 1) -> Repeats | None:
    """The repeating blocks of (schedule, p, m, v), or None (cached; only a run shorter than a row's needs them)."""
    found = _blocks(schedule, p, m, v)
    return None if found is None else read_only(Repeats(*found))


def _blocks(schedule: str, p: int, m: int, v: int):
    """(P, R, blocks 0..R and more aligned) of a program whose longer runs repeat its last blocks, else None.

    Read off the engine's programs for m and m + P microbatches: the longer one must be this one with one
    block of ops inserted on every stage (the block before it, P microbatches later), and
      (i) every op before the insertion has the same producer, predecessor and send in the longer run (its
          time is the same there);
     (ii) the last blocks repeat (block j is block j + 1 shifted by P microbatches) far enough back;
    (iii) the ops of the last block and of the cool-down depend only on checked blocks and the cool-down, and
          the same dependencies, shifted, hold in the longer run.
    Then, with blocks 0..R in arithmetic progression, every longer run continues it (see the module doc).
    """
    if schedule == "gpipe":
        return None
    P = p if schedule == "interleaved" else 1
    a, b = raw_arrays(schedule, p, m, v), raw_arrays(schedule, p, m + P, v)
    base = max(a.kmax, b.kmax) + P + 1
    ka, kb = a.key(a.kind, a.mb, a.chunk, base), b.key(b.kind, b.mb, b.chunk, base)
    kb_shift = a.key(a.kind, a.mb + P, a.chunk, base)   # identity of op i shifted P microbatches
    La, Lb = a.start[1] - a.start[0], b.start[1] - b.start[0]    # ops per stage (every stage runs as many)
    q = int(Lb - La)                                    # ops the block inserts on each stage
    if q <= 0 or not (np.diff(a.start) == La).all() or not (np.diff(b.start) == Lb).all():
        return None
    xa, xb = ka.reshape(p, La), kb.reshape(p, Lb)
    sa = kb_shift.reshape(p, La)                        # a's ops shifted (b's numbering of keys)
    differs = xa != xb[:, :La]
    ins = np.where(differs.any(axis=1), differs.argmax(axis=1), La)     # where each stage's block goes in
    if (ins < q).any():
        return None
    pos = np.arange(La)[None, :]
    inserted = ins[:, None] + np.arange(q)[None, :]
    if not ((xb[:, q:] == sa) | (pos < ins[:, None])).all() or not np.array_equal(
            np.take_along_axis(xb, inserted, axis=1), np.take_along_axis(sa, inserted - q, axis=1)):
        return None
    k = ins // q                                        # whole blocks before the insertion
    if (k < 2).any():
        return None
    # block j back from the insertion ([ins - (j + 1) q, ins - j q)) repeats block j + 1 shifted if each op equals
    # the op q before it shifted; n: 1 + how many in a row do (at most k - 1), from the last op that does not
    repeats = np.ones((p, La), dtype=bool)
    repeats[:, q:] = xa[:, q:] == sa[:, :La - q]
    broken = (~repeats | (pos < (ins - (k - 1) * q)[:, None])) & (pos < ins[:, None])
    last_broken = np.where(broken, pos, -1).max(axis=1)
    n_min = int((1 + (ins - 1 - last_broken) // q).min())
    block_of = np.where(pos >= ins[:, None], -1, (ins[:, None] - 1 - pos) // q).ravel()   # -1: the cool-down
    block_of = np.where(block_of >= n_min, 1 << 30, block_of)
    # (i) the prefix runs the same in the longer program
    lookup_b = np.full(int(max(kb.max(), kb_shift.max())) + 1, -1, dtype=np.int64)
    lookup_b[kb] = np.arange(kb.size)
    pre = np.flatnonzero(block_of != -1)
    same = lookup_b[ka[pre]]
    if (same < 0).any() or not np.array_equal(a.delay[pre], b.delay[same]):
        return None
    for arr_a, arr_b in ((a.pred, b.pred), (a.dep, b.dep)):
        x, y = arr_a[pre], arr_b[same]
        if not np.array_equal(x < 0, y < 0) or not np.array_equal(ka[x[x >= 0]], kb[y[y >= 0]]):
            return None
    # (iii) the last block and the cool-down: dependencies in checked blocks, shifted the same in the longer run
    tail = np.flatnonzero((block_of == 0) | (block_of == -1))
    moved = lookup_b[kb_shift[tail]]
    if (moved < 0).any() or not np.array_equal(a.delay[tail], b.delay[moved]):
        return None
    reach = 1
    for arr_a, arr_b in ((a.pred, b.pred), (a.dep, b.dep)):
        x, y = arr_a[tail], arr_b[moved]
        if not np.array_equal(x < 0, y < 0):
            return None
        x, y = x[x >= 0], y[y >= 0]
        if not np.array_equal(kb[y], kb_shift[x]) or (block_of[x] == 1 << 30).any():
            return None
        reach = max(reach, int(block_of[x].max(initial=0)))
    R = reach
    if n_min < R + 1:
        return None
    J = cycle_blocks(n_min, R, p)
    aligned = ((a.start[:-1] + ins)[None, :, None] - q * (np.arange(J) + 1)[:, None, None]
               + np.arange(q)[None, None, :]).reshape(J, p * q)          # block j: each stage's ops in turn
    return P, R, aligned, ins, q, n_min


def cycle_blocks(run: int, reach: int, p: int) -> int:
    """J: the blocks a settled check reads, of `run` repeating ones (enough for a cycle of MAX_CYCLE_PER_STAGE
    blocks per stage)."""
    return min(run, reach + max(4, MAX_CYCLE_PER_STAGE * p))
