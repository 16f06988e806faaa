"""`ultracluster plan` end to end on a real local Ray (the chunks as Ray tasks, the top layouts replayed with
`run`): the plan directory's files and fields, the replays within 1 % of the fast path, top-1.yaml runs as it is,
bad flags exit 2 naming the flag, a space where nothing fits exits 3 naming the closest layout."""
import json

import pandas as pd
import pytest
import yaml

from ultracluster.cli import main

PLAN_JSON_KEYS = {"scenario", "layouts_evaluated", "feasible", "wall_s", "layouts_per_s", "ray_nodes",
                  "best_tokens_per_s", "best_usd_per_million_tokens", "replayed", "fast_path"}
CSV_COLUMNS = {"layout", "instance", "instances", "tp", "pp", "cp", "ep", "dp", "micro_batch", "recompute",
               "pp_schedule", "virtual_stages", "zero", "feasible", "reason", "step_time_s", "tokens_per_s", "mfu",
               "hbm_peak_gib", "usd_per_million_tokens", "time_to_train_days"}


@pytest.fixture(scope="module")
def planned(ray_session, scenarios_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "smoke"
    rc = main(["plan", str(scenarios_dir / "smoke.yaml"), "--top", "2", "--tokens", "1e12", "--out", str(out),
               "--quiet"])
    return rc, out


def test_plan_directory(planned):
    rc, out = planned
    assert rc == 0
    s = json.loads((out / "plan.json").read_text())
    assert PLAN_JSON_KEYS <= set(s)
    table = pd.read_csv(out / "plan.csv")
    assert CSV_COLUMNS <= set(table.columns)
    assert s["layouts_evaluated"] == len(table) > 1000
    assert s["feasible"] == int(table["feasible"].sum())
    assert s["layouts_per_s"] == pytest.approx(s["layouts_evaluated"] / s["wall_s"])
    assert s["ray_nodes"] == 1                      # the test's Ray: the chunks ran as Ray tasks
    best = s["best_tokens_per_s"]
    assert best["tokens_per_s"] == pytest.approx(table["tokens_per_s"].max())
    assert best["label"] == table.loc[table["tokens_per_s"].idxmax(), "layout"]
    assert s["best_usd_per_million_tokens"]["usd_per_million_tokens"] == pytest.approx(
        table["usd_per_million_tokens"].min())
    ttt = table["time_to_train_days"].dropna()
    assert ttt.to_numpy() == pytest.approx((1e12 / table["tokens_per_s"].dropna() / 86400).to_numpy())
    assert [r["rank"] for r in s["replayed"]] == [1, 2]
    for r in s["replayed"]:
        assert r["replay_step_time_s"] == pytest.approx(r["fast_step_time_s"], rel=0.01)
        assert (out / "runs" / f"top-{r['rank']}" / "summary.json").exists()
    assert (out / "plan.html").read_text().count("<svg") >= 1


def test_top_yaml_runs_as_it_is(planned, tmp_path):
    rc, out = planned
    doc = yaml.safe_load((out / "top-1.yaml").read_text())
    s = json.loads((out / "plan.json").read_text())
    assert doc["parallelism"]["tp"] == s["best_tokens_per_s"]["layout"]["tp"]
    assert main(["run", str(out / "top-1.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["step_time_s"] == pytest.approx(s["replayed"][0]["replay_step_time_s"], rel=1e-12)


@pytest.mark.parametrize("flags,flag", [(["--top", "0"], "--top"), (["--instances", "2,two"], "--instances"),
                                        (["--instance-types", "p5.48xlarge"], "--instance-types"),
                                        (["--objective", "time_to_train"], "--tokens"),
                                        (["--tokens", "-5"], "--tokens"), (["--max-usd-per-hour", "0"],
                                                                           "--max-usd-per-hour"),
                                        (["--objective", "usd_per_million_tokens", "--instance-types",
                                          "trn2.48xlarge"], "--objective")])
def test_bad_flags_exit_2_naming_the_flag(scenarios_dir, capsys, flags, flag, tmp_path):
    assert main(["plan", str(scenarios_dir / "smoke.yaml"), "--out", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert f"error: {flag}:" in err and "Traceback" not in err


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
