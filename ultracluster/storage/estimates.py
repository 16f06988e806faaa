"""Scenario → the storage keys of summary.json: one checkpoint and one restore alone on an idle file system.

`figures(scenario, cluster)` gives them typed (`StorageFigures`, which `ultracluster.emulate` puts in the
`RunResult` from the cluster it built, and `goodput` reads); `estimates` the same as a dict. Pure (numpy only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..units import TIB
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
        storage_capacity_gb: the file system's capacity, 10^9 bytes.
        dataset_gb: the training data set at `storage.bytes_per_token` x the budget's tokens (None without a budget).
        checkpoints_kept: checkpoints the file system holds (`checkpoint.keep`, else `ASSUMED_CHECKPOINTS_KEPT`).
        storage_needed_gb: the data set plus the checkpoints kept, 10^9 bytes.
        capacity_reason: why the file system cannot hold them (the run is infeasible), else None.
        capacity_warning: why it may not (with an assumed retention), else None.
    """

    data_gb_per_step: float
    fsx_read_gb_s: float
    fsx_write_gb_s: float
    checkpoint_gb: float | None = None
    checkpoint_write_s: float | None = None
    checkpoint_block_s: float | None = None
    restore_s: float | None = None
    storage_capacity_gb: float | None = None
    dataset_gb: float | None = None
    checkpoints_kept: int | None = None
    storage_needed_gb: float | None = None
    capacity_reason: str | None = None
    capacity_warning: str | None = None

    def summary_keys(self) -> dict[str, float]:
        """The summary.json keys, in order; the checkpoint ones only with checkpoints (the capacity's words are
        the run's reason and warnings, not keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None and f.name not in ("capacity_reason", "capacity_warning")}


def back_to_back_write_s(st, period_s: float) -> float:
    """An async checkpoint's write as the closed form prices back-pressure: the write alone on an idle file system
    (`checkpoint_write_s`, full burst credits) where it ends within the checkpoint period; where it does not, writes
    run back to back, the burst credits never refill, and each takes the checkpoint at the baseline write rate
    (`checkpoint_gb` / `fsx_write_gb_s`, if longer)."""
    write = float(st.checkpoint_write_s or 0.0)
    if write <= period_s or not (st.checkpoint_gb and st.fsx_write_gb_s):
        return write
    return max(write, st.checkpoint_gb / st.fsx_write_gb_s)


# Checkpoints a file system holds when `checkpoint.keep` is not given: an assumption, the fewest a job can keep and
# still roll back after a failure during a write (the last durable one and the one being written). The stacks keep
# more by default: TorchTitan `keep_latest_k = 10` (torchtitan/components/checkpointer/base.py).
ASSUMED_CHECKPOINTS_KEPT = 2


def budget_tokens(scenario) -> float | None:
    """The scenario's training budget in tokens (`training.budget_tokens`, or `budget_steps` x tokens per step)."""
    t = scenario.training
    if t.budget_tokens is not None:
        return float(t.budget_tokens)
    return float(t.budget_steps * scenario.tokens_per_step) if t.budget_steps is not None else None


def capacity_check(scenario, checkpoint_bytes: float | None, tokens: float | None = None) -> dict:
    """Whether the file system holds the checkpoints kept (`checkpoint.keep`, else `ASSUMED_CHECKPOINTS_KEPT`) and
    the data set (the budget's `tokens` x `storage.bytes_per_token`; None: the scenario's budget, unknown without
    one): the capacity keys of `StorageFigures`. `capacity_reason` where it cannot hold the checkpoints (the
    retention given, or one checkpoint with it assumed): the job cannot run. `capacity_warning` where it cannot hold
    them with the data set, or the assumed retention: the data set must then stream from S3 (an FSx data repository
    with automatic release), which the model does not time, or the retention is smaller than assumed."""
    st, ck = scenario.storage, scenario.checkpoint
    tokens = budget_tokens(scenario) if tokens is None else tokens
    cap = st.capacity_tib * TIB
    data = tokens * st.bytes_per_token if tokens is not None else 0.0
    one = float(checkpoint_bytes) if checkpoint_bytes and ck is not None else 0.0
    given = bool(one and ck.keep)
    kept = (ck.keep or ASSUMED_CHECKPOINTS_KEPT) if one else 0
    need = data + kept * one
    out = {"storage_capacity_gb": cap / 1e9, "dataset_gb": data / 1e9 if tokens is not None else None,
           "checkpoints_kept": kept if one else None, "storage_needed_gb": need / 1e9,
           "capacity_reason": None, "capacity_warning": None}
    if need <= cap:
        return out

    def words(with_data: bool, n_kept: int) -> str:
        parts = ([f"the data set {data / 1e12:,.2f} TB ({tokens:.3g} tokens x {st.bytes_per_token:g} B, "
                  f"storage.bytes_per_token)"] if with_data and data else [])
        if n_kept:
            parts.append(f"{n_kept} checkpoint{'s' if n_kept > 1 else ''} of {one / 1e12:,.2f} TB"
                         + (" (checkpoint.keep)" if given else
                            f" ({ASSUMED_CHECKPOINTS_KEPT} assumed: set checkpoint.keep)" if n_kept > 1 else ""))
        total = (data if with_data else 0.0) + n_kept * one
        return (f"storage.capacity_tib {st.capacity_tib:g} TiB ({cap / 1e12:,.2f} TB) cannot hold "
                + " + ".join(parts) + f" = {total / 1e12:,.2f} TB: at least {math.ceil(total / TIB * 10) / 10:g} TiB")
    if one > cap or (given and kept * one > cap):
        out["capacity_reason"] = words(False, kept if given else 1)
    else:
        out["capacity_warning"] = words(True, kept) + (
            " (the data set would have to stream from S3 with automatic release, which is not modelled)"
            if data and data + kept * one > cap and kept * one <= cap else "")
    return out


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
    return out | capacity_check(scenario, traffic.checkpoint_bytes)
