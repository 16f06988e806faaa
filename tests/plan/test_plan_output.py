"""What a plan says beyond the fast path's numbers (searched in this process, no replays): prices for every
instance type, the HBM headroom and its reasons to 4 decimals, equivalent settings folded into one row, the
Pareto front, the best layout of each type, the search limits, and plan.html plotting every type."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from ultracluster import load_scenario
from ultracluster.errors import OutDirError, ScenarioError
from ultracluster.plan import plan, search_space
from ultracluster.layouts.steps import LAYOUT_COLUMNS
from ultracluster.plan.output import read_full_table
from ultracluster.layouts.space import SearchSpace

SEVEN_B = {"name": "plan-7b", "model": {"preset": "llama2-7b"},
           "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
           "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2}}
SMALL = SearchSpace(micro_batches=(1, 2), virtual_stages=(2,))
TWO_TYPES = SearchSpace(instance_types=("trn1.32xlarge", "trn2.48xlarge"), micro_batches=(1, 2),
                        virtual_stages=(2,), max_cp=2)


@pytest.fixture(scope="module")
def seven_b():
    return load_scenario(SEVEN_B)


@pytest.fixture(scope="module")
def headroom_pair(seven_b):
    """The same search with no headroom and with the default 5 %."""
    return plan(seven_b, SMALL, replay=False, hbm_headroom=0.0), plan(seven_b, SMALL, replay=False)


def ranking(t: pd.DataFrame) -> pd.DataFrame:
    return t[t["feasible"] & (t["same_as"] == "")]


def test_headroom_makes_layouts_over_95_percent_infeasible_and_moves_no_step_time(headroom_pair):
    none, default = headroom_pair
    a, b = none.table, default.table
    assert default.summary["hbm_headroom"] == 0.05
    window = a["feasible"] & (a["hbm_fraction"] > 0.95)
    assert window.sum() > 10                                   # the 7B search has layouts at 95-100 % of HBM
    assert not b.loc[window, "feasible"].any() and (b.loc[~window, "feasible"] == a.loc[~window, "feasible"]).all()
    assert b["hbm_fraction"][b["feasible"]].max() <= 0.95
    np.testing.assert_array_equal(a["step_time_s"].to_numpy(), b["step_time_s"].to_numpy())   # NaN where unpriced
    for r in b[window].head(5).itertuples():
        need = r.weights_gib + r.gradients_gib + r.optimizer_gib + r.activations_gib + r.reserve_gib
        assert r.reason == (f"over the HBM headroom: a rank of pipeline stage {r.worst_stage} needs {need:.4f} GiB of "
                            f"its {r.hbm_capacity_gib:.4f} GiB, more than the 95 % ({0.95 * r.hbm_capacity_gib:.4f} "
                            f"GiB) that --hbm-headroom 0.05 leaves")
    over = b[~b["feasible"] & ~window].iloc[0]
    assert over["reason"].startswith(f"does not fit in HBM: a rank of pipeline stage {over['worst_stage']} needs "
                                     f"{over['hbm_peak_gib']:.4f} GiB of its 16.0000 GiB")


def test_equivalent_settings_are_folded_into_one_row(headroom_pair):
    _, result = headroom_pair
    t = result.table
    folded = t[t["same_as"] != ""]
    assert len(folded) == result.summary["folded"] > 10
    by_label = t.set_index("layout")
    for r in folded.itertuples():
        kept = by_label.loc[r.same_as]
        assert kept["feasible"] and kept["same_as"] == "" and kept["equivalent"]
        differ = {c for c in LAYOUT_COLUMNS if getattr(r, c) != kept[c] and c != "virtual_stages"}
        assert differ and differ <= {"recompute", "zero", "pp_schedule"}, differ
        named = {"recompute": f"recompute {r.recompute}", "zero": f"zero {r.zero}",
                 "pp_schedule": f"schedule {r.pp_schedule}" + (f" {r.virtual_stages}" if r.pp_schedule ==
                                                               "interleaved" else "")}
        assert " + ".join(named[c] for c in named if c in differ) in kept["equivalent"].split("; ")
        assert r.step_time_s == pytest.approx(kept["step_time_s"], rel=1e-9)
        assert r.hbm_peak_gib == pytest.approx(kept["hbm_peak_gib"], rel=1e-9)
    # no two ranking rows left that differ only in recompute at the same step time and HBM
    rows = ranking(t)
    keys = [c for c in LAYOUT_COLUMNS if c != "recompute"]
    dup = rows.assign(s=rows["step_time_s"].round(12), h=rows["hbm_peak_gib"].round(12)).duplicated(keys + ["s", "h"])
    assert not dup.any()
    labels = [r["label"] for r in result.top]
    assert not set(labels) & set(folded["layout"])


def test_pareto_rows_are_not_beaten_and_the_best_of_each_type(seven_b):
    result = plan(seven_b, TWO_TYPES, replay=False, prices={"trn2.48xlarge": 40.0}, rank_by="point")
    t = result.table
    rows = ranking(t)
    assert set(rows["instance"]) == {"trn1.32xlarge", "trn2.48xlarge"}
    assert rows["usd_per_million_tokens"].notna().all()
    speed, cost = rows["tokens_per_s"].to_numpy(), rows["usd_per_million_tokens"].to_numpy()
    for i in np.flatnonzero(rows["pareto"].to_numpy()):
        same = rows["instance"].to_numpy() == rows["instance"].iloc[i]
        beaten = same & (speed > speed[i]) & (cost <= cost[i])
        beaten_all = (speed > speed[i]) & (cost < cost[i])
        assert not beaten.any() or not beaten_all.any()
    for inst, group in rows.groupby("instance"):
        fastest = group.loc[group["tokens_per_s"].idxmax()]
        assert fastest["pareto"]
        best = [r for r in result.summary["best_per_type"] if r["instance"] == inst]
        assert len(best) == 1 and best[0]["label"] == fastest["layout"]
    assert [r["instance"] for r in result.summary["best_per_type"]] == ["trn1.32xlarge", "trn2.48xlarge"]
    assert result.summary["prices"]["trn2.48xlarge"] == {"usd_per_hour": 40.0, "source": "--price-per-hour"}
    two = t[t["instance"] == "trn2.48xlarge"]
    assert (two["cluster_usd_per_hour"] == 40.0 * two["instances"]).all()          # the whole cluster's dollars
    assert (two["price_per_hour_usd"] == two["cluster_usd_per_hour"]).all()       # its old name, for one release


def test_cost_ranking_needs_every_type_priced(seven_b, tmp_path):
    for kw in ({"objective": "usd_per_million_tokens"}, {"max_usd_per_hour": 100.0}):
        with pytest.raises(ScenarioError) as err:
            plan(seven_b, TWO_TYPES, replay=False, **kw)
        text = str(err.value.problems[0])
        assert "trn2.48xlarge" in text and "cluster.price_per_hour_usd" in text
    priced = load_scenario({**SEVEN_B, "cluster": {"instance": "trn2.48xlarge", "instances": 1,
                                                   "price_per_hour_usd": 33.0}})
    result = plan(priced, SMALL, objective="usd_per_million_tokens", top=2, replay=False, out=tmp_path / "p",
                  rank_by="point")
    assert result.summary["prices"]["trn2.48xlarge"]["source"] == "cluster.price_per_hour_usd"
    best = result.summary["best_usd_per_million_tokens"]
    assert best["usd_per_million_tokens"] == pytest.approx(ranking(result.table)["usd_per_million_tokens"].min())
    doc = yaml.safe_load((tmp_path / "p" / "top-1.yaml").read_text())
    assert doc["cluster"]["price_per_hour_usd"] == 33.0 and doc["name"].startswith("llama2-7b-trn2.48xlarge-1-top-1")


def test_search_limits_as_flags(seven_b):
    space = search_space(tp="4,8", pp="1,2", max_zero="1", max_cp="1", micro_batches="1", recompute="full",
                         schedules="1f1b", virtual_stages="2")
    assert (space.tp, space.pp, space.zero, space.max_cp, space.micro_batches, space.recompute) == \
        ((4, 8), (1, 2), (0, 1), 1, (1,), ("full",))
    t = plan(seven_b, space, replay=False).table
    own = t["scenario_layout"]
    assert own.iloc[0] and own.sum() == 1                      # the scenario's own layout is always a candidate
    rest = t[~own]
    assert set(rest["tp"]) <= {4, 8} and set(rest["pp"]) <= {1, 2} and set(rest["zero"]) <= {0, 1}
    assert set(rest["cp"]) == {1} and set(rest["recompute"]) == {"full"} and set(rest["micro_batch"]) == {1}
    with pytest.raises(ScenarioError) as err:
        search_space(tp="x", max_zero="2", recompute="all")
    assert [p.path for p in err.value.problems] == ["--tp", "--recompute", "--max-zero"]


def test_plan_directory_is_small_and_never_silently_replaced(seven_b, tmp_path):
    out = tmp_path / "plan"
    result = plan(seven_b, TWO_TYPES, top=2, replay=False, out=out)
    full = read_full_table(out)
    assert len(full) == result.summary["layouts_evaluated"] and (out / "plan-full.parquet").exists()
    pd.testing.assert_frame_equal(full, result.table.reset_index(drop=True), check_dtype=False)
    small = pd.read_csv(out / "plan.csv")
    assert len(small) < len(full) / 20
    with pytest.raises(OutDirError) as err:
        plan(seven_b, TWO_TYPES, top=1, replay=False, out=out)
    assert "--force" in str(err.value) and "--out NEWDIR" in str(err.value)
    assert (out / "top-2.yaml").exists()
    plan(seven_b, TWO_TYPES, top=1, replay=False, out=out, force=True)
    assert not (out / "top-2.yaml").exists() and (out / "top-1.yaml").exists()


def test_plan_html_plots_every_type_and_names_the_unpriced(seven_b, tmp_path):
    result = plan(seven_b, TWO_TYPES, top=2, replay=False, out=tmp_path / "plan")
    page = (tmp_path / "plan" / "plan.html").read_text()
    types_chart = page[page.index('<svg id="types"'):]
    types_chart = types_chart[:types_chart.index("</svg>")]
    for inst in ("trn1.32xlarge", "trn2.48xlarge"):
        assert f"{result.table['instances'].iloc[0]} x {inst}" in types_chart
    assert "Not on the cost axis: trn2.48xlarge (no public price: set cluster.price_per_hour_usd" in page
    cost_chart = page[page.index('<svg id="pareto"'):]
    assert "trn2.48xlarge" not in cost_chart[:cost_chart.index("</svg>")]
    assert "Best of each instance type" in page


def test_without_pyarrow_the_full_table_is_gzip_csv(seven_b, tmp_path, monkeypatch):
    import ultracluster.plan.command as planner
    monkeypatch.setattr(planner, "full_table_name", lambda: "plan-full.csv.gz")   # what it says without pyarrow
    result = plan(seven_b, SMALL, top=1, replay=False, out=tmp_path / "plan")
    assert result.summary["full_table"] == "plan-full.csv.gz"
    assert (tmp_path / "plan" / "plan-full.csv.gz").exists() and not (tmp_path / "plan" / "plan-full.parquet").exists()
    full = read_full_table(tmp_path / "plan")
    assert len(full) == result.summary["layouts_evaluated"]
    np.testing.assert_allclose(full["step_time_s"].to_numpy(), result.table["step_time_s"].to_numpy(), rtol=1e-9)
