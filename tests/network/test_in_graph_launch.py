"""Collectives inside a training step pay the H11 latency bound, standalone ones the fitted launch cost."""
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.calibration.fitted_files import NETWORK_CALIBRATIONS
from ultracluster.network.calibration import DEFAULT

# the dated Trn2 examples' reading has the standalone launch floor of about 0.5 ms
CAL = DEFAULT.with_(**NETWORK_CALIBRATIONS["trn2-nccom-examples"])
from ultracluster.network.collectives import IN_GRAPH_LAUNCH_MAX_S, Group, collective_time


def cluster(instance):
    sc = load_scenario({"name": "launch", "model": {"preset": "llama3.1-70b"},
                        "training": {"seq_len": 4096, "global_batch": 64}, "parallelism": {"tp": 64},
                        "cluster": {"instance": instance, "instances": 1}})
    return build_cluster(sc, 1)


def test_trn2_in_step_collectives_skip_the_standalone_launch_floor():
    cl = cluster("trn2.48xlarge")
    assert CAL.launch_s_trn2 > IN_GRAPH_LAUNCH_MAX_S
    for group in (Group(16, 1, together=False), Group(16, 1, together=True)):
        alone, _ = collective_time(cl, "all_reduce", 1 << 17, group, CAL, in_graph=False)
        in_step, _ = collective_time(cl, "all_reduce", 1 << 17, group, CAL, in_graph=True)
        # the same collective issued from a step's graph: the launch capped at H11's 10 us, and the graph's
        # hand-off to the collective cores added (on Trn2 the Trn1 cost times the Trn2 scale), nothing else
        sync = CAL.in_graph_sync_s * CAL.in_graph_sync_scale_trn2
        assert alone - in_step == pytest.approx(CAL.launch_s_trn2 - IN_GRAPH_LAUNCH_MAX_S - sync, rel=1e-9)
    # without saying, a group whose like groups all run at once is a step's; a lone group is nccom-test's
    lone = Group(16, 1, together=False)
    assert collective_time(cl, "all_reduce", 1 << 17, lone, CAL)[0] == collective_time(
        cl, "all_reduce", 1 << 17, lone, CAL, in_graph=False)[0]


def test_default_launch_costs_are_below_the_cap():
    assert DEFAULT.launch_s_trn1 <= IN_GRAPH_LAUNCH_MAX_S
    assert DEFAULT.launch_s_trn2 <= IN_GRAPH_LAUNCH_MAX_S
