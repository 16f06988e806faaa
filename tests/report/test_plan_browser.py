"""plan.html in a real headless Chromium, like report.html (test_report_browser.py): no script error, no network
request, a drawn page: the Pareto chart's dots and front, the near-misses' HBM bars; and the page of a plan
whose instance type has no price says there is no cost axis. sweep.html too: its heatmap, its line charts and
their intervals drawn."""
from __future__ import annotations

import pytest
from test_report_browser import colours, load

from ultracluster import load_scenario
from ultracluster.plan import SearchSpace, plan
from ultracluster.plan.html import DOT_COLOR, FRONT_COLOR, TOP_COLOR
from ultracluster.report.html_kit import MEMORY_COLORS

SEVEN_B = {"name": "plan-7b-html", "model": {"preset": "llama2-7b"},
           "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
           "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2}}
SMALL = SearchSpace(micro_batches=(1, 2), virtual_stages=(2,))


def test_plan_html_renders_in_chromium(chromium, tmp_path):
    result = plan(load_scenario(SEVEN_B), SMALL, top=3, out=tmp_path / "plan", replay=False)
    assert result.summary["feasible"] and result.summary["feasible"] < result.summary["layouts_evaluated"]
    # two screens: the near misses follow the decision view, the tables (with what ranked them) and the two charts
    page = (tmp_path / "plan" / "plan.html").read_text()
    # no stack named: the Neuron stacks that run on trn1, the best of each, and the MFU flag's threshold beside it
    assert "<h2>Best of each stack</h2>" in page and "nxd: 2 x trn1.32xlarge" in page
    best = result.summary["mfu_best_published"]["trn1.32xlarge"]
    assert f"MFU marked ! is above the best published run of its chip (trn1.32xlarge {100 * best:.1f} %)" in page
    assert f"outlined: trn1.32xlarge {100 * best:.1f} %" in page
    png, errors, requests = load(chromium, tmp_path / "plan" / "plan.html", height=2800)
    assert errors == [] and requests == []
    seen = colours(png)
    assert len(seen) > 20 and seen.get("ffffff", 0) < 0.98 * 2800 * 1200
    assert seen.get(DOT_COLOR[1:], 0) > 50 and seen.get(FRONT_COLOR[1:], 0) > 50   # the Pareto chart
    assert seen.get(TOP_COLOR[1:], 0) > 20                                          # the top layouts marked
    assert seen.get(MEMORY_COLORS["weights_gib"][1:], 0) > 200                      # near-miss HBM bars


def test_plan_without_prices_says_so(chromium, tmp_path):
    scenario = load_scenario({**SEVEN_B, "name": "plan-7b-trn2", "cluster": {"instance": "trn2.48xlarge",
                                                                             "instances": 1}})
    result = plan(scenario, SMALL, top=1, out=tmp_path / "plan", replay=False)
    page = (tmp_path / "plan" / "plan.html").read_text()
    assert "No cost axis: no instance type searched has a price: trn2.48xlarge" in page
    assert "no public price: set cluster.price_per_hour_usd" in page
    assert "no price: set cluster.price_per_hour_usd or --price-per-hour" in page     # where a cost would show
    assert page.count("<circle") > 20                     # its layouts are on the chart of every type
    assert result.summary["best_usd_per_million_tokens"] is None
    png, errors, requests = load(chromium, tmp_path / "plan" / "plan.html")
    assert errors == [] and requests == []


def test_sweep_html_renders_in_chromium(chromium, tmp_path, monkeypatch):
    from ultracluster.sweep import build, run_sweep
    from ultracluster.sweep.html import HEAT_HIGH, LINE_COLORS

    monkeypatch.setattr("ultracluster.actors.plan_tasks.wanted", lambda address: False)   # priced here
    sweep = build("scenarios/smoke.yaml", ["training.budget_tokens=1e10"],
                  ["cluster.network.efa_gbps=100,200,400", "training.micro_batch=1,2"], None, None)
    res = run_sweep(sweep, tmp_path / "sweep")
    assert res.table["status"].eq("ok").all()
    png, errors, requests = load(chromium, tmp_path / "sweep" / "sweep.html", height=2000)
    assert errors == [] and requests == []
    seen = colours(png)
    assert len(seen) > 20 and seen.get("ffffff", 0) < 0.98 * 2000 * 1200
    assert seen.get(LINE_COLORS[0][1:], 0) > 100 and seen.get(LINE_COLORS[1][1:], 0) > 100   # two lines a chart
    assert seen.get("%02x%02x%02x" % HEAT_HIGH, 0) > 200                                      # the heatmap's best
    page = (tmp_path / "sweep" / "sweep.html").read_text()
    assert page.count('class="interval"') >= 6 and 'class="heatmap"' in page


def test_plan_html_leads_with_the_decision_view_and_fits_1400_px(chromium, tmp_path):
    """The decision view (a row per instance type, count and stack, its days and dollars with FSx, the verdicts
    between neighbours) comes first, and the page fits a 1,400 px window: no table makes it scroll sideways, and
    the decision table itself is never boxed away."""
    scenario = load_scenario({**SEVEN_B, "name": "plan-7b-decision",
                              "training": {**SEVEN_B["training"], "budget_tokens": 2e11},
                              "storage": {"kind": "fsx-lustre", "deployment": "PERSISTENT_2", "capacity_tib": 4.8,
                                          "throughput_mbps_per_tib": 250},
                              "checkpoint": {"every_steps": 500, "mode": "async"}})
    space = SearchSpace(micro_batches=(1,), virtual_stages=(2,), instance_counts=(2, 4),
                        stacks=("neuronx-distributed", "neuronx-nemo-megatron"))
    result = plan(scenario, space, top=1, out=tmp_path / "plan", replay=False)
    d = result.summary["decision"]
    assert [(r["instances"], r["stack"]) for r in d["rows"]] == [(2, "neuronx-distributed"), (2, "neuronx-nemo-megatron"),
                                                                 (4, "neuronx-distributed"), (4, "neuronx-nemo-megatron")]
    assert all(r["storage_cost_usd"] > 0 and r["total_cost_usd"] == pytest.approx(r["compute_cost_usd"]
                                                                                  + r["storage_cost_usd"])
               for r in d["rows"])
    assert any(v["verdict"].startswith("64 vs 32 chips (trn1, nxd)") for v in d["verdicts"])
    page = (tmp_path / "plan" / "plan.html").read_text()
    assert page.index("<h2>Decision</h2>") < page.index("<h2>Best of each instance type</h2>")
    widths = []
    png, errors, requests = load(chromium, tmp_path / "plan" / "plan.html", width=1400, widths=widths)
    assert errors == [] and requests == []
    w = widths[0]
    assert w["page"] <= 1400, w
    decision = next(t for t in w["tables"] if t["first"] == "instance type" and not t["boxed"])
    assert decision["width"] <= 1400 - 2 * 24
