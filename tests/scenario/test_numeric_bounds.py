"""Every numeric scenario key has physical bounds, checked at validation, so that what `validate` accepts, `run`
can time (issue 47). The fields are enumerated from the pydantic model, never listed by hand: a key added to the
schema is tested here at once. For each, hostile values (0, -1, 1e-320, 1e308, NaN, infinity, a string, a list, a
bool) are either refused by validation naming the key, or run to a clean end in this process (the stages of `run`
with in-process shards, its report and its run directory: no Ray), with finite figures."""
from __future__ import annotations

import copy
import math
import types
import typing
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st
from pydantic import BaseModel

from ultracluster.errors import ScenarioError
from ultracluster.scenario import Scenario, load_scenario
from ultracluster.scenario.schema import BOUNDS_KEY

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scenarios" / "smoke.yaml"
HOSTILE = [0, -1, 1e-320, 1e308, float("nan"), float("inf"), "a string", [1], True]
NUMBER_KINDS = (int, float)


def _kinds(annotation) -> tuple:
    """Every type an annotation admits (through X | None, Annotated, list[...] and Literal)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return tuple(k for a in typing.get_args(annotation) for k in _kinds(a))
    if origin is typing.Literal:
        return tuple(type(a) for a in typing.get_args(annotation))
    return (annotation,)


def numeric_fields(model: type[BaseModel] = Scenario, prefix: str = "") -> list[str]:
    """Every numeric key of the schema as a path (`faults.degraded[0].efa_nics`), from the pydantic model; a key
    whose annotation admits an int or a float (a bool is no number) is numeric, and a model inside is walked, as
    is the model of a list's items."""
    out = []
    for name, field in model.model_fields.items():
        kinds = _kinds(field.annotation)          # pydantic keeps Annotated's validators in field.metadata
        for k in kinds:
            if isinstance(k, type) and issubclass(k, BaseModel):
                out += numeric_fields(k, f"{prefix}{name}.")
            elif typing.get_origin(k) is list:
                (item,) = typing.get_args(k)
                if isinstance(item, type) and issubclass(item, BaseModel):
                    out += numeric_fields(item, f"{prefix}{name}[0].")
        if any(k in NUMBER_KINDS for k in kinds):
            out.append(prefix + name)
    return list(dict.fromkeys(out))


FIELDS = numeric_fields()


def base_doc() -> dict:
    """The smoke scenario with every optional section present (so that each numeric key has a home): storage,
    checkpoints, faults with stragglers and a degraded instance, a budget, a price, a sweep section."""
    doc = yaml.safe_load(SMOKE.read_text())
    doc["training"].update(steps=1, warmup_steps=0, budget_tokens=1e12)
    doc["cluster"]["price_per_hour_usd"] = 21.5
    doc["cluster"]["network"] = {}
    doc["storage"] = {"kind": "fsx-lustre", "deployment": "PERSISTENT_2", "capacity_tib": 4.8,
                      "throughput_mbps_per_tib": 250}
    doc["checkpoint"] = {"every_steps": 1, "mode": "sync"}
    doc["faults"] = {"stragglers": {"fraction": 0.1, "slowdown": 1.5}, "instance_mtbf_hours": 2000.0,
                     "degraded": [{"instances": 1, "efa_nics": 4, "neuronlink_scale": 0.5}]}
    doc["sweep"] = {"vary": {"seed": [0, 1]}}
    return doc


def moe_doc() -> dict:
    """The base with a mixture of experts (model.moe's keys live there)."""
    doc = base_doc()
    doc["model"]["moe"] = {"experts": 8, "top_k": 2, "imbalance": 1.2}
    return doc


def put(doc: dict, path: str, value) -> dict:
    doc = copy.deepcopy(doc)
    node = doc
    parts = path.replace("[0]", ".0").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[parts[-1]] = value
    return doc


def test_the_fields_are_every_numeric_key_of_the_schema():
    for path in ("training.warmup_steps", "cluster.network.efa_gbps", "storage.capacity_tib",
                 "faults.degraded[0].neuronlink_scale", "model.moe.imbalance", "checkpoint.d2h_gbps_per_chip",
                 "faults.stragglers.slowdown", "emulation.payload_scale", "sweep.hours", "seed"):
        assert path in FIELDS
    assert "name" not in FIELDS and "training.precision" not in FIELDS and len(FIELDS) >= 50


@pytest.mark.parametrize("path", [f for f in FIELDS if f in (
    "cluster.network.efa_gbps", "cluster.network.efa_latency_us", "cluster.network.neuronlink_latency_us",
    "cluster.network.neuronlink_gbps_per_chip", "storage.capacity_tib", "storage.client_gbps",
    "storage.metadata_iops", "faults.stragglers.slowdown", "checkpoint.d2h_gbps_per_chip")])
