"""Each algorithm's steps as data: running them on real buffers gives the exact collective; the cost
model's closed-form patterns carry the same traffic; Neuron's choice follows sizes and group shapes."""
import numpy as np
import pytest

from ultracluster.network import Group, collective_time, group_of
from ultracluster.network.algorithms import patterns, schedule
from ultracluster.network.bench import bench_cluster

MIB = 1 << 20


def run(sched, bufs):
    """Apply a schedule to [members, segments] buffers: in each step every send reads before any write."""
    bufs = bufs.copy()
    for st in sched.steps:
        vals = bufs[st.src, st.segment].copy()
        if st.reduce:
            np.add.at(bufs, (st.dst, st.segment), vals)
        else:
            bufs[st.dst, st.segment] = vals
    return bufs


@pytest.mark.parametrize("algorithm", ["ring", "rdh", "mesh"])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 16])
def test_schedules_compute_the_exact_collective(algorithm, p):
    if algorithm == "rdh" and p & (p - 1):
        with pytest.raises(ValueError, match="power-of-two"):
            schedule(algorithm, "all_reduce", p)
        return
    x = np.random.default_rng(p).integers(-50, 50, (p, p)).astype(float)
    total = x.sum(axis=0)
    assert (run(schedule(algorithm, "all_reduce", p), x) == total).all()
    rs = run(schedule(algorithm, "reduce_scatter", p), x)
    assert all(rs[i, i] == total[i] for i in range(p))
    start = np.full((p, p), np.nan)
    start[np.arange(p), np.arange(p)] = np.arange(p)
    assert (run(schedule(algorithm, "all_gather", p), start) == np.arange(p)[None, :]).all()


@pytest.mark.parametrize("algorithm", ["ring", "rdh", "mesh"])
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_cost_patterns_carry_the_schedules_traffic(algorithm, op):
    for p in (2, 4, 8):
        sched = schedule(algorithm, op, p)
        segments, pats = patterns(algorithm, op, p)
        assert segments == sched.segments and sum(pt.repeat for pt in pats) == len(sched.steps)
        per_pair = {}
        for st in sched.steps:
            for s, d in zip(st.src, st.dst):
                per_pair[(s, d)] = per_pair.get((s, d), 0) + 1
        got = {}
        for pt in pats:
            for s, d, c in zip(pt.src, pt.dst, pt.segments):
                got[(s, d)] = got.get((s, d), 0) + c * pt.repeat
        assert got == pytest.approx(per_pair)
        # every member sends (p-1)/p of the buffer per phase: what busbw assumes
        phases = 2 if op == "all_reduce" else 1
        assert sched.segments_sent() == phases * (p - 1)


def test_pairwise_all_to_all_delivers_every_segment_once():
    p = 5
    sched = schedule("pairwise", "all_to_all", p)
    pairs = {(s, d) for st in sched.steps for s, d in zip(st.src.tolist(), st.dst.tolist())}
    assert pairs == {(s, d) for s in range(p) for d in range(p) if s != d}


def test_neuron_choice_follows_size_and_shape():
    trn2 = bench_cluster("trn2.48xlarge", 1)
    whole = Group(64, 1, together=False)
    assert collective_time(trn2, "all_reduce", 512 * 1024, whole)[1] == "mesh"          # < 1 MiB (H11)
    assert collective_time(trn2, "all_reduce", 8 * MIB, whole)[1] == "rdh"              # 1-56 MiB
    assert collective_time(trn2, "all_reduce", 256 * MIB, whole)[1] == "kangaring"      # > 56 MiB, whole chips
    strided = Group(16, 1, stride=4, together=False)                                    # one rank per chip
    assert collective_time(trn2, "all_reduce", 256 * MIB, strided)[1] == "ring"         # KangaRing needs whole chips
    assert collective_time(trn2, "all_reduce", 8 * MIB, Group(12, 1, together=False))[1] == "ring"  # not 2^k
    two = bench_cluster("trn2.48xlarge", 2)
    assert collective_time(two, "all_reduce", 8, Group(64, 2, together=False))[1] == "hierarchical(mesh+mesh)"
    assert collective_time(two, "all_reduce", 1 << 30, Group(64, 2, together=False))[1] == \
        "hierarchical(kangaring+rdh)"                                                   # H12 "large: KangaRing + RDH"
    us = bench_cluster("trn2u.48xlarge", 8)
    dp = group_of(us, 8, 64)
    # Z stage (4 instances of an UltraServer) on 64 MiB: ring; EFA stage (2 UltraServers) on 16 MiB: RDH
    assert collective_time(us, "all_reduce", 64 * MIB, dp)[1] == "hierarchical(z-ring+rdh)"
    assert collective_time(us, "all_reduce", 2 * MIB, dp)[1] == "hierarchical(z-rdh+mesh)"
    assert collective_time(bench_cluster("trn1.32xlarge", 3), "all_reduce", 64 * MIB, Group(1, 3))[1] == "ring"


def test_group_of_matches_the_placement_and_all_groups_run_together():
    cl = bench_cluster("trn1.32xlarge", 4)
    assert group_of(cl, 8, 1) == Group(8, 1, 1)                # TP 8 inside a chip quartet
    assert group_of(cl, 16, 8) == Group(4, 4, 8)               # DP: 4 per instance on 4 instances
    assert group_of(cl, 4, 32) == Group(1, 4, 32)
    alone = collective_time(cl, "all_reduce", 64 * MIB, Group(4, 4, 8, together=False))[0]
    together = collective_time(cl, "all_reduce", 64 * MIB, Group(4, 4, 8))[0]
    assert together > alone                                    # 8 DP groups share each instance's NICs


def test_bad_calls_are_value_errors():
    cl = bench_cluster("trn1.32xlarge", 1)
    with pytest.raises(ValueError, match="unknown op"):
        collective_time(cl, "broadcast", 8, Group(2, 1))
    with pytest.raises(ValueError, match="does not fit"):
        collective_time(cl, "all_reduce", 8, Group(1, 2))
    with pytest.raises(ValueError, match="send_recv"):
        collective_time(cl, "send_recv", 8, Group(4, 1))
    assert collective_time(cl, "all_reduce", 8, Group(1, 1)) == (0.0, "none")
    assert collective_time(cl, "all_reduce", 0, Group(8, 1)) == (0.0, "none")
