"""A scenario's own operator libraries checked at the scenario's shapes: every work and byte figure finite, >= 0
and at most `operators.MAX_WORK`, else a Problem naming the operator and the key (docs/operators.md).

The expressions never raise (`operators._compile` computes in float64 with its errors silenced), so a division by
zero, an overflow or a negative figure is found here, when the scenario is read, and never ends a run; a figure
that goes bad only at a layout the planner tries makes that layout infeasible (`layouts.batched_parts`)."""
from __future__ import annotations

import ast
from typing import Any

import numpy as np

from ultracluster import operators as opslib
from ultracluster.cluster import Layout
from ultracluster.cluster.placement import stage_layers, stage_sum
from ultracluster.errors import Problem

from .schema import Scenario


def scenario_variables(scenario: Scenario) -> list[tuple[str, dict[str, Any]]]:
    """(where, shape variables) at which the run times the operators: the layer, embedding and head operators at
    the scenario's layout with the flash kernel's causal fraction and with the materialized one (the calibration
    picks), the optimizer's at each stage's parameters (T = 1, P its optimizer shard, as `chip.chunk_times`)."""
    p, t, m = scenario.parallelism, scenario.training, scenario.model
    layout = Layout(tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp)
    v = opslib.shape_variables(scenario, layout)
    out: list[tuple[str, dict[str, Any]]] = [(w, dict(v)) for w in ("layer", "embedding", "head")]
    half = opslib.causal_fraction(t.seq_len, False)
    out += [(w, {**v, "causal": half, "causal_f": half}) for w in ("layer", "embedding", "head")]
    layers = stage_layers(m.layers, p.pp * p.virtual_stages)
    dense, expert = opslib.chunk_params_split(m, p.tp, layers, p.pp, p.ep)
    held = opslib.dp_share(dense, expert, p.dp, p.ep) if opslib.sharding(t).optimizer else dense + expert
    stages = stage_sum(held, p.pp)
    out.append(("optimizer", {**{k: np.full(p.pp, x) for k, x in v.items()}, "T": np.ones(p.pp), "P": stages}))
    return out


def check_operators(scenario: Scenario) -> list[Problem]:
    """Every problem of the scenario's own operators (the entries of `operators`) at its shapes; [] without them."""
    if not scenario.operators:
        return []
    owner: dict[str, tuple[int, int, opslib.Operator, dict]] = {}     # a later library's operator replaces
    for i, doc in enumerate(scenario.operators):
        for j, (op, raw) in enumerate(zip(opslib.parse_library(doc, f"operators[{i}]"), doc["operators"])):
            owner[op.name] = (i, j, op, raw)
    mine = {o.name for o in opslib.applicable(tuple(o for _, _, o, _ in owner.values()), scenario)}
    problems: list[Problem] = []
    said: set[tuple[str, str]] = set()
    for where, v in scenario_variables(scenario):
        for name in sorted(mine):
            i, j, op, raw = owner[name]
            if op.where != where:
                continue
            for key, value in opslib.work_values(op, v):
                x = np.ravel(np.asarray(value, dtype=float))
                wrong = ~(np.isfinite(x) & (x >= 0) & (x <= opslib.MAX_WORK))
                if not wrong.any() or (name, key) in said:
                    continue
                said.add((name, key))
                expr = _expression(raw, key)
                used = sorted({n.id for n in ast.walk(ast.parse(str(expr), mode="eval"))
                               if isinstance(n, ast.Name)}) if isinstance(expr, str) else []
                first = int(np.flatnonzero(wrong)[0])
                at = ", ".join(f"{n}={float(np.ravel(v[n])[min(first, np.size(v[n]) - 1)]):g}" for n in used if n in v)
                stage = f" on stage {first}" if where == "optimizer" else ""
                problems.append(Problem(
                    f"operators[{i}]: operators[{j}].{key}", expr,
                    f"an expression giving a finite number >= 0 and at most {opslib.MAX_WORK:g} at this scenario's "
                    f"shapes; operator {name} gives {x[wrong][0]:g} here{stage}" + (f" ({at})" if at else "")))
    return problems


def _expression(raw: dict, key: str) -> Any:
    """The expression as the library wrote it (`forward.bytes` → raw['forward']['bytes']; missing: 0)."""
    node: Any = raw
    for part in key.split("."):
        node = node.get(part, 0) if isinstance(node, dict) else 0
    return node
