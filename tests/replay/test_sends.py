"""Pipeline sends ride NeuronLink inside an instance, Z links inside an UltraServer, EFA across; the last
gradient sends share links with the overlapping gradient reduction."""
import numpy as np

from ultracluster import chip, load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.replay.engine import send_group, step_comm as plan_comm


def step_comm(sc, cl):
    """The step's comm with the chip model's hiding matmuls (in a run: what the shards report)."""
    return plan_comm(sc, cl, chip.tp_hide_seconds(sc, cl))


def cluster(instance, ultraserver, pp=8, instances=8, tp=64):
    sc = load_scenario({"name": "sends", "model": {"preset": "llama3.1-70b"},
                        "training": {"seq_len": 4096, "global_batch": 64},
                        "parallelism": {"tp": tp, "pp": pp},
                        "cluster": {"instance": instance, "instances": instances, "ultraserver": ultraserver}})
    return sc, build_cluster(sc, instances)


def test_send_groups_follow_the_topology():
    _, us = cluster("trn2u.48xlarge", True)
    # tp 64 fills an instance: stage s on instance s; instances 0-3 and 4-7 form the two UltraServers
    same_us, across = send_group(us, 0, 1), send_group(us, 3, 4)
    assert (same_us.instances, same_us.first_rank, same_us.instance_step) == (2, 0, 64)
    assert (across.instances, across.first_rank, across.instance_step) == (2, 3 * 64, 64)
    _, inside = cluster("trn2.48xlarge", False, pp=2, instances=1, tp=32)
    assert send_group(inside, 0, 1).instances == 1


def test_ultraserver_sends_are_faster_than_efa_and_contention_slows_the_last_ones():
    sc_us, us = cluster("trn2u.48xlarge", True, instances=16)       # dp 2
    sc_efa, efa = cluster("trn2.48xlarge", False, instances=16)
    p_us, p_efa = step_comm(sc_us, us), step_comm(sc_efa, efa)
    # inside an UltraServer (0->1, 1->2, 2->3) the Z links beat EFA; the 3->4 boundary is EFA for both
    assert np.all(p_us.send_fwd[[0, 1, 2]] < p_efa.send_fwd[[0, 1, 2]])
    assert p_us.send_fwd[3] == p_efa.send_fwd[3]
    assert np.all(p_efa.send_bwd_last >= p_efa.send_bwd)
    assert np.any(p_efa.send_bwd_last > p_efa.send_bwd)
