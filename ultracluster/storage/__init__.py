"""Shared storage: an FSx for Lustre file system → data-loading stalls, checkpoint stalls, restore times.

Pure (numpy, no Ray). One module per job, each usable alone (formulas and sources in docs/storage.md; every
number is from docs/sources.md §1-2, "ref §x" in the modules):

* `fsx`: `TIERS` / `FsxSpec`: what a file system can do: per-TiB network and disk baselines and bursts of its
  deployment type (ref §1.2), per-client limits (ref §1.4), metadata IOPS (ref §1.6), latency (ref §1.7).
* `server`: `StorageServer`: one file system's state on a virtual clock: two burst-credit buckets (network,
  disk) and the transfers in flight, shared max-min fairly (`ultracluster.fairshare`), advanced from event to
  event (a fluid model: rates are constant between events).
* `plan`: `storage_traffic`: what training asks of it (data per step per instance; checkpoint bytes per instance
  from the model and optimizer layout; restore reads).
* `costs`: `StorageCosts`: the replay engine's `StepCosts` hook, failures and restores, with fast-forwarding of
  steps in which nothing changes (`StorageCosts.run`), used by `goodput`.
* `estimates`: the summary's storage keys (one checkpoint and one restore alone), typed as `StorageFigures`.

Units: bytes, bytes/s, seconds. MB = 1e6 bytes (AWS's MB/s), TiB = 2**40 bytes, Gbit/s = 1e9/8 bytes/s.
"""
from ..fairshare import max_min_fair
from .costs import StepSpan, StorageProgress, StorageCosts
from .estimates import ASSUMED_CHECKPOINTS_KEPT, StorageFigures, budget_tokens, capacity_check, estimates, figures
from .fsx import (
    FSX_PRICE_OVERRIDE, FSX_PRICE_SOURCE, HOURS_PER_MONTH, PRICE_USD_PER_GB_MONTH, price_per_tib_month,
    storage_cost_usd, CLIENT_NON_EFA_BYTES_PER_S, CLIENT_PER_SERVER_BYTES_PER_S, GBPS, GIB, KINDS, LATENCY_HDD_S, LATENCY_SSD_S, MB,
    READ, READ_CACHED, TIB, TIERS, WRITE, FsxSpec, Tier, auto_metadata_iops, fsx_spec, tier_allowed,
)
from .traffic import StorageTraffic, checkpoint_bytes_per_rank, storage_traffic
from .server import StorageServer

__all__ = [
    "ASSUMED_CHECKPOINTS_KEPT", "FSX_PRICE_OVERRIDE", "FSX_PRICE_SOURCE", "HOURS_PER_MONTH", "PRICE_USD_PER_GB_MONTH",
    "budget_tokens", "capacity_check", "price_per_tib_month", "storage_cost_usd",
    "CLIENT_NON_EFA_BYTES_PER_S", "CLIENT_PER_SERVER_BYTES_PER_S", "StepSpan", "FsxSpec", "GBPS", "GIB", "KINDS",
    "LATENCY_HDD_S", "LATENCY_SSD_S", "MB", "StorageProgress", "READ", "READ_CACHED", "StorageCosts", "StorageTraffic",
    "StorageFigures", "StorageServer", "TIB", "TIERS", "Tier", "WRITE", "auto_metadata_iops",
    "checkpoint_bytes_per_rank",
    "estimates", "figures", "fsx_spec", "max_min_fair", "storage_traffic", "tier_allowed",
]
