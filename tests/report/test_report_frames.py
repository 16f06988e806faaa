"""Synthetic RunResult → summary, Report frames, trace, HTML and terminal table: exact values (no Ray)."""
from __future__ import annotations

import json
import math
import sys

import pandas as pd
import pytest

from ultracluster.replay.events import (
    BREAKDOWN_KEYS, CollectiveRecord, RunResult, Slice, StageMemory, StepRecord,
)
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


def make_slices() -> list[Slice]:
    out = []
    for st, t0 in ((1, 3.0), (2, 4.0)):
        out += [Slice(0, "compute", "F mb0", t0, t0 + 0.2, st, 0),
                Slice(1, "compute", "F mb0", t0 + 0.25, t0 + 0.45, st, 1),
                Slice(1, "compute", "B mb0", t0 + 0.45, t0 + 0.85, st, 1),
                Slice(0, "compute", "B mb0", t0 + 0.9, t0 + 1.3, st, 0),
                Slice(0, "tp", "all_reduce attn", t0 + 0.05, t0 + 0.1, st, 0),
                Slice(1, "pp", "send act", t0 + 0.2, t0 + 0.25, st, 1),
                # two gradient buckets in flight at once: a partial overlap on the dp stream of stage 0
                Slice(0, "dp", "reduce_scatter b0", t0 + 1.0, t0 + 1.2, st, 0),
                Slice(0, "dp", "reduce_scatter b1", t0 + 1.1, t0 + 1.4, st, 0),
                Slice(0, "optimizer", "optimizer", t0 + 1.4, t0 + 1.45, st, 0)]
    return out


def make_result() -> RunResult:
    return RunResult(
        scenario={"name": "tiny-test", "training": {"global_batch": 8, "seq_len": 1024},
                  "parallelism": {"tp": 8, "pp": 2, "dp": 2, "cp": 1, "pp_schedule": "1f1b"},
                  "cluster": {"instance": "trn1.32xlarge", "instances": 2}},
        scenario_name="tiny-test", chips=32, neuron_cores=64, ranks=32, instances=2, instance_type="trn1.32xlarge",
        actors=2, ray_nodes=1, model_flops_per_step=1.0e15, peak_flop_per_s=32 * 190e12, tokens_per_step=8192,
        feasible=True, reason=None,
        memory=[StageMemory(0, 8.0, 4.0, 6.0, 2.0, 0.5, 20.5, 32.0),
                StageMemory(1, 7.0, 3.5, 5.25, 2.0, 0.5, 18.25, 32.0)],
        steps=[step(0), step(1), step(2)],
        slices=make_slices(),
        collectives=[CollectiveRecord("tp", "all_reduce", 8, 1, 64 * 2**20, "ring", 1e-3, 160),
                     CollectiveRecord("dp", "reduce_scatter", 2, 2, 512 * 2**20, "ring", 0.02, 4)],
        shard_instances=[(0, 0), (1, 1)], price_per_hour_usd=PRICE)


