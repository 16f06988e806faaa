"""The replay engine on uniform stages and with one straggler, against hand arithmetic."""
from contextlib import contextmanager

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.replay.engine import StepComm, replay_steps
from ultracluster.replay.shard_steps import (ShardStep, ShardState, StageTimes, merge_states, timed_stages,
                                         stage_chunks)
from ultracluster.replay.schedule import stage_programs

F, B, OPT = 0.2, 0.45, 0.01


def scenario(pp=4, gb=8, schedule="1f1b"):
    return load_scenario({
        "name": "engine-test", "model": {"layers": 8, "hidden": 1024, "heads": 8, "ffn": 4096, "mlp": "swiglu", "vocab": 32000},
        "training": {"seq_len": 1024, "global_batch": gb, "steps": 2, "warmup_steps": 0},
        "parallelism": {"tp": 8, "pp": pp, "pp_schedule": schedule},
        "cluster": {"instance": "trn1.32xlarge", "instances": 1},
        "faults": {"jitter": 0.0},       # closed forms need identical ranks
    })


class UniformShards:
    """Every rank takes F and B per microbatch; `slow` maps global rank -> slowdown."""

    def __init__(self, cluster, slow=None):
        self.cluster, self.slow, self.nodes = cluster, slow or {}, 1

    def _groups(self, sh):
        size = self.cluster.layout.tp * self.cluster.layout.cp
        return sh.first_rank // size, (sh.first_rank + sh.ranks - 1) // size

    def states(self):
        lay = self.cluster.layout
        chunks = lay.pp * lay.virtual_stages
        out = []
        for sh in self.cluster.shards:
            mine = sorted(r for r in self.slow if sh.first_rank <= r < sh.first_rank + sh.ranks)
            stages = timed_stages(lay, sh.first_rank, sh.ranks)
            ids = stage_chunks(stages, lay.pp, chunks)
            times = StageTimes(stages=stages, chunks=ids, forward_s=np.full(ids.size, F),
                               backward_s=np.full(ids.size, B), optimizer_s=np.full(stages.size, OPT),
                               flops_per_microbatch=np.zeros(ids.size), residual_s=np.zeros(ids.size),
                               attention_fwd_s=0.0, attention_bwd_s=0.0, tp_hide_bwd_s=np.zeros(0))
            out.append(ShardState(shard=sh.index, first_instance=sh.first_instance, instances=sh.instances,
                                  stage_times=times, slow_ranks=np.array(mine, dtype=np.int64),
                                  slow_factors=np.array([self.slow[r] for r in mine], dtype=float)))
        return out

    def merged(self):
        lay = self.cluster.layout
        return merge_states(self.states(), lay.pp, lay.pp * lay.virtual_stages, self.cluster.instances)

    def shard_steps(self, step):
        out = []
        for sh in self.cluster.shards:
            first, last = self._groups(sh)
            out.append(ShardStep(shard=sh.index, first_group=first, group_speed=np.ones(last - first + 1)))
        return out

    def reduce_payload(self, step):
        return 0, True


def comm(pp, tp_f=0.0, tp_b=0.0, send=0.0, dp=0.0):
    return StepComm(tp_fwd=np.full(pp, tp_f), tp_bwd=np.full(pp, tp_b), send_fwd=np.full(pp, send),
                    send_bwd=np.full(pp, send), dp=np.full(pp, dp), records=[], dp_after_s=np.full(pp, dp))


def replay(sc, plan, slow=None):
    cl = build_cluster(sc, 1)
    m = sc.training.global_batch // (sc.parallelism.dp * sc.training.micro_batch)
    progs = stage_programs(sc.parallelism.pp_schedule, cl.layout.pp, m, cl.layout.virtual_stages)
    shards = UniformShards(cl, slow)
    steps, slices = replay_steps(sc, cl, shards, shards.merged(), plan, progs)
    return steps, slices, m


def test_homogeneous_1f1b_equals_closed_form_with_comm_terms():
    sc = scenario()
    p = sc.parallelism.pp
    tf, tb, dp = 0.03, 0.05, 0.2
    steps, _, m = replay(sc, comm(p, tp_f=tf, tp_b=tb, dp=dp))
    s = steps[-1]
    expect = (m + p - 1) * (F + B + tf + tb) + dp + OPT
    assert s.step_time_s == pytest.approx(expect, rel=1e-9)
    assert s.compute_s == pytest.approx(m * (F + B) + OPT, rel=1e-9)
    assert s.tp_comm_s == pytest.approx(m * (tf + tb), rel=1e-9)
    assert s.bubble_s == pytest.approx((p - 1) * (F + B + tf + tb), rel=1e-9)
    assert s.dp_comm_s == pytest.approx(dp) and s.pp_comm_s == 0.0
    assert sum(s.breakdown().values()) == pytest.approx(s.step_time_s, rel=1e-12)


