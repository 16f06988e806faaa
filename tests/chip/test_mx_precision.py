"""MXFP8 / MXFP4 training (Trainium3): refused on chips without MX matmul, matmuls at the MX rate, the VectorE
quantize cost paid, the MX copies of the weights counted in HBM."""
import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.errors import ScenarioError
from ultracluster.memory import stage_memory
from ultracluster.operators import PRECISION_BYTES, applicable, evaluate, library_for, shape_variables
from ultracluster.runner import predict
from ultracluster.replay.schedule import stage_programs


def scenario(instance="trn3.48xlarge", precision="mxfp8", **cluster):
    return load_scenario({
        "name": "mx", "model": {"preset": "llama3.1-8b"},
        "training": {"seq_len": 4096, "global_batch": 16, "precision": precision, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": 8, "pp": 2}, "cluster": {"instance": instance, "instances": 2, **cluster}})


@pytest.mark.parametrize("instance", ["trn1.32xlarge", "trn2.48xlarge", "trn2u.48xlarge"])
@pytest.mark.parametrize("precision", ["mxfp8", "mxfp4"])
def test_mx_is_refused_on_chips_without_mx_matmul(instance, precision):
    with pytest.raises(ScenarioError) as err:
        scenario(instance, precision, **({"ultraserver": False} if instance == "trn2u.48xlarge" else {}))
    (problem,) = [p for p in err.value.problems if p.path == "training.precision"]
    assert problem.given == precision and "trn3.48xlarge" in problem.allowed and "bf16" in problem.allowed


def test_quantize_operators_exist_only_at_mx_precisions():
    names = {o.name for o in applicable(library_for(scenario()), scenario())}
    assert {"mx_quantize_qkv", "mx_quantize_attention", "mx_quantize_mlp_up", "mx_quantize_mlp_down",
            "mx_quantize_out", "mx_quantize_lm_head", "mx_quantize_weights"} <= names
    assert not {n for n in names if n.startswith("mx_quantize_expert")}          # dense model
    bf16 = scenario(precision="bf16")
    assert not [o for o in applicable(library_for(bf16), bf16) if o.name.startswith("mx_")]


def test_quantize_work_is_a_quarter_pass_per_element_of_every_matmul_operand():
    sc = scenario()
    cl = build_cluster(sc, 1)
    v = shape_variables(sc, cl.layout)
    ops = [o for o in applicable(library_for(sc), sc) if o.name == "mx_quantize_mlp_down"]
    fwd, bwd = evaluate(ops, "layer", "forward", v), evaluate(ops, "layer", "backward", v)
    T, f, h = v["T"], v["f"], v["h"]
    assert fwd["vector"][0] == pytest.approx(T * f / 4)              # the input, along the contraction
    assert bwd["vector"][0] == pytest.approx((2 * T * h + T * f) / 4)   # dY twice (dgrad, wgrad), X along T
    assert fwd["bytes"][0] == bwd["bytes"][0] == 0                   # SBUF to SBUF (nisa.quantize_mx)


def test_mx_weight_copies_are_counted_in_hbm():
    def weights(sc):
        cl = build_cluster(sc, 1)
        progs = stage_programs("1f1b", 2, 8)
        return np.array([m.weights_gib for m in stage_memory(sc, cl, library_for(sc), progs)])

    ratio = weights(scenario("trn3.48xlarge", "mxfp8")) / weights(scenario("trn3.48xlarge", "bf16"))
    assert ratio == pytest.approx((2 + 2 * (1 + 1 / 32)) / 2)          # bf16 weights + two MXFP8 copies
    ratio4 = weights(scenario("trn3.48xlarge", "mxfp4")) / weights(scenario("trn3.48xlarge", "bf16"))
    assert ratio4 == pytest.approx((2 + 2 * (0.5 + 1 / 32)) / 2)
    assert PRECISION_BYTES["mxfp8"] == 1 + 1 / 32


def test_mx_speeds_compute_up_by_at_most_the_tensor_ratio():
    bf16, mx = predict(scenario(precision="bf16")), predict(scenario())
    speedup = bf16["compute_s"] / mx["compute_s"]
    assert 1.2 < speedup <= 2517 / 671     # the matmuls alone would give 3.75; the per-layer residual does not shrink
    assert mx["mfu"] < bf16["mfu"]                                   # MFU divides by the MX peak


def test_hiding_the_quantize_would_be_faster():
    free = {"operators": [{"operators": [
        {"name": n, "where": w, "precision": "mxfp8", "forward": {"vector": 0}, "saved": 0}
        for n, w in (("mx_quantize_qkv", "layer"), ("mx_quantize_attention", "layer"), ("mx_quantize_out", "layer"),
                     ("mx_quantize_mlp_up", "layer"), ("mx_quantize_mlp_down", "layer"),
                     ("mx_quantize_lm_head", "head"), ("mx_quantize_weights", "optimizer"))]}]}
    doc = scenario().to_dict()
    doc.update(free)
    paid, hidden = predict(scenario()), predict(load_scenario(doc))
    assert hidden["step_time_s"] <= paid["step_time_s"]
