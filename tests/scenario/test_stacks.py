"""The training stack as a scenario key: its defaults (explicit keys win), its pipeline engine's graph executions,
and what it runs (a combination it does not run is bad input, exit 2, before anything runs)."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ultracluster import chip, stacks
from ultracluster.cluster import build_cluster
from ultracluster.calibration.fitted_files import DEFAULT
from ultracluster.errors import ScenarioError
from ultracluster.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


def doc(stack: str, pp: int = 1, instance: str = "trn1.32xlarge", mlp: str = "swiglu", **training) -> dict:
    return {"name": "t", "stack": stack,
            "model": {"layers": 8, "hidden": 1024, "heads": 8, "ffn": 4096, "mlp": mlp, "vocab": 32000},
            "training": {"seq_len": 2048, "global_batch": 64, **training},
            "parallelism": {"tp": 8, "pp": pp}, "cluster": {"instance": instance, "instances": 2}}


def test_nxd_defaults_follow_its_two_examples():
    # tp_zero1 example: flash by default; the tp_pp example: the materialized core attention
    assert load_scenario(doc("neuronx-distributed")).training.attention == "flash"
    s = load_scenario(doc("neuronx-distributed", pp=2))
    assert (s.training.attention, s.training.zero, s.parallelism.tp_comm_overlap, s.model.dropout) == \
        ("materialized", 1, True, 0.0)


def test_explicit_keys_override_the_stack():
    s = load_scenario(doc("neuronx-distributed", pp=2, attention="flash", zero=0))
    assert (s.training.attention, s.training.zero) == ("flash", 0)
    s = load_scenario(doc("neuronx-distributed", pp=2), ["training.attention=flash"])
    assert s.training.attention == "flash"


def test_nemo_dropout_by_mlp_and_no_zero1():
    gpt = load_scenario(doc("neuronx-nemo-megatron", pp=2, mlp="gelu"))
    llama = load_scenario(doc("neuronx-nemo-megatron", pp=2, mlp="swiglu"))
    assert (gpt.model.dropout, llama.model.dropout) == (0.1, 0.0)
    assert (gpt.training.zero, gpt.parallelism.tp_comm_overlap, gpt.training.attention) == (0, False, "materialized")


def test_axlearn_brings_fsdp_and_lnc2():
    s = load_scenario(doc("axlearn", instance="trn2.48xlarge"))
    assert (s.training.zero, s.cluster.lnc, s.training.recompute) == (3, 2, "full")


def test_custom_is_the_schema_defaults():
    s = load_scenario(doc("custom", pp=2))
    assert (s.training.attention, s.training.zero, s.model.dropout) == ("flash", 1, 0.0)


@pytest.mark.parametrize("stack, change, key", [
    ("axlearn", {"parallelism": {"tp": 8, "pp": 2}}, "parallelism.pp"),
    ("axlearn", {"cluster": {"instance": "trn1.32xlarge", "instances": 2}}, "cluster.instance"),
    ("neuronx-distributed", {"training": {"seq_len": 2048, "global_batch": 64, "zero": 3}}, "training.zero"),
    ("neuronx-nemo-megatron", {"cluster": {"instance": "trn2.48xlarge", "instances": 2}}, "cluster.instance"),
    ("megatron-lm-neuron", {}, "parallelism.pp"),
    ("neuronx-distributed", {"parallelism": {"tp": 8, "pp": 2, "pp_schedule": "gpipe"}}, "parallelism.pp_schedule"),
])
def test_a_stack_refuses_what_it_does_not_run(stack, change, key):
    d = doc(stack, pp=2, instance="trn2.48xlarge" if stack == "axlearn" else "trn1.32xlarge")
    if stack == "axlearn":
        d["parallelism"]["pp"] = 1
    d.update(change)
    with pytest.raises(ScenarioError) as e:
        load_scenario(d)
    problems = e.value.problems
    assert [p.path for p in problems] == [key], problems
    assert stack in problems[0].allowed and "(" in problems[0].allowed    # names the stack and its source


def test_validate_exits_2_naming_stack_and_combination(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc("neuronx-distributed", pp=4, zero=3)))
    out = subprocess.run([sys.executable, "-m", "ultracluster.cli", "validate", str(path)], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 2
    assert "training.zero: given 3" in out.stderr and "neuronx-distributed runs ZeRO 0, 1 with a pipeline (pp=4)" in out.stderr
    assert "Traceback" not in out.stderr


def test_every_shipped_scenario_names_its_stack():
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        assert raw.get("stack") in stacks.NEURON_STACKS, path.name
        load_scenario(path)


@pytest.mark.parametrize("stack, pp, fwd, bwd", [
    ("neuronx-distributed", 2, 3, 3),          # receive, forward, send; receive, backward, send
    ("neuronx-distributed", 1, 1, 0),          # one graph per microbatch
    ("neuronx-nemo-megatron", 2, 2, 2),        # forward, fused exchange; backward, exchange
    ("custom", 2, 0, 0),
])
def test_the_engine_adds_its_graphs_to_every_microbatch(stack, pp, fwd, bwd):
    d = doc(stack, pp=pp)
    if stack == "neuronx-nemo-megatron":
        d["training"]["zero"] = 0
    s = load_scenario(d)
    g = 2.5e-3
    off = DEFAULT.with_(graph_s_nxd=0.0, graph_s_nemo=0.0)
    on = DEFAULT.with_(graph_s_nxd=g, graph_s_nemo=g)
    a = chip.chunk_times(s, build_cluster(s, 2, off))
    b = chip.chunk_times(s, build_cluster(s, 2, on))
    np.testing.assert_allclose(b.forward_s - a.forward_s, fwd * g, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(b.backward_s - a.backward_s, bwd * g, rtol=1e-9, atol=1e-15)


def test_support_entries_cite_a_source():
    for name in stacks.NEURON_STACKS:
        sup = stacks.STACKS[name].support
        for entry in (sup.chips, sup.pp, sup.zero, sup.zero_with_pp, sup.schedules, sup.cp, sup.ep, sup.lnc):
            assert entry[1], (name, entry)
        assert stacks.STACKS[name].defaults_source and stacks.STACKS[name].engine.source


def test_a_scenario_reloaded_from_its_dict_is_timed_as_the_original(tmp_path):
    """scenario.json carries the stack-filled keys the scenario gave itself (`explicit_keys`): a NeMo scenario
    dumped and reloaded keeps them, so a layout another stack runs (the planner's, the interval's) fills the same
    keys and is timed the same (issue 43: it came out materialized attention instead of flash)."""
    import json

    import pandas as pd

    from ultracluster.layouts.evaluator import Evaluator
    from ultracluster.layouts.setting_times import one_step
    from ultracluster.layouts.space import own_row
    from ultracluster.layouts.steps import evaluate

    sc = load_scenario(SCENARIOS / "calib-llama2-7b-tp8-nemo-full.yaml")
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(sc.to_dict()))
    back = load_scenario(json.loads(path.read_text()))
    assert back == sc and stacks.explicit(back) == stacks.explicit(sc) == {"stack", "training.recompute",
                                                                            "training.zero"}
    assert "training.attention" not in stacks.explicit(back)
    times = []
    for s in (sc, back):
        cell = stacks.for_cell(s, "neuronx-distributed", False)
        assert cell.training.attention == "flash"            # NxD's default without a pipeline, not given here
        row = pd.DataFrame([{**own_row(one_step(s)), "stack": "neuronx-distributed"}])
        times.append(float(evaluate(Evaluator(one_step(s)), row)["step_time_s"].iloc[0]))
    assert times[0] == times[1] and math.isfinite(times[0])
    # a --set on the reloaded dict is explicit too; a bad list is named
    again = load_scenario(json.loads(path.read_text()), ["training.attention=materialized"])
    assert "training.attention" in stacks.explicit(again)
    with pytest.raises(ScenarioError) as err:
        load_scenario({**json.loads(path.read_text()), "explicit_keys": ["training.nonsense"]})
    assert err.value.problems[0].path == "explicit_keys"


def test_the_summary_names_the_stack_that_timed_the_run():
    from ultracluster.runner import predict

    s = predict(load_scenario(SCENARIOS / "calib-llama2-7b-tp8-nemo-full.yaml", ["training.steps=1",
                                                                                "training.warmup_steps=0"]))
    assert s["stack"] == "neuronx-nemo-megatron"
