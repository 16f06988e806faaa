"""Collectives inside a training step pay the H11 latency bound, standalone ones the fitted launch cost."""
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.network.calibration import DEFAULT as CAL
from ultracluster.network.collectives import IN_GRAPH_LAUNCH_MAX_S, Group, collective_time


def cluster(instance):
    sc = load_scenario({"name": "launch", "model": {"preset": "llama3.1-70b"},
                        "training": {"seq_len": 4096, "global_batch": 64}, "parallelism": {"tp": 64},
                        "cluster": {"instance": instance, "instances": 1}})
    return build_cluster(sc, 1)


def test_trn2_in_step_collectives_skip_the_standalone_launch_floor():
    cl = cluster("trn2.48xlarge")
    alone, _ = collective_time(cl, "all_reduce", 1 << 17, Group(16, 1, together=False))
    in_step, _ = collective_time(cl, "all_reduce", 1 << 17, Group(16, 1, together=True))
    # same group alone vs with its siblings: the difference is at least the launch cost removed, less the
    # bandwidth the siblings share
    assert CAL.launch_s_trn2 > IN_GRAPH_LAUNCH_MAX_S
    assert alone - in_step >= CAL.launch_s_trn2 - IN_GRAPH_LAUNCH_MAX_S - 0.5 * alone


def test_trn1_launch_is_below_the_cap_and_unchanged():
    assert CAL.launch_s_trn1 <= IN_GRAPH_LAUNCH_MAX_S
