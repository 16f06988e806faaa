"""A run's steps → data-loading and checkpoint stalls against one file system (the engine's `StepCosts`).

`StorageCosts` drives a `StorageServer` (or the Ray actor's proxy of one) step by step, handles failures,
restores and restarts, and fast-forwards steps in which nothing changes (`StorageCosts.run`, used by
`goodput`). Pure (numpy only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .fsx import READ, READ_CACHED, WRITE
from .traffic import StorageTraffic, storage_traffic


@dataclass
class StepSpan:
    """`n` consecutive training steps from `first` (a span of steps, not a pipeline chunk), with per-step means
    of each part (seconds). The means are exact for any split at a multiple of the checkpoint period counted
    from `first`, and anywhere for identical steps."""

    first: int
    n: int
    busy_s: float
    data_stall_s: float
    checkpoint_s: float

    @property
    def step_s(self) -> float:
        return self.busy_s + self.data_stall_s + self.checkpoint_s


@dataclass
class StorageProgress:
    """What `StorageCosts.run` did: the steps it ran (as spans) and the checkpoints that became durable."""

    spans: list[StepSpan] = field(default_factory=list)
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
        traffic: the bytes (default: `storage_traffic`).
    """

    def __init__(self, scenario, cluster, server=None, traffic: StorageTraffic | None = None):
        self.server = server
        spec = server.spec if server is not None else None
        self.traffic = traffic or storage_traffic(scenario, cluster, spec)
        self.free = server is None
        st, ck = scenario.storage, scenario.checkpoint
        self.prefetch = st.prefetch_steps if st else 0
        self.every = ck.every_steps if ck else 0
        self.mode = ck.mode if ck else "sync"
        self.latency = spec.latency_s if spec else 0.0
        self.meta_s = self.traffic.checkpoint_files / spec.metadata_iops if spec else 0.0
        self.has_data = not self.free and float(self.traffic.data.sum()) > 0
        self.limit = math.inf
        self.t = 0.0
        self.step = 0
        self.durable_step = 0
        self.durable: list[tuple[int, float]] = []
        self._ready = 0          # batches 0..ready-1 are loaded
        self._loading = False
        self._allowed = -1       # highest batch the loader may load
        self._writing: int | None = None   # steps covered by the checkpoint being written
        self._totals_s = [0.0, 0.0]        # data stall and checkpoint seconds so far (fast-forward bookkeeping)
        self._unit_change = np.zeros(2)    # how the state vector moves per repetition (`_repeats`)

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
            self.server.submit("data", READ, self.traffic.data, delay_s=self.latency)
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
        self._totals_s[0] += stall
        self._totals_s[1] += ck
        return stall, ck

    def _checkpoint(self, covered: int, t1: float) -> float:
        if self.free:
            self.durable_step = covered
            self.durable.append((covered, t1))
            return 0.0
        if self._writing is not None:          # back-pressure: the previous write must end first
            self._wait("ckpt")
        self._run_until(self.server.now + self.traffic.d2h_s)
        self._writing = covered
        self.server.submit("ckpt", WRITE, self.traffic.checkpoint, delay_s=self.meta_s + self.latency)
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
        p, s = self.traffic, self.server
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

    def run(self, busy_s: float, steps: int, t_limit: float = math.inf) -> StorageProgress:
        """Run up to `steps` steps, stopping at `t_limit`, fast-forwarding whatever repeats.

        A unit (one step, or one checkpoint period of `every_steps` steps) repeats when the state at its
        boundaries (bucket levels, bytes in flight, loader and checkpoint positions relative to the step) moved
        by the same amount in the last two units and their stalls were equal: then many units are jumped in
        one move, stopping short of the next checkpoint (for steps), of a bucket emptying or filling up, of a
        transfer ending, and of `t_limit`.

        Returns:
            The steps done (as spans of per-step means) and the checkpoints that became durable; `cut` is
            True when a step was under way at `t_limit` (storage then stands at `t_limit`; that step's work is
            not in the spans).
        """
        prog = StorageProgress()
        self.durable = []
        end = self.step + steps
        step_history: list[tuple] = []
        period_history: list[tuple] = []
        self.limit = t_limit
        try:
            if not self.free:
                self.server.mark("step")
                self.server.mark("period")
            while self.step < end:
                if self.every and self.step % self.every == 0:
                    period_history = period_history[-2:] + [(self._signature("period"), self.now(), self.step,
                                                             tuple(self._totals_s), len(self.durable))]
                    if not self.free:
                        self.server.mark("period")
                    if len(period_history) == 3 and self._period_jump(period_history, busy_s, end, t_limit, prog):
                        period_history, step_history = [], []
                        continue
                if len(step_history) >= 2 and self._step_jump(step_history, busy_s, end, t_limit, prog):
                    step_history = []
                    continue
                k = self.step
                sig0 = self._signature("step")
                try:
                    stall, ck = self(k, busy_s)
                except _Cut:
                    self.step, self.t, prog.cut = k, t_limit, True
                    break
                prog.explicit_steps += 1
                self._add(prog, StepSpan(k, 1, busy_s, stall, ck))
                step_history = step_history[-1:] + [(sig0, self._signature("step"), stall, ck)]
                if not self.free:
                    self.server.mark("step")
        finally:
            self.limit = math.inf
        prog.durable, self.durable = self.durable, []
        return prog

    @staticmethod
    def _add(prog: StorageProgress, c: StepSpan) -> None:
        last = prog.spans[-1] if prog.spans else None
        if last and last.first + last.n == c.first and \
                (last.busy_s, last.data_stall_s, last.checkpoint_s) == (c.busy_s, c.data_stall_s, c.checkpoint_s):
            last.n += c.n
        else:
            prog.spans.append(c)

    def _limit_units(self, unit_s: float, t_limit: float) -> int:
        return int((t_limit - self.now()) / unit_s * (1 - 1e-12)) if math.isfinite(t_limit) else 1 << 62

    def _step_jump(self, hist, busy_s: float, end: int, t_limit: float, prog: StorageProgress) -> bool:
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
        self._totals_s[0] += m * st_b
        self._add(prog, StepSpan(self.step - m, m, busy_s, st_b, 0.0))
        return True

    def _period_jump(self, hist, busy_s: float, end: int, t_limit: float, prog: StorageProgress) -> bool:
        (s0, t0, k0, acc0, d0), (s1, t1, k1, acc1, d1), (s2, t2, k2, acc2, d2) = hist
        p = self.every
        if k1 - k0 != p or k2 - k1 != p:
            return False
        # (seconds, data stall, checkpoint) of each of the last two periods
        prev_unit = (t1 - t0, acc1[0] - acc0[0], acc1[1] - acc0[1])
        last_unit = (t2 - t1, acc2[0] - acc1[0], acc2[1] - acc1[1])
        if not np.allclose(prev_unit, last_unit, rtol=1e-9, atol=1e-12):
            return False
        prev_durable = [(c - k0, w - t0) for c, w in self.durable[d0:d1]]
        last_durable = [(c - k1, w - t1) for c, w in self.durable[d1:d2]]
        if len(prev_durable) != len(last_durable) or any(
                x[0] != y[0] or abs(x[1] - y[1]) > 1e-9 * max(1.0, last_unit[0])
                for x, y in zip(prev_durable, last_durable)):
            return False
        period_s = last_unit[0]
        m = min((end - self.step) // p, self._limit_units(period_s, t_limit), self._repeats(s0, s1, s1, s2))
        if m < 1:
            return False
        self._shift(m * p, m, m * period_s, s2)
        self._totals_s[0] += m * last_unit[1]
        self._totals_s[1] += m * last_unit[2]
        for c, w in last_durable:                     # the last repetition's durable checkpoints
            self.durable.append((k2 + (m - 1) * p + c, t2 + (m - 1) * period_s + w))
            self.durable_step = self.durable[-1][0]
        self._add(prog, StepSpan(self.step - m * p, m * p, busy_s, last_unit[1] / p, last_unit[2] / p))
        return True

    def _shift(self, n: int, reps: int, dt: float, last) -> None:
        """Jump n steps (`reps` repetitions of the unit) taking dt seconds; the state moves by reps x the
        unit's change (see `_repeats`)."""
        if self.free:
            self.t += dt
        else:
            low = np.minimum(last[2], last[2] + reps * self._unit_change[:2])
            high = np.maximum(last[3], last[3] + reps * self._unit_change[:2])
            self.server.jump(dt, self._unit_change * reps, low, high)
            self.t = self.server.now
        self.step += n
        self._ready += n
        self._allowed += n
        if self._writing is not None:
            self._writing += n

    def _repeats(self, a0, a1, b0, b1) -> int:
        """How many more times the last unit (signature b0 at its start -> b1 at its end, `_signature`) can
        repeat unchanged (0: it did not repeat the unit before it, a0 -> a1)."""
        self._unit_change = np.zeros(2)
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
        full = self.server.bucket_full_s
        for j in range(2):
            if moving[j]:
                room = b1[2][j] / -db[j] if db[j] < 0 else (full[j] - b1[3][j]) / db[j]
                m = min(m, int(np.floor(room)) - 2)
        self._unit_change = np.where(moving, db, 0.0)
        return max(m, 0)
