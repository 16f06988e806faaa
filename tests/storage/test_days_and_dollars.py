"""Days and dollars of a training budget with goodput: `goodput.time_and_cost` (vectorized, what a plan row or a
sweep row calls), `goodput.expected_goodput` (closed form) and summary.json's fields."""
import math

import numpy as np
import pytest

from ultracluster.goodput import long_run, time_and_cost
from ultracluster.step.price import NO_PRICE_HINT
from ultracluster.runner import predict
from ultracluster.scenario import load_scenario


def test_time_and_cost_vectorized_equals_each_row_alone():
    step = np.array([1.5, 9.4, 20.0])
    tps = np.array([2**20, 2**22, 2**23])
    inst = np.array([16, 64, 128])
    price = np.array([21.5, np.nan, 40.0])
    good = np.array([1.0, 0.93, 0.5])
    many = time_and_cost(step, tps, inst, price, good, tokens=1.5e12)
    for i in range(3):
        one = time_and_cost(float(step[i]), int(tps[i]), int(inst[i]), None if np.isnan(price[i]) else float(price[i]),
                            float(good[i]), tokens=1.5e12)
        assert isinstance(one["time_to_train_days"], float)
        assert one["time_to_train_days"] == pytest.approx(many["time_to_train_days"][i], rel=1e-15)
        assert (math.isnan(one["total_cost_usd"]) and np.isnan(many["total_cost_usd"][i])) or \
            one["total_cost_usd"] == pytest.approx(many["total_cost_usd"][i], rel=1e-15)
    # by hand: 1.5e12 / 2**22 steps of 9.4 s at 93 % goodput
    assert many["time_to_train_days"][1] == pytest.approx(1.5e12 / 2**22 * 9.4 / 0.93 / 86400)
    assert many["total_cost_usd"][2] == pytest.approx(1.5e12 / 2**23 * 20.0 / 0.5 / 3600 * 128 * 40.0)
    assert np.isnan(many["total_cost_usd"][1])


def test_a_budget_in_steps_and_no_goodput():
    out = time_and_cost(2.0, 1000, 4, 10.0, 0.8, steps=43200)
    assert out["time_to_train_days"] == pytest.approx(43200 * 2.0 / 0.8 / 86400)
    assert out["train_steps"] == 43200
    assert math.isnan(time_and_cost(2.0, 1000, 4, 10.0, 0.0, steps=10)["time_to_train_days"])
    with pytest.raises(ValueError):
        time_and_cost(2.0, 1000, 4, 10.0, 0.8)


def test_summary_goodput_is_the_long_runs_closed_form_and_the_cost_adds_up():
    sc = load_scenario("scenarios/faults-llama3-70b-trn2-sync.yaml",
                       ["training.budget_tokens=1.5e12", "cluster.price_per_hour_usd=40"])
    s = predict(sc)
    busy = s["step_time_s"] - s["data_stall_s"] - s["checkpoint_s"]
    g = long_run(sc, busy, 24).summary()
    # the long run's closed form takes the mean block of the checkpoints it ran (the burst credits move it a little),
    # the summary's a checkpoint alone on an idle file system (checkpoint_block_s)
    assert s["goodput"] == pytest.approx(g["closed_form_goodput"], rel=1e-5)
    assert 0.5 < s["goodput"] < 1
    steps = 1.5e12 / s["tokens_per_step"]
    assert s["train_steps"] == pytest.approx(steps)
    assert s["time_to_train_days"] == pytest.approx(steps * busy / s["goodput"] / 86400, rel=1e-12)
    assert s["compute_cost_usd"] == pytest.approx(s["time_to_train_days"] * 24 * 64 * 40.0, rel=1e-12)
    # the 24 TiB PERSISTENT_2 250 MB/s/TiB file system over the same days: $0.210 per GB-month, 730 h a month
    fsx = 24 * 1024 * 0.210 * s["time_to_train_days"] * 24 / 730
    assert s["storage_cost_usd"] == pytest.approx(fsx, rel=1e-12)
    assert s["total_cost_usd"] == pytest.approx(s["compute_cost_usd"] + fsx, rel=1e-12)
    assert s["price_source"] == "cluster.price_per_hour_usd"


def test_no_price_says_how_to_set_one_and_no_budget_gives_no_days():
    s = predict(load_scenario("scenarios/faults-llama3-70b-trn2-sync.yaml", ["training.budget_steps=1000"]))
    assert s["price_source"] == NO_PRICE_HINT == "no price: set cluster.price_per_hour_usd or --price-per-hour"
    assert s["total_cost_usd"] is None and s["time_to_train_days"] > 0
    s = predict(load_scenario("scenarios/smoke.yaml"))
    assert s["time_to_train_days"] is None and s["goodput"] == 1.0
    assert s["price_source"].startswith("catalog")


def test_failures_without_checkpoints_never_finish():
    s = predict(load_scenario("scenarios/smoke.yaml", ["faults.instance_mtbf_hours=1000",
                                                       "training.budget_tokens=1e9"]))
    assert s["goodput"] == 0.0 and s["time_to_train_days"] is None
