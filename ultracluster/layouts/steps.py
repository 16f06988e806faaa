"""Layouts → HBM footprint, step time, throughput and cost, thousands at once: the replay's model over a
layout axis.

The fast path is the model `run` replays, evaluated for many layouts in one pass, not a second model: the HBM
of each stage, the chunk times and the step's comm come from the same functions `run` calls with a batch
of one (`memory.stage_state_gib` and the activation functions, `chip.layer_costs` / `chunk_rows` /
`optimizer_seconds`, `replay.comm`'s pieces), with each distinct per-rank shape timed once (all shapes in one
`evaluate` call per where and phase), each distinct collective once and each piece of the step's comm
once per what it depends on (memos).

The batched parts are in `batched_parts.py`, the layout → scenario and cluster helpers and the per-process memo in
`evaluator.py`. The step is then composed with `replay.engine`'s own pieces (`group_speeds`, `cp_exposed`,
`fsdp_exposed`, `chunk_seconds`, `stage_finish`), with the pipeline run for every layout and measured step at once (`schedules.pipeline_times`)
and the gradient-bucket queue in closed form (`bucket_queue_end`). One difference: the engine runs every
data-parallel replica's pipeline with its own jitter and stragglers, step by step, and takes the slowest; the fast
path runs one pipeline whose stages each take their slowest replica's speed, averaged over the measured steps:
exact without jitter and stragglers, within 0.2 % with the default 1 % jitter over the Llama-3.1-70B sweep
(docs/plan.md). Two more: the last microbatch's gradient
sends are timed alone, where the replay times them sharing links with the first gradient buckets
(`concurrent_time`: a thousand times the cost of the rest of a layout, for at most 0.13 % of a step over the
Llama-3.1-70B sweep; `Evaluator(shared_last_sends=True)` times them as the replay does); and storage stalls
and checkpoints are not in the fast path. The replayed layouts carry all three exactly.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from .. import chip, speed_draws, stacks
from .. import operators as opslib
from ..cluster import Layout, group_ranks
from ..memory import infeasible_reason
from ..replay import engine
from ..replay.degraded import degraded_groups, slowest_replica_comm
from ..replay.engine import bucket_queue_end
from ..replay.result import StageMemory
from ..step import merit, speed as step_speed
from ..step.hbm import HBM_PARTS, hbm_totals
from .batched_parts import (PipeRows, Shapes, program_counts, batched_chunks, batched_comm, batched_memory, cluster_columns,
                    distinct_rows, one_layout, pipe_rows, shapes)
from .evaluator import (LAYOUT_COLUMNS, MEMORY_COLUMNS, PARTS, ClusterInfo, Evaluator, calibration_index,
                     layout_scenario)
from .columns import Columns, objects
from .schedules import pipeline_times

__all__ = ["LAYOUT_COLUMNS", "MEMORY_COLUMNS", "PARTS", "ClusterInfo", "PipeRows", "Evaluator", "Shapes", "bucket_queue_end",
           "evaluate", "layout_scenario", "speeds", "program_counts"]


def speeds(pr: Evaluator, tp: int, cp: int, pp: int, dp: int, steps: list[int], sigma: float) -> np.ndarray:
    """[steps, pp] each stage's speed factor (>= 1) in each measured step of a tp x cp x pp x dp layout: its
    slowest replica's, with jitter and stragglers drawn as `replay.engine.combine_shard_steps` draws them."""
    layout = Layout(tp=tp, cp=cp, pp=pp, dp=dp)
    seed, ranks, size = pr.scenario.seed, layout.ranks, group_ranks(tp, cp)
    slow, factor = pr.memo(("stragglers", ranks), lambda: speed_draws.stragglers(pr.scenario, ranks))
    out = np.empty((len(steps), pp))
    for i, step in enumerate(steps):
        def stage_max(step=step):
            return step_speed.slowest_replica(step_speed.group_speeds(
                layout, speed_draws.group_jitter(seed, step, (dp, pp), size, sigma), slow, factor))
        out[i] = pr.memo(("jitter", step, dp, pp, size, sigma), stage_max) if slow.size == 0 else stage_max()
    return out