def test_the_keys_that_crashed_refuse_their_extremes_naming_the_bound(path):
    # issue 47: a rate at 1e-320 or a latency, capacity or slowdown at 1e308 gave OverflowError, RuntimeError,
    # ValueError or AssertionError after validate had accepted it
    for value in (1e-320, 1e308):
        if value == 1e-320 and path.endswith(("latency_us", "slowdown")):
            continue                               # a tiny latency is no crash; a slowdown is >= 1 anyway
        with pytest.raises(ScenarioError) as err:
            load_scenario(put(base_doc(), path, value))
        (problem,) = err.value.problems
        assert problem.path == path and "<=" in problem.allowed and ">=" in problem.allowed, problem
        assert ";" in problem.allowed                        # the unit and the reason for each end


def test_every_bounded_float_says_why():
    def walk(model: type[BaseModel], prefix=""):
        for name, field in model.model_fields.items():
            for k in _kinds(field.annotation):
                if isinstance(k, type) and issubclass(k, BaseModel):
                    yield from walk(k, f"{prefix}{name}.")
                elif typing.get_origin(k) is list and issubclass(typing.get_args(k)[0], BaseModel):
                    yield from walk(typing.get_args(k)[0], f"{prefix}{name}[0].")
            if float in _kinds(field.annotation):
                yield prefix + name, field
    unbounded = []
    for path, field in walk(Scenario):
        highs = [m for m in field.metadata if hasattr(m, "le") or hasattr(m, "lt")]
        if not highs:
            unbounded.append(path)
        elif (field.json_schema_extra or {}).get(BOUNDS_KEY) is None and not any(
                getattr(m, "le", None) == 1 or getattr(m, "lt", None) == 1 or getattr(m, "le", 2) <= 1
                for m in highs):
            unbounded.append(f"{path} (no reason)")                 # a fraction (<= 1) explains itself
    assert unbounded == []


@lru_cache(maxsize=None)
def _run(text: str) -> dict:
    """The summary of a scenario (its YAML) through the stages of `run` in this process: emulate with in-process
    shards, the interval, the report and its run directory, the printed summary (no Ray: `runner.run` with
    `local_shards`)."""
    import tempfile

    from ultracluster.report import format_summary
    from ultracluster.runner import run
    from ultracluster.shards.local import local_shards

    sc = load_scenario(yaml.safe_load(text))
    with tempfile.TemporaryDirectory() as tmp:
        report = run(sc, out=Path(tmp) / "run", shards_factory=local_shards)
        format_summary({**report.summary, **report.emulation})
        assert (Path(tmp) / "run" / "summary.json").is_file()
    return report.summary


def refused_or_runs(doc: dict, path: str, value) -> str:
    """'refused' (a problem naming the key, or a key it depends on) or 'ran' (finite figures); anything else
    raises."""
    try:
        sc = load_scenario(put(doc, path, value))
    except ScenarioError as err:
        assert err.problems and all(len(str(p)) < 600 for p in err.problems)
        return "refused"
    if path.startswith("sweep."):
        return "accepted"                       # `run` ignores the sweep section; sweep.hours: test_sweep_bounds
    summary = _run(yaml.safe_dump(sc.to_dict()))
    if summary["feasible"]:
        for key in ("step_time_s", "tokens_per_s", "mfu"):
            assert isinstance(summary[key], float) and math.isfinite(summary[key]) and summary[key] > 0, \
                (path, value, key, summary[key])
        assert math.isfinite(summary.get("step_time_high_s", 1.0))
    return "ran"


@pytest.mark.parametrize("path", FIELDS)
def test_every_numeric_field_refuses_a_hostile_value_or_runs_it(path):
    doc = moe_doc() if path.startswith("model.moe") else base_doc()
    results = {repr(v): refused_or_runs(doc, path, v) for v in HOSTILE}
    # no value of the wrong kind and no float beyond every physical bound is accepted; 0, -1 and 1e-320 may be
    # (a count of 0 prefetch steps, a dropout of 1e-320), and then they ran
    must_refuse = ["nan", "inf", "'a string'", "True", "1e+308"]
    if path != "faults.degraded[0].instances":             # a list of instance ids: [1] is one
        must_refuse.append("[1]")
    assert {v: results[v] for v in must_refuse} == dict.fromkeys(must_refuse, "refused"), results


@settings(max_examples=60)
@given(path=st.sampled_from(FIELDS), value=st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(min_value=1e-6, max_value=1e6)))
def test_any_number_in_any_numeric_field_is_refused_or_runs(path, value):
    doc = moe_doc() if path.startswith("model.moe") else base_doc()
    assert refused_or_runs(doc, path, value) in ("refused", "ran", "accepted")
