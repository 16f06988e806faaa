"""training.zero: the stages 0-3 as integers; true/false refused naming the key the user wrote; ZeRO-2 shards the
gradients (between ZeRO-1 and ZeRO-3 in HBM) and communicates as ZeRO-1 does."""
from __future__ import annotations

import pytest

from ultracluster.errors import ScenarioError
from ultracluster.runner import predict
from ultracluster.scenario import load_scenario

BASE = {
    "name": "zero", "model": {"preset": "llama3.1-8b"},
    "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
    "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2},
}


def _with(**training) -> dict:
    return {**BASE, "training": {**BASE["training"], **training}}


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_stage_is_refused_naming_training_zero_and_the_stages(value):
    with pytest.raises(ScenarioError) as err:
        load_scenario(_with(zero=value))
    paths = [p.path for p in err.value.problems]
    assert paths == ["training.zero"], paths           # never training.zero1, a key the user did not write
    assert "0, 1, 2, 3" in err.value.problems[0].allowed


def test_zero_stage_4_is_refused_and_0_to_3_load():
    with pytest.raises(ScenarioError) as err:
        load_scenario(_with(zero=4))
    assert err.value.problems[0].path == "training.zero"
    for z in range(4):
        sc = load_scenario(_with(zero=z))
        assert sc.training.zero == z and sc.training.zero1 == (z >= 1)


def test_zero2_shards_gradients_only():
    s = {z: predict(load_scenario(_with(zero=z))) for z in (1, 2, 3)}
    assert s[3]["hbm_peak_gib"] < s[2]["hbm_peak_gib"] < s[1]["hbm_peak_gib"]
    # ZeRO-2 reduce-scatters the gradients and all-gathers the weights as ZeRO-1 does: the same step time
    assert s[2]["step_time_s"] == pytest.approx(s[1]["step_time_s"], rel=1e-12)
