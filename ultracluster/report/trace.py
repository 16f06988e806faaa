"""Report timeline → Chrome trace events (trace.json, opens in Perfetto and chrome://tracing).

Processes and threads:

* One process per actor shard shown in full, named "shard K: instances a-b": the shards that hold a
  stage of a step's critical replica (the breakdown's critical path), every slice of it.
* Its threads, one per (pipeline stage, stream): "stage S compute" (forwards, backwards, optimizer),
  "stage S tp" (in-layer tensor/context-parallel collectives), "stage S pp" (sends), "stage S dp"
  (gradient reduction) and "storage" (data stall, checkpoint). Slices on one thread only nest or follow
  each other: a slice that would partially overlap an earlier one (two sends in flight at once) goes to
  an extra lane, "stage S pp #2". `tid`s are small ints, stable across shards.
* One process for all other shards, aggregated: "other shards (aggregated): N shards, M ranks", with a
  thread per quantity (compute, tp, dp, idle) and one slice per step whose length is the mean over
  those ranks of that quantity (from the `shards` table); its position (from the step's start) is not a
  schedule, the args carry min and max.

Bounded at any scale: the aggregated process has 4 slices per step; the full ones carry the critical
replica's slices. When those exceed `MAX_TRACE_SLICES`, every step but the last measured one is
condensed to one slice per thread ("step k: n slices", the span of the thread's slices that step, with
the busy seconds in args). `ts`/`dur` are microseconds of virtual time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from ultracluster.report.frames import Report

STREAMS = ("compute", "tp", "pp", "dp", "storage")
THREAD_OF = {"compute": "compute", "optimizer": "compute", "tp": "tp", "pp": "pp", "dp": "dp", "storage": "storage"}
MAX_TRACE_SLICES = 100_000   # X events of the full shards (about 15 MB of JSON)
EPS_US = 1e-6  # tolerance of the non-overlap rule, as in report/check.py
AGGREGATE_THREADS = (("compute", "compute_mean_s"), ("tp", "tp_comm_mean_s"), ("dp", "dp_comm_mean_s"),
                     ("idle", "idle_mean_s"))


def _lanes(spans: list[tuple[float, float]]) -> list[int]:
    """Lane per span (start_us, end_us) such that spans in one lane are nested or disjoint; greedy, first fit."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], -spans[i][1]))
    open_spans: list[list[tuple[float, float]]] = []  # per lane, a stack of the enclosing spans
    lane = [0] * len(spans)
    for i in order:
        start, end = spans[i]
        for k, stack in enumerate(open_spans):
            while stack and stack[-1][1] <= start + EPS_US:
                stack.pop()
            # Nested means inside the top span; equal starts only for equal spans, because a checker that
            # sorts slices by (start, end) would read a shorter first slice as a partial overlap.
            if not stack or (end <= stack[-1][1] + EPS_US
                             and (start > stack[-1][0] + EPS_US or end >= stack[-1][1] - EPS_US)):
                break
        else:
            open_spans.append([])
            k = len(open_spans) - 1
        open_spans[k].append((start, end))
        lane[i] = k
    return lane


def _condense(timeline: pd.DataFrame, keep_step) -> pd.DataFrame:
    """Every step but `keep_step` as one slice per (shard, stage, thread): its span, count and busy time."""
    tl = timeline.assign(thread=timeline["stream"].map(THREAD_OF).fillna(timeline["stream"]))
    full = tl[tl["step"] == keep_step]
    rest = tl[tl["step"] != keep_step]
    if rest.empty:
        return full
    agg = rest.groupby(["step", "shard", "stage", "thread"], sort=True).agg(
        start_s=("start_s", "min"), end_s=("end_s", "max"), slices=("name", "size"),
        busy_s=("duration_s", "sum")).reset_index()
    agg["stream"] = agg["thread"]
    agg["name"] = [f"step {s}: {n} slices" for s, n in zip(agg["step"], agg["slices"])]
    return pd.concat([agg, full], ignore_index=True)


