"""Per-rank compute seconds → bounded per-rank, per-stage and per-shard tables.

A rank's step splits into its own compute (forward + backward of every microbatch + optimizer), exposed
communication (the in-layer tensor/context-parallel collectives and the data-parallel gradient reduction,
which the replay does not overlap with compute), the step's storage and fixed costs (data stall,
checkpoint, other: the same for every rank), and idle time: everything else, that is pipeline bubble,
waiting for pipeline sends, for the slowest rank of its tensor-parallel group and for the slowest
replica at the gradient reduction. So, per rank and per step,

    compute_s + exposed_comm_s + idle_s + data_stall_s + checkpoint_s + other_s = step_time_s,

and for the rank that paces the critical group (the breakdown's critical path) `idle_s` is exactly
`bubble_s + pp_comm_s` when it also has the stage's slowest optimizer step. Every rank of a stage holds
the same HBM footprint (ZeRO-1 shards the optimizer evenly), so a rank's `hbm_gib` is its stage's.

Bounded at any scale (500k ranks are never a 500k-row table):

* `ranks`: one row per (data-parallel replica, pipeline stage) group for the rank that paces it (the
  group's slowest; ties go to the lowest rank), with the group's min/mean/max compute, at most
  `MAX_GROUP_ROWS` groups (the slowest groups, always the critical replica's); plus up to
  `SLOWEST_RANKS` ranks slower than their stage's median (stragglers) that are not already in. Sorted
  by rank.
* `stages`: one row per pipeline stage, aggregated over all its ranks (min/mean/max), with its memory.
* `shards`: one row per actor shard, aggregated over its ranks.

Everything is computed from a sparse form (every rank of a stage computes as long as the others,
except the slow ranks listed one by one), vectorized over groups, stages, shards and slow ranks: the cost
never grows with the number of ranks. The replay collects that form (`replay.records.ComputeTally`) and
the per-stage exposure into the `RunResult`; this module only reads them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..cluster import placement

if TYPE_CHECKING:
    from ultracluster.replay.result import RunResult

MAX_GROUP_ROWS = 4096   # (replica, stage) groups listed in `ranks`; beyond, the slowest ones
SLOWEST_RANKS = 32      # stragglers listed in full on top of the groups' pacing ranks

RANK_COLUMNS = {
    "rank": "int64", "replica": "int64", "stage": "int64", "instance": "int64", "chip": "int64", "shard": "int64",
    "compute_s": "float64", "tp_comm_s": "float64", "dp_comm_s": "float64", "exposed_comm_s": "float64",
    "idle_s": "float64", "hbm_gib": "float64", "hbm_capacity_gib": "float64", "slowdown": "float64",
    "paces_group": "bool", "group_ranks": "int64", "group_compute_min_s": "float64",
    "group_compute_mean_s": "float64", "group_compute_max_s": "float64",
}
STAGE_COLUMNS = {
    "stage": "int64", "layers": "int64", "ranks": "int64", "compute_min_s": "float64", "compute_mean_s": "float64",
    "compute_max_s": "float64", "tp_comm_s": "float64", "pp_send_s": "float64", "dp_comm_s": "float64",
    "exposed_comm_s": "float64", "idle_min_s": "float64", "idle_max_s": "float64", "weights_gib": "float64",
    "gradients_gib": "float64", "optimizer_gib": "float64", "activations_gib": "float64", "reserve_gib": "float64",
    "hbm_gib": "float64", "hbm_capacity_gib": "float64", "critical_steps": "int64",
}
SHARD_COLUMNS = {
    "shard": "int64", "first_instance": "int64", "last_instance": "int64", "instances": "int64",
    "first_rank": "int64", "ranks": "int64", "compute_min_s": "float64", "compute_mean_s": "float64",
    "compute_max_s": "float64", "tp_comm_mean_s": "float64", "dp_comm_mean_s": "float64", "idle_mean_s": "float64",
    "hbm_max_gib": "float64", "in_trace": "bool",
}
FIXED_PARTS = ("data_stall_s", "checkpoint_s", "other_s")   # the same for every rank of a step


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """A frame with these columns and dtypes and no rows."""
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in columns.items()})


# --- geometry ---------------------------------------------------------------------------------------------
def geometry(result: RunResult) -> dict[str, int] | None:
    """Parallel degrees (the result's typed `layout`) and per-instance/per-chip rank counts of a run, or None when
    unknown (no layout, or no ranks)."""
    lay = result.layout
    if lay is None or result.ranks <= 0 or result.instances <= 0 or lay.ranks != result.ranks:
        return None
    g = {"tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "dp": lay.dp}
    g["ranks_per_instance"] = result.ranks_per_instance
    g["ranks_per_chip"] = max(1, result.ranks // max(result.chips, 1))
    return g


def shard_of_instance(shard_instances: list, instance: np.ndarray) -> np.ndarray:
    """Actor shard holding each instance (-1 when the shards are unknown)."""
    instance = np.asarray(instance, dtype=np.int64)
    if not shard_instances:
        return np.full(instance.shape, -1, dtype=np.int64)
    firsts = np.array([int(s[0]) for s in shard_instances], dtype=np.int64)
    return (np.searchsorted(firsts, instance, side="right") - 1).astype(np.int64)


def group_first_rank(g: dict[str, int], replica, stage):
    """First global rank of a (replica, stage) group: tp innermost, then cp, then pp, then dp."""
    return placement.group_first_rank(g["tp"], g["cp"], g["pp"], np.asarray(replica), np.asarray(stage))


# --- the three tables -------------------------------------------------------------------------------------
def _means(steps: pd.DataFrame) -> tuple[float, dict[str, float], pd.DataFrame]:
    """Mean step time and fixed parts over the measured steps (all steps when every one is warm-up)."""
    measured = steps[~steps["warmup"]] if (~steps["warmup"]).any() else steps
    if measured.empty:
        return float("nan"), {k: float("nan") for k in FIXED_PARTS}, measured
    return float(measured["step_time_s"].mean()), {k: float(measured[k].mean()) for k in FIXED_PARTS}, measured


def stage_dp(result: RunResult, pp: int) -> np.ndarray:
    """Exposed data-parallel seconds per step of each stage: the replay's `stage_dp_exposed_s`, else (nothing
    replayed) the step comm's unoverlapped `StageComm.dp_comm_s`, NaN when unknown."""
    if len(result.stage_dp_exposed_s) == pp:
        return np.asarray(result.stage_dp_exposed_s, dtype=float)
    return np.array([next((c.dp_comm_s for c in result.stage_comm if c.stage == s), np.nan) for s in range(pp)])