def make_infeasible() -> RunResult:
    r = make_result()
    return RunResult(scenario=r.scenario, scenario_name="tiny-test", chips=32, neuron_cores=64, ranks=32, instances=2,
                     instance_type="trn1.32xlarge", actors=0, ray_nodes=0, model_flops_per_step=1.0e15,
                     peak_flop_per_s=32 * 190e12, tokens_per_step=8192, feasible=False,
                     reason="stage 0 needs <41.2 GiB> & HBM holds 32 GiB",
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
    r = make_result()
    r.steps, r.price_per_hour_usd = [step(0), step(1, checked=False)], None
    s = summarize(r)
    assert s["step_time_s"] == 1.0 and s["payload_checked"] is False
    assert s["cost_per_step_usd"] is None and s["usd_per_million_tokens"] is None
    r.steps = [step(0)]  # all warmup: mean over all steps
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
    assert rep.timeline["duration_s"].iloc[0] == pytest.approx(0.2)
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
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow` fail
    with pytest.raises(RuntimeError, match=r"pip install 'ultracluster\[parquet\]'"):
        build_report(make_result()).to_parquet(tmp_path)


def test_to_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    build_report(make_result()).to_parquet(tmp_path / "pq")
    assert pd.read_parquet(tmp_path / "pq" / "steps.parquet")["step_time_s"].tolist() == [3.0, 1.0, 1.5]


def no_partial_overlap(trace: dict) -> list:
    """Tracks on which two slices partially overlap (same rule as check-run-dir, against every slice)."""
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


def test_trace_tracks_and_names():
    result = make_result()
    tr = chrome_trace(build_report(result))
    assert tr == chrome_trace(result) and tr["displayTimeUnit"] == "ms"
    assert no_partial_overlap(tr) == []
    meta = {(e["pid"], e["tid"], e["name"]): e["args"] for e in tr["traceEvents"] if e["ph"] == "M"}
    assert meta[(0, 0, "process_name")] == {"name": "shard 0: instances 0-0"}
    assert meta[(1, 0, "process_name")] == {"name": "shard 1: instances 1-1"}
    threads = {a["name"]: tid for (pid, tid, n), a in meta.items() if n == "thread_name"}
    assert threads == {"stage 0 compute": 1, "stage 0 tp": 2, "stage 0 dp": 3, "stage 0 dp #2": 4,
                       "stage 0 optimizer": 5, "stage 1 compute": 6, "stage 1 pp": 7}
    x = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len(x) == len(result.slices)
    first = x[0]
    assert (first["name"], first["pid"], first["tid"], first["ts"], first["dur"]) == ("F mb0", 0, 1, 3e6, 2e5)
    assert first["args"] == {"step": 1, "stage": 0}
    b1 = [e for e in x if e["name"] == "reduce_scatter b1"]
    assert {e["tid"] for e in b1} == {4}  # the overlapping bucket moved to its own lane


def test_trace_nested_and_equal_start_slices():
    r = make_result()
    r.slices = [Slice(0, "compute", "B mb0", 0.0, 1.0, 1, 0), Slice(0, "compute", "matmul", 0.2, 0.4, 1, 0),
                Slice(0, "compute", "head", 0.0, 0.5, 1, 0), Slice(0, "compute", "late", 0.9, 1.1, 1, 0)]
    tr = chrome_trace(r)
    tid = {e["name"]: e["tid"] for e in tr["traceEvents"] if e["ph"] == "X"}
    assert tid["matmul"] == tid["B mb0"]          # nested: same lane
    assert tid["head"] != tid["B mb0"]            # same start, shorter: would read as a partial overlap
    assert tid["late"] == tid["head"] != tid["B mb0"]  # partial overlap with B, disjoint from head
    assert no_partial_overlap(tr) == []


def test_html_offline_escaped_with_sections():
    page = render_html(build_report(make_result()))
    assert "http://" not in page and "https://" not in page
    assert "<title>ultracluster: tiny-test</title>" in page
    assert page.count("<svg") == 2 and page.count("<rect") == 7 + 6 + 8 + 9  # parts > 0 per step + step-2 slices
    assert "&quot;global_batch&quot;: 8" in page
    bad = render_html(build_report(make_infeasible()))
    assert '<div class="infeasible"><b>Infeasible:</b> stage 0 needs &lt;41.2 GiB&gt; &amp; HBM holds 32 GiB' in bad
    assert "<41.2" not in bad and "no steps replayed" in bad


def test_format_summary_table():
    text = format_summary(summarize(make_result()))
    lines = text.splitlines()
    assert lines[0].split() == ["scenario", "tiny-test"]
    assert "1.2500 s  (2 measured of 3 replayed)" in text and "6,554" in text
    assert "MFU           13.16 %" in text and "32 ranks (tp=8 pp=2 dp=2 1f1b)" in text
    assert "  compute       0.6500 s   52.0 %" in text and "  dp_comm       0.1500 s   12.0 %" in text
    assert "$0.0149 per step, $1.8226 per million tokens" in text
    col = lines[0].index("tiny-test")  # every top-level value starts in the same column
    assert all(line[col - 1] == " " and line[col] != " " for line in lines[:9])
    bad = format_summary(summarize(make_infeasible()))
    assert "NO: stage 0 needs <41.2 GiB>" in bad and "MFU          n/a" in bad and "compute" not in bad
