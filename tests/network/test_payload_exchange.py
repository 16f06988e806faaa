"""The scaled gradient payload moves between shards in the steps of the DP group's algorithm and every
shard ends with the exact sum (integer-valued float64, so every order of additions is exact)."""
import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.shards.local import LocalShards
from ultracluster.shards.worker import payload, payload_algorithm, payload_elements
from ultracluster.cluster import build_cluster


def scenario(instances=4, tp=32, scale=1e-5, instance="trn1.32xlarge"):
    return load_scenario({
        "name": "payload-exchange", "model": {"preset": "llama2-7b", "layers": 2},
        "training": {"seq_len": 1024, "global_batch": 8 * instances, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": tp},
        "cluster": {"instance": instance, "instances": instances},
        "emulation": {"instances_per_actor": 1, "payload_scale": scale},
    })


def exact(sc, cl, step):
    n = payload_elements(sc, cl)
    return sum(payload(sc.seed, s.index, step, n) for s in cl.shards)


@pytest.mark.parametrize("algorithm, shards", [("ring", 3), ("ring", 4), ("rdh", 4), ("rdh", 8), ("mesh", 3),
                                               ("mesh", 4)])
def test_every_algorithm_gives_every_shard_the_exact_sum(algorithm, shards):
    sc = scenario(instances=shards)
    cl = build_cluster(sc, 1)
    local = LocalShards(sc, cl)
    local._algorithm = algorithm
    moved, ok = local.reduce_payload(step=3)
    assert ok
    want = exact(sc, cl, 3)
    for w in local.workers:
        np.testing.assert_array_equal(w._payload, want)
    # an all-reduce moves 2(p-1)/p of the buffer out of every participant, whatever the algorithm
    n = payload_elements(sc, cl)
    assert moved == pytest.approx(2 * (shards - 1) * n * 8, rel=0.02)


def test_the_exchange_follows_the_models_choice_for_the_dp_group():
    sc = scenario(instances=4)
    cl = build_cluster(sc, 1)
    from ultracluster.network import collective_time, group_of
    lay = cl.layout
    per_rank = payload_elements(sc, cl) * 8 / sc.emulation.payload_scale / (lay.tp * lay.pp)
    name = collective_time(cl, "all_reduce", per_rank, group_of(cl, lay.dp, lay.tp * lay.pp))[1]
    assert payload_algorithm(sc, cl) == ("ring" if name in ("ring", "kangaring") else name)
    assert payload_algorithm(scenario(instances=3), build_cluster(scenario(instances=3), 1)) in ("ring", "mesh")
    single = scenario(instances=1)
    assert payload_algorithm(single, build_cluster(single, 1)) == "ring"       # one shard: nothing to exchange


def test_a_corrupted_message_fails_the_receivers_check():
    sc = scenario(instances=4)
    cl = build_cluster(sc, 1)
    local = LocalShards(sc, cl)
    local._algorithm = "rdh"
    sender = local.workers[2]
    honest = sender.send_segments
    sender.send_segments = lambda k, dst: honest(k, dst) + (1.0 if k == 0 else 0.0)
    _, ok = local.reduce_payload(step=0)
    assert not ok
    assert not all(w.check_payload() for w in local.workers)


def test_ray_actors_exchange_in_rdh_steps(ray_session):
    from ultracluster.actors.launch import launch_actors

    sc = scenario(instances=4)
    cl = build_cluster(sc, 1)
    with launch_actors(sc, cl) as shards:
        shards._payload_algorithm = "rdh"
        moved, ok = shards.reduce_payload(step=1)
        assert ok
        n = payload_elements(sc, cl)
        assert moved == pytest.approx(2 * 3 * n * 8, rel=0.02)
        checks = ray_session.get([a.check_payload.remote() for a in shards.actors])
        assert checks == [True] * 4
        bufs = ray_session.get([a.start_payload.remote(1, "rdh") for a in shards.actors])
        assert bufs == [n * 8] * 4
