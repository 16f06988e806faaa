"""The figures docs/scenarios.md quotes, checked against the scenarios and the model: never typed by hand
and left to go stale.

- the example's cluster: instances, instance type and NeuronCores of the example YAML on the page;
- the ready scenarios table: every "N <instance type>", "N ... chips", "N ... UltraServers", "TPn PPn DPn",
  "sequence N" and "global batch N" in a row, against that row's scenario file;
- (the degraded-instances paragraph is generated: scripts/doc_tables.py, tests/test_doc_tables.py)
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ultracluster import load_scenario
from ultracluster.cluster.catalog import INSTANCES, ultraserver_of

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")


def number(text: str) -> int:
    return int(text.replace(",", ""))


def facts(sc) -> dict:
    """What a sentence about a scenario can claim: instances of a type, chips, NeuronCores, UltraServers,
    the layout, sequence length and global batch."""
    spec = INSTANCES[sc.cluster.instance]
    us = ultraserver_of(spec) if sc.cluster.ultraserver else None
    par = sc.parallelism
    return {"instance": sc.cluster.instance, "instances": sc.cluster.instances,
            "chips": sc.cluster.instances * spec.chips, "neuron_cores": sc.cluster.instances * spec.neuron_cores,
            "ultraservers": sc.cluster.instances // us.instances if us else None,
            "TP": par.tp, "PP": par.pp, "DP": par.dp, "seq": sc.training.seq_len,
            "batch": sc.training.global_batch}


def claims(text: str) -> list[tuple[str, object]]:
    """(fact, value) pairs a sentence states."""
    out = [("instances", (number(n), t)) for n, t in re.findall(r"(?<![\w.=])([\d,]+) (trn[\w.]+?xlarge)", text)]
    out += [("chips", number(n)) for n in re.findall(r"(?<![\w,])([\d,]+) (?:Trainium\d |Trn\d )?chips", text)]
    out += [("neuron_cores", number(n)) for n in re.findall(r"([\d,]+) NeuronCores", text)]
    out += [("ultraservers", number(n)) for n in re.findall(r"(?<![\w,])([\d,]+) (?:Trn\d Gen\d )?UltraServers", text)]
    out += [(k, int(n)) for k, n in re.findall(r"\b(TP|PP|DP)(\d+)\b", text)]
    out += [("seq", number(n)) for n in re.findall(r"sequence ([\d,]+)", text)]
    out += [("batch", number(n)) for n in re.findall(r"global batch ([\d,]+)", text)]
    return out


def check(text: str, f: dict) -> list[str]:
    wrong = []
    for fact, value in claims(text):
        have = (f["instances"], f["instance"]) if fact == "instances" else f[fact]
        if value != have:
            wrong.append(f"{fact}: the page says {value}, the scenario has {have}")
    return wrong


def test_the_claims_are_found():
    assert claims("131,072 Trainium2 chips in 2,048 UltraServers; 2 trn1.32xlarge (TP8 PP2 DP4)") == [
        ("instances", (2, "trn1.32xlarge")), ("chips", 131072), ("ultraservers", 2048), ("TP", 8), ("PP", 2),
        ("DP", 4)]


def test_the_example_cluster_is_quoted_right():
    section = DOC.split("## An example", 1)[1]
    intro, example = section.split("```yaml", 1)[0], yaml.safe_load(re.findall(r"```yaml\n(.*?)```", section, re.S)[0])
    assert claims(intro), intro
    assert check(intro, facts(load_scenario(example))) == []


ROWS = re.findall(r"^\| `([\w.-]+\.yaml)` \| (.*) \|$", DOC.split("## Ready scenarios", 1)[1], re.M)


@pytest.mark.parametrize("name,text", ROWS, ids=[r[0] for r in ROWS])
def test_the_ready_scenarios_are_quoted_right(scenarios_dir, name, text):
    assert check(text, facts(load_scenario(scenarios_dir / name))) == []


def test_every_ready_scenario_with_figures_is_checked():
    assert len(ROWS) >= 14 and sum(bool(claims(t)) for _, t in ROWS) >= 9
