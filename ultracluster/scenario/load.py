"""Scenario loading: YAML file or dict (+ ``--set key.path=value`` overrides) -> validated, resolved ``Scenario``.

Normalize, then validate, then check (Ciw's fill_out -> validify): read the YAML, apply the overrides, fill
the model shape from its preset, derive the values docs/scenarios.md leaves to the emulator (``parallelism.dp``,
``sequence_parallel``, ``cluster.lnc``, ``cluster.ultraserver``, ``model.kv_heads``), validate with the
pydantic schema, then run the cross-field rules. Every problem of every stage is collected and raised
together as one ``ScenarioError`` whose problems name the field path, the value given and what is allowed.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import os
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from ultracluster.cluster.catalog import INSTANCES, ranks_per_instance
from ultracluster.errors import Problem, ScenarioError, kind_of
from ultracluster.step.counts import data_parallel, sequence_parallel_default, ultraserver_default

from .. import stacks
from .checks import check, check_bounds
from .presets import PRESETS
from .schema import BOUNDS_KEY, EXPLICIT_KEY, ClusterSpec, FaultsSpec, ModelSpec, ParallelismSpec, Scenario, TrainingSpec
from ..yaml_input import InputError, load_yaml, read_yaml_file

MISSING = "<missing>"
_SECTIONS: dict[str, type[BaseModel]] = {  # the sections the cross-field rules read
    "model": ModelSpec, "training": TrainingSpec, "parallelism": ParallelismSpec, "cluster": ClusterSpec,
}


def load_scenario(source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> Scenario:
    """Loads, resolves and validates a scenario.

    Args:
        source: path of a scenario YAML file, or the scenario as a dict (not modified).
        overrides: ``key.path=value`` strings (the CLI's ``--set``), applied before validation; the value is
            read as YAML (``8`` is an integer, ``true`` a boolean, ``1e-6`` a float).

    Returns:
        The resolved scenario: defaults filled, model shape taken from its preset, ``dp``, ``lnc``,
        ``ultraserver``, ``sequence_parallel`` and ``kv_heads`` derived where not given.

    Raises:
        ScenarioError: every problem found in the file, the overrides, the schema and the cross-field rules.
    """
    raw, where, problems = _read(source)
    if raw is None:
        raise ScenarioError(problems, where)
    recorded, bad = _recorded_explicit(raw)
    problems += bad
    problems += _apply_overrides(raw, overrides)
    problems += _inline_operators(raw, where)
    problems += _inline_calibration(raw, where)
    preset_unknown = _apply_preset(raw)
    given = stacks.explicit_keys(raw) if recorded is None else \
        recorded | stacks.explicit_keys(_overridden(overrides))        # a scenario.json: its own, and the --set
    stacks.apply_defaults(raw)
    dp_given = _resolve(raw)
    bounds = check_bounds(raw)
    if bounds:          # checked first: a count beyond its bound is the problem, not what is derived from it
        raise ScenarioError(problems + bounds, where)
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            problem = _problem(error)
            if not (preset_unknown and problem.path.startswith("model.") and problem.given == MISSING):
                problems.append(problem)
        sections = [_section(raw, name, spec) for name, spec in _SECTIONS.items()]
        faults = _section(raw, "faults", FaultsSpec) if raw.get("faults") is not None else None
    else:
        sections = [scenario.model, scenario.training, scenario.parallelism, scenario.cluster]
        faults = scenario.faults
    problems += check(*sections, dp_given=dp_given, faults=faults)
    if not problems:
        problems += stacks.check(scenario)
    if not problems:   # the scenario's own operators at its own shapes (scenario.library)
        from .library import check_operators
        problems += check_operators(scenario)
    if problems:
        raise ScenarioError(problems, where)
    scenario._explicit = given
    return scenario


MAX_LIBRARIES = 64      # operator libraries a scenario lists (a few in practice: docs/operators.md)


def _recorded_explicit(raw: dict[str, Any]) -> tuple[frozenset[str] | None, list[Problem]]:
    """Pop EXPLICIT_KEY (a scenario's dict, scenario.json, lists the stack-filled keys it gave itself:
    `Scenario.to_dict`) from `raw`: (those keys, or None when absent; the problem of a bad list)."""
    if EXPLICIT_KEY not in raw:
        return None, []
    value = raw.pop(EXPLICIT_KEY)
    allowed = stacks.STACK_KEYS + ("stack",)
    if not (isinstance(value, list) and all(isinstance(k, str) and k in allowed for k in value)):
        return None, [Problem(EXPLICIT_KEY, value, "a list of the stack-filled keys the scenario gave itself, each "
                                                   "one of: " + ", ".join(allowed))]
    return frozenset(value), []


def _overridden(overrides: Sequence[str]) -> dict[str, Any]:
    """The keys `overrides` set, as a nested dict (their values None): what `stacks.explicit_keys` reads."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, _ = item.partition("=")
        node = out
        *parents, last = [p for p in key.strip().split(".") if p] or [""]
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        if sep and last:
            node[last] = None
    return out


def _inline_operators(raw: dict[str, Any], where: str | None) -> list[Problem]:
    """Replace each `operators` file path by the library it holds, validated like the scenario itself.

    Inlining carries the library inside the Scenario to every actor (on any node) and into scenario.json.
    """
    from ..operators import parse_library  # the operator library module owns its format

    entries = raw.get("operators")
    if entries is None:
        return []
    if not isinstance(entries, list):
        return [Problem("operators", entries, "a list of operator library files (YAML)")]
    if len(entries) > MAX_LIBRARIES:     # counted before any is read: each read and checked costs tens of ms
        raw["operators"] = []            # the one problem, not one per entry from the schema
        return [Problem("operators", f"a list of {len(entries):,} libraries",
                        f"at most {MAX_LIBRARIES} operator libraries (each adds or replaces operators by name; "
                        f"merge them into fewer files)")]
    problems: list[Problem] = []
    docs: list[Any] = []
    seen: dict[Path, int] = {}
    for i, entry in enumerate(entries):
        at = f"operators[{i}]"
        if isinstance(entry, dict):
            doc = entry
        elif isinstance(entry, str):
            # a relative path is the scenario file's neighbour (the working directory's for a mapping); an inlined
            # library (a dict, as every loaded Scenario carries) needs no directory, not even an existing cwd
            base = Path(where).parent if where else Path.cwd()
            path = (base / entry) if not Path(entry).is_absolute() else Path(entry)
            key = Path(os.path.abspath(path))
            if key in seen:              # one file twice adds nothing: said, never read again
                problems.append(Problem(at, entry, f"each library once (operators[{seen[key]}] names the same "
                                                   f"file)"))
                continue
            seen[key] = i
            try:
                doc = read_yaml_file(path)
            except InputError as err:   # bounded: a FIFO, /dev/zero or a huge file is refused, never read
                given = f"{entry}: {err.given}" if err.in_document else err.given
                allowed = err.allowed if err.in_document else f"an operator library: {err.allowed}"
                problems.append(Problem(at, given, allowed))
                continue
        else:
            problems.append(Problem(at, entry, "the path of an operator library file"))
            continue
        try:
            parse_library(doc, str(entry))
        except ScenarioError as err:
            problems += [Problem(f"{at}: {p.path}", p.given, p.allowed) for p in err.problems]
            continue
        docs.append(doc)
    raw["operators"] = docs
    return problems


def _inline_calibration(raw: dict[str, Any], where: str | None) -> list[Problem]:
    """Read `calibration.profile` (relative to the scenario file) into `calibration.document`, verified against its
    checksum; a document already there (a resolved scenario read again) is verified, not re-read."""
    from ..calibration.profile import ProfileError, read_profile, verify

    spec = raw.get("calibration")
    if not isinstance(spec, dict) or not isinstance(spec.get("profile"), str) or not spec["profile"]:
        return []                 # absent, or a shape the schema reports
    entry = spec["profile"]
    try:
        if spec.get("document") is not None:
            verify(spec["document"], f"calibration.document (of {entry})")
        else:
            base = Path(where).parent if where else Path.cwd()
            path = Path(entry) if Path(entry).is_absolute() else base / entry
            spec = raw["calibration"] = {**spec, "document": read_profile(path)}
    except ProfileError as err:
        return [Problem("calibration.profile", entry, f"a calibration profile written by `ultracluster calibrate`: "
                                                      f"{err}")]
    return []


def _read(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None, list[Problem]]:
    """The scenario as a private dict (None when unreadable), where it came from, and the problems found."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), None, []
    where = str(source)
    try:
        data = read_yaml_file(source)
    except InputError as err:
        allowed = err.allowed if err.in_document else f"a scenario: {err.allowed}"
        return None, where, [Problem("(file)", err.given, allowed)]
    if not isinstance(data, dict):
        keys = ", ".join(Scenario.model_fields)
        return None, where, [Problem("(file)", kind_of(data), f"a mapping of scenario keys ({keys})")]
    return data, where, []


def _apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> list[Problem]:
    """Sets each ``key.path=value`` in ``raw``, creating mappings on the way; returns malformed overrides."""
    problems = []
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            problems.append(Problem("--set", item, "key.path=value, e.g. parallelism.tp=8"))
            continue
        key = ".".join(parts)
        try:
            value = load_yaml(text)
        except InputError as err:
            problems.append(Problem(key, text, "a YAML value: a number, true/false, a string, {k: v, ...}"
                                               + ("" if err.allowed == "well-formed YAML" else f"; {err.allowed}")))
            continue
        node = raw
        for depth, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                prefix = ".".join(parts[: depth + 1])
                problems.append(Problem(key, item, f"a path through mappings; {prefix} is {node[part]!r}"))
                break
            node = node[part]
        else:
            node[parts[-1]] = value
    return problems


def _apply_preset(raw: dict[str, Any]) -> bool:
    """Fills the model fields not given from ``model.preset``; returns True when the preset is unknown."""
    model = raw.get("model")
    preset = model.get("preset") if isinstance(model, dict) else None
    if preset is None:
        return False
    if not isinstance(preset, str) or preset not in PRESETS:
        return True
    shape = {key: copy.deepcopy(value) for key, value in PRESETS[preset].items() if key != "source"}
    if isinstance(shape.get("moe"), dict) and isinstance(model.get("moe"), dict):
        model["moe"] = {**shape["moe"], **model["moe"]}
    raw["model"] = {**shape, **model}
    return False


def _count(value: object) -> int | None:
    """``value`` if it is a valid count (an integer >= 1, not a bool), else None."""
    return value if type(value) is int and value >= 1 else None


def _resolve(raw: dict[str, Any]) -> bool:
    """Fills derived values not given; returns whether ``parallelism.dp`` was given.

    Where a derivation's inputs are themselves bad (reported by validation) or the ranks do not divide
    (reported by ``checks``), a placeholder is filled so that no derived field adds a second, confusing
    "missing" problem; a scenario with a placeholder never validates.
    """
    model = raw.get("model")
    if isinstance(model, dict) and "kv_heads" not in model:
        model["kv_heads"] = _count(model.get("heads")) or 1
    training = raw.get("training")
    if isinstance(training, dict):   # training.zero and its older spelling zero1 (checks.py: they must agree)
        if "zero" not in training:
            training["zero"] = 0 if training.get("zero1") is False else 1
        elif "zero1" not in training and type(training["zero"]) is int:
            training["zero1"] = training["zero"] >= 1
    cluster = raw.get("cluster")
    cluster = cluster if isinstance(cluster, dict) else {}
    name = cluster.get("instance")
    spec = INSTANCES.get(name) if isinstance(name, str) else None
    cluster.setdefault("lnc", spec.default_lnc if spec else 1)
    cluster.setdefault("ultraserver", ultraserver_default(name) if spec else False)
    par = raw.setdefault("parallelism", {})
    if not isinstance(par, dict):
        return True
    tp = _count(par.get("tp", 1))
    par.setdefault("sequence_parallel", tp is not None and sequence_parallel_default(tp))
    if "dp" in par:
        return True
    degrees = [_count(par.get(key, 1)) for key in ("tp", "pp", "cp")]
    instances, lnc = _count(cluster.get("instances")), cluster.get("lnc")
    par["dp"] = 1
    if spec and instances and type(lnc) is int and lnc in spec.allowed_lnc and None not in degrees:
        ranks, model_parallel = instances * ranks_per_instance(spec, lnc), degrees[0] * degrees[1] * degrees[2]
        if ranks % model_parallel == 0:
            par["dp"] = data_parallel(ranks, degrees[0], degrees[2], degrees[1])
    return False


def _section(raw: dict[str, Any], name: str, spec: type[BaseModel]) -> Any:
    """One section of ``raw`` validated alone, or None if it is bad (its problems are already reported)."""
    try:
        return spec.model_validate(raw.get(name))
    except ValidationError:
        return None


def _problem(error: Mapping[str, Any]) -> Problem:
    """A pydantic error as a Problem: the YAML path, the value given, what is allowed in words."""
    loc, kind = tuple(error["loc"]), error["type"]
    is_key = kind in ("extra_forbidden", "invalid_key")  # an unknown key: loc ends in the key, never an index
    parts = [f"[{key}]" if isinstance(key, int) else f".{key}" for key in loc]
    if is_key:
        parts[-1] = f".{loc[-1]}"
    path = "".join(parts).lstrip(".")
    if is_key:
        parent = _model_at(loc[:-1])
        keys = list(parent.model_fields) if parent else []
        allowed = "no such key; allowed keys here: " + ", ".join(keys)
        close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
        return Problem(path, error["input"], allowed + (f" (did you mean {close[0]}?)" if close else ""))
    field = None if kind.startswith("uc_") else _field_at(loc)
    allowed = _describe(field.annotation, field.metadata) if field else error["msg"]
    reason = (field.json_schema_extra or {}).get(BOUNDS_KEY) if field and isinstance(field.json_schema_extra,
                                                                                     dict) else None
    if reason and kind != "missing":
        allowed += f" ({reason})"
    if kind == "missing" and len(loc) == 2 and loc[0] == "model":
        allowed += " (required unless model.preset gives it)"
    return Problem(path, MISSING if kind == "missing" else error["input"], allowed)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``X`` or ``X | None``), or None."""
    for candidate in (annotation, *get_args(annotation)):
        if inspect.isclass(candidate) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The schema model at a location (``()`` is ``Scenario``), or None."""
    model: type[BaseModel] | None = Scenario
    for key in loc:
        if isinstance(key, int) and model is not None:
            continue                    # an item of a list of models (`faults.degraded[0]`): the same model
        field = model.model_fields.get(key) if model and isinstance(key, str) else None
        model = _model_of(field.annotation) if field else None
    return model


def _field_at(loc: tuple[Any, ...]) -> FieldInfo | None:
    """The schema field at a location, or None."""
    parent = _model_at(loc[:-1])
    return parent.model_fields.get(loc[-1]) if parent and loc and isinstance(loc[-1], str) else None


def _bound_text(x: float) -> str:
    """A bound in words: 525,600 and 1.2, not 525600 and 1.2000; 1e+18 as 1e+18."""
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e7 else f"{x:g}"


def _describe(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """What a field allows, in words: ``"an integer >= 1"``, ``"one of: bf16, fp8, fp32"``, ..."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg, metadata) for arg in args if arg is not type(None))
    if origin is Literal:
        return "one of: " + ", ".join(map(str, args))
    if annotation is bool:
        return "true or false"
    if annotation is str:
        pattern = next((m.pattern for m in metadata if getattr(m, "pattern", None)), None)
        longest = next((m.max_length for m in metadata if getattr(m, "max_length", None)), None)
        return (f"a string matching {pattern}" if pattern else "a string") + \
            (f" of at most {longest} characters" if longest else "")
    model = _model_of(annotation)
    if model is not None:
        return "a mapping with keys: " + ", ".join(model.model_fields)
    bounds = [
        f"{symbol} {_bound_text(getattr(m, attr))}"
        for m in metadata
        for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
        if hasattr(m, attr)
    ]
    kind = "an integer" if annotation is int else "a number"
    return " and ".join([f"{kind} {bounds[0]}", *bounds[1:]]) if bounds else kind
