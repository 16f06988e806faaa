"""Invariants of the collective model under hypothesis: physical ceilings, monotonicity, sharing bounds."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ultracluster.network import (Group, bus_factor, busbw_limit_bytes_per_s, collective_time, concurrent_time,
                                  group_of)
from ultracluster.cluster.catalog import LINK_GBPS_RANGE
from ultracluster.network.bench import bench_cluster

INSTANCES = ["trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge"]
OPS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw):
    """A cluster, a parallel group on it (as group_of builds them), an op and a buffer size."""
    inst = draw(st.sampled_from(INSTANCES))
    instances = draw(st.sampled_from([1, 2, 4, 8]))
    lnc = draw(st.sampled_from([1, 2])) if inst.startswith("trn2") else 1
    cl = bench_cluster(inst, instances, lnc)
    rpi = cl.ranks_per_instance
    stride = draw(st.sampled_from([1, 2, 4, 8, rpi // 2, rpi]))
    max_size = max(1, cl.ranks // stride)
    size = draw(st.sampled_from(sorted({2, 4, max(2, max_size // 2), max_size} & set(range(2, max_size + 1)))
                                or [1]))
    if size < 2:
        size, stride = 2, 1
    together = draw(st.booleans())
    g = group_of(cl, size, stride)
    g = Group(g.per_instance, g.instances, g.stride, together)
    op = draw(st.sampled_from(OPS))
    nbytes = draw(st.integers(min_value=1, max_value=2**31)) * (size if op != "all_reduce" else 1)
    return cl, g, op, nbytes


@SETTINGS
@given(cases())
def test_busbw_never_exceeds_the_physical_limit(case):
    cl, g, op, nbytes = case
    seconds, _ = collective_time(cl, op, nbytes, g)
    busbw = nbytes / seconds * bus_factor(op, g.ranks)
    assert busbw <= busbw_limit_bytes_per_s(cl, g) * (1 + 1e-9)


@SETTINGS
@given(cases(), st.floats(min_value=1.0001, max_value=64.0))
def test_time_is_monotone_in_size(case, factor):
    cl, g, op, nbytes = case
    small, _ = collective_time(cl, op, nbytes, g)
    large, _ = collective_time(cl, op, nbytes * factor, g)
    assert large >= small * (1 - 1e-12)


@SETTINGS
@given(cases(), st.floats(min_value=1.0, max_value=16.0), st.floats(min_value=1.0, max_value=16.0))
def test_time_does_not_increase_with_bandwidth(envelope_choices, case, efa_x, link_x):
    cl, g, op, nbytes = case
    base, _ = collective_time(cl, op, nbytes, g)
    faster = bench_cluster(cl.instance.name, cl.instances, cl.lnc,
                           # faster, up to the links' what-if bound (the scenario's own: cluster.catalog)
                           efa_gbps=min(cl.links.efa_bytes_per_s * 8 / 1e9 * efa_x, LINK_GBPS_RANGE[1]),
                           neuronlink_gbps=min(cl.links.neuronlink_bytes_per_s_per_chip * 8 / 1e9 * link_x,
                                               LINK_GBPS_RANGE[1]))
    quick, alg = collective_time(faster, op, nbytes, g)
    assert quick <= base * (1 + 1e-12)
    # the algorithm is Neuron's choice for this size or, where cheaper, the one just over a later switch: faster
    # links may tip that comparison, never the time the wrong way (no slower than Neuron's own choice)
    assert alg in envelope_choices(faster, op, nbytes, g)
    plain = faster.calibration.network.with_(algorithm_envelope=0.0)
    assert quick <= collective_time(faster, op, nbytes, g, plain)[0] * (1 + 1e-12)


@SETTINGS
@given(st.lists(cases(), min_size=1, max_size=3))
def test_concurrent_time_is_between_alone_and_one_after_the_other(batch):
    cl = batch[0][0]
    transfers = [(op, n, g) for c, g, op, n in batch if c.instance.name == cl.instance.name
                 and c.instances == cl.instances and c.lnc == cl.lnc]
    together = concurrent_time(cl, transfers)
    alone = np.array([collective_time(cl, *tr)[0] for tr in transfers])
    assert (together >= alone * (1 - 1e-9)).all()
    assert (together <= alone.sum() * (1 + 1e-9)).all()


def test_groups_that_share_nothing_do_not_slow_each_other():
    cl = bench_cluster("trn2.48xlarge", 2)
    tp0 = ("all_gather", 64 << 20, Group(64, 1, together=False))                   # instance 0's NeuronLink
    tp1 = ("all_gather", 64 << 20, Group(64, 1, together=False, first_rank=64))    # instance 1's
    dp = ("all_gather", 64 << 20, Group(1, 2, together=False))                     # rank 0 <-> 64 over NIC 0
    alone = [collective_time(cl, *tr)[0] for tr in (tp0, tp1, dp)]
    assert concurrent_time(cl, [tp0, tp1]) == pytest.approx(alone[:2], rel=1e-12)
    assert concurrent_time(cl, [tp0, dp]) == pytest.approx([alone[0], alone[2]], rel=1e-12)


def test_pipeline_sends_compete_with_the_data_parallel_reduction_for_the_nics():
    cl = bench_cluster("trn1.32xlarge", 4)
    dp = ("reduce_scatter", 256e6, group_of(cl, 16, 8))             # every rank's DP group, 4 per instance
    pp = ("send_recv", 32e6, Group(1, 2, stride=32))                 # all 32 ranks of instance 0 -> instance 1
    alone = np.array([collective_time(cl, *dp)[0], collective_time(cl, *pp)[0]])
    both = concurrent_time(cl, [dp, pp])
    assert (both > alone * 1.05).all()
    assert (both <= alone.sum() * (1 + 1e-9)).all()
