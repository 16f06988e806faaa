"""Synthetic RunResult → summary, Report frames, trace, HTML and terminal table: exact values (no Ray)."""
from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import replace

import pandas as pd
import pytest

from ultracluster.replay.result import (
    BREAKDOWN_KEYS, ChunkComm, CollectiveRecord, RunLayout, RunResult, Slice, StageComm, StageMemory, StepRecord,
)
from ultracluster.replay.records import stage_dp_exposure
from ultracluster.report import Report, build_report, format_summary
from ultracluster.report.frames import bus_factor
from ultracluster.report.html import render_html
from ultracluster.report.summary import summarize
from ultracluster.report.trace import chrome_trace

# compute, tp, pp, dp, bubble, data_stall, checkpoint, other (s); each row adds up to its step time
PARTS = {0: (2.0, 0.3, 0.1, 0.3, 0.1, 0.1, 0.0, 0.1),       # warmup, 3.0 s
         1: (0.6, 0.1, 0.05, 0.1, 0.1, 0.0, 0.0, 0.05),     # 1.0 s
         2: (0.7, 0.1, 0.05, 0.2, 0.1, 0.2, 0.1, 0.05)}     # 1.5 s
PRICE = 21.5  # USD per instance-hour


def step(i: int, checked: bool = True) -> StepRecord:
    return StepRecord(i, i == 0, math.fsum(PARTS[i]), *PARTS[i], critical_replica=1, critical_stage=1,
                      slowest_rank=5, payload_bytes=1000 + i, payload_checked=checked, wall_s=0.01)


# offsets of each step's slices as fractions of its step time (so no slice leaves its step)
OPS = (  # stage, stream, name, start, end
    (0, "compute", "F mb0 c0", 0.0, 0.2), (1, "compute", "F mb0 c0", 0.25, 0.45),
    (1, "compute", "B mb0 c0", 0.45, 0.75),
    (0, "compute", "B mb0 c0", 0.8, 0.9),
    # two gradient buckets in flight at once: a partial overlap on the dp stream of stage 0
    (0, "dp", "reduce_scatter b0", 0.9, 0.95), (0, "dp", "reduce_scatter b1", 0.92, 0.97),
    (0, "optimizer", "optimizer", 0.97, 1.0))
CHUNKS = [ChunkComm(0, 0, tp_fwd_s=0.01, tp_bwd_s=0.02, send_fwd_s=0.05, send_bwd_s=0.0),
          ChunkComm(1, 1, tp_fwd_s=0.01, tp_bwd_s=0.02, send_fwd_s=0.0, send_bwd_s=0.05)]
STAGE_COMM = [StageComm(0, 2, tp_comm_s=0.1, pp_send_s=0.02, dp_comm_s=0.15),
              StageComm(1, 2, tp_comm_s=0.08, pp_send_s=0.01, dp_comm_s=0.1)]
STAGE_COMPUTE = [0.5, 0.45]                   # s per step of a rank at speed 1, per stage
SLOW = {5: 0.75, 20: 0.6, 30: 0.4}           # rank 30 runs faster than its stage


def op_fields(stage: int, stream: str, name: str, pp: int = 2) -> dict:
    """The typed fields the replay gives a forward/backward slice named "F mb0 c0" (chunk = c x pp + stage)."""
    kind, mb, c = name.split() if stream == "compute" and name[:2] in ("F ", "B ") else ("", "mb-1", "c-1")
    chunk = int(c[1:]) * pp + stage if kind else -1
    return {"kind": kind, "microbatch": int(mb[2:]), "chunk": chunk}


def make_slices() -> list[Slice]:
    out = []
    for st, t0, span in ((1, 3.0, 1.0), (2, 4.0, 1.5)):
        out += [Slice(stage, stream, name, t0 + a * span, t0 + b * span, st, 0, **op_fields(stage, stream, name))
                for stage, stream, name, a, b in OPS]
    out.append(Slice(0, "storage", "data stall", 4.0, 4.2, 2, 0))
    return out


