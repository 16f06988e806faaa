"""Per-rank, per-stage and per-shard tables: exact values, a dense brute force, the replay's tally, df.uc,
bounded size at UltraCluster scale, and consistency with a real replay (in process, no Ray)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from test_report_frames import make_result, step
from ultracluster.replay.result import BREAKDOWN_KEYS, RunLayout, RunResult, StageComm, StageMemory
from ultracluster.report import build_report
from ultracluster.report.ranks import (
    MAX_GROUP_ROWS, RANK_COLUMNS, SHARD_COLUMNS, SLOWEST_RANKS, STAGE_COLUMNS,
)

REST = 1.25 - 0.1 - 0.05 - 0.05   # measured means: step time - data stall - checkpoint - other
# stage 0's gradient reduction outlasts its last backward by 0.07 of the step on the timeline (steps of 1 s
# and 1.5 s); stage 1 has no reduction slices, so the plan's 0.1 s
DP0 = (0.07 * 1.0 + 0.07 * 1.5) / 2


def test_ranks_table_exact():
    r = build_report(make_result()).ranks
    assert list(r.columns) == list(RANK_COLUMNS) and [str(t) for t in r.dtypes] == list(RANK_COLUMNS.values())
    # pacing ranks of the four (replica, stage) groups: 5 (slow), 8 (all equal: lowest), 20 (slow), 24 (rank 30
    # runs faster than its group, so the lowest of the others); the stragglers 5 and 20 are already in
    assert r["rank"].tolist() == [5, 8, 20, 24]
    row = r.set_index("rank")
    assert row.loc[5, "compute_s"] == 0.75 and row.loc[5, "slowdown"] == 1.5 and row.loc[20, "slowdown"] == 1.2
    assert row.loc[5, "dp_comm_s"] == pytest.approx(DP0) and row.loc[24, "dp_comm_s"] == 0.1
    assert row.loc[5, "exposed_comm_s"] == pytest.approx(0.1 + DP0)
    assert row.loc[24, "exposed_comm_s"] == pytest.approx(0.18)
    assert row.loc[5, "idle_s"] == pytest.approx(REST - 0.75 - 0.1 - DP0)
    assert row.loc[24, "idle_s"] == pytest.approx(REST - 0.45 - 0.18)
    assert row.loc[5, "group_compute_mean_s"] == pytest.approx((7 * 0.5 + 0.75) / 8)
    assert (row.loc[24, "group_compute_min_s"], row.loc[24, "group_compute_max_s"]) == (0.4, 0.45)
    assert row["replica"].tolist() == [0, 0, 1, 1] and row["stage"].tolist() == [0, 1, 0, 1]
    assert row["instance"].tolist() == [0, 0, 1, 1] and row["shard"].tolist() == [0, 0, 1, 1]
    assert row["chip"].tolist() == [5, 8, 20, 24] and row["paces_group"].all()
    assert row["hbm_gib"].tolist() == [20.5, 18.25, 20.5, 18.25] and (row["group_ranks"] == 8).all()
    for _, x in r.iterrows():   # every rank's step adds up (0.2 s: data stall + checkpoint + other)
        assert x["compute_s"] + x["exposed_comm_s"] + x["idle_s"] + 0.2 == pytest.approx(1.25)


def test_stages_and_shards_tables_exact():
    rep = build_report(make_result())
    s = rep.stages.set_index("stage")
    assert list(rep.stages.columns) == list(STAGE_COLUMNS)
    assert s["compute_min_s"].tolist() == [0.5, 0.4] and s["compute_max_s"].tolist() == [0.75, 0.45]
    assert s["compute_mean_s"].tolist() == pytest.approx([(14 * 0.5 + 0.75 + 0.6) / 16, (15 * 0.45 + 0.4) / 16])
    assert s["dp_comm_s"].tolist() == pytest.approx([DP0, 0.1])
    assert s["idle_min_s"].tolist() == pytest.approx([REST - 0.1 - DP0 - 0.75, REST - 0.18 - 0.45])
    assert s["idle_max_s"].tolist() == pytest.approx([REST - 0.1 - DP0 - 0.5, REST - 0.18 - 0.4])
    assert s["layers"].tolist() == [2, 2] and s["ranks"].tolist() == [16, 16]
    assert s["pp_send_s"].tolist() == [0.02, 0.01]
    assert s["hbm_gib"].tolist() == [20.5, 18.25] and s["weights_gib"].tolist() == [8.0, 7.0]
    assert s["critical_steps"].tolist() == [0, 2]       # both measured steps were critical on stage 1
    h = rep.shards.set_index("shard")
    assert list(rep.shards.columns) == list(SHARD_COLUMNS)
    assert h["compute_mean_s"].tolist() == pytest.approx([(7 * 0.5 + 0.75 + 8 * 0.45) / 16,
                                                          (7 * 0.5 + 0.6 + 7 * 0.45 + 0.4) / 16])
    assert h["compute_min_s"].tolist() == [0.45, 0.4] and h["compute_max_s"].tolist() == [0.75, 0.6]
    assert h["tp_comm_mean_s"].tolist() == pytest.approx([0.09, 0.09])
    assert h["dp_comm_mean_s"].tolist() == pytest.approx([(DP0 + 0.1) / 2] * 2)
    assert h["idle_mean_s"].iloc[0] == pytest.approx(REST - 7.85 / 16 - 0.09 - (DP0 + 0.1) / 2)
    assert h["hbm_max_gib"].tolist() == [20.5, 20.5] and h["in_trace"].tolist() == [False, True]
    assert h["first_rank"].tolist() == [0, 16] and h["ranks"].tolist() == [16, 16]


def test_infeasible_and_unreplayed_runs_keep_columns():
    from test_report_frames import make_infeasible

    rep = build_report(make_infeasible())
    assert rep.ranks.empty and list(rep.ranks.columns) == list(RANK_COLUMNS)
    assert rep.stages["hbm_gib"].iloc[0] == 41.2 and rep.stages["compute_max_s"].isna().all()
    assert rep.shards.empty
    r = replace(make_result(), stage_compute_s=[], slow_rank_compute_s={})   # e.g. a tally that saw no step
    rep = build_report(r)
    assert rep.ranks.empty and rep.shards["compute_mean_s"].isna().all() and rep.stages["tp_comm_s"].notna().all()


# --- against a dense brute force ---------------------------------------------------------------------------
def dense_reference(g: dict, base: np.ndarray, slow: dict, rest: float, shards: list[tuple[int, int]], rpi: int):
    size, pp, dp = g["tp"] * g["cp"], g["pp"], g["dp"]
    ranks = np.arange(size * pp * dp)
    stage = (ranks // size) % pp
    comp = base[stage].copy()
    for r, c in slow.items():
        comp[r] = c
    groups = comp.reshape(dp * pp, size)
    pacer = np.arange(dp * pp) * size + groups.argmax(axis=1)
    median = np.array([np.median(comp[stage == s]) for s in range(pp)])
    slowdown = comp / median[stage]
    strag = [r for r in np.argsort(-comp, kind="stable") if r in slow and slowdown[r] > 1 + 1e-12][:SLOWEST_RANKS]
    rows = np.union1d(pacer, np.array(strag, dtype=np.int64))
    shard_stats = [(comp[a * rpi:(b + 1) * rpi].min(), comp[a * rpi:(b + 1) * rpi].mean(),
                    comp[a * rpi:(b + 1) * rpi].max()) for a, b in shards]
    stage_stats = [(comp[stage == s].min(), comp[stage == s].mean(), comp[stage == s].max()) for s in range(pp)]
    return rows, comp, groups, slowdown, shard_stats, stage_stats


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_sparse_tables_match_a_dense_brute_force(data):
    g = {k: data.draw(st.sampled_from(v), label=k) for k, v in
         {"tp": [1, 2, 4], "cp": [1, 2], "pp": [1, 2, 3], "dp": [1, 2, 5]}.items()}
    n = g["tp"] * g["cp"] * g["pp"] * g["dp"]
    instances = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]), label="instances")
    rpi = n // instances
    cuts = sorted(data.draw(st.sets(st.integers(1, instances - 1), max_size=3), label="cuts")) if instances > 1 else []
    bounds = [0, *cuts, instances]
    shards = [(a, b - 1) for a, b in zip(bounds, bounds[1:])]
    base = np.array(data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=g["pp"], max_size=g["pp"])))
    slow = data.draw(st.dictionaries(st.integers(0, n - 1), st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0]), max_size=n))
    result = RunResult(
        scenario={"parallelism": dict(g)}, scenario_name="dense", chips=n, neuron_cores=n, ranks=n, instances=instances,
        instance_type="trn1.32xlarge", actors=len(shards), ray_nodes=1, model_flops_per_step=1.0, peak_flop_per_s=1.0,
        tokens_per_step=1, feasible=True, reason=None, layout=RunLayout(**g),
        memory=[StageMemory(s, 1, 1, 1, 1, 1, 5.0 + s, 16) for s in range(g["pp"])],
        steps=[step(1)], stage_comm=[StageComm(s, 1, 0.1 * s, 0.0, 0.2) for s in range(g["pp"])],
        shard_instances=shards, stage_compute_s=base.tolist(), slow_rank_compute_s=slow)
    rep = build_report(result)
    rows, comp, groups, slowdown, shard_stats, stage_stats = dense_reference(g, base, slow, 0.0, shards, rpi)
    r = rep.ranks
    assert r["rank"].tolist() == rows.tolist()
    assert r["compute_s"].tolist() == comp[rows].tolist()
    assert r["slowdown"].tolist() == pytest.approx(slowdown[rows].tolist())
    gid = rows // (g["tp"] * g["cp"])
    assert r["group_compute_max_s"].tolist() == groups.max(axis=1)[gid].tolist()
    assert r["group_compute_min_s"].tolist() == groups.min(axis=1)[gid].tolist()
    assert r["group_compute_mean_s"].tolist() == pytest.approx(groups.mean(axis=1)[gid].tolist())
    assert r["paces_group"].tolist() == (groups.argmax(axis=1)[gid] + gid * groups.shape[1] == rows).tolist()
    h = rep.shards
    assert h["compute_min_s"].tolist() == [s[0] for s in shard_stats]
    assert h["compute_mean_s"].tolist() == pytest.approx([s[1] for s in shard_stats])
    assert h["compute_max_s"].tolist() == [s[2] for s in shard_stats]
    assert h["ranks"].sum() == n
    s = rep.stages
    assert s["compute_min_s"].tolist() == [x[0] for x in stage_stats]
    assert s["compute_mean_s"].tolist() == pytest.approx([x[1] for x in stage_stats])
    assert s["compute_max_s"].tolist() == [x[2] for x in stage_stats]


def test_rank_table_stays_bounded_at_ultracluster_scale():
    """512k ranks (tp 4, pp 8, dp 16384), 1 % stragglers: at most MAX_GROUP_ROWS + pp + SLOWEST_RANKS rows."""
    g = {"tp": 4, "cp": 1, "pp": 8, "dp": 16384}
    n = 4 * 8 * 16384
    rng = np.random.default_rng(0)
    slow = {int(r): 1.3 for r in rng.choice(n, n // 100, replace=False)}
    result = replace(make_result(), scenario={"parallelism": g}, layout=RunLayout(**g), ranks=n, chips=n // 2,
                     instances=n // 64, shard_instances=[(i, i + 511) for i in range(0, n // 64, 512)],
                     stage_compute_s=[1.0] * 8, slow_rank_compute_s=slow,
                     stage_comm=[StageComm(s, 1, 0.1, 0.0, 0.2) for s in range(8)],
                     memory=[StageMemory(s, 1, 1, 1, 1, 1, 5.0, 48) for s in range(8)])
    rep = build_report(result)
    assert len(rep.ranks) <= MAX_GROUP_ROWS + 8 + SLOWEST_RANKS
    assert rep.ranks["compute_s"].max() == 1.3 and len(rep.shards) == 16 and len(rep.stages) == 8
    crit = rep.ranks[(rep.ranks["replica"] == 1)]    # the critical replica of the last measured step
    assert sorted(crit["stage"].tolist()) == list(range(8))
    assert rep.shards["compute_mean_s"].to_numpy() == pytest.approx(1.0, rel=0.01)


# --- df.uc --------------------------------------------------------------------------------------------------
def test_uc_accessor():
    rep = build_report(make_result())
    m = rep.breakdown.uc.measured()
    assert m["step"].tolist() == [1, 2]
    sh = m.uc.shares()
    assert list(sh.columns) == ["step"] + [k.removesuffix("_s") + "_frac" for k in BREAKDOWN_KEYS]
    assert sh.drop(columns="step").sum(axis=1).tolist() == pytest.approx([1.0, 1.0])
    assert sh["compute_frac"].tolist() == pytest.approx([0.6, 0.7 / 1.5])
    assert m.uc.comm_s.tolist() == pytest.approx([0.25, 0.35])
    assert rep.ranks.uc.comm_s.tolist() == rep.ranks["exposed_comm_s"].tolist()
    ms = rep.steps.uc.to_ms()
    assert ms["step_time_ms"].tolist() == [3000.0, 1000.0, 1500.0] and "step_time_s" not in ms.columns
    assert ms["payload_bytes"].tolist() == [1000, 1001, 1002]
    assert rep.ranks.uc.stragglers(1.1)["rank"].tolist() == [5, 20]
    busy = rep.ranks.set_index("rank").uc.busy_frac()
    assert busy.loc[5] == pytest.approx(0.75 / 1.05)
    assert rep.stages.uc.busy_frac().tolist() == pytest.approx([0.75 / 1.05, 0.45 / 1.05])
    with pytest.raises(AttributeError, match="df.uc needs the column"):
        rep.memory.uc.shares()
    allwarm = rep.breakdown[rep.breakdown["warmup"]]
    assert allwarm.uc.measured()["step"].tolist() == [0]


# --- a real replay (in process) -----------------------------------------------------------------------------
def test_a_replay_adds_up_per_rank(scenarios_dir):
    from ultracluster import load_scenario
    from ultracluster.shards.local import local_shards
    from ultracluster.runner import run

    sc = load_scenario(scenarios_dir / "smoke.yaml", ["training.steps=2", "faults.jitter=0"])
    rep = run(sc, shards_factory=local_shards)
    s, r = rep.summary, rep.ranks
    last = rep.steps.iloc[-1]
    crit = r[(r["replica"] == last["critical_replica"]) & (r["stage"] == last["critical_stage"])].iloc[0]
    # no stragglers: the critical group's rank is the breakdown's critical path
    assert crit["compute_s"] == pytest.approx(s["compute_s"], rel=1e-9)
    assert crit["exposed_comm_s"] == pytest.approx(s["tp_comm_s"] + s["dp_comm_s"], rel=1e-9)
    assert crit["idle_s"] == pytest.approx(s["bubble_s"] + s["pp_comm_s"], rel=1e-9, abs=1e-12)
    fixed = s["data_stall_s"] + s["checkpoint_s"] + s["other_s"]
    total = r["compute_s"] + r["exposed_comm_s"] + r["idle_s"] + fixed
    assert total.to_numpy() == pytest.approx(s["step_time_s"], rel=1e-12)
    assert (r["idle_s"] >= -1e-12).all()
    assert len(r) == sc.parallelism.dp * sc.parallelism.pp and not r["slowdown"].ne(1.0).any()
    assert rep.stages["tp_comm_s"].iloc[0] == pytest.approx(s["tp_comm_s"], rel=1e-9)
    assert rep.shards["ranks"].sum() == s["ranks"] and rep.shards["in_trace"].any()
    # stragglers: each one listed with its slowdown, and every step still adds up
    slow = run(load_scenario(scenarios_dir / "smoke.yaml", ["training.steps=1", "faults.stragglers.fraction=0.05",
                                                            "faults.stragglers.slowdown=1.5"]),   # jitter on
               shards_factory=local_shards)
    strag = slow.ranks[slow.ranks["slowdown"] > 1]
    assert len(strag) == round(0.05 * s["ranks"]) and strag["slowdown"].to_numpy() == pytest.approx(1.5)
    assert (slow.ranks["idle_s"] >= -1e-12).all()
    fixed = sum(slow.summary[k] for k in ("data_stall_s", "checkpoint_s", "other_s"))
    assert (slow.ranks["compute_s"] + slow.ranks["exposed_comm_s"] + slow.ranks["idle_s"] + fixed).to_numpy() \
        == pytest.approx(slow.summary["step_time_s"], rel=1e-12)
    assert math.isclose(slow.stages["compute_max_s"].max(), strag["compute_s"].max())
    pd.testing.assert_frame_equal(slow.ranks, run(load_scenario(scenarios_dir / "smoke.yaml", [
        "training.steps=1", "faults.stragglers.fraction=0.05", "faults.stragglers.slowdown=1.5",
        "emulation.instances_per_actor=2"]), shards_factory=local_shards).ranks.assign(shard=slow.ranks["shard"]))
