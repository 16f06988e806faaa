"""Layouts → HBM footprint, step time, throughput and cost, thousands at once: the replay's model over a
layout axis.

The fast path is the model `run` replays, evaluated for many layouts in one pass, not a second model. Per
layout it needs what the replay needs: the HBM of each stage (`memory.stage_memory`), the chunk times
(`chip.chunk_times` → `ChunkTimes`) and the communication plan (`replay.engine.plan_comm` → `CommPlan`). Each
comes from one of two sources that give the same numbers:

- **batched**: the same cost functions (`operators.evaluate`, `chip.op_seconds`, `chip.rank_rates`,
  `operators.shape_variables`, `saved_bytes`, `chunk_params_split`, `sharding`, `network.collective_time`,
  `concurrent_time`, `group_of`, the engine's `_send_group`) composed as those three functions compose them,
  with each distinct per-rank shape priced once (all shapes in one `evaluate` call per where and phase) and
  each distinct collective once (a memo);
- **per layout**: the three functions themselves, one call per distinct layout.

`Pricer.check` compares the two on a few layouts of every plan. The batched composition mirrors code that
changes as the model grows; where it no longer matches, the plan uses the functions themselves for that part
(slower, never wrong) and says so in plan.json (`fast_path`), and tests/plan/test_fast_parts.py fails and names
the part.

The step is then composed as `replay.engine.replay_steps` composes it, calling its pure pieces (`cp_exposed`,
`fsdp_exposed`), with the pipeline run for every layout and measured step at once (`schedules.pipeline_times`)
and the gradient-bucket queue in closed form (`bucket_queue_end`). One difference: the engine runs every
data-parallel replica's pipeline with its own jitter and stragglers, step by step, and takes the slowest; the fast
path runs one pipeline whose stages each take their slowest replica's speed, averaged over the measured steps:
exact without jitter and stragglers, within 0.2 % with the default 1 % jitter over the Llama-3.1-70B sweep
(docs/plan.md). Two more: the last microbatch's gradient
sends are priced alone, where the replay prices them sharing links with the first gradient buckets
(`concurrent_time`: a thousand times the cost of the rest of a layout, for at most 0.13 % of a step over the
Llama-3.1-70B sweep; `Pricer(shared_last_sends=True)` prices them as the replay does); and storage stalls
and checkpoints are not in the fast path. The replayed layouts carry all three exactly.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from .. import chip
from .. import operators as opslib
from ..cluster import Cluster, Layout, build_cluster, rank_coords, stage_layers
from ..cluster.calibration import DEFAULT as DEFAULT_CALIBRATION, Calibration
from ..memory import GIB, infeasible_reason, stage_memory
from ..network import collective_time, group_of
from ..network.collectives import concurrent_time
from ..replay import engine
from ..replay.events import StageMemory
from ..replay.schedule import stage_programs
from ..scenario import Scenario
from functools import lru_cache

from .schedules import _run_lengths, pipeline_times, program_arrays

# the layout columns of a plan table, in plan.csv order
LAYOUT_COLUMNS = ("instance", "instances", "lnc", "tp", "pp", "cp", "ep", "dp", "micro_batch", "recompute",
                  "pp_schedule", "virtual_stages", "zero", "sequence_parallel")
MEMORY_COLUMNS = ("hbm_peak_gib", "hbm_capacity_gib", "worst_stage", "weights_gib", "gradients_gib", "optimizer_gib",
                  "activations_gib", "reserve_gib")
PARTS = ("memory", "chunks", "comm")
SCHEDULES_BY_CODE = ("gpipe", "1f1b", "interleaved")
SCHEDULE_CODE = {name: i for i, name in enumerate(SCHEDULES_BY_CODE)}
CHECK_RTOL = 1e-9


def has_zero_stages() -> bool:
    """Whether the scenario schema has `training.zero` (ZeRO 0/1/3), else only `training.zero1`."""
    from ..scenario.schema import TrainingSpec
    return "zero" in TrainingSpec.model_fields


def layout_scenario(base: Scenario, row: Any, name: str | None = None) -> Scenario:
    """The scenario of one layout: `base` with the row's cluster, parallelism and training fields.

    Built with pydantic's `model_copy` (no validation): rows come from the search space, which holds only
    valid layouts (tests/plan/test_space.py loads them through `load_scenario`); `plan.scenario_dict` gives
    the YAML-ready form that `run` validates.
    """
    get = row.get if isinstance(row, dict) else (lambda k: getattr(row, k))
    par = base.parallelism.model_copy(update={
        "tp": int(get("tp")), "pp": int(get("pp")), "cp": int(get("cp")), "ep": int(get("ep")),
        "dp": int(get("dp")), "sequence_parallel": bool(get("sequence_parallel")),
        "pp_schedule": str(get("pp_schedule")), "virtual_stages": int(get("virtual_stages"))})
    zero = int(get("zero"))
    train_upd: dict[str, Any] = {"micro_batch": int(get("micro_batch")), "recompute": str(get("recompute")),
                                 "zero1": zero >= 1}
    if has_zero_stages():
        train_upd["zero"] = zero
    train = base.training.model_copy(update=train_upd)
    cl = base.cluster
    instance = str(get("instance"))
    upd: dict[str, Any] = {"instance": instance, "instances": int(get("instances")), "lnc": int(get("lnc"))}
    if instance != cl.instance:        # the new instance type's own UltraServer default
        upd["ultraserver"] = _ultraserver_default(instance, int(get("instances")))
    return base.model_copy(update={"parallelism": par, "training": train, "cluster": cl.model_copy(update=upd),
                                   **({"name": name} if name else {})})


def _ultraserver_default(instance: str, instances: int) -> bool:
    from ..cluster.catalog import INSTANCES
    spec = INSTANCES[instance]
    default = getattr(spec, "ultraserver_default", instance == "trn2u.48xlarge")
    return bool(default)


@dataclass
class ClusterInfo:
    """One (instance type, instances, lnc): its Cluster (layout a placeholder), rank rates and price."""

    cluster: Cluster
    rates: chip.RankRates
    chips: int
    peak_flop_per_s: float
    price_per_hour_usd: float        # of one instance; NaN when the catalog has no price
    capacity_gib: float


class Pricer:
    """What a process evaluating layouts of one scenario keeps: clusters, memoized collectives, shapes, and
    which source (batched or per layout) each part uses."""

    def __init__(self, scenario: Scenario, calibration: Calibration | None = None,
                 sources: dict[str, str] | None = None, shared_last_sends: bool = False):
        self.scenario = scenario
        self.shared_last_sends = shared_last_sends
        self.calibration = calibration or DEFAULT_CALIBRATION
        self.library = opslib.library_for(scenario)
        self.sources = dict(sources or {part: "batched" for part in PARTS})
        self._clusters: dict[tuple, ClusterInfo] = {}
        self._coll: dict[tuple, float] = {}
        self._conc: dict[tuple, float] = {}
        self._memo: dict[tuple, Any] = {}

    # --- clusters and collectives ------------------------------------------------------------------
    def cluster(self, instance: str, instances: int, lnc: int) -> ClusterInfo:
        key = (str(instance), int(instances), int(lnc))
        info = self._clusters.get(key)
        if info is None:
            cl = self.layout_cluster({"instance": key[0], "instances": key[1], "lnc": key[2], "tp": 1, "pp": 1,
                                      "cp": 1, "ep": 1, "dp": 0, "micro_batch": 1, "recompute": "none",
                                      "pp_schedule": "1f1b", "virtual_stages": 1, "zero": 1,
                                      "sequence_parallel": False})
            prec = self.scenario.training.precision
            price = cl.instance.price_per_hour_usd
            info = ClusterInfo(cluster=cl, rates=chip.rank_rates(cl, prec), chips=cl.chips,
                               peak_flop_per_s=cl.chips * cl.chip.dense_flop_per_s[prec],
                               price_per_hour_usd=float("nan") if price is None else float(price),
                               capacity_gib=cl.chip.hbm_bytes / cl.ranks_per_chip / GIB)
            self._clusters[key] = info
        return info

    def layout_cluster(self, row: Any) -> Cluster:
        """The Cluster of one layout (one actor shard: shards never change a prediction). dp 0: all ranks."""
        row = dict(row) if isinstance(row, dict) else row._asdict()
        if not row["dp"]:
            sc = layout_scenario(self.scenario, {**row, "dp": 1})
            row["dp"] = build_cluster(sc, row["instances"], self.calibration).ranks
        sc = layout_scenario(self.scenario, row)
        return build_cluster(sc, int(row["instances"]), self.calibration)

    def collective(self, ck: tuple, op: str, nbytes: float, group) -> float:
        """`collective_time` seconds, memoized."""
        key = (ck, op, float(nbytes), group)
        t = self._coll.get(key)
        if t is None:
            t = self._coll[key] = collective_time(self.cluster(*ck).cluster, op, float(nbytes), group)[0]
        return t

    def concurrent_first(self, ck: tuple, transfers: tuple) -> float:
        """`concurrent_time(...)[0]`, memoized."""
        key = (ck, transfers)
        t = self._conc.get(key)
        if t is None:
            t = self._conc[key] = float(concurrent_time(self.cluster(*ck).cluster, list(transfers))[0])
        return t

    def memo(self, key: tuple, make: Callable[[], Any]) -> Any:
        val = self._memo.get(key)
        if val is None:
            val = self._memo[key] = make()
        return val

    # --- the per-layout sources ----------------------------------------------------------------------
    def real_memory(self, row) -> list[StageMemory]:
        sc = layout_scenario(self.scenario, row)
        programs = self.memo(("programs", row.pp_schedule, int(row.pp), int(row.microbatches), int(row.virtual_stages)),
                             lambda: stage_programs(row.pp_schedule, int(row.pp), int(row.microbatches),
                                                    int(row.virtual_stages)))
        return stage_memory(sc, self.layout_cluster(row), self.library, programs)

    def real_chunks(self, row) -> chip.ChunkTimes:
        return self.memo(("chunk_times", _part_key(row)), lambda: chip.chunk_times(
            layout_scenario(self.scenario, row), self.layout_cluster(row), self.library))

    def real_comm(self, row) -> engine.CommPlan:
        return self.memo(("plan_comm", _part_key(row)), lambda: engine.plan_comm(
            layout_scenario(self.scenario, row), self.layout_cluster(row)))


def _part_key(r) -> tuple:
    """What chunk times and the communication plan depend on: everything but the pipeline schedule."""
    return (r.instance, int(r.instances), int(r.lnc), int(r.tp), int(r.pp), int(r.cp), int(r.ep), int(r.dp),
            int(r.micro_batch), str(r.recompute), int(r.virtual_stages), int(r.zero), bool(r.sequence_parallel),
            str(r.pp_schedule) == "interleaved")


def _sum0(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0 in a fixed order (the same bits whatever the other axes hold)."""
    return np.cumsum(a, axis=0)[-1] if a.shape[0] else np.zeros(a.shape[1:])