def make_result() -> RunResult:
    return RunResult(
        scenario={"name": "tiny-test", "training": {"global_batch": 8, "seq_len": 1024},
                  "parallelism": {"tp": 8, "pp": 2, "dp": 2, "cp": 1, "pp_schedule": "1f1b"},
                  "cluster": {"instance": "trn1.32xlarge", "instances": 2}},
        scenario_name="tiny-test", chips=32, neuron_cores=64, ranks=32, instances=2, instance_type="trn1.32xlarge",
        actors=2, ray_nodes=1, model_flops_per_step=1.0e15, peak_flop_per_s=32 * 190e12, tokens_per_step=8192,
        feasible=True, reason=None, layout=RunLayout(tp=8, cp=1, pp=2, dp=2, microbatches=1),
        memory=[StageMemory(0, 8.0, 4.0, 6.0, 2.0, 0.5, 20.5, 32.0),
                StageMemory(1, 7.0, 3.5, 5.25, 2.0, 0.5, 18.25, 32.0)],
        steps=[step(0), step(1), step(2)],
        slices=make_slices(),
        collectives=[CollectiveRecord("tp", "all_reduce", 8, 1, 64 * 2**20, "ring", 1e-3, 160),
                     CollectiveRecord("dp", "reduce_scatter", 2, 2, 512 * 2**20, "ring", 0.02, 4)],
        shard_instances=[(0, 0), (1, 1)], price_per_hour_usd=PRICE, chunk_comm=CHUNKS,
        stage_comm=STAGE_COMM, stage_compute_s=STAGE_COMPUTE, slow_rank_compute_s=SLOW,
        stage_dp_exposed_s=stage_dp_exposure(make_slices(), STAGE_COMM, [1, 2], 2))


def make_infeasible() -> RunResult:
    r = make_result()
    return RunResult(scenario=r.scenario, scenario_name="tiny-test", chips=32, neuron_cores=64, ranks=32, instances=2,
                     instance_type="trn1.32xlarge", actors=0, ray_nodes=0, model_flops_per_step=1.0e15,
                     peak_flop_per_s=32 * 190e12, tokens_per_step=8192, feasible=False,
                     reason="stage 0 needs <41.2 GiB> & HBM holds 32 GiB", layout=r.layout,
                     memory=[StageMemory(0, 20, 10, 10, 1, 0.2, 41.2, 32)],
                     price_per_hour_usd=PRICE)


def test_summary_means_exclude_warmup():
    s = summarize(make_result())
    assert s["step_time_s"] == pytest.approx(1.25)
    expected = [0.65, 0.1, 0.05, 0.15, 0.1, 0.1, 0.05, 0.05]
    assert [s[k] for k in BREAKDOWN_KEYS] == pytest.approx(expected)
    assert math.fsum(s[k] for k in BREAKDOWN_KEYS) == pytest.approx(s["step_time_s"], rel=1e-12)
    assert (s["steps_measured"], s["steps_replayed"]) == (2, 3)
    assert s["hbm_peak_gib"] == 20.5 and s["feasible"] is True and s["reason"] is None


def test_summary_throughput_mfu_and_cost():
    s = summarize(make_result())
    assert s["tokens_per_s"] == pytest.approx(8192 / 1.25) == pytest.approx(6553.6)
    assert s["seq_per_s"] == pytest.approx(6.4)
    assert s["mfu"] == pytest.approx(1.0e15 / (32 * 190e12 * 1.25))
    assert s["cost_per_step_usd"] == pytest.approx(2 * 21.5 * 1.25 / 3600)
    assert s["usd_per_million_tokens"] == pytest.approx(2 * 21.5 * 1.25 / 3600 / 8192 * 1e6)
    assert s["layout"] == "tp=8 pp=2 dp=2 1f1b" and s["payload_checked"] is True
    assert all(type(s[k]) is float for k in ("step_time_s", "mfu", "tokens_per_s", *BREAKDOWN_KEYS))
    assert all(type(s[k]) is int for k in ("chips", "neuron_cores", "ranks", "tokens_per_step"))
    json.dumps(s)  # JSON-ready


def test_summary_edge_cases():
    r = replace(make_result(), steps=[step(0), step(1, checked=False)], price_per_hour_usd=None)
    s = summarize(r)
    assert s["step_time_s"] == 1.0 and s["payload_checked"] is False
    assert s["cost_per_step_usd"] is None and s["usd_per_million_tokens"] is None
    r = replace(r, steps=[step(0)])  # all warmup: mean over all steps
    assert summarize(r)["step_time_s"] == pytest.approx(3.0)


