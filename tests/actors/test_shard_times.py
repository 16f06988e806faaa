"""Actors carry their share: each shard times the pipeline stages it runs the replica-0 ranks of, and the driver
composes the step only from what the shards report (chunk and optimizer times, hardware FLOPs, the unnamed
residual, the matmuls that hide the tensor-parallel collectives); it times no chunk itself."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest

from ultracluster import chip, load_scenario
from ultracluster.shards.local import LocalShards, local_shards
from ultracluster.cluster import build_cluster
from ultracluster.calibration.fitted_files import fitted
from ultracluster.emulate import emulate
from ultracluster.errors import ActorError
from ultracluster.runner import predict
from ultracluster.replay.shard_steps import merge_stage_times
from ultracluster.report.summary import summarize

# a residual per layer pass and TP collectives hidden behind backward matmuls: both reach the summary only
# through what the shards report (residual_s, hfu, tp_comm_s)
CALIBRATION = replace(fitted(), layer_overhead_s=2e-4, tp_overlap=True)


def scenario(instances_per_actor, pp=4, instances=4, tp=32, layers=8, **parallelism):
    return load_scenario({
        "name": "prices-test", "model": {"preset": "llama2-7b", "layers": layers},
        "training": {"seq_len": 2048, "global_batch": 4 * instances // pp, "steps": 2, "warmup_steps": 1},
        "parallelism": {"tp": tp, "pp": pp, "tp_comm_overlap": True, **parallelism},
        "cluster": {"instance": "trn1.32xlarge", "instances": instances},
        "faults": {"jitter": 0.02, "stragglers": {"fraction": 0.02, "slowdown": 1.5}},
        "emulation": {"instances_per_actor": instances_per_actor},
    })


def numbers(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if isinstance(v, (int, float)) and k != "ray_nodes"}


def stage_sets(states) -> list[list[int]]:
    return [s.stage_times.stages.tolist() for s in states]


@pytest.mark.parametrize("per_actor, pp, instances, extra, want", [
    (1, 4, 4, {}, [[0], [1], [2], [3]]),                          # one stage per shard: each times its own
    (2, 4, 4, {}, [[0, 1], [2, 3]]),                              # two stages per shard
    (4, 4, 4, {}, [[0, 1, 2, 3]]),                                # folded into one shard: it times all
    (1, 2, 4, {}, [[0], [1], [], []]),                            # dp 2: the replica-0 shards time
    (1, 2, 2, {"virtual_stages": 2, "pp_schedule": "interleaved"}, [[0], [1]]),   # chunks 0, 2 and 1, 3
])
def test_each_stage_is_timed_by_one_shard_and_the_parts_are_the_full_table(per_actor, pp, instances, extra, want):
    sc = scenario(per_actor, pp, instances, **extra)
    cl = build_cluster(sc, per_actor, CALIBRATION)
    states = LocalShards(sc, cl).states()
    assert stage_sets(states) == want
    lay = cl.layout
    for s in states:
        p = s.stage_times
        assert p.chunks.tolist() == [c for c in range(lay.pp * lay.virtual_stages) if c % lay.pp in want[s.shard]]
        assert p.forward_s.size == p.flops_per_microbatch.size == p.residual_s.size == p.chunks.size
    merged = merge_stage_times([s.stage_times for s in states], lay.pp, lay.pp * lay.virtual_stages)
    full = chip.chunk_times(sc, cl)
    for field in ("forward_s", "backward_s", "optimizer_s", "flops_per_microbatch", "residual_s", "tp_hide_bwd_s"):
        np.testing.assert_array_equal(getattr(merged, field), getattr(full, field), err_msg=field)
    assert (merged.attention_fwd_s, merged.attention_bwd_s) == (full.attention_fwd_s, full.attention_bwd_s)
    assert merged.residual_fraction() == full.residual_fraction() > 0


def test_only_the_timing_shards_run_the_chip_model_and_the_driver_runs_it_never(monkeypatch):
    sc = scenario(1, pp=2, instances=4)                   # 4 shards, 2 of them replica 0's evaluators
    want = predict(sc, CALIBRATION)
    calls = []
    real = chip.chunk_times

    def counted(*args, **kw):
        calls.append(args[1].layout.pp)
        return real(*args, **kw)

    monkeypatch.setattr(chip, "chunk_times", counted)
    got = summarize(emulate(sc, local_shards, calibration=CALIBRATION))
    assert len(calls) == 2                                 # shards 0 and 1, once each; shards 2, 3 and the driver: 0
    assert numbers(got) == numbers(want) and got["residual_s"] > 0


def test_the_merge_names_a_stage_no_shard_timed_or_two_did_and_shards_that_disagree():
    sc = scenario(1)
    cl = build_cluster(sc, 1, CALIBRATION)
    parts = [s.stage_times for s in LocalShards(sc, cl).states()]
    with pytest.raises(ValueError, match=r"stage times do not cover every pipeline stage.*timed pipeline stage \[2\]"):
        merge_stage_times(parts[:2] + parts[3:], 4, 4)
    with pytest.raises(ValueError, match=r"stage times overlap: pipeline stage \[1\]"):
        merge_stage_times(parts + [parts[1]], 4, 4)
    other = replace(parts[3], tp_hide_bwd_s=parts[3].tp_hide_bwd_s * 2)
    with pytest.raises(ValueError, match=r"disagree on one layer's kernels: stages \[0\] and \[3\]"):
        merge_stage_times(parts[:3] + [other], 4, 4)


def test_ray_actors_time_their_own_stages_and_give_the_in_process_summary(ray_session, monkeypatch):
    """Four real actors on the session's Ray, one stage each; the driver's chip model is switched off (any call
    fails), so every number of the summary comes from what the actors timed, and equals the in-process run."""
    from ultracluster.actors.launch import launch_actors

    sc = scenario(1)
    alone = predict(sc, CALIBRATION)
    seen = []

    @contextmanager
    def actors(scenario_, cluster):
        with launch_actors(scenario_, cluster) as shards:
            seen.append(stage_sets(shards.states()))
            seen.append(ray_session.get([a.__ray_call__.remote(lambda self: self._stage_times.stages.tolist())
                                         for a in shards.actors]))
            yield shards

    def no_timing(*args, **kw):
        raise AssertionError("the driver priced a chunk")

    monkeypatch.setattr(chip, "chunk_times", no_timing)
    monkeypatch.setattr(chip, "tp_hide_seconds", no_timing)
    result = emulate(sc, actors, calibration=CALIBRATION)
    got = summarize(result)
    assert result.actors == 4 and seen == [[[0], [1], [2], [3]]] * 2
    assert got["residual_s"] > 0 and got["hfu"] > got["mfu"] and got["payload_checked"]
    want = numbers(alone)
    assert set(numbers(got)) == set(want)
    for k, v in want.items():
        assert numbers(got)[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_an_actor_that_dies_before_it_reports_its_prices_ends_the_run_naming_its_shard(ray_session):
    from ultracluster.actors.launch import launch_actors

    sc = scenario(1)

    @contextmanager
    def kill_shard_1(scenario_, cluster):
        with launch_actors(scenario_, cluster) as shards:
            ray_session.kill(shards.actors[1])
            yield shards

    with pytest.raises(ActorError) as err:
        emulate(sc, kill_shard_1, calibration=CALIBRATION)
    msg = str(err.value)
    assert msg.startswith("the actor for shard 1 (instances 1-1) died") and "ray.kill" in msg and "\n" not in msg
