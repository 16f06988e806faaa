"""Scenario → the storage keys of summary.json: one checkpoint and one restore alone on an idle file system.

`figures(scenario, cluster)` gives them typed (`StorageFigures`, which `ultracluster.emulate` puts in the
`RunResult` from the cluster it built, and `goodput` reads); `estimates` the same as a dict. Pure (numpy only).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from .fsx import READ, READ_CACHED, WRITE, FsxSpec, fsx_spec
from .traffic import storage_traffic
from .server import StorageServer


@dataclass(frozen=True)
class StorageFigures:
    """One checkpoint and one restore alone on an idle file system with full buckets (see `estimates`).

    Attributes:
        data_gb_per_step: training data read per step, 10^9 bytes.
        fsx_read_gb_s, fsx_write_gb_s: baseline of uncached reads and of writes (min of network and disk), GB/s.
        checkpoint_gb: one checkpoint, 10^9 bytes (None without checkpoints, as the three below).
        checkpoint_write_s: its write alone.
        checkpoint_block_s: what it blocks training: device-to-host copy, plus the write for sync.
        restore_s: read back and copied to the devices.
    """

    data_gb_per_step: float
    fsx_read_gb_s: float
    fsx_write_gb_s: float
    checkpoint_gb: float | None = None
    checkpoint_write_s: float | None = None
    checkpoint_block_s: float | None = None
    restore_s: float | None = None

    def summary_keys(self) -> dict[str, float]:
        """The summary.json keys, in order; the checkpoint ones only with checkpoints."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def figures(scenario, cluster, spec: FsxSpec | None = None) -> StorageFigures | None:
    """`estimates` typed; None without storage."""
    est = estimates(scenario, cluster, spec)
    return StorageFigures(**est) if est else None


def estimates(scenario, cluster, spec: FsxSpec | None = None) -> dict[str, float]:
    """One checkpoint and one restore alone on an idle file system with full buckets (summary.json keys).

    Returns:
        `data_gb_per_step` (10^9 bytes), `fsx_read_gb_s` and `fsx_write_gb_s` (baseline of uncached reads and
        of writes: min of network and disk); with checkpoints also `checkpoint_gb`, `checkpoint_write_s`,
        `checkpoint_block_s` (what a checkpoint blocks training: device-to-host copy, plus the write for sync)
        and `restore_s` (read back and copy to the devices) — or {} without storage.
    """
    if scenario.storage is None:
        return {}
    spec = spec or fsx_spec(scenario.storage, cluster.links.efa_bytes_per_s)
    traffic = storage_traffic(scenario, cluster, spec)
    meta = traffic.checkpoint_files / spec.metadata_iops + spec.latency_s
    s = StorageServer(spec, cluster.instances)
    s.submit("ckpt", WRITE, traffic.checkpoint, delay_s=meta)
    s.advance(wait_for="ckpt")
    write = s.now
    r = StorageServer(spec, cluster.instances)
    r.submit("restore", READ, traffic.restore, delay_s=meta)
    r.submit("restore_cached", READ_CACHED, traffic.restore_cached, delay_s=meta)
    while r.transfers:
        r.advance(stop_on_finish=True)
    out = {"data_gb_per_step": float(traffic.data.sum()) / 1e9,
           "fsx_read_gb_s": float(min(spec.net_bytes_per_s, spec.disk_read_bytes_per_s) / 1e9),
           "fsx_write_gb_s": float(min(spec.net_bytes_per_s, spec.disk_write_bytes_per_s) / 1e9)}
    if scenario.checkpoint is not None:
        out |= {"checkpoint_gb": float(traffic.checkpoint_bytes / 1e9), "checkpoint_write_s": float(write),
                "checkpoint_block_s": float(traffic.d2h_s + (write if scenario.checkpoint.mode == "sync" else 0.0)),
                "restore_s": float(r.now + traffic.d2h_s)}
    return out
