"""Reports that read right, on real outputs: one formatting rule for every number a person reads (no float
noise, no exponent, units), every collective kind's exposed and hidden seconds (cp and ep included) adding
up to the step, warnings where a figure is 0 because its model is off, HBM with its capacity.

The runs are the real model in this process (`emulate` with in-process shards, no Ray) written to real run
directories, except the compare of a scenario run twice, which goes through `ultracluster run` on the
shared local Ray.
"""
from __future__ import annotations

import json
import math
import re
import shutil

import pandas as pd
import pytest

from test_report_frames import make_result
from ultracluster import load_scenario
from ultracluster.shards.local import local_shards
from ultracluster.cli import main
from ultracluster.emulate import emulate
from ultracluster.errors import EXIT_OK
from ultracluster.goodput import format_goodput, long_run
from ultracluster.runner import predict
from ultracluster.replay.result import BREAKDOWN_KEYS
from ultracluster.report import build_report, format_compare, format_summary, write_run_dir
from ultracluster.report.check import check_run_dir
from ultracluster.report.html import slowest_ranks
from ultracluster.report.html_kit import nice_ticks
from ultracluster.report.table import difference, fmt, fmt_interval, fmt_value
from ultracluster.report.write import write_goodput

EXPONENT = re.compile(r"\d[eE][-+]?\d")     # 2.22045e-16, +2.592e+05


def real_run(scenarios_dir, name: str, sets: list[str], out):
    """The real model, in process: scenario → RunResult → Report → run directory."""
    rep = build_report(emulate(load_scenario(scenarios_dir / name, sets), local_shards))
    write_run_dir(rep, out)
    return rep


def kind_total(rep, group: str) -> float:
    """A kind's seconds per step on the critical stage from collectives.csv: time x count (counted on stage
    0), scaled by the critical stage's layers."""
    c = rep.collectives[rep.collectives["group"] == group]
    layers = rep.stages.set_index("stage")["layers"]
    crit = int(rep.steps.loc[~rep.steps["warmup"], "critical_stage"].iloc[-1])
    return float((c["time_s"] * c["count_per_step"]).sum()) * layers[crit] / layers[0]


# --- the rule ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,unit,text", [
    (7.33581e-05, "s", "73.36 µs"), (0.385384, "s", "385.4 ms"), (5.1783, "s", "5.178 s"), (259200.0, "s", "259,200 s"),
    (0.0, "s", "0 s"), (1.09635e-15, "s", "0 s"), (170053.93, "tokens/s", "170,054 tokens/s"), (83.0341, "seq/s",
                                                                                                   "83.03 seq/s"),
    (0.0761063, "%", "7.61 %"), (1.38107, "GiB", "1.38 GiB"), (16.0, "GiB", "16 GiB"), (0.00460319, "$", "$0.0046"),
    (4194304, "B", "4 MiB"), (6.08e15, "FLOP/s", "6.08 PFLOP/s"), (1024, "", "1,024"), (2.5e-7, "", "2.500e-07"),
    (float("nan"), "s", "n/a"), (None, "s", "-"), (True, "", "True"), (0.99996, "s", "1 s"),
])
def test_one_rule_for_a_number(value, unit, text):
    assert fmt_value(value, unit) == text


def test_the_unit_comes_from_the_name_and_noise_reads_zero():
    assert fmt(7.33581e-05, "pp_comm_s") == "73.36 µs" and fmt(71.6, "time_us") == "71.6 µs"
    assert fmt(0.0761, "mfu") == "7.61 %" and fmt(0.07, "usd_per_million_tokens") == "$0.07"
    assert fmt(3.0e-17, "bubble_s", ref=0.385) == "0 s"            # float noise of a step's part
    assert fmt(3.0e-7, "bubble_s", ref=0.385) == "300 ns"
    assert fmt_interval(0.327194, 0.455098, 0.385384, "s") == "327–455 ms"
    assert fmt_interval(144004.1, 200296.8, 170053.9) == "144,004–200,297"
    # a difference within a relative 1e-9 of the values (or of the step, for a part of it) is 0, uncoloured
    assert difference("step_time_s", 0.385, 0.385 * (1 + 2.22e-16)) == ("0", "")
    assert difference("bubble_s", 0.0, 1.09635e-15, ref=0.385) == ("0", "")
    assert difference("bubble_s", 0.0, 1.0e-6, ref=0.385) == ("+1 µs", "worse")
    assert difference("tokens_per_s", 170054.0, 429254.0) == ("+259,200 (+152.4 %)", "better")
    assert difference("mfu", 0.0761, 0.0811) == ("+0.5 points (+6.6 %)", "better")
    assert difference("comm_cp_hidden_s", 0.0, 0.002) == ("+2 ms", "")       # hiding more is no regression
    assert nice_ticks(0.3854) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert nice_ticks(16.0) == pytest.approx([0.0, 5.0, 10.0, 15.0, 20.0])


