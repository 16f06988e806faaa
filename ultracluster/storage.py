"""Shared storage: an FSx for Lustre file system → data-loading stalls, checkpoint stalls, restore times.

Pure (numpy, no Ray). Layers, each usable alone (formulas and sources in docs/storage.md; every number
is from docs/sources.md §1-2, "ref §x" below):

* `TIERS` / `FsxSpec`: what a file system can do: per-TiB network and disk baselines and bursts of its
  deployment type (ref §1.2), per-client limits (ref §1.4), metadata IOPS (ref §1.6), latency (ref §1.7).
* `max_min_fair`: progressive filling of concurrent flows under per-flow, per-client and file-system limits
  (ref §1.5: AWS documents no fairness algorithm; max-min is a modelling choice).
* `StorageServer`: one file system's state on a virtual clock: two burst-credit buckets (network, disk) and
  the transfers in flight, advanced from event to event (a fluid model: rates are constant between events).
  AWS publishes neither the bucket size nor its refill rate: both are scenario settings.
* `storage_plan` + `StorageCosts`: what training asks of it (data per step per instance; checkpoint bytes per
  instance from the model and optimizer layout; restore reads) and the replay engine's `StepCosts` hook,
  with fast-forwarding of steps in which nothing changes (`StorageCosts.run`), used by `goodput`.

Units: bytes, bytes/s, seconds. MB = 1e6 bytes (AWS's MB/s), TiB = 2**40 bytes, Gbit/s = 1e9/8 bytes/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MB = 1e6
TIB = float(2**40)
GIB = float(2**30)
GBPS = 1e9 / 8

READ, READ_CACHED, WRITE = "read", "read_cached", "write"
KINDS = (READ, READ_CACHED, WRITE)


@dataclass(frozen=True)
class Tier:
    """One FSx deployment type at one per-unit throughput, in MB/s per TiB (ref §1.2 tables).

    Attributes:
        net: network baseline. net_burst: network burst (0: none).
        disk_read, disk_write: disk baseline for reads and writes.
        disk_burst_read, disk_burst_write: disk burst (0: none).
        cache_gib_per_tib: file servers' RAM cache.
        tib_per_server: storage per file server (OSS) ([S] in ref §1.3).
        hdd: HDD storage (data latency in ms).
    """

    net: float
    net_burst: float
    disk_read: float
    disk_write: float
    disk_burst_read: float
    disk_burst_write: float
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
    """One file system's limits in SI units (bytes/s), with its burst-credit settings.

    Burst credits (ref §1.2): a token bucket per resource (network, disk) that holds credit in seconds of
    baseline throughput. Using more than the baseline drains it at (usage / baseline - 1) per second; using
    less refills it at `refill` x (1 - usage / baseline) per second; while it holds credit the burst limits
    apply, else the baselines. A full bucket sustains `bucket_s` seconds of full burst.
    """

    net: float
    net_burst: float
    disk_read: float
    disk_write: float
    disk_burst_read: float
    disk_burst_write: float
    client: float                 # per client instance and direction
    servers: int = 1
    cache_bytes: float = 0.0
    metadata_iops: float = math.inf
    latency_s: float = 0.0
    bucket_s: float = 0.0
    refill: float = 1.0

    @property
    def net_ratio(self) -> float:
        return max(1.0, self.net_burst / self.net)

    @property
    def disk_ratio(self) -> float:
        return max(1.0, self.disk_burst_read / self.disk_read, self.disk_burst_write / self.disk_write)

    @property
    def bucket_full(self) -> np.ndarray:
        """[network, disk] credit of a full bucket, in seconds of baseline throughput."""
        return np.array([self.bucket_s * (self.net_ratio - 1.0), self.bucket_s * (self.disk_ratio - 1.0)])

    @classmethod
    def simple(cls, throughput: float, client: float = math.inf, burst: float | None = None,
               bucket_s: float = 0.0, refill: float = 1.0) -> "FsxSpec":
        """A file system whose network and disk both carry `throughput` bytes/s (`burst` while in credit)."""
        b = throughput if burst is None else burst
        return cls(net=throughput, net_burst=b, disk_read=throughput, disk_write=throughput,
                   disk_burst_read=b, disk_burst_write=b, client=client, bucket_s=bucket_s, refill=refill)


def fsx_spec(storage, nic_bytes_per_s: float = math.inf) -> FsxSpec:
    """The FsxSpec of a scenario's `storage` block (a validated StorageSpec).

    Args:
        storage: the scenario's storage block.
        nic_bytes_per_s: the client instance's network bandwidth (a per-client limit too).
    """
    from .errors import Problem, ScenarioError

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
        net=t.net * cap * MB, net_burst=rate(t.net_burst, t.net),
        disk_read=t.disk_read * cap * MB, disk_write=t.disk_write * cap * MB,
        disk_burst_read=rate(t.disk_burst_read, t.disk_read), disk_burst_write=rate(t.disk_burst_write, t.disk_write),
        client=client, servers=servers, cache_bytes=t.cache_gib_per_tib * cap * GIB,
        metadata_iops=storage.metadata_iops or auto_metadata_iops(cap),
        latency_s=LATENCY_HDD_S if t.hdd else LATENCY_SSD_S, bucket_s=storage.burst_bucket_s,
        refill=storage.burst_refill)


# --- max-min fair sharing -----------------------------------------------------------------------------------

def max_min_fair(groups: np.ndarray, group_cap: np.ndarray, flow_cap: np.ndarray,
                 shared: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Max-min fair rates of concurrent flows by progressive filling.

    Every unfrozen flow's rate rises at the same pace; when a limit is reached, the flows it binds freeze.

    Args:
        groups: [F] int: each flow's client group (one client in one direction); a group carries at most
            `group_cap[g]` in total.
        group_cap: [G] bytes/s per group.
        flow_cap: [F] bytes/s a flow may take (its demand; inf = as much as it can get).
        shared: (coefficients [F], capacity) limits sum_f coef_f x rate_f <= capacity (the file system).

    Returns:
        [F] rates, bytes/s.
    """
    n = len(groups)
    rate = np.zeros(n)
    active = np.ones(n, dtype=bool)
    n_groups = len(group_cap)
    while active.any():
        n_g = np.bincount(groups[active], minlength=n_groups)
        used_g = np.bincount(groups, weights=rate, minlength=n_groups)
        head_g = np.full(n_groups, np.inf)
        np.divide(group_cap - used_g, n_g, out=head_g, where=n_g > 0)
        head_f = np.where(active, flow_cap - rate, np.inf)
        heads_s = []
        for coef, cap in shared:
            c = coef[active].sum()
            heads_s.append((cap - float(coef @ rate)) / c if c > 0 else np.inf)
        lam = min(head_g.min(), head_f.min(), min(heads_s, default=np.inf))
        if not math.isfinite(lam):
            raise ValueError("max_min_fair: a flow has no finite limit")
        lam = max(lam, 0.0)
        tol = 1e-9 * max(lam, 1.0)
        rate[active] += lam
        freeze = active & (((head_g - lam) <= tol)[groups] | ((head_f - lam) <= tol))
        for (coef, _), h in zip(shared, heads_s):
            if h - lam <= tol:
                freeze |= active & (coef > 0)
        active &= ~freeze
    return rate


