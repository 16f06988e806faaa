"""Portable plans (issue 44): a plan's top-N.yaml carries the layout, not the instance type's defaults, so a sweep
of `cluster.instance` on it times each type at its own UltraServer setting and price, and `--price-per-hour` wins
over a file's price with `price_source` saying so."""
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plan"))
from plan_scenarios import variant  # noqa: E402

from ultracluster import load_scenario  # noqa: E402
from ultracluster.layouts.space import SearchSpace  # noqa: E402
from ultracluster.plan import plan  # noqa: E402
from ultracluster.sweep import build  # noqa: E402
from ultracluster.sweep.evaluate import evaluate_variant  # noqa: E402

TYPES = "cluster.instance=trn2.48xlarge,trn2u.48xlarge"


@pytest.fixture(scope="module")
def top1(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "p"
    base = load_scenario(variant(name="portable", cluster={"instance": "trn2.48xlarge", "instances": 4}))
    plan(base, SearchSpace(tp=(8,), pp=(1,), micro_batches=(1,), recompute=("selective",), max_cp=1, zero=(1,),
                           lnc=(2,)), top=1, out=out, replay=False, prices={"trn2.48xlarge": 40.0})
    return out / "top-1.yaml"


def test_top_yaml_leaves_the_types_defaults_to_it(top1):
    doc = yaml.safe_load(top1.read_text())
    assert "ultraserver" not in doc["cluster"]                 # trn2's default (false): not baked in
    assert doc["cluster"]["price_per_hour_usd"] == 40.0        # the price the user gave: kept
    assert doc["parallelism"]["tp"] == 8 and "dp" not in doc["parallelism"]


def test_a_sweep_of_the_type_gives_each_its_own_ultraserver_and_price(top1):
    sweep = build(top1, [], [TYPES], None, None, prices={"trn2u.48xlarge": 56.0})
    a, b = (v.scenario for v in sweep.variants)
    assert (a.cluster.instance, a.cluster.ultraserver, a.cluster.price_per_hour_usd) == ("trn2.48xlarge", False, 40.0)
    assert (b.cluster.instance, b.cluster.ultraserver, b.cluster.price_per_hour_usd) == ("trn2u.48xlarge", True, 56.0)
    assert [v.price_source for v in sweep.variants] == [None, "--price-per-hour"]
    ra, rb = (evaluate_variant(v.scenario) for v in sweep.variants)
    assert (ra["price_per_hour_usd"], rb["price_per_hour_usd"]) == (40.0, 56.0)     # per instance-hour
    assert ra["usd_per_million_tokens"] != rb["usd_per_million_tokens"]
    # the flag wins over the file's price for the file's own type too, and says so
    flagged = build(top1, [], [TYPES], None, None, prices={"trn2.48xlarge": 30.0, "trn2u.48xlarge": 56.0})
    assert flagged.variants[0].scenario.cluster.price_per_hour_usd == 30.0
    assert flagged.variants[0].price_source == "--price-per-hour"
    # without a price for trn2u, its variant has none (the catalog has no public one), never trn2's
    alone = build(top1, [], [TYPES], None, None)
    assert alone.variants[1].scenario.cluster.price_per_hour_usd is None
    assert any("cluster.ultraserver" in n or "cluster.price_per_hour_usd" in n for n in alone.notes)


def test_a_set_of_the_key_holds_for_every_variant(top1):
    sweep = build(top1, ["cluster.ultraserver=false"], [TYPES], None, None)
    assert [v.scenario.cluster.ultraserver for v in sweep.variants] == [False, False]
