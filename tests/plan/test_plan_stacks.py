"""The planner searches what a stack runs: a scenario that names its stack within it, one that names none over every
Neuron stack that runs on the chips searched (each row labelled with its stack, priced as that stack runs it, with
its defaults for the keys the scenario did not give), `--stack` narrowing or comparing, LNC searched on Trn2 and
fixed by `--lnc`. Searched in this process, no replays."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import yaml

from ultracluster import load_scenario, stacks
from ultracluster.cli import main
from ultracluster.errors import ScenarioError
from ultracluster.layouts import steps
from ultracluster.layouts.space import SearchSpace, count_layouts, enumerate_layouts, searched
from ultracluster.plan import plan
from ultracluster.plan.output import scenario_dict

SEVEN_B = {"name": "plan-7b-stacks", "model": {"preset": "llama2-7b"},
           "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
           "parallelism": {"tp": 8, "pp": 2}, "cluster": {"instance": "trn1.32xlarge", "instances": 2}}
SMALL = SearchSpace(micro_batches=(1, 2), virtual_stages=(2,), max_cp=2)


def scenario(**changes) -> dict:
    d = {k: dict(v) if isinstance(v, dict) else v for k, v in SEVEN_B.items()}
    for k, v in changes.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return d


def test_runs_is_unsupported_over_every_combination():
    """`stacks.runs` (the planner's vectorized mask) says a layout runs exactly where `stacks.unsupported` (what
    load_scenario refuses) finds nothing, for every stack and combination."""
    grid = list(itertools.product(("trn1", "trn2", "trn3"), (1, 2), (0, 1, 3), ("gpipe", "1f1b", "interleaved"),
                                  (1, 2), (1, 2), (1, 2)))
    cols = [np.array(c, dtype=object if isinstance(c[0], str) else None) for c in zip(*grid)]
    for name in stacks.NAMES:
        mask = stacks.runs(name, *cols)
        expect = [not stacks.unsupported(name, *g) for g in grid]
        assert mask.tolist() == expect, name
        assert 0 < mask.sum() <= len(grid)


def test_a_scenario_naming_no_stack_is_searched_over_the_neuron_stacks_that_run_on_its_chips():
    base = load_scenario(scenario())
    assert stacks.explicit(base) == frozenset() and base.stack == "custom"
    assert searched(base, SMALL) == ("neuronx-distributed", "neuronx-nemo-megatron", "megatron-lm-neuron")
    two = SearchSpace(instance_types=("trn1.32xlarge", "trn2.48xlarge"), micro_batches=(1,), virtual_stages=(2,),
                      max_cp=2)
    assert searched(base, two) == stacks.NEURON_STACKS
    t = enumerate_layouts(base, two)
    assert len(t) - count_layouts(base, two)[0] in (0, 1)       # enumerate may add the scenario's own layout
    chip = t["instance"].map(stacks.chip_of).to_numpy(dtype=object)
    assert stacks.runs("custom", chip, t["pp"], t["zero"], t["pp_schedule"], t["cp"], t["ep"], t["lnc"]).all()
    for name, rows in t.groupby("stack"):
        assert stacks.runs(name, chip[rows.index], rows["pp"], rows["zero"], rows["pp_schedule"], rows["cp"],
                           rows["ep"], rows["lnc"]).all(), name
    # what the issue saw is gone: no ZeRO-3 with a pipeline, no GPipe, AXLearn only on trn2 at LNC 2 with FSDP
    assert not ((t["zero"] == 3) & (t["pp"] > 1)).any() and "gpipe" not in set(t["pp_schedule"])
    ax = t[t["stack"] == "axlearn"]
    assert len(ax) and set(ax["instance"]) == {"trn2.48xlarge"} and set(ax["lnc"]) == {2} and set(ax["zero"]) == {3}
    assert set(t.loc[t["stack"] == "neuronx-distributed", "lnc"]) == {1, 2}
    # Megatron-LM's fork runs without sequence parallelism (its default), the others with it whenever tp > 1
    meg = t[t["stack"] == "megatron-lm-neuron"]
    assert len(meg) and not meg["sequence_parallel"].any() and (meg["pp"] == 1).all()
    nxd = t[t["stack"] == "neuronx-distributed"]
    assert (nxd["sequence_parallel"] == (nxd["tp"] > 1)).all()
    # every row is a scenario its stack runs: load_scenario (which refuses what a stack does not run) takes it
    for i in range(0, len(t), max(1, len(t) // 60)):
        row = t.iloc[i]
        sc = load_scenario(scenario_dict(base, row, f"s-{i}"))
        assert (sc.stack, sc.parallelism.tp, sc.parallelism.pp, sc.training.zero) == \
            (row["stack"], row["tp"], row["pp"], row["zero"])


def test_a_scenario_naming_its_stack_is_searched_within_it_and_lnc_is_a_search_axis():
    base = load_scenario(scenario(stack="axlearn", parallelism={"tp": 8, "pp": 1},
                                  cluster={"instance": "trn2.48xlarge", "instances": 1}))
    t = enumerate_layouts(base, SMALL)
    assert set(t["stack"]) == {"axlearn"} and set(t["zero"]) == {3} and set(t["pp"]) == {1}
    nxd = load_scenario(scenario(stack="neuronx-distributed", cluster={"instance": "trn2.48xlarge", "instances": 1}))
    both = enumerate_layouts(nxd, SMALL)
    assert set(both["stack"]) == {"neuronx-distributed"} and set(both["lnc"]) == {1, 2}
    fixed = enumerate_layouts(nxd, SearchSpace(micro_batches=(1, 2), virtual_stages=(2,), max_cp=2, lnc=(1,)))
    assert set(fixed["lnc"]) == {1} and len(fixed) < len(both)
    # `custom` named is searched as it is: every layout, ZeRO-3 with a pipeline and GPipe included
    custom = enumerate_layouts(load_scenario(scenario(stack="custom")), SMALL)
    assert set(custom["stack"]) == {"custom"} and "gpipe" in set(custom["pp_schedule"])
    assert ((custom["zero"] == 3) & (custom["pp"] > 1)).any()


def test_each_stacks_defaults_fill_only_the_keys_the_scenario_did_not_give():
    plain = load_scenario(scenario())
    flash = load_scenario(scenario(training={**SEVEN_B["training"], "attention": "flash"}))
    assert "training.attention" in stacks.explicit(flash) and "training.attention" not in stacks.explicit(plain)
    nemo, nemo_flash = (stacks.for_cell(s, "neuronx-nemo-megatron", True) for s in (plain, flash))
    assert (nemo.stack, nemo.training.attention, nemo.parallelism.tp_comm_overlap) == \
        ("neuronx-nemo-megatron", "materialized", False)
    assert nemo_flash.training.attention == "flash"                         # the scenario's own, explicit
    nxd = load_scenario(scenario(stack="neuronx-distributed"))              # pp 2: the tp_pp example's attention
    assert nxd.training.attention == "materialized"
    assert stacks.for_cell(nxd, "neuronx-distributed", False).training.attention == "flash"
    assert stacks.for_cell(nxd, "neuronx-distributed", True) is nxd
    # a top-N.yaml carries the row's stack and what it priced
    d = scenario_dict(plain, {**enumerate_layouts(plain, SMALL).iloc[0].to_dict(), "stack": "neuronx-nemo-megatron"},
                      "x")
    assert (d["stack"], d["training"]["attention"], d["parallelism"]["tp_comm_overlap"]) == \
        ("neuronx-nemo-megatron", "materialized", False)


def test_rows_of_several_stacks_are_timed_as_each_stack_alone_times_them():
    """One evaluation over rows of three stacks (Evaluator variants sharing clusters and collectives, each row's engine
    graphs) gives each row the bits an Evaluator of its own stack's scenario gives it."""
    base = load_scenario(scenario(parallelism={"tp": 8, "pp": 2}))
    t = enumerate_layouts(base, SearchSpace(micro_batches=(1,), virtual_stages=(2,), max_cp=1))
    assert t["stack"].nunique() == 3 and (t["pp"] > 1).any() and (t["pp"] == 1).any()
    together = steps.evaluate(steps.Evaluator(base), t)
    assert together["feasible"].sum() > 20
    for (name, piped), rows in t.groupby([t["stack"], t["pp"] > 1]):
        alone = steps.evaluate(steps.Evaluator(stacks.for_cell(base, name, piped)), rows.drop(columns="stack"))
        got = together.loc[rows.index]
        np.testing.assert_array_equal(got["step_time_s"].to_numpy(), alone["step_time_s"].to_numpy())
        np.testing.assert_array_equal(got["hbm_peak_gib"].to_numpy(), alone["hbm_peak_gib"].to_numpy())
    # the stacks' engines and defaults price the same layout differently
    key = ["instance", "instances", "lnc", "tp", "pp", "cp", "dp", "micro_batch", "recompute", "pp_schedule",
           "virtual_stages", "zero"]
    joined = t.assign(step=together["step_time_s"]).pivot_table(index=key, columns="stack", values="step",
                                                                  aggfunc="first").dropna()
    assert len(joined) and (joined["neuronx-distributed"] != joined["neuronx-nemo-megatron"]).any()


