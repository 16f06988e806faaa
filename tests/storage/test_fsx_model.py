"""The FSx model alone (no Ray): throughput limits, per-client caps, burst buckets, max-min fairness,
cached vs uncached reads, tiers, checkpoint sizes, and fast-forwarding against step-by-step replay."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.errors import ScenarioError
from ultracluster.storage import (
    MB, READ, READ_CACHED, WRITE, FsxSpec, StorageCosts, StorageServer, checkpoint_bytes_per_rank, fsx_spec,
    max_min_fair, storage_traffic,
)

GB = 1e9


def finish_time(server: StorageServer, tag: str) -> float:
    server.advance(wait_for=tag)
    return server.finished[tag]


@pytest.mark.parametrize("n", [1, 3, 16, 64])
@pytest.mark.parametrize("throughput", [0.5 * GB, 12 * GB])
def test_n_writers_take_n_s_over_t(n, throughput):
    size = 3 * GB
    s = StorageServer(FsxSpec.simple(throughput), n)
    s.submit("w", WRITE, size)
    assert finish_time(s, "w") == pytest.approx(n * size / throughput, rel=1e-9)


@pytest.mark.parametrize("n", [1, 4, 32])
def test_per_client_cap_binds_when_the_file_system_is_large(n):
    size, client = 3 * GB, 12.5 * GB / 8   # 12.5 Gbit/s per client
    s = StorageServer(FsxSpec.simple(1e15, client_bytes_per_s=client), n)
    s.submit("w", WRITE, size)
    assert finish_time(s, "w") == pytest.approx(size / client, rel=1e-9)
    # in between, the tighter of the two limits wins
    s = StorageServer(FsxSpec.simple(n * client / 2, client_bytes_per_s=client), n)
    s.submit("w", WRITE, size)
    assert finish_time(s, "w") == pytest.approx(2 * size / client, rel=1e-9)


@pytest.mark.parametrize("bucket_s,ratio,refill", [(10.0, 2.0, 1.0), (30.0, 4.0, 0.5), (5.0, 1.5, 2.0)])
def test_burst_credits_drain_and_refill_as_configured(bucket_s, ratio, refill):
    base = 1 * GB
    spec = FsxSpec.simple(base, burst_bytes_per_s=ratio * base, bucket_s=bucket_s, refill_factor=refill)
    s = StorageServer(spec, 2)
    full = bucket_s * (ratio - 1)                        # seconds of baseline throughput
    assert s.level == pytest.approx([full, full])
    # a write larger than a full bucket: bucket_s seconds at burst, the rest at baseline
    size = ratio * base * bucket_s + 7 * base
    s.submit("w", WRITE, size / 2)
    assert finish_time(s, "w") == pytest.approx(bucket_s + 7, rel=1e-9)
    assert s.level == pytest.approx([0, 0], abs=1e-9)
    # idle: credits come back at refill x baseline, capped at the bucket size
    t0 = s.now
    s.advance(until=t0 + 0.25 * full / refill)
    assert s.level == pytest.approx([0.25 * full] * 2, rel=1e-9)
    s.advance(until=t0 + 10 * full / refill)
    assert s.level == pytest.approx([full] * 2, rel=1e-9)
    # half the baseline in use refills at half the rate
    s = StorageServer(spec, 1)
    s.level[:] = 0
    s.submit("r", WRITE, 1e18, rate_cap_bytes_per_s=base / 2)
    s.advance(until=4.0)
    assert s.level == pytest.approx([min(full, 2.0 * refill)] * 2, rel=1e-9)


def test_no_bucket_means_no_burst():
    s = StorageServer(FsxSpec.simple(1 * GB, burst_bytes_per_s=5 * GB, bucket_s=0), 1)
    s.submit("w", WRITE, 10 * GB)
    assert finish_time(s, "w") == pytest.approx(10, rel=1e-9)


def test_cached_reads_are_network_bound_uncached_take_the_lower_limit():
    spec = FsxSpec(net_bytes_per_s=4 * GB, net_burst_bytes_per_s=4 * GB, disk_read_bytes_per_s=1 * GB,
                   disk_write_bytes_per_s=0.5 * GB, disk_burst_read_bytes_per_s=1 * GB,
                   disk_burst_write_bytes_per_s=0.5 * GB, client_bytes_per_s=math.inf)
    for kind, rate in ((READ_CACHED, 4 * GB), (READ, 1 * GB), (WRITE, 0.5 * GB)):
        s = StorageServer(spec, 4)
        s.submit("x", kind, 2 * GB)
        assert finish_time(s, "x") == pytest.approx(4 * 2 * GB / rate, rel=1e-9)
    # a cached read and a write share the network; the write alone uses the disk
    s = StorageServer(spec, 1)
    s.submit("c", READ_CACHED, 1e18, clients=[0])
    s.submit("w", WRITE, 1e18, clients=[0])
    r = s.rates()
    assert r["w"][0] == pytest.approx(0.5 * GB) and r["c"][0] == pytest.approx(3.5 * GB)


def test_max_min_fair_example():
    # one file system of 9 GB/s, clients asking for 1, 3 and 10 GB/s: 1, 3, and the rest (5) to the third
    s = StorageServer(FsxSpec.simple(9 * GB), 3)
    for i, want in enumerate([1 * GB, 3 * GB, 10 * GB]):
        s.submit(f"c{i}", WRITE, 1e18, clients=[i], rate_cap_bytes_per_s=want)
    got = [s.rates()[f"c{i}"][i] for i in range(3)]
    assert got == pytest.approx([1 * GB, 3 * GB, 5 * GB])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0.1, 10)), min_size=1, max_size=12),
       st.lists(st.floats(0.5, 8), min_size=6, max_size=6), st.floats(1, 40), st.floats(0.5, 40))
def test_max_min_fair_is_feasible_and_every_flow_is_bottlenecked(flows, client_caps, net, disk):
    """Progressive filling gives a feasible allocation in which each flow is held by a saturated limit on
    which it has the largest rate (the definition of max-min fairness)."""
    groups = np.array([g for g, _ in flows])
    want = np.array([w for _, w in flows])
    caps = np.array(client_caps)
    coef = np.where(np.arange(len(flows)) % 2 == 0, 1.0 / disk, 0.0)
    r = max_min_fair(groups, caps, want, [(np.ones(len(flows)), net), (coef, 1.0)])
    tol = 1e-7
    used = np.bincount(groups, weights=r, minlength=6)
    assert (r >= -tol).all() and (r <= want + tol).all() and (used <= caps + tol).all()
    assert r.sum() <= net + tol and coef @ r <= 1 + tol
    for f in range(len(flows)):
        held = r[f] >= want[f] - tol
        held |= used[groups[f]] >= caps[groups[f]] - tol and r[f] >= r[groups == groups[f]].max() - tol
        held |= r.sum() >= net - tol and r[f] >= r.max() - tol
        held |= coef[f] > 0 and coef @ r >= 1 - tol and r[f] >= r[coef > 0].max() - tol
        assert held, (f, r)


def test_published_tiers_and_their_errors():
    base = ["storage.kind=fsx-lustre", "storage.capacity_tib=48"]
    sc = load_scenario(_smoke(), base + ["storage.deployment=PERSISTENT_2", "storage.throughput_mbps_per_tib=250"])
    spec = fsx_spec(sc.storage)
    cap = 48.0                                               # TiB
    # docs/sources.md §1.9 worked example: 250 MB/s/TiB at ~47 TiB: disk 11.7 GB/s, burst 23.4; network 30.0
    assert spec.disk_write_bytes_per_s == pytest.approx(250 * cap * MB)
    assert spec.disk_burst_write_bytes_per_s == pytest.approx(500 * cap * MB)
    assert spec.net_bytes_per_s == pytest.approx(640 * cap * MB)
    assert spec.net_burst_bytes_per_s == pytest.approx(1300 * cap * MB)
    assert spec.servers == 20 and spec.client_bytes_per_s == pytest.approx(100e9 / 8)     # 100 Gbps, 20 x 5 Gbps
    with pytest.raises(ScenarioError) as err:
        load_scenario(_smoke(), base + ["storage.deployment=PERSISTENT_2", "storage.throughput_mbps_per_tib=300"])
    (p,) = err.value.problems
    assert p.path == "storage.throughput_mbps_per_tib" and p.given == 300
    assert "125, 250, 500, 1000" in p.allowed
    with pytest.raises(ScenarioError) as err:
        load_scenario(_smoke(), base + ["storage.deployment=SCRATCH_2", "storage.throughput_mbps_per_tib=250"])
    assert "200" in err.value.problems[0].allowed


def _smoke():
    from pathlib import Path
    return Path(__file__).resolve().parents[2] / "scenarios" / "smoke.yaml"


def _scenario(*sets):
    sc = load_scenario(_smoke(), ["storage.kind=fsx-lustre", "storage.deployment=PERSISTENT_2",
                                  "storage.capacity_tib=2.4", "storage.throughput_mbps_per_tib=125", *sets])
    return sc, build_cluster(sc, 1)


@pytest.mark.parametrize("zero1", [True, False])
def test_checkpoint_size_follows_the_layout(zero1):
    from ultracluster import operators as opslib

    sc, cl = _scenario(f"training.zero1={str(zero1).lower()}")
    w, o = checkpoint_bytes_per_rank(sc, cl)
    lay = cl.layout
    layers = np.asarray(cl.stage_layers(sc.model.layers), dtype=float)
    params = opslib.chunk_params(sc.model, lay.tp, layers, lay.pp).sum() * lay.tp
    assert w.sum() == pytest.approx(2 * params) and o.sum() == pytest.approx(12 * params)   # bf16 + fp32 m, v, master
    writers = np.flatnonzero(o)
    dp_of = writers // (lay.tp * lay.cp * lay.pp)
    assert (np.flatnonzero(w) < lay.tp * lay.pp).all()                 # weights: data-parallel rank 0 only
    assert (set(dp_of) == set(range(lay.dp))) if zero1 else (set(dp_of) == {0})
    plan = storage_traffic(sc, cl)
    assert plan.checkpoint.sum() == pytest.approx(14 * params) and plan.checkpoint_files == (w > 0).sum() + len(writers)


@pytest.mark.parametrize("sets", [
    ["checkpoint.every_steps=7", "checkpoint.mode=async"],
    ["checkpoint.every_steps=40", "checkpoint.mode=sync"],
    ["checkpoint.every_steps=50", "checkpoint.mode=async", "storage.capacity_tib=1.2", "storage.bytes_per_token=3000"],
    ["checkpoint.every_steps=9", "checkpoint.mode=sync", "storage.capacity_tib=1.2", "storage.bytes_per_token=20000",
     "storage.prefetch_steps=0"],
])
def test_fast_forward_gives_the_step_by_step_result(sets):
    sc, cl = _scenario(*sets)
    spec = fsx_spec(sc.storage, cl.links.efa_bytes_per_s)
    one = StorageCosts(sc, cl, StorageServer(spec, cl.instances))
    n, busy = 1500, 0.5
    stalls = np.array([one(k, busy) for k in range(n)])
    ff = StorageCosts(sc, cl, StorageServer(spec, cl.instances))
    prog = ff.run(busy, n)
    assert prog.explicit_steps < n / 4
    assert ff.now() == pytest.approx(one.now(), rel=1e-9)
    assert sum(c.n * c.data_stall_s for c in prog.spans) == pytest.approx(stalls[:, 0].sum(), rel=1e-6, abs=1e-9)
    assert sum(c.n * c.checkpoint_s for c in prog.spans) == pytest.approx(stalls[:, 1].sum(), rel=1e-6, abs=1e-9)
    assert prog.durable[-1][0] == one.durable[-1][0]
    assert prog.durable[-1][1] == pytest.approx(one.durable[-1][1], rel=1e-9)
    assert ff.server.level == pytest.approx(one.server.level, rel=1e-6, abs=1e-6)