class RowView:
    """The rows of a table as named tuples (`DataFrame.itertuples`' values), each built when first read: a
    search reads only some of its rows one by one (a shape's first, a feasible layout's collectives)."""

    def __init__(self, table: pd.DataFrame):
        self._type = _row_type(tuple(table.columns))
        self._columns = [table[c].tolist() for c in table.columns]
        self._built: dict[int, Any] = {}
        self._one = getattr(table, "one_value", frozenset())      # (`columns.Columns`: its columns of one value)

    def alike(self, idx: list[int], but: str) -> bool:
        """Whether rows idx hold the same values in every column but `but` (as their named tuples compare, each
        value by identity, else ==), the columns the table holds one value in (`Columns.one_value`) unread."""
        return all(all(col[i] is col[idx[0]] or col[i] == col[idx[0]] for i in idx[1:])
                   for name, col in zip(self._type._fields, self._columns) if name != but and name not in self._one)

    def column(self, name: str, idx: np.ndarray) -> list:
        """The values of column `name` at rows idx, as their named tuples hold them (no row built)."""
        col = self._columns[self._type._fields.index(name)]
        return [col[i] for i in idx.tolist()]

    def __getitem__(self, i: int):
        row = self._built.get(i)
        if row is None:
            row = self._built[i] = self._type(*(col[i] for col in self._columns))
        return row


@lru_cache(maxsize=64)
def _row_type(columns: tuple[str, ...]) -> type:
    """The named tuple of a table's rows (made once per set of columns: about 0.3 ms each)."""
    return namedtuple("Row", columns)


@dataclass
class _Rows:
    """The context-parallel block seconds of several layouts, [rows], where `cp_exposed` reads a StepComm's
    floats (its formula broadcasts over rows)."""

    cp_block_fwd_s: np.ndarray
    cp_block_bwd_s: np.ndarray
    replica_cp_block_s: None = None


def _operator_reasons(sh: Shapes, srow: np.ndarray) -> np.ndarray | None:
    """[rows] why a scenario's own operator gives no valid work at each row's shape (None where it does), or None
    when every shape is fine."""
    if sh.bad is None or all(b is None for b in sh.bad):
        return None
    return np.array(sh.bad, dtype=object)[srow]


def evaluate(pr: Evaluator, table: pd.DataFrame, reasons: bool = True) -> pd.DataFrame:
    """Predict every layout of `table` (LAYOUT_COLUMNS and `microbatches`, one row per layout).

    `reasons`: write `run`'s reason for every layout that does not fit (False: None everywhere, for a caller
    that words its own from the memory columns, as the planner's `ranking.apply_headroom` does).

    A table with a `stack` column is timed as each row's stack runs it: its rows by the Evaluator variant of their
    (stack, pipelined or not) cell (`Evaluator.variant`, `stacks.for_cell`), one evaluation per distinct variant.

    `table` may be a `columns.Columns` (its arrays, no DataFrame: an interval's settings), then so is the result.

    Returns:
        DataFrame indexed like `table`: feasible, reason, MEMORY_COLUMNS, step_time_s, tokens_per_s, mfu,
        cluster_usd_per_hour (the cluster's: all its instances), usd_per_million_tokens (NaN where the price is unknown).
    """
    table = table.reset_index(drop=True)
    parts = by_variant(pr, table)
    if len(parts) == 1:
        return _evaluate(parts[0][0], table, reasons)
    out = pd.concat([_evaluate(p, table.iloc[idx], reasons).set_axis(idx) for p, idx in parts])
    return out.sort_index()


