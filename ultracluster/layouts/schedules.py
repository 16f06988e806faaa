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

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..frozen import read_only
from ..replay.schedule import program_table

F, B = 0, 1
# relative tolerance of "the same increment" (floating-point noise is ~1e-13 of the times; a looser
# tolerance could extrapolate a pipeline whose bottleneck has not settled)
SETTLED_RTOL = 1e-11
MAX_CELLS = 4_000_000          # rows x ops evaluated at once (memory bound: ~100 MB of float64 arrays)
MAX_CYCLE_PER_STAGE = 2        # the longest repeat looked for, in blocks per stage: sends that differ along the
                               # pipeline (an EFA hop every few stages) make the slowest cycle span several blocks


@dataclass(frozen=True)
class Compiled:
    """One (schedule, p, m, v) program in dependency levels, as `evaluate` runs it (its blocks: `repeats`). Columns
    number the ops in level order (a level depends only on earlier ones); column `ops` is a sentinel (time 0).

    Attributes:
        ops: number of ops; at: [ops + 1] each op's column (ops numbered stage by stage in program order).
        bounds: (first, end) column of each level.
        level_pred, level_dep: per level, the columns of its ops' predecessors (the previous op on the stage) and
            producers (previous chunk's forward, next chunk's backward, own forward on the last chunk): a slice
            where consecutive, else an index array.
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
    bounds: tuple
    level_pred: tuple
    level_dep: tuple
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
    """

    microbatches_per_block: int
    reach: int
    blocks: np.ndarray


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
def _raw(schedule: str, p: int, m: int, v: int) -> _Raw:
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


def _depths(pred: np.ndarray, dep: np.ndarray, start: np.ndarray) -> np.ndarray:
    """1 + the longest chain before each op (ops numbered stage by stage). Along a stage depth[i] = 1 +
    max(depth[i - 1], x[i]), x the producer's depth: a running maximum, i + 1 + max over j <= i of (x[j] - j).
    Sweeps up and down the stages (forwards' producers are on the stage before, backwards' after) apply it until
    nothing changes: from 0 the depths grow to the longest chains (3-4 sweeps), or without end if deadlocked."""
    n = dep.size
    depth = np.zeros(n + 1, dtype=np.int64)            # depth[n]: no producer
    src = np.where(dep >= 0, dep, n)
    spans = list(zip(start[:-1].tolist(), start[1:].tolist()))
    j = np.arange(max((b - a for a, b in spans), default=0) + 1)
    sweep, before = 0, None
    while before is None or not np.array_equal(before, depth):
        before = depth.copy()
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


def _index(cols: np.ndarray, bounds: list[int]) -> tuple:
    """`cols` cut at `bounds`, each piece as a slice where its columns are consecutive (a view instead of a
    gathered copy: the same values), else as an index array."""
    steps = np.concatenate([[0], np.cumsum(np.diff(cols) != 1)])   # steps[i]: breaks in cols[:i + 1]
    first, end = bounds[:-1], bounds[1:]
    run = (steps[np.asarray(end) - 1] == steps[first]).tolist()
    lo = cols[first].tolist()
    return tuple(slice(c, c + b - a) if r else cols[a:b] for a, b, c, r in zip(first, end, lo, run))


@lru_cache(maxsize=512)
def compile_programs(schedule: str, p: int, m: int, v: int = 1) -> Compiled:
    """The engine's stage programs of (schedule, p, m, v) as a Compiled (cached)."""
    raw = _raw(schedule, p, m, v)
    ops = raw.kind.size
    depth = _depths(raw.pred, raw.dep, raw.start)
    order = np.argsort(depth, kind="stable")
    cuts = np.flatnonzero(np.diff(depth[order])) + 1
    last_b = np.flatnonzero((raw.kind == B) & (raw.mb == m - 1))             # B(m - 1, c), one per chunk c
    last_op = raw.start[1:] - 1
    pred, dep = np.where(raw.pred < 0, ops, raw.pred), np.where(raw.dep < 0, ops, raw.dep)
    at = np.empty(ops + 1, dtype=np.int64)                  # op -> its column in level order (sentinel last)
    at[order], at[ops] = np.arange(ops), ops
    bounds = np.concatenate([[0], cuts, [ops]]).tolist()
    spans = tuple(zip(bounds[:-1], bounds[1:]))
    cols_pred, cols_dep = read_only((at[pred[order]], at[dep[order]]))   # the levels' index arrays: read-only views
    n_chunks, chunk_o = p * v, raw.chunk[order]
    comp = Compiled(schedule=schedule, p=p, m=m, v=v, ops=ops, at=at, bounds=spans,
                    level_pred=_index(cols_pred, bounds), level_dep=_index(cols_dep, bounds),
                    dur_col=np.where(raw.kind[order] == F, chunk_o, n_chunks + chunk_o),
                    wait_col=2 * n_chunks + raw.delay[order], last_op=last_op,
                    last_b=last_b[np.argsort(raw.chunk[last_b])])
    return read_only((comp.at, comp.dur_col, comp.wait_col, comp.last_op, comp.last_b)) and comp


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
    a, b = _raw(schedule, p, m, v), _raw(schedule, p, m + P, v)
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
    J = min(n_min, R + max(4, MAX_CYCLE_PER_STAGE * p))
    aligned = ((a.start[:-1] + ins)[None, :, None] - q * (np.arange(J) + 1)[:, None, None]
               + np.arange(q)[None, None, :]).reshape(J, p * q)          # block j: each stage's ops in turn
    return P, R, aligned


