"""The three parts of a layout's time, batched over layouts: HBM per stage, chunk times, communication.

Each is the model's one implementation, called with many rows: `memory`'s row-axis functions (`stage_memory`
calls them with one), `chip.layer_costs` / `chunk_rows` / `optimizer_seconds` (`chunk_times` calls them with
one), `replay.comm`'s pieces (`step_comm` composes them for one layout). What is here is only the batching: the
rows grouped by what they share (per-rank shapes, pipeline shapes), memos, and the activation peak read off a
short program (`program_counts`) where `run` walks the executed one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from .. import chip, memory, stacks
from .. import operators as opslib
from ..cluster import Layout, group_ranks, replica_ranks, stage_layers
from ..frozen import read_only
from ..units import GIB
from ..replay import comm
from ..replay.comm import StepComm
from ..step.hbm import hbm_totals
from .evaluator import (MEMORY_COLUMNS, SCHEDULE_CODE, SCHEDULES_BY_CODE, Evaluator, SettingsCommTimes,
                        calibration_index, layout_scenario)
from .programs import program_arrays
from .schedules import run_lengths

# ----------------------------------------------------------------------------------------------------------
# Batched: per-rank shapes


@dataclass
class Shapes:
    """Per-rank costs of distinct (instance, lnc, tp, cp, micro_batch, recompute, sp, ep, calibration) shapes."""

    keys: list[tuple]            # [K] each shape's key (`_shape_key`), stable across chunks
    costs: chip.LayerCosts       # arrays [K]
    saved_layer: np.ndarray      # activation bytes per layer and microbatch
    saved_emb: np.ndarray
    saved_head: np.ndarray
    working: np.ndarray          # full recomputation's one-layer working set, bytes
    variables: dict[str, np.ndarray]
    rates: chip.RankRates        # fields [K]
    ops: tuple                   # the applicable operators (one list: the calibrations' switches agree)
    bad: list | None = None      # [K] why a scenario's own operator gives no valid work at the shape, else None


def _shape_key(r) -> tuple:
    return (r.instance, int(r.lnc), int(r.tp), int(r.cp), int(r.micro_batch), str(r.recompute),
            bool(r.sequence_parallel), int(r.ep), calibration_index(r))


def distinct_rows(table: pd.DataFrame, columns: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """([rows] which distinct combination of `columns`' values each row holds, [K] the first row of each)."""
    code = np.zeros(len(table), dtype=np.int64)
    known = getattr(table, "one_value", ())        # (`columns.Columns`: the columns it holds one value in)
    read = [a for a in (table[c].to_numpy() for c in columns if c not in known)
            if not (a.size <= 1024 and _one_value(a))]     # (an interval's settings: factorize's codes 0 of one value)
    if len(read) == 1 and read[0].dtype.kind in "iu":      # one integer column (an interval's `cal`): the same
        _, first, inv = np.unique(read[0], return_index=True, return_inverse=True)    # as below, without pandas
        order = np.argsort(first, kind="stable")            # its values by first appearance, as factorize codes them
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return rank[inv.reshape(-1)].astype(np.int64), first[order]
    for a in read:                      # one integer per distinct combination of the columns' values
        codes, values = pd.factorize(a)
        code = code * len(values) + codes
    _, firsts, which = np.unique(code, return_index=True, return_inverse=True)
    return which.reshape(-1).astype(np.int64), firsts


def _one_value(a: np.ndarray) -> bool:
    """Every entry of `a` the same value, not a missing one (where `pd.factorize` gives every row code 0 of one
    value: the combination's integer unchanged)."""
    first = a[0] if a.size else None
    if first is None or first is pd.NA or (isinstance(first, float) and first != first):
        return False
    try:
        return bool((a == first).all())
    except (TypeError, ValueError):
        return False


def one_layout(table) -> bool:
    """Whether `table` is one layout under several calibrations as an interval's settings table is built (a
    `columns.Columns` holding one value in every column but `cal`, `layouts.setting_times._settings_table`)."""
    return "cal" in table.columns and set(table.columns) - {"cal"} <= getattr(table, "one_value", frozenset())


SHAPE_COLUMNS = ("instance", "lnc", "tp", "cp", "micro_batch", "recompute", "sequence_parallel", "ep")


def shapes(pr: Evaluator, table: pd.DataFrame, rows: list) -> tuple[Shapes, np.ndarray]:
    """Time every distinct per-rank shape of `table` (`rows`: its rows, `steps.RowView`) (`chip.layer_costs`: one
    `evaluate` call per where and phase).

    Returns:
        (Shapes, [rows] index of each row's shape).
    """
    srow, firsts = distinct_rows(table, SHAPE_COLUMNS + (("cal",) if "cal" in table.columns else ()))
    if one_layout(table):       # an interval's settings: the first row's shape under each setting (no row built)
        base, r0 = _shape_key(rows[0])[:-1], rows[0]
        first = {base + (c,): (r0, c, base) for c in table["cal"].to_numpy()[firsts].tolist()}
    else:
        first = {_shape_key(r): (r, calibration_index(r)) for r in (rows[i] for i in firsts.tolist())}
    keys = list(first)
    if len(keys) != firsts.size:
        raise AssertionError("shape columns and shape keys disagree")    # a bug here, not bad input
    per_key = [pr.memo(("shape", key), lambda r=first[key]: _shape_inputs(pr, *r)) for key in keys]
    K = len(keys)
    ops, cal = per_key[0][1], per_key[0][4]
    if all(pk[0] is per_key[0][0] for pk in per_key):     # one shape alike (an interval's): its values K times
        V = {name: np.full(K, x, dtype=float) for name, x in per_key[0][0].items()}
    else:
        V = {name: np.array([pk[0][name] for pk in per_key], dtype=float) for name in per_key[0][0]}
    R = chip.stack_rates([pk[2].rates for pk in per_key])
    costs = chip.layer_costs(ops, V, R, np.array([pk[3] for pk in per_key]),
                             np.array([pk[4].layer_overhead_s for pk in per_key]), cal.flash_attention,
                             *(_shared_work(pr, keys, V, ops) if "cal" in table.columns else (None, None)))
    saved = _saved_alike(pr, keys, per_key, V) if "cal" in table.columns else _saved_bytes(per_key, V)
    bad = None
    if pr.scenario.operators:   # a scenario's own expressions may go bad at shapes other than its own
        flags, why = opslib.bad_work([o for o in ops if o.where != "optimizer"], V)
        bad = [w if f else None for f, w in zip(flags.tolist(), why)]
    return Shapes(keys=keys, costs=costs, saved_layer=saved[:, 0], saved_emb=saved[:, 1], saved_head=saved[:, 2],
                  working=saved[:, 3], variables=V, rates=R, ops=tuple(ops), bad=bad), srow


def _shared_work(pr: Evaluator, keys: list, V: dict[str, np.ndarray], ops) -> tuple[dict, np.ndarray]:
    """(`chip.layer_work` of shapes `keys` under a calibration per row: evaluated once per shape alike
    (`_shape_inputs`: the same variables and operators under every calibration) and kept (`chip.kept_layer_work`:
    for the Evaluator's next settings, an interval makes two evaluations, and from the run's own chip model), [K]
    the shape alike of each key: `chip.layer_costs`' work and `at`)."""
    alike = {}
    k = np.array([alike.setdefault(key[:-1], len(alike)) for key in keys], dtype=np.int64)
    firsts = np.unique(k, return_index=True)[1]
    return chip.kept_layer_work(ops, {n: a[firsts] for n, a in V.items()}), k


def _shape_inputs(pr: Evaluator, r, c: int, alike: tuple | None = None) -> tuple:
    """What timing row r's per-rank shape under calibration `c` (an index) needs (kept per shape across a search's
    pieces): its shape variables, operators, cluster, recomputation and calibration. The variables, operators and
    recomputation read only the calibration's switches, which an Evaluator's calibrations share: kept once for
    every calibration of the shape (an interval's settings), by the shape's key but its calibration (`alike`,
    when the caller has it)."""
    info = pr.cluster(r.instance, r.instances, r.lnc, c)
    cal = info.cluster.calibration

    def same():
        sc = layout_scenario(pr.scenario, r)
        v = opslib.shape_variables(sc, Layout(tp=int(r.tp), cp=int(r.cp), pp=1, dp=1), cal)
        return v, opslib.applicable(pr.library, sc, cal), opslib.recompute_mode(sc.training)

    v, ops, rc = pr.memo(("shape-alike", alike or _shape_key(r)[:-1]), same)   # (r's own `cal` not read)
    return v, ops, info, rc, cal


def _saved_alike(pr: Evaluator, keys: list, per_key: list[tuple], V: dict[str, np.ndarray]) -> np.ndarray:
    """`_saved_bytes` of shapes `keys` under a calibration per row (an interval's settings): evaluated once per shape
    alike (the same variables, operators and recomputation under every calibration: `_shape_inputs`) and kept for
    the Evaluator's next settings (an interval makes two evaluations)."""
    alike: dict[tuple, int] = {}
    k = np.array([alike.setdefault(key[:-1], len(alike)) for key in keys], dtype=np.int64)
    firsts = np.unique(k, return_index=True)[1].tolist()
    return pr.memo(("saved-alike", tuple(alike)), lambda: _saved_bytes(
        [per_key[i] for i in firsts], {n: a[firsts] for n, a in V.items()}))[k]


def _saved_bytes(per_key: list[tuple], V: dict[str, np.ndarray]) -> np.ndarray:
    """[K, 4] each shape's saved activation bytes per layer, embedding and head, and full recomputation's one-layer
    working set: `operators.saved_bytes` over every shape of one operator list and recomputation at once."""
    out = np.zeros((len(per_key), 4))
    groups: dict[tuple, list[int]] = {}
    for k, (_, ops, _, rc, _) in enumerate(per_key):
        groups.setdefault((tuple(map(id, ops)), rc), []).append(k)
    for (_, rc), ks in groups.items():
        ops, v = per_key[ks[0]][1], {name: values[ks] for name, values in V.items()}
        for j, where in enumerate(("layer", "embedding", "head")):
            out[ks, j] = opslib.saved_bytes(ops, where, v, rc)
        if rc == "full":
            out[ks, 3] = opslib.saved_bytes(ops, "layer", v, "none")
    return out


@dataclass
class PipeRows:
    """Rows sharing (pp, virtual stages): chunk arrays of one width."""

    rows: np.ndarray
    pp: int
    v: int
    layers: np.ndarray           # [chunks]
    dense: np.ndarray            # [n, chunks] parameters per rank
    expert: np.ndarray


def pipe_rows(pr: Evaluator, table: pd.DataFrame) -> list[PipeRows]:
    model = pr.scenario.model
    out = []
    pps, vs = table["pp"].to_numpy().astype(np.int64), table["virtual_stages"].to_numpy().astype(np.int64)
    per_pp = int(vs.max()) + 1 if vs.size else 1      # (pp, v) as one integer: its distinct values in (pp, v) order
    codes, which = np.unique(pps * per_pp + vs, return_inverse=True)
    for j, code in enumerate(codes.tolist()):
        idx = np.flatnonzero(which.reshape(-1) == j)
        pp, v = code // per_pp, code % per_pp
        layers = pr.memo(("layers", pp * v), lambda: np.asarray(stage_layers(model.layers, pp * v), dtype=float))
        tp, ep = table["tp"].to_numpy()[idx], table["ep"].to_numpy()[idx]
        span = int(ep.max()) + 1               # (tp, ep) as one integer: its distinct values in (tp, ep) order
        distinct, back = np.unique(tp * span + ep, return_inverse=True)
        pairs = [pr.memo(("params", a, pp, v, b), lambda a=a, b=b: opslib.chunk_params_split(
            model, a, layers, pp, b)) for a, b in zip((distinct // span).tolist(), (distinct % span).tolist())]
        back = back.reshape(-1)
        out.append(PipeRows(rows=np.asarray(idx), pp=pp, v=v, layers=layers,
                         dense=np.array([p[0] for p in pairs])[back], expert=np.array([p[1] for p in pairs])[back]))
    return out


def cluster_columns(pr: Evaluator, table: pd.DataFrame, names: tuple[str, ...]) -> list[np.ndarray]:
    """Per row, figures of its cluster (one lookup per distinct instance type, count and lnc): capacity_gib,
    reserve_gib, price_per_hour_usd, peak_flop_per_s."""
    which, firsts = distinct_rows(table, ("instance", "instances", "lnc"))
    infos = [pr.cluster(*k) for k in zip(table["instance"].to_numpy()[firsts], table["instances"].to_numpy()[firsts].tolist(),
                                         table["lnc"].to_numpy()[firsts].tolist())]
    get = {"capacity_gib": lambda c: c.capacity_gib,
           "reserve_gib": lambda c: c.cluster.calibration.runtime_reserve_gib,
           "price_per_hour_usd": lambda c: c.price_per_hour_usd, "peak_flop_per_s": lambda c: c.peak_flop_per_s}
    return [np.array([get[n](c) for c in infos], dtype=float)[which] for n in names]


def program_counts(schedule: str, p: int, m: int, v: int) -> list[np.ndarray]:
    """Per stage, the distinct vectors of microbatches in flight per local chunk along the executed program
    (what `memory.in_flight_peak` walks), so a stage's peak is a max of dot products. A long 1F1B or
    interleaved program holds the same vectors as a short one once its steady state repeats (checked: the
    short program and one a block longer hold the same), so those are read off the short one; with one chunk
    per stage a peak that grows by the same step over three lengths (GPipe holds every microbatch) is
    extrapolated; otherwise the full program is walked."""
    P = p if schedule == "interleaved" else 1
    lengths = [x for x in run_lengths("1f1b" if schedule == "gpipe" else schedule, p, m, v) if x + 2 * P < m]
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
def _held(schedule: str, p: int, m: int, v: int) -> tuple[np.ndarray, ...]:
    stage, kind, mb, chunk, start = program_arrays(schedule, p, m, v)
    return read_only(tuple(memory.stages_held((kind == 0).reshape(p, -1), (chunk // p).reshape(p, -1), v)))   # every stage at once


# ----------------------------------------------------------------------------------------------------------
# Batched: memory, chunk times, communication (each through the function named in its docstring)


def batched_memory(pr: Evaluator, table: pd.DataFrame, sh: Shapes, srow: np.ndarray, pipes: list[PipeRows]) -> dict:
    """The worst stage's HBM of every row, through `memory`'s batched functions (`memory.stage_memory` is the
    same with one row): arrays [rows] of MEMORY_COLUMNS."""
    per_param = memory.bytes_per_param(pr.scenario.training)
    n = len(table)
    out = {k: np.zeros(n) for k in MEMORY_COLUMNS}
    sched, m_all = table["pp_schedule"].to_numpy(), table["microbatches"].to_numpy()
    zero_all, dp_all, ep_all = table["zero"].to_numpy(), table["dp"].to_numpy(), table["ep"].to_numpy()
    cap_all, reserve_all = cluster_columns(pr, table, ("capacity_gib", "reserve_gib"))
    for g in pipes:
        k = srow[g.rows]
        zero = zero_all[g.rows]
        W, G, O = memory.stage_state_gib(g.dense, g.expert, g.layers, g.pp, dp_all[g.rows], ep_all[g.rows],
                                         zero >= 1, zero >= 3, per_param, zero >= 2)
        # activations depend on the row's shape alone: each distinct shape's peaks are timed once
        ks, kinv = np.unique(k, return_inverse=True)
        act = memory.chunk_activation_bytes(g.layers, sh.saved_layer[ks], sh.saved_emb[ks], sh.saved_head[ks])
        A = np.zeros((len(g.rows), g.pp))
        code = np.array([SCHEDULE_CODE[x] for x in sched[g.rows]]) * (1 << 32) + m_all[g.rows]
        keys, which = np.unique(code, return_inverse=True)
        for key_i, key in enumerate(keys.tolist()):
            idx = np.flatnonzero(which == key_i)
            sc, m = SCHEDULES_BY_CODE[key >> 32], key & ((1 << 32) - 1)
            held = pr.memo(("held", sc, g.pp, int(m), g.v),
                           lambda: memory.stacked_held(program_counts(sc, g.pp, int(m), g.v)))
            used, back = np.unique(kinv[idx], return_inverse=True)
            A[idx] = memory.stage_peaks(held, act[used].reshape(used.size, g.v, g.pp))[back]
        A = (A + sh.working[k, None]) / GIB
        cap, reserve = cap_all[g.rows], reserve_all[g.rows]
        hbm = hbm_totals(W, G, O, A, reserve[:, None], cap[:, None])
        worst = hbm.worst
        pick = np.arange(len(g.rows))
        out["hbm_peak_gib"][g.rows] = hbm.total.max(axis=1)
        out["hbm_capacity_gib"][g.rows] = cap
        out["worst_stage"][g.rows] = worst
        for name, arr in (("weights_gib", W), ("gradients_gib", G), ("optimizer_gib", O), ("activations_gib", A)):
            out[name][g.rows] = arr[pick, worst]
        out["reserve_gib"][g.rows] = reserve
    return out


def batched_chunks(pr: Evaluator, table: pd.DataFrame, sh: Shapes, srow: np.ndarray, g: PipeRows, js) -> tuple:
    """`chip.chunk_times` of rows js of a group, through its batched functions: forward and backward seconds per
    microbatch [n, chunks], optimizer seconds per stage [n, pp], one layer's attention core forward and backward [n]."""
    idx = g.rows[js]
    k = srow[idx]
    sub = lambda c: table[c].to_numpy()[idx]      # noqa: E731  (a column at these rows)
    cal_of = sub("cal") if "cal" in table.columns else np.zeros(idx.size, dtype=np.int64)
    launch = np.array([c.microbatch_launch_s for c in pr.calibrations])[cal_of]
    # the engine's graph executions, by each row's stack (the table's `stack` column, else the scenario's)
    names, stack_of = np.unique(table["stack"].iloc[idx].to_numpy(dtype=object) if "stack" in table.columns
                                else np.array([pr.scenario.stack], dtype=object), return_inverse=True)
    per = np.array([[stacks.graph_seconds(n, g.pp, c) for c in pr.calibrations] for n in names.tolist()])
    graph = per.reshape(len(names), len(pr.calibrations), 2)[stack_of.reshape(-1), cal_of]
    fwd, bwd, _, _ = chip.chunk_rows(sh.costs, k, g.layers, pr.calibration.stage_ends, launch, (graph[:, 0], graph[:, 1]))
    params = chip.optimizer_params(g.dense[js], g.expert[js], sub("dp"), sub("ep"), sub("zero") >= 1, g.pp)
    opt = chip.optimizer_seconds(sh.ops, sh.variables, sh.rates, k, params, kept="cal" in table.columns)
    return fwd, bwd, opt, sh.costs.attn_fwd[k], sh.costs.attn_bwd[k]


def batched_comm(pr: Evaluator, rows: list, sh: Shapes, srow: np.ndarray, g: PipeRows, js: np.ndarray,
                 slow: bool = False) -> tuple:
    """`replay.comm.step_comm` of rows js of group g: the same pieces (`replay.comm`), each memoized by what it
    depends on, with memoized collectives (`Evaluator.comm_times`) and no records, assembled over the rows
    (`comm.assemble`). Returns the StepComm (every field with a leading row axis; a row that reduces no
    gradients in buckets, ZeRO-3 with `fsdp_schedule: layerwise`, has one empty bucket per chunk) and [n]
    whether each row has buckets.

    `slow`: third, each degraded part's StepComm (`Evaluator.slow`: the comm on its degraded links). Where the
    rows are one layout under several settings (an interval's), in the same pass: the pieces run once over the
    settings of the layout and of every part (a part's clusters differ from the layout's only in their links,
    which the pieces do not read: they place the collectives, each timed on its own part's cluster,
    `Evaluator.cluster`'s `part`), as `step_comm` runs them on each `Cluster.degraded_copy`."""
    idx = g.rows[js]
    one = _one_layout(rows, idx)
    parts = len(pr.degraded) if slow and one else 0
    if slow and not parts:
        c, has = batched_comm(pr, rows, sh, srow, g, js)
        return c, has, [batched_comm(s, rows, sh, srow, g, js)[0] for s in pr.slow()]
    n, chunks, pp = idx.size * (1 + parts), g.layers.size, g.pp
    V = sh.variables
    par = pr.scenario.parallelism
    layerwise = par.fsdp_schedule == "layerwise"
    layer, send = np.empty((5, n)), np.empty((n, chunks))
    buckets, bucket_s, has = np.ones((n, chunks)), np.zeros((n, chunks)), np.ones(n, dtype=bool)
    after, gather, scatter = np.empty((n, pp)), np.empty((n, chunks)), np.empty((n, chunks))
    norm, overlap, mode, last = np.empty(n), np.empty(n, dtype=bool), np.empty(n, dtype=object), None
    serial = np.empty(n, dtype=bool)
    sharing = pr.shared_last_sends
    if sharing:
        last = np.empty((n, chunks))
    for a, i, j, k, ck, times in _units(pr, rows, srow, idx, js, one, parts):
        r = rows[i]
        cl = times.cluster
        cal = cl.calibration
        tp, cp, v, dp, ep = int(r.tp), int(r.cp), int(r.virtual_stages), int(r.dp), int(r.ep)
        sp, zero = bool(r.sequence_parallel), int(r.zero)
        mode[a] = m0 = opslib.recompute_mode(pr.scenario.training, str(r.recompute))   # (the variant's checkpoint_mlp)
        k0 = k if np.ndim(k) == 0 else int(k[0])     # (the settings of one layout share its shape variables)

        def in_layer():
            vk = {name: V[name][k0] for name in ("T", "h", "e", "hkv", "d")}
            return comm.layer_comm(times, cl, tp, cp, pp, ep, sp, vk, pr.scenario.model.moe, m0,
                                   comm.hides_tp(cal, par, tp), sh.costs.hide[k])

        shape_key = sh.keys[k] if np.ndim(k) == 0 else tuple(sh.keys[x] for x in k.tolist())
        for q, x in enumerate(pr.memo(("layer-comm", ck, shape_key, pp if ep > 1 else 0), in_layer)):
            layer[q, a] = x
        send_bytes = comm.activation_send_bytes({name: V[name][k0] for name in ("T", "h", "e")}, tp, sp)

        def sends():
            placed = dataclasses.replace(cl, layout=Layout(tp=tp, cp=cp, pp=pp, dp=dp, virtual_stages=v))
            pairs = pr.memo(("send-pairs", ck, group_ranks(tp, cp), pp, v),
                            lambda: comm.send_pairs(times, placed, chunks))
            return comm.pipeline_sends(times, placed, send_bytes, chunks, pairs=pairs)

        send_groups, send[a] = pr.memo(("sends", ck, group_ranks(tp, cp), pp, v, send_bytes), sends)
        # what dp_comm and last_sends read of the training (precision, master weights, ZeRO stage) varies only
        # with zero
        training = lambda: pr.memo(("training", zero), lambda: layout_scenario(pr.scenario, r).training)  # noqa: E731
        dense, stride = g.dense[j], replica_ranks(tp, cp, pp)
        nb, nb_s, after[a], gather[a], scatter[a] = pr.memo(
            ("dp", ck, tp, cp, pp, v, dp, ep, zero, layerwise),     # layerwise: the variant's (a stack's timing key)
            lambda: comm.dp_comm(times, cl, dense, g.expert[j], g.layers, training(), dp, ep, stride, pp, layerwise))
        if nb.size:
            buckets[a], bucket_s[a] = nb, nb_s
        else:
            has[a] = False
        if sharing:
            last[a] = comm.last_sends(times, cl, send[a], send_bytes, send_groups, dense, training(), dp, stride, nb)
        norm[a] = pr.memo(("norm", ck), lambda: comm.norm_seconds(times, cl))
        overlap[a] = cal.dp_overlap
        serial[a] = comm.serial_exchanges(getattr(r, "stack", pr.scenario.stack), cal)
    if last is None:      # timed alone, the last microbatch's gradient sends are the others' (`last_sends`)
        last = comm.gradient_sends(send)
    out = comm.assemble(g.layers, tuple(layer), send, last, (buckets, bucket_s, after, gather, scatter), norm, mode,
                        overlap, serial=serial)
    if not slow:
        return out, has
    m = idx.size           # the layout's rows, then each part's
    return _rows(out, 0, m), has[:m], [_rows(out, m * p, m * (p + 1)) for p in range(1, parts + 1)]


def _rows(c: StepComm, start: int, stop: int) -> StepComm:
    """The rows start:stop of a StepComm over a row axis (every array field's leading axis)."""
    n = np.shape(c.tp_fwd)[0]
    return dataclasses.replace(c, **{f.name: v[start:stop] for f in dataclasses.fields(c)
                                     if isinstance(v := getattr(c, f.name), np.ndarray) and v.ndim and v.shape[0] == n})


def _one_layout(rows, idx: np.ndarray) -> bool:
    """Whether rows idx are one layout under several calibrations (a table with a `cal` column: an interval's
    settings, `layouts.setting_times`)."""
    return idx.size > 1 and hasattr(rows[int(idx[0])], "cal") and rows.alike(idx.tolist(), "cal")


def _units(pr: Evaluator, rows, srow: np.ndarray, idx: np.ndarray, js: np.ndarray, one: bool, parts: int = 0):
    """What `batched_comm` times its pieces for: (position, row, group row, shape, memo key, CommTimes) of each
    row; when every row is one layout under several calibrations (`one`: `_one_layout`), one unit for all
    (positions, shapes: arrays; `SettingsCommTimes`, its collectives' seconds with a settings axis), so each piece
    runs once; with `parts` degraded parts, over the settings of the layout then of each part (`batched_comm`'s
    `slow`)."""
    if one:
        r = rows[int(idx[0])]       # (every row's but its `cal`: the first's, no other row built)
        cks = [(r.instance, int(r.instances), int(r.lnc), c) for c in rows.column("cal", idx)]
        cks += [ck + (p,) for p in range(parts) for ck in cks]
        yield (np.arange(len(cks)), int(idx[0]), int(js[0]), np.tile(srow[idx].astype(np.int64), 1 + parts),
               tuple(cks), SettingsCommTimes(pr, cks))
        return
    for a, (i, j) in enumerate(zip(idx.tolist(), js.tolist())):
        r = rows[i]
        ck = (r.instance, int(r.instances), int(r.lnc), calibration_index(r))
        yield a, i, j, int(srow[i]), ck, pr.comm_times(ck)


# ----------------------------------------------------------------------------------------------------------
# The step