def by_variant(pr: Evaluator, table: pd.DataFrame) -> list[tuple[Evaluator, np.ndarray]]:
    """The rows of `table` (positions) by the Evaluator variant that times them (one part without a `stack` column)."""
    if "stack" not in table.columns or table.empty:
        return [(pr, np.arange(len(table)))]
    which, firsts = distinct_rows(table.assign(_piped=table["pp"].to_numpy() > 1), ("stack", "_piped"))
    stack, pp = table["stack"].to_numpy(), table["pp"].to_numpy()
    variants = [pr.variant(stacks.for_cell(pr.scenario, str(stack[i]), int(pp[i]) > 1)) for i in firsts.tolist()]
    ids = {id(v): v for v in variants}
    code = np.array([list(ids).index(id(v)) for v in variants])[which]
    return [(v, np.flatnonzero(code == j)) for j, v in enumerate(ids.values())]


def degraded_hits(pr: Evaluator, row) -> list[np.ndarray]:
    """Each degraded part's (replica, stage) groups hit (`replay.degraded.degraded_groups`) at the layout of `row`,
    which every row of a degraded Evaluator's table shares (it times one scenario's own layout under its
    settings: `layouts.setting_times`)."""
    return pr.memo(("degraded-hits",), lambda: [degraded_groups(pr.layout_cluster(row), part.instances)
                                                for part in pr.degraded])


def _memory(pr: Evaluator, table, sh: Shapes, srow: np.ndarray, pipes: list[PipeRows]) -> dict:
    """`batched_memory`; of an interval's settings of one layout (a `Columns` holding one value in every column but
    `cal`) its one row, kept by the layout for the Evaluator's next settings: a layout's HBM does not read the
    calibration (its shapes' saved bytes are each shape alike's, `_saved_alike`; the reserve and capacity its
    cluster's under the first, `cluster_columns`)."""
    if not one_layout(table):
        return batched_memory(pr, table, sh, srow, pipes)
    key = ("memory-row",) + tuple((c, table[c].to_numpy()[0]) for c in table.columns if c != "cal")
    row = pr.memo(key, lambda: {k: v[:1].copy() for k, v in batched_memory(pr, table, sh, srow, pipes).items()})
    return {k: np.repeat(v, len(table)) for k, v in row.items()}


