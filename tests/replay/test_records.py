"""The replay's typed result: the per-rank compute tally, the communication records, the per-stage exposure, the
slices' typed fields and the storage figures, filled by the replay and only read by the report."""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.shards.local import local_shards
from ultracluster.cluster import build_cluster
from ultracluster.emulate import emulate
from ultracluster.replay.result import Slice, StageComm, StepRecord
from ultracluster.replay.shard_steps import MergedSteps
from ultracluster.replay.records import ComputeTally, comm_records, measured_steps, stage_dp_exposure
from ultracluster.report import build_report
from ultracluster.report.summary import summarize
from ultracluster.storage import StorageFigures, estimates


def test_compute_tally_means_over_measured_steps():
    layout = SimpleNamespace(tp=2, cp=1, pp=2, dp=1)
    tally = ComputeTally(layout, microbatches=3, warmup_steps=1)

    def merged(slow, factor, fwd=(0.1, 0.2)):
        return MergedSteps(
            forward_s=np.array(fwd), backward_s=np.array([0.2, 0.4]), optimizer_s=np.array([0.05, 0.06]),
            attention_fwd_s=0.0, attention_bwd_s=0.0, group_speed=np.ones(2),
            slow_ranks=np.array(slow, dtype=np.int64), slow_factors=np.array(factor, dtype=float))

    assert tally.result() == ([], {})
    tally.add(0, merged([3], [9.0], fwd=(1.0, 1.0)))   # warm-up: left out
    tally.add(1, merged([1], [2.0]))
    tally.add(2, merged([1, 2], [1.5, 3.0]))
    base, slow = tally.result()
    assert base == pytest.approx([3 * (0.1 + 0.2) + 0.05, 3 * (0.2 + 0.4) + 0.06])
    assert slow == pytest.approx({1: 0.95 * (2.0 + 1.5) / 2, 2: 1.86 * (1 + 3.0) / 2})
    only_warm = ComputeTally(layout, 3, 5)               # every step warm-up: all of them count
    only_warm.add(0, merged([], []))
    assert only_warm.result()[0] == pytest.approx([0.95, 1.86])


def test_comm_records_per_chunk_and_stage():
    comm = SimpleNamespace(tp_fwd=np.array([0.1, 0.2, 0.3, 0.4]), tp_bwd=np.array([1.0, 2.0, 3.0, 4.0]),
                           send_fwd=np.array([0.01, 0.02, 0.03, 0.0]), send_bwd=np.array([0.0, 0.01, 0.02, 0.03]),
                           dp=np.array([5.0, 6.0]), serial_exchanges=True)
    chunks, stages = comm_records(comm, pp=2, microbatches=4, chunk_layers=[3, 4, 4, 3])
    assert all(c.serial for c in chunks)       # the trace carves the exchanges out of their ops
    assert [(c.chunk, c.stage) for c in chunks] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert chunks[2].tp_bwd_s == 3.0 and chunks[3].send_bwd_s == 0.03
    assert [s.layers for s in stages] == [7, 7]
    assert stages[0].tp_comm_s == pytest.approx(4 * (0.1 + 1.0 + 0.3 + 3.0))
    assert stages[1].pp_send_s == pytest.approx(4 * (0.02 + 0.0 + 0.01 + 0.03))
    assert [s.dp_comm_s for s in stages] == [5.0, 6.0]


def test_stage_dp_exposure_reads_the_timeline_of_measured_steps():
    def step(k: int, t0: float, tail: float) -> list[Slice]:
        return [Slice(0, "compute", "B mb0 c0", t0, t0 + 1.0, k, 0, "B", 0, 0),
                Slice(0, "dp", "gradient reduction", t0 + 0.5, t0 + 1.0 + tail, k, 0),
                Slice(0, "optimizer", "optimizer", t0 + 1.0 + tail, t0 + 1.2 + tail, k, 0),
                Slice(0, "dp", "parameter all-gather", t0 + 1.2 + tail, t0 + 1.3 + tail, k, 0),
                Slice(1, "dp", "stage 1 has no compute on the timeline", t0, t0 + 1.0, k, 0)]
    slices = step(0, 0.0, 5.0) + step(1, 10.0, 0.2) + step(2, 20.0, 0.4)
    plan = [StageComm(0, 1, 0.0, 0.0, 9.0), StageComm(1, 1, 0.0, 0.0, 0.7)]
    out = stage_dp_exposure(slices, plan, [1, 2], 3)
    assert out[0] == pytest.approx((0.2 + 0.1 + 0.4 + 0.1) / 2)     # warm-up step 0 left out
    assert out[1] == 0.7 and np.isnan(out[2])                       # no slices: the plan's; unknown: NaN
    steps = [StepRecord(i, i == 0, *[1.0] * 9, 0, 0, 0, 0, True, 0.0) for i in range(2)]
    assert [s.step for s in measured_steps(steps)] == [1] and len(measured_steps(steps[:1])) == 1


def test_the_replay_fills_a_complete_result():
    """A real replay (in-process shards): typed slices that agree with their names, every stage's exposure,
    the per-rank compute, and the storage figures the summary shows, without patching the report."""
    sc = load_scenario("scenarios/storage-checkpoint-small-fsx.yaml")
    result = emulate(sc, local_shards)
    pp = sc.parallelism.pp
    ops = [s for s in result.slices if s.kind]
    assert ops and all(s.stream == "compute" for s in ops)
    for s in ops:
        kind, mb, c = re.fullmatch(r"([FB]) mb(\d+) c(\d+)", s.name).groups()
        assert (s.kind, s.microbatch, s.chunk) == (kind, int(mb), int(c) * pp + s.stage)
    assert all(s.kind == "" and s.chunk == -1 for s in result.slices if s.stream != "compute")
    assert len(result.stage_dp_exposed_s) == pp and all(np.isfinite(result.stage_dp_exposed_s))
    assert len(result.stage_compute_s) == pp and min(result.stage_compute_s) > 0
    assert isinstance(result.storage, StorageFigures)
    alone = estimates(sc, build_cluster(sc, 1))      # its figures, less the capacity's words (reason, warnings)
    assert result.storage.summary_keys() == {k: v for k, v in alone.items() if v is not None
                                             and k not in ("capacity_reason", "capacity_warning")}
    assert alone["capacity_reason"] is None and alone["capacity_warning"] is None
    assert result.storage.checkpoint_write_s > 0
    report = build_report(result)
    assert report.summary == summarize(result) and report.storage is result.storage
    assert report.summary["checkpoint_gb"] == result.storage.checkpoint_gb
    assert report.stages["dp_comm_s"].tolist() == pytest.approx(result.stage_dp_exposed_s)
