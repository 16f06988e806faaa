"""Mixture of experts: parameters, all-to-all dispatch and combine, token imbalance, expert data parallel."""
import pytest

from ultracluster import load_scenario
from ultracluster.shards.local import local_shards
from ultracluster.operators import matmul_params
from ultracluster.emulate import emulate

BASE = {"name": "moe", "model": {"preset": "mixtral-8x7b"},
        "training": {"seq_len": 4096, "global_batch": 256, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": 8, "pp": 4, "ep": 4}, "cluster": {"instance": "trn2.48xlarge", "instances": 8},
        "faults": {"jitter": 0.0}}


def run(**model):
    doc = {**BASE, "model": {**BASE["model"], **model}}
    return emulate(load_scenario(doc), local_shards)


def test_mixtral_active_parameters():
    sc = load_scenario(BASE)
    # Mixtral 8x7B: about 12.9 B parameters active per token (2 of 8 experts), 46.7 B in all
    assert matmul_params(sc.model) == pytest.approx(12.9e9, rel=0.05)


def test_mixtral_8x22b_active_and_total_parameters():
    from ultracluster.operators import chunk_params

    sc = load_scenario({**BASE, "model": {"preset": "mixtral-8x22b"}})
    # Mixtral 8x22B: 39 B parameters active per token (2 of 8 experts) of 141 B (Mistral AI, 2024)
    assert matmul_params(sc.model) == pytest.approx(39e9, rel=0.02)
    assert chunk_params(sc.model, 1, [sc.model.layers], 1).sum() == pytest.approx(141e9, rel=0.01)


def test_all_to_all_dispatch_and_combine_are_costed():
    res = run()
    a2a = [c for c in res.collectives if c.op == "all_to_all"]
    assert len(a2a) == 1 and a2a[0].group == "ep" and a2a[0].ranks == 4
    # dispatch + combine, forward and backward, per MoE layer and microbatch on stage 0: 32 layers / pp 4 = 8
    # layers; dp = 8 x 64 ranks / (tp 8 x pp 4) = 16, so 256 / 16 = 16 microbatches
    assert a2a[0].count_per_step == 4 * 8 * 16
    assert {c.group for c in res.collectives} >= {"tp", "ep", "dp", "dp-expert", "pp"}


def test_token_imbalance_slows_the_step_and_grows_activations():
    even, skewed = run(moe={"experts": 8, "top_k": 2, "imbalance": 1.0}), run(moe={"experts": 8, "top_k": 2,
                                                                                    "imbalance": 1.5})
    assert skewed.steps[-1].step_time_s > 1.1 * even.steps[-1].step_time_s
    assert max(m.activations_gib for m in skewed.memory) > max(m.activations_gib for m in even.memory)


def test_more_expert_parallel_ranks_hold_fewer_experts():
    ep2 = emulate(load_scenario({**BASE, "parallelism": {"tp": 8, "pp": 4, "ep": 2}}), local_shards)
    ep4 = run()
    assert ep4.memory[1].weights_gib < ep2.memory[1].weights_gib
