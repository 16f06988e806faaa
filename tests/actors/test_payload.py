"""The gradient payload is reduced between shards with real bytes and equals the exact sum everywhere."""
import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.shards.local import LocalShards
from ultracluster.shards.worker import payload, payload_elements
from ultracluster.cluster import build_cluster


def scenario(instances=3, scale=1e-4):
    return load_scenario({
        "name": "payload-test", "model": {"preset": "llama2-7b", "layers": 4},
        "training": {"seq_len": 1024, "global_batch": 96, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": 32},
        "cluster": {"instance": "trn1.32xlarge", "instances": instances},
        "emulation": {"instances_per_actor": 1, "payload_scale": scale},
    })


def exact_sum(sc, cl, step):
    n = payload_elements(sc, cl)
    return sum(payload(sc.seed, s.index, step, n) for s in cl.shards)


def test_local_ring_gives_every_shard_the_exact_sum():
    sc = scenario()
    cl = build_cluster(sc, 1)
    shards = LocalShards(sc, cl)
    moved, ok = shards.reduce_payload(step=5)
    assert ok
    want = exact_sum(sc, cl, 5)
    for w in shards.workers:
        np.testing.assert_array_equal(w._payload, want)
    n, k = payload_elements(sc, cl), len(cl.shards)
    # ring all-reduce: 2(k-1) rounds, each shard sends one chunk per round: 2(k-1)/k of the buffer each
    assert moved == pytest.approx(2 * (k - 1) * n * 8, rel=0.01)


def test_a_corrupted_segment_is_caught():
    sc = scenario()
    cl = build_cluster(sc, 1)
    shards = LocalShards(sc, cl)
    shards.reduce_payload(step=0)
    shards.workers[1]._payload[0] += 1
    assert not shards.workers[1].check_payload()
    assert shards.workers[0].check_payload()


def test_payload_size_follows_the_scale():
    sc_small, sc_big = scenario(scale=1e-6), scenario(scale=1e-4)
    cl = build_cluster(sc_small, 1)
    assert payload_elements(sc_big, cl) == pytest.approx(100 * payload_elements(sc_small, cl), rel=0.01)


def test_ray_actors_reduce_real_bytes(ray_session):
    from ultracluster.actors.launch import launch_actors

    sc = scenario()
    cl = build_cluster(sc, 1)
    with launch_actors(sc, cl) as shards:
        moved, ok = shards.reduce_payload(step=2)
        assert ok
        assert moved > 0
        ref = ray_session.get(shards.actors[2].check_payload.remote())
        assert ref is True
        assert shards.nodes == 1