@pytest.fixture(scope="module")
def compared():
    base = load_scenario(scenario(parallelism={"tp": 8, "pp": 1}, cluster={"instance": "trn2.48xlarge",
                                                                          "instances": 1}))
    return plan(base, SearchSpace(micro_batches=(1, 2), virtual_stages=(2,), max_cp=1,
                                  stacks=("neuronx-distributed", "axlearn")), replay=False, top=3)


def test_stack_compares_the_best_layout_of_each(compared):
    s, t = compared.summary, compared.table
    assert s["search"]["stacks"] == ["neuronx-distributed", "axlearn"]
    assert set(t["stack"]) == {"neuronx-distributed", "axlearn"}
    per = {r["stack"]: r for r in s["best_per_stack"]}
    assert set(per) == {"neuronx-distributed", "axlearn"}
    for name, rec in per.items():             # each the best of its stack by the value that ranks
        rows = t[(t["stack"] == name) & t["rank_value"].notna() & t["feasible"] & (t["same_as"] == "")]
        assert rec["rank_value"] == pytest.approx(rows["rank_value"].max())
        assert rec["label"].startswith({"neuronx-distributed": "nxd: ", "axlearn": "axlearn: "}[name])
    assert sorted(t.loc[t["best_of_stack"], "stack"]) == ["axlearn", "neuronx-distributed"]
    from ultracluster.plan import format_plan
    text = format_plan(compared)
    assert "best of each stack (fast path):" in text and "stacks searched, each within what it runs: " \
        "neuronx-distributed, axlearn" in text


