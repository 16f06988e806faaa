"""``--set key.path=value`` overrides -> changed, created and parsed values, or problems at the right path."""

from __future__ import annotations

import copy

import pytest

from ultracluster.errors import ScenarioError
from ultracluster.scenario import load_scenario

BASE = {
    "name": "base",
    "model": {"preset": "llama3.1-8b"},
    "training": {"seq_len": 8192, "global_batch": 1024},
    "parallelism": {"tp": 32},
    "cluster": {"instance": "trn1.32xlarge", "instances": 32},
}


def _problems(*overrides: str) -> dict[str, object]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(BASE, overrides)
    return {p.path: p.given for p in caught.value.problems}


def test_override_changes_a_value_and_rederives() -> None:
    s = load_scenario(BASE, ["parallelism.tp=8", "training.precision=fp8"])
    assert (s.parallelism.tp, s.parallelism.dp, s.training.precision) == (8, 128, "fp8")


def test_override_does_not_touch_the_input() -> None:
    before = copy.deepcopy(BASE)
    load_scenario(BASE, ["parallelism.tp=8", "storage.kind=fsx-lustre", "storage.deployment=SCRATCH_2",
                         "storage.capacity_tib=1.2", "storage.throughput_mbps_per_tib=200"])
    assert BASE == before


def test_override_creates_nested_keys() -> None:
    s = load_scenario(
        BASE,
        ["cluster.network.efa_gbps=1600", "faults.stragglers.fraction=0.05", "faults.stragglers.slowdown=1.3",
         "checkpoint={every_steps: 50, mode: sync}"],
    )
    assert s.cluster.network.efa_gbps == 1600.0 and s.cluster.network.efa_latency_us is None
    assert (s.faults.stragglers.fraction, s.faults.stragglers.slowdown) == (0.05, 1.3)
    assert (s.checkpoint.every_steps, s.checkpoint.mode) == (50, "sync")


@pytest.mark.parametrize(
    ("override", "read"),
    [
        ("seed=7", lambda s: s.seed == 7 and type(s.seed) is int),
        ("training.zero1=false", lambda s: s.training.zero1 is False),
        ("emulation.payload_scale=1e-6", lambda s: s.emulation.payload_scale == 1e-6),
        ("emulation.payload_scale=1.0e-6", lambda s: s.emulation.payload_scale == 1e-6),
        ("emulation.payload_scale=2.5E-3", lambda s: s.emulation.payload_scale == 2.5e-3),
        ("emulation.payload_scale=1", lambda s: s.emulation.payload_scale == 1.0),
        ("emulation.instances_per_actor=4", lambda s: s.emulation.instances_per_actor == 4),
        ("cluster.network.efa_latency_us=1e1", lambda s: s.cluster.network.efa_latency_us == 10.0),
        ("name=other.name_2", lambda s: s.name == "other.name_2"),
        ("model.preset=llama2-7b", lambda s: (s.model.vocab, s.model.kv_heads) == (32000, 32)),
        ("model.layers=16", lambda s: (s.model.layers, s.model.hidden) == (16, 4096)),
        ("parallelism.dp=32", lambda s: s.parallelism.dp == 32),
    ],
)
def test_override_values_are_parsed_as_yaml(override: str, read) -> None:
    assert read(load_scenario(BASE, [override]))


def test_later_override_wins() -> None:
    assert load_scenario(BASE, ["parallelism.tp=8", "parallelism.tp=16"]).parallelism.tp == 16


def test_one_e_minus_six_in_a_file_is_a_float(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: f\nmodel: {preset: gpt3-6.7b}\ntraining: {seq_len: 2048, global_batch: 1024}\n"
        "parallelism: {tp: 8}\ncluster: {instance: trn1.32xlarge, instances: 16}\n"
        "emulation: {payload_scale: 1e-6}\n",
        encoding="utf-8",
    )
    assert load_scenario(path).emulation.payload_scale == 1e-6


@pytest.mark.parametrize(
    ("overrides", "path", "given"),
    [
        (["parallelism.tp"], "--set", "parallelism.tp"),
        (["=8"], "--set", "=8"),
        (["parallelism..tp=8"], "--set", "parallelism..tp=8"),
        (["name.first=x"], "name.first", "name.first=x"),
        (["model.preset.size=1"], "model.preset.size", "model.preset.size=1"),
        (["parallelism.tpp=8"], "parallelism.tpp", 8),
        (["parallelism.tp=eight"], "parallelism.tp", "eight"),
        (["parallelism.tp=8.0"], "parallelism.tp", 8.0),
        (["training.zero1=1"], "training.zero1", 1),
        (["emulation.payload_scale=1e-6x"], "emulation.payload_scale", "1e-6x"),
        (["training.seq_len=[1, 2"], "training.seq_len", "[1, 2"),
    ],
)
def test_bad_overrides_report_their_path(overrides: list[str], path: str, given: object) -> None:
    assert _problems(*overrides)[path] == given


def test_bad_overrides_are_all_reported() -> None:
    assert set(_problems("nope", "name.x=1", "cluster.instances=0")) == {"--set", "name.x", "cluster.instances"}
