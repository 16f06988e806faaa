"""The ranking is the one docs/plan.md states ("The ranking", between its rule markers): read there, and held on a
real plan (the newcomer's 70B job on trn1, searched in this process, no replays) by the plan.csv it writes: `rank`
orders the eligible rows by `rank_value` alone, and `mfu_implausible` (a flag, its threshold beside it) moves no
row. And each row against the scenario's own layout, on the objective's measure."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ultracluster import load_scenario
from ultracluster.layouts.space import SearchSpace
from ultracluster.plan import format_plan, plan
from ultracluster.plan.compare import MEASURES
from ultracluster.uncertainty import mfu_best

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plan.md"
SEVENTY_B = "llama3.1-70b-trn1-32.yaml"
SEVEN_B = {"name": "plan-7b-rank", "stack": "neuronx-distributed", "model": {"preset": "llama2-7b"},
           "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
           "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2}}


def rule() -> str:
    text = DOCS.read_text()
    found = re.search(r"<!-- rule: ranking -->\n(.*?)<!-- /rule -->", text, re.S)
    assert found, "docs/plan.md states the ranking between <!-- rule: ranking --> and <!-- /rule -->"
    return " ".join(found.group(1).split())


def test_the_docs_state_the_rule_this_file_holds_a_plan_to():
    r = rule()
    for words in ("`rank` orders the eligible rows by `rank_value` alone, best first (ties in table order)",
                  "`rank_value` is the objective at the `--rank-by` end of the row's 80 % interval",
                  "fits with the headroom, is not folded into an equivalent row (`same_as`), has a value at that end "
                  "and is within `--max-usd-per-hour`", "`mfu_implausible` moves no row"):
        assert words in r, words


@pytest.fixture(scope="module")
def plans(scenarios_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("rank")
    speed = plan(scenarios_dir / SEVENTY_B, replay=False, top=6, out=out / "speed")
    cost = plan(scenarios_dir / SEVENTY_B, SearchSpace(instance_counts=(16, 32)), objective="usd_per_million_tokens",
                max_usd_per_hour=600.0, replay=False, top=6, out=out / "cost")
    return {"speed": (speed, out / "speed"), "cost": (cost, out / "cost")}


@pytest.mark.parametrize("which", ["speed", "cost"])
def test_a_real_plan_ranks_by_the_docs_rule(plans, which):
    result, out = plans[which]
    s = result.summary
    t = pd.read_csv(out / "plan.csv")
    full = result.table
    larger = s["objective"] == "tokens_per_s"
    # eligible: fits with the headroom, not folded, a value at the ranking end, within the budget
    elig = full["feasible"] & (full["same_as"] == "") & np.isfinite(full["rank_value"].astype(float))
    if s["max_usd_per_hour"] is not None:
        elig &= full["price_per_hour_usd"] <= s["max_usd_per_hour"]
    # plan.json's interval for a replayed row is its run's: none here (no replays), so the plan priced every one
    expect = full[elig].sort_values("rank_value", ascending=not larger, kind="stable").head(s["top"])
    ranked = t[t["rank"].notna()].sort_values("rank")
    assert ranked["layout"].tolist() == expect["layout"].tolist()
    assert ranked["rank"].tolist() == list(range(1, len(ranked) + 1))
    values = ranked["rank_value"].to_numpy()
    assert (np.diff(values) <= 0).all() if larger else (np.diff(values) >= 0).all()
    # rank_value is the objective at the slow end
    col = {"tokens_per_s": "tokens_per_s", "usd_per_million_tokens": "usd_per_million_tokens"}[s["objective"]]
    top = full[full["rank"].notna()].sort_values("rank")
    ratio = top["step_time_high_s"] / top["step_time_s"]
    np.testing.assert_allclose(top["rank_value"], top[col] / ratio if larger else top[col] * ratio, rtol=1e-12)
    # the flag moves nothing, and its threshold is beside it in plan.csv, plan.json and on the terminal
    best = mfu_best("trainium")
    np.testing.assert_allclose(t["mfu_best_published"], best, rtol=1e-9)
    assert s["mfu_best_published"]["trn1.32xlarge"] == best
    assert (t["mfu_implausible"] == (t["mfu"] > best)).all()
    assert f"trn1.32xlarge {100 * best:.1f} %" in format_plan(result)
    if s["max_usd_per_hour"] is not None:
        assert (ranked["price_per_hour_usd"] <= s["max_usd_per_hour"]).all()
        fits = full["feasible"] & (full["same_as"] == "")
        assert (full.loc[fits, "price_per_hour_usd"] > s["max_usd_per_hour"]).any()      # the budget left some out


def test_a_flagged_row_is_not_moved_below_a_slower_plausible_one():
    """The case the demotion got wrong: a row above the best published MFU whose slow end beats a plausible row's
    ranks above it (Llama-2-7B on two trn1.32xlarge with NxD, every eligible row's interval priced)."""
    t = plan(load_scenario(SEVEN_B), SearchSpace(micro_batches=(1, 2), virtual_stages=(2,)), replay=False, top=4,
             rank_by="high").table
    eligible = t[t["feasible"] & (t["same_as"] == "") & t["rank_value"].notna()]
    flagged, plain = eligible[eligible["mfu_implausible"]], eligible[~eligible["mfu_implausible"]]
    assert len(flagged) and len(plain)
    f, p = flagged["rank_value"].idxmax(), plain["rank_value"].idxmax()
    ranks = eligible.sort_values("rank_value", ascending=False, kind="stable").index.tolist()
    assert (ranks.index(f) < ranks.index(p)) == (t.loc[f, "rank_value"] > t.loc[p, "rank_value"])
    assert t.loc[t["rank"] == 1, "layout"].item() == t.loc[ranks[0], "layout"]


def test_rows_on_other_clusters_are_compared_on_cost_and_a_finding_needs_apart_intervals(plans):
    result, _ = plans["cost"]
    t, own = result.table, result.table[result.table["scenario_layout"]].iloc[0]
    shown = t[t["vs_scenario"] != ""]
    assert (shown["instances"] != own["instances"]).any() and (shown["instances"] == own["instances"]).any()
    assert set(shown["vs_scenario_on"]) == {"$ per M tokens"}
    for _, r in shown[~shown["scenario_layout"]].iterrows():
        cost, o = r["usd_per_million_tokens"], own["usd_per_million_tokens"]
        assert r["vs_scenario_pct"] == pytest.approx(100 * (1 - cost / o))
        lo = cost * r["step_time_low_s"] / r["step_time_s"]
        hi = cost * r["step_time_high_s"] / r["step_time_s"]
        olo = o * own["step_time_low_s"] / own["step_time_s"]
        ohi = o * own["step_time_high_s"] / own["step_time_s"]
        apart = hi < olo or lo > ohi
        assert r["vs_scenario"].endswith("(intervals apart: a finding)" if apart else
                                         "(intervals overlap: not a finding)"), r["vs_scenario"]
        words = MEASURES["$ per M tokens"][2]
        assert any(w in r["vs_scenario"] for w in words) or r["vs_scenario"].startswith("as good")
        if r["instances"] != own["instances"]:
            assert f"{r['instances']} vs {own['instances']} x trn1.32xlarge" in r["vs_scenario"]


def test_without_a_price_another_cluster_is_compared_per_instance(scenarios_dir):
    result = plan(scenarios_dir / SEVENTY_B, SearchSpace(instance_types=("trn1.32xlarge", "trn2.48xlarge"),
                                                         micro_batches=(1,), max_cp=1), replay=False, top=3)
    t = result.table
    own = t[t["scenario_layout"]].iloc[0]
    trn2 = t[(t["instance"] == "trn2.48xlarge") & (t["vs_scenario"] != "")]
    assert len(trn2) and set(trn2["vs_scenario_on"]) == {"tokens/s per instance"}
    r = trn2.iloc[0]
    assert r["vs_scenario_pct"] == pytest.approx(100 * (r["tokens_per_s"] / own["tokens_per_s"] - 1))
    same = t[(t["instance"] == "trn1.32xlarge") & (t["vs_scenario"] != "") & ~t["scenario_layout"]]
    assert len(same) and set(same["vs_scenario_on"]) == {"tokens/s"}
    assert "no price" in format_plan(result)


def test_labels_of_a_table_are_each_rows_label_with_pieces_shared():
    """`ranking.labels` words each piece once per distinct value of what it reads: every row's text is still its own
    (`label`), where rows share a piece's values and differ in another's (tp alone: the tail's sequence parallelism)."""
    from ultracluster.layouts.ranking import _LABEL_COLUMNS, label, labels

    base = dict(stack="neuronx-distributed", instances=32, instance="trn1.32xlarge", lnc=1, tp=8, pp=4, dp=8, cp=1,
                ep=1, pp_schedule="interleaved", virtual_stages=2, micro_batch=1, recompute="selective", zero=1,
                sequence_parallel=False)
    rows = [base, {**base, "tp": 1}, {**base, "pp": 1}, {**base, "cp": 2}, {**base, "pp_schedule": "1f1b"},
            {**base, "instance": "trn2.48xlarge", "lnc": 2}, {**base, "stack": "custom"}, {**base, "zero": 3},
            {**base, "sequence_parallel": True}, {**base, "tp": 1, "sequence_parallel": True}, base]
    t = pd.DataFrame(rows)[list(_LABEL_COLUMNS)]
    got = labels(t)
    assert got == [label(r) for r in rows]
    assert len(set(got)) == len(rows) - 2          # the first row again; tp1 with or without sp: the same text
    assert labels(t.drop(columns="stack")) == [label({k: v for k, v in r.items() if k != "stack"}) for r in rows]