def test_a_layout_no_stack_runs_is_not_ranked_and_says_why():
    base = load_scenario(scenario(training={**SEVEN_B["training"], "zero": 3}))    # ZeRO-3 with pp 2
    result = plan(base, SearchSpace(micro_batches=(1,), virtual_stages=(2,), max_cp=1), replay=False, top=2)
    own = result.summary["scenario_layout"]
    assert own["feasible"] is False and own["stack"] == "custom"
    assert own["reason"].startswith("no stack searched runs it (the scenario names none): training.zero 3: "
                                    "neuronx-distributed runs ZeRO 0, 1 with a pipeline")
    assert all(r["stack"] != "custom" for r in result.top)


def test_stack_flag_takes_the_labels_a_plan_shows():
    from ultracluster.layouts.space import search_space

    assert search_space(stacks="nxd, nemo,megatron-lm-neuron,nxd").stacks == (
        "neuronx-distributed", "neuronx-nemo-megatron", "megatron-lm-neuron")
    with pytest.raises(ScenarioError) as e:
        search_space(stacks="nxd,nvidia")
    assert "(or the labels a plan shows: nxd, nemo, megatron)" in str(e.value)


@pytest.mark.parametrize("flags, first", [
    (["--stack", "nxd,nvidia"], "error: --stack: given 'nxd,nvidia'; allowed: a comma-separated list from: "
                                "neuronx-distributed, "),
    (["--stack", "axlearn"], "error: --stack: given 'axlearn'; allowed: stacks that run on an instance type searched "
                             "(trn1.32xlarge): neuronx-distributed, neuronx-nemo-megatron, megatron-lm-neuron, custom; "
                             "axlearn runs on trn2*, trn3*"),
    (["--lnc", "3"], "error: --lnc: given '3'; allowed: a comma-separated list of LNC settings, 1 or 2"),
    (["--lnc", "2"], "error: --lnc: given '2'; allowed: an instance type with an LNC setting (trn2*, trn3*) among "
                     "those searched (trn1.32xlarge: LNC 1 only)"),
])
def test_bad_stack_and_lnc_flags_are_one_line_and_exit_2(scenarios_dir, tmp_path, capsys, flags, first):
    rc = main(["plan", str(scenarios_dir / "smoke.yaml"), *flags, "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(first), err
    assert not (tmp_path / "p").exists()