# --- one file system on a virtual clock ----------------------------------------------------------------------

@dataclass
class _Transfer:
    kind: str
    remaining: np.ndarray        # [classes] bytes each client of the class still has to move (0: none)
    start: float                 # virtual time the bytes start to flow (after metadata and latency)
    flow_cap: np.ndarray         # [classes] bytes/s each client asks for at most (its demand)


class StorageServer:
    """One file system: burst buckets and transfers in flight, advanced on its own virtual clock.

    Plain Python over numpy: `actors.storage_actor` wraps it as a Ray actor (one per file system), tests
    and long runs call it directly. Clients that ask for the same bytes at the same limits always get the
    same shares, so the server keeps them as one class: the work per event grows with the number of distinct
    client patterns, not with the number of instances.

    Args:
        spec: the file system's limits.
        clients: client instances (ids 0..clients-1).
        client_caps: per-client limit, bytes/s, per direction [spec.client for all].
    """

    def __init__(self, spec: FsxSpec, clients: int, client_caps=None):
        self.spec, self.clients = spec, int(clients)
        caps = np.full(self.clients, spec.client, dtype=float) if client_caps is None \
            else np.broadcast_to(np.asarray(client_caps, dtype=float), (self.clients,)).copy()
        self.full = spec.bucket_full
        self.level = self.full.copy()
        self.now = 0.0
        self.transfers: dict[str, _Transfer] = {}
        self.finished: dict[str, float] = {}
        self._ext: dict[str, list[np.ndarray]] = {}
        self._caps = caps
        self._classes(np.unique(caps, return_inverse=True)[1].reshape(-1))

    def _classes(self, cls: np.ndarray) -> None:
        """Set the client classes (ids 0..k-1, numbered by first client): multiplicity, cap, members."""
        _, first, inverse = np.unique(cls, return_index=True, return_inverse=True)
        order = np.argsort(first)                      # number classes by their first client
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        self.cls = rank[inverse.reshape(-1)]
        self.first = first[order]
        self.mult = np.bincount(self.cls).astype(float)
        self.group_cap = np.repeat(self._caps[self.first], 2)    # group 2k: class k reading, 2k+1: writing

    # -- requests ------------------------------------------------------------------------------------------
    def submit(self, tag: str, kind: str, nbytes, clients=None, delay_s: float = 0.0, rate_cap=None) -> None:
        """Start a transfer of `nbytes` per client (scalar or array over `clients`, default every client).

        Args:
            tag: its name; a finished transfer's tag may be reused.
            kind: "read" (min of network and disk), "read_cached" (network only) or "write" (min of both).
            nbytes: bytes per client.
            clients: client ids (default all).
            delay_s: seconds before the bytes start to flow (metadata operations, latency).
            rate_cap: bytes/s each client asks for at most (default: as much as it can get).
        """
        if kind not in KINDS:
            raise ValueError(f"transfer kind {kind!r}: allowed {KINDS}")
        if tag in self.transfers:
            raise ValueError(f"transfer {tag!r} is already in flight")
        cl = np.arange(self.clients) if clients is None else np.asarray(clients, dtype=np.int64).reshape(-1)
        b = np.zeros(self.clients)
        cap = np.full(self.clients, np.inf)
        b[cl] = np.broadcast_to(np.asarray(nbytes, dtype=float), cl.shape)
        cap[cl] = np.broadcast_to(np.asarray(np.inf if rate_cap is None else rate_cap, dtype=float), cl.shape)
        f = self.first
        if not (np.array_equal(b, b[f][self.cls]) and np.array_equal(cap, cap[f][self.cls])):
            old_cls = self.cls                         # the transfer splits classes: refine them
            self._classes(np.unique(np.stack([old_cls.astype(float), b, cap], axis=1), axis=0,
                                    return_inverse=True)[1].reshape(-1))
            back = old_cls[self.first]                 # each new class's old class
            for tr in self.transfers.values():
                tr.remaining, tr.flow_cap = tr.remaining[back], tr.flow_cap[back]
        self.finished.pop(tag, None)
        self.transfers[tag] = _Transfer(kind, b[self.first], self.now + max(0.0, delay_s), cap[self.first])

    def cancel(self, tag: str | None = None) -> None:
        """Drop one transfer in flight (or all of them: None)."""
        if tag is None:
            self.transfers.clear()
        else:
            self.transfers.pop(tag, None)

    def busy(self, tag: str) -> bool:
        return tag in self.transfers

    def remaining(self, tag: str) -> float:
        """Bytes the transfer still has to move, over all its clients (0 when finished or unknown)."""
        tr = self.transfers.get(tag)
        return float(tr.remaining @ self.mult) if tr else 0.0

    # -- sharing ---------------------------------------------------------------------------------------------
    def _flows(self):
        """Flows in progress: (transfers, class, kind index, demand, remaining bytes, slices per transfer)."""
        live_tr, cl, kind, caps, rem = [], [], [], [], []
        for tr in self.transfers.values():
            if tr.start > self.now + 1e-12:
                continue
            live = np.flatnonzero(tr.remaining > 0)
            live_tr.append((tr, live))
            cl.append(live)
            kind.append(np.full(len(live), KINDS.index(tr.kind)))
            caps.append(tr.flow_cap[live])
            rem.append(tr.remaining[live])
        if not cl:
            return live_tr, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        return live_tr, np.concatenate(cl), np.concatenate(kind), np.concatenate(caps), np.concatenate(rem)

    def _rates(self, cl: np.ndarray, kind: np.ndarray, caps: np.ndarray) -> np.ndarray:
        """Per-client rate of each flow (class, transfer): max-min fair over every client of every class."""
        s = self.spec
        net_cap = s.net_burst if self.level[0] > 0 else s.net
        rd, wr = (s.disk_burst_read, s.disk_burst_write) if self.level[1] > 0 else (s.disk_read, s.disk_write)
        m = self.mult[cl]
        disk = np.array([1.0 / rd, 0.0, 1.0 / wr])[kind] * m
        return max_min_fair(2 * cl + (kind == 2), self.group_cap, caps, [(m, net_cap), (disk, 1.0)])

    def _usage(self, cl: np.ndarray, kind: np.ndarray, rates: np.ndarray) -> np.ndarray:
        """[network, disk] usage as a fraction of the baselines."""
        s = self.spec
        total = rates * self.mult[cl]
        disk = total[kind == 0].sum() / s.disk_read + total[kind == 2].sum() / s.disk_write
        return np.array([total.sum() / s.net, disk])

    def rates(self) -> dict[str, np.ndarray]:
        """Current rate of every transfer in flight, bytes/s per client (array over all clients)."""
        live_tr, cl, kind, caps, _ = self._flows()
        per_class = {id(tr): np.zeros(len(self.first)) for tr in self.transfers.values()}
        if len(cl):
            r = self._rates(cl, kind, caps)
            i = 0
            for tr, live in live_tr:
                per_class[id(tr)][live] = r[i:i + len(live)]
                i += len(live)
        return {tag: per_class[id(tr)][self.cls] for tag, tr in self.transfers.items()}

    # -- the clock ---------------------------------------------------------------------------------------------
    def mark(self, slot: str = "step") -> None:
        """Start tracking the lowest and highest bucket levels from now in `slot` (for fast-forwarding)."""
        self._ext[slot] = [self.level.copy(), self.level.copy()]

    def extremes(self, slot: str = "step") -> tuple[np.ndarray, np.ndarray]:
        """Lowest and highest bucket levels since `mark(slot)`."""
        low, high = self._ext.get(slot, (self.level, self.level))
        return low.copy(), high.copy()

    def advance(self, until: float = math.inf, wait_for: str | None = None,
                stop_on_finish: bool = False) -> list[tuple[str, float]]:
        """Move the clock forward, moving bytes at their fair rates and draining or refilling the buckets.

        Stops at `until`, when `wait_for` finishes, or (with `stop_on_finish`) when any transfer finishes.

        Returns:
            (tag, finish time) of every transfer that finished, in order.
        """
        if wait_for is not None and wait_for not in self.transfers:
            return []
        done: list[tuple[str, float]] = []
        while self.now < until:
            live_tr, cl, kind, caps, rem = self._flows()
            pending = [tr.start for tr in self.transfers.values() if tr.start > self.now + 1e-12]
            r = self._rates(cl, kind, caps) if len(cl) else np.zeros(0)
            t_flow = np.full(len(r), np.inf)
            np.divide(rem, r, out=t_flow, where=r > 0)
            u = self._usage(cl, kind, r) if len(cl) else np.zeros(2)
            drift = np.where(u > 1, 1.0 - u, self.spec.refill * (1.0 - u))
            drift = np.where(self.full > 0, drift, 0.0)
            t_empty = np.full(2, np.inf)
            np.divide(self.level, -drift, out=t_empty, where=(drift < 0) & (self.level > 0))
            dt = min(until - self.now, t_flow.min(initial=np.inf), min(pending, default=np.inf) - self.now,
                     t_empty.min())
            if not math.isfinite(dt):
                if not self.transfers:
                    raise ValueError("advance: nothing in flight and no time limit")
                raise RuntimeError("advance: transfers in flight make no progress")
            dt = max(dt, 0.0)
            if len(cl):                                  # move bytes
                left = np.where(t_flow <= dt * (1 + 1e-12) + 1e-15, 0.0, np.maximum(rem - r * dt, 0.0))
                i = 0
                for tr, live in live_tr:
                    tr.remaining[live] = left[i:i + len(live)]
                    i += len(live)
            self.level = np.clip(self.level + drift * dt, 0.0, self.full)
            self.level[t_empty <= dt * (1 + 1e-12)] = 0.0
            for ext in self._ext.values():
                np.minimum(ext[0], self.level, out=ext[0])
                np.maximum(ext[1], self.level, out=ext[1])
            self.now = until if self.now + dt >= until else self.now + dt
            for tag in [t for t, tr in self.transfers.items()
                        if tr.start <= self.now + 1e-12 and not (tr.remaining > 0).any()]:
                del self.transfers[tag]
                self.finished[tag] = self.now
                done.append((tag, self.now))
            if done and (stop_on_finish or any(t == wait_for for t, _ in done)):
                break
        return done

    # -- fast-forwarding ---------------------------------------------------------------------------------------
    def state(self) -> tuple[tuple, np.ndarray]:
        """(structure key, state vector): the bucket levels, each transfer's remaining bytes per client class,
        then the seconds before each pending transfer starts."""
        key = tuple((t, tr.kind, len(tr.remaining), tr.start > self.now + 1e-12) for t, tr in self.transfers.items())
        vec = np.concatenate([self.level] + [tr.remaining for tr in self.transfers.values()]
                             + [np.array([max(0.0, tr.start - self.now)]) for tr in self.transfers.values()])
        return key, vec

    def jump(self, dt: float, dvec: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
        """Move the clock by `dt` and the state vector by `dvec` (layout of `state`), as if the repeating
        pattern that produced `dvec` had run on; `low`/`high`: the bucket levels it went through."""
        self.now += dt
        self.level = np.clip(self.level + dvec[:2], 0.0, self.full)
        i = 2
        for tr in self.transfers.values():
            k = len(tr.remaining)
            tr.remaining = np.maximum(tr.remaining + dvec[i:i + k], 0.0)
            tr.start += dt
            i += k
        for ext in self._ext.values():
            np.minimum(ext[0], np.clip(low, 0.0, self.full), out=ext[0])
            np.maximum(ext[1], np.clip(high, 0.0, self.full), out=ext[1])


# --- what training asks of storage -----------------------------------------------------------------------------

@dataclass(frozen=True)
class StoragePlan:
    """Bytes per instance that training moves, from the scenario's model, layout and storage blocks.

    Attributes:
        data: [instances] training data read per step.
        checkpoint: [instances] bytes written per checkpoint (`checkpoint_bytes_per_rank`).
        checkpoint_files: files per checkpoint (one per writing rank and kind).
        restore: [instances] bytes read from disk on a restart (each checkpoint byte once, plus what the
            cache cannot hold of the further reads).
        restore_cached: [instances] further reads of the same files (other replicas' weights, context-parallel
            copies), served from the file servers' cache as far as it holds them.
        d2h_s: device-to-host copy of the checkpoint (the instance with the most bytes); also the copy back.
    """

    data: np.ndarray
    checkpoint: np.ndarray
    checkpoint_files: int
    restore: np.ndarray
    restore_cached: np.ndarray
    d2h_s: float

    @property
    def checkpoint_bytes(self) -> float:
        return float(self.checkpoint.sum())


def _rank_state(scenario, cluster) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(parallel coordinates, weight bytes, optimizer-state bytes) that each rank holds, [ranks] each.

    Weights at training precision (4 B fp32, else 2 B); optimizer state fp32 master + Adam m, v = 12 B/param
    with fp32 master weights, bf16 m, v = 4 B/param without (as memory.py; ZeRO paper, ref §2.1), divided
    over data-parallel ranks under ZeRO-1 and ZeRO-3 (`operators.sharding`); weights too under ZeRO-3.
    """
    from . import operators as opslib
    from .cluster import rank_coords

    t, layout = scenario.training, cluster.layout
    layers = np.asarray(cluster.stage_layers(scenario.model.layers), dtype=float)
    chunk = opslib.chunk_params(scenario.model, layout.tp, layers, layout.pp)
    stage = np.zeros(layout.pp)
    np.add.at(stage, np.arange(chunk.size) % layout.pp, chunk)
    c = rank_coords(layout, np.arange(cluster.ranks))
    params = stage[c["pp"]]
    w_bytes = opslib.weight_bytes(t)
    o_bytes = 12.0 if t.master_weights == "fp32" else 4.0
    shard = opslib.sharding(t)
    return (c, params * w_bytes / (layout.dp if shard.weights else 1),
            params * o_bytes / (layout.dp if shard.optimizer else 1))


def checkpoint_bytes_per_rank(scenario, cluster) -> tuple[np.ndarray, np.ndarray]:
    """(weights, optimizer) bytes each rank writes to one checkpoint, [ranks] each (NxD layout, ref §2.2).

    Weights from data-parallel rank 0, from every rank under ZeRO-3 (its shard); optimizer state from every
    rank under ZeRO-1 and ZeRO-3 (its shard), from data-parallel rank 0 otherwise. Context-parallel ranks
    hold copies: only cp rank 0 writes.
    """
    from .operators import sharding

    c, w, o = _rank_state(scenario, cluster)
    first = (c["dp"] == 0) & (c["cp"] == 0)
    shard, cp0 = sharding(scenario.training), c["cp"] == 0
    return np.where(cp0 if shard.weights else first, w, 0.0), np.where(cp0 if shard.optimizer else first, o, 0.0)


def storage_plan(scenario, cluster, spec: FsxSpec | None = None) -> StoragePlan:
    """What training reads and writes, per instance (see StoragePlan)."""
    layout, n, st = cluster.layout, cluster.instances, scenario.storage
    inst = np.arange(cluster.ranks) // cluster.ranks_per_instance
    c, held_w, held_o = _rank_state(scenario, cluster)
    # data: the first tensor-parallel rank of the first and of the last pipeline stage of every replica reads
    # its share of the batch (tokens and labels, as Megatron/NxD data loaders do); context parallel splits it
    readers = (c["tp"] == 0) & ((c["pp"] == 0) | (c["pp"] == layout.pp - 1))
    per_reader = scenario.tokens_per_step * (st.bytes_per_token if st else 0.0) / (layout.dp * layout.cp)
    data = np.bincount(inst, weights=readers * per_reader, minlength=n)
    weights, opt = checkpoint_bytes_per_rank(scenario, cluster)
    ckpt = np.bincount(inst, weights=weights + opt, minlength=n)
    n_files = int((weights > 0).sum() + (opt > 0).sum())
    # restore: every rank reads back the weights and optimizer shard it holds (as DCP/NxD loads do); a file's
    # first read comes from disk, the further reads of the same files (other replicas' weights, context-parallel
    # copies) from the file servers' RAM cache as far as it holds those files, from disk beyond
    reread = held_w + held_o - weights - opt
    extra = np.bincount(inst, weights=reread, minlength=n)
    files = float(weights.sum() if layout.dp > 1 else 0.0) + float(opt.sum() if layout.cp > 1 else 0.0)
    cached = 1.0 if spec is None or files <= 0 else min(1.0, spec.cache_bytes / files)
    d2h = 0.0
    if scenario.checkpoint is not None:
        per_instance = scenario.checkpoint.d2h_gbps_per_chip * GBPS * cluster.instance.chips
        d2h = float(ckpt.max(initial=0.0) / per_instance)
    return StoragePlan(data=data, checkpoint=ckpt, checkpoint_files=n_files, restore=ckpt + (1 - cached) * extra,
                       restore_cached=cached * extra, d2h_s=d2h)


# --- the engine's StepCosts hook, failures and fast-forwarding ---------------------------------------------------

@dataclass
class Chunk:
    """`n` consecutive steps from `first`, with per-step means of each part (seconds). The means are exact for
    any split at a multiple of the checkpoint period counted from `first`, and anywhere for identical steps."""

    first: int
    n: int
    busy_s: float
    data_stall_s: float
    checkpoint_s: float

    @property
    def step_s(self) -> float:
        return self.busy_s + self.data_stall_s + self.checkpoint_s


@dataclass
class Progress:
    """What `StorageCosts.run` did: the steps it ran (as chunks) and the checkpoints that became durable."""

    chunks: list[Chunk] = field(default_factory=list)
    durable: list[tuple[int, float]] = field(default_factory=list)   # (steps covered, virtual time)
    explicit_steps: int = 0
    cut: bool = False


class _Cut(Exception):
    """A step did not finish by the time limit; storage stands at the limit."""


class StorageCosts:
    """Data loading and checkpoints of one run against one file system (the engine's `StepCosts`).

    Per step k: the data loader must have batch k (a sequential loader that may run `prefetch_steps`
    batches ahead: batch j may start once step j - prefetch_steps has taken its batch; with 0 it loads each
    batch when its step asks for it); the wait is `data_stall_s`. Then the step computes for `busy_s` while the
    loader and any background checkpoint write share the file system. Then, every `checkpoint.every_steps`
    steps, the checkpoint: `sync` copies device to host and writes, blocking; `async` waits for the previous
    write to end (back-pressure), blocks for the device-to-host copy only, and writes in the background,
    competing with data loading. A checkpoint is durable when its write ends.

    Args:
        scenario: the resolved scenario.
        cluster: its cluster.
        server: the file system (StorageServer, or the Ray actor's proxy); None when the scenario has no
            storage (loading and checkpoints are free, a checkpoint is durable at once).
        plan: the bytes (default: `storage_plan`).
    """

    def __init__(self, scenario, cluster, server=None, plan: StoragePlan | None = None):
        self.server = server
        spec = server.spec if server is not None else None
        self.plan = plan or storage_plan(scenario, cluster, spec)
        self.free = server is None
        st, ck = scenario.storage, scenario.checkpoint
        self.prefetch = st.prefetch_steps if st else 0
        self.every = ck.every_steps if ck else 0
        self.mode = ck.mode if ck else "sync"
        self.latency = spec.latency_s if spec else 0.0
        self.meta_s = self.plan.checkpoint_files / spec.metadata_iops if spec else 0.0
        self.has_data = not self.free and float(self.plan.data.sum()) > 0
        self.limit = math.inf
        self.t = 0.0
        self.step = 0
        self.durable_step = 0
        self.durable: list[tuple[int, float]] = []
        self._ready = 0          # batches 0..ready-1 are loaded
        self._loading = False
        self._allowed = -1       # highest batch the loader may load
        self._writing: int | None = None   # steps covered by the checkpoint being written
        self._acc = [0.0, 0.0]             # data stall and checkpoint seconds so far (fast-forward bookkeeping)
        self._dvec = np.zeros(2)

    # -- helpers on the server -----------------------------------------------------------------------------------
    def _handle(self, done: list[tuple[str, float]]) -> None:
        for tag, when in done:
            if tag == "data":
                self._ready += 1
                self._loading = False
                self._kick()
            elif tag == "ckpt" and self._writing is not None:
                self.durable_step = self._writing
                self.durable.append((self._writing, float(when)))
                self._writing = None

    def _kick(self) -> None:
        if self.has_data and not self._loading and self._ready <= self._allowed:
            self.server.submit("data", READ, self.plan.data, delay_s=self.latency)
            self._loading = True

    def _run_until(self, t: float) -> None:
        """Storage runs on to t (handling loader and checkpoint events); _Cut when the limit comes first."""
        target = min(t, self.limit)
        if not self.free:
            while self.server.now < target:
                self._handle(self.server.advance(until=target, stop_on_finish=True))
        if t > self.limit:
            raise _Cut

    def _wait(self, tag: str) -> None:
        while self.server.busy(tag):
            if self.server.now >= self.limit:
                raise _Cut
            self._handle(self.server.advance(until=self.limit, stop_on_finish=True))

    def now(self) -> float:
        return self.t if self.free else float(self.server.now)

    # -- one step ----------------------------------------------------------------------------------------------
    def __call__(self, step: int, busy_s: float) -> tuple[float, float]:
        """(data_stall_s, checkpoint_s) of `step`; steps come in order."""
        t0 = self.now()
        self.step = step
        stall = 0.0
        if self.has_data:
            self._allowed = max(self._allowed, step)
            self._kick()
            while self._ready <= step:
                self._wait("data")
            stall = self.server.now - t0
            self._allowed = step + self.prefetch
            self._kick()
        t1 = t0 + stall + busy_s
        self._run_until(t1)
        ck = 0.0
        if self.every and (step + 1) % self.every == 0:
            ck = self._checkpoint(step + 1, t1)
        self.t = t1 + ck
        self.step = step + 1
        stall, ck = float(stall), float(ck)
        self._acc[0] += stall
        self._acc[1] += ck
        return stall, ck

    def _checkpoint(self, covered: int, t1: float) -> float:
        if self.free:
            self.durable_step = covered
            self.durable.append((covered, t1))
            return 0.0
        if self._writing is not None:          # back-pressure: the previous write must end first
            self._wait("ckpt")
        self._run_until(self.server.now + self.plan.d2h_s)
        self._writing = covered
        self.server.submit("ckpt", WRITE, self.plan.checkpoint, delay_s=self.meta_s + self.latency)
        if self.mode == "sync":
            self._wait("ckpt")
        return self.server.now - t1

    # -- failures --------------------------------------------------------------------------------------------------
    def fail(self, t: float) -> None:
        """A failure at time t: storage runs on to t, then every transfer of the job is dropped."""
        if not self.free:
            saved, self.limit = self.limit, math.inf
            self._run_until(t)
            self.limit = saved
            self.server.cancel()
        self.t = t
        self._loading, self._writing = False, None

    def idle(self, t: float) -> None:
        """Nothing from this job reaches storage until t (the buckets refill)."""
        if not self.free and t > self.server.now:
            self.server.advance(until=t)
        self.t = max(self.t, t)

    def restore(self, limit: float = math.inf) -> float | None:
        """Read the last checkpoint back: metadata, disk and cached reads, then the host-to-device copy.

        Returns:
            The time the restore ends, or None when `limit` comes first (storage then stands at `limit`).
        """
        if self.free:
            return self.t if self.t <= limit else None
        p, s = self.plan, self.server
        s.submit("restore", READ, p.restore, delay_s=self.meta_s + self.latency)
        s.submit("restore_cached", READ_CACHED, p.restore_cached, delay_s=self.meta_s + self.latency)
        while (s.busy("restore") or s.busy("restore_cached")) and s.now < limit:
            s.advance(until=limit, stop_on_finish=True)
        end = s.now + p.d2h_s
        if s.busy("restore") or s.busy("restore_cached") or end > limit:
            s.cancel()
            if s.now < limit:
                s.advance(until=limit)
            self.t = limit
            return None
        s.advance(until=end)
        self.t = end
        return end

    def resume(self, step: int) -> None:
        """Training restarts at `step` (the last durable checkpoint); the loader starts from empty."""
        self.step = step
        self._ready, self._loading, self._allowed, self._writing = step, False, step - 1, None

    # -- fast-forwarding ----------------------------------------------------------------------------------------
    def _signature(self, slot: str) -> tuple:
        """(key, state vector, lowest levels, highest levels) at a step boundary, relative to the step."""
        rel = (self._ready - self.step, self._loading, self._allowed - self.step) if self.has_data else ()
        rel += (None if self._writing is None else self._writing - self.step,)
        if self.free:
            return (rel,), np.zeros(2), np.zeros(2), np.zeros(2)
        skey, vec = self.server.state()
        low, high = self.server.extremes(slot)
        return (skey, rel), vec, low, high

    def run(self, busy_s: float, steps: int, t_limit: float = math.inf) -> Progress:
        """Run up to `steps` steps, stopping at `t_limit`, fast-forwarding whatever repeats.

        A unit (one step, or one checkpoint period of `every_steps` steps) repeats when the state at its
        boundaries (bucket levels, bytes in flight, loader and checkpoint positions relative to the step) moved
        by the same amount in the last two units and their stalls were equal: then many units are jumped in
        one move, stopping short of the next checkpoint (for steps), of a bucket emptying or filling up, of a
        transfer ending, and of `t_limit`.

        Returns:
            The steps done (as chunks of per-step means) and the checkpoints that became durable; `cut` is
            True when a step was under way at `t_limit` (storage then stands at `t_limit`; that step's work is
            not in the chunks).
        """
        prog = Progress()
        self.durable = []
        end = self.step + steps
        steps_h: list[tuple] = []
        periods_h: list[tuple] = []
        self.limit = t_limit
        try:
            if not self.free:
                self.server.mark("step")
                self.server.mark("period")
            while self.step < end:
                if self.every and self.step % self.every == 0:
                    periods_h = periods_h[-2:] + [(self._signature("period"), self.now(), self.step,
                                                   tuple(self._acc), len(self.durable))]
                    if not self.free:
                        self.server.mark("period")
                    if len(periods_h) == 3 and self._period_jump(periods_h, busy_s, end, t_limit, prog):
                        periods_h, steps_h = [], []
                        continue
                if len(steps_h) >= 2 and self._step_jump(steps_h, busy_s, end, t_limit, prog):
                    steps_h = []
                    continue
                k = self.step
                sig0 = self._signature("step")
                try:
                    stall, ck = self(k, busy_s)
                except _Cut:
                    self.step, self.t, prog.cut = k, t_limit, True
                    break
                prog.explicit_steps += 1
                self._add(prog, Chunk(k, 1, busy_s, stall, ck))
                steps_h = steps_h[-1:] + [(sig0, self._signature("step"), stall, ck)]
                if not self.free:
                    self.server.mark("step")
        finally:
            self.limit = math.inf
        prog.durable, self.durable = self.durable, []
        return prog

    @staticmethod
    def _add(prog: Progress, c: Chunk) -> None:
        last = prog.chunks[-1] if prog.chunks else None
        if last and last.first + last.n == c.first and \
                (last.busy_s, last.data_stall_s, last.checkpoint_s) == (c.busy_s, c.data_stall_s, c.checkpoint_s):
            last.n += c.n
        else:
            prog.chunks.append(c)

    def _limit_units(self, unit_s: float, t_limit: float) -> int:
        return int((t_limit - self.now()) / unit_s * (1 - 1e-12)) if math.isfinite(t_limit) else 1 << 62

    def _step_jump(self, hist, busy_s: float, end: int, t_limit: float, prog: Progress) -> bool:
        (a0, a1, st_a, ck_a), (b0, b1, st_b, ck_b) = hist[-2], hist[-1]
        if (st_a, ck_a) != (st_b, ck_b) or ck_b != 0.0:
            return False
        step_s = busy_s + st_b
        m = min(end - self.step, self._limit_units(step_s, t_limit))
        if self.every:                                   # stop before the next checkpoint step
            m = min(m, self.every * (self.step // self.every + 1) - 1 - self.step)
        m = min(m, self._repeats(a0, a1, b0, b1))
        if m < 1:
            return False
        self._shift(m, m, m * step_s, b1)
        self._acc[0] += m * st_b
        self._add(prog, Chunk(self.step - m, m, busy_s, st_b, 0.0))
        return True

    def _period_jump(self, hist, busy_s: float, end: int, t_limit: float, prog: Progress) -> bool:
        (s0, t0, k0, acc0, d0), (s1, t1, k1, acc1, d1), (s2, t2, k2, acc2, d2) = hist
        p = self.every
        if k1 - k0 != p or k2 - k1 != p:
            return False
        ua, ub = (t1 - t0, acc1[0] - acc0[0], acc1[1] - acc0[1]), (t2 - t1, acc2[0] - acc1[0], acc2[1] - acc1[1])
        if not np.allclose(ua, ub, rtol=1e-9, atol=1e-12):
            return False
        ev_a = [(c - k0, w - t0) for c, w in self.durable[d0:d1]]
        ev_b = [(c - k1, w - t1) for c, w in self.durable[d1:d2]]
        if len(ev_a) != len(ev_b) or any(x[0] != y[0] or abs(x[1] - y[1]) > 1e-9 * max(1.0, ub[0])
                                         for x, y in zip(ev_a, ev_b)):
            return False
        period_s = ub[0]
        m = min((end - self.step) // p, self._limit_units(period_s, t_limit), self._repeats(s0, s1, s1, s2))
        if m < 1:
            return False
        self._shift(m * p, m, m * period_s, s2)
        self._acc[0] += m * ub[1]
        self._acc[1] += m * ub[2]
        for c, w in ev_b:                     # the last repetition's durable checkpoints
            self.durable.append((k2 + (m - 1) * p + c, t2 + (m - 1) * period_s + w))
            self.durable_step = self.durable[-1][0]
        self._add(prog, Chunk(self.step - m * p, m * p, busy_s, ub[1] / p, ub[2] / p))
        return True

    def _shift(self, n: int, reps: int, dt: float, last) -> None:
        """Jump n steps (`reps` repetitions of the unit) taking dt seconds; the state moves by reps x the
        unit's change (see `_repeats`)."""
        if self.free:
            self.t += dt
        else:
            low = np.minimum(last[2], last[2] + reps * self._dvec[:2])
            high = np.maximum(last[3], last[3] + reps * self._dvec[:2])
            self.server.jump(dt, self._dvec * reps, low, high)
            self.t = self.server.now
        self.step += n
        self._ready += n
        self._allowed += n
        if self._writing is not None:
            self._writing += n

    def _repeats(self, a0, a1, b0, b1) -> int:
        """How many more times the last unit (b0 -> b1) can repeat unchanged (0: it did not repeat a0 -> a1)."""
        self._dvec = np.zeros(2)
        if not (a0[0] == a1[0] == b0[0] == b1[0]) or a0[1].shape != b1[1].shape:
            return 0
        if self.free:
            return 1 << 62
        da, db = a1[1] - a0[1], b1[1] - b0[1]
        tol = 1e-9 * np.maximum(np.abs(b1[1]), 1.0)
        if (np.abs(da - db) > tol).any():
            return 0
        moving = np.abs(db) > tol
        m = 1 << 62
        # bytes in flight: only a background checkpoint write may move, and only down
        i, may = 2, np.zeros(len(db), dtype=bool)
        for tag, _kind, k, _pending in b1[0][0]:
            if tag == "ckpt":
                may[i:i + k] = True
            i += k
        may[:2] = True
        if (moving & ~may).any() or (db[2:][moving[2:]] > 0).any():
            return 0
        rem, dec = b1[1][2:][moving[2:]], -db[2:][moving[2:]]
        if len(rem):
            m = min(m, int(np.floor((rem / dec).min())) - 2)
        # bucket levels: stay clear of empty (the lowest level in a unit) and of full (the highest)
        full = self.server.full
        for j in range(2):
            if moving[j]:
                room = b1[2][j] / -db[j] if db[j] < 0 else (full[j] - b1[3][j]) / db[j]
                m = min(m, int(np.floor(room)) - 2)
        self._dvec = np.where(moving, db, 0.0)
        return max(m, 0)


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
    plan = storage_plan(scenario, cluster, spec)
    meta = plan.checkpoint_files / spec.metadata_iops + spec.latency_s
    s = StorageServer(spec, cluster.instances)
    s.submit("ckpt", WRITE, plan.checkpoint, delay_s=meta)
    s.advance(wait_for="ckpt")
    write = s.now
    r = StorageServer(spec, cluster.instances)
    r.submit("restore", READ, plan.restore, delay_s=meta)
    r.submit("restore_cached", READ_CACHED, plan.restore_cached, delay_s=meta)
    while r.transfers:
        r.advance(stop_on_finish=True)
    out = {"data_gb_per_step": float(plan.data.sum()) / 1e9,
           "fsx_read_gb_s": float(min(spec.net, spec.disk_read) / 1e9),
           "fsx_write_gb_s": float(min(spec.net, spec.disk_write) / 1e9)}
    if scenario.checkpoint is not None:
        out |= {"checkpoint_gb": float(plan.checkpoint_bytes / 1e9), "checkpoint_write_s": float(write),
                "checkpoint_block_s": float(plan.d2h_s + (write if scenario.checkpoint.mode == "sync" else 0.0)),
                "restore_s": float(r.now + plan.d2h_s)}
    return out


def summary_keys(scenario) -> dict[str, float]:
    """The storage keys summary.json gains when the scenario has storage (see `estimates`), else {}."""
    if scenario.storage is None:
        return {}
    from .cluster import build_cluster

    return estimates(scenario, build_cluster(scenario, 1))
