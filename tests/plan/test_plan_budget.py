"""A plan's days and dollars: the training budget (the scenario's `training.budget_tokens` or `budget_steps`, or
`--tokens`) at each layout's step time with the goodput its failures and checkpoints leave (`goodput.time_and_cost`,
`goodput.expected_goodput`, issue 35's functions, as `run` prices summary.json's). Searched in this process."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.cli import main
from ultracluster.goodput import expected_goodput
from ultracluster.layouts.space import SearchSpace
from ultracluster.plan import format_plan, plan

BASE = {"name": "plan-7b-budget", "stack": "neuronx-distributed", "model": {"preset": "llama2-7b"},
        "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0, "budget_tokens": 2.0e11},
        "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2},
        "faults": {"instance_mtbf_hours": 50.0, "detect_minutes": 2.0, "restart_minutes": 4.0},
        "checkpoint": {"every_steps": 100, "mode": "async"}}
SPACE = SearchSpace(instance_counts=(2, 4), micro_batches=(1,), virtual_stages=(2,), max_cp=1)


@pytest.fixture(scope="module")
def budgeted():
    return plan(load_scenario(BASE), SPACE, replay=False, top=3, objective="time_to_train")


def test_each_row_trains_the_scenarios_budget_at_its_goodput(budgeted):
    s, t = budgeted.summary, budgeted.table
    assert s["budget"]["source"] == "training.budget_tokens" and s["tokens"] == 2.0e11
    assert s["budget"]["steps"] == pytest.approx(2.0e11 / (64 * 4096))
    assert s["goodput_source"].startswith("closed form (Daly 2006): checkpoints every 100 steps")
    rows = t[t["feasible"] & (t["same_as"] == "")]
    assert len(rows) > 20 and rows["goodput"].between(0.5, 1.0).all()
    # fewer instances fail less often: at the same step, more goodput
    for _, r in rows.sample(8, random_state=0).iterrows():
        good = expected_goodput(r["step_time_s"], 0.0, 100, 0.0, 360.0, 50.0 * 3600 / r["instances"])
        assert r["goodput"] == pytest.approx(good, rel=1e-12)
        days = 2.0e11 / (64 * 4096) * r["step_time_s"] / good / 86400
        assert r["time_to_train_days"] == pytest.approx(days, rel=1e-12)
        assert r["total_cost_usd"] == pytest.approx(days * 24 * r["instances"] * 21.50, rel=1e-12)
    assert t.loc[~t["feasible"], "time_to_train_days"].isna().all()
    # the objective ranks by those days, at the slow end
    top = budgeted.top[0]
    assert top["rank_value"] == pytest.approx(top["time_to_train_days"] * top["step_time_high_s"] / top["step_time_s"])
    text = format_plan(budgeted)
    assert "2e+11 tokens to train (training.budget_tokens), goodput closed form (Daly 2006)" in text


def test_without_a_price_the_cost_says_how_to_give_one(scenarios_dir):
    d = {**BASE, "name": "plan-7b-trn2-budget", "cluster": {"instance": "trn2.48xlarge", "instances": 1}}
    result = plan(load_scenario(d), SearchSpace(micro_batches=(1,), max_cp=1), replay=False, top=1)
    row = result.top[0]
    assert math.isfinite(row["time_to_train_days"]) and row["total_cost_usd"] is None
    assert "no price" in format_plan(result)
    assert result.summary["budget"]["no_price"] == "no price: set cluster.price_per_hour_usd or --price-per-hour"


def test_time_to_train_needs_a_budget(scenarios_dir, tmp_path, capsys):
    rc = main(["plan", str(scenarios_dir / "smoke.yaml"), "--objective", "time_to_train", "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["error: --tokens: given '<missing>'; allowed: a number of tokens > 0 with --objective "
                               "time_to_train (or the scenario's training.budget_tokens or budget_steps)"]
    no_faults = plan(load_scenario({k: v for k, v in BASE.items() if k not in ("faults", "checkpoint")}), SPACE,
                     replay=False, top=1, tokens=1e11)
    assert no_faults.summary["budget"]["source"] == "--tokens"
    assert (no_faults.table["goodput"].dropna() == 1.0).all()
    np.testing.assert_allclose(no_faults.top[0]["time_to_train_days"],
                               1e11 / no_faults.top[0]["tokens_per_s"] / 86400, rtol=1e-12)


FSX = {"kind": "fsx-lustre", "deployment": "PERSISTENT_2", "throughput_mbps_per_tib": 250}


def test_a_file_system_too_small_for_a_checkpoint_makes_every_layout_infeasible_with_its_reason():
    d = {**BASE, "name": "plan-7b-small-fsx", "storage": {**FSX, "capacity_tib": 1.2},      # FSx's smallest, 1.32 TB
         "checkpoint": {**BASE["checkpoint"], "keep": 20}}                                   # 20 x 94 GB kept
    result = plan(load_scenario(d), SPACE, replay=False, top=1)
    assert result.summary["feasible"] == 0
    reason = result.summary["closest"]["reason"]
    assert reason.startswith("storage: storage.capacity_tib 1.2 TiB") and "20 checkpoints of 0.09 TB" in reason


def test_a_file_system_that_may_not_hold_the_data_set_is_a_note_and_fsx_joins_each_rows_cost():
    d = {**BASE, "name": "plan-7b-data-fsx", "storage": {**FSX, "capacity_tib": 1.2, "bytes_per_token": 8}}  # 1.32 TB; 1.6 TB of data
    result = plan(load_scenario(d), SPACE, replay=False, top=1, objective="time_to_train")
    assert result.summary["feasible"] > 0
    assert any(n.startswith("storage: storage.capacity_tib 1.2 TiB") and "stream from S3" in n
               for n in result.summary["notes"])
    t = result.table[np.isfinite(result.table["time_to_train_days"].astype(float))]
    fsx = 1.2 * 1024 * 0.210 * t["time_to_train_days"] * 24 / 730
    np.testing.assert_allclose(t["storage_cost_usd"], fsx, rtol=1e-12)
    np.testing.assert_allclose(t["total_cost_usd"], t["compute_cost_usd"] + fsx, rtol=1e-12)
