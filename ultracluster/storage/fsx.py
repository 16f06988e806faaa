"""A scenario's `storage` block → `FsxSpec`: what an FSx for Lustre file system can do.

The published tiers of each deployment type, per TiB (ref §1.2), the per-client limits (ref §1.4), metadata
IOPS (ref §1.6) and latency (ref §1.7), in SI units. Pure (numpy only).

Units: bytes, bytes/s, seconds. MB = 1e6 bytes (AWS's MB/s), TiB = 2**40 bytes, Gbit/s = 1e9/8 bytes/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..units import GB, GBPS, GIB, MB, TIB  # noqa: F401  (re-exported by ultracluster.storage)

READ, READ_CACHED, WRITE = "read", "read_cached", "write"
KINDS = (READ, READ_CACHED, WRITE)


@dataclass(frozen=True)
class Tier:
    """One FSx deployment type at one per-unit throughput (ref §1.2 tables); throughputs in MB/s per TiB of
    storage capacity.

    Attributes:
        net_mbps_per_tib: network baseline. net_burst_mbps_per_tib: network burst (0: none).
        disk_read_mbps_per_tib, disk_write_mbps_per_tib: disk baseline for reads and writes.
        disk_burst_read_mbps_per_tib, disk_burst_write_mbps_per_tib: disk burst (0: none).
        cache_gib_per_tib: file servers' RAM cache.
        tib_per_server: storage per file server (OSS) ([S] in ref §1.3).
        hdd: HDD storage (data latency in ms).
    """

    net_mbps_per_tib: float
    net_burst_mbps_per_tib: float
    disk_read_mbps_per_tib: float
    disk_write_mbps_per_tib: float
    disk_burst_read_mbps_per_tib: float
    disk_burst_write_mbps_per_tib: float
    cache_gib_per_tib: float
    tib_per_server: float
    hdd: bool = False


# ref §1.2 "SSD, current generation", "Previous-generation SSD (PERSISTENT_1)" and "HDD" (FSX-SSD,
# performance.md @da580d8); storage per file server from ref §1.3 ([S]).
TIERS: dict[tuple[str, float], Tier] = {
    ("SCRATCH_2", 200): Tier(200, 1300, 200, 100, 0, 0, 6.7, 2.4),
    ("PERSISTENT_2", 125): Tier(320, 1300, 125, 125, 500, 500, 3.4, 2.4),
    ("PERSISTENT_2", 250): Tier(640, 1300, 250, 250, 500, 500, 6.8, 2.4),
    ("PERSISTENT_2", 500): Tier(1300, 0, 500, 500, 0, 0, 13.7, 2.4),
    ("PERSISTENT_2", 1000): Tier(2600, 0, 1000, 1000, 0, 0, 27.3, 2.4),
    ("PERSISTENT_1", 50): Tier(250, 1300, 50, 50, 240, 240, 2.2, 2.4),
    ("PERSISTENT_1", 100): Tier(500, 1300, 100, 100, 240, 240, 4.4, 2.4),
    ("PERSISTENT_1", 200): Tier(750, 1300, 200, 200, 240, 240, 8.8, 2.4),
    ("PERSISTENT_1", 12): Tier(40, 375, 12, 12, 80, 50, 0.4, 6.0, hdd=True),
    ("PERSISTENT_1", 40): Tier(150, 1300, 40, 40, 250, 150, 1.5, 1.8, hdd=True),
}
CLIENT_NON_EFA_BYTES_PER_S = 100 * GBPS   # ref §1.4 [S]: a non-EFA client tops out around 100 Gbps
CLIENT_PER_SERVER_BYTES_PER_S = 5 * GBPS  # ref §1.4: one client-OSS connection, 5 Gbps (EC2 single-flow rule)
LATENCY_SSD_S, LATENCY_HDD_S = 0.5e-3, 5e-3   # ref §1.7 suggested defaults per metadata op / data RPC


# FSx for Lustre storage prices, US dollars per GB-month of provisioned capacity, US East (N. Virginia), by
# deployment type and throughput tier: https://aws.amazon.com/fsx/lustre/pricing/ (read 2026-12; the page bills
# "storage capacity measured in gigabyte-months", prorated by the second). A GB-month here is a GiB of provisioned
# capacity (a 1.2 TiB = 1,200 GiB file system at $0.145 is $174 a month), so a TiB-month is 1,024 of them. Other
# regions differ: `storage.price_per_tib_month_usd` overrides. Backups, data transfer and the HDD SSD cache are not
# priced.
PRICE_USD_PER_GB_MONTH: dict[tuple[str, float], float] = {
    ("SCRATCH_2", 200): 0.140,
    ("PERSISTENT_2", 125): 0.145, ("PERSISTENT_2", 250): 0.210, ("PERSISTENT_2", 500): 0.340,
    ("PERSISTENT_2", 1000): 0.600,
    ("PERSISTENT_1", 50): 0.145, ("PERSISTENT_1", 100): 0.210, ("PERSISTENT_1", 200): 0.290,
    ("PERSISTENT_1", 12): 0.025, ("PERSISTENT_1", 40): 0.083,
}
HOURS_PER_MONTH = 730.0        # AWS's billing month (the EC2 and FSx pricing pages' 730 hours)
FSX_PRICE_SOURCE = "FSx for Lustre price list, us-east-1 (aws.amazon.com/fsx/lustre/pricing)"
FSX_PRICE_OVERRIDE = "storage.price_per_tib_month_usd"


def price_per_tib_month(storage) -> tuple[float, str]:
    """(US dollars per TiB-month of provisioned capacity, where it comes from) of a scenario's `storage` block:
    `storage.price_per_tib_month_usd` when given, else the published price of its deployment type and tier."""
    get = storage.get if isinstance(storage, dict) else (lambda k: getattr(storage, k, None))
    own = get("price_per_tib_month_usd")
    if own is not None:
        return float(own), FSX_PRICE_OVERRIDE
    return 1024.0 * PRICE_USD_PER_GB_MONTH[(get("deployment"), get("throughput_mbps_per_tib"))], FSX_PRICE_SOURCE


def storage_usd_per_hour(storage) -> float:
    """US dollars the file system costs per wall hour (its capacity x its TiB-month price / the billing month's
    hours); 0 without storage. `storage`: a StorageSpec or its dict."""
    if not storage:
        return 0.0
    usd, _ = price_per_tib_month(storage)
    cap = storage["capacity_tib"] if isinstance(storage, dict) else storage.capacity_tib
    return cap * usd / HOURS_PER_MONTH


def storage_cost_usd(storage, days):
    """US dollars the file system costs over `days` of wall time (its capacity x its TiB-month price x the
    months): vectorized over `days`; 0 without storage. `storage`: a StorageSpec or its dict."""
    if not storage:
        return np.zeros_like(np.asarray(days, dtype=float))
    usd, _ = price_per_tib_month(storage)
    cap = storage["capacity_tib"] if isinstance(storage, dict) else storage.capacity_tib
    return cap * usd * np.asarray(days, dtype=float) * 24.0 / HOURS_PER_MONTH


def tier_allowed(deployment: str | None, mbps_per_tib: float) -> str | None:
    """None when (deployment, MB/s per TiB) is a published tier, else what is allowed, in words."""
    if deployment is None or (deployment, mbps_per_tib) in TIERS:
        return None
    allowed = sorted(t for d, t in TIERS if d == deployment)
    words = ", ".join(f"{a:g}" for a in allowed)
    return f"one of {words} on {deployment} (the published FSx for Lustre tiers, MB/s per TiB)"


def auto_metadata_iops(capacity_tib: float) -> float:
    """Metadata IOPS of PERSISTENT_2 in automatic mode for a capacity (ref §1.6 [S] mapping, used for all types)."""
    gib = capacity_tib * 1024
    if gib >= 48000:
        return 12000.0 * math.floor(gib / 24000)
    for limit, iops in ((1200, 1500.0), (2400, 3000.0), (9600, 6000.0)):
        if gib <= limit + 1e-9:
            return iops
    return 12000.0


@dataclass(frozen=True)
class FsxSpec:
    """One file system's limits in SI units, with its burst-credit settings.

    Burst credits (ref §1.2): a token bucket per resource (network, disk) that holds credit in seconds of
    baseline throughput. Using more than the baseline drains it at (usage / baseline - 1) per second; using
    less refills it at `refill` x (1 - usage / baseline) per second; while it holds credit the burst limits
    apply, else the baselines. A full bucket sustains `bucket_s` seconds of full burst.

    Attributes:
        net_bytes_per_s, net_burst_bytes_per_s: network baseline and burst throughput of the whole file system.
        disk_read_bytes_per_s, disk_write_bytes_per_s: disk baseline throughput for reads and for writes.
        disk_burst_read_bytes_per_s, disk_burst_write_bytes_per_s: disk burst throughput.
        client_bytes_per_s: limit of one client instance in one direction.
        servers: file servers (OSS), a count.
        cache_bytes: the file servers' RAM cache.
        metadata_iops: metadata operations per second.
        latency_s: latency of one metadata operation or data RPC.
        bucket_s: seconds of full burst a full bucket sustains.
        refill_factor: refill rate of the buckets, a multiple of the unused share of the baseline
            (dimensionless).
    """

    net_bytes_per_s: float
    net_burst_bytes_per_s: float
    disk_read_bytes_per_s: float
    disk_write_bytes_per_s: float
    disk_burst_read_bytes_per_s: float
    disk_burst_write_bytes_per_s: float
    client_bytes_per_s: float           # per client instance and direction
    servers: int = 1
    cache_bytes: float = 0.0
    metadata_iops: float = math.inf
    latency_s: float = 0.0
    bucket_s: float = 0.0
    refill_factor: float = 1.0

    @property
    def net_burst_ratio(self) -> float:
        """Network burst over baseline (at least 1)."""
        return max(1.0, self.net_burst_bytes_per_s / self.net_bytes_per_s)

    @property
    def disk_burst_ratio(self) -> float:
        """Disk burst over baseline, the larger of reads and writes (at least 1)."""
        return max(1.0, self.disk_burst_read_bytes_per_s / self.disk_read_bytes_per_s,
                   self.disk_burst_write_bytes_per_s / self.disk_write_bytes_per_s)

    @property
    def bucket_full_s(self) -> np.ndarray:
        """[network, disk] credit of a full bucket, in seconds of baseline throughput."""
        return np.array([self.bucket_s * (self.net_burst_ratio - 1.0), self.bucket_s * (self.disk_burst_ratio - 1.0)])

    @classmethod
    def simple(cls, bytes_per_s: float, client_bytes_per_s: float = math.inf, burst_bytes_per_s: float | None = None,
               bucket_s: float = 0.0, refill_factor: float = 1.0) -> "FsxSpec":
        """A file system whose network and disk both carry `bytes_per_s` (`burst_bytes_per_s` while in credit)."""
        b = bytes_per_s if burst_bytes_per_s is None else burst_bytes_per_s
        return cls(net_bytes_per_s=bytes_per_s, net_burst_bytes_per_s=b, disk_read_bytes_per_s=bytes_per_s,
                   disk_write_bytes_per_s=bytes_per_s, disk_burst_read_bytes_per_s=b, disk_burst_write_bytes_per_s=b,
                   client_bytes_per_s=client_bytes_per_s, bucket_s=bucket_s, refill_factor=refill_factor)


def fsx_spec(storage, nic_bytes_per_s: float = math.inf) -> FsxSpec:
    """The FsxSpec of a scenario's `storage` block (a validated StorageSpec).

    Args:
        storage: the scenario's storage block.
        nic_bytes_per_s: the client instance's network bandwidth (a per-client limit too).
    """
    from ..errors import Problem, ScenarioError

    key = (storage.deployment, storage.throughput_mbps_per_tib)
    if key not in TIERS:
        raise ScenarioError([Problem("storage.throughput_mbps_per_tib", storage.throughput_mbps_per_tib,
                                     tier_allowed(*key))])
    t, cap = TIERS[key], storage.capacity_tib
    servers = max(1, math.ceil(cap / t.tib_per_server - 1e-9))
    client = storage.client_gbps * GBPS if storage.client_gbps else \
        min(nic_bytes_per_s, CLIENT_NON_EFA_BYTES_PER_S, CLIENT_PER_SERVER_BYTES_PER_S * servers)

    def rate(per_tib: float, base: float) -> float:
        return max(per_tib, base) * cap * MB

    return FsxSpec(
        net_bytes_per_s=t.net_mbps_per_tib * cap * MB,
        net_burst_bytes_per_s=rate(t.net_burst_mbps_per_tib, t.net_mbps_per_tib),
        disk_read_bytes_per_s=t.disk_read_mbps_per_tib * cap * MB,
        disk_write_bytes_per_s=t.disk_write_mbps_per_tib * cap * MB,
        disk_burst_read_bytes_per_s=rate(t.disk_burst_read_mbps_per_tib, t.disk_read_mbps_per_tib),
        disk_burst_write_bytes_per_s=rate(t.disk_burst_write_mbps_per_tib, t.disk_write_mbps_per_tib),
        client_bytes_per_s=client, servers=servers, cache_bytes=t.cache_gib_per_tib * cap * GIB,
        metadata_iops=storage.metadata_iops or auto_metadata_iops(cap),
        latency_s=LATENCY_HDD_S if t.hdd else LATENCY_SSD_S, bucket_s=storage.burst_bucket_s,
        refill_factor=storage.burst_refill)
