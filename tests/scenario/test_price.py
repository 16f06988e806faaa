"""`cluster.price_per_hour_usd`: a positive finite number or an error naming the key; it prices a run in place
of the catalog (whose unpriced types say how to set one); `run --price-per-hour` sets it."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ultracluster.cli import main
from ultracluster.cluster.catalog import INSTANCES, NO_PRICE
from ultracluster.step.price import instance_price as price_per_hour
from ultracluster.errors import ScenarioError
from ultracluster.runner import predict
from ultracluster.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
TRN2 = ["cluster.instance=trn2.48xlarge"]


@pytest.mark.parametrize("value,shown", [("-1", "-1"), ("0", "0"), ("forty", "'forty'"), (".inf", "inf"),
                                         (".nan", "nan"), ("[40]", "[40]")])
def test_bad_price_names_the_key(value, shown):
    with pytest.raises(ScenarioError) as err:
        load_scenario(REPO / "scenarios" / "smoke.yaml", [f"cluster.price_per_hour_usd={value}"])
    (problem,) = err.value.problems
    assert problem.path == "cluster.price_per_hour_usd"
    assert str(problem).startswith(f"cluster.price_per_hour_usd: given {shown}; allowed: a number >= 0.01 and <= 100,000 (US dollars per instance-hour")


def test_the_key_prices_a_run_in_place_of_the_catalog():
    smoke = REPO / "scenarios" / "smoke.yaml"
    unpriced = predict(load_scenario(smoke, TRN2))
    assert unpriced["price_per_hour_usd"] is None and unpriced["cost_per_step_usd"] is None
    priced = predict(load_scenario(smoke, TRN2 + ["cluster.price_per_hour_usd=37.5"]))
    assert priced["step_time_s"] == unpriced["step_time_s"]              # a price moves no step time
    assert priced["price_per_hour_usd"] == 37.5
    assert priced["cost_per_step_usd"] == pytest.approx(2 * 37.5 * priced["step_time_s"] / 3600, rel=1e-12)
    trn1 = predict(load_scenario(smoke, ["cluster.price_per_hour_usd=10"]))   # over the catalog's 21.50 too
    assert trn1["price_per_hour_usd"] == 10.0


def test_catalog_prices_and_what_it_says_without_one():
    assert price_per_hour("trn1.32xlarge") == 21.50 and price_per_hour("trn1.32xlarge", 9.0) == 9.0
    for name, spec in INSTANCES.items():
        source = spec.sources["price_per_hour_usd"]
        if spec.price_per_hour_usd is None:
            assert NO_PRICE in source, name
            assert price_per_hour(name) is None and price_per_hour(name, 40) == 40.0
        else:
            assert math.isfinite(spec.price_per_hour_usd) and spec.price_per_hour_usd > 0
            assert "2022-10-10" in source, name                          # the public price list, dated
    assert NO_PRICE == "no public price: set cluster.price_per_hour_usd"


def test_run_price_flag(tmp_path, capsys):
    smoke = str(REPO / "scenarios" / "smoke.yaml")
    assert main(["run", smoke, "--price-per-hour", "trn1.32xlarge=12.5,trn2.48xlarge=40", "--out",
                 str(tmp_path / "run"), "--quiet"]) == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["price_per_hour_usd"] == 12.5 and s["price_source"] == "--price-per-hour"    # the flag, not the key
    # a plain USD wins over a --set of the key (cli turns the flag into a later --set) and says so; the key alone
    # is the key
    assert main(["run", smoke, "--set", "cluster.price_per_hour_usd=3", "--price-per-hour", "7.5", "--out",
                 str(tmp_path / "plain"), "--quiet"]) == 0
    s = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert (s["price_per_hour_usd"], s["price_source"]) == (7.5, "--price-per-hour")
    assert main(["run", smoke, "--set", "cluster.price_per_hour_usd=3", "--out", str(tmp_path / "key"),
                 "--quiet"]) == 0
    s = json.loads((tmp_path / "key" / "summary.json").read_text())
    assert (s["price_per_hour_usd"], s["price_source"]) == (3.0, "cluster.price_per_hour_usd")
    for bad in ("-3", "p5.48xlarge=40", "trn2.48xlarge=", "40,50"):
        assert main(["run", smoke, "--price-per-hour", bad, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --price-per-hour: given") and "Traceback" not in err