def evaluate(comp: Compiled, fwd: np.ndarray, bwd: np.ndarray, delays: np.ndarray) -> np.ndarray:
    """End time of every op for every row, level by level.

    Args:
        comp: the compiled program.
        fwd, bwd: [rows, chunks] seconds of one microbatch's forward / backward of each chunk.
        delays: [rows, 1 + 3 x chunks] the row's delay table: 0, send_fwd, send_bwd, send_bwd_last.

    Returns:
        [ops + 1, rows] end times, op-major in level order (op i in column `comp.at[i]`; the last the sentinel, 0).
    """
    rows = fwd.shape[0]
    # op-major: a level is a contiguous block and a gather takes whole rows of memory (twice as fast as
    # row-major; the same additions and maxima, so the same bits)
    table = np.ascontiguousarray(np.concatenate([fwd, bwd, delays], axis=1).T)
    both = table.take(np.concatenate([comp.dur_col, comp.wait_col]), axis=0)
    dur, wait = both[:comp.ops], both[comp.ops:]
    end = np.zeros((comp.ops + 1, rows))
    take, maximum = end.take, np.maximum              # the bound method: np.take's wrapper costs as much again
    for (a, b), pred, dep in zip(comp.bounds, comp.level_pred, comp.level_dep):
        here = end[a:b]
        if dep.__class__ is slice:
            ready = end[dep] + wait[a:b]
        else:
            ready = take(dep, 0)
            ready += wait[a:b]
        maximum(end[pred] if pred.__class__ is slice else take(pred, 0), ready, out=here)
        here += dur[a:b]
    return end


@dataclass(frozen=True)
class PipeTimes:
    """What the step needs from the pipeline, per row: arrays [rows, stages] and [rows, chunks]."""

    stage_end: np.ndarray
    last_b_start: np.ndarray
    last_b_end: np.ndarray
    evaluated_microbatches: np.ndarray   # [rows] the microbatches actually run (m, or fewer when extrapolated)


def run_lengths(schedule: str, p: int, m: int, v: int) -> list[int]:
    """Microbatch counts to try for an m-microbatch pipeline: short runs first (same m mod P), then m."""
    if schedule == "gpipe" or p == 1 and m <= 8:
        return [m]
    P = p if schedule == "interleaved" else 1
    first = max(2 * p + 6, 4 * P + (m % P)) if P > 1 else p + 8
    first += (m - first) % P
    out = []
    while first < m:
        out.append(first)
        first = 2 * first - (first % P if P > 1 else 0)
        first += (m - first) % P
    return out + [m]


