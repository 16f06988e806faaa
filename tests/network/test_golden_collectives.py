"""Golden times of each algorithm on small groups, worked out by hand from the catalog and a round calibration.

Fabric numbers (trn1.32xlarge, catalog): NeuronLink 384 GiB/s per chip over 4 ports, so one port carries
384 * 2**30 / 4 = 103,079,215,104 B/s per direction; chip DMA 1e12 B/s; EFA 800 Gbit/s over 8 NICs =
12.5e9 B/s per NIC; 1.5 us per NeuronLink hop; 15 us per EFA transfer. Ranks 2c and 2c+1 sit on chip c;
chip c sits at x = c % 4, y = c // 4 of the 4x4 torus.

Calibration GOLD (not the fitted one, so the arithmetic stays round): port x 0.5 = 51,539,607,552 B/s;
chip DMA x 0.25 = 2.5e11 B/s; NIC x 0.5 = 6.25e9 B/s; launch 10 us; reducing step 4 us; every step of a
collective spanning EFA 30 us.

A step costs b = max over resources(bytes / bandwidth) + the longest flow latency + its fixed cost; a ring's
steps pipeline: n_steps repeats cost b + L + (n_steps - 1) * max(b, L) with L = latency + fixed cost.
"""
import pytest

from ultracluster.network import Group, collective_time, concurrent_time
from ultracluster.network.bench import bench_cluster
from ultracluster.network.calibration import NetworkCalibration

GOLD = NetworkCalibration(neuronlink_efficiency_trn1=0.5, neuronlink_efficiency_trn2=0.5, chip_efficiency=0.25,
                          efa_efficiency=0.5, launch_s_trn1=10e-6, launch_s_trn2=20e-6, reduce_step_s=4e-6,
                          efa_step_s=30e-6)
PORT = 384 * 2**30 / 4 * 0.5          # B/s
CHIP = 1e12 * 0.25
NIC = 800e9 / 8 / 8 * 0.5
HOP, EFA = 1.5e-6, 15e-6
LAUNCH, RED, ESTEP = 10e-6, 4e-6, 30e-6
MIB = 1 << 20
TRN1 = bench_cluster("trn1.32xlarge", 1)
TRN1X2 = bench_cluster("trn1.32xlarge", 2)


def t(cluster, op, nbytes, group):
    return collective_time(cluster, op, nbytes, group, GOLD)


def test_mesh_all_gather_two_ranks_of_one_chip():
    n = 512 * 1024
    # one step: each rank sends its half to the other through chip 0's DMA: 2 x n/2 bytes on it
    want = LAUNCH + 2 * (n / 2) / CHIP
    assert t(TRN1, "all_gather", n, Group(2, 1, together=False)) == (pytest.approx(want, rel=1e-12), "mesh")


def test_mesh_all_reduce_across_two_neighbour_chips():
    n = 64 * 1024
    g = Group(2, 1, stride=2, together=False)        # ranks 0 and 2: chips 0 and 1, one +x/-x hop apart
    b = (n / 2) / PORT                               # each port direction carries one half
    want = LAUNCH + (b + HOP + RED) + (b + HOP)      # mesh reduce-scatter, then mesh all-gather
    assert t(TRN1, "all_reduce", n, g) == (pytest.approx(want, rel=1e-12), "mesh")


def test_rdh_all_reduce_two_chips_two_ranks_each():
    n = 8 * MIB
    g = Group(4, 1, together=False)                  # ranks 0-3: chips 0 and 1; members chip-major
    b1 = 2 * (n / 2) / CHIP                          # distance 1 (same chip): 2 ranks x n/2 on the DMA
    b2 = 2 * (n / 4) / PORT                          # distance 2 (next chip): 2 ranks x n/4 on one port
    want = LAUNCH + (b1 + RED) + (b2 + HOP + RED) + (b2 + HOP) + b1     # halving up, doubling back
    assert t(TRN1, "all_reduce", n, g) == (pytest.approx(want, rel=1e-12), "rdh")


def test_ring_all_reduce_three_chips_splits_two_hop_ties():
    n = 8 * MIB
    g = Group(3, 1, stride=2, together=False)        # ranks 0, 2, 4 on chips 0, 1, 2 (x = 0, 1, 2): not a power of two
    c = n / 3 / 2                                    # two channels (both ways round), half a chunk each
    # 2 -> 0 and 0 -> 2 are 2 hops either way round the x ring of 4: half the bytes each way, so the
    # busiest port carries a 1-hop flow plus half a 2-hop flow: 1.5 c
    b = 1.5 * c / PORT
    rs = b + (2 * HOP + RED) + 1 * max(b, 2 * HOP + RED)     # 2 pipelined reduce steps, 2-hop latency
    ag = b + 2 * HOP + 1 * max(b, 2 * HOP)
    assert t(TRN1, "all_reduce", n, g) == (pytest.approx(LAUNCH + rs + ag, rel=1e-12), "ring")