def test_summary_infeasible_is_nan_with_reason():
    s = summarize(make_infeasible())
    assert s["feasible"] is False and s["reason"].startswith("stage 0 needs")
    for k in ("step_time_s", "tokens_per_s", "mfu", "seq_per_s", "cost_per_step_usd", *BREAKDOWN_KEYS):
        assert type(s[k]) is float and math.isnan(s[k]), k
    assert s["hbm_peak_gib"] == 41.2 and s["steps_measured"] == 0 and s["payload_checked"] is False


def test_frames_columns_and_values():
    rep = build_report(make_result())
    assert isinstance(rep, Report) and len(rep.steps) == 3
    assert list(rep.breakdown.columns) == ["step", "warmup", *BREAKDOWN_KEYS, "step_time_s"]
    parts = rep.breakdown[list(BREAKDOWN_KEYS)].sum(axis=1)
    assert (parts - rep.breakdown["step_time_s"]).abs().max() < 1e-12
    assert rep.steps["payload_bytes"].tolist() == [1000, 1001, 1002]
    assert rep.memory["total_gib"].tolist() == [20.5, 18.25]
    assert rep.timeline["duration_s"].iloc[0] == pytest.approx(0.19)    # 0.2 s less its 0.01 s of tp collectives
    assert rep.summary["step_time_s"] == pytest.approx(1.25) and rep.scenario["name"] == "tiny-test"


def test_collective_bandwidths_nccl_factors():
    assert bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert bus_factor("all_gather", 4) == bus_factor("reduce_scatter", 4) == bus_factor("all_to_all", 4) == 0.75
    assert bus_factor("send_recv", 2) == 1.0
    c = build_report(make_result()).collectives
    ar, rs = c.iloc[0], c.iloc[1]
    assert ar["algbw_gb_s"] == pytest.approx(64 * 2**20 / 1e-3 / 1e9)          # 67.108864 GB/s
    assert ar["busbw_gb_s"] == pytest.approx(67.108864 * 1.75)                 # 2(n-1)/n, n = 8
    assert ar["time_us"] == pytest.approx(1000.0) and ar["time_per_step_s"] == pytest.approx(0.16)
    assert rs["busbw_gb_s"] == pytest.approx(512 * 2**20 / 0.02 / 1e9 * 0.5)   # (n-1)/n, n = 2


def test_empty_lists_keep_columns_and_dtypes():
    rep = build_report(make_infeasible())
    assert rep.steps.empty and rep.steps["step_time_s"].dtype == "float64" and rep.steps["warmup"].dtype == bool
    assert "busbw_gb_s" in rep.collectives.columns and "duration_s" in rep.timeline.columns
    assert list(rep.breakdown.columns) == ["step", "warmup", *BREAKDOWN_KEYS, "step_time_s"]
    assert len(rep.memory) == 1


