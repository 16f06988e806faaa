"""Each stack's defaults are what its cited source says, on a scenario that names only the stack; an explicit key wins.

The expected values below are written from the stacks' public sources (read in aws-neuron/neuronx-distributed,
aws-neuron/neuronx-nemo-megatron, aws-neuron/aws-neuron-reference-for-megatron-lm and apple/axlearn), not from
ultracluster/stacks.py: a default flipped there (NxD's recompute to `full`, its sequence parallelism off) fails
here, and no regeneration of a golden summary turns it green again.
"""
from __future__ import annotations

import pytest

from ultracluster import stacks
from ultracluster.errors import ScenarioError
from ultracluster.scenario import load_scenario

# (stack, pipelined, mlp, instance) -> {dotted key: the value its source gives}
EXPECTED = {
    # neuronx-distributed, no pipeline: examples/training/llama/tp_zero1_llama_hf_pretrain/
    ("neuronx-distributed", False, "swiglu", "trn1.32xlarge"): {
        # tp_zero1_llama_hf_pretrain.py: parser.add_argument("--use_flash_attention", default=1, ...)
        "training.attention": "flash",
        # the Llama configs (7B_config_llama2/config.json, 8B_config_llama3.1) set no dropout: HF Llama's is 0
        "model.dropout": 0.0,
        # tp_zero1_llama2_7B_hf_pretrain.sh passes --sequence_parallel_enabled
        "parallelism.sequence_parallel": True,
        # parallel_layers/layers.py + layers_utils.py: the backward's input-gradient reduce is issued
        # (LinearWithAsyncCommunication, async_grad_allreduce) before the weight-gradient matmul
        "parallelism.tp_comm_overlap": True,
        # tp_zero1_llama2_7B_hf_pretrain.sh: USE_ZERO_1=1 -> --use_zero_1
        "training.zero": 1,
        # tp_zero1_llama2_7B_hf_pretrain.sh passes --selective_checkpoint_enabled
        "training.recompute": "selective",
        # tp_zero1_llama_hf_pretrain.py checkpoints no MLP of its own (that is the pipeline example's, below)
        "training.checkpoint_mlp": False,
    },
    # neuronx-distributed with a pipeline: examples/training/llama/tp_pp_llama_hf_pretrain/
    ("neuronx-distributed", True, "swiglu", "trn1.32xlarge"): {
        # run_llama_nxd.py: --use_flash_attention default=0; run_llama2_13B_tp_pp.sh and run_llama2_70B_tp_pp.sh do
        # not pass it (NEURON_FUSE_SOFTMAX=1: the materialized core attention)
        "training.attention": "materialized",
        "model.dropout": 0.0,                            # 13B_config_llama2/config.json: no dropout
        # run_llama_nxd.py: --use_sequence_parallel default=1
        "parallelism.sequence_parallel": True,
        "parallelism.tp_comm_overlap": True,             # the same parallel layers as above
        # run_llama2_13B_tp_pp.sh, run_llama2_70B_tp_pp.sh: --use_zero1_optimizer 1
        "training.zero": 1,
        # the same scripts: --use_selective_checkpoint 1 (run_llama_nxd.py: "full" when 0)
        "training.recompute": "selective",
        # run_llama_nxd.py checkpoints (CoreAttention, LlamaMLP) only when seq_len == 8192: not at this scenario's
        # 2,048 (test_the_nxd_pipeline_checkpoints_its_mlp_at_seq_8192 below)
        "training.checkpoint_mlp": False,
    },
    # neuronx-nemo-megatron: nemo/examples/nlp/language_modeling/{test.sh, gpt_23b.sh, train_setup.sh,
    # conf/megatron_gpt_config.yaml}; GPT (gelu)
    ("neuronx-nemo-megatron", True, "gelu", "trn1.32xlarge"): {
        # train_setup.sh: NEURON_FUSE_SOFTMAX=1, the core attention (no flash in the GPT scripts)
        "training.attention": "materialized",
        # test.sh: model.hidden_dropout=0.1; megatron_gpt_config.yaml: attention_dropout 0.1
        "model.dropout": 0.1,
        # test.sh: model.sequence_parallel=True
        "parallelism.sequence_parallel": True,
        # gpt_model.py: async_tensor_model_parallel_allreduce = tp > 1 and not sequence_parallel
        "parallelism.tp_comm_overlap": False,
        # train_setup.sh (training_precision="bf16SR"): wrap_with_zero=false
        "training.zero": 0,
        # gpt_23b.sh: export ACT_CHKPNT_GRANULARITY=selective (over test.sh's default, full)
        "training.recompute": "selective",
    },
    # neuronx-nemo-megatron, Llama (swiglu): test_llama.sh
    ("neuronx-nemo-megatron", False, "swiglu", "trn1.32xlarge"): {
        "training.attention": "materialized",            # test_llama.sh: USE_FLASH_ATTENTION defaults to False
        "model.dropout": 0.0,                            # test_llama.sh: model.hidden_dropout=0
        "parallelism.sequence_parallel": True,           # test_llama.sh: model.sequence_parallel=True
        "parallelism.tp_comm_overlap": False,            # gpt_model.py, as above
        "training.zero": 0,                              # train_setup.sh: wrap_with_zero=false
        # test_llama.sh (llama_7b.sh, llama_13b.sh) and test_llama_gqa.sh (llama_70b.sh):
        # model.activations_checkpoint_granularity=full
        "training.recompute": "full",
    },
    # megatron-lm-neuron: examples/pretrain_gpt3_6.7B_32layers_bf16.sh
    ("megatron-lm-neuron", False, "gelu", "trn1.32xlarge"): {
        # --no-masked-softmax-fusion and NEURON_FUSE_SOFTMAX=1: the core attention, materialized
        "training.attention": "materialized",
        "model.dropout": 0.0,                            # --attention-dropout 0 --hidden-dropout 0
        "parallelism.sequence_parallel": False,          # no --sequence-parallel
        "parallelism.tp_comm_overlap": False,            # --no-async-tensor-model-parallel-allreduce
        "training.zero": 0,                              # no --use-distributed-optimizer
        "training.recompute": "none",                    # no --recompute-* / --checkpoint-activations
    },
    # axlearn: axlearn/experiments/text/gpt/fuji.py's "neuron-(trn2|trn2n).48xlarge-64" mesh rule; arXiv 2507.05411
    ("axlearn", False, "swiglu", "trn2.48xlarge"): {
        "training.attention": "flash",                   # the NKI flash-attention kernel (arXiv 2507.05411)
        "model.dropout": 0.0,                            # fuji.py: dropout_rate: float = 0.0
        # fuji.py _generate_trn2_custom_configs: "Sequence parallel shardings for norms" (their inputs sharded over
        # the model axis)
        "parallelism.sequence_parallel": True,
        # no cited source names it: the stack's stated value (the XLA compiler schedules the TP collectives)
        "parallelism.tp_comm_overlap": True,
        "training.zero": 3,                              # mesh_shape_from_axes(fsdp=-1, model=4): FSDP across chips
        # arXiv 2507.05411: full recomputation fits Llama-2-70B (fuji.py's newer 70B Trn2 rule saves the QKV and
        # linear1 outputs: a policy between selective and full, not modelled)
        "training.recompute": "full",
        "cluster.lnc": 2,                                # "Each TRN2 chip has 4 XLA cores": 8 NeuronCores at LNC=2
    },
    # torchneuron: pytorch/torchtitan (what the SDK's Native PyTorch for AWS Trainium page says runs with minimal
    # changes) and the Neuron SDK's Trn2 defaults; no pipeline yet
    ("torchneuron", False, "swiglu", "trn2.48xlarge"): {
        "training.attention": "flash",                   # the Neuron SDK's NKI flash-attention kernel on Trn2
        "model.dropout": 0.0,                            # torchtitan/models/llama3: no dropout in the model
        "parallelism.sequence_parallel": True,           # torchtitan/config/configs.py: enable_sequence_parallel = True
        # torchtitan/config/configs.py: enable_async_tensor_parallel = False (and only under torch.compile)
        "parallelism.tp_comm_overlap": False,
        "training.zero": 3,                              # FSDP2 fully_shard (torchtitan/distributed/fsdp.py)
        # torchtitan/distributed/activation_checkpoint.py: SelectiveAC, per-op selective checkpointing
        "training.recompute": "selective",
        # torchtitan/distributed/fsdp.py apply_fsdp_to_decoder: fully_shard per transformer block, each block's
        # parameters all-gathered before its use and its gradients reduce-scattered after its backward
        "parallelism.fsdp_schedule": "layerwise",
        "cluster.lnc": 2,                                # the Neuron SDK's Trn2 default, LNC=2
    },
}


