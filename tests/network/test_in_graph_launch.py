"""Collectives inside a training step pay the H11 latency bound, standalone ones the fitted launch cost."""
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.cluster.calibration import NETWORK_PROFILES
from ultracluster.network.calibration import DEFAULT

# the dated Trn2 examples' reading has the standalone launch floor of about 0.5 ms
CAL = DEFAULT.with_(**NETWORK_PROFILES["trn2-nccom-examples"])
from ultracluster.network.collectives import IN_GRAPH_LAUNCH_MAX_S, Group, collective_time


def cluster(instance):
    sc = load_scenario({"name": "launch", "model": {"preset": "llama3.1-70b"},
                        "training": {"seq_len": 4096, "global_batch": 64}, "parallelism": {"tp": 64},
                        "cluster": {"instance": instance, "instances": 1}})
    return build_cluster(sc, 1)


def test_trn2_in_step_collectives_skip_the_standalone_launch_floor():
    cl = cluster("trn2.48xlarge")
    alone, _ = collective_time(cl, "all_reduce", 1 << 17, Group(16, 1, together=False), CAL)
    in_step, _ = collective_time(cl, "all_reduce", 1 << 17, Group(16, 1, together=True), CAL)
    # same group alone vs with its siblings: the difference is at least the launch cost removed, less the
    # bandwidth the siblings share
    assert CAL.launch_s_trn2 > IN_GRAPH_LAUNCH_MAX_S
    assert alone - in_step >= CAL.launch_s_trn2 - IN_GRAPH_LAUNCH_MAX_S - 0.5 * alone


def test_default_launch_costs_are_below_the_cap():
    assert DEFAULT.launch_s_trn1 <= IN_GRAPH_LAUNCH_MAX_S
    assert DEFAULT.launch_s_trn2 <= IN_GRAPH_LAUNCH_MAX_S