# --- every collective kind in the breakdown ------------------------------------------------------------------
def test_cp_shows_its_exposed_and_hidden_seconds_and_the_parts_add_up(scenarios_dir, tmp_path):
    rep = real_run(scenarios_dir, "smoke.yaml", ["parallelism.tp=4", "parallelism.cp=2", "training.steps=2"],
                   tmp_path / "cp2")
    s, step = rep.summary, rep.summary["step_time_s"]
    assert math.fsum(s[k] for k in BREAKDOWN_KEYS) == pytest.approx(step, rel=1e-12)
    for row in rep.breakdown.itertuples(index=False):
        assert math.fsum(getattr(row, k) for k in BREAKDOWN_KEYS) == pytest.approx(row.step_time_s, rel=1e-12)
    inlayer = s["comm_tp_exposed_s"] + s["comm_cp_exposed_s"] + s["comm_ep_exposed_s"]
    assert inlayer == pytest.approx(s["tp_comm_s"], rel=1e-12) and s["comm_ep_exposed_s"] == 0
    cp = kind_total(rep, "cp")
    assert cp > 0 and s["comm_cp_exposed_s"] + s["comm_cp_hidden_s"] == pytest.approx(cp, rel=1e-9)
    assert s["comm_tp_exposed_s"] + s["comm_tp_hidden_s"] == pytest.approx(kind_total(rep, "tp"), rel=1e-9)
    assert (s["comm_dp_exposed_s"], s["comm_pp_exposed_s"]) == (s["dp_comm_s"], s["pp_comm_s"])
    text = format_summary(s)
    line = re.search(r"^    cp \(context parallel\) +(\S+ \S+) +(\S+ %) +(\S+ \S+)$", text, re.M)
    assert line and line.group(3) == fmt_value(s["comm_cp_hidden_s"], "s", ref=step)
    assert check_run_dir(tmp_path / "cp2") == []
    html = (tmp_path / "cp2" / "report.html").read_text()
    assert "cp (context parallel)" in html and "hidden behind compute" in html


def test_ep_all_to_alls_are_exposed_in_full_and_the_parts_add_up(scenarios_dir, tmp_path):
    rep = real_run(scenarios_dir, "mixtral-8x7b-trn2.yaml", ["training.steps=1", "training.warmup_steps=0"],
                   tmp_path / "ep")
    s = rep.summary
    assert math.fsum(s[k] for k in BREAKDOWN_KEYS) == pytest.approx(s["step_time_s"], rel=1e-12)
    ep = kind_total(rep, "ep")
    assert ep > 0.1 * s["tp_comm_s"]
    assert s["comm_ep_exposed_s"] == pytest.approx(ep, rel=1e-9) and s["comm_ep_hidden_s"] == 0
    assert s["comm_tp_exposed_s"] + s["comm_ep_exposed_s"] == pytest.approx(s["tp_comm_s"], rel=1e-12)
    assert s["comm_cp_exposed_s"] == s["comm_cp_hidden_s"] == 0
    assert re.search(r"^    ep \(expert parallel\) ", format_summary(s), re.M)
    assert "cp (context parallel)" not in format_summary(s)
    assert check_run_dir(tmp_path / "ep") == []


def test_check_sees_kinds_that_do_not_add_up(scenarios_dir, tmp_path):
    real_run(scenarios_dir, "smoke.yaml", ["training.steps=1"], tmp_path / "run")
    path = tmp_path / "run" / "summary.json"
    s = json.loads(path.read_text())
    path.write_text(json.dumps({**s, "comm_cp_exposed_s": 0.01, "warnings": "no storage"}))
    found = [p.path for p in check_run_dir(tmp_path / "run")]
    assert "summary.json: comm_tp_exposed_s + comm_cp_exposed_s + comm_ep_exposed_s" in found
    assert "summary.json: warnings" in found
    path.write_text(json.dumps({k: v for k, v in s.items() if not k.startswith("comm_") and k != "warnings"}))
    assert check_run_dir(tmp_path / "run") == []              # older run directories have none of them


