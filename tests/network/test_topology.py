"""Fabric, rank placement and routing: where ranks sit and which links a transfer crosses."""
import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.network import placement_records
from ultracluster.network.bench import bench_cluster
from ultracluster.network.topology import (CHIP, NIC_IN, NIC_OUT, PORT, ZPORT, fabric, locate, route,
                                           snake_position)


def kinds_of(fab, routed):
    return fab.local_kinds()[routed.resource % fab.resources_per_instance]


def test_fabric_numbers_come_from_the_catalog():
    f1 = fabric(bench_cluster("trn1.32xlarge", 1))
    assert f1.port_bytes_per_s == 384 * 2**30 / 4 and f1.chip_bytes_per_s == 1e12
    assert f1.nic_bytes_per_s == 800e9 / 8 / 8 and f1.ranks_per_chip == 2 and f1.z_port_bytes_per_s == 0
    f2 = fabric(bench_cluster("trn2u.48xlarge", 4))
    assert f2.port_bytes_per_s == 256e9 and f2.z_port_bytes_per_s == 128e9 and f2.ultraserver
    assert f2.nic_bytes_per_s == 200e9 / 8 and f2.nics == f2.chips == 16 and f2.ranks_per_chip == 4
    assert fabric(bench_cluster("trn2.48xlarge", 1, lnc=1)).ranks_per_chip == 8


def test_ranks_fill_chips_then_instances():
    fab = fabric(bench_cluster("trn2u.48xlarge", 8))
    loc = locate(fab, np.array([0, 3, 4, 63, 64, 256, 511]))
    assert loc["instance"].tolist() == [0, 0, 0, 0, 1, 4, 7]
    assert loc["chip"].tolist() == [0, 0, 1, 15, 0, 0, 15]
    assert loc["x"].tolist() == [0, 0, 1, 3, 0, 0, 3] and loc["y"].tolist() == [0, 0, 0, 3, 0, 0, 3]
    assert loc["z"].tolist() == [0, 0, 0, 0, 1, 0, 3] and loc["server"].tolist() == [0, 0, 0, 0, 0, 1, 1]


def test_snake_is_a_hamiltonian_cycle_of_torus_neighbours():
    fab = fabric(bench_cluster("trn2.48xlarge", 1))
    order = np.argsort(snake_position(fab, np.arange(16)))
    x, y = order % 4, order // 4
    nxt = np.roll(np.arange(16), -1)
    dx, dy = abs(x - x[nxt]) % 4, abs(y - y[nxt]) % 4
    dist = np.minimum(dx, 4 - dx) + np.minimum(dy, 4 - dy)
    assert sorted(order.tolist()) == list(range(16)) and (dist == 1).all()


def test_routes_take_the_short_way_and_split_ties():
    fab = fabric(bench_cluster("trn1.32xlarge", 2))
    # chip 0 -> chip 1: one +x hop; chip 0 -> chip 3: one -x hop (wrap); chip 0 -> chip 2: 2 hops, split
    r = route(fab, [0, 0, 0], [2, 6, 4], [1.0, 1.0, 1.0])
    assert (kinds_of(fab, r) == PORT).all()
    assert r.latency_s.tolist() == [1.5e-6, 1.5e-6, 3e-6]
    assert r.nbytes.sum() == pytest.approx(1 + 1 + 2 * 1.0)       # the tie: 2 hops x (0.5 + 0.5)
    # chip 0 -> chip 10 (x 2, y 2): four equal ways, 4 hops each
    r = route(fab, [0], [20], [8.0])
    assert r.nbytes.sum() == pytest.approx(4 * 8.0) and r.latency_s[0] == pytest.approx(6e-6)
    # same chip: the chip's DMA; another instance: NIC out here, NIC in there
    r = route(fab, [0, 0], [1, 32], [5.0, 7.0])
    assert sorted(kinds_of(fab, r).tolist()) == sorted([CHIP, NIC_OUT, NIC_IN])
    assert r.tier.tolist() == [0, 2] and r.latency_s.tolist() == [0.0, 15e-6]


