"""Replay knowledge → the typed records of a `RunResult` that the report reads (and never recomputes).

* `ComputeTally`: each rank's own compute seconds per step, accumulated from the merged shard steps the replay
  reads every step (`RunResult.stage_compute_s`, `slow_rank_compute_s`).
* `comm_records`: the engine's `StepComm` → per-chunk and per-stage communication (`ChunkComm`, `StageComm`).
* `stage_dp_exposure`: each stage's exposed data-parallel seconds per step, off the replayed timeline
  (`RunResult.stage_dp_exposed_s`).

Pure (numpy); sizes never grow with the number of ranks.
"""
from __future__ import annotations

import numpy as np

from ..cluster import stage_sum
from .result import ChunkComm, Slice, StageComm, StepRecord
from .shard_steps import MergedSteps


class ComputeTally:
    """Each rank's own compute seconds per step, from the merged shard steps of every replayed step.

    A merged shard steps (`replay.shard_steps.MergedSteps`) gives the seconds of one microbatch of each chunk
    (`forward_s`, `backward_s`) and of the optimizer (`optimizer_s`) of each stage at speed 1, and the slow
    ranks with their slowdown. A rank of stage s at speed f computes
    f x (microbatches x sum over its chunks of (fwd + bwd) + opt[s]) per step. Sparse: every rank of a stage
    takes the stage's seconds except the slow ranks, listed one by one.

    Args:
        layout: the parallel degrees (tp, cp, pp, dp).
        microbatches: microbatches per replica per step.
        warmup_steps: steps left out of the mean (all steps count when every step is warm-up).
    """

    def __init__(self, layout, microbatches: int, warmup_steps: int):
        self.layout, self.microbatches, self.warmup_steps = layout, microbatches, warmup_steps
        self._base = {True: None, False: None}           # keyed by "is warm-up": summed [stages] seconds
        self._extra: dict[bool, dict[int, float]] = {True: {}, False: {}}   # slow rank -> summed extra seconds
        self._n = {True: 0, False: 0}

    def add(self, step: int, merged: MergedSteps) -> None:
        """Add one step's merged shard steps."""
        pp, group = self.layout.pp, self.layout.tp * self.layout.cp
        fwd, bwd, opt = merged.forward_s, merged.backward_s, merged.optimizer_s
        base = stage_sum(self.microbatches * (fwd + bwd), pp) + opt
        slow, factor = merged.slow_ranks, merged.slow_factors
        warm = step < self.warmup_steps
        self._base[warm] = base if self._base[warm] is None else self._base[warm] + base
        extra = self._extra[warm]
        for r, x in zip(slow.tolist(), (base[(slow // group) % pp] * (factor - 1.0)).tolist()):
            extra[r] = extra.get(r, 0.0) + x
        self._n[warm] += 1

    def result(self) -> tuple[list[float], dict[int, float]]:
        """(seconds per step of a rank at speed 1 on each stage, {slow rank: its seconds per step}), means
        over the measured steps (all steps if none); ([], {}) when nothing was added."""
        for warm in (False, True):
            n = self._n[warm]
            if n:
                base = self._base[warm] / n
                group, pp = self.layout.tp * self.layout.cp, self.layout.pp
                return base.tolist(), {r: float(base[(r // group) % pp] + x / n)
                                       for r, x in sorted(self._extra[warm].items())}
        return [], {}


def comm_records(comm, pp: int, microbatches: int, chunk_layers: list[int]) -> tuple[list[ChunkComm],
                                                                                     list[StageComm]]:
    """Per-chunk and per-stage communication seconds from the replay's comm.

    Args:
        comm: `ultracluster.replay.engine.StepComm` (arrays tp_fwd, tp_bwd, send_fwd, send_bwd per chunk,
            dp per stage, seconds).
        pp: pipeline stages; chunk c lives on stage c % pp.
        microbatches: per replica per step.
        chunk_layers: transformer layers of each chunk.

    Returns:
        (ChunkComm per chunk, StageComm per stage).
    """
    tp_f, tp_b = np.asarray(comm.tp_fwd, float), np.asarray(comm.tp_bwd, float)
    s_f, s_b = np.asarray(comm.send_fwd, float), np.asarray(comm.send_bwd, float)
    chunks = [ChunkComm(chunk=c, stage=c % pp, tp_fwd_s=float(tp_f[c]), tp_bwd_s=float(tp_b[c]),
                        send_fwd_s=float(s_f[c]), send_bwd_s=float(s_b[c]), serial=bool(comm.serial_exchanges))
              for c in range(tp_f.size)]
    stage_of = np.arange(tp_f.size) % pp
    stages = [StageComm(stage=s, layers=int(np.asarray(chunk_layers)[stage_of == s].sum()),
                        tp_comm_s=float(microbatches * (tp_f + tp_b)[stage_of == s].sum()),
                        pp_send_s=float(microbatches * (s_f + s_b)[stage_of == s].sum()),
                        dp_comm_s=float(np.asarray(comm.dp, float)[s])) for s in range(pp)]
    return chunks, stages


def measured_steps(steps: list[StepRecord]) -> list[StepRecord]:
    """The steps the summary means are over: the non-warm-up ones, or all when every step is warm-up."""
    return [s for s in steps if not s.warmup] or list(steps)


def stage_dp_exposure(slices: list[Slice], stage_comm: list[StageComm], measured: list[int],
                      pp: int) -> list[float]:
    """Exposed data-parallel seconds per step of each stage, read off the critical replica's timeline.

    Per stage and step: how long the gradient reduction outlasts the stage's last forward/backward (the
    dp slices that end by the optimizer's start), plus the dp slices after the optimizer (ZeRO-1's
    parameter all-gather). For the critical stage this is the breakdown's `dp_comm_s`. Mean over the
    measured steps the timeline kept; the comm's unoverlapped `StageComm.dp_comm_s` (NaN when unknown) for
    a stage without slices.
    """
    unoverlapped = [next((c.dp_comm_s for c in stage_comm if c.stage == s), float("nan")) for s in range(pp)]
    keep = set(measured)
    by: dict[tuple[int, int], dict[str, list[Slice]]] = {}
    for x in slices:
        if x.step in keep:
            by.setdefault((x.stage, x.step), {}).setdefault(x.stream, []).append(x)
    eps = 1e-12
    exposures: dict[int, list[float]] = {}
    for (stage, _), streams in sorted(by.items()):
        ops, opt, dp = streams.get("compute", []), streams.get("optimizer", []), streams.get("dp", [])
        if not ops or not opt:
            continue
        t_opt0, t_opt1 = min(x.start_s for x in opt), max(x.end_s for x in opt)
        before = [x.end_s for x in dp if x.end_s <= t_opt0 + eps]
        after = [x.end_s - x.start_s for x in dp if x.start_s >= t_opt1 - eps]
        tail = max(0.0, max(before) - max(x.end_s for x in ops)) if before else 0.0
        exposures.setdefault(stage, []).append(tail + float(np.sum(after)))
    return [float(np.mean(exposures[s])) if exposures.get(s) else unoverlapped[s] for s in range(pp)]
