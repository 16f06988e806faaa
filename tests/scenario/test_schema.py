"""Valid scenarios -> fully resolved Scenario: defaults, derived values, presets, rank arithmetic."""

from __future__ import annotations

import csv
import json
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from ultracluster.cluster.catalog import INSTANCES, ultraserver_of
from ultracluster.errors import ScenarioError
from ultracluster.scenario import PRESETS, Scenario, load_scenario, preset_names


MINIMAL_YAML = """
name: tiny
model: {layers: 4, hidden: 512, heads: 8, ffn: 2048, mlp: gelu, vocab: 1000}
training: {seq_len: 1024, global_batch: 64}
parallelism: {tp: 4}
cluster: {instance: trn1.32xlarge, instances: 2}
"""


def _scenario(instance: str = "trn1.32xlarge", instances: int = 2, **sections: dict) -> dict:
    doc = {
        "name": "t",
        "model": {"preset": "llama3.1-8b"},
        "training": {"seq_len": 4096, "global_batch": 1024},
        "cluster": {"instance": instance, "instances": instances},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


def test_minimal_scenario_resolves_every_default(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(MINIMAL_YAML, encoding="utf-8")
    s = load_scenario(path)
    assert s.to_dict() == {
        "name": "tiny",
        "seed": 0,
        "stack": "custom",
        "explicit_keys": [],          # none of the stack-filled keys given (scenario.json carries them)
        "model": {"preset": None, "layers": 4, "hidden": 512, "heads": 8, "kv_heads": 8, "ffn": 2048,
                  "mlp": "gelu", "vocab": 1000, "tied_embeddings": False, "norm": "rmsnorm", "position": "rotary",
                  "moe": None, "dropout": 0.0},
        "training": {"seq_len": 1024, "global_batch": 64, "micro_batch": 1, "precision": "bf16",
                     "master_weights": "fp32", "grad_precision": None, "zero1": True, "zero": 1,
                     "recompute": "selective", "checkpoint_mlp": False,
                     "attention": "flash", "steps": 3, "warmup_steps": 1, "budget_tokens": None,
                     "budget_steps": None},
        "parallelism": {"tp": 4, "pp": 1, "dp": 16, "cp": 1, "ep": 1, "sequence_parallel": True,
                        "tp_comm_overlap": True, "pp_schedule": "1f1b", "fsdp_schedule": "compiler",
                        "virtual_stages": 1},
        "cluster": {"instance": "trn1.32xlarge", "instances": 2, "lnc": 1, "ultraserver": False,
                    "network": {"efa_gbps": None, "efa_latency_us": None, "neuronlink_gbps_per_chip": None,
                                "neuronlink_latency_us": None, "calibration": "default"},
                    "price_per_hour_usd": None},
        "storage": None,
        "checkpoint": None,
        "faults": None,
        "emulation": {"instances_per_actor": "auto", "payload_scale": 1e-6},
        "calibration": None,
        "sweep": None,
        "operators": [],
    }
    assert s.ranks == 64 and s.tokens_per_step == 64 * 1024
    json.dumps(s.to_dict())


def test_parallelism_block_may_be_omitted() -> None:
    s = load_scenario({k: v for k, v in _scenario().items() if k != "parallelism"})
    assert (s.parallelism.tp, s.parallelism.dp, s.parallelism.sequence_parallel) == (1, 64, False)


@pytest.mark.parametrize(
    ("instance", "lnc", "ultraserver"),
    [("trn1.32xlarge", 1, False), ("trn1n.32xlarge", 1, False), ("trn2.48xlarge", 2, False),
     ("trn2u.48xlarge", 2, True)],
)
def test_cluster_defaults_follow_the_instance(instance: str, lnc: int, ultraserver: bool) -> None:
    s = load_scenario(_scenario(instance, 4, parallelism={"tp": 8}))
    assert (s.cluster.lnc, s.cluster.ultraserver) == (lnc, ultraserver)


@pytest.mark.parametrize(
    ("instance", "lnc", "per_instance"),
    [("trn1.32xlarge", None, 32), ("trn1.32xlarge", 1, 32), ("trn1n.32xlarge", None, 32),
     ("trn2.48xlarge", None, 64), ("trn2.48xlarge", 2, 64), ("trn2.48xlarge", 1, 128),
     ("trn2u.48xlarge", 1, 128), ("trn2u.48xlarge", 2, 64)],
)
def test_rank_arithmetic(instance: str, lnc: int | None, per_instance: int) -> None:
    cluster = {} if lnc is None else {"lnc": lnc}
    s = load_scenario(_scenario(instance, 8, cluster=cluster, parallelism={"tp": 8}))
    assert s.ranks == 8 * per_instance
    assert s.parallelism.dp == s.ranks // 8


def test_storage_checkpoint_faults_defaults() -> None:
    s = load_scenario(
        _scenario(
            storage={"kind": "fsx-lustre", "deployment": "PERSISTENT_2", "capacity_tib": 48,
                     "throughput_mbps_per_tib": 250},
            checkpoint={"every_steps": 100, "mode": "async"},
            faults={"stragglers": {"fraction": 0.01, "slowdown": 1.3}},
        )
    )
    assert (s.storage.bytes_per_token, s.storage.prefetch_steps, s.storage.capacity_tib) == (4.0, 1, 48.0)
    assert s.checkpoint.mode == "async"
    assert (s.faults.restart_minutes, s.faults.instance_mtbf_hours) == (10.0, None)


def test_strict_types() -> None:
    s = load_scenario(_scenario(cluster={"network": {"efa_gbps": 3200}}, emulation={"payload_scale": 1}))
    assert isinstance(s.cluster.network.efa_gbps, float) and s.emulation.payload_scale == 1.0
    for bad in ({"tp": "8"}, {"tp": 8.0}, {"tp": True}, {"sequence_parallel": 1}):
        with pytest.raises(ScenarioError, match="parallelism"):
            load_scenario(_scenario(parallelism=bad))


def test_scenario_is_frozen_picklable_and_round_trips() -> None:
    s = load_scenario(_scenario(parallelism={"tp": 8}))
    with pytest.raises(ValidationError):
        s.parallelism.tp = 4
    assert pickle.loads(pickle.dumps(s)) == s
    assert load_scenario(s.to_dict()) == s


def test_explicit_fields_win_over_the_preset() -> None:
    s = load_scenario(_scenario(model={"layers": 16, "vocab": 32000}))
    assert (s.model.layers, s.model.vocab, s.model.hidden, s.model.kv_heads) == (16, 32000, 4096, 8)
    s = load_scenario(_scenario(model={"preset": "mixtral-8x7b", "moe": {"imbalance": 1.5}}))
    assert (s.model.moe.experts, s.model.moe.top_k, s.model.moe.imbalance) == (8, 2, 1.5)
    assert load_scenario(_scenario(model={"preset": "mixtral-8x7b", "moe": None})).model.moe is None


def test_every_preset_is_complete_and_cited() -> None:
    assert preset_names() == list(PRESETS) and len(PRESETS) == 12
    shape = {"layers", "hidden", "heads", "kv_heads", "ffn", "mlp", "vocab", "tied_embeddings", "source"}
    for name, preset in PRESETS.items():
        assert shape <= preset.keys(), name
        assert preset["mlp"] == ("gelu" if name.startswith("gpt3") else "swiglu")
        assert preset["tied_embeddings"] is name.startswith("gpt3")
        if name.startswith("gpt3"):
            assert (preset["ffn"], preset["vocab"]) == (4 * preset["hidden"], 50257)
    assert PRESETS["mixtral-8x7b"]["moe"] == PRESETS["mixtral-8x22b"]["moe"] == {"experts": 8, "top_k": 2}


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_validates_in_a_valid_layout(preset: str) -> None:
    s = load_scenario(_scenario("trn2.48xlarge", 4, model={"preset": preset}, parallelism={"tp": 8, "pp": 4}))
    assert (s.ranks, s.parallelism.dp, s.model.preset) == (256, 8, preset)


def _calibration_rows(calibration_dir: Path) -> list[dict[str, str]]:
    with (calibration_dir / "training.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_presets_agree_with_calibration_shapes(calibration_dir: Path) -> None:
    rows = _calibration_rows(calibration_dir)
    assert {row["model"] for row in rows} >= {"llama3.1-8b", "llama2-7b", "gpt3-23b", "gpt3-6.7b"}
    for row in rows:
        preset = PRESETS[row["model"]]
        for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
            assert preset[key] == int(row[key]), (row["id"], key)
        assert preset["mlp"] == row["mlp"], row["id"]


def test_calibration_layouts_are_valid_scenarios(calibration_dir: Path) -> None:
    rows = _calibration_rows(calibration_dir)
    assert len(rows) >= 20
    for row in rows:
        s = load_scenario(
            {
                "name": row["id"],
                "model": {"preset": row["model"]},
                "training": {
                    "seq_len": int(row["seq_len"]), "global_batch": int(row["global_batch"]),
                    "micro_batch": int(row["micro_batch"]), "precision": row["precision"],
                    **({"master_weights": row["master_weights"]} if row["master_weights"] else {}),
                    # an empty zero1 is the FSDP row (t1): ZeRO-3
                    **({"zero1": row["zero1"] == "true"} if row["zero1"] else {"zero": 3}),
                    "recompute": row["recompute"],
                },
                "parallelism": {"tp": int(row["tp"]), "pp": int(row["pp"])},
                # Trn2 rows count ranks at LNC=2 (the instance type's default)
                "cluster": {"instance": row["instance"], "instances": int(row["instances"])},
            }
        )
        assert s.parallelism.dp == int(row["dp"]), row["id"]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_valid_factorisation_loads(data: st.DataObject) -> None:
    instance = data.draw(st.sampled_from(sorted(INSTANCES)))
    spec = INSTANCES[instance]
    us = ultraserver_of(spec) if spec.ultraserver_default else None       # in UltraServers unless told not
    instances = data.draw(st.sampled_from([us.instances * k for k in (1, 2, 3, 4)] if us else [1, 2, 3, 4, 8, 16]))
    lnc = data.draw(st.sampled_from(spec.allowed_lnc))
    ranks = instances * spec.neuron_cores // lnc
    tp = data.draw(st.sampled_from([d for d in _divisors(ranks, 64) if 64 % d == 0]))
    pp = data.draw(st.sampled_from(_divisors(ranks // tp, 16)))
    cp = data.draw(st.sampled_from(_divisors(ranks // (tp * pp), 4)))
    dp = ranks // (tp * pp * cp)
    parallelism = {"tp": tp, "pp": pp, "cp": cp}
    if data.draw(st.booleans()):
        parallelism["dp"] = dp
    s = load_scenario(
        {
            "name": "prop",
            "model": {"layers": 32, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672, "mlp": "swiglu",
                      "vocab": 128256},
            "training": {"seq_len": 4096 * cp, "global_batch": 4 * dp},
            "parallelism": parallelism,
            "cluster": {"instance": instance, "instances": instances, "lnc": lnc},
        }
    )
    p = s.parallelism
    assert p.tp * p.pp * p.cp * p.dp == s.ranks == ranks
    assert p.sequence_parallel is (tp > 1)


def test_scenario_schema_documents_every_field() -> None:
    def models(model: type) -> list[type]:
        nested = [f.annotation for f in model.model_fields.values()]
        found = [model]
        for annotation in nested:
            for candidate in (annotation, *getattr(annotation, "__args__", ())):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    found += models(candidate)
        return found

    for model in models(Scenario):
        assert model.model_config["extra"] == "forbid" and model.model_config["frozen"], model
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
