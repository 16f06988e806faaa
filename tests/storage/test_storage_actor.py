"""The file system as a Ray actor (real local Ray): concurrent clients get max-min fair shares, and the
storage costs of a run are the same through the actor as in process."""
from pathlib import Path

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.actors.storage_actor import RayStorage, StorageActor, storage_service
from ultracluster.cluster import build_cluster
from ultracluster.storage import WRITE, FsxSpec, StorageCosts, StorageServer

GB = 1e9
SMOKE = Path(__file__).resolve().parents[2] / "scenarios" / "smoke.yaml"


def test_concurrent_clients_get_max_min_fair_shares(ray_session):
    ray = ray_session
    fs = StorageActor.remote(FsxSpec.simple(9 * GB, client_bytes_per_s=4 * GB), 5)

    @ray.remote(num_cpus=0)
    def client(actor, i, want):
        """One instance asking the file system for bandwidth, from its own Ray worker."""
        ray.get(actor.submit.remote(f"client{i}", WRITE, 1e15, clients=[i], rate_cap_bytes_per_s=want))
        return i

    try:
        demands = [1 * GB, 2 * GB, 10 * GB, 10 * GB, 0.5 * GB]
        assert sorted(ray.get([client.remote(fs, i, d) for i, d in enumerate(demands)])) == list(range(5))
        rates = ray.get(fs.rates.remote())
        got = np.array([rates[f"client{i}"][i] for i in range(5)])
        # 9 GB/s: 0.5, 1 and 2 are served in full, the two large clients split the remaining 5.5
        assert got == pytest.approx(np.array([1, 2, 2.75, 2.75, 0.5]) * GB)
        # a per-client cap binds once the file system is large
        big = StorageActor.remote(FsxSpec.simple(100 * GB, client_bytes_per_s=4 * GB), 5)
        ray.get([client.remote(big, i, d) for i, d in enumerate(demands)])
        rates = ray.get(big.rates.remote())
        assert [rates[f"client{i}"][i] for i in range(5)] == pytest.approx(np.array([1, 2, 4, 4, 0.5]) * GB)
        ray.kill(big)
    finally:
        ray.kill(fs)


def test_storage_costs_through_the_actor_equal_in_process(ray_session):
    sc = load_scenario(SMOKE, ["storage.kind=fsx-lustre", "storage.deployment=PERSISTENT_2",
                               "storage.capacity_tib=1.2", "storage.throughput_mbps_per_tib=125",
                               "storage.bytes_per_token=2000", "checkpoint.every_steps=3", "checkpoint.mode=async"])
    cl = build_cluster(sc, 1)
    with storage_service(sc, cl) as remote, storage_service(sc, cl, local=True) as local:
        assert isinstance(remote, RayStorage) and isinstance(local, StorageServer)
        a, b = StorageCosts(sc, cl, remote), StorageCosts(sc, cl, local)
        got = [a(k, 0.3) for k in range(10)]
        want = [b(k, 0.3) for k in range(10)]
    assert np.array(got) == pytest.approx(np.array(want), rel=1e-12)
    assert sum(s for s, _ in got) > 0 and sum(c for _, c in got) > 0
    # checkpoints after steps 3, 6, 9 (async): the first two are durable, the third still being written
    assert a.durable == b.durable and [c for c, _ in a.durable] == [3, 6] and a.durable_step == 6
