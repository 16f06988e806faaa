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
and extrapolates; rows that have not settled run again with twice the microbatches, up to the full m (carried
on from the short run block by block, `stepping`: the longer program's ops after the short one's, the same bits).
GPipe (all forwards, then all backwards) has no such block and always runs in full. The block structure is
read off the engine's own programs (the ops that m + P microbatches insert), never assumed (`programs`: the
programs in levels and their blocks, made once per program and cached).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import stepping
from .programs import Compiled, compile_programs, cycle_blocks, repeats
from .stepping import run_levels

# relative tolerance of "the same increment" (floating-point noise is ~1e-13 of the times; a looser
# tolerance could extrapolate a pipeline whose bottleneck has not settled)
SETTLED_RTOL = 1e-11
MAX_CELLS = 4_000_000          # rows x ops evaluated at once (memory bound: ~100 MB of float64 arrays)
CARRY_ON = True                # rows not settled carry on block by block (`stepping`); False: each longer run
                               # compiled and run from its first op (the same bits: tests compare the two)


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
    waits = bool(delays.any())      # False where every exchange is serial (on the stages' own time): no delays
    # op-major: a level is a contiguous block and a gather takes whole rows of memory (twice as fast as
    # row-major; the same additions and maxima, so the same bits)
    table = np.ascontiguousarray(np.concatenate([fwd, bwd, delays] if waits else [fwd, bwd], axis=1).T)
    both = table.take(np.concatenate([comp.dur_col, comp.wait_col]) if waits else comp.dur_col, axis=0)
    dur, wait = both[:comp.ops], both[comp.ops:]
    end = np.zeros((comp.ops + 1, rows))
    run_levels(comp.levels, comp.pred_col, comp.dep_col, dur, wait, end, waits)
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

    Several cycles are tried per numpy call (1, then 4, 16, ...: most rows repeat at c = 1, the unsettled ones
    are tried on all), each row only until its first: the same differences and the same tests as one cycle at a
    time, so the same c and the same bits of Λ.

    Args:
        blk: [J, size, rows] end times of the last J blocks (op-major, as `evaluate` gives them).
        reach: R of the program.
    """
    J, _, rows = blk.shape
    cyc, lam = np.zeros(rows, dtype=np.int64), np.zeros(rows)
    tol = SETTLED_RTOL * (np.abs(blk).max(axis=(0, 1)) + 1e-300)
    live, c0, width = np.arange(rows), 1, 1
    while c0 <= J - reach and live.size:
        c1 = min(J - reach, c0 + width - 1)                       # cycles c0..c1 at once
        b, t = (blk, tol) if live.size == rows else (blk[:, :, live], tol[live])
        big = b[0, 0] - b[c0:c1 + 1, 0]                           # [cycles, rows]: Λ of each cycle
        ok = np.ones(big.shape, dtype=bool)
        for r in range(reach):
            inc = b[r] - b[c0 + r:c1 + 1 + r]                      # [cycles, size, rows]: block r - block c + r
            inc -= big[:, None]
            ok &= (np.abs(inc, out=inc) <= t).all(axis=1)
        hit, first = ok.any(axis=0), ok.argmax(axis=0)
        cyc[live[hit]], lam[live[hit]] = c0 + first[hit], big[first[hit], hit]
        live, c0, width = live[~hit], c1 + 1, 4 * width
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
    outs = (out_end, out_b1, ran)
    while todo.size:
        m_run = nxt_len[todo]
        again = []
        for mr in np.unique(m_run):
            idx = todo[m_run == mr]
            comp = compile_programs(schedule, p, int(mr), v)
            full = m[idx] == mr
            rep = None if full.all() else repeats(schedule, p, int(mr), v)
            step = max(1, MAX_CELLS // (comp.ops + 1))
            for lo in range(0, idx.size, step):
                sel, fl = idx[lo:lo + step], full[lo:lo + step]
                if not fl.any() and rep is None:                 # a short run that cannot be extrapolated
                    nxt_len[sel] = [_next_length(lengths[int(m[i])], int(mr)) for i in sel]
                    again.append(sel)
                    continue
                end = evaluate(comp, fwd[sel], bwd[sel], delays[sel])           # [ops + 1, rows], level order
                blk = end[comp.at[rep.blocks]] if rep is not None and not fl.all() else None
                settled, extra = _check(blk, rep, m, sel, int(mr), fl, lengths, nxt_len)
                keep = sel[settled]
                x = extra[settled, None]
                out_end[keep] = end[comp.at[comp.last_op]][:, settled].T + x
                out_b1[keep] = end[comp.at[comp.last_b]][:, settled].T + x
                ran[keep] = mr
                go = ~settled
                if go.any() and blk is not None and CARRY_ON:     # the rest carry on from this run
                    again.append(_carry_on(schedule, p, v, m, sel[go], int(mr), blk[:, :, go], (fwd, bwd, delays),
                                           lengths, nxt_len, outs))
                else:
                    again.append(sel[go])
        todo = np.concatenate(again) if again else np.zeros(0, dtype=np.int64)
    return PipeTimes(stage_end=out_end, last_b_start=out_b1 - bwd, last_b_end=out_b1, evaluated_microbatches=ran)


def _check(blk: np.ndarray | None, rep, m: np.ndarray, sel: np.ndarray, mr: int, fl: np.ndarray, lengths: dict,
           nxt_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(settled, the seconds each settled row's full run adds) of rows `sel` after a run of mr microbatches (`fl`:
    the rows whose full run it is), from their last blocks `blk` [J, size, rows] (None: no row to check); the
    others' next run lengths into `nxt_len`."""
    settled, extra, shift = fl.copy(), np.zeros(sel.size), np.zeros(sel.size, dtype=bool)
    if blk is not None:
        P = rep.microbatches_per_block
        cyc, lam = _settled(blk, rep.reach)
        n = (m[sel] - mr) // P                                    # blocks the full run adds
        c = np.maximum(cyc, 1)
        whole = (cyc > 0) & (n % c == 0) & ~fl
        settled |= whole
        extra = np.where(whole, lam * (n // c), 0.0)
        shift = (cyc > 0) & ~whole & ~fl                          # repeating, out of phase: a run n mod c
        nxt_len[sel[shift]] = mr + (n[shift] % c[shift]) * P      # blocks longer is in phase
    later = ~settled & ~shift
    nxt_len[sel[later]] = [_next_length(lengths[int(m[i])], mr) for i in sel[later]]
    return settled, extra


def _carry_on(schedule: str, p: int, v: int, m: np.ndarray, rows: np.ndarray, m0: int, blk: np.ndarray,
              inputs: tuple, lengths: dict, nxt_len: np.ndarray, outs: tuple) -> np.ndarray:
    """Rows that have not settled in their run of m0 microbatches, carried on block by block (`stepping`)
    through their next runs, each checked (`_check`) and finished as a run of its own would be, into `outs`
    (stage ends, last backwards' ends, microbatches run). `blk`: their last blocks in the m0 run [J, size,
    rows], the last first. Returns the rows left to run in full: those whose next program is not m0's with
    blocks inserted (`stepping.spliced`)."""
    down = stepping.cooldown(schedule, p, m0, v)
    if down is None:
        return rows
    (down, back), rep = down, repeats(schedule, p, m0, v)
    P, most = rep.microbatches_per_block, max(cycle_blocks(1 << 30, rep.reach, p), back)
    fwd, bwd, delays = inputs
    waits = bool(delays[rows].any())
    table = np.ascontiguousarray(np.concatenate([fwd[rows], bwd[rows]] + ([delays[rows]] if waits else []), axis=1).T)
    history = list(blk[::-1])                          # the blocks run so far, [size, rows] each, the last last
    mr = m0
    while rows.size:
        target = int(nxt_len[rows].min())
        ext = stepping.extension(schedule, p, m0, v, (target - mr) // P) if target > mr else None
        if not stepping.spliced(schedule, p, v, m0, target) or target > mr and ext is None:
            return rows
        if ext is not None:
            run = stepping.run_part(ext[0], *stepping.tables(ext[0], table, waits), history[:-back - 1:-1], waits)
            history += list(run.reshape(-1, history[0].shape[0], rows.size))
        mr = target
        sub = np.flatnonzero(nxt_len[rows] == mr)
        fl = m[rows[sub]] == mr
        last = np.stack(history[:-cycle_blocks(rep.run + (mr - m0) // P, rep.reach, p) - 1:-1])[:, :, sub] \
            if not fl.all() else None
        settled, extra = _check(last, rep, m, rows[sub], mr, fl, lengths, nxt_len)
        done = sub[settled]
        if done.size:
            ends = stepping.run_part(down, *stepping.tables(down, table[:, done], waits),
                                     [h[:, done] for h in history[:-back - 1:-1]], waits)
            x = extra[settled, None]
            outs[0][rows[done]] = ends[:p].T + x
            outs[1][rows[done]] = ends[p:].T + x
            outs[2][rows[done]] = mr
            go = np.ones(rows.size, dtype=bool)
            go[done] = False
            rows, table = rows[go], table[:, go]
            history = [h[:, go] for h in history[-most:]]
    return rows
