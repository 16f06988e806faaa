"""The shared transfers' seconds under many settings at once are each setting's own, bit for bit."""
import numpy as np

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.fairshare import progressive_filling, progressive_filling_many
from ultracluster.network import concurrent_time, group_of
from ultracluster.network.contention import concurrent_times
from ultracluster.replay.comm import send_group


def test_progressive_filling_many_is_each_problem_s_own():
    """Laid out as `concurrent_time` lays them (flows x resources, transposed): two flows (a gradient send and a
    bucket, `replay.comm.last_sends`) bit for bit, more within rounding (the products' sums may be ordered
    otherwise)."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        s, k, f = 4, int(rng.integers(1, 12)), int(rng.integers(1, 4))
        alone = rng.random((s, f, k)) * 10.0 ** rng.uniform(-3, 9)
        alone[rng.random((s, f, k)) < 0.4] = 0.0
        alone[:, :, 0] = np.maximum(alone[:, :, 0], 1e-3)        # every flow limited somewhere
        capacity = rng.random((s, k)) * 10.0 ** rng.uniform(0, 9)
        flows = rng.random((s, f)) < 0.7
        many = progressive_filling_many(np.swapaxes(alone, 1, 2), capacity, np.ones((s, f)), flows)
        for j in range(s):
            if flows[j].any():
                one = progressive_filling(alone[j][flows[j]].T, capacity[j], np.ones(int(flows[j].sum())))
                if f <= 2:
                    assert np.array_equal(many[j, flows[j]], one)
                np.testing.assert_allclose(many[j, flows[j]], one, rtol=1e-13)
            assert not many[j, ~flows[j]].any()


def test_concurrent_times_are_each_setting_s_concurrent_time():
    sc = load_scenario("scenarios/llama2-70b-tp32pp4-trn2-64.yaml")
    cl = build_cluster(sc, 1)
    cals = [cl.calibration] + [cl.calibration.with_(efa_efficiency=e, reduce_step_s=r)
                               for e in (0.2, 0.45, 0.9) for r in (1e-6, 1e-4)]
    clusters = [build_cluster(sc, 1, c) for c in cals]
    dpg = group_of(cl, cl.layout.dp, cl.layout.tp * cl.layout.pp)
    transfers = [("send_recv", 3e6, send_group(cl, 0, 1)), ("reduce_scatter", 2.6e7, dpg)]
    many = concurrent_times(clusters, transfers, in_graph=True)
    for c, row in zip(clusters, many):
        assert np.array_equal(row, concurrent_time(c, transfers, in_graph=True))


def test_concurrent_times_keep_each_setting_s_seconds_and_cost_only_the_new_ones(monkeypatch):
    """`concurrent_times` keeps each setting's seconds by its fabric, collective calibration and the transfers
    (`contention._KEPT`): a setting timed before is a look-up, the others are costed together; the same numbers."""
    from ultracluster.network import contention

    sc = load_scenario("scenarios/llama2-70b-tp32pp4-trn2-64.yaml")
    cl = build_cluster(sc, 1)
    cals = [cl.calibration] + [cl.calibration.with_(efa_efficiency=e) for e in (0.2, 0.45, 0.9, 0.3)]
    clusters = [build_cluster(sc, 1, c) for c in cals]
    transfers = [("send_recv", 3e6, send_group(cl, 0, 1)),
                 ("reduce_scatter", 2.6e7, group_of(cl, cl.layout.dp, cl.layout.tp * cl.layout.pp))]
    uncached = contention._times(clusters, tuple(transfers), True)
    contention._KEPT.clear()
    costed = []
    times = contention._times
    monkeypatch.setattr(contention, "_times", lambda cls, tr, ig: costed.append(len(cls)) or times(cls, tr, ig))
    first = concurrent_times(clusters[:3], transfers, in_graph=True)
    both = concurrent_times(clusters, transfers, in_graph=True)            # two settings new
    again = concurrent_times(clusters, transfers, in_graph=True)           # none
    assert costed == [3, 2]
    assert np.array_equal(first, uncached[:3]) and np.array_equal(both, uncached) and np.array_equal(again, uncached)
    assert len(set(uncached[:, 1])) == len(cals)         # every setting moved the reduction over EFA