def test_to_parquet_without_pyarrow_says_how(monkeypatch, tmp_path):
    rep = build_report(make_result())   # built first: pandas' own string columns may use pyarrow when present
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow` fail
    with pytest.raises(RuntimeError, match=r"pip install 'ultracluster\[parquet\]'"):
        rep.to_parquet(tmp_path)


def test_to_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    rep = build_report(make_result())
    rep.to_parquet(tmp_path / "pq")
    assert pd.read_parquet(tmp_path / "pq" / "steps.parquet")["step_time_s"].tolist() == [3.0, 1.0, 1.5]
    for name in ("ranks", "stages", "shards", "timeline", "collectives"):
        back = pd.read_parquet(tmp_path / "pq" / f"{name}.parquet")
        pd.testing.assert_frame_equal(back, getattr(rep, name), check_dtype=False)


def no_partial_overlap(trace: dict) -> list:
    """Tracks on which two slices partially overlap (the rule of report/check.py, against every slice)."""
    tracks: dict = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    bad = []
    for key, spans in tracks.items():
        for i, (a0, a1) in enumerate(spans):
            for b0, b1 in spans[i + 1:]:
                if max(a0, b0) < min(a1, b1) - 1e-6 and not (a0 <= b0 and b1 <= a1 or b0 <= a0 and a1 <= b1):
                    bad.append(key)
    return bad


def test_timeline_split_and_critical_shard():
    tl = build_report(make_result()).timeline
    assert list(tl.columns) == ["stage", "stream", "name", "start_s", "end_s", "step", "shard", "replica", "duration_s"]
    s1 = tl[tl["step"] == 1]
    # critical replica 1: stage 0 is ranks 16-23 and stage 1 ranks 24-31, both on instance 1 = shard 1
    assert set(tl["shard"]) == {1} and set(tl["replica"]) == {1}
    f0 = s1[(s1["stage"] == 0) & (s1["name"] == "F mb0 c0")].iloc[0]
    assert (f0["start_s"], f0["end_s"]) == pytest.approx((3.0, 3.19))           # 0.2 s less 0.01 s of tp
    tp = s1[(s1["stream"] == "tp") & (s1["stage"] == 0)]
    assert tp["name"].tolist() == ["collectives F mb0 c0", "collectives B mb0 c0"]
    assert tp["duration_s"].tolist() == pytest.approx([0.01, 0.02]) and tp["end_s"].iloc[0] == pytest.approx(3.2)
    pp = s1[s1["stream"] == "pp"]
    assert pp["name"].tolist() == ["send F mb0 c0", "send B mb0 c0"]           # chunk 0 forward, chunk 1 backward
    assert pp["stage"].tolist() == [0, 1] and pp["start_s"].tolist() == pytest.approx([3.2, 3.75])
    assert pp["duration_s"].tolist() == pytest.approx([0.05, 0.05])
    # the split keeps the total: compute + tp of every forward/backward equals the replay's slice
    ops = s1[s1["name"].str.match(r"^[FB] mb")]
    tp_total = s1[s1["stream"] == "tp"]["duration_s"].sum()
    assert ops["duration_s"].sum() + tp_total == pytest.approx(0.2 + 0.2 + 0.3 + 0.1)


def test_serial_exchanges_are_carved_out_of_their_ops():
    """NxD and NeMo: each exchange is part of both stages' ops (`ChunkComm.serial`): the receive opens the
    consumer's op, the send closes the producer's, on the pp track and inside the op, never after it."""
    result = replace(make_result(), chunk_comm=[replace(c, serial=True) for c in CHUNKS])
    s1 = build_report(result).timeline.query("step == 1")
    pp = s1[s1["stream"] == "pp"].sort_values("start_s")
    # step 1 spans 1 s from 3.0: stage 0's F (3.0-3.2) sends, stage 1's F (3.25-3.45) receives; stage 1's B
    # (3.45-3.75) sends back, stage 0's B (3.8-3.9) receives
    assert pp["name"].tolist() == ["send F mb0 c0", "receive F mb0 c0", "send B mb0 c0", "receive B mb0 c0"]
    assert pp["stage"].tolist() == [0, 1, 1, 0]
    assert pp["start_s"].tolist() == pytest.approx([3.15, 3.25, 3.7, 3.8])
    assert pp["end_s"].tolist() == pytest.approx([3.2, 3.3, 3.75, 3.85])
    f0 = s1[(s1["stage"] == 0) & (s1["name"] == "F mb0 c0")].iloc[0]
    assert (f0["start_s"], f0["end_s"]) == pytest.approx((3.0, 3.14))      # less the send and 0.01 s of tp
    b0 = s1[(s1["stage"] == 0) & (s1["name"] == "B mb0 c0")].iloc[0]
    assert (b0["start_s"], b0["end_s"]) == pytest.approx((3.85, 3.88))     # less the receive and 0.02 s of tp
    # the op, its collectives and its exchanges still add up to the replay's slice
    assert s1[s1["stream"].isin(["compute", "tp", "pp"]) & s1["name"].str.contains(r"[FB] mb")][
        "duration_s"].sum() == pytest.approx(0.2 + 0.2 + 0.3 + 0.1)


def test_trace_tracks_and_names():
    result = make_result()
    tr = chrome_trace(build_report(result))
    assert tr["displayTimeUnit"] == "ms"
    assert no_partial_overlap(tr) == []
    meta = {(e["pid"], e["tid"], e["name"]): e["args"] for e in tr["traceEvents"] if e["ph"] == "M"}
    assert meta[(1, 0, "process_name")] == {"name": "shard 1: instances 1-1"}
    assert meta[(2, 0, "process_name")] == {"name": "other shards (aggregated): 1 shards, 16 ranks"}
    threads = {a["name"]: tid for (pid, tid, n), a in meta.items() if n == "thread_name" and pid == 1}
    assert threads == {"storage": 1, "stage 0 compute": 2, "stage 0 tp": 3, "stage 0 pp": 4, "stage 0 dp": 5,
                       "stage 0 dp #2": 6, "stage 1 compute": 7, "stage 1 tp": 8, "stage 1 pp": 9}
    x = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    assert len(x) == 2 * (len(OPS) + 4 + 2) + 1          # slices + tp parts + sends, per step; the data stall
    first = x[0]
    assert (first["name"], first["pid"], first["tid"], first["ts"], first["dur"]) == ("F mb0 c0", 1, 2, 3e6, 1.9e5)
    assert first["args"] == {"step": 1, "stage": 0}
    b1 = [e for e in x if e["name"] == "reduce_scatter b1"]
    assert {e["tid"] for e in b1} == {6}  # the overlapping bucket moved to its own lane
    assert {e["tid"] for e in x if e["name"] == "optimizer"} == {2}  # the optimizer runs on the compute thread
    assert tr["otherData"] == {"scenario": "tiny-test", "full_shards": [1], "aggregated_shards": 1,
                               "condensed_steps": []}


def test_trace_aggregates_other_shards():
    tr = chrome_trace(build_report(make_result()))
    agg = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    by = {(e["args"]["step"], e["cat"]): e for e in agg}
    assert {s for s, _ in by} == {0, 1, 2} and {c for _, c in by} == {"compute", "tp", "dp", "idle"}
    # shard 0: ranks 0-7 on stage 0 (rank 5 at 0.75 s), ranks 8-15 on stage 1 at 0.45 s
    c1 = by[(1, "compute")]
    assert c1["dur"] == pytest.approx((7 * 0.5 + 0.75 + 8 * 0.45) / 16 * 1e6)
    assert c1["ts"] == pytest.approx(3.0e6)                 # steps start at the summed earlier step times
    assert (c1["args"]["min_s"], c1["args"]["max_s"]) == (0.45, 0.75)
    dp0 = (0.07 * 1.0 + 0.07 * 1.5) / 2     # stage 0's exposed reduction on the timeline; stage 1: the plan's
    assert by[(2, "tp")]["dur"] == pytest.approx(0.09e6)
    assert by[(2, "dp")]["dur"] == pytest.approx((dp0 + 0.1) / 2 * 1e6)


def test_trace_condenses_steps_past_the_budget(monkeypatch):
    import ultracluster.report.trace as trace_mod

    monkeypatch.setattr(trace_mod, "MAX_TRACE_SLICES", 10)
    tr = chrome_trace(build_report(make_result()))
    assert tr["otherData"]["condensed_steps"] == [1]
    x = [e for e in tr["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    step1 = [e for e in x if e["args"]["step"] == 1]
    # one slice per thread: stage 0 compute (F, B, optimizer), tp (2), pp (1), dp (2 buckets); stage 1 compute
    # (2), tp (2), pp (1)
    assert sorted(e["name"] for e in step1) == \
        ["step 1: 1 slices"] * 2 + ["step 1: 2 slices"] * 4 + ["step 1: 3 slices"]
    assert no_partial_overlap(tr) == []
    s0 = [e for e in step1 if e["args"]["stage"] == 0 and e["cat"] == "compute"][0]
    assert s0["ts"] == 3e6 and s0["dur"] == pytest.approx(1e6) and s0["args"]["slices"] == 3
    assert s0["args"]["busy_s"] == pytest.approx(0.19 + 0.08 + 0.03)
    assert len([e for e in x if e["args"]["step"] == 2]) == len(OPS) + 4 + 2 + 1   # the last step in full


def test_trace_nested_and_equal_start_slices():
    r = replace(make_result(), slices=[
        Slice(0, "compute", "B mb0", 0.0, 1.0, 1, 0), Slice(0, "compute", "matmul", 0.2, 0.4, 1, 0),
        Slice(0, "compute", "head", 0.0, 0.5, 1, 0), Slice(0, "compute", "late", 0.9, 1.1, 1, 0)])
    tr = chrome_trace(build_report(r))
    tid = {e["name"]: e["tid"] for e in tr["traceEvents"] if e["ph"] == "X"}
    assert tid["matmul"] == tid["B mb0"]          # nested: same lane
    assert tid["head"] != tid["B mb0"]            # same start, shorter: would read as a partial overlap
    assert tid["late"] == tid["head"] != tid["B mb0"]  # partial overlap with B, disjoint from head
    assert no_partial_overlap(tr) == []


def test_html_offline_escaped_with_sections():
    page = render_html(build_report(make_result()))
    assert "http://" not in page and "https://" not in page and "<script src" not in page
    assert "<title>ultracluster: tiny-test</title>" in page
    for section in ("Summary", "Step time breakdown", "Pipeline timeline", "HBM per rank", "Stages", "Slowest ranks",
                    "Collectives", "Emulation", "Scenario"):
        assert f"<h2>{section}</h2>" in page, section
    assert page.count("<svg") == 4       # interval band, breakdown, timeline, memory
    # breakdown: parts > 0 of the mean (8) and of each step (7, 6, 8); timeline of step 2: 7 + 4 tp + 2 pp
    # + 1 storage slices;
    # memory: 5 kinds x 2 stages
    assert page.count("<rect") == 8 + 7 + 6 + 8 + 14 + 10
    assert "step 2, data-parallel replica 1 (the critical one)" in page
    assert "&quot;global_batch&quot;: 8" in page
    bad = render_html(build_report(make_infeasible()))
    assert '<div class="infeasible"><b>Infeasible:</b> stage 0 needs &lt;41.2 GiB&gt; &amp; HBM holds 32 GiB' in bad
    assert "<41.2" not in bad and "no steps replayed" in bad


def test_format_summary_table():
    text = format_summary(summarize(make_result()))
    lines = text.splitlines()
    assert lines[0].split() == ["scenario", "tiny-test"]
    assert "step time    1.25 s  (2 measured of 3 replayed)" in text and "tokens/s     6,554" in text
    assert "MFU          13.2 %" in text and "32 ranks (tp=8 pp=2 dp=2 1f1b)" in text
    assert "HBM peak     20.5 GiB per rank of 32 GiB (64.1 %)" in text
    # the breakdown: exposed, share of the step, and for communication the seconds hidden behind compute
    assert re.search(r"^breakdown +exposed +share +hidden$", text, re.M)
    assert re.search(r"^  compute +650 ms +52\.0 %$", text, re.M)
    assert re.search(r"^  tp_comm +100 ms +8\.0 % +60 ms$", text, re.M)   # collectives.csv: 160 x 1 ms, 100 exposed
    assert re.search(r"^  dp_comm +150 ms +12\.0 % +0 s$", text, re.M)
    assert "$0.0149 per step, $1.82 per million tokens" in text
    assert text.splitlines()[-1].startswith("warning      no storage configured: data loading and checkpoint")
    col = lines[0].index("tiny-test")  # every top-level value starts in the same column
    assert all(line[col - 1] == " " and line[col] != " " for line in lines[:9])
    bad = format_summary(summarize(make_infeasible()))
    assert "NO: stage 0 needs <41.2 GiB>" in bad and "MFU          n/a" in bad and "compute" not in bad
    assert "HBM peak     41.2 GiB per rank of 32 GiB (129 %)" in bad


def test_reports_without_ranks_stages_or_shards_share_no_frame():
    """Each Report built without ranks/stages/shards gets its own empty frames: editing one changes no other."""
    empty = pd.DataFrame()
    a, b = (Report(empty, empty, empty, empty, empty, {}, {}) for _ in range(2))
    for name in ("ranks", "stages", "shards"):
        assert getattr(a, name) is not getattr(b, name)
        getattr(a, name)["added"] = 1
        assert "added" not in getattr(b, name).columns, name
    assert "added" not in Report(empty, empty, empty, empty, empty, {}, {}).ranks.columns


def test_reports_read_back_without_tables_share_no_frame(tmp_path):
    """Tables missing from a run directory come back empty, each report its own."""
    (tmp_path / "summary.json").write_text(json.dumps({"scenario": "x", "feasible": True}))
    a, b = Report.from_run_dir(tmp_path), Report.from_run_dir(tmp_path)
    for name, frame in a.tables():
        frame["added"] = 1
        assert "added" not in getattr(b, name).columns, name


def test_the_result_is_frozen_and_the_report_reads_its_typed_layout():
    """The RunResult is frozen once built (the runner adds the interval as a copy), and the report takes the
    degrees from its typed `layout`, never from the scenario dict (written to scenario.json, not parsed)."""
    import dataclasses

    r = make_result()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.steps = []
    blind = replace(r, scenario={**r.scenario, "parallelism": {"tp": "eight"}})
    assert summarize(blind)["layout"] == summarize(r)["layout"] == "tp=8 pp=2 dp=2 1f1b"
    assert build_report(blind).ranks.equals(build_report(r).ranks)
    assert RunLayout(tp=4, cp=2, pp=1, dp=8, ep=2, pp_schedule="1f1b").label() == "tp=4 pp=1 dp=8 cp=2 ep=2 1f1b"