def chrome_trace(report: Report) -> dict:
    """Build the Chrome trace of a run.

    Args:
        report: the run's Report (uses timeline, steps and shards; built, or read back from a run directory).

    Returns:
        `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`: "M" metadata events naming
        processes and threads, then "X" complete events with `ts`/`dur` in us and `args` (step, stage, and
        for condensed or aggregated slices what they stand for). `otherData` says which shards are in full
        and which steps were condensed.
    """
    timeline = report.timeline
    measured = report.steps.loc[~report.steps["warmup"], "step"] if len(report.steps) else pd.Series([], dtype="int64")
    last = int(measured.iloc[-1]) if len(measured) else (int(timeline["step"].max()) if len(timeline) else -1)
    condensed: list[int] = []
    if len(timeline) > MAX_TRACE_SLICES:
        condensed = sorted(set(timeline["step"].tolist()) - {last})
        timeline = _condense(timeline, last)
    rows = timeline.to_dict("records")
    tracks: dict[tuple, list] = {}
    for r in rows:
        thread = THREAD_OF.get(r["stream"], r["stream"])
        tracks.setdefault((int(r["shard"]), -1 if thread == "storage" else int(r["stage"]), thread), []).append(r)
    placed = []  # (shard, thread key, row, ts_us, dur_us)
    for (shard, stage, thread), group in tracks.items():
        spans = [(round(float(r["start_s"]) * 1e6, 3), round(float(r["end_s"]) * 1e6, 3)) for r in group]
        rank = STREAMS.index(thread) if thread in STREAMS else len(STREAMS)
        for r, (ts, end), lane in zip(group, spans, _lanes(spans)):
            placed.append((shard, (stage, rank, thread, lane), r, ts, round(end - ts, 3)))
    keys = sorted({p[1] for p in placed})
    tid = {key: i + 1 for i, key in enumerate(keys)}
    names = _shard_names(report)
    full_shards = sorted({p[0] for p in placed})
    meta = []
    for shard in full_shards:
        meta += [{"ph": "M", "name": "process_name", "pid": shard, "tid": 0,
                  "args": {"name": names.get(shard, f"shard {shard}")}},
                 {"ph": "M", "name": "process_sort_index", "pid": shard, "tid": 0, "args": {"sort_index": shard}}]
    for shard, key in sorted({(p[0], p[1]) for p in placed}):
        stage, _, thread, lane = key
        label = (thread if stage < 0 else f"stage {stage} {thread}") + (f" #{lane + 1}" if lane else "")
        meta += [{"ph": "M", "name": "thread_name", "pid": shard, "tid": tid[key], "args": {"name": label}},
                 {"ph": "M", "name": "thread_sort_index", "pid": shard, "tid": tid[key],
                  "args": {"sort_index": tid[key]}}]
    events = []
    for shard, key, r, ts, dur in sorted(placed, key=lambda p: (p[3], p[0], tid[p[1]])):
        args = {"step": int(r["step"]), "stage": int(r["stage"])}
        if "slices" in r and r["slices"] == r["slices"]:   # a condensed slice (not NaN)
            args.update(slices=int(r["slices"]), busy_s=float(r["busy_s"]))
        events.append({"ph": "X", "name": r["name"], "cat": THREAD_OF.get(r["stream"], r["stream"]), "pid": shard,
                       "tid": tid[key], "ts": ts, "dur": dur, "args": args})
    agg_meta, agg_events, aggregated = _aggregate(report, set(full_shards), max(full_shards + [-1]) + 1)
    return {"traceEvents": meta + agg_meta + events + agg_events, "displayTimeUnit": "ms",
            "otherData": {"scenario": report.summary.get("scenario"), "full_shards": full_shards,
                          "aggregated_shards": aggregated, "condensed_steps": condensed}}


def _shard_names(report: Report) -> dict[int, str]:
    return {i: f"shard {i}: instances {a}-{b}" for i, (a, b) in enumerate(report.shard_instances)}


def _aggregate(report: Report, full: set[int], pid: int) -> tuple[list, list, int]:
    """One process for the shards not shown in full: per step, one slice per quantity (mean over ranks)."""
    shards = report.shards
    if shards.empty or report.steps.empty:
        return [], [], 0
    rest = shards[~shards["shard"].isin(full)]
    rest = rest[rest["compute_mean_s"].notna() & (rest["ranks"] > 0)]
    if rest.empty:
        return [], [], 0
    pid = max(pid, int(shards["shard"].max()) + 1)
    weights = rest["ranks"] / rest["ranks"].sum()
    label = f"other shards (aggregated): {len(rest)} shards, {int(rest['ranks'].sum())} ranks"
    meta = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    events = []
    starts = report.steps["step_time_s"].cumsum() - report.steps["step_time_s"]
    for i, (thread, col) in enumerate(AGGREGATE_THREADS):
        meta += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": i + 1,
                  "args": {"name": f"{thread} (mean per rank)"}},
                 {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": i + 1, "args": {"sort_index": i + 1}}]
        mean = float((rest[col] * weights).sum())
        lo = float(rest["compute_min_s" if thread == "compute" else col].min())
        hi = float(rest["compute_max_s" if thread == "compute" else col].max())
        if not mean > 0:
            continue
        for step, t0 in zip(report.steps["step"], starts):
            events.append({"ph": "X", "name": f"{thread}: mean of {int(rest['ranks'].sum())} ranks", "cat": thread,
                           "pid": pid, "tid": i + 1, "ts": round(float(t0) * 1e6, 3), "dur": round(mean * 1e6, 3),
                           "args": {"step": int(step), "mean_s": mean, "min_s": lo, "max_s": hi,
                                    "shards": [int(s) for s in rest["shard"]][:64]}})
    return meta, events, int(len(rest))
