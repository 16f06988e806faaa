"""ZeRO-1 bucketed gradient reduction overlapped with backward; context-parallel ring; jitter; stragglers."""
import math
import statistics

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.speed_draws import group_jitter
from ultracluster.runner import predict
from ultracluster.replay.engine import StepComm, ComputeTimes, cp_exposed, gradient_reduction
from ultracluster.replay.schedule import execute, stage_programs


def plan(buckets, bucket_s, pp=1, after=0.0):
    n = len(buckets)
    return StepComm(tp_fwd=np.zeros(n), tp_bwd=np.zeros(n), send_fwd=np.zeros(n), send_bwd=np.zeros(n),
                    dp=np.zeros(pp), records=[], dp_bucket_s=np.array(bucket_s, float),
                    dp_buckets=np.array(buckets), dp_after_s=np.full(pp, after))


def test_bucket_queue_by_hand():
    # one stage, m = 2, F = 1, B = 2: the last backward B1 runs 4-6 (F0 0-1, F1 1-2, B0 2-4 under gpipe).
    # 4 buckets become ready at 4.5, 5, 5.5, 6 and take 0.75 s each: 4.5-5.25, 5.25-6, 6-6.75, 6.75-7.5.
    ex = execute(stage_programs("gpipe", 1, 2), np.ones((1, 1)), 2 * np.ones((1, 1)), np.zeros(1), np.zeros(1))
    end, hidden = gradient_reduction(ex, plan([4], [0.75]), pp=1, m=2)
    assert end[0] == pytest.approx(7.5)
    assert hidden[0] == pytest.approx(3.0 - 1.5)      # 3 s of reduction, 1.5 s of it after backward ended
    # fast buckets (0.1 s): each finishes before the next is ready; only the last one sticks out
    end, hidden = gradient_reduction(ex, plan([4], [0.1]), pp=1, m=2)
    assert end[0] == pytest.approx(6.1) and hidden[0] == pytest.approx(0.3)


def test_replicas_wait_for_the_slowest():
    fwd = np.array([[1.0], [1.5]])
    ex = execute(stage_programs("gpipe", 1, 1), fwd, 2 * fwd, np.zeros(1), np.zeros(1))
    end, _ = gradient_reduction(ex, plan([1], [0.5]), pp=1, m=1)
    assert end[0] == pytest.approx(1.5 + 3.0 + 0.5)


def test_context_parallel_ring_hides_behind_attention():
    prof = ComputeTimes(fwd=np.zeros((1, 1)), bwd=np.zeros((1, 1)), opt=np.zeros(1), attn_fwd=0.4, attn_bwd=1.0,
                          slowest_rank=-1)
    c = plan([1], [0.0])
    slow = StepComm(**{**c.__dict__, "cp_block_fwd_s": 0.15, "cp_block_bwd_s": 0.2})
    f, b = cp_exposed(slow, prof, cp=4)          # block attention 0.1 fwd, 0.25 bwd
    assert f == pytest.approx(3 * 0.05) and b == 0.0
    assert cp_exposed(slow, prof, cp=1) == (0.0, 0.0)


def test_group_maximum():
    u = np.random.default_rng([3, 0, 0x717]).random(4)           # the step's stream: factor g = exp(sigma Phi^-1(U))
    want = [math.exp(0.05 * statistics.NormalDist().inv_cdf(x)) for x in u]
    assert group_jitter(3, 0, (4,), 1, 0.05) == pytest.approx(want, rel=1e-12)
    one = group_jitter(3, 0, (200_000,), 1, 0.05)
    assert np.mean(np.log(one)) == pytest.approx(0.0, abs=1e-3)
    assert np.std(np.log(one)) == pytest.approx(0.05, rel=0.02)
    # the max of 32 standard normals has mean about 2.07
    many = group_jitter(3, 0, (200_000,), 32, 0.05)
    assert np.mean(np.log(many)) / 0.05 == pytest.approx(2.07, abs=0.02)
    assert np.array_equal(group_jitter(3, 7, (4, 4), 8, 0.01), group_jitter(3, 7, (4, 4), 8, 0.01))
    assert not np.array_equal(group_jitter(3, 7, (4, 4), 8, 0.01), group_jitter(3, 8, (4, 4), 8, 0.01))


BASE = {"name": "ovl", "model": {"preset": "llama2-7b", "layers": 8},
        "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": 8, "pp": 2}, "cluster": {"instance": "trn1.32xlarge", "instances": 4},
        "faults": {"jitter": 0.0}}


def test_zero1_reduction_hides_behind_backward_only_with_bucketed_overlap():
    from ultracluster.shards.local import local_shards
    from ultracluster.calibration.fitted_files import DEFAULT
    from ultracluster.emulate import emulate
    bucketed = DEFAULT.with_(dp_overlap=True)
    rec = emulate(load_scenario(BASE), local_shards, calibration=bucketed).steps[-1]
    assert rec.dp_comm_hidden_s > 0                       # part of the reduce-scatter ran behind backward
    # the exposed part (summary/breakdown) is what sticks out after the pipeline, plus the all-gather
    assert predict(load_scenario(BASE), bucketed)["dp_comm_s"] == pytest.approx(rec.dp_comm_s)
    no_zero = emulate(load_scenario({**BASE, "training": {**BASE["training"], "zero1": False}}), local_shards,
                      calibration=bucketed)
    assert no_zero.steps[-1].dp_comm_hidden_s > 0
    # as the XLA stacks run it (the default): the reduction starts when the stage's last backward is done
    after = emulate(load_scenario(BASE), local_shards).steps[-1]
    assert after.dp_comm_hidden_s == pytest.approx(0.0, abs=1e-12)
    assert after.dp_comm_s > rec.dp_comm_s


def test_stragglers_cost_is_reported_and_jitter_slows_a_little():
    from ultracluster.shards.local import local_shards
    from ultracluster.emulate import emulate
    slow = {**BASE, "faults": {"jitter": 0.0, "stragglers": {"fraction": 0.02, "slowdown": 1.5}}}
    rec = emulate(load_scenario(slow), local_shards).steps[-1]
    base = emulate(load_scenario(BASE), local_shards).steps[-1]
    assert rec.straggler_cost_s == pytest.approx(rec.step_time_s - base.step_time_s, rel=1e-9)
    assert rec.straggler_cost_s > 0
    jit = emulate(load_scenario({**BASE, "faults": {"jitter": 0.02}}), local_shards).steps[-1]
    assert base.step_time_s < jit.step_time_s < 1.15 * base.step_time_s
