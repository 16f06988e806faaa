"""Report (or RunResult) timeline → Chrome trace events (trace.json, opens in Perfetto and chrome://tracing).

`pid` is the actor shard, named "shard K: instances a-b"; `tid` is one small int per (stage, stream), named
"stage S compute", "stage S tp", ... and stable across shards. `ts`/`dur` are microseconds of virtual time.
Slices on one track only nest or follow each other: a slice that would partially overlap an earlier one on
its track (say two data-parallel buckets in flight at once) goes to an extra lane, "stage S dp #2".
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ultracluster.replay.events import RunResult

if TYPE_CHECKING:
    from ultracluster.report.frames import Report

STREAMS = ("compute", "tp", "pp", "dp", "storage", "optimizer")
EPS_US = 1e-6  # tolerance of the non-overlap rule, as in check-run-dir


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
            # Nested means inside the top span; equal starts only for equal spans, because check-run-dir
            # sorts slices by (start, end) and would read a shorter first slice as a partial overlap.
            if not stack or (end <= stack[-1][1] + EPS_US
                             and (start > stack[-1][0] + EPS_US or end >= stack[-1][1] - EPS_US)):
                break
        else:
            open_spans.append([])
            k = len(open_spans) - 1
        open_spans[k].append((start, end))
        lane[i] = k
    return lane


def chrome_trace(source: Report | RunResult) -> dict:
    """Build the Chrome trace of a run's timeline.

    Args:
        source: a Report (uses `timeline`) or a RunResult (uses `slices`).

    Returns:
        `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`: "M" metadata events naming
        processes and threads, then "X" complete events with `ts`/`dur` in us and `args` step and stage.
    """
    if isinstance(source, RunResult):
        slices, name = list(source.slices), source.scenario_name
    else:
        slices, name = list(source.timeline.itertuples(index=False)), source.summary.get("scenario")
    tracks: dict[tuple, list] = defaultdict(list)
    for s in slices:
        tracks[(int(s.shard), int(s.stage), s.stream)].append(s)
    placed = []  # (shard, thread key, slice, ts_us, dur_us)
    for (shard, stage, stream), group in tracks.items():
        spans = [(round(float(s.start_s) * 1e6, 3), round(float(s.end_s) * 1e6, 3)) for s in group]
        for s, (ts, end), lane in zip(group, spans, _lanes(spans)):
            rank = STREAMS.index(stream) if stream in STREAMS else len(STREAMS)
            placed.append((shard, (stage, rank, stream, lane), s, ts, round(end - ts, 3)))
    tid = {key: i + 1 for i, key in enumerate(sorted({p[1] for p in placed}))}
    shard_instances = source.shard_instances
    meta = []
    for shard in sorted({p[0] for p in placed}):
        label = f"shard {shard}: instances {shard_instances[shard][0]}-{shard_instances[shard][1]}" \
            if shard < len(shard_instances) else f"shard {shard}"
        meta += [{"ph": "M", "name": "process_name", "pid": shard, "tid": 0, "args": {"name": label}},
                 {"ph": "M", "name": "process_sort_index", "pid": shard, "tid": 0, "args": {"sort_index": shard}}]
    for shard, key in sorted({(p[0], p[1]) for p in placed}):
        stage, _, stream, lane = key
        label = f"stage {stage} {stream}" + (f" #{lane + 1}" if lane else "")
        meta += [{"ph": "M", "name": "thread_name", "pid": shard, "tid": tid[key], "args": {"name": label}},
                 {"ph": "M", "name": "thread_sort_index", "pid": shard, "tid": tid[key],
                  "args": {"sort_index": tid[key]}}]
    events = [{"ph": "X", "name": s.name, "cat": s.stream, "pid": shard, "tid": tid[key], "ts": ts, "dur": dur,
               "args": {"step": int(s.step), "stage": int(s.stage)}}
              for shard, key, s, ts, dur in sorted(placed, key=lambda p: (p[3], p[0], tid[p[1]]))]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": {"scenario": name}}
