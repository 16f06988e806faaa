"""dashboards/ultracluster.json queries only metrics the code exports (read from the code itself), and uses
every one of them; metric names follow Prometheus' rule (no Ray)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import ultracluster.actors.metrics as metrics_mod

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "dashboards" / "ultracluster.json"
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "by", "without", "rate", "irate", "increase", "label_values",
                "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "topk",
                "bottomk", "histogram_quantile", "clamp_min", "clamp_max", "abs", "time", "vector", "scalar"}


def exported() -> dict[str, str]:
    """Metric name as Prometheus sees it -> kind, from the Counter/Gauge/Histogram calls in the source."""
    tree = ast.parse(Path(metrics_mod.__file__).read_text())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "Counter", "Gauge", "Histogram"):
            name = node.args[0].value if node.args else next(k.value.value for k in node.keywords if k.arg == "name")
            assert re.fullmatch(metrics_mod.NAME_RULE.pattern, name), name
            kind = node.func.id.lower()
            # Ray adds "ray_"; Prometheus names a counter's samples "_total" (Ray 2.60 exports only that)
            suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}[kind]
            for sfx in suffixes:
                out[metrics_mod.PREFIX + name + sfx] = kind
    return out


def metric_names(expr: str) -> set[str]:
    """Identifiers in a PromQL expression that are metric names (not functions, keywords, labels)."""
    expr = re.sub(r'"[^"]*"', '""', expr)                      # label values
    expr = re.sub(r"\{[^}]*\}", "{}", expr)                     # label matchers
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)      # grouping labels
    expr = re.sub(r"\[[^\]]*\]", "", expr)                      # range selectors
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {w for w in words if w not in PROMQL_WORDS and not w.startswith("$")}


def panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out += panels(p) if "panels" in p else [p]
    return out


def test_the_code_exports_the_documented_metrics():
    names = exported()
    assert names == {
        "ray_ultracluster_steps_done_total": "counter", "ray_ultracluster_steps_planned": "gauge",
        "ray_ultracluster_step_time_seconds": "gauge", "ray_ultracluster_step_breakdown_seconds": "gauge",
        "ray_ultracluster_data_stall_seconds": "gauge", "ray_ultracluster_checkpoint_seconds": "gauge",
        "ray_ultracluster_step_wall_seconds": "gauge", "ray_ultracluster_actors_alive": "gauge"}
    doc = metrics_mod.__doc__
    assert all(f"`{n}" in doc for n in names)          # the module's table lists every one


def test_dashboard_queries_exported_metrics_only_and_all_of_them():
    dash = json.loads(DASHBOARD.read_text())
    names = exported()
    used: set[str] = set()
    ps = panels(dash)
    assert len(ps) >= 6 and len({p["id"] for p in ps}) == len(ps)
    for p in ps:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            found = metric_names(t["expr"])
            assert found, (p["title"], t["expr"])
            assert found <= set(names), (p["title"], found - set(names))
            assert 'scenario=~"$scenario"' in t["expr"], (p["title"], t["expr"])
            used |= found
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            used |= metric_names(q) & set(names)
            assert metric_names(q.replace("label_values(", "(")) - {"scenario"} <= set(names), q
    assert used == set(names)                              # every exported metric has a panel


def test_metric_name_parser_is_not_fooled():
    assert metric_names('sum by (scenario, part) (rate(ray_x_total{scenario=~"$scenario", part="a b"}[1m])) * 60') \
        == {"ray_x_total"}
    assert metric_names('max by (scenario) (ray_a{x="y"}) / ray_b') == {"ray_a", "ray_b"}
