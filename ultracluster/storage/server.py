"""An `FsxSpec` and transfers → one file system on its own virtual clock (a fluid model).

Two burst-credit buckets (network, disk) and the transfers in flight, advanced from event to event: rates are
constant between events, shared max-min fairly (`ultracluster.fairshare`). AWS publishes neither the bucket
size nor its refill rate: both are scenario settings. Pure (numpy only); `actors.storage_actor` wraps it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..fairshare import max_min_fair
from .fsx import KINDS, FsxSpec


@dataclass
class _Transfer:
    kind: str
    remaining: np.ndarray        # [classes] bytes each client of the class still has to move (0: none)
    start: float                 # virtual time the bytes start to flow (after metadata and latency)
    demand_bytes_per_s: np.ndarray   # [classes] bytes/s each client asks for at most


class StorageServer:
    """One file system: burst buckets and transfers in flight, advanced on its own virtual clock.

    Plain Python over numpy: `actors.storage_actor` wraps it as a Ray actor (one per file system), tests
    and long runs call it directly. Clients that ask for the same bytes at the same limits always get the
    same shares, so the server keeps them as one class: the work per event grows with the number of distinct
    client patterns, not with the number of instances.

    Args:
        spec: the file system's limits.
        clients: client instances (ids 0..clients-1).
        client_caps_bytes_per_s: per-client limit, per direction [spec.client_bytes_per_s for all].
    """

    def __init__(self, spec: FsxSpec, clients: int, client_caps_bytes_per_s=None):
        self.spec, self.clients = spec, int(clients)
        caps = np.full(self.clients, spec.client_bytes_per_s, dtype=float) if client_caps_bytes_per_s is None \
            else np.broadcast_to(np.asarray(client_caps_bytes_per_s, dtype=float), (self.clients,)).copy()
        self.bucket_full_s = spec.bucket_full_s
        self.level = self.bucket_full_s.copy()
        self.now = 0.0
        self.transfers: dict[str, _Transfer] = {}
        self.finished: dict[str, float] = {}
        self._level_extremes: dict[str, list[np.ndarray]] = {}   # slot -> [lowest, highest] bucket levels
        self._client_caps_bytes_per_s = caps
        self._classes(np.unique(caps, return_inverse=True)[1].reshape(-1))

    def _classes(self, labels: np.ndarray) -> None:
        """Set the client classes from a label per client (ids 0..k-1, numbered by first client): each
        client's class, each class's first client and number of clients, and the per-class caps."""
        _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
        order = np.argsort(first)                      # number classes by their first client
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        self.client_class = rank[inverse.reshape(-1)]
        self.class_first_client = first[order]
        self.class_clients = np.bincount(self.client_class).astype(float)
        # sharing group 2k: class k reading, 2k + 1: class k writing (each client's cap holds per direction)
        self.group_cap_bytes_per_s = np.repeat(self._client_caps_bytes_per_s[self.class_first_client], 2)

    # -- requests ------------------------------------------------------------------------------------------
    def submit(self, tag: str, kind: str, nbytes, clients=None, delay_s: float = 0.0,
               rate_cap_bytes_per_s=None) -> None:
        """Start a transfer of `nbytes` per client (scalar or array over `clients`, default every client).

        Args:
            tag: its name; a finished transfer's tag may be reused.
            kind: "read" (min of network and disk), "read_cached" (network only) or "write" (min of both).
            nbytes: bytes per client.
            clients: client ids (default all).
            delay_s: seconds before the bytes start to flow (metadata operations, latency).
            rate_cap_bytes_per_s: what each client asks for at most (default: as much as it can get).
        """
        if kind not in KINDS:
            raise ValueError(f"transfer kind {kind!r}: allowed {KINDS}")
        if tag in self.transfers:
            raise ValueError(f"transfer {tag!r} is already in flight")
        cl = np.arange(self.clients) if clients is None else np.asarray(clients, dtype=np.int64).reshape(-1)
        b = np.zeros(self.clients)
        cap = np.full(self.clients, np.inf)
        b[cl] = np.broadcast_to(np.asarray(nbytes, dtype=float), cl.shape)
        asked = np.inf if rate_cap_bytes_per_s is None else rate_cap_bytes_per_s
        cap[cl] = np.broadcast_to(np.asarray(asked, dtype=float), cl.shape)
        f = self.class_first_client
        if not (np.array_equal(b, b[f][self.client_class]) and np.array_equal(cap, cap[f][self.client_class])):
            old_class = self.client_class                         # the transfer splits classes: refine them
            self._classes(np.unique(np.stack([old_class.astype(float), b, cap], axis=1), axis=0,
                                    return_inverse=True)[1].reshape(-1))
            back = old_class[self.class_first_client]  # each new class's old class
            for tr in self.transfers.values():
                tr.remaining, tr.demand_bytes_per_s = tr.remaining[back], tr.demand_bytes_per_s[back]
        self.finished.pop(tag, None)
        first = self.class_first_client
        self.transfers[tag] = _Transfer(kind, b[first], self.now + max(0.0, delay_s), cap[first])

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
        return float(tr.remaining @ self.class_clients) if tr else 0.0

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
            caps.append(tr.demand_bytes_per_s[live])
            rem.append(tr.remaining[live])
        if not cl:
            return live_tr, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        return live_tr, np.concatenate(cl), np.concatenate(kind), np.concatenate(caps), np.concatenate(rem)

    def _rates(self, cl: np.ndarray, kind: np.ndarray, caps: np.ndarray) -> np.ndarray:
        """Per-client rate of each flow (class, transfer): max-min fair over every client of every class."""
        s = self.spec
        net_cap = s.net_burst_bytes_per_s if self.level[0] > 0 else s.net_bytes_per_s
        if self.level[1] > 0:
            rd, wr = s.disk_burst_read_bytes_per_s, s.disk_burst_write_bytes_per_s
        else:
            rd, wr = s.disk_read_bytes_per_s, s.disk_write_bytes_per_s
        m = self.class_clients[cl]
        disk = np.array([1.0 / rd, 0.0, 1.0 / wr])[kind] * m
        return max_min_fair(2 * cl + (kind == 2), self.group_cap_bytes_per_s, caps, [(m, net_cap), (disk, 1.0)])

    def _usage(self, cl: np.ndarray, kind: np.ndarray, rates: np.ndarray) -> np.ndarray:
        """[network, disk] usage as a fraction of the baselines."""
        s = self.spec
        total = rates * self.class_clients[cl]
        disk = total[kind == 0].sum() / s.disk_read_bytes_per_s + total[kind == 2].sum() / s.disk_write_bytes_per_s
        return np.array([total.sum() / s.net_bytes_per_s, disk])

    def rates(self) -> dict[str, np.ndarray]:
        """Current rate of every transfer in flight, bytes/s per client (array over all clients)."""
        live_tr, cl, kind, caps, _ = self._flows()
        per_class = {id(tr): np.zeros(len(self.class_first_client)) for tr in self.transfers.values()}
        if len(cl):
            r = self._rates(cl, kind, caps)
            i = 0
            for tr, live in live_tr:
                per_class[id(tr)][live] = r[i:i + len(live)]
                i += len(live)
        return {tag: per_class[id(tr)][self.client_class] for tag, tr in self.transfers.items()}

    # -- the clock ---------------------------------------------------------------------------------------------
    def mark(self, slot: str = "step") -> None:
        """Start tracking the lowest and highest bucket levels from now in `slot` (for fast-forwarding)."""
        self._level_extremes[slot] = [self.level.copy(), self.level.copy()]

    def extremes(self, slot: str = "step") -> tuple[np.ndarray, np.ndarray]:
        """Lowest and highest bucket levels since `mark(slot)`."""
        low, high = self._level_extremes.get(slot, (self.level, self.level))
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
            drift = np.where(u > 1, 1.0 - u, self.spec.refill_factor * (1.0 - u))
            drift = np.where(self.bucket_full_s > 0, drift, 0.0)
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
            self.level = np.clip(self.level + drift * dt, 0.0, self.bucket_full_s)
            self.level[t_empty <= dt * (1 + 1e-12)] = 0.0
            for ext in self._level_extremes.values():
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
        self.level = np.clip(self.level + dvec[:2], 0.0, self.bucket_full_s)
        i = 2
        for tr in self.transfers.values():
            k = len(tr.remaining)
            tr.remaining = np.maximum(tr.remaining + dvec[i:i + k], 0.0)
            tr.start += dt
            i += k
        for ext in self._level_extremes.values():
            np.minimum(ext[0], np.clip(low, 0.0, self.bucket_full_s), out=ext[0])
            np.maximum(ext[1], np.clip(high, 0.0, self.bucket_full_s), out=ext[1])