def test_ultraserver_instances_talk_over_z_rings():
    fab = fabric(bench_cluster("trn2u.48xlarge", 8))
    r = route(fab, [0, 0, 0], [64, 128, 256], [1.0, 1.0, 1.0])   # z+1, z+2 (tie), next UltraServer
    assert r.tier.tolist() == [1, 1, 2]
    kinds = kinds_of(fab, r)
    assert (kinds == ZPORT).sum() == 1 + 4 and (kinds == NIC_OUT).sum() == 1
    assert r.latency_s[:2].tolist() == [2e-6, 4e-6]


def test_trn1_nics_serve_two_chips_each():
    fab = fabric(bench_cluster("trn1.32xlarge", 2))
    r = route(fab, [0, 2, 4], [32, 34, 36], [1.0, 1.0, 1.0])
    slots = r.resource % fab.resources_per_instance
    out = slots[kinds_of(fab, r) == NIC_OUT] - (fab.chips * 7)
    assert out.tolist() == [0, 0, 1]


def test_placement_records_show_chip_coordinates_and_groups():
    sc = load_scenario({
        "name": "placement", "model": {"preset": "llama2-7b", "layers": 4},
        "training": {"seq_len": 1024, "global_batch": 64, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": 8, "pp": 2},
        "cluster": {"instance": "trn2u.48xlarge", "instances": 8},
    })
    cl = build_cluster(sc, 4)
    rows = placement_records(cl, max_rows=16)
    assert len(rows) <= 16 and rows[0]["rank"] == 0 and rows[-1]["rank"] == cl.ranks - 1
    by_rank = {r["rank"]: r for r in placement_records(cl, max_rows=10**6)}
    r = by_rank[120]                      # tp 0, pp 1, dp 7: instance 1 (z 1), local rank 56, chip 14
    assert (r["instance"], r["chip"], r["x"], r["y"], r["z"], r["ultraserver"]) == (1, 14, 2, 3, 1, 0)
    assert (r["tp"], r["pp"], r["dp"]) == (0, 1, 7)
    assert r["tp_group"] == 120 // 8 and r["core"] == 0
    same_dp = [x for x in by_rank.values() if x["dp_group"] == r["dp_group"]]
    assert len(same_dp) == cl.layout.dp and len({x["dp"] for x in same_dp}) == cl.layout.dp


def test_kept_step_loads_equal_step_loads_and_are_keyed_by_content():
    from ultracluster.network import flows as fl
    from ultracluster.network.groups import Group
    from ultracluster.network.selection import stages
    fab = fabric(bench_cluster("trn1.32xlarge", 4))
    fl._STEP_LOADS.clear()
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for nbytes in (1e3, 1e6, 1e9):
            group = Group(per_instance=16, instances=4)
            _, lv = fl.members_and_levels(fab, group)
            flows_of = []
            for st in stages(fab, op, nbytes, group, lv):
                flows_of += fl.stage_flows(fab, lv, st) if st.tier != "flat" else fl.unit_flows(
                    fl.members_and_levels(fab, group)[0], st.algorithm, st.op, st.fraction)
            for f in flows_of:
                got, own = fl.kept_step_load(fab, f), fl.step_load(fab, f)
                for name in ("resource", "per_byte", "tier_max"):
                    assert np.array_equal(getattr(got, name), getattr(own, name))
                assert (got.latency_s, got.tier, got.repeat, got.reduce, got.pipelined) == \
                    (own.latency_s, own.tier, own.repeat, own.reduce, own.pipelined)
                assert not got.per_byte.flags.writeable
                # another step shape (more bytes per byte of the buffer) is not the kept one
                other = fl.kept_step_load(fab, fl.Flows(f.src, f.dst, f.per_byte * 2, f.repeat, f.reduce, f.pipelined))
                assert np.array_equal(other.per_byte, own.per_byte * 2)
                # the same flows as another kind of step: the same routes, its own repeat and flags
                flip = fl.kept_step_load(fab, fl.Flows(f.src, f.dst, f.per_byte, f.repeat + 1, not f.reduce,
                                                       not f.pipelined))
                assert (flip.repeat, flip.reduce, flip.pipelined) == (f.repeat + 1, not f.reduce, not f.pipelined)
                assert np.array_equal(flip.resource, own.resource) and np.array_equal(flip.tier_max, own.tier_max)
    assert 0 < len(fl._STEP_LOADS) <= fl.STEP_LOADS_MAX
