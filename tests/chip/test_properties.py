"""Invariants over random valid layouts, computed in-process (no Ray): MFU <= 1, compute floor <= step."""
from hypothesis import given, settings, strategies as st

from ultracluster import load_scenario
from ultracluster.pipeline import predict

layouts = st.sampled_from([(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4), (16, 2), (32, 1), (4, 4), (2, 8)])


@settings(max_examples=25, deadline=None)
@given(layout=layouts, instance=st.sampled_from(["trn1.32xlarge", "trn2.48xlarge"]),
       seq=st.sampled_from([1024, 2048, 4096]), recompute=st.sampled_from(["none", "selective", "full"]),
       precision=st.sampled_from(["bf16", "fp8"]), mb=st.sampled_from([1, 2]))
def test_mfu_at_most_one_and_compute_floor_below_step(layout, instance, seq, recompute, precision, mb):
    tp, pp = layout
    sc = load_scenario({
        "name": "prop", "model": {"preset": "llama2-7b", "layers": 8},
        "training": {"seq_len": seq, "global_batch": 256, "micro_batch": mb, "recompute": recompute,
                     "precision": precision, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": tp, "pp": pp}, "cluster": {"instance": instance, "instances": 2},
    })
    s = predict(sc)
    if not s["feasible"]:
        return
    floor = s["model_flops_per_step"] / s["peak_flop_per_s"]
    assert floor <= s["step_time_s"]
    assert 0 < s["mfu"] <= 1
    parts = sum(s[k] for k in ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s", "data_stall_s",
                               "checkpoint_s", "other_s"))
    assert abs(parts - s["step_time_s"]) <= 1e-9 * s["step_time_s"]
    assert min(s[k] for k in ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s")) >= 0


@settings(max_examples=20, deadline=None)
@given(layout=layouts, schedule=st.sampled_from(["gpipe", "1f1b"]), zero1=st.booleans(),
       factor=st.sampled_from([1.5, 2.0, 4.0]), which=st.sampled_from(["efa", "neuronlink", "both"]))
def test_more_bandwidth_is_never_slower(layout, schedule, zero1, factor, which):
    tp, pp = layout
    doc = {"name": "bw", "model": {"preset": "llama2-7b", "layers": 8},
           "training": {"seq_len": 2048, "global_batch": 128, "zero1": zero1, "steps": 1, "warmup_steps": 0},
           "parallelism": {"tp": tp, "pp": pp, "pp_schedule": schedule},
           "cluster": {"instance": "trn1.32xlarge", "instances": 4}}
    base = predict(load_scenario(doc))
    if not base["feasible"]:
        return
    net = {}
    if which in ("efa", "both"):
        net["efa_gbps"] = 800 * factor
    if which in ("neuronlink", "both"):
        net["neuronlink_gbps_per_chip"] = 384 * 8 * 1.073741824 * factor
    fast = predict(load_scenario({**doc, "cluster": {**doc["cluster"], "network": net}}))
    assert fast["step_time_s"] <= base["step_time_s"] * (1 + 1e-12)
