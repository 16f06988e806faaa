"""The step's composition (`ultracluster.step`): each rule written once, and its callers agreeing on it."""
import math

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import Layout, group_first_rank, instance_of, instance_ranks, rank_coords, replica_ranks
from ultracluster.cluster.catalog import INSTANCES
from ultracluster.step.counts import microbatches, scenario_microbatches, ultraserver_default
from ultracluster.step.hbm import hbm_totals
from ultracluster.step.merit import figures
from ultracluster.step.price import CATALOG_PRICE, NO_PRICE_HINT, OVERRIDE_PRICE, instance_price, price_source
from ultracluster.step.speed import group_speeds, slowed, slowest_replica
from ultracluster.step.split import inlayer_split

SMOKE = __import__("pathlib").Path(__file__).resolve().parents[2] / "scenarios" / "smoke.yaml"


@pytest.fixture(scope="module")
def dense():
    return load_scenario(SMOKE)


def test_hbm_totals_name_the_worst_stage_and_whether_it_fits():
    w, g, o, a = (np.array([[1.0, 2.0, 3.0], [5.0, 1.0, 1.0]]) for _ in range(4))
    hbm = hbm_totals(w, g, o, a, np.array([[0.5], [0.5]]), np.array([[12.5], [12.0]]))
    assert hbm.total.tolist() == [[4.5, 8.5, 12.5], [20.5, 4.5, 4.5]]
    assert hbm.worst.tolist() == [2, 0] and hbm.worst_total.tolist() == [12.5, 20.5]
    assert hbm.fits.tolist() == [True, False]                 # at capacity fits; over it does not


def test_memory_reason_and_the_planners_feasibility_are_one_rule():
    from ultracluster.memory import infeasible_reason
    from ultracluster.replay.result import StageMemory

    def stage(s, total_a):
        return StageMemory(stage=s, weights_gib=1.0, gradients_gib=1.0, optimizer_gib=1.0, activations_gib=total_a,
                           reserve_gib=1.0, total_gib=4.0 + total_a, capacity_gib=8.0)
    assert infeasible_reason([stage(0, 4.0), stage(1, 3.0)]) is None
    assert "pipeline stage 1" in infeasible_reason([stage(0, 4.0), stage(1, 4.5), stage(2, 4.5)])


def test_speeds_slow_chunks_by_their_stage_and_the_optimizer_by_the_slowest_replica():
    layout = Layout(tp=2, cp=1, pp=2, dp=2, virtual_stages=2)
    jitter = np.array([1.0, 1.1, 1.2, 1.0])                   # (replica, stage) groups in order
    speed = group_speeds(layout, jitter, np.array([7]), np.array([1.5]))   # rank 7: replica 1, stage 1
    assert speed.tolist() == [[1.0, 1.1], [1.2, 1.5]]
    assert slowest_replica(speed).tolist() == [1.2, 1.5]
    fwd, bwd, opt = slowed(np.ones((1, 4)), 2 * np.ones((1, 4)), np.ones(2), speed, slowest_replica(speed), 2)
    assert fwd.tolist() == [[1.0, 1.1, 1.0, 1.1], [1.2, 1.5, 1.2, 1.5]]      # chunk c on stage c % pp
    assert bwd.tolist() == (2 * fwd).tolist() and opt.tolist() == [1.2, 1.5]


def test_figures_of_merit_and_an_unknown_price():
    f = figures(2.0, 1000, 6e12, 1e13, 4, 10.0)
    assert float(f["tokens_per_s"]) == 500.0 and float(f["mfu"]) == pytest.approx(0.3)
    assert float(f["cluster_usd_per_hour"]) == 40.0 and float(f["cost_per_step_usd"]) == pytest.approx(40 * 2 / 3600)
    assert float(f["usd_per_million_tokens"]) == pytest.approx(40 * 2 / 3600 / 1000 * 1e6)
    rows = figures(np.array([1.0, 2.0]), 1000, 6e12, 1e13, np.array([1, 2]), np.array([np.nan, 3.0]))
    assert math.isnan(rows["usd_per_million_tokens"][0]) and rows["cluster_usd_per_hour"][1] == 6.0


def test_one_price_lookup_honours_the_override_everywhere(dense):
    name = dense.cluster.instance
    assert instance_price(name) == INSTANCES[name].price_per_hour_usd and price_source(name) == CATALOG_PRICE
    assert instance_price(name, 3.5) == 3.5 and price_source(name, 3.5) == OVERRIDE_PRICE
    unpriced = [n for n, s in INSTANCES.items() if s.price_per_hour_usd is None]
    if unpriced:
        assert instance_price(unpriced[0]) is None and price_source(unpriced[0]) == NO_PRICE_HINT
    # the planner's fast path prices the scenario's own instance type at the scenario's price
    from ultracluster.layouts.evaluator import Evaluator
    priced = dense.model_copy(update={"cluster": dense.cluster.model_copy(update={"price_per_hour_usd": 3.5})})
    c = dense.cluster
    assert Evaluator(priced).cluster(c.instance, c.instances, c.lnc).price_per_hour_usd == 3.5
    assert Evaluator(dense).cluster(c.instance, c.instances, c.lnc).price_per_hour_usd == INSTANCES[name].price_per_hour_usd


def test_counts(dense):
    t, p = dense.training, dense.parallelism
    assert scenario_microbatches(dense) == microbatches(t.global_batch, p.dp, t.micro_batch) == \
        t.global_batch // (p.dp * t.micro_batch)
    assert ultraserver_default("trn2u.48xlarge") and not ultraserver_default("trn1.32xlarge")


def test_placement_helpers_follow_rank_coords():
    layout = Layout(tp=4, cp=2, pp=3, dp=2)
    ranks = np.arange(layout.ranks)
    c = rank_coords(layout, ranks)
    first = group_first_rank(layout.tp, layout.cp, layout.pp, c["dp"], c["pp"])
    assert (first == ranks - ranks % (layout.tp * layout.cp)).all()
    assert replica_ranks(layout.tp, layout.cp, layout.pp) * layout.dp == layout.ranks
    assert instance_ranks([1, 3], 4).tolist() == [4, 5, 6, 7, 12, 13, 14, 15]
    assert instance_of(instance_ranks([1, 3], 4), 4).tolist() == [1] * 4 + [3] * 4


def test_inlayer_split_adds_up_to_the_in_layer_time():
    totals = {"tp": 1.0, "cp": 0.5, "ep": 0.3}
    parts = inlayer_split(1.2, 1.0, totals, {"tp": 2, "cp": 2, "ep": 2})
    assert parts["cp"][0] == pytest.approx(0.2) and parts["ep"][0] == pytest.approx(0.3)
    assert sum(x for x, _ in parts.values()) == pytest.approx(1.2)
    assert all(h >= 0 for _, h in parts.values())
    only_ep = inlayer_split(0.4, 0.4, totals, {"tp": 1, "cp": 1, "ep": 2})
    assert only_ep["tp"][0] == 0.0 and only_ep["ep"][0] == pytest.approx(0.4)
