"""A scenario's own operator expressions that go bad: the evaluator never raises (float64, errors silenced); at the
scenario's own shapes a figure that is not finite, is negative or exceeds MAX_WORK is exit 2 naming the operator
and the key; at a layout only the planner tries, that layout is infeasible with the reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ultracluster.cli import main
from ultracluster.errors import EXIT_BAD_INPUT, EXIT_OK, ScenarioError
from ultracluster.operators import _compile
from ultracluster.runner import predict
from ultracluster.scenario import load_scenario

SMOKE = Path(__file__).resolve().parents[2] / "scenarios" / "smoke.yaml"     # hidden 2048, 16 heads, tp 8


def scenario_with(tmp_path: Path, ops: list[dict], **sets) -> Path:
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"operators": ops}))
    doc = yaml.safe_load(SMOKE.read_text())
    doc["operators"] = ["mine.yaml"]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("expr,value", [("1/0", np.inf), ("T/(T-T)", np.inf), ("10**400", np.inf), ("1e400", np.inf),
                                        ("(-1)**0.5", np.nan), ("2*T", 8.0), ("-T", -4.0)])
def test_an_expression_never_raises_and_gives_float64(expr, value):
    problems: list = []
    fn = _compile(expr, "x", problems)
    assert not problems
    for v in ({"T": 4.0}, {"T": np.array([4.0, 4.0])}):
        got = np.asarray(fn(v), dtype=float)
        assert np.array_equal(got, np.broadcast_to(value, got.shape), equal_nan=True)


@pytest.mark.parametrize("op,key,gives", [
    ({"name": "divzero", "where": "layer", "forward": {"tensor": "T/(h-h)"}}, "operators[0].forward.tensor", "inf"),
    ({"name": "huge", "where": "layer", "forward": {"vector": "10**T"}}, "operators[0].forward.vector", "inf"),
    ({"name": "neg", "where": "head", "forward": {"bytes": "-T*V"}}, "operators[0].forward.bytes", "-8.192e+06"),
    ({"name": "negsave", "where": "embedding", "forward": {}, "saved": "0 - T"}, "operators[0].saved", "-2048"),
    ({"name": "big", "where": "layer", "forward": {"tensor": "1e31*T"}}, "operators[0].forward.tensor", "2.048e+34"),
    ({"name": "opt", "where": "optimizer", "forward": {"vector": "P - 1e12"}}, "operators[0].forward.vector",
     "-9.99992e+11 here on stage 0"),
])
def test_a_figure_gone_bad_at_the_scenarios_shapes_is_exit_2_naming_operator_and_key(tmp_path, capsys, op, key, gives):
    path = scenario_with(tmp_path, [op])
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    (problem,) = err.value.problems
    assert problem.path == f"operators[0]: {key}"
    assert f"operator {op['name']} gives {gives}" in problem.allowed
    for command in (["validate"], ["run", "--quiet", "--out", str(tmp_path / "run")]):
        assert main([*command, str(path)]) == EXIT_BAD_INPUT
        err_text = capsys.readouterr().err
        assert f"operators[0]: {key}: given" in err_text and "Traceback" not in err_text
    assert not (tmp_path / "run").exists()


def test_an_expression_fine_at_the_scenarios_shapes_runs(tmp_path):
    """1/(hq - 4)^2 is fine at tp 8 (hq 2) and the run prices it: the step takes longer than without it."""
    path = scenario_with(tmp_path, [{"name": "odd", "where": "layer", "forward": {"vector": "T*h*1e3/((hq - 4)**2)"}}])
    base = predict(load_scenario(SMOKE, ["training.steps=1", "training.warmup_steps=0"]))
    mine = predict(load_scenario(path, ["training.steps=1", "training.warmup_steps=0"]))
    assert mine["feasible"] and mine["step_time_s"] > base["step_time_s"]


def test_a_layout_where_an_expression_goes_bad_is_infeasible_in_the_plan(tmp_path, capsys):
    path = scenario_with(tmp_path, [{"name": "odd", "where": "layer", "forward": {"vector": "T*h/((hq - 4)**2)"}}])
    out = tmp_path / "plan"
    assert main(["plan", str(path), "--tp", "4,8", "--pp", "2", "--top", "1", "--out", str(out), "--quiet"]) == EXIT_OK
    table = pd.read_parquet(out / "plan-full.parquet")
    bad = table[table["tp"] == 4]                 # hq = 16 / 4 = 4: a division by zero
    assert len(bad) and not bad["feasible"].any()
    assert bad["reason"].str.startswith("operator odd: forward.vector is inf at this layout's shapes").all()
    assert table[table["tp"] == 8]["feasible"].any()


@pytest.mark.parametrize("expr", ["-" * 100_000 + "T", "T" + "**T" * 100_000, "+".join(["T"] * 100_000),
                                  "+".join(["T"] * 101)])
def test_an_expression_nested_too_deep_is_a_problem_not_a_crash(expr):
    problems: list = []
    _compile(expr, "operators[0].forward.tensor", problems)
    (problem,) = problems
    assert problem.path == "operators[0].forward.tensor" and "nested at most 100 deep" in problem.allowed
