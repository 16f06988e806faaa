"""RunResult → Report: tidy pandas DataFrames (snake_case, unit-suffixed columns) plus the summary dict.

Collective bandwidths follow nccl-tests (doc/PERFORMANCE.md): `algbw_gb_s = bytes / time_s / 1e9` and
`busbw_gb_s = algbw_gb_s x factor`, where factor is 2(n-1)/n for all_reduce, (n-1)/n for reduce_scatter,
all_gather and all_to_all, 1 for send_recv. `bytes` is CollectiveRecord.bytes, the per-rank buffer in the
nccom-test convention, which is nccl-tests' S: the whole buffer for all_reduce, the full (pre-scatter) input
for reduce_scatter and the full (gathered) output for all_gather — not the 1/n shard, so it is not
multiplied by the group size.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ultracluster.network.collectives import bus_factor
from ultracluster.replay.result import (
    BREAKDOWN_KEYS, CollectiveRecord, RunResult, Slice, StageMemory, StepRecord,
)
from ultracluster.report import accessor  # noqa: F401  (registers df.uc)
from ultracluster.report.atomic import write_tables
from ultracluster.report.readback import read_run_dir
from ultracluster.report.ranks import geometry, group_first_rank, rank_tables, shard_of_instance
from ultracluster.report.summary import emulation_info, summarize

if TYPE_CHECKING:
    from ultracluster.storage.estimates import StorageFigures

_DTYPES = {"int": "int64", "float": "float64", "bool": "bool", "str": "str"}
TABLES = ("steps", "breakdown", "memory", "collectives", "timeline", "ranks", "stages", "shards")
# the typed fields of a forward/backward slice, used to split it and then left out of the timeline table
SLICE_OP_FIELDS = ("kind", "microbatch", "chunk")
STREAM_ORDER = {"storage": 0, "compute": 1, "tp": 2, "pp": 3, "dp": 4, "optimizer": 5}


def records_frame(records: list, cls: type) -> pd.DataFrame:
    """One row per dataclass record, one typed column per field; an empty list still gives the columns."""
    cols = [f.name for f in fields(cls)]
    frame = pd.DataFrame([[getattr(r, c) for c in cols] for r in records], columns=cols)
    return frame.astype({f.name: _DTYPES[f.type] for f in fields(cls)})


def collectives_frame(records: list[CollectiveRecord]) -> pd.DataFrame:
    """CollectiveRecord rows plus `time_us`, `time_per_step_s`, `algbw_gb_s` and `busbw_gb_s` (10^9 B/s)."""
    df = records_frame(records, CollectiveRecord)
    df["time_us"] = df["time_s"] * 1e6
    df["time_per_step_s"] = df["time_s"] * df["count_per_step"]
    df["algbw_gb_s"] = df["bytes"] / df["time_s"] / 1e9
    df["busbw_gb_s"] = df["algbw_gb_s"] * [bus_factor(o, n) for o, n in zip(df["op"], df["ranks"])]
    return df.astype({"algbw_gb_s": "float64", "busbw_gb_s": "float64"})


class Report:
    """One run as pandas tables.

    Column names carry their unit (`_s` seconds, `_us` microseconds, `_gib` GiB, `_gb_s` 10^9 B/s, `bytes`);
    time columns of the per-rank, per-stage and per-shard tables are seconds per step, means over the
    measured steps. `df.uc` adds derived metrics (see `ultracluster.report.accessor`).

    Attributes:
        steps: one row per replayed step, every StepRecord field (times in s, payload in bytes).
        breakdown: `step`, `warmup`, the eight critical-path parts in s and `step_time_s`.
        memory: HBM footprint of one rank per pipeline stage, in GiB.
        collectives: one row per costed collective kind (see the module docstring for bandwidths).
        timeline: slices of each step's critical replica on the virtual clock, plus `replica` and
            `duration_s`: compute (forward/backward, optimizer), tp (in-layer collectives), pp (sends),
            dp (gradient reduction), storage.
        ranks: bounded per-rank table: each (replica, stage) group's pacing rank plus the stragglers
            (see `ultracluster.report.ranks`): compute, exposed comm, idle, HBM.
        stages: one row per pipeline stage: compute min/mean/max over its ranks, comm, idle, HBM.
        shards: one row per actor shard: its instances and ranks, compute and idle over them, and whether
            trace.json shows it in full (`in_trace`).
        summary: the summary.json dict.
        scenario: the resolved scenario dict.
        shard_instances: per actor shard, its [first, last] instance index.
        emulation: how the run was emulated (actors, wall seconds, payload bytes): run.json.
        storage: the run's storage figures (`ultracluster.storage.StorageFigures`, also in the summary);
            None without storage or for a report read back from a run directory.
        long_run: `run --hours`: the long run (`goodput.GoodputResult`), whose goodput is the summary's; None
            without one or for a report read back (goodput.json holds it).
    """

    def __init__(self, steps: pd.DataFrame, breakdown: pd.DataFrame, memory: pd.DataFrame,
                 collectives: pd.DataFrame, timeline: pd.DataFrame, summary: dict, scenario: dict,
                 shard_instances: list[tuple[int, int]] | None = None, emulation: dict | None = None,
                 ranks: pd.DataFrame | None = None, stages: pd.DataFrame | None = None,
                 shards: pd.DataFrame | None = None, storage: StorageFigures | None = None, long_run=None):
        self.steps, self.breakdown, self.memory = steps, breakdown, memory
        self.collectives, self.timeline = collectives, timeline
        self.summary, self.scenario = summary, scenario
        self.shard_instances = list(shard_instances or [])
        self.emulation = dict(emulation or {})
        self.storage = storage
        self.long_run = long_run
        blank = _blank() if ranks is None or stages is None or shards is None else None
        self.ranks = ranks if ranks is not None else blank.ranks.copy()      # a copy: never share the blank's
        self.stages = stages if stages is not None else blank.stages.copy()
        self.shards = shards if shards is not None else blank.shards.copy()

    def __repr__(self) -> str:
        return f"Report({self.summary.get('scenario')!r}, steps={len(self.steps)})"

    def tables(self) -> Iterator[tuple[str, pd.DataFrame]]:
        """(name, frame) of every table, in the order of `TABLES`."""
        return ((name, getattr(self, name)) for name in TABLES)

    def to_csv(self, directory: str | os.PathLike) -> Path:
        """Write every table (steps, breakdown, memory, collectives, timeline, ranks, stages, shards) as
        `<name>.csv`, atomically (`ultracluster.report.atomic.write_tables`).

        Args:
            directory: created with its parents when missing.

        Returns:
            The directory.
        """
        return write_tables(self.tables(), directory, "csv")

    def to_parquet(self, directory: str | os.PathLike) -> Path:
        """Write the same tables as `<name>.parquet`, atomically (`ultracluster.report.atomic.write_tables`).

        Args:
            directory: created with its parents when missing.

        Returns:
            The directory.

        Raises:
            RuntimeError: pyarrow is not installed.
        """
        return write_tables(self.tables(), directory, "parquet")

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike) -> Report:
        """Read a run directory back into a Report (what `ultracluster report` and `compare` render).

        Tables missing from an older run directory come back empty, with their columns. Everything read is
        validated, so that nothing is rendered from garbage: each file must be a regular file (JSON up to
        64 MiB, CSV up to 1 GiB); each CSV's header must be the columns the run writes, every row must have
        them all, integers and booleans must parse, and numbers must be finite (a statistic the run could
        not measure, in an infeasible run's stages.csv and shards.csv, is an empty cell).

        Args:
            run_dir: a directory written by `ultracluster run` (it has summary.json).

        Returns:
            The Report; rendering it gives the same trace.json and report.html as the run wrote.

        Raises:
            RunDirError: the directory or summary.json is missing (for an interrupted run, the problem says
                so, from run.json), or a file is malformed: each problem names the file.
        """
        return cls(**read_run_dir(run_dir, {name: getattr(_blank(), name) for name in TABLES}))


_BLANK: Report | None = None


def _blank() -> Report:
    """A Report of nothing: every table with its columns and dtypes, no rows. Shared by the process: read its
    frames' schemas, hand out copies."""
    global _BLANK
    if _BLANK is None:
        _BLANK = build_report(RunResult(
            scenario={}, scenario_name="", chips=0, neuron_cores=0, ranks=0, instances=0, instance_type="",
            actors=0, ray_nodes=0, model_flops_per_step=0.0, peak_flop_per_s=0.0, tokens_per_step=0,
            feasible=False, reason="blank", layout=None))
    return _BLANK


def timeline_frame(result: RunResult, steps: pd.DataFrame) -> pd.DataFrame:
    """The replay's slices as a frame, each step on the shards of its critical replica, with the in-layer
    collectives and pipeline sends on their own streams.

    A forward/backward slice of chunk c spans its compute and its in-layer collectives (the replay adds
    them): the last `tp_fwd_s`/`tp_bwd_s` of it becomes a "collectives ..." slice on the tp stream (they
    really interleave layer by layer; the total is exact). Each forward of a non-last chunk is followed by
    a "send ..." slice of `send_fwd_s` on the pp stream, each backward of a non-first chunk by one of
    `send_bwd_s`, as the replay delays the receiving op. Where the exchanges are serial (`ChunkComm.serial`: the
    stage waits in them, so they are part of the op's duration) they are carved out of the op like the
    collectives: the receive from the producing chunk at its start, the send to the next at its end.

    Args:
        result: the replayed run.
        steps: its steps frame (critical replica per step).

    Returns:
        Columns stage, stream, name, start_s, end_s, step, shard, replica, duration_s; sorted by step,
        stage, start.
    """
    df = records_frame(result.slices, Slice)
    crit = dict(zip(steps["step"].tolist(), steps["critical_replica"].tolist()))
    df["replica"] = df["step"].map(crit).fillna(-1).astype("int64")
    g = geometry(result)
    if g is not None and result.shard_instances and len(df):
        # the slices belong to the critical replica: name the shard that holds its stage's ranks
        known = (df["replica"] >= 0).to_numpy()
        instance = group_first_rank(g, df["replica"].to_numpy(), df["stage"].to_numpy()) // g["ranks_per_instance"]
        df["shard"] = np.where(known, shard_of_instance(result.shard_instances, instance), df["shard"].to_numpy())
    if g is not None and result.chunk_comm and len(df):
        df = _split_ops(df, result)
    df = df.drop(columns=list(SLICE_OP_FIELDS))
    df["duration_s"] = df["end_s"] - df["start_s"]
    order = df["stream"].map(STREAM_ORDER).fillna(len(STREAM_ORDER))
    df = df.assign(_o=order).sort_values(["step", "stage", "start_s", "_o"], kind="stable").drop(columns="_o")
    return df.reset_index(drop=True).astype({"replica": "int64", "shard": "int64"})


def _split_ops(df: pd.DataFrame, result: RunResult) -> pd.DataFrame:
    """Carve the in-layer collectives out of forward/backward slices (by their typed kind and chunk) and add
    the pipeline sends."""
    n = len(result.chunk_comm)
    by_chunk = {c.chunk: c for c in result.chunk_comm}
    arr = {k: np.array([getattr(by_chunk[c], k) if c in by_chunk else 0.0 for c in range(n)])
           for k in ("tp_fwd_s", "tp_bwd_s", "send_fwd_s", "send_bwd_s", "serial")}
    kind, chunk = df["kind"].to_numpy(dtype=object), df["chunk"].to_numpy(dtype=np.int64)
    fwd = kind == "F"
    is_op = (fwd | (kind == "B")) & (df["stream"] == "compute").to_numpy() & (chunk >= 0) & (chunk < n)
    c = np.clip(chunk, 0, max(n - 1, 0))
    start, end = df["start_s"].to_numpy(), df["end_s"].to_numpy()
    send = np.where(is_op, np.where(fwd, arr["send_fwd_s"][c], arr["send_bwd_s"][c]), 0.0)
    # serial exchanges: the receive (the producer's send: chunk c - 1's forward, c + 1's backward) opens the op
    serial = is_op & (arr["serial"][c] > 0)
    prev = np.where(fwd, arr["send_fwd_s"][np.clip(c - 1, 0, None)] * (c > 0),
                    arr["send_bwd_s"][np.clip(c + 1, None, max(n - 1, 0))] * (c < n - 1))
    recv = np.where(serial, prev, 0.0)
    sent = np.where(serial, send, 0.0)         # ... and the send closes it
    body_end = end - sent
    tp = np.where(is_op, np.minimum(np.where(fwd, arr["tp_fwd_s"][c], arr["tp_bwd_s"][c]),
                                    np.maximum(body_end - start - recv, 0.0)), 0.0)
    names = df["name"].to_numpy(dtype=object)
    out = [df.assign(start_s=start + recv, end_s=body_end - tp)]
    has_tp, has_send, has_recv = tp > 0, (send > 0) & ~serial, recv > 0
    out.append(df[has_tp].assign(stream="tp", name=["collectives " + x for x in names[has_tp]],
                                 start_s=(body_end - tp)[has_tp], end_s=body_end[has_tp]))
    out.append(df[has_send].assign(stream="pp", name=["send " + x for x in names[has_send]],
                                   start_s=end[has_send], end_s=(end + send)[has_send]))
    out.append(df[has_recv].assign(stream="pp", name=["receive " + x for x in names[has_recv]],
                                   start_s=start[has_recv], end_s=(start + recv)[has_recv]))
    done = serial & (sent > 0)
    out.append(df[done].assign(stream="pp", name=["send " + x for x in names[done]], start_s=body_end[done],
                               end_s=end[done]))
    return pd.concat(out, ignore_index=True).astype({"name": df["name"].dtype, "stream": df["stream"].dtype})


def build_report(result: RunResult) -> Report:
    """Turn a replayed run into a Report.

    Args:
        result: everything the replay produced.

    Returns:
        The Report; every table has its columns even when the run produced no rows.
    """
    steps = records_frame(result.steps, StepRecord)
    timeline = timeline_frame(result, steps)
    ranks, stages, shards = rank_tables(result, steps)
    shards["in_trace"] = shards["shard"].isin(set(timeline["shard"].tolist()))
    return Report(
        steps=steps,
        breakdown=steps[["step", "warmup", *BREAKDOWN_KEYS, "step_time_s"]].copy(),
        memory=records_frame(result.memory, StageMemory),
        collectives=collectives_frame(result.collectives),
        timeline=timeline,
        summary=summarize(result),
        scenario=result.scenario,
        shard_instances=result.shard_instances,
        emulation=emulation_info(result),
        ranks=ranks, stages=stages, shards=shards,
        storage=result.storage, long_run=result.long_run,
    )
