"""The collective model under an interval's settings (`network.settings`): one placement under many calibrations,
each setting's seconds what `collective_time` gives it, whether looked up or costed, and the settings' fabrics
found once where a fabric does not read the calibration."""
import numpy as np

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.frozen import replaced
from ultracluster.network import collective_time, group_of, settings, timing
from ultracluster.network.settings import collective_times, settings_of
from ultracluster.network.topology import fabric, fabric_reads


def _clusters(path: str, **ranges):
    """One placement under several calibrations, as an interval's Evaluator holds them (its cluster copied with each
    calibration, `layouts.evaluator.Evaluator.cluster`: the same instance and links objects)."""
    base = build_cluster(load_scenario(path), 1)
    cals = [base.calibration] + [base.calibration.with_(**{k: v}) for k, vs in ranges.items() for v in vs]
    return [replaced(base, {"calibration": c}) for c in cals]


def test_settings_share_a_fabric_only_where_it_does_not_read_the_calibration():
    trn2 = _clusters("scenarios/llama2-70b-tp32pp4-trn2-64.yaml", efa_efficiency=(0.2, 0.5),
                     tensor_efficiency=(0.5,))
    assert len({fabric_reads(c) for c in trn2}) == 1          # a torus fabric: the calibration is not read
    fabs = [f for f, _, _ in settings_of(trn2, "all_reduce", group_of(trn2[0], 8, 1), True)]
    assert all(f is fabs[0] for f in fabs) and fabs[0] == fabric(trn2[-1])
    trn3 = _clusters("scenarios/llama3.1-405b-trn3-gen2-18k.yaml", neuronswitch_scale_trn3=(0.5, 0.8))
    assert len({fabric_reads(c) for c in trn3}) == 3          # NeuronSwitch: its scale is the fabric's bandwidth
    fabs = [f for f, _, _ in settings_of(trn3, "all_reduce", group_of(trn3[0], 8, 1), True)]
    assert [f == fabric(c) for f, c in zip(fabs, trn3)] == [True] * 3 and len(set(fabs)) == 3


def test_collective_times_are_each_setting_s_collective_time_cold_and_kept():
    clusters = _clusters("scenarios/llama2-70b-tp32pp4-trn2-64.yaml", efa_efficiency=(0.2, 0.45, 0.9),
                         launch_s_trn2=(2e-5, 8e-5), tensor_efficiency=(0.5,))
    group = group_of(clusters[0], 16, 128)              # across instances: EFA
    settings._BY_COLLECTIVE.clear()
    timing.SECONDS.clear()                              # every setting costed
    cold = collective_times(clusters, "all_reduce", 3e8, group, in_graph=True)
    assert not any(settings._BY_COLLECTIVE.values())     # costed, not looked up: nothing kept by calibration yet
    kept = collective_times(clusters, "all_reduce", 3e8, group, in_graph=True)      # each a look-up
    as_timed = {cal for _, cal, _ in settings_of(clusters, "all_reduce", group, True)}    # (launch capped in a graph)
    assert sum(len(v) for v in settings._BY_COLLECTIVE.values()) == len(as_timed) == len(clusters) - 2
    again = collective_times(clusters, "all_reduce", 3e8, group, in_graph=True)     # by calibration alone
    want = [collective_time(c, "all_reduce", 3e8, group, in_graph=True)[0] for c in clusters]
    assert cold.tolist() == want and kept.tolist() == want and again.tolist() == want
    assert len(set(want)) > 3                            # the settings moved it
