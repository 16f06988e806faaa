"""Pipeline schedule → per-stage op order, and its execution on the virtual clock.

`stage_programs` gives, for every pipeline stage, the ordered list of (kind, microbatch, chunk) it runs:
GPipe (all forwards, then all backwards), 1F1B (p - s - 1 warm-up forwards, then one forward one
backward, then the cool-down backwards) and interleaved 1F1B (Megatron-LM's order with v model chunks
per stage). `execute` runs those programs event by event: an op starts when its stage is free and its
producer (the previous chunk's forward, or the next chunk's backward) has finished plus the send time,
vectorized over data-parallel replicas (arrays [replicas]). The loop is O(pipeline events), never O(ranks).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Op = tuple[str, int, int]  # ("F" | "B", microbatch, chunk)


def stage_programs(schedule: str, p: int, m: int, v: int = 1) -> list[list[Op]]:
    """Ordered ops of every stage.

    Args:
        schedule: gpipe | 1f1b | interleaved.
        p: pipeline stages; m: microbatches per replica; v: model chunks per stage (interleaved).

    Returns:
        programs[s] = list of ("F"|"B", microbatch, chunk id) with chunk id = virtual stage * p + s.
    """
    return [[("B" if b else "F", k, c) for b, k, c in zip(back.tolist(), mb.tolist(), chunk.tolist())]
            for back, mb, chunk in program_columns(schedule, p, m, v)]


def program_columns(schedule: str, p: int, m: int, v: int = 1) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every stage's program (`stage_programs`) as arrays: (backward? [ops], microbatch [ops], chunk id [ops]),
    the rows of `program_table`."""
    back, mb, chunk = program_table(schedule, p, m, v)
    return [(back[s], mb[s], chunk[s]) for s in range(p)]


def program_table(schedule: str, p: int, m: int, v: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every stage's program as arrays [p, ops per stage]: (backward?, microbatch, chunk id); every stage runs
    the same number of ops (each microbatch's forward and backward of its v chunks).

    Every schedule is warm-up forwards, then one forward and one backward in turn, then the cool-down backwards
    (the forwards and the backwards each numbered 0, 1, ... in program order):
      GPipe: all m forwards, then all m backwards;
      1F1B: p - s - 1 warm-up forwards (at most m) on stage s;
      interleaved 1F1B (Megatron-LM): m x v forwards and backwards, (p - s - 1) x 2 + (v - 1) x p warm-up
        forwards; the k-th of each runs microbatch (k // pv) p + k % p on virtual stage (k % pv) // p, the
        backwards from the last virtual stage down.
    """
    if schedule not in ("gpipe", "1f1b", "interleaved"):
        raise ValueError(schedule)
    total = m * v if schedule == "interleaved" else m
    s = np.arange(p)[:, None]
    if schedule == "gpipe":
        warm = np.full((p, 1), total)
    elif schedule == "1f1b":
        warm = np.minimum(p - s - 1, m)
    else:
        warm = np.minimum((p - s - 1) * 2 + (v - 1) * p, total)
    j = np.arange(2 * total)[None, :]                # the op's place on its stage
    cool = j >= 2 * total - warm                     # the last `warm` ops are backwards, the first forwards,
    back = cool | (j >= warm) & ((j - warm) % 2 == 1)  # and one of each in turn between
    # each op's number among the forwards or the backwards
    k = np.where(cool, j - total, np.where(j < warm, j, np.where(back, 0, warm) + (j - warm) // 2))
    if schedule == "interleaved":
        group, r = np.divmod(k, p * v)
        mb, virtual = group * p + r % p, r // p
        chunk = np.where(back, v - 1 - virtual, virtual) * p + s
    else:
        mb, chunk = k, np.broadcast_to(s, k.shape).copy()
    return back, mb, chunk


@dataclass
class Execution:
    """Result of executing the programs: start/end of every op, arrays [replicas]."""

    programs: list[list[Op]]
    start: dict[tuple[str, int, int], np.ndarray]
    end: dict[tuple[str, int, int], np.ndarray]
    stage_end: np.ndarray        # [replicas, stages] time each stage finished its last op
    busy: np.ndarray             # [replicas, stages] summed op durations


def execute(programs: list[list[Op]], fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray,
            send_bwd: np.ndarray, send_after: dict[Op, float] | None = None) -> Execution:
    """Run stage programs on the virtual clock, event by event, every replica at once. The planner's level
    evaluator of the same programs is `layouts.schedules.pipeline_times` (tests/plan/test_schedules.py checks they
    agree).

    Args:
        programs: from `stage_programs`.
        fwd, bwd: [replicas, chunks] seconds of one microbatch's forward/backward of each chunk.
        send_fwd: [chunks] seconds to send a chunk's output activation to the next chunk's stage, or
            [replicas, chunks] when replicas differ (degraded instances).
        send_bwd: [chunks] (or [replicas, chunks]) seconds to send a chunk's input gradient to the previous
            chunk's stage.
        send_after: optional send seconds (a number, or [replicas]) that replace the above for the output
            of particular ops (a send that shares its links with other traffic at that moment).

    Returns:
        The Execution.
    """
    p = len(programs)
    n_chunks = fwd.shape[1]
    reps = fwd.shape[0]
    free = np.zeros((p, reps))
    busy = np.zeros((reps, p))
    start: dict = {}
    end: dict = {}
    ptr = [0] * p
    remaining = sum(len(pr) for pr in programs)
    while remaining:
        progressed = False
        for s in range(p):
            prog = programs[s]
            while ptr[s] < len(prog):
                kind, k, c = prog[ptr[s]]
                if kind == "F":
                    dep = ("F", k, c - 1) if c > 0 else None
                    delay = send_fwd[..., c - 1] if c > 0 else 0.0
                    dur = fwd[:, c]
                else:
                    dep = ("B", k, c + 1) if c < n_chunks - 1 else ("F", k, c)
                    delay = send_bwd[..., c + 1] if c < n_chunks - 1 else 0.0
                    dur = bwd[:, c]
                if send_after and dep in send_after and np.ndim(delay):
                    delay = np.where(delay > 0, send_after[dep], delay)
                elif send_after and dep in send_after and delay > 0:
                    delay = send_after[dep]
                if dep is not None and dep not in end:
                    break
                t0 = free[s].copy() if dep is None else np.maximum(free[s], end[dep] + delay)
                start[(kind, k, c)] = t0
                end[(kind, k, c)] = free[s] = t0 + dur
                busy[:, s] += dur
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise AssertionError("pipeline schedule deadlocked")  # a bug in stage_programs, not bad input
    return Execution(programs=programs, start=start, end=end, stage_end=free.T.copy(), busy=busy)