def only_the_stack(stack: str, pipelined: bool, mlp: str, instance: str, **extra) -> dict:
    """A scenario giving none of the keys a stack fills: the stack, a model, a batch and a layout."""
    d = {"name": "t", "stack": stack,
         "model": {"layers": 8, "hidden": 1024, "heads": 8, "ffn": 4096, "mlp": mlp, "vocab": 32000},
         "training": {"seq_len": 2048, "global_batch": 64},
         "parallelism": {"tp": 8, "pp": 2 if pipelined else 1},
         "cluster": {"instance": instance, "instances": 2}}
    for dotted, value in extra.items():
        section, name = dotted.split(".")
        d[section][name] = value
    return d


def value(scenario, dotted: str):
    section, name = dotted.split(".")
    return getattr(getattr(scenario, section), name)


def test_every_stack_and_every_key_it_fills_has_its_sources_value():
    covered = {s for s, *_ in EXPECTED}
    assert covered == set(stacks.NEURON_STACKS)
    for case, expected in EXPECTED.items():
        assert set(expected) == set(stacks.STACKS[case[0]].defaults), case


@pytest.mark.parametrize("case", list(EXPECTED), ids=lambda c: f"{c[0]}-{'pp' if c[1] else 'nopp'}-{c[2]}")
def test_a_scenario_naming_only_its_stack_gets_what_the_source_says(case):
    s = load_scenario(only_the_stack(*case))
    assert stacks.explicit(s) == {"stack"}, "the scenario must name only its stack"
    got = {k: value(s, k) for k in EXPECTED[case]}
    assert got == EXPECTED[case]


