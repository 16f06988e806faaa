"""The gradients' precision (`training.grad_precision`): what it changes, and how the calibration rows take it from
their release (NeuronX Distributed kept gradients in bf16 before SDK 2.20, `calibrate.training.NXD_FP32_GRADS_FROM`)."""
from __future__ import annotations

import pytest

from ultracluster import load_scenario
from ultracluster import operators as opslib
from ultracluster.calibrate.training import grad_precision_of, layout_scenario_of, release
from ultracluster.runner import predict

BASE = {"name": "g", "stack": "neuronx-distributed", "model": {"preset": "llama2-7b"},
        "training": {"seq_len": 4096, "global_batch": 256, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 4}}


def _row(sdk: str, seq: float, stack: str = "neuronx-distributed", rid: str = "x") -> dict:
    return {"id": rid, "layout": "l", "model": "llama2-7b", "layers": "32", "hidden": "4096", "heads": "32",
            "kv_heads": "32", "ffn": "11008", "mlp": "swiglu", "vocab": "32000", "seq_len": "4096",
            "global_batch": "1024", "micro_batch": "1", "precision": "bf16", "master_weights": "fp32",
            "zero1": "true", "recompute": "selective", "tp": "8", "pp": "1", "dp": "64",
            "instance": "trn1.32xlarge", "instances": "16", "stack": stack, "sdk": sdk, "seq_per_s": str(seq)}


def test_a_release_before_2_20_of_nxd_kept_bf16_gradients_and_others_keep_the_default():
    assert release("2.18") == (2, 18) and release("~2.10") == (2, 10) and release("2.13.1") == (2, 13)
    assert release("unknown") is None
    assert grad_precision_of(_row("2.18", 1)) == "bf16" and grad_precision_of(_row("2.19", 1)) == "bf16"
    assert grad_precision_of(_row("2.20", 1)) is None and grad_precision_of(_row("2.24", 1)) is None
    assert grad_precision_of(_row("2.13", 1, stack="neuronx-nemo-megatron")) is None
    assert grad_precision_of(_row("unknown", 1)) is None


def test_a_layout_is_fitted_as_the_release_at_its_median_ran_it():
    # two bf16-era rows and a faster fp32-era one: the median (the 2.17 row) decides
    rows = [_row("2.16", 90.0, rid="a"), _row("2.20", 101.0, rid="b"), _row("2.17", 94.0, rid="c")]
    assert layout_scenario_of(rows)["training"]["grad_precision"] == "bf16"
    rows = [_row("2.16", 90.0, rid="a"), _row("2.20", 101.0, rid="b"), _row("2.21", 99.0, rid="c")]
    assert "grad_precision" not in layout_scenario_of(rows)["training"]
    assert layout_scenario_of(rows)["name"] == "calib-a"          # the first row names it, as before


def test_bf16_gradients_halve_the_gradient_bytes_and_shorten_the_reduction():
    fp32 = load_scenario(BASE)
    bf16 = load_scenario({**BASE, "training": {**BASE["training"], "grad_precision": "bf16"}})
    assert opslib.grad_bytes(fp32.training) == 4.0 and opslib.grad_bytes(bf16.training) == 2.0
    explicit = load_scenario({**BASE, "training": {**BASE["training"], "grad_precision": "fp32",
                                                   "master_weights": "none"}})
    assert opslib.grad_bytes(explicit.training) == 4.0           # given, it wins over the master-weights rule
    a, b = predict(fp32), predict(bf16)
    assert b["dp_comm_s"] < 0.75 * a["dp_comm_s"]                 # the ZeRO-1 reduce-scatter moves half the bytes
    assert b["hbm_peak_gib"] < a["hbm_peak_gib"]                  # and the accumulation buffer is half the size
    assert b["compute_s"] < a["compute_s"] < 1.001 * b["compute_s"]   # only the optimizer's read of the gradients


def test_an_unknown_gradient_precision_is_refused_naming_the_key():
    from ultracluster.errors import ScenarioError

    with pytest.raises(ScenarioError, match="training.grad_precision"):
        load_scenario({**BASE, "training": {**BASE["training"], "grad_precision": "fp16"}})