def _evaluate(pr: Evaluator, table: pd.DataFrame, reasons: bool) -> pd.DataFrame:
    sc = pr.scenario
    t = sc.training
    table = table.reset_index(drop=True)
    rows = RowView(table)
    sh, srow = shapes(pr, table, rows)
    pipes = pipe_rows(pr, table)
    mem = _memory(pr, table, sh, srow, pipes)
    # the output's columns, made a DataFrame once at the end (each column set on a DataFrame costs ~0.15 ms)
    out: dict[str, Any] = {**mem, "worst_stage": mem["worst_stage"].astype(int)}
    hbm = hbm_totals(*(mem[k][:, None] for k in HBM_PARTS), mem["hbm_capacity_gib"][:, None])
    worst_total = hbm.worst_total
    out["feasible"] = np.array(hbm.fits, dtype=bool)
    out["reason"] = None if not reasons else [None if ok else infeasible_reason([StageMemory(
        stage=int(r.worst_stage), weights_gib=r.weights_gib, gradients_gib=r.gradients_gib,
        optimizer_gib=r.optimizer_gib, activations_gib=r.activations_gib, reserve_gib=r.reserve_gib,
        total_gib=tot, capacity_gib=r.hbm_capacity_gib)]) for ok, r, tot in
        zip(out["feasible"], pd.DataFrame(mem).assign(worst_stage=out["worst_stage"]).itertuples(index=False),
            worst_total)]

    ops_bad = _operator_reasons(sh, srow)
    if ops_bad is not None:      # a scenario's own operator gives no valid work at these layouts' shapes
        hit = np.array([r is not None for r in ops_bad], dtype=bool)
        out["feasible"][hit] = False
        out["reason"] = np.where(hit, ops_bad, pd.Series(out["reason"], index=range(len(table)),
                                                         dtype=object).to_numpy(dtype=object))
    measured = list(range(t.warmup_steps, t.warmup_steps + t.steps))
    feasible = out["feasible"]
    # each row's cluster and calibration (jitter, step overhead), one lookup per distinct cluster
    which, firsts = distinct_rows(table, ("instance", "instances", "lnc") + (("cal",) if "cal" in table.columns else ()))
    cals = [pr.cluster(r.instance, r.instances, r.lnc, c).cluster.calibration for r, c in
            (((rows[0], c) for c in rows.column("cal", firsts)) if one_layout(table)    # (one row built: an interval's)
             else ((rows[i], calibration_index(rows[i])) for i in firsts.tolist()))]
    sigma = np.array([speed_draws.jitter_sigma(sc, c) for c in cals])[which]
    overhead = np.array([c.step_overhead_s for c in cals])[which]
    cols = {c: table[c].to_numpy() for c in ("tp", "cp", "dp", "microbatches", "pp_schedule")}
    pending: dict[tuple, list[dict]] = {}
    untimed: dict[int, str] = {}       # rows whose optimizer work is not a valid number: infeasible
    for g in pipes:
        js = np.flatnonzero(feasible[g.rows])
        if js.size == 0:
            continue
        idx = g.rows[js]
        F, B, OPT, attn_f, attn_b = batched_chunks(pr, table, sh, srow, g, js)
        if sh.bad is not None:   # the optimizer's own expressions at each layout's parameters
            wrong = ~(np.isfinite(OPT) & (OPT >= 0) & (OPT <= opslib.MAX_WORK)).all(axis=1)
            for j in np.flatnonzero(wrong).tolist():
                s = int(np.flatnonzero(~(np.isfinite(OPT[j]) & (OPT[j] >= 0) & (OPT[j] <= opslib.MAX_WORK)))[0])
                untimed[int(idx[j])] = (f"the scenario's optimizer operators give {OPT[j, s]:g} s on pipeline stage "
                                         f"{s} at this layout's parameters (allowed: a finite number >= 0)")
            OPT = np.where(wrong[:, None], 0.0, OPT)
        if pr.degraded:          # the replica the degraded instances slow sets the step, as in the replay
            c, has, slows = batched_comm(pr, rows, sh, srow, g, js, slow=True)
            c = slowest_replica_comm(c, slows, degraded_hits(pr, rows[int(idx[0])]))
        else:
            c, has = batched_comm(pr, rows, sh, srow, g, js)
        tp, cp, dp = cols["tp"][idx], cols["cp"][idx], cols["dp"][idx]
        # [n, pp]: each stage at its slowest replica's speed, averaged over the measured steps (once per distinct
        # tp, cp, dp and jitter)
        speed_keys = list(zip(tp.tolist(), cp.tolist(), dp.tolist(), sigma[idx].tolist()))
        first = dict.fromkeys(speed_keys)
        for key in first:
            a, b, d, sig = key
            first[key] = pr.memo(("speed", a, b, g.pp, d, sig), lambda: speeds(
                pr, a, b, g.pp, d, measured, sig).mean(axis=0, keepdims=True))
        G = np.concatenate([first[key] for key in speed_keys])
        fc, bc, opt = step_speed.slowed(F, B, OPT, G, G, g.v)                        # chunk c: stage c % pp
        ring = cp > 1                 # context parallel: the ring's exposed seconds, every such row at once
        cp_f, cp_b = np.zeros(idx.size), np.zeros(idx.size)
        if ring.any():
            prof = engine.ComputeTimes(fwd=fc[ring], bwd=bc[ring], opt=OPT[ring], attn_fwd=attn_f[ring],
                                         attn_bwd=attn_b[ring], slowest_rank=-1)
            cp_f[ring], cp_b[ring] = engine.cp_exposed(_Rows(cp_block_fwd_s=c.cp_block_fwd_s[ring],
                                                             cp_block_bwd_s=c.cp_block_bwd_s[ring]),
                                                       prof, cp[ring].astype(float))
        fs_f, fs_b = engine.fsdp_exposed(c, fc, bc, g.layers)      # ZeRO-3 rows' per-layer gathers, [rows, chunks]
        _, _, fwd, bwd = engine.chunk_seconds(c.tp_fwd, c.tp_bwd, fc, bc, cp_f[:, None], cp_b[:, None],
                                              fs_f, fs_b, g.layers[None, :])
        fwd, bwd, send_f, send_b, _, _ = engine.serial_sends(fwd, bwd, c.send_fwd, c.send_bwd, c.serial_exchanges)
        sched = cols["pp_schedule"][idx]
        for name in dict.fromkeys(sched.tolist()):
            sel = np.flatnonzero(sched == name)
            pending.setdefault((str(name), g.pp, g.v), []).append(dict(
                i=idx[sel], m=cols["microbatches"][idx[sel]], fwd=fwd[sel], bwd=bwd[sel], send_fwd=send_f[sel],
                send_bwd=send_b[sel], last=c.send_bwd_last[sel], has=has[sel], nb=c.dp_buckets[sel],
                d=c.dp_bucket_s[sel], overlap=c.dp_overlap[sel], norm=c.norm_s[sel], after=c.dp_after_s[sel],
                opt=opt[sel], overhead=overhead[idx[sel]]))
    step_time = np.full(len(table), np.nan)
    for (schedule, pp, v), parts in pending.items():
        x = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        n_rows = x["i"].size
        pt = pipeline_times(schedule, pp, v, x["m"], x["fwd"], x["bwd"], x["send_fwd"], x["send_bwd"], x["last"])
        end = pt.stage_end                                                           # [rows, pp]
        # gradient buckets, every stage of every row at once: [rows, pp, v] segments in program order
        # (a stage's last backwards run its chunks from the last down)
        nb, d = x["nb"].astype(float), x["d"]
        seg = lambda a: a.reshape(n_rows, v, pp)[:, ::-1, :].transpose(0, 2, 1)     # noqa: E731
        queued = np.where(x["overlap"][:, None], bucket_queue_end(seg(pt.last_b_start), seg(pt.last_b_end), seg(nb),
                                                                  seg(d)),
                          end + (seg(nb) * seg(d)).sum(axis=2))
        rs_end = np.where(x["has"][:, None], queued, 0.0)
        done = engine.stage_finish(end, rs_end, x["norm"][:, None], x["opt"], x["after"])[1]
        step_time[x["i"]] = done.max(axis=1) + x["overhead"]
    if untimed:
        rows_ = np.array(sorted(untimed))
        step_time[rows_] = np.nan
        out["feasible"][rows_] = False
        reasons = pd.Series(out["reason"], index=range(len(table)), dtype=object).to_numpy(dtype=object)
        reasons[rows_] = [untimed[i] for i in rows_.tolist()]
        out["reason"] = reasons
    price, peak = cluster_columns(pr, table, ("price_per_hour_usd", "peak_flop_per_s"))
    fom = merit.figures(step_time, sc.tokens_per_step, opslib.model_flops_per_step(sc), peak,
                        table["instances"].to_numpy(), price)
    out.update(step_time_s=step_time, tokens_per_s=fom["tokens_per_s"], mfu=fom["mfu"],
               cluster_usd_per_hour=fom["cluster_usd_per_hour"], usd_per_million_tokens=fom["usd_per_million_tokens"])
    if isinstance(table, Columns):       # (an interval's settings: arrays, no DataFrame built)
        return Columns({k: v if isinstance(v, np.ndarray) else objects(v, len(table)) for k, v in out.items()})
    return pd.DataFrame(out, index=pd.RangeIndex(len(table)))