# another value of each key (one the stack runs where it runs more than its default)
OTHER = {"training.attention": {"flash": "materialized", "materialized": "flash"},
         "model.dropout": {0.0: 0.2, 0.1: 0.0},
         "parallelism.sequence_parallel": {True: False, False: True},
         "parallelism.tp_comm_overlap": {True: False, False: True},
         "training.zero": {0: 1, 1: 0, 3: 1},
         "training.recompute": {"selective": "none", "none": "full", "full": "selective"},
         "cluster.lnc": {2: 1},
         "parallelism.fsdp_schedule": {"layerwise": "compiler", "compiler": "layerwise"},
         "training.checkpoint_mlp": {False: True, True: False}}


@pytest.mark.parametrize("case, key", [(c, k) for c in EXPECTED for k in EXPECTED[c]],
                         ids=lambda x: x if isinstance(x, str) else f"{x[0]}-{'pp' if x[1] else 'nopp'}-{x[2]}")
def test_an_explicit_key_wins_over_the_stack(case, key):
    other = OTHER[key][EXPECTED[case][key]]
    d = only_the_stack(*case, **{key: other})
    stack = case[0]
    refused = [k for k, *_ in stacks.unsupported(stack, stacks.chip_of(case[3]), 2 if case[1] else 1,
                                                 other if key == "training.zero" else EXPECTED[case]["training.zero"],
                                                 "1f1b", 1, 1, other if key == "cluster.lnc" else 2)]
    if key in refused:
        # the stack runs only its default (Megatron-LM ZeRO 0, AXLearn ZeRO 3 and LNC 2): the explicit value is
        # kept and refused by name, never replaced by the default
        with pytest.raises(ScenarioError) as e:
            load_scenario(d)
        assert key in str(e.value) and str(other) in str(e.value)
        return
    s = load_scenario(d)
    assert value(s, key) == other
    assert key in stacks.explicit(s)
    # the other keys the stack still fills
    assert {k: value(s, k) for k in EXPECTED[case] if k != key} == \
        {k: v for k, v in EXPECTED[case].items() if k != key}


def test_the_nxd_pipeline_checkpoints_its_mlp_at_seq_8192():
    """run_llama_nxd.py (the Llama-3 70B tp_pp scripts run it at seq 8192): activation_checkpoint with
    (CoreAttention, LlamaMLP) when seq_len == 8192, CoreAttention alone otherwise; the non-pipeline example never."""
    at = lambda pp, seq: load_scenario({**only_the_stack("neuronx-distributed", pp > 1, "swiglu", "trn1.32xlarge"),
                                        "training": {"seq_len": seq, "global_batch": 64}}).training.checkpoint_mlp
    assert at(2, 8192) is True and at(2, 4096) is False and at(1, 8192) is False
