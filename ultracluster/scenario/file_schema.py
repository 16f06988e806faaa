"""Scenario schema (pydantic) → JSON Schema of a scenario *file*, for editors (`ultracluster schema`).

The pydantic `Scenario` describes a *resolved* scenario: every derived value filled in. A file may leave
those out, so the generated schema is adjusted where `load.py` fills or rewrites a field before
validation:

* derived values are optional: `model.kv_heads`, `parallelism.dp`, `parallelism.sequence_parallel`,
  `cluster.lnc`, `cluster.ultraserver`; a section left with no required key is optional itself;
* the model's shape is required only without `model.preset`, whose names are listed;
* `operators` lists library file paths (the resolved scenario inlines their contents), and
  `calibration.profile` names a profile file (inlined likewise, as `calibration.document`);
* `explicit_keys`, which scenario.json carries (the stack-filled keys the scenario gave itself), is allowed;
* checks written as validators are spelled out: `emulation.instances_per_actor` ("auto" or a count) and
  the published FSx throughput tiers of each `storage.deployment`.

Everything else (keys, types, bounds, allowed values, defaults and descriptions) is taken from the pydantic
models, so a field added there appears here. The repository ships the result as `scenario.schema.json`;
`tests/scenario/test_file_schema.py` fails when it is stale.
"""
from __future__ import annotations

import copy
import json
from typing import Any

from .presets import PRESETS
from .schema import EXPLICIT_KEY, Scenario

SCHEMA_FILE = "scenario.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: (definition, field) pairs `load.py` derives when the file leaves them out.
DERIVED = (("ModelSpec", "kv_heads"), ("ParallelismSpec", "dp"), ("ParallelismSpec", "sequence_parallel"),
           ("ClusterSpec", "lnc"), ("ClusterSpec", "ultraserver"))


def _model_shape(defs: dict[str, Any]) -> None:
    model = defs["ModelSpec"]
    preset_keys = {k for shape in PRESETS.values() for k in shape}
    shape = [k for k in model.get("required", []) if k in preset_keys]
    model["required"] = [k for k in model.get("required", []) if k not in shape]
    if shape:
        model["anyOf"] = [{"required": ["preset"]}, {"required": shape}]
    model["properties"]["preset"] = {
        "description": model["properties"]["preset"].get("description", ""),
        "enum": sorted(PRESETS),
        "type": "string",
    }


def _storage_tiers(defs: dict[str, Any]) -> None:
    from ultracluster.storage import TIERS  # the storage model owns the FSx tables

    by_deployment: dict[str, list[float]] = {}
    for deployment, tier in sorted(TIERS):
        by_deployment.setdefault(deployment, []).append(tier)
    defs["StorageSpec"]["allOf"] = [
        {"if": {"properties": {"deployment": {"const": d}}, "required": ["deployment"]},
         "then": {"properties": {"throughput_mbps_per_tib": {"enum": tiers}}}}
        for d, tiers in by_deployment.items()
    ]


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario file.

    Returns:
        The schema as a JSON-able dict, deterministic (`json.dumps(..., indent=2)` of it is what
        `ultracluster schema` prints and `scenario.schema.json` holds).
    """
    schema = copy.deepcopy(Scenario.model_json_schema(mode="validation"))
    defs = schema["$defs"]
    for name, field in DERIVED:
        spec = defs[name]
        spec["required"] = [k for k in spec.get("required", []) if k != field]
    _model_shape(defs)
    _storage_tiers(defs)
    defs["EmulationSpec"]["properties"]["instances_per_actor"].update(
        anyOf=[{"const": "auto"}, {"type": "integer", "minimum": 1}])
    defs["CalibrationSpec"]["properties"].pop("document")      # filled by the loader, never written by hand
    operators = schema["properties"]["operators"]
    operators["items"] = {"type": "string", "description": "An operator library file (YAML), relative to the "
                                                           "scenario file."}
    from ultracluster.stacks import STACK_KEYS       # the keys a stack fills: what EXPLICIT_KEY may list

    schema["properties"][EXPLICIT_KEY] = {
        "description": "Written by ultracluster in scenario.json (`Scenario.to_dict`): the stack-filled keys the "
                       "scenario gave itself, so that a reloaded scenario is timed as the original; a file written "
                       "by hand need not name it (every key it gives is its own).",
        "type": "array", "items": {"enum": sorted(STACK_KEYS + ("stack",)), "type": "string"}}
    for name, prop in schema["properties"].items():
        ref = prop.get("$ref", "").rsplit("/", 1)[-1]
        if ref in defs and not defs[ref].get("required") and "anyOf" not in defs[ref] and name in schema["required"]:
            schema["required"].remove(name)
    for spec in defs.values():
        if not spec.get("required"):
            spec.pop("required", None)
    schema.update({"$schema": DIALECT, "title": "ultracluster scenario",
                   "description": "A scenario file of ultracluster (docs/scenarios.md). Generated from the "
                                  "package's pydantic schema by `ultracluster schema`: do not edit by hand."})
    return {k: schema[k] for k in ("$schema", "title", "description", *[k for k in schema if k not in
                                                                        ("$schema", "title", "description")])}


def render() -> str:
    """`scenario_json_schema()` as the text of `scenario.schema.json` (2-space indent, trailing newline)."""
    return json.dumps(scenario_json_schema(), indent=2, ensure_ascii=False) + "\n"