class _RankCompute:
    """The sparse per-rank compute of a run, with what every rank of a stage shares."""

    def __init__(self, result: RunResult, g: dict[str, int], rest_s: float, dp_exposed: np.ndarray):
        self.g, pp = g, g["pp"]
        self.size = g["tp"] * g["cp"]                     # ranks per (replica, stage) group
        self.per_stage = self.size * g["dp"]              # ranks per stage
        self.base = np.asarray(result.stage_compute_s, dtype=np.float64)
        slow = sorted((int(r), float(c)) for r, c in result.slow_rank_compute_s.items())
        self.slow_r = np.array([r for r, _ in slow], dtype=np.int64)
        self.slow_c = np.array([c for _, c in slow], dtype=np.float64)
        self.slow_group = self.slow_r // self.size        # group id = replica * pp + stage
        self.slow_stage = self.slow_group % pp
        comm = {c.stage: c for c in result.stage_comm}
        mem = {m.stage: m for m in result.memory}
        self.tp = np.array([comm[s].tp_comm_s if s in comm else np.nan for s in range(pp)])
        self.replica_tp = result.replica_tp_comm_s                          # degraded replicas: their own
        self.dp = dp_exposed
        self.hbm = np.array([mem[s].total_gib if s in mem else np.nan for s in range(pp)])
        self.cap = np.array([mem[s].capacity_gib if s in mem else np.nan for s in range(pp)])
        self.rest_s = rest_s                              # step time - data stall - checkpoint - other
        self.median = np.array([self._stage_median(s) for s in range(pp)])

    def tp_comm(self, replica: np.ndarray, stage: np.ndarray) -> np.ndarray:
        """In-layer collective seconds per step of these rows (bounded): a degraded replica's own, else its
        stage's."""
        return np.array([self.replica_tp[d][s] if d in self.replica_tp else self.tp[s]
                         for d, s in zip(replica.tolist(), stage.tolist())], dtype=np.float64)

    def compute(self, ranks: np.ndarray) -> np.ndarray:
        """Own compute seconds per step of the given ranks."""
        out = self.base[(ranks // self.size) % self.g["pp"]]
        if self.slow_r.size:
            i = np.clip(np.searchsorted(self.slow_r, ranks), 0, self.slow_r.size - 1)
            hit = self.slow_r[i] == ranks
            out = np.where(hit, self.slow_c[i], out)
        return out

    def _stage_median(self, s: int) -> float:
        vals = self.slow_c[self.slow_stage == s]
        if 2 * vals.size < self.per_stage:                # most ranks run at the stage's base time
            return float(self.base[s])
        return float(np.median(np.concatenate([vals, np.full(self.per_stage - vals.size, self.base[s])])))

    def reduce(self, slow_key: np.ndarray, n_keys: int, members: np.ndarray,
               base: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """min, max and sum of compute over sets of ranks: set k has `members[k]` ranks at `base[k]`
        apart from the slow ranks whose set (`slow_key`) is k."""
        n_slow = np.bincount(slow_key, minlength=n_keys)[:n_keys] if slow_key.size else np.zeros(n_keys, int)
        plain = members - n_slow
        lo = np.where(plain > 0, base, np.inf)
        hi = np.where(plain > 0, base, -np.inf)
        total = plain * base
        if slow_key.size:
            np.minimum.at(lo, slow_key, self.slow_c)
            np.maximum.at(hi, slow_key, self.slow_c)
            total = total + np.bincount(slow_key, weights=self.slow_c, minlength=n_keys)[:n_keys]
        return lo, hi, total


def rank_tables(result: RunResult, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The bounded per-rank table, the per-stage table and the per-shard table of a run.

    Args:
        result: the replayed run (uses stage_compute_s, slow_rank_compute_s, stage_comm, memory,
            shard_instances, layout).
        steps: its steps frame (for the measured means and the critical replica and stages).

    Returns:
        (ranks, stages, shards) frames with the columns of RANK_COLUMNS, STAGE_COLUMNS and SHARD_COLUMNS;
        time columns are seconds per step, means over the measured steps.
    """
    g = geometry(result)
    step_s, fixed, measured = _means(steps)
    have = g is not None and len(result.stage_compute_s) == g["pp"] and len(measured) > 0
    view = None
    if have:
        view = _RankCompute(result, g, step_s - sum(fixed.values()), stage_dp(result, g["pp"]))
    return (_ranks_frame(result, view, measured) if view else empty_frame(RANK_COLUMNS),
            _stages_frame(result, view, g, measured),
            _shards_frame(result, view, g))


def _pacing_ranks(v: _RankCompute, n_groups: int) -> np.ndarray:
    """The rank that paces each group: its slowest member, the lowest rank among equals. O(slow ranks)."""
    size, pp = v.size, v.g["pp"]
    pacer = np.arange(n_groups, dtype=np.int64) * size       # all members equal: the group's first rank
    if not v.slow_r.size:
        return pacer
    groups, starts, counts = np.unique(v.slow_group, return_index=True, return_counts=True)  # slow_r is sorted
    seg = np.repeat(np.arange(groups.size), counts)
    top = np.maximum.reduceat(v.slow_c, starts)
    at_top = np.flatnonzero(v.slow_c == top[seg])
    best = v.slow_r[at_top[np.unique(seg[at_top], return_index=True)[1]]]   # first slow rank at the maximum
    # the lowest member that is not slow: past the run of slow ranks the group starts with
    j = np.arange(v.slow_r.size) - starts[seg]
    leading = v.slow_r - groups[seg] * size == j
    k = np.minimum(np.minimum.reduceat(np.where(leading, size, j), starts), counts)   # counts: all leading
    plain = groups * size + k
    has_plain = k < size
    base = v.base[groups % pp]
    use_plain = has_plain & ((base > top) | ((base == top) & (plain < best)))
    pacer[groups] = np.where(use_plain, plain, best)
    return pacer


def _ranks_frame(result: RunResult, v: _RankCompute, measured: pd.DataFrame) -> pd.DataFrame:
    g, pp, size = v.g, v.g["pp"], v.size
    n_groups = g["dp"] * pp
    gstage = np.arange(n_groups) % pp
    gmin, gmax, gsum = v.reduce(v.slow_group, n_groups, np.full(n_groups, size), v.base[gstage])
    pacer = _pacing_ranks(v, n_groups)
    if n_groups <= MAX_GROUP_ROWS:
        groups = np.arange(n_groups)
    else:
        slowest = np.argsort(-gmax, kind="stable")[:MAX_GROUP_ROWS]
        crit = int(measured["critical_replica"].iloc[-1]) if len(measured) else 0
        groups = np.union1d(slowest, crit * pp + np.arange(pp))
    slowdown_slow = v.slow_c / v.median[v.slow_stage]
    stragglers = v.slow_r[slowdown_slow > 1.0 + 1e-12]
    stragglers = stragglers[np.argsort(-v.compute(stragglers), kind="stable")][:SLOWEST_RANKS]
    rows = np.union1d(pacer[groups], stragglers).astype(np.int64)
    grp, stage = rows // size, (rows // size) % pp
    compute = v.compute(rows)
    instance = rows // g["ranks_per_instance"]
    tp = v.tp_comm(rows // (size * pp), stage)
    frame = pd.DataFrame({
        "rank": rows, "replica": rows // (size * pp), "stage": stage, "instance": instance,
        "chip": rows // g["ranks_per_chip"], "shard": shard_of_instance(result.shard_instances, instance),
        "compute_s": compute, "tp_comm_s": tp, "dp_comm_s": v.dp[stage],
        "exposed_comm_s": tp + v.dp[stage], "idle_s": v.rest_s - compute - tp - v.dp[stage],
        "hbm_gib": v.hbm[stage], "hbm_capacity_gib": v.cap[stage], "slowdown": compute / v.median[stage],
        "paces_group": pacer[grp] == rows, "group_ranks": np.full(rows.size, size),
        "group_compute_min_s": gmin[grp], "group_compute_mean_s": gsum[grp] / size,
        "group_compute_max_s": gmax[grp],
    })
    return frame.astype(RANK_COLUMNS)


def _stages_frame(result: RunResult, v: _RankCompute | None, g: dict | None, measured: pd.DataFrame) -> pd.DataFrame:
    pp = g["pp"] if g else max([m.stage + 1 for m in result.memory] + [c.stage + 1 for c in result.stage_comm]
                               + [0])
    if pp == 0:
        return empty_frame(STAGE_COLUMNS)
    nan = np.full(pp, np.nan)
    comm = {c.stage: c for c in result.stage_comm}
    mem = {m.stage: m for m in result.memory}

    def from_comm(attr: str) -> np.ndarray:
        return np.array([getattr(comm[s], attr) if s in comm else np.nan for s in range(pp)], dtype=float)

    def from_mem(attr: str) -> np.ndarray:
        return np.array([getattr(mem[s], attr) if s in mem else np.nan for s in range(pp)], dtype=float)

    tp, send = from_comm("tp_comm_s"), from_comm("pp_send_s")
    dp = v.dp if v is not None else stage_dp(result, pp)
    cols = {"stage": np.arange(pp), "layers": [comm[s].layers if s in comm else 0 for s in range(pp)],
            "ranks": np.full(pp, g["tp"] * g["cp"] * g["dp"] if g else 0)}
    if v is not None:
        cmin, cmax, csum = v.reduce(v.slow_stage, pp, np.full(pp, v.per_stage), v.base)
        rest = v.rest_s - (tp + dp)
        cols.update(compute_min_s=cmin, compute_mean_s=csum / v.per_stage, compute_max_s=cmax,
                    idle_min_s=rest - cmax, idle_max_s=rest - cmin)
    else:
        cols.update(compute_min_s=nan, compute_mean_s=nan, compute_max_s=nan, idle_min_s=nan, idle_max_s=nan)
    crit = measured["critical_stage"].to_numpy() if len(measured) else np.array([], dtype=np.int64)
    cols.update(tp_comm_s=tp, pp_send_s=send, dp_comm_s=dp, exposed_comm_s=tp + dp,
                weights_gib=from_mem("weights_gib"), gradients_gib=from_mem("gradients_gib"),
                optimizer_gib=from_mem("optimizer_gib"), activations_gib=from_mem("activations_gib"),
                reserve_gib=from_mem("reserve_gib"), hbm_gib=from_mem("total_gib"),
                hbm_capacity_gib=from_mem("capacity_gib"),
                critical_steps=np.bincount(crit.astype(np.int64), minlength=pp)[:pp])
    return pd.DataFrame({c: cols[c] for c in STAGE_COLUMNS}).astype(STAGE_COLUMNS)


def ranks_below(x: np.ndarray, stage: np.ndarray, g: dict[str, int]) -> np.ndarray:
    """How many ranks r < x sit on `stage` (broadcasting): tp x cp ranks per group, pp groups per replica."""
    size = g["tp"] * g["cp"]
    cycle = size * g["pp"]
    return (x // cycle) * size + np.clip(x % cycle - stage * size, 0, size)


def _shards_frame(result: RunResult, v: _RankCompute | None, g: dict | None) -> pd.DataFrame:
    si = [(int(a), int(b)) for a, b in result.shard_instances]
    if not si:
        return empty_frame(SHARD_COLUMNS)
    first = np.array([a for a, _ in si], dtype=np.int64)
    last = np.array([b for _, b in si], dtype=np.int64)
    rpi = result.ranks_per_instance
    n = len(si)
    cols = {"shard": np.arange(n), "first_instance": first, "last_instance": last, "instances": last - first + 1,
            "first_rank": first * rpi, "ranks": (last - first + 1) * rpi, "in_trace": np.zeros(n, dtype=bool)}
    if v is not None and int(cols["ranks"].sum()) == result.ranks:
        pp = g["pp"]
        a, b = cols["first_rank"][:, None], (cols["first_rank"] + cols["ranks"])[:, None]
        stages = np.arange(pp)[None, :]
        count = ranks_below(b, stages, g) - ranks_below(a, stages, g)                 # [shards, stages]
        shard_of_slow = np.searchsorted(cols["first_rank"], v.slow_r, side="right") - 1
        key = shard_of_slow * pp + v.slow_stage                                       # (shard, stage) cells
        lo, hi, total = v.reduce(key, n * pp, count.ravel(), np.tile(v.base, n))
        lo, hi, total = lo.reshape(n, pp), hi.reshape(n, pp), total.reshape(n, pp)
        ranks = cols["ranks"]
        mean_c = total.sum(axis=1) / ranks
        tp_m, dp_m = (count * v.tp).sum(axis=1) / ranks, (count * v.dp).sum(axis=1) / ranks
        cols.update(compute_min_s=lo.min(axis=1), compute_max_s=hi.max(axis=1), compute_mean_s=mean_c,
                    tp_comm_mean_s=tp_m, dp_comm_mean_s=dp_m, idle_mean_s=v.rest_s - mean_c - tp_m - dp_m,
                    hbm_max_gib=np.where(count > 0, v.hbm, -np.inf).max(axis=1))
    else:
        for c in ("compute_min_s", "compute_max_s", "compute_mean_s", "tp_comm_mean_s", "dp_comm_mean_s",
                  "idle_mean_s", "hbm_max_gib"):
            cols[c] = np.full(n, np.nan)
    return pd.DataFrame({c: cols[c] for c in SHARD_COLUMNS}).astype(SHARD_COLUMNS)


# --- read as a person reads them --------------------------------------------------------------------------
FIGURES = ("compute_s", "exposed_comm_s", "idle_s", "hbm_gib", "slowdown")


def rank_list(ranks: list[int], shown: int = 6) -> str:
    """"0–7, 16–23, 40": ranks as ranges, the first `shown` ranges then "…"."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in runs]
    return ", ".join(parts[:shown]) + (", …" if len(parts) > shown else "")


def grouped_ranks(ranks: pd.DataFrame, ref: float = 0.0) -> pd.DataFrame:
    """The rows of a ranks table grouped by their figures as a person reads them (`table.fmt`, seconds against
    the step time `ref`): one row per group, slowest first (then lowest rank), with `ranks` (as ranges),
    `count`, `stages` and the figures of its first rank."""
    from ultracluster.report.table import fmt

    cols = [c for c in FIGURES if c in ranks.columns]
    key = pd.DataFrame({c: [fmt(v, c, ref) for v in ranks[c]] for c in cols}).agg("|".join, axis=1).to_numpy()
    rows = []
    for _, g in ranks.assign(_key=key).groupby("_key", sort=False):
        first = g.iloc[0]
        rows.append(((-float(first["compute_s"]), int(g["rank"].min())), [
            rank_list(g["rank"].tolist()), len(g), rank_list(g["stage"].unique().tolist()), *(first[c] for c in cols)]))
    return pd.DataFrame([row for _, row in sorted(rows, key=lambda r: r[0])], columns=["ranks", "count", "stages",
                                                                                     *cols])