def _settled(blk: np.ndarray, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """The shortest cycle c (in blocks, at most what `blk` holds) over which every row's last blocks repeat
    (block j = block j + c + Λ for j < reach), and Λ; c = 0 where none does.

    Args:
        blk: [J, size, rows] end times of the last J blocks (op-major, as `evaluate` gives them).
        reach: R of the program.
    """
    J, _, rows = blk.shape
    cyc, lam = np.zeros(rows, dtype=np.int64), np.zeros(rows)
    tol = SETTLED_RTOL * (np.abs(blk).max(axis=(0, 1)) + 1e-300)
    for c in range(1, J - reach + 1):
        if (cyc > 0).all():
            break
        inc = blk[:reach] - blk[c:c + reach]
        big = inc[0, 0]
        ok = (np.abs(inc - big) <= tol).all(axis=(0, 1)) & (cyc == 0)
        cyc[ok], lam[ok] = c, big[ok]
    return cyc, lam


def _next_length(lengths: list[int], current: int) -> int:
    """The next run length after `current` in a row's list (the last is the full m)."""
    return next((x for x in lengths if x > current), lengths[-1])


def pipeline_times(schedule: str, p: int, v: int, m: np.ndarray, fwd: np.ndarray, bwd: np.ndarray,
                   send_fwd: np.ndarray, send_bwd: np.ndarray, send_bwd_last: np.ndarray) -> PipeTimes:
    """Stage end times and the last microbatch's backward of every chunk, for many rows of one schedule.

    Args:
        schedule, p, v: the program shape (as `stage_programs`).
        m: [rows] microbatches of each row (rows with different m share their shorter runs).
        fwd, bwd: [rows, chunks] per-microbatch seconds (compute and in-layer communication).
        send_fwd, send_bwd, send_bwd_last: [rows, chunks] send seconds as the engine's StepComm has them
            (send_bwd_last replaces send_bwd for the last microbatch where send_bwd > 0).

    Returns:
        The PipeTimes, equal (to floating-point noise) to `replay.schedule.execute` row by row.
    """
    rows, chunks = fwd.shape
    m = np.broadcast_to(np.asarray(m, dtype=np.int64), (rows,))
    # rows with the same inputs (layouts that differ only in what the pipeline does not see: ZeRO-0 and -1,
    # the data-parallel degree at equal chunk times) are run once
    first, back = _distinct_rows(np.concatenate([m[:, None].astype(float), fwd, bwd, send_fwd, send_bwd,
                                                 send_bwd_last], axis=1))
    pt = _pipelines(schedule, p, v, m[first], fwd[first], bwd[first], send_fwd[first], send_bwd[first],
                    send_bwd_last[first])
    return PipeTimes(stage_end=pt.stage_end[back], last_b_start=pt.last_b_start[back],
                     last_b_end=pt.last_b_end[back], evaluated_microbatches=pt.evaluated_microbatches[back])


def _distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, back): the first row of each distinct bit pattern of `table` [rows, columns], and each row's
    index into `first` (a dict of the rows' bytes: a sort of whole rows costs twenty times more)."""
    index: dict[bytes, int] = {}          # bit pattern -> its number, in the order first met
    back = np.fromiter((index.setdefault(row.tobytes(), len(index)) for row in np.ascontiguousarray(table)),
                       dtype=np.int64, count=table.shape[0])
    return np.unique(back, return_index=True)[1], back


def _pipelines(schedule: str, p: int, v: int, m: np.ndarray, fwd: np.ndarray, bwd: np.ndarray,
               send_fwd: np.ndarray, send_bwd: np.ndarray, send_bwd_last: np.ndarray) -> PipeTimes:
    """`pipeline_times` of distinct rows."""
    rows, chunks = fwd.shape
    last = np.where(send_bwd > 0, send_bwd_last, send_bwd)
    delays = np.concatenate([np.zeros((rows, 1)), send_fwd, send_bwd, last], axis=1)
    out_end = np.zeros((rows, p))
    out_b1 = np.zeros((rows, chunks))
    ran = np.zeros(rows, dtype=np.int64)
    lengths = {int(mi): run_lengths(schedule, p, int(mi), v) for mi in np.unique(m)}
    nxt_len = np.array([lengths[int(mi)][0] for mi in m], dtype=np.int64)
    todo = np.arange(rows)
    while todo.size:
        m_run = nxt_len[todo]
        again = []
        for mr in np.unique(m_run):
            idx = todo[m_run == mr]
            comp = compile_programs(schedule, p, int(mr), v)
            full = m[idx] == mr
            rep = None if full.all() else repeats(schedule, p, int(mr), v)
            P = rep.microbatches_per_block if rep is not None else 1
            step = max(1, MAX_CELLS // (comp.ops + 1))
            for lo in range(0, idx.size, step):
                sel, fl = idx[lo:lo + step], full[lo:lo + step]
                if not fl.any() and rep is None:                 # a short run that cannot be extrapolated
                    nxt_len[sel] = [_next_length(lengths[int(m[i])], int(mr)) for i in sel]
                    again.append(sel)
                    continue
                end = evaluate(comp, fwd[sel], bwd[sel], delays[sel])           # [ops + 1, rows], level order
                settled, extra, shift = fl.copy(), np.zeros(sel.size), np.zeros(sel.size, dtype=bool)
                if rep is not None and not fl.all():
                    cyc, lam = _settled(end[comp.at[rep.blocks]], rep.reach)
                    n = (m[sel] - mr) // P                                # blocks the full run adds
                    c = np.maximum(cyc, 1)
                    whole = (cyc > 0) & (n % c == 0) & ~fl
                    settled |= whole
                    extra = np.where(whole, lam * (n // c), 0.0)
                    shift = (cyc > 0) & ~whole & ~fl                      # repeating, out of phase: a run n mod c
                    nxt_len[sel[shift]] = mr + (n[shift] % c[shift]) * P  # blocks longer is in phase
                later = ~settled & ~shift
                nxt_len[sel[later]] = [_next_length(lengths[int(m[i])], int(mr)) for i in sel[later]]
                keep = sel[settled]
                x = extra[settled, None]
                out_end[keep] = end[comp.at[comp.last_op]][:, settled].T + x
                out_b1[keep] = end[comp.at[comp.last_b]][:, settled].T + x
                ran[keep] = mr
                again.append(sel[~settled])
        todo = np.concatenate(again) if again else np.zeros(0, dtype=np.int64)
    return PipeTimes(stage_end=out_end, last_b_start=out_b1 - bwd, last_b_end=out_b1, evaluated_microbatches=ran)