# --- compare: two runs of one scenario ----------------------------------------------------------------------
def test_a_scenario_run_twice_compares_as_equal_without_float_noise(ray_session, scenarios_dir, tmp_path, capsys):
    sets = ["--set", "training.steps=1"]
    for name in ("first", "again"):
        assert main(["run", str(scenarios_dir / "smoke.yaml"), "--out", str(tmp_path / name), "--quiet", *sets]) == 0
    # a third copy whose figures moved by float noise only (the 2.22e-16 and 1.09635e-15 of the issue)
    shutil.copytree(tmp_path / "again", tmp_path / "noisy")
    s = json.loads((tmp_path / "noisy" / "summary.json").read_text())
    noisy = {**s, "step_time_s": s["step_time_s"] * (1 + 2.22e-16), "bubble_s": s["bubble_s"] + 1.09635e-15,
             "tokens_per_s": s["tokens_per_s"] * (1 - 2.22e-16), "dp_comm_hidden_s": -3.5e-18}
    (tmp_path / "noisy" / "summary.json").write_text(json.dumps(noisy))
    page = tmp_path / "cmp" / "compare.html"
    dirs = [str(tmp_path / n) for n in ("first", "again", "noisy")]
    assert main(["compare", *dirs, "--out", str(page)]) == EXIT_OK
    out = capsys.readouterr().out
    table, pairs = out.split("\ncomparison page:")[0].split("\nevery pair, later vs earlier")
    assert not EXPONENT.search(out) and "+" not in table + pairs and "(-" not in table + pairs
    assert max(map(len, table.splitlines() + pairs.splitlines())) <= 100
    for line in table.splitlines():
        if line and not line.startswith(("field", "80 %", "overlap")):
            assert line.split()[-1] in ("0", "=", "overlap"), line     # every difference reads 0
    said = [line.strip() for line in pairs.splitlines() if " vs " in line]
    assert len(said) == 3 and all(": step 0, goodput 0; intervals overlap: not a finding" in x for x in said), said
    html = page.read_text()
    summaries = html.split("<h2>Summaries</h2>")[1].split("<h2>")[0]
    assert 'class="worse"' not in summaries and 'class="better"' not in summaries
    assert not EXPONENT.search(re.sub(r'data-v="[^"]*"', "", summaries))
    full = pd.read_csv(page.parent / "compare.csv").set_index("field")
    diffs = full[[c for c in full.columns if " - first" in c]].apply(pd.to_numeric, errors="coerce")
    assert diffs.fillna(0).eq(0).all().all()
    # the HBM chart has each run's capacity line, the table the peak against it
    assert html.count('<title>HBM capacity per rank: 16 GiB</title>') == 3
    assert re.search(r"^hbm_peak_gib +1\.38 of 16 GiB +1\.38 of 16 GiB +0", table, re.M)


# --- warnings ------------------------------------------------------------------------------------------------
def test_warnings_where_a_figure_is_zero_because_its_model_is_off(scenarios_dir, tmp_path):
    s = predict(scenarios_dir / "smoke.yaml")
    assert s["checkpoint_s"] == 0 and s["data_stall_s"] == 0
    assert [w.split(":")[0] for w in s["warnings"]] == ["no storage configured"]
    assert [w.split(":")[0] for w in predict(scenarios_dir / "storage-data-stall-scratch.yaml")["warnings"]] \
        == ["no checkpoint configured"]
    assert predict(scenarios_dir / "storage-checkpoint-small-fsx.yaml")["warnings"] == []
    assert "\nwarning      no storage configured: " in format_summary({**s, "actors": 1})
    rep = real_run(scenarios_dir, "smoke.yaml", ["training.steps=1"], tmp_path / "run")
    html = (tmp_path / "run" / "report.html").read_text()
    assert '<p class="warning"><b>warning:</b> no storage configured: data loading and checkpoint writes' in html
    # `run --hours 720` without storage or failures: the long run says so too
    sc = load_scenario(scenarios_dir / "smoke.yaml")
    g = write_goodput(long_run(sc, rep.summary["step_time_s"], 720.0), tmp_path / "run")
    assert g["goodput"] == 1.0 and [w.split(":")[0] for w in g["warnings"]] == [
        "no failures configured", "no checkpoints modelled"]
    assert json.loads((tmp_path / "run" / "goodput.json").read_text())["warnings"] == g["warnings"]
    assert format_goodput(g).count("\nwarning ") == 2
    faults = load_scenario(scenarios_dir / "faults-llama3-70b-trn2-sync.yaml")
    assert write_goodput(long_run(faults, 10.0, 24.0), tmp_path / "run")["warnings"] == []


# --- report.html: slowest ranks grouped -------------------------------------------------------------------------
def test_slowest_ranks_with_the_same_figures_share_a_row():
    ranks = build_report(make_result()).ranks
    many = pd.concat([ranks[ranks["rank"] == 8].assign(rank=r) for r in range(100, 130)] + [ranks])
    page = slowest_ranks(many, 1.25)
    rows = re.findall(r"<tr><td>([^<]*)</td><td data-v=\"[^\"]*\">(\d+)</td>", page)
    assert rows == [("5", "1"), ("20", "1"), ("8, 24, 100–129", "32")]
    assert "3 of 3 groups of the 34 ranks" in page


def test_compare_text_of_summaries_without_the_new_keys():
    """A run directory written before the kinds, warnings and capacity compares as before."""
    old = {k: v for k, v in build_report(make_result()).summary.items()
           if not k.startswith("comm_") and k not in ("warnings", "hbm_capacity_gib")}
    text = format_compare([("old", old), ("new", build_report(make_result()).summary)])
    assert re.search(r"^hbm_peak_gib +20\.5 GiB +20\.5 of 32 GiB +0$", text, re.M)
    assert "comm_tp_hidden_s" in text and not EXPONENT.search(text)