def test_kangaring_all_reduce_four_whole_chips():
    n = 256 * MIB                                    # well above 56 MiB, and above RDH's price at 56 MiB
    g = Group(8, 1, together=False)                  # ranks 0-7 = every rank of chips 0-3 (one x ring)
    # ring over the 4 chips' primaries on the whole buffer, two channels: n/4/2 per port per step
    b = (n / 4 / 2) / PORT
    rs = b + (HOP + RED) + 2 * max(b, HOP + RED)
    ag = b + HOP + 2 * max(b, HOP)
    assert t(TRN1, "all_reduce", n, g) == (pytest.approx(LAUNCH + rs + ag, rel=1e-12), "kangaring")
    # each step the primary also reads (reduce-scatter) or writes (all-gather) its chip-mate's copy of the
    # chunk on each channel: 2 x n/8 through the chip's DMA; with a slow chip that is the bottleneck
    slow = GOLD.with_(chip_efficiency=0.05)
    b = (2 * n / 8) / (1e12 * 0.05)
    rs = b + (HOP + RED) + 2 * max(b, HOP + RED)
    ag = b + HOP + 2 * max(b, HOP)
    assert collective_time(TRN1, "all_reduce", n, g, slow)[0] == pytest.approx(LAUNCH + rs + ag, rel=1e-12)


def test_hierarchical_all_reduce_two_instances():
    n = 16 * MIB
    g = Group(2, 2, stride=1, instance_step=32, together=False)   # ranks 0, 1 and 32, 33: chip 0 of each
    local = 2 * (n / 2) / CHIP + ESTEP               # RDH distance 1 on chip 0; a step of an EFA collective
    efa = 2 * (n / 4) / NIC + EFA + ESTEP            # 2 lanes x n/4 through NIC 0 (rdh over 2 instances, n/2)
    want = LAUNCH + local + 2 * efa + local          # intra RS, inter RS + AG, intra AG
    assert t(TRN1X2, "all_reduce", n, g) == (pytest.approx(want, rel=1e-12), "hierarchical(rdh+rdh)")


def test_send_recv_over_efa_and_neuronlink():
    n = MIB
    over_efa = Group(1, 2, together=False)           # rank 0 -> rank 32 (chip 0 of the next instance)
    assert t(TRN1X2, "send_recv", n, over_efa) == (pytest.approx(LAUNCH + n / NIC + EFA + ESTEP, rel=1e-12), "efa")
    over_link = Group(2, 1, stride=2, together=False)  # rank 0 -> rank 2: the next chip
    assert t(TRN1, "send_recv", n, over_link) == (pytest.approx(LAUNCH + n / PORT + HOP, rel=1e-12), "neuronlink")


def test_all_to_all_mesh_four_ranks():
    n = 64 * 1024
    # every rank sends n/4 to each peer: chip 0's +x port carries ranks 0 and 1 to ranks 2 and 3 (4 x n/4);
    # its DMA only 0 <-> 1 (2 x n/4)
    want = LAUNCH + max(4 * n / 4 / PORT, 2 * n / 4 / CHIP) + HOP
    assert t(TRN1, "all_to_all", n, Group(4, 1, together=False)) == (pytest.approx(want, rel=1e-12), "mesh")


def test_all_dp_groups_of_an_instance_share_its_nics():
    n = 16 * MIB
    alone = t(TRN1X2, "all_reduce", n, Group(1, 2, together=False))[0]
    together = t(TRN1X2, "all_reduce", n, Group(1, 2))[0]           # 32 such groups: 4 ranks per NIC
    b_alone = (n / 2) / NIC
    assert alone == pytest.approx(LAUNCH + 2 * (b_alone + EFA + ESTEP), rel=1e-12)
    assert together == pytest.approx(LAUNCH + 2 * (4 * b_alone + EFA + ESTEP), rel=1e-12)


def test_concurrent_transfers_share_the_nic_fairly():
    n = 8 * MIB
    send = ("send_recv", n, Group(1, 2, together=False))
    other = LAUNCH + EFA + ESTEP
    both = concurrent_time(TRN1X2, [send, send], GOLD)
    assert both == pytest.approx([other + 2 * n / NIC] * 2, rel=1e-9)   # half the NIC each, all the way
    far = ("send_recv", n, Group(1, 2, stride=34, together=False))  # rank 2 -> 36: chip 1, the same NIC 0
    near = ("send_recv", n, Group(2, 1, stride=2, together=False))  # NeuronLink only: shares nothing
    mixed = concurrent_time(TRN1X2, [send, far, near], GOLD)
    assert mixed[:2] == pytest.approx([other + 2 * n / NIC] * 2, rel=1e-9)
    assert mixed[2] == pytest.approx(collective_time(TRN1X2, *near, GOLD)[0], rel=1e-12)