def test_sends_show_as_exposed_pp_comm():
    sc = scenario(pp=2)              # tp 8, pp 2 on 32 ranks: dp 2, m = 8 / 2 = 4
    steps, _, m = replay(sc, comm(2, send=0.05))
    s = steps[-1]
    # By hand (F=.2, B=.45, c=.05): stage 1 runs F0 .25-.45, B0 .45-.9; stage 0 B0 .95-1.4, F2 1.4-1.6,
    # B1 1.6-2.05 (gradient ready 1.55+.05), F3 2.05-2.25, B2 2.35-2.8 (ready 2.3+.05), B3 3.0-3.45
    # (ready 2.95+.05). Without sends the pipeline takes (m+p-1)(F+B) = 3.25.
    assert m == 4
    assert s.step_time_s == pytest.approx(3.45 + OPT, rel=1e-9)
    assert s.pp_comm_s == pytest.approx(0.2, rel=1e-9)
    assert s.bubble_s == pytest.approx(3.25 - m * (F + B), rel=1e-9)
    assert sum(s.breakdown().values()) == pytest.approx(s.step_time_s, rel=1e-12)


def test_one_straggler_slows_its_stage_and_the_step():
    sc = scenario(pp=2, gb=6)        # dp 2, m = 3
    k = 1.5
    slow_rank = 1 * 8 + 3            # replica 0, stage 1 (tp=8 ranks per stage), tensor-parallel rank 3
    steps, _, m = replay(sc, comm(2), slow={slow_rank: k})
    s = steps[-1]
    # By hand: stage 1 becomes the bottleneck and never idles once it starts: it starts after stage 0's
    # first forward F, runs m microbatches of k(F+B), then stage 0 runs the last backward B and its own
    # optimizer step (stage 1's slower optimizer, k x OPT, finishes earlier: B > (k - 1) OPT).
    assert m == 3
    assert s.step_time_s == pytest.approx(F + m * k * (F + B) + B + OPT, rel=1e-9)
    assert s.critical_stage == 0
    assert s.slowest_rank == slow_rank
    assert s.critical_replica == 0
    fast, _, _ = replay(sc, comm(2))
    assert fast[-1].step_time_s == pytest.approx((m + 1) * (F + B) + OPT, rel=1e-9)


def test_trace_slices_cover_every_op_of_the_critical_replica():
    sc = scenario(pp=4)
    steps, slices, m = replay(sc, comm(4, dp=0.1))
    compute = [x for x in slices if x.stream == "compute" and x.step == 1]
    assert len(compute) == 4 * 2 * m
    assert max(x.end_s for x in compute) == pytest.approx(steps[0].step_time_s + (m + 3) * (F + B), rel=1e-9)


def test_storage_costs_add_to_the_step_and_its_breakdown():
    sc = scenario(pp=2)
    cl = build_cluster(sc, 1)
    m = 4
    progs = stage_programs("1f1b", 2, m)
    seen = []

    def costs(step, busy):
        seen.append(busy)
        return (0.3, 0.0) if step == 0 else (0.0, 1.5)

    shards = UniformShards(cl)
    steps, slices = replay_steps(sc, cl, shards, shards.merged(), comm(2), progs, step_costs=costs)
    base = (m + 1) * (F + B) + OPT
    assert seen == pytest.approx([base, base], rel=1e-9)
    assert steps[0].step_time_s == pytest.approx(base + 0.3) and steps[0].data_stall_s == 0.3
    assert steps[1].step_time_s == pytest.approx(base + 1.5) and steps[1].checkpoint_s == 1.5
    for s in steps:
        assert sum(s.breakdown().values()) == pytest.approx(s.step_time_s, rel=1e-12)
    storage = [x for x in slices if x.stream == "storage"]
    assert [(x.name, x.step) for x in storage] == [("data stall", 0), ("checkpoint", 1)]
    first_f = min(x.start_s for x in slices if x.stream == "compute" and x.step == 0)
    assert first_f == pytest.approx(0.3)