def _stage_sum(values: np.ndarray, pp: int) -> np.ndarray:
    """[n, chunks] → [n, pp]: the chunks summed onto the stages that hold them (chunk c on stage c % pp)."""
    n, chunks = values.shape
    return values.reshape(n, chunks // pp, pp).transpose(1, 0, 2).cumsum(axis=0)[-1]


# ----------------------------------------------------------------------------------------------------------
# Batched: per-rank shapes


@dataclass
class Shapes:
    """Per-rank costs of distinct (instance, lnc, tp, cp, micro_batch, recompute, sp, ep) shapes, arrays [K]."""

    index: dict[tuple, int]
    layer_fwd: np.ndarray        # one layer's forward, seconds per microbatch
    layer_bwd: np.ndarray        # its backward and recomputation
    emb_fwd: np.ndarray
    emb_bwd: np.ndarray
    head_fwd: np.ndarray
    head_bwd: np.ndarray
    attn_fwd: np.ndarray
    attn_bwd: np.ndarray
    hide: np.ndarray             # [K, 2] backward matmul seconds hiding each block's TP collectives
    saved_layer: np.ndarray      # activation bytes per layer and microbatch
    saved_emb: np.ndarray
    saved_head: np.ndarray
    working: np.ndarray          # full recomputation's one-layer working set, bytes
    variables: dict[str, np.ndarray]
    rates: chip.RankRates        # fields [K]


def _shape_key(r) -> tuple:
    return (r.instance, int(r.lnc), int(r.tp), int(r.cp), int(r.micro_batch), str(r.recompute),
            bool(r.sequence_parallel), int(r.ep))


def shapes(pr: Pricer, rows: list) -> tuple[Shapes, np.ndarray]:
    """Price every distinct per-rank shape of `rows` (one `evaluate` call per where and phase).

    Returns:
        (Shapes, [rows] index of each row's shape).
    """
    first: dict[tuple, Any] = {}
    for r in rows:
        first.setdefault(_shape_key(r), r)
    keys = list(first)
    index = {k: i for i, k in enumerate(keys)}
    srow = np.array([index[_shape_key(r)] for r in rows], dtype=np.int64)
    per_key = []
    for key in keys:
        r = first[key]
        info = pr.cluster(r.instance, r.instances, r.lnc)
        sc = layout_scenario(pr.scenario, r)
        cal = info.cluster.calibration
        v = opslib.shape_variables(sc, Layout(tp=int(r.tp), cp=int(r.cp), pp=1, dp=1), cal)
        per_key.append((v, opslib.applicable(pr.library, sc, cal), info, str(r.recompute), cal))
    K = len(keys)
    ops, cal = per_key[0][1], per_key[0][4]
    V = {name: np.array([pk[0][name] for pk in per_key], dtype=float) for name in per_key[0][0]}
    fields = {}
    for f in dataclasses.fields(chip.RankRates):
        vals = [getattr(pk[2].rates, f.name) for pk in per_key]
        fields[f.name] = vals[0] if isinstance(vals[0], bool) else np.array(vals, dtype=float)
    R = chip.RankRates(**fields)

    def kernels(where: str, phase: str):
        work = opslib.evaluate(ops, where, phase, V)
        return chip.op_seconds(work, R, V["e"], V["w"]), work

    lf, wf = kernels("layer", "forward")
    lb, wb = kernels("layer", "backward")
    selective = wf["recompute"] == "selective"
    if cal.flash_attention:
        selective &= wf["names"] != "attention_core"
    mode = np.array([pk[3] for pk in per_key])[None, :]
    repeat = (mode == "full") | ((mode == "selective") & selective[:, None])
    again = _sum0(np.where(repeat, lf, 0.0))
    ef, _ = kernels("embedding", "forward")
    eb, _ = kernels("embedding", "backward")
    hf, _ = kernels("head", "forward")
    hb, _ = kernels("head", "backward")
    attn = wf["names"] == "attention_core"
    hides = lb[wb["hides_tp"]]
    hide = np.zeros((K, 2))
    hide[:, :min(2, hides.shape[0])] = hides[:2].T
    saved = np.array([[opslib.saved_bytes(pk[1], where, pk[0], pk[3]) for where in ("layer", "embedding", "head")]
                      + [opslib.saved_bytes(pk[1], "layer", pk[0], "none") if pk[3] == "full" else 0.0]
                      for pk in per_key]).reshape(K, 4)
    over = getattr(cal, "layer_overhead_s", 0.0)           # per layer: forward once, backward 2 + recomputed passes
    passes_again = (mode[0] == "full").astype(float)
    return Shapes(index=index, layer_fwd=_sum0(lf) + over, layer_bwd=_sum0(lb) + again + over * (2.0 + passes_again),
                  emb_fwd=_sum0(ef),
                  emb_bwd=_sum0(eb), head_fwd=_sum0(hf), head_bwd=_sum0(hb), attn_fwd=_sum0(lf[attn]),
                  attn_bwd=_sum0(lb[attn]), hide=hide, saved_layer=saved[:, 0], saved_emb=saved[:, 1],
                  saved_head=saved[:, 2], working=saved[:, 3], variables=V, rates=R), srow


@dataclass
class Group:
    """Rows sharing (pp, virtual stages): chunk arrays of one width."""

    rows: np.ndarray
    pp: int
    v: int
    layers: np.ndarray           # [chunks]
    dense: np.ndarray            # [n, chunks] parameters per rank
    expert: np.ndarray


def groups(pr: Pricer, table: pd.DataFrame) -> list[Group]:
    model = pr.scenario.model
    out = []
    for (pp, v), idx in table.groupby(["pp", "virtual_stages"], sort=True).indices.items():
        pp, v = int(pp), int(v)
        layers = pr.memo(("layers", pp * v), lambda: np.asarray(stage_layers(model.layers, pp * v), dtype=float))
        sub = table.iloc[idx]
        pairs = [pr.memo(("params", int(a), pp, v, int(b)), lambda a=a, b=b: opslib.chunk_params_split(
            model, int(a), layers, pp, int(b))) for a, b in zip(sub["tp"].to_numpy(), sub["ep"].to_numpy())]
        out.append(Group(rows=np.asarray(idx), pp=pp, v=v, layers=layers,
                         dense=np.array([p[0] for p in pairs]), expert=np.array([p[1] for p in pairs])))
    return out


def cluster_columns(pr: Pricer, table: pd.DataFrame, names: tuple[str, ...]) -> list[np.ndarray]:
    """Per row, figures of its cluster (one lookup per distinct instance type, count and lnc): capacity_gib,
    reserve_gib, price_per_hour_usd, peak_flop_per_s."""
    keys = list(zip(table["instance"], table["instances"].tolist(), table["lnc"].tolist()))
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    which = np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))
    infos = [pr.cluster(*k) for k in index]
    get = {"capacity_gib": lambda c: c.capacity_gib,
           "reserve_gib": lambda c: c.cluster.calibration.runtime_reserve_gib,
           "price_per_hour_usd": lambda c: c.price_per_hour_usd, "peak_flop_per_s": lambda c: c.peak_flop_per_s}
    return [np.array([get[n](c) for c in infos], dtype=float)[which] for n in names]


