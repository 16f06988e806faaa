"""Scenario files' JSON Schema (`ultracluster schema`, scenario.schema.json): current, and in agreement with
the loader on real scenario files, on what the loader derives and on what it rejects."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from ultracluster.cli import main
from ultracluster.errors import ScenarioError
from ultracluster.scenario import Scenario, load_scenario
from ultracluster.scenario.file_schema import SCHEMA_FILE, render, scenario_json_schema
from ultracluster.scenario.schema import EXPLICIT_KEY

REPO = Path(__file__).resolve().parents[2]
MINIMAL = {"name": "tiny", "model": {"preset": "llama2-7b"}, "training": {"seq_len": 1024, "global_batch": 64},
           "cluster": {"instance": "trn1.32xlarge", "instances": 2}}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = scenario_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(validator, doc) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc))


def test_shipped_schema_is_current(capsys):
    shipped = (REPO / SCHEMA_FILE).read_text(encoding="utf-8")
    assert shipped == render(), (
        f"{SCHEMA_FILE} is stale: the scenario schema (ultracluster/scenario/schema.py) changed. Regenerate it "
        f"from the repository root with:  ultracluster schema > {SCHEMA_FILE}")
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == shipped


def test_every_field_of_the_pydantic_schema_is_described(validator):
    schema, defs = validator.schema, validator.schema["$defs"]
    assert set(schema["properties"]) == set(Scenario.model_fields) | {EXPLICIT_KEY}   # scenario.json's own key
    for name, spec in [("Scenario", schema), *defs.items()]:
        for key, prop in spec["properties"].items():
            assert prop.get("description"), f"{name}.{key} has no description"
    assert schema["additionalProperties"] is False and all(d["additionalProperties"] is False for d in defs.values())


def test_every_shipped_scenario_is_valid(validator, scenarios_dir):
    files = sorted(scenarios_dir.glob("*.yaml"))
    assert len(files) >= 10
    for f in files:
        assert errors(validator, yaml.safe_load(f.read_text())) == [], f.name


def test_derived_values_and_preset_shape_are_optional(validator):
    assert errors(validator, MINIMAL) == []
    load_scenario(MINIMAL)                                     # the loader agrees: nothing else is needed
    shape = {"layers": 4, "hidden": 512, "heads": 8, "ffn": 2048, "mlp": "gelu", "vocab": 1000}
    assert errors(validator, {**MINIMAL, "model": shape}) == []
    load_scenario({**MINIMAL, "model": shape})
    partial = {k: v for k, v in shape.items() if k != "vocab"}
    assert errors(validator, {**MINIMAL, "model": partial})    # no preset and no vocab: both refuse
    with pytest.raises(ScenarioError, match="model.vocab"):
        load_scenario({**MINIMAL, "model": partial})


@pytest.mark.parametrize(("path", "value", "field"), [
    (("model", "preset"), "llama9-1t", "model.preset"),
    (("training", "precision"), "fp16", "training.precision"),
    (("cluster", "instance"), "p5.48xlarge", "cluster.instance"),
    (("cluster", "typo"), 1, "cluster"),
    (("parallelism", "tp"), "8", "parallelism.tp"),
    (("emulation", "instances_per_actor"), 0, "emulation.instances_per_actor"),
    (("faults", "stragglers"), {"fraction": 1.5, "slowdown": 2}, "faults.stragglers.fraction"),
    (("storage",), {"kind": "fsx-lustre", "deployment": "PERSISTENT_2", "capacity_tib": 48,
                    "throughput_mbps_per_tib": 200}, "storage.throughput_mbps_per_tib"),
    (("name",), "Has Spaces", "name"),
])
def test_schema_refuses_what_the_loader_refuses(validator, path, value, field):
    doc = copy.deepcopy(MINIMAL)
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    found = errors(validator, doc)
    assert found and all(e.startswith(field.split(".")[0]) for e in found), found
    with pytest.raises(ScenarioError) as err:
        load_scenario(doc)
    assert any(p.path.startswith(field) for p in err.value.problems), err.value.problems


def test_docs_show_the_editor_comment_and_a_valid_example(validator, scenarios_dir):
    doc = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
    comment = f"# yaml-language-server: $schema=../{SCHEMA_FILE}"
    assert comment in doc
    assert (scenarios_dir / "smoke.yaml").read_text().splitlines()[0] == comment        # the path resolves
    assert (scenarios_dir / ".." / SCHEMA_FILE).resolve() == REPO / SCHEMA_FILE
    examples = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", doc, re.S)]
    full = [e for e in examples if isinstance(e, dict) and "name" in e]
    assert len(full) == 1
    assert errors(validator, full[0]) == []
    scenario = load_scenario(full[0])
    assert (scenario.ranks, scenario.parallelism.dp) == (1024, 4)
