"""`ultracluster plan` end to end on a real local Ray (the chunks as Ray tasks, the top layouts replayed with
`run`): the plan directory's files and fields (plan.csv the rows to act on, the full table in Parquet), the
replays within 1 % of the fast path, top-1.yaml runs as it is and with another instance count, days and total
cost on the terminal, bad flags exit 2 naming the flag, an earlier plan is never replaced silently, a space where
nothing fits exits 3 naming the closest layout."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from ultracluster import load_scenario
from ultracluster.cli import main
from ultracluster.plan.output import read_full_table

PLAN_JSON_KEYS = {"scenario", "layouts_evaluated", "feasible", "wall_s", "layouts_per_s", "ray_nodes",
                  "best_tokens_per_s", "best_usd_per_million_tokens", "replayed", "fast_path", "best_per_type",
                  "prices", "hbm_headroom", "folded", "full_table", "rank_by", "scenario_layout", "intervals_timed",
                  "intervals_priced",
                  "best_per_stack", "stacks_without_a_layout", "mfu_best_published", "budget", "goodput_source"}
CSV_COLUMNS = {"layout", "instance", "instances", "tp", "pp", "cp", "ep", "dp", "micro_batch", "recompute",
               "pp_schedule", "virtual_stages", "zero", "feasible", "reason", "step_time_s", "tokens_per_s", "mfu",
               "hbm_peak_gib", "hbm_capacity_gib", "usd_per_million_tokens", "time_to_train_days", "total_cost_usd",
               "rank", "best_of_type", "pareto", "scenario_layout", "equivalent", "same_as", "extrapolated",
               "mfu_implausible", "step_time_low_s", "step_time_high_s", "rank_value", "vs_scenario", "vs_scenario_pct",
               "stack", "best_of_stack", "mfu_best_published", "goodput", "vs_scenario_on"}


@pytest.fixture(scope="module")
def planned(ray_session, scenarios_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "smoke"
    rc = main(["plan", str(scenarios_dir / "smoke.yaml"), "--top", "2", "--tokens", "1e12", "--out", str(out),
               "--keep-runs", "--quiet"])
    return rc, out


def test_plan_directory(planned):
    rc, out = planned
    assert rc == 0
    s = json.loads((out / "plan.json").read_text())
    assert PLAN_JSON_KEYS <= set(s)
    assert s["full_table"] == "plan-full.parquet" and (out / "plan-full.parquet").exists()
    table = read_full_table(out)
    assert CSV_COLUMNS <= set(table.columns)
    assert s["layouts_evaluated"] == len(table) > 1000
    assert s["feasible"] == int(table["feasible"].sum())
    assert s["layouts_per_s"] == pytest.approx(s["layouts_evaluated"] / s["wall_s"])
    assert s["ray_nodes"] == 1                      # the test's Ray: the chunks ran as Ray tasks
    ranking = table[table["feasible"] & (table["same_as"] == "")]
    best = s["best_tokens_per_s"]
    assert best["tokens_per_s"] == pytest.approx(ranking["tokens_per_s"].max())
    assert best["label"] == ranking.loc[ranking["tokens_per_s"].idxmax(), "layout"]
    assert s["best_usd_per_million_tokens"]["usd_per_million_tokens"] == pytest.approx(
        ranking["usd_per_million_tokens"].min())
    # days to train the budget (--tokens) at each row's goodput (smoke: no failures, no checkpoints: 1) for every row
    # that can rank
    assert s["budget"]["source"] == "--tokens" and s["budget"]["tokens"] == 1e12
    assert table.loc[ranking.index, "goodput"].eq(1.0).all()
    assert table["goodput"].isna().sum() == len(table) - len(ranking)
    ttt = table.loc[ranking.index, "time_to_train_days"]
    assert ttt.to_numpy() == pytest.approx((1e12 / ranking["tokens_per_s"] / 86400).to_numpy())
    assert table["total_cost_usd"].dropna().to_numpy() == pytest.approx(
        (table["price_per_hour_usd"] * 24 * table["time_to_train_days"]).dropna().to_numpy())
    assert [r["rank"] for r in s["replayed"]] == [1, 2]
    for r in s["replayed"]:
        assert r["replay_step_time_s"] == pytest.approx(r["fast_step_time_s"], rel=0.01)
        for end in ("low", "high"):       # the plan's interval is the run's around its own point (1e-5: docs/plan.md)
            assert r[f"step_time_{end}_s"] / r["replay_step_time_s"] == pytest.approx(
                r[f"fast_step_time_{end}_s"] / r["fast_step_time_s"], rel=1e-5)
        assert (out / "runs" / f"top-{r['rank']}" / "summary.json").exists()
    assert (out / "plan.html").read_text().count("<svg") >= 2
    # plan.csv: the rows to act on, each saying why it is there
    small = pd.read_csv(out / "plan.csv")
    assert 3 <= len(small) < 100 and set(small.columns) == set(table.columns)
    assert sorted(small["rank"].dropna().astype(int)) == [1, 2]
    assert small["scenario_layout"].sum() == 1 and small["best_of_type"].sum() == 1
    why = small["rank"].notna() | small["best_of_type"] | small["best_of_stack"] | small["pareto"] | \
        small["scenario_layout"]
    assert why.all()
    assert set(small["layout"]) == set(table.loc[table["rank"].notna() | table["best_of_type"] | table["best_of_stack"]
                                                 | table["pareto"] | table["scenario_layout"], "layout"])
    assert set(small["stack"]) == {"neuronx-distributed"} and s["search"]["stacks"] == ["neuronx-distributed"]


def test_top_yaml_runs_as_it_is_and_with_another_count(planned, tmp_path):
    rc, out = planned
    doc = yaml.safe_load((out / "top-1.yaml").read_text())
    s = json.loads((out / "plan.json").read_text())
    lay = s["best_tokens_per_s"]["layout"]
    assert doc["parallelism"]["tp"] == lay["tp"] and "dp" not in doc["parallelism"]     # dp derived
    assert doc["name"] == f"smoke-{lay['instance']}-{lay['instances']}-top-1"
    assert main(["run", str(out / "top-1.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["step_time_s"] == pytest.approx(s["replayed"][0]["replay_step_time_s"], rel=1e-12)
    half = load_scenario(out / "top-1.yaml", [f"cluster.instances={lay['instances'] // 2}"])   # dp derived again
    assert (half.parallelism.tp, half.parallelism.dp) == (lay["tp"], lay["dp"] // 2)


def test_terminal_shows_days_and_total_cost(scenarios_dir, tmp_path, capsys):
    out = tmp_path / "ttt"
    assert main(["plan", str(scenarios_dir / "smoke.yaml"), "--objective", "time_to_train", "--tokens", "2e12",
                 "--top", "1", "--tp", "8", "--pp", "2", "--price-per-hour", "30", "--out", str(out), "--wide"]) == 0
    text = capsys.readouterr().out
    s = json.loads((out / "plan.json").read_text())
    assert s["prices"] == {"trn1.32xlarge": {"usd_per_hour": 30.0, "source": "--price-per-hour"}}
    top = s["best_per_type"][0]
    assert top["price_per_hour_usd"] == 60.0 and "60.00" in text        # 2 instances at $30 (over the catalog's)
    head = next(line for line in text.splitlines() if line.startswith("#  layout"))
    assert "days" in head and "total $" in head
    assert f"{top['time_to_train_days']:,.1f}" in text and f"{top['total_cost_usd']:,.0f}" in text
    assert top["total_cost_usd"] == pytest.approx(2e12 / 1e6 * top["usd_per_million_tokens"], rel=1e-9)
    assert "best of each instance type" in text


def test_an_earlier_plan_is_not_replaced_silently(scenarios_dir, tmp_path, capsys):
    out = tmp_path / "p"
    flags = [str(scenarios_dir / "smoke.yaml"), "--top", "1", "--tp", "8", "--pp", "2", "--max-cp", "1",
             "--out", str(out)]
    assert main(["plan", *flags, "--keep-runs"]) == 0
    first = (out / "plan.json").read_bytes()
    assert (out / "runs" / "top-1" / "summary.json").exists()
    capsys.readouterr()
    assert main(["plan", *flags, "--micro-batches", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: plan directory {out} already holds a plan" in err and "--force" in err and "--out NEWDIR" in err
    assert (out / "plan.json").read_bytes() == first
    assert main(["plan", *flags, "--micro-batches", "1", "--force"]) == 0
    done = capsys.readouterr()
    assert "replacing the earlier plan" in done.err
    s = json.loads((out / "plan.json").read_text())
    assert s["search"]["micro_batches"] == [1]
    # without --keep-runs the replays' figures are in plan.json and the earlier plan's run directories are gone
    assert not (out / "runs").exists() and s["replayed"][0]["run_dir"] is None
    assert s["replayed"][0]["replay_step_time_s"] == pytest.approx(s["replayed"][0]["fast_step_time_s"], rel=0.01)
    assert "ultracluster run <plan dir>/top-N.yaml" in done.out


@pytest.mark.parametrize("flags,flag", [(["--top", "0"], "--top"), (["--instances", "2,two"], "--instances"),
                                        (["--instance-types", "p5.48xlarge"], "--instance-types"),
                                        (["--objective", "time_to_train"], "--tokens"),
                                        (["--tokens", "-5"], "--tokens"), (["--max-usd-per-hour", "0"],
                                                                           "--max-usd-per-hour"),
                                        (["--objective", "usd_per_million_tokens", "--instance-types",
                                          "trn2.48xlarge"], "--objective"),
                                        (["--hbm-headroom", "1"], "--hbm-headroom"),
                                        (["--hbm-headroom", "-0.1"], "--hbm-headroom"),
                                        (["--tp", "8,eight"], "--tp"), (["--pp", "0"], "--pp"),
                                        (["--max-zero", "2"], "--max-zero"), (["--max-cp", "0"], "--max-cp"),
                                        (["--micro-batches", ""], "--micro-batches"),
                                        (["--recompute", "some"], "--recompute"),
                                        (["--schedules", "zigzag"], "--schedules"),
                                        (["--virtual-stages", "1"], "--virtual-stages"),
                                        (["--price-per-hour", "p5.48xlarge=40"], "--price-per-hour"),
                                        (["--price-per-hour", "trn2.48xlarge=-1"], "--price-per-hour")])
def test_bad_flags_exit_2_naming_the_flag(scenarios_dir, capsys, flags, flag, tmp_path):
    assert main(["plan", str(scenarios_dir / "smoke.yaml"), "--out", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert f"error: {flag}:" in err and "Traceback" not in err


@pytest.mark.parametrize("flags", [["--objective", "usd_per_million_tokens"], ["--max-usd-per-hour", "500"]])
def test_cost_over_an_unpriced_type_exits_2_naming_the_key(scenarios_dir, capsys, flags, tmp_path):
    """One priced and one unpriced type: refused, not the unpriced one silently dropped."""
    assert main(["plan", str(scenarios_dir / "smoke.yaml"), "--instance-types", "trn1.32xlarge,trn2.48xlarge",
                 "--out", str(tmp_path / "p"), *flags]) == 2
    err = capsys.readouterr().err
    assert f"error: {flags[0]}:" in err and "trn2.48xlarge" in err and "cluster.price_per_hour_usd" in err
    assert "--price-per-hour" in err and not (tmp_path / "p").exists()


def test_nothing_fits_exits_3_with_the_closest(tmp_path, capsys):
    scenario = tmp_path / "big.yaml"
    scenario.write_text(yaml.safe_dump({"name": "big", "model": {"preset": "llama3.1-70b"},
                                        "training": {"seq_len": 8192, "global_batch": 64},
                                        "parallelism": {"tp": 32}, "cluster": {"instance": "trn1.32xlarge",
                                                                               "instances": 1}}))
    assert main(["plan", str(scenario), "--out", str(tmp_path / "plan")]) == 3
    err = capsys.readouterr().err
    assert "infeasible: no layout fits in HBM; closest:" in err and "does not fit in HBM" in err
    s = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert s["feasible"] == 0 and s["closest"]["hbm_peak_gib"] > s["closest"]["hbm_capacity_gib"]
    assert s["replayed"] == [] and not list((tmp_path / "plan").glob("top-*.yaml"))


def test_the_terminal_fits_100_columns_and_leads_with_the_decision(scenarios_dir, tmp_path, capsys):
    """Without --wide every line of the plan fits 100 columns; the decision view shows the best of each count with
    its days and dollars, and the verdict between the counts."""
    out = tmp_path / "narrow"
    assert main(["plan", str(scenarios_dir / "smoke.yaml"), "--objective", "time_to_train", "--tokens", "2e12",
                 "--top", "1", "--tp", "8", "--pp", "2", "--instances", "2,4", "--price-per-hour", "30",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100
    s = json.loads((out / "plan.json").read_text())
    rows = s["decision"]["rows"]
    assert [r["instances"] for r in rows] == [2, 4] and all(r["fits"] for r in rows)
    assert "decision: the best layout of each instance type, count and stack" in text
    for r in rows:
        assert f"{r['time_to_train_days']:,.1f} ({r['time_to_train_low_days']:,.1f}-" in text
        # the dollars carry the step's interval as the days do, the slow end dearer
        assert r["total_cost_low_usd"] < r["total_cost_usd"] < r["total_cost_high_usd"]
        assert f"{r['total_cost_usd'] / 1e6:,.2f} ({r['total_cost_low_usd'] / 1e6:,.2f}-" in text
    # plan.csv holds the same bands for every row that has an interval: days and dollars x (step end / step)
    t = pd.read_csv(out / "plan.csv")
    t = t[t["step_time_low_s"].notna()]
    assert t["total_cost_low_usd"].notna().sum() >= 2
    for end in ("low", "high"):
        scale = t[f"step_time_{end}_s"] / t["step_time_s"]
        assert np.allclose(t[f"time_to_train_{end}_days"], t["time_to_train_days"] * scale, rtol=1e-9, equal_nan=True)
        assert np.allclose(t[f"total_cost_{end}_usd"], t["total_cost_usd"] * scale, rtol=1e-9, equal_nan=True)
    v = s["decision"]["verdicts"][0]
    assert v["kind"] == "instances" and v["verdict"].startswith(f"{rows[1]['chips']:,} vs {rows[0]['chips']:,} chips")
    faster = 100 * (rows[0]["time_to_train_days"] / rows[1]["time_to_train_days"] - 1)
    assert f"{abs(faster):.1f} % {'faster' if faster >= 0 else 'slower'}" in v["verdict"]
    assert v["verdict"] in " ".join(text.split())