def _counts(schedule: str, p: int, m: int, v: int) -> list[np.ndarray]:
    """Per stage, the distinct vectors of microbatches in flight per local chunk along the executed program
    (what `memory.in_flight_peak` walks), so a stage's peak is a max of dot products. A long 1F1B or
    interleaved program holds the same vectors as a short one once its steady state repeats (checked: the
    short program and one a block longer hold the same), so those are read off the short one; with one chunk
    per stage a peak that grows by the same step over three lengths (GPipe holds every microbatch) is
    extrapolated; otherwise the full program is walked."""
    P = p if schedule == "interleaved" else 1
    lengths = [x for x in _run_lengths("1f1b" if schedule == "gpipe" else schedule, p, m, v) if x + 2 * P < m]
    for m_run in lengths:
        here, longer = _held(schedule, p, m_run, v), _held(schedule, p, m_run + P, v)
        if all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(here, longer)):
            return here
        if v == 1:    # one chunk per stage: the peak count, if it grows by the same step over three lengths
            peaks = [np.array([u.max() for u in held]) for held in (here, longer, _held(schedule, p, m_run + 2 * P, v))]
            step = peaks[1] - peaks[0]
            if np.array_equal(peaks[2] - peaks[1], step):
                top = peaks[0] + step * ((m - m_run) // P)
                return [np.array([[0.0], [t]]) for t in top]      # act >= 0: the peak is count x act
    return _held(schedule, p, m, v)


@lru_cache(maxsize=256)
def _held(schedule: str, p: int, m: int, v: int) -> list[np.ndarray]:
    stage, kind, mb, chunk, start = program_arrays(schedule, p, m, v)
    out = []
    for s in range(p):
        lo, hi = start[s], start[s + 1]
        delta = np.zeros((hi - lo, v), dtype=np.int64)
        delta[np.arange(hi - lo), chunk[lo:hi] // p] = np.where(kind[lo:hi] == 0, 1, -1)
        held = np.vstack([np.zeros((1, v), dtype=np.int64), np.cumsum(delta, axis=0)])
        key = (held * (int(mb.max(initial=0)) + 2) ** np.arange(v)).sum(axis=1)
        _, first = np.unique(key, return_index=True)
        out.append(held[np.sort(first)].astype(float))
    return out


# ----------------------------------------------------------------------------------------------------------
# Batched: memory, chunk times, communication (each mirrors the function named in its docstring)


def batched_memory(pr: Pricer, table: pd.DataFrame, sh: Shapes, srow: np.ndarray, grps: list[Group]) -> dict:
    """The worst stage's HBM of every row, as `memory.stage_memory` counts it: arrays [rows] of MEMORY_COLUMNS."""
    t = pr.scenario.training
    w_base, g_bytes = opslib.weight_bytes(t), opslib.grad_bytes(t)
    mx = getattr(opslib, "MX_PRECISIONS", ())
    if t.precision in mx:                            # + the MX copies of the weights, both orientations
        w_base += 2 * opslib.PRECISION_BYTES[t.precision]
    o_bytes = 12.0 if t.master_weights == "fp32" else 4.0
    n = len(table)
    out = {k: np.zeros(n) for k in MEMORY_COLUMNS}
    sched, m_all = table["pp_schedule"].to_numpy(), table["microbatches"].to_numpy()
    zero_all, dp_all, ep_all = table["zero"].to_numpy(), table["dp"].to_numpy(), table["ep"].to_numpy()
    cap_all, reserve_all = cluster_columns(pr, table, ("capacity_gib", "reserve_gib"))
    for g in grps:
        k = srow[g.rows]
        dp, ep, zero = dp_all[g.rows], ep_all[g.rows], zero_all[g.rows]
        params = g.dense + g.expert
        held = g.dense / dp[:, None] + g.expert / (dp // ep)[:, None]        # opslib.dp_share
        opt_params = np.where((zero >= 1)[:, None], held, params)
        unit = params / np.maximum(g.layers, 1)[None, :]
        act = g.layers[None, :] * sh.saved_layer[k, None]
        act[:, 0] += sh.saved_emb[k]
        act[:, -1] += sh.saved_head[k]
        P = _stage_sum(params, g.pp)
        sharded = _stage_sum(held, g.pp) + 2 * unit.reshape(len(g.rows), g.v, g.pp).max(axis=1)
        P = np.where((zero >= 3)[:, None], sharded, P)
        W, G, O = P * w_base / GIB, P * g_bytes / GIB, _stage_sum(opt_params, g.pp) * o_bytes / GIB
        A = np.zeros((len(g.rows), g.pp))
        code = np.array([SCHEDULE_CODE[x] for x in sched[g.rows]]) * (1 << 32) + m_all[g.rows]
        keys, which = np.unique(code, return_inverse=True)
        for key_i, key in enumerate(keys.tolist()):
            idx = np.flatnonzero(which == key_i)
            sc, m = SCHEDULES_BY_CODE[key >> 32], key & ((1 << 32) - 1)
            counts = pr.memo(("counts", sc, g.pp, int(m), g.v), lambda: _counts(sc, g.pp, int(m), g.v))
            for s, U in enumerate(counts):                # max over held vectors of sum_j U_j act_j, summed
                local = act[idx][:, s::g.pp]                 # in a fixed order (no BLAS: the same bits in any
                A[idx, s] = np.cumsum(U[None, :, :] * local[:, None, :], axis=2)[:, :, -1].max(axis=1)   # chunk)
        A = (A + sh.working[k, None]) / GIB
        cap, reserve = cap_all[g.rows], reserve_all[g.rows]
        total = W + G + O + A + reserve[:, None]
        worst = np.argmax(total - cap[:, None], axis=1)
        pick = np.arange(len(g.rows))
        out["hbm_peak_gib"][g.rows] = total.max(axis=1)
        out["hbm_capacity_gib"][g.rows] = cap
        out["worst_stage"][g.rows] = worst
        for name, arr in (("weights_gib", W), ("gradients_gib", G), ("optimizer_gib", O), ("activations_gib", A)):
            out[name][g.rows] = arr[pick, worst]
        out["reserve_gib"][g.rows] = reserve
    return out


def batched_chunks(pr: Pricer, table: pd.DataFrame, sh: Shapes, srow: np.ndarray, g: Group, js) -> tuple:
    """`chip.chunk_times` of rows js of a group: forward and backward seconds per microbatch [n, chunks],
    optimizer seconds per stage [n, pp], one layer's attention core forward and backward [n]."""
    idx = g.rows[js]
    k = srow[idx]
    sub = table.iloc[idx]
    cal = pr.cluster(sub["instance"].iloc[0], sub["instances"].iloc[0], sub["lnc"].iloc[0]).cluster.calibration
    fwd = g.layers[None, :] * sh.layer_fwd[k, None]
    bwd = g.layers[None, :] * sh.layer_bwd[k, None]
    if getattr(cal, "stage_ends", True):             # the embedding on the first chunk, the LM head on the last
        fwd[:, 0] += sh.emb_fwd[k]
        bwd[:, 0] += sh.emb_bwd[k]
        fwd[:, -1] += sh.head_fwd[k]
        bwd[:, -1] += sh.head_bwd[k]
    else:                                            # the same work spread evenly over the chunks
        fwd += ((sh.emb_fwd[k] + sh.head_fwd[k]) / g.layers.size)[:, None]
        bwd += ((sh.emb_bwd[k] + sh.head_bwd[k]) / g.layers.size)[:, None]
    fwd += cal.microbatch_launch_s
    bwd += cal.microbatch_launch_s
    dp, ep, zero = sub["dp"].to_numpy(), sub["ep"].to_numpy(), sub["zero"].to_numpy()
    dense, expert = g.dense[js], g.expert[js]
    shard = np.where((zero >= 1)[:, None], dense / dp[:, None] + expert / (dp // ep)[:, None], dense + expert)
    shard = _stage_sum(shard, g.pp)
    n = len(idx)
    V = {name: np.repeat(val[k], g.pp) for name, val in sh.variables.items()}
    V["T"], V["P"] = np.ones(n * g.pp), shard.reshape(-1)
    rates = chip.RankRates(**{f.name: (np.repeat(getattr(sh.rates, f.name)[k], g.pp)
                                       if isinstance(getattr(sh.rates, f.name), np.ndarray)
                                       else getattr(sh.rates, f.name)) for f in dataclasses.fields(chip.RankRates)})
    ops = opslib.applicable(pr.library, layout_scenario(pr.scenario, sub.iloc[0].to_dict()), cal)
    opt = _sum0(chip.op_seconds(opslib.evaluate(ops, "optimizer", "forward", V), rates, V["e"], V["w"])).reshape(n, g.pp)
    return fwd, bwd, opt, sh.attn_fwd[k], sh.attn_bwd[k]


def batched_comm(pr: Pricer, r, sh: Shapes, k: int, g: Group, j: int) -> engine.CommPlan:
    """`replay.engine.plan_comm` of row r (shape k, row j of its group), from memoized collectives."""
    t = pr.scenario.training
    ck = (r.instance, int(r.instances), int(r.lnc))
    cl = pr.cluster(*ck).cluster
    cal = cl.calibration
    tp, cp, pp, v, dp, ep = int(r.tp), int(r.cp), int(r.pp), int(r.virtual_stages), int(r.dp), int(r.ep)
    sp, zero = bool(r.sequence_parallel), int(r.zero)
    V = sh.variables
    act = V["T"][k] * V["h"][k] * V["e"][k]
    again = 1.0 if r.recompute == "full" else 0.0

    def in_layer():
        tpg = group_of(cl, tp, 1)
        if sp:
            ag = pr.collective(ck, "all_gather", act, tpg)
            rs = pr.collective(ck, "reduce_scatter", act, tpg)
            per_layer, block_exposed, block_hideable = 2 * (ag + rs), ag, ag + rs
        else:
            ar = pr.collective(ck, "all_reduce", act, tpg)
            per_layer, block_exposed, block_hideable = 2 * ar, 0.0, ar
        if cal.tp_overlap and tp > 1:
            bwd_exposed = 2 * block_exposed + float(np.maximum(block_hideable - sh.hide[k], 0.0).sum())
        else:
            bwd_exposed = 2 * (block_exposed + block_hideable)
        cp_f = cp_b = 0.0
        if cp > 1:
            cpg = group_of(cl, 2, tp)
            kv = 2 * V["T"][k] * V["hkv"][k] * V["d"][k] * V["e"][k]
            cp_f = pr.collective(ck, "send_recv", kv, cpg)
            cp_b = pr.collective(ck, "send_recv", 2 * kv, cpg)
        a2a = 0.0
        moe = pr.scenario.model.moe
        if moe is not None and ep > 1:
            epg = group_of(cl, ep, tp * cp * pp)
            a2a_bytes = V["T"][k] * moe.top_k * moe.imbalance * V["h"][k] * V["e"][k] / (tp if sp else 1)
            a2a = 2 * pr.collective(ck, "all_to_all", a2a_bytes, epg)
        return per_layer, bwd_exposed, cp_f, cp_b, a2a

    per_layer, bwd_exposed, cp_f, cp_b, a2a = pr.memo(("layer-comm", ck, _shape_key(r), pp if ep > 1 else 0), in_layer)
    layers = g.layers
    n_chunks = layers.size
    send_bytes = act / tp if sp else act

    def sends():
        placed = dataclasses.replace(cl, layout=Layout(tp=tp, cp=cp, pp=pp, dp=dp, virtual_stages=v))
        grp = tuple(engine._send_group(placed, c % pp, (c + 1) % pp) for c in range(n_chunks - 1))
        return grp, np.array([pr.collective(ck, "send_recv", send_bytes, x) for x in grp] + [0.0])

    send_groups, send_fwd = pr.memo(("sends", ck, tp * cp, pp, v, send_bytes), sends)
    send_bwd = np.concatenate([[0.0], send_fwd[:-1]])
    g_bytes, w_bytes = opslib.grad_bytes(t), opslib.weight_bytes(t)
    stride = tp * cp * pp
    reduce_op = "reduce_scatter" if zero >= 1 else "all_reduce"
    dense, expert = g.dense[j], g.expert[j]

    def data_parallel():
        dpg, xpg = group_of(cl, dp, stride), group_of(cl, dp // ep, stride * ep)
        after = np.zeros(pp)
        gather, scatter = np.zeros(n_chunks), np.zeros(n_chunks)
        if zero >= 3:
            ud, ue = dense / layers, expert / layers
            gather = np.array([pr.collective(ck, "all_gather", d * w_bytes, dpg) + pr.collective(
                ck, "all_gather", e * w_bytes, xpg) for d, e in zip(ud, ue)])
            scatter = np.array([pr.collective(ck, "reduce_scatter", d * g_bytes, dpg) + pr.collective(
                ck, "reduce_scatter", e * g_bytes, xpg) for d, e in zip(ud, ue)])
            return np.zeros(0, int), np.zeros(0), after, gather, scatter
        buckets = np.maximum(1, np.ceil((dense + expert) * g_bytes / engine.DP_BUCKET_BYTES)).astype(int)
        bucket_s = np.array([pr.collective(ck, reduce_op, gd / nb, dpg) + pr.collective(ck, reduce_op, ge / nb, xpg)
                             for gd, ge, nb in zip(dense * g_bytes, expert * g_bytes, buckets)])
        if dp > 1 and zero >= 1:
            sd, se = _stage_sum(dense[None, :], pp)[0], _stage_sum(expert[None, :], pp)[0]
            after = np.array([pr.collective(ck, "all_gather", sd[s] * w_bytes, dpg) + pr.collective(
                ck, "all_gather", se[s] * w_bytes, xpg) for s in range(pp)])
        return buckets, bucket_s, after, gather, scatter

    buckets, bucket_s, after, gather, scatter = pr.memo(("dp", ck, tp, cp, pp, v, dp, ep, zero), data_parallel)
    send_bwd_last = send_bwd.copy()
    if dp > 1 and buckets.size and pr.shared_last_sends:
        dpg = group_of(cl, dp, stride)
        for c in range(1, n_chunks):
            if send_bwd[c] > 0:
                send_bwd_last[c] = pr.concurrent_first(ck, (
                    ("send_recv", float(send_bytes), send_groups[c - 1]),
                    (reduce_op, float(dense[c] * g_bytes / buckets[c]), dpg)))
    norm_s = pr.memo(("norm", ck), lambda: pr.collective(ck, "all_reduce", 4, group_of(cl, cl.ranks, 1))
                     if cal.step_costs and cl.ranks > 1 else 0.0)
    return engine.CommPlan(
        tp_fwd=layers * (per_layer + a2a), tp_bwd=layers * (bwd_exposed + a2a + (per_layer + a2a) * again),
        send_fwd=send_fwd, send_bwd=send_bwd, dp=np.zeros(pp), records=[], dp_overlap=cal.dp_overlap,
        norm_s=norm_s, dp_bucket_s=bucket_s, dp_buckets=buckets, dp_after_s=after, fsdp_gather_s=gather,
        fsdp_scatter_s=scatter, cp_block_fwd_s=cp_f, cp_block_bwd_s=cp_b, send_bwd_last=send_bwd_last)


# ----------------------------------------------------------------------------------------------------------
# The step


def speeds(pr: Pricer, r, steps: list[int], sigma: float) -> np.ndarray:
    """[steps, pp] each stage's speed factor (>= 1) in each measured step: its slowest replica's, with jitter
    and stragglers drawn as `replay.engine.combine_profiles` draws them."""
    tp, cp, pp, dp = int(r.tp), int(r.cp), int(r.pp), int(r.dp)
    seed, ranks = pr.scenario.seed, tp * cp * pp * dp
    slow, factor = pr.memo(("stragglers", ranks), lambda: chip.stragglers(pr.scenario, ranks))
    out = np.empty((len(steps), pp))
    for i, step in enumerate(steps):
        if slow.size == 0:
            out[i] = pr.memo(("jitter", step, dp, pp, tp * cp, sigma),
                             lambda: chip.group_jitter(seed, step, (dp, pp), tp * cp, sigma).max(axis=0))
            continue
        speed = chip.group_jitter(seed, step, (dp, pp), tp * cp, sigma)
        c = rank_coords(Layout(tp=tp, cp=cp, pp=pp, dp=dp), slow)
        np.maximum.at(speed, (c["dp"], c["pp"]), factor)
        out[i] = speed.max(axis=0)
    return out


def bucket_queue_end(t0: np.ndarray, t1: np.ndarray, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """When a stage's gradient-bucket queue ends (`replay.engine.gradient_reduction`), in closed form.

    Bucket i of a chunk's n is ready at t0 + (t1 - t0) i / n (evenly over its last backward); buckets run one
    after another, d seconds each. The chunks' windows follow the program and do not overlap, so the queue
    ends at the max over buckets of (ready time + the seconds of it and every later bucket), which within a
    chunk is linear in i: only its first and last bucket count.

    Args:
        t0, t1: [..., segments] start and end of each chunk's last backward, in program order.
        n: [..., segments] buckets; d: [..., segments] seconds per bucket.

    Returns:
        [...] end of the queue.
    """
    work = n * d
    later = np.cumsum(work[..., ::-1], axis=-1)[..., ::-1] - work
    return np.maximum(t0 + (t1 - t0) / n + work + later, t1 + d + later).max(axis=-1)


@dataclass
class _Stack:
    """ZeRO-3 gather and scatter seconds of several layouts, [rows, chunks], where `fsdp_exposed` reads a
    CommPlan's [chunks] (its formula broadcasts over rows)."""

    fsdp_gather_s: np.ndarray
    fsdp_scatter_s: np.ndarray


@dataclass
class _Pending:
    """One layout waiting for its pipeline: its row, per-step chunk seconds and what the step adds after."""

    i: int
    m: int                       # microbatches per replica
    fwd: np.ndarray              # [steps, chunks]
    bwd: np.ndarray
    comm: engine.CommPlan
    opt: np.ndarray              # [steps, pp]
    overhead_s: float


def evaluate(pr: Pricer, table: pd.DataFrame) -> pd.DataFrame:
    """Predict every layout of `table` (LAYOUT_COLUMNS and `microbatches`, one row per layout).

    Returns:
        DataFrame indexed like `table`: feasible, reason, MEMORY_COLUMNS, step_time_s, tokens_per_s, mfu,
        price_per_hour_usd (the cluster's), usd_per_million_tokens (NaN where the price is unknown).
    """
    sc = pr.scenario
    t = sc.training
    table = table.reset_index(drop=True)
    rows = list(table.itertuples(index=False))
    batched = any(pr.sources[p] == "batched" for p in PARTS)
    sh, srow = shapes(pr, rows) if batched else (None, None)
    grps = groups(pr, table)
    if pr.sources["memory"] == "batched":
        mem = batched_memory(pr, table, sh, srow, grps)
    else:
        mem = {k: np.zeros(len(rows)) for k in MEMORY_COLUMNS}
        for i, r in enumerate(rows):
            stages = pr.real_memory(r)
            w = max(stages, key=lambda s: s.total_gib - s.capacity_gib)
            for name, val in (("hbm_peak_gib", max(s.total_gib for s in stages)), ("hbm_capacity_gib", w.capacity_gib),
                              ("worst_stage", w.stage), ("weights_gib", w.weights_gib),
                              ("gradients_gib", w.gradients_gib), ("optimizer_gib", w.optimizer_gib),
                              ("activations_gib", w.activations_gib), ("reserve_gib", w.reserve_gib)):
                mem[name][i] = val
    out = pd.DataFrame(mem)
    out["worst_stage"] = out["worst_stage"].astype(int)
    worst_total = out[["weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "reserve_gib"]].sum(axis=1)
    out["feasible"] = (worst_total <= out["hbm_capacity_gib"]).to_numpy()
    out["reason"] = [None if ok else infeasible_reason([StageMemory(
        stage=int(r.worst_stage), weights_gib=r.weights_gib, gradients_gib=r.gradients_gib,
        optimizer_gib=r.optimizer_gib, activations_gib=r.activations_gib, reserve_gib=r.reserve_gib,
        total_gib=tot, capacity_gib=r.hbm_capacity_gib)]) for ok, r, tot in
        zip(out["feasible"], out.itertuples(index=False), worst_total)]

    measured = list(range(t.warmup_steps, t.warmup_steps + t.steps))
    feasible = out["feasible"].to_numpy()
    pending: dict[tuple, list[_Pending]] = {}
    for g in grps:
        js = np.flatnonzero(feasible[g.rows])
        if js.size == 0:
            continue
        idx = g.rows[js]
        if pr.sources["chunks"] == "batched":
            F, B, OPT, attn_f, attn_b = batched_chunks(pr, table, sh, srow, g, js)
        else:
            cts = [pr.real_chunks(rows[int(i)]) for i in idx]
            F, B, OPT = (np.array([getattr(ct, f) for ct in cts]) for f in ("forward_s", "backward_s", "optimizer_s"))
            attn_f, attn_b = (np.array([getattr(ct, f) for ct in cts]) for f in ("attention_fwd_s", "attention_bwd_s"))
        comms = [batched_comm(pr, rows[int(i)], sh, int(srow[int(i)]), g, int(j)) if pr.sources["comm"] == "batched"
                 else pr.real_comm(rows[int(i)]) for i, j in zip(idx, js)]
        cals = [pr.cluster(rows[int(i)].instance, rows[int(i)].instances, rows[int(i)].lnc).cluster.calibration
                for i in idx]
        # [n, pp]: each stage at its slowest replica's speed, averaged over the measured steps
        G = np.concatenate([pr.memo(("speed", int(r.tp), int(r.cp), int(r.pp), int(r.dp), sig),
                                    lambda r=r, sig=sig: speeds(pr, r, measured, sig).mean(axis=0, keepdims=True))
                            for r, sig in ((rows[int(i)], chip.jitter_sigma(sc, cal)) for i, cal in zip(idx, cals))])
        Gc = np.tile(G, (1, g.v))                                                    # chunk c: stage c % pp
        fc, bc = F * Gc, B * Gc
        cp_f, cp_b = np.zeros(idx.size), np.zeros(idx.size)
        for n, i in enumerate(idx):
            cp = int(rows[int(i)].cp)
            if cp > 1:
                prof = engine.ComputeProfile(fwd=fc[n:n + 1], bwd=bc[n:n + 1], opt=OPT[n], attn_fwd=float(attn_f[n]),
                                             attn_bwd=float(attn_b[n]), slowest_rank=-1)
                cp_f[n], cp_b[n] = engine.cp_exposed(comms[n], prof, cp)
        stacked = lambda name: np.array([getattr(c, name) for c in comms])           # noqa: E731
        fs_f, fs_b = np.zeros_like(fc), np.zeros_like(bc)
        z3 = np.array([c.fsdp_gather_s.size > 0 for c in comms])
        if z3.any():                  # ZeRO-3 rows: the engine's exposure of per-layer gathers, [rows, chunks] at once
            both = _Stack(fsdp_gather_s=np.array([c.fsdp_gather_s for c, z in zip(comms, z3) if z]),
                          fsdp_scatter_s=np.array([c.fsdp_scatter_s for c, z in zip(comms, z3) if z]))
            fs_f[z3], fs_b[z3] = engine.fsdp_exposed(both, fc[z3], bc[z3], g.layers)
        fwd = fc + stacked("tp_fwd") + g.layers[None, :] * cp_f[:, None] + fs_f
        bwd = bc + stacked("tp_bwd") + g.layers[None, :] * cp_b[:, None] + fs_b
        opt = OPT * G
        for n, i in enumerate(idx):
            r = rows[int(i)]
            pending.setdefault((str(r.pp_schedule), g.pp, g.v), []).append(_Pending(
                i=int(i), m=int(r.microbatches), fwd=fwd[n:n + 1], bwd=bwd[n:n + 1], comm=comms[n], opt=opt[n:n + 1],
                overhead_s=cals[n].step_overhead_s))
    step_time = np.full(len(rows), np.nan)
    for (schedule, pp, v), items in pending.items():
        n_rows, chunks = len(items), pp * v
        stack = lambda name: np.array([getattr(it.comm, name) for it in items])     # noqa: E731
        sf, sb = stack("send_fwd"), stack("send_bwd")
        last = np.array([it.comm.send_bwd_last if it.comm.send_bwd_last is not None else it.comm.send_bwd
                         for it in items])
        pt = pipeline_times(schedule, pp, v, np.array([it.m for it in items]), np.concatenate([it.fwd for it in items]),
                            np.concatenate([it.bwd for it in items]), sf, sb, last)
        end = pt.stage_end                                                           # [rows, pp]
        # gradient buckets, every stage of every row at once: [rows, pp, v] segments in program order
        # (a stage's last backwards run its chunks from the last down)
        has = np.array([it.comm.dp_buckets.size > 0 for it in items])
        nb = np.array([it.comm.dp_buckets if it.comm.dp_buckets.size else np.ones(chunks) for it in items], dtype=float)
        d = np.array([it.comm.dp_bucket_s if it.comm.dp_buckets.size else np.zeros(chunks) for it in items])
        seg = lambda a: a.reshape(n_rows, v, pp)[:, ::-1, :].transpose(0, 2, 1)     # noqa: E731
        overlap = np.array([it.comm.dp_overlap for it in items])
        queued = np.where(overlap[:, None], bucket_queue_end(seg(pt.last_b_start), seg(pt.last_b_end), seg(nb), seg(d)),
                          end + (seg(nb) * seg(d)).sum(axis=2))
        rs_end = np.where(has[:, None], queued, 0.0)
        norm = np.array([it.comm.norm_s for it in items])
        opt = np.concatenate([it.opt for it in items])
        after = stack("dp_after_s")
        done = np.maximum(end, rs_end) + norm[:, None] + opt + after
        step = done.max(axis=1) + np.array([it.overhead_s for it in items])
        step_time[[it.i for it in items]] = step
    price, peak = cluster_columns(pr, table, ("price_per_hour_usd", "peak_flop_per_s"))
    price = price * table["instances"].to_numpy()
    tokens = t.global_batch * t.seq_len
    out["step_time_s"] = step_time
    out["tokens_per_s"] = tokens / step_time
    out["mfu"] = opslib.model_flops_per_step(sc) / (peak * step_time)
    out["price_per_hour_usd"] = price
    out["usd_per_million_tokens"] = price * step_time / 3600 / tokens * 1e6
    return out


# ----------------------------------------------------------------------------------------------------------
# The check of the batched parts against the functions they mirror


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=CHECK_RTOL, atol=1e-15))


def compare_parts(pr: Pricer, table: pd.DataFrame) -> dict[str, str | None]:
    """For each part, None when the batched source equals the per-layout function on every row of `table`,
    else what differs first (part → message)."""
    table = table.reset_index(drop=True)
    rows = list(table.itertuples(index=False))
    sh, srow = shapes(pr, rows)
    grps = groups(pr, table)
    found: dict[str, str | None] = {p: None for p in PARTS}
    mem = batched_memory(pr, table, sh, srow, grps)
    for i, r in enumerate(rows):
        real = pr.real_memory(r)
        peak = max(s.total_gib for s in real)
        if not _close(mem["hbm_peak_gib"][i], peak):
            found["memory"] = found["memory"] or f"HBM {mem['hbm_peak_gib'][i]:.6g} GiB, stage_memory {peak:.6g} GiB"
    for g in grps:
        js = np.arange(len(g.rows))
        F, B, OPT, attn_f, attn_b = batched_chunks(pr, table, sh, srow, g, js)
        for j in js:
            ct = chip.ChunkTimes(forward_s=F[j], backward_s=B[j], optimizer_s=OPT[j], attention_fwd_s=float(attn_f[j]),
                                 attention_bwd_s=float(attn_b[j]))
            r = rows[int(g.rows[j])]
            real = pr.real_chunks(r)
            for f in dataclasses.fields(real):
                mine = getattr(ct, f.name)
                if mine is not None and not _close(mine, getattr(real, f.name)) and found["chunks"] is None:
                    found["chunks"] = f"{f.name} {mine} vs chunk_times {getattr(real, f.name)}"
            cm, rc = batched_comm(pr, r, sh, int(srow[int(g.rows[j])]), g, int(j)), pr.real_comm(r)
            for f in dataclasses.fields(rc):
                if f.name in ("records", "dp"):      # the report's table and totals, not the step's inputs
                    continue
                if f.name == "send_bwd_last" and not pr.shared_last_sends:
                    continue
                a, b = getattr(cm, f.name), getattr(rc, f.name)
                a = a if a is not None else cm.send_bwd
                b = b if b is not None else rc.send_bwd
                if not _close(a, b) and found["comm"] is None:
                    found["comm"] = f"{f.name} {a} vs plan_comm {b}"
    return found
