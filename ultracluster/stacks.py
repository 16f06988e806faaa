"""Training stacks: what a scenario's `stack` brings (its defaults, its pipeline engine, what it runs).

A user thinks "I run NeuronX Distributed", not in five knobs. A scenario names its stack (`stack:`), and the
stack fills the keys the scenario does not give (`defaults`), decides how its pipeline engine runs a
microbatch (`Engine`: graph executions and stage exchanges, read in each stack's code), and says what it
runs (`Support`: chips, parallel combinations, ZeRO stages, schedules, LNC), each with its source. A scenario
that asks a stack for what it does not run is bad input (`check`), found before anything runs.

`custom` is today's explicit knobs: no defaults beyond the schema's, no engine costs, everything allowed.

Sources (read in the stacks' public repositories; docs/scenarios.md "Training stacks" lists them):
- NxD: aws-neuron/neuronx-distributed, `src/neuronx_distributed/pipeline/{model,scheduler,comm}.py` (the
  pipeline engine), `examples/training/llama/tp_zero1_llama_hf_pretrain/*` (no pipeline) and
  `examples/training/llama/tp_pp_llama_hf_pretrain/*` (pipeline), `trainer/optimizer.py` (ZeRO-1 only).
- NeMo: aws-neuron/neuronx-nemo-megatron, `apex/transformer/pipeline_parallel/{schedules,p2p_communication}.py`,
  `nemo/examples/nlp/language_modeling/conf/megatron_gpt_config.yaml`, `test.sh`, `gpt_23b.sh`, `test_llama.sh`.
- Megatron-LM: aws-neuron/aws-neuron-reference-for-megatron-lm, `pretrain_gpt3_6.7B_32layers_bf16*.sh`.
- AXLearn: apple/axlearn's Trn2 mesh rules (FSDP x TP at LNC=2) and arXiv 2507.05411.
- TorchNeuron: the Neuron SDK's "Native PyTorch for AWS Trainium" page (aws-neuron-sdk
  `frameworks/torch/pytorch-native-overview.rst`) and pytorch/torchtitan (`torchtitan/distributed/fsdp.py`,
  `torchtitan/config/configs.py`): FSDP2 x DTensor TP, no pipeline yet, eager or torch.compile.
- End of support: aws-neuron-sdk `about-neuron/announcements/neuron2.x/announce-eos-nxdt-nxd-core-training.rst`,
  `announce-no-support-pytorch-xla-training.rst`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ultracluster.errors import Problem

NAMES = ("neuronx-distributed", "neuronx-nemo-megatron", "megatron-lm-neuron", "axlearn", "torchneuron", "custom")
CHIPS = {"trainium": "trn1", "trainium2": "trn2", "trainium3": "trn3"}


@dataclass(frozen=True)
class Engine:
    """How a stack's pipeline engine runs one microbatch on one stage, beyond its layers.

    Attributes:
        graphs_pp1: graph executions per microbatch without a pipeline (the device loader marks one step per
            microbatch: forward and backward are one graph).
        graphs_fwd, graphs_bwd: graph executions of a microbatch's forward and backward on a stage of a
            pipeline (each `xm.mark_step()` the engine issues ends one).
        graph_factor: the `Calibration` field that times one graph execution of this engine (no source gives it;
            0 in the shipped fit, a profile may fit it per engine), or None (no cost: `custom`).
        source: where it says so. How a stage exchanges activations (NxD: each send and receive a 2-rank
            all_gather in a graph of its own; Megatron: a send and the opposite receive as one exchange) is in
            the graph counts above and in the replay's sends (`replay.comm.pipeline_sends`, issued in-graph).
        serial_exchanges: each exchange is a collective over the stage pair in a graph of its own, so both stages
            wait in it (`Calibration.serial_exchanges`); False: sends overlap the sender's next work.
    """

    graphs_pp1: float
    graphs_fwd: float
    graphs_bwd: float
    graph_factor: str | None
    source: str
    serial_exchanges: bool = False


@dataclass(frozen=True)
class Support:
    """What a stack runs. Each entry is (allowed values, source); None allows anything."""

    chips: tuple[tuple[str, ...], str]
    pp: tuple[bool, str]                              # pipelines at all
    zero: tuple[tuple[int, ...], str]                 # ZeRO stages without a pipeline
    zero_with_pp: tuple[tuple[int, ...], str]         # ZeRO stages with a pipeline
    schedules: tuple[tuple[str, ...], str]
    cp: tuple[bool, str]
    ep: tuple[bool, str]
    lnc: tuple[tuple[int, ...], str]


@dataclass(frozen=True)
class Stack:
    """A training stack: its defaults (scenario keys it fills when not given), engine and support."""

    name: str
    label: str
    defaults: dict[str, Any]                          # dotted key -> value, or {"pp1": v, "pipeline": v}
    defaults_source: str
    engine: Engine
    support: Support
    notes: tuple[str, ...] = field(default_factory=tuple)
    end_of_support: str | None = None                 # where the stack is no longer supported, with its source


_ANY_CHIP = (("trn1", "trn2", "trn3"), "")
_NXD_PIPE = ("neuronx-distributed pipeline/model.py: every 1F1B task (receive, forward, send; receive, backward, "
             "send) ends with xm.mark_step() (scheduler.py: graph_break=True); pipeline/comm.py: send and receive "
             "are xm.all_gather over the stage pair")
_MEG_PIPE = ("neuronx-nemo-megatron apex pipeline_parallel/p2p_communication.py: _communicate marks a step before "
             "and after each exchange, send_forward_recv_backward and send_backward_recv_forward are one exchange "
             "each (two xm.all_reduce over the pair); the forward and the backward are one graph each")

# end of support, from the Neuron SDK's own announcements (aws-neuron/aws-neuron-sdk @81ce03ae)
_NXD_EOS = ("NeuronX Distributed Training and the NxD Core training APIs reached end of support after Neuron SDK 2.28 "
            "(PyTorch 2.9): the SDK moves training to native PyTorch (torchneuron). Source: Neuron SDK "
            "announce-eos-nxdt-nxd-core-training (2026-02-26) and the 2.29 release notes")
_XLA_EOS = ("PyTorch/XLA is no longer supported for training from Neuron SDK 2.30 (PyTorch 2.9 the last XLA-based "
            "version): the SDK moves training to native PyTorch (torchneuron). Source: Neuron SDK "
            "announce-no-support-pytorch-xla-training (2026-05-20)")

STACKS: dict[str, Stack] = {
    "neuronx-distributed": Stack(
        name="neuronx-distributed", label="NeuronX Distributed (NxD)",
        defaults={"training.attention": {"pp1": "flash", "pipeline": "materialized"},
                  "model.dropout": 0.0, "parallelism.sequence_parallel": True,
                  "parallelism.tp_comm_overlap": True, "training.zero": 1, "training.recompute": "selective",
                  "training.checkpoint_mlp": {"pp1": False, "pipeline": {"seq_len": {8192: True}, "other": False}}},
        defaults_source=("tp_zero1_llama_hf_pretrain.py: --use_flash_attention defaults to 1; the pipeline example's "
                         "run_llama_nxd.py defaults it to 0 and the Llama-2 13B/70B tp_pp scripts do not set it (the "
                         "materialized core attention with NEURON_FUSE_SOFTMAX=1); both examples: sequence "
                         "parallelism, selective checkpointing, ZeRO-1 (--use_zero_1, --use_zero1_optimizer 1); "
                         "the tp_pp example checkpoints (CoreAttention, LlamaMLP) when seq_len == 8192 and "
                         "CoreAttention alone otherwise (run_llama_nxd.py), the no-pipeline example CoreAttention "
                         "alone (tp_zero1_llama_hf_pretrain.py)"),
        engine=Engine(1.0, 3.0, 3.0, "graph_s_nxd", _NXD_PIPE, True),
        support=Support(
            chips=(("trn1", "trn2", "trn3"), "NxD runs on Trn1 and Trn2 (Neuron SDK docs); Trn3 through the same SDK"),
            pp=(True, "pipeline/scheduler.py: Train1F1BSchedule, TrainInterleavedSchedule"),
            zero=((0, 1), "trainer/optimizer.py: zero_one_enabled (ZeRO-1) or plain; NxD has no FSDP (ZeRO-3)"),
            zero_with_pp=((0, 1), "the tp_pp examples: ZeRO-1 with the pipeline (--use_zero1_optimizer 1)"),
            schedules=(("1f1b", "interleaved"), "pipeline/scheduler.py: 1F1B and interleaved; no GPipe training schedule"),
            cp=(True, "parallel_layers/parallel_state.py: context-parallel groups"),
            ep=(True, "modules/moe: expert parallelism (Mixtral, DBRX examples)"),
            lnc=((1, 2), "Neuron SDK: LNC=1 or 2 on Trn2/Trn3, LNC=2 the default")),
        end_of_support=_NXD_EOS),
    "neuronx-nemo-megatron": Stack(
        name="neuronx-nemo-megatron", label="NeMo Megatron (neuronx-nemo-megatron)",
        defaults={"training.attention": "materialized", "model.dropout": {"gelu": 0.1, "swiglu": 0.0},
                  "parallelism.sequence_parallel": True, "parallelism.tp_comm_overlap": False, "training.zero": 0,
                  "training.recompute": {"gelu": "selective", "swiglu": "full"}},
        defaults_source=("megatron_gpt_config.yaml, test.sh, gpt_23b.sh, test_llama.sh: core attention with the fused "
                         "softmax (NEURON_FUSE_SOFTMAX=1), GPT hidden and attention dropout 0.1, Llama 0, "
                         "sequence_parallel=True, the async TP all-reduce off with sequence parallelism, "
                         "wrap_with_zero False (no ZeRO-1), selective activations checkpointing for GPT (gpt_23b.sh) "
                         "and full for Llama (test_llama.sh, test_llama_gqa.sh: activations_checkpoint_granularity=full)"),
        engine=Engine(1.0, 2.0, 2.0, "graph_s_nemo", _MEG_PIPE, True),
        support=Support(
            chips=(("trn1",), "the neuronx-nemo-megatron examples and ParallelCluster jobs run trn1.32xlarge; "
                   "NxD Training replaced it for Trn2"),
            pp=(True, "apex schedules: pipelining without and with interleaving"),
            zero=((0, 1), "wrap_with_zero: ZeRO-1 when True (default False)"),
            zero_with_pp=((0, 1), "wrap_with_zero works with the pipeline; no FSDP"),
            schedules=(("1f1b", "interleaved"), "apex fwd_bwd_pipelining_without_interleaving / with_interleaving"),
            cp=(False, "no context parallelism in the fork"),
            ep=(False, "no MoE expert parallelism in the Neuron fork's examples"),
            lnc=((1,), "Trn1 only: LNC=1")),
        end_of_support=_XLA_EOS),
    "megatron-lm-neuron": Stack(
        name="megatron-lm-neuron", label="Megatron-LM (Neuron reference fork)",
        defaults={"training.attention": "materialized", "model.dropout": 0.0,
                  "parallelism.sequence_parallel": False, "parallelism.tp_comm_overlap": False, "training.zero": 0,
                  "training.recompute": "none"},
        defaults_source=("pretrain_gpt3_6.7B_32layers_bf16*.sh: core attention without the masked-softmax fusion, "
                         "--attention-dropout 0 --hidden-dropout 0, no sequence parallelism, "
                         "--no-async-tensor-model-parallel-allreduce, no distributed optimizer, no recomputation"),
        engine=Engine(1.0, 2.0, 2.0, "graph_s_nemo",
                      "the fork's pipeline is Megatron's p2p schedule with xm.mark_step around each exchange, "
                      "as NeMo's (assumed: its one published layout has no pipeline)", True),
        support=Support(
            chips=(("trn1",), "the Megatron-LM reference fork's tutorial runs trn1.32xlarge"),
            pp=(False, "the fork's tutorial and scripts run tensor parallelism only"),
            zero=((0,), "the fork has no distributed optimizer"),
            zero_with_pp=((0,), "no distributed optimizer"),
            schedules=(("1f1b",), "Megatron's 1F1B"),
            cp=(False, "no context parallelism in the fork"),
            ep=(False, "no MoE in the fork"),
            lnc=((1,), "Trn1 only: LNC=1")),
        end_of_support=_XLA_EOS),
    "axlearn": Stack(
        name="axlearn", label="AXLearn",
        defaults={"training.attention": "flash", "model.dropout": 0.0, "parallelism.sequence_parallel": True,
                  "parallelism.tp_comm_overlap": True, "training.zero": 3, "training.recompute": "full",
                  "cluster.lnc": 2},
        defaults_source=("AXLearn's Trn2 mesh rule: FSDP (ZeRO-3) x TP at LNC=2, the NKI flash-attention kernel; "
                         "full recomputation is what fits 24 GiB per rank for Llama-2-70B (arXiv 2507.05411)"),
        engine=Engine(1.0, 0.0, 0.0, None, "AXLearn on Neuron runs FSDP x TP without a pipeline"),
        support=Support(
            chips=(("trn2", "trn3"), "AXLearn's Neuron mesh rules name trn2 instance types (Trn3 through the same SDK)"),
            pp=(False, "AXLearn's Trn2 mesh rules shard over FSDP and TP; no pipeline stage axis on Neuron"),
            zero=((3,), "FSDP (ZeRO-3) is AXLearn's data-parallel sharding"),
            zero_with_pp=((), "no pipeline"),
            schedules=(("1f1b",), "no pipeline"),
            cp=(False, "no context-parallel axis in the Neuron mesh rules"),
            ep=(False, "no expert axis in the Neuron mesh rules"),
            lnc=((2,), "the Trn2 mesh rule runs LNC=2"))),
    # TorchNeuron, native PyTorch on Neuron (the SDK's training path after PyTorch/XLA): no measured run exists, so
    # every cell of it is outside the calibration (`extrapolated`: cell, widened by the group-out error)
    "torchneuron": Stack(
        name="torchneuron", label="TorchNeuron (native PyTorch, TorchTitan)",
        defaults={"training.attention": "flash", "model.dropout": 0.0, "parallelism.sequence_parallel": True,
                  "parallelism.tp_comm_overlap": False, "training.zero": 3, "training.recompute": "selective",
                  "parallelism.fsdp_schedule": "layerwise", "cluster.lnc": 2},
        defaults_source=("TorchTitan (pytorch/torchtitan @b5bcd76): FSDP2 fully_shard per transformer block "
                         "(torchtitan/distributed/fsdp.py apply_fsdp_to_decoder: each block's parameters "
                         "all-gathered before its forward and backward with FSDP2's implicit one-block prefetch, its "
                         "gradients reduce-scattered after its backward), DTensor TP with enable_sequence_parallel "
                         "= True, enable_async_tensor_parallel = False (and only under torch.compile: "
                         "torchtitan/config/configs.py), per-op selective activation checkpointing "
                         "(torchtitan/distributed/activation_checkpoint.py); the NKI flash-attention kernel and "
                         "LNC=2 as the Neuron SDK's Trn2 defaults"),
        engine=Engine(1.0, 0.0, 0.0, "graph_s_nxd",
                      "the SDK's Native PyTorch for AWS Trainium page: torch.compile(backend='neuron') receives the "
                      "forward and backward FX graphs (AOT Autograd) and compiles them, one graph execution a "
                      "microbatch as an XLA stack's, at the NxD engine's fitted cost per graph (an assumption: no "
                      "TorchNeuron run is published); eager dispatch (Adaptive Eager Execution: ATen ops dispatched "
                      "as they are called, with operator fusion) has no published cost and is not timed apart"),
        support=Support(
            chips=(("trn2", "trn3"), "TorchNeuron is supported on Trainium2 and Trainium3 (Neuron SDK TorchNeuron "
                   "docs)"),
            pp=(False, "the SDK's Native PyTorch for AWS Trainium page: FSDP, DTensor, DDP and TP; 'Support for "
                "additional parallelism strategies such as Pipeline Parallelism (PP) will be available soon'"),
            zero=((0, 3), "DDP (ZeRO 0) or FSDP2 (ZeRO 3, TorchTitan's data_parallel_shard_degree); no ZeRO-1 "
                  "optimizer"),
            zero_with_pp=((), "no pipeline yet"),
            schedules=(("1f1b",), "no pipeline yet"),
            cp=(False, "the Native PyTorch page lists FSDP, DTensor, DDP and TP only"),
            ep=(False, "the Native PyTorch page lists no expert parallelism"),
            lnc=((1, 2), "Neuron SDK: LNC=1 or 2 on Trn2/Trn3, LNC=2 the default")),
        notes=("no measured TorchNeuron run is published: every layout it runs is extrapolated (cell) and its "
               "interval widened by the calibration's group-out error",)),
    "custom": Stack(
        name="custom", label="custom (explicit keys)", defaults={}, defaults_source="the scenario's own keys",
        engine=Engine(0.0, 0.0, 0.0, None, "no stack engine: today's explicit knobs"),
        support=Support(chips=_ANY_CHIP, pp=(True, ""), zero=((0, 1, 2, 3), ""), zero_with_pp=((0, 1, 2, 3), ""),
                        schedules=(("gpipe", "1f1b", "interleaved"), ""), cp=(True, ""), ep=(True, ""),
                        lnc=((1, 2), ""))),
}
NEURON_STACKS = tuple(n for n in NAMES if n != "custom")
SHORT = {"neuronx-distributed": "nxd", "neuronx-nemo-megatron": "nemo", "megatron-lm-neuron": "megatron",
         "axlearn": "axlearn", "torchneuron": "torchneuron", "custom": "custom"}       # a plan row's label names its stack by these
# the keys a stack's defaults fill (each stack's `defaults`), and of them those that change how a layout is timed
# but are no layout column of a plan (the planner times each distinct setting of them apart: `for_cell`)
STACK_KEYS = tuple(dict.fromkeys(k for s in STACKS.values() for k in s.defaults))
TIMING_KEYS = ("training.attention", "model.dropout", "parallelism.tp_comm_overlap", "parallelism.fsdp_schedule",
               "training.checkpoint_mlp")


def _get(raw: dict, dotted: str) -> tuple[bool, Any]:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def defaults_for(stack: str, pp: int, mlp: str | None, seq_len: int | None = None) -> dict[str, Any]:
    """The dotted keys a stack fills for a layout with `pp` stages, an `mlp` kind and a `seq_len`, resolved to
    values (a default may depend on each: {"pp1": v, "pipeline": v}, {mlp kind: v},
    {"seq_len": {length: v}, "other": v})."""
    out = {}
    for key, value in STACKS[stack].defaults.items():
        if isinstance(value, dict) and "pp1" in value:
            value = value["pp1"] if pp <= 1 else value["pipeline"]
        if isinstance(value, dict) and "seq_len" in value:
            value = value["seq_len"].get(seq_len, value["other"])
        elif isinstance(value, dict):
            value = value.get(mlp or "swiglu", 0.0)
        out[key] = value
    return out


def filled(scenario) -> dict[str, Any]:
    """The keys a loaded scenario's stack filled (its defaults the scenario did not give), with their values: what
    `validate` prints. Empty for `custom` or a scenario not made by `load_scenario`."""
    given = explicit(scenario)
    if given is None:
        return {}
    out = {}
    for key in STACKS[scenario.stack].defaults:
        if key in given or (key == "cluster.lnc" and chip_of(scenario.cluster.instance) == "trn1"):
            continue
        section, name = key.split(".")
        out[key] = getattr(getattr(scenario, section), name)
    return out


def apply_defaults(raw: dict) -> None:
    """Fill the keys the scenario does not give from its stack's defaults (explicit keys win). `training.zero`
    is not filled where the scenario gives its older spelling `training.zero1`; `cluster.lnc` only on chips
    that have an LNC setting. A bad `stack` value is left for validation to report."""
    stack = raw.get("stack", "custom")
    if not isinstance(stack, str) or stack not in STACKS:
        return
    par = raw.get("parallelism") if isinstance(raw.get("parallelism"), dict) else {}
    pp = par.get("pp", 1) if type(par.get("pp", 1)) is int else 1
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    mlp = model.get("mlp") if isinstance(model.get("mlp"), str) else None
    train = raw.get("training") if isinstance(raw.get("training"), dict) else {}
    seq = train.get("seq_len") if type(train.get("seq_len")) is int else None
    for key, value in defaults_for(stack, pp, mlp, seq).items():
        section, name = key.split(".")
        node = raw.get(section)
        if node is None:
            node = raw[section] = {}
        if not isinstance(node, dict) or name in node:
            continue
        if key == "training.zero" and "zero1" in node:
            continue
        if key == "cluster.lnc" and _chip(node.get("instance")) == "trn1":
            continue
        node[name] = value


def explicit_keys(raw: dict) -> frozenset[str]:
    """The stack-filled keys (STACK_KEYS, and `stack` itself) a scenario's dict gives before its stack's defaults
    are applied (`training.zero` also when given as `training.zero1`): what `load_scenario` keeps on the Scenario
    (`explicit`), so the planner can apply another stack's defaults to the other keys."""
    keys = {k for k in STACK_KEYS + ("stack",) if _get(raw, k)[0]}
    if _get(raw, "training.zero1")[0]:
        keys.add("training.zero")
    return frozenset(keys)


def explicit(scenario) -> frozenset[str] | None:
    """The keys of `explicit_keys` a loaded scenario gave itself; None when unknown (a Scenario not made by
    `load_scenario`: its values are then taken as its own)."""
    return getattr(scenario, "_explicit", None)


def names_its_stack(scenario) -> bool:
    """Whether the scenario names a stack (`stack:` given, `custom` included), rather than leaving it unset."""
    given = explicit(scenario)
    return scenario.stack != "custom" or (given is not None and "stack" in given)


def for_cell(scenario, stack: str, pipelined: bool):
    """The scenario as `stack` runs a layout with (`pipelined`) or without a pipeline: `stack` set, and the keys
    that time a layout beyond its columns (TIMING_KEYS: attention kernel, dropout, TP overlap) the stack's
    defaults where the scenario did not give them (`custom`: the schema's defaults). The same object when nothing
    changes. The layout columns (ZeRO, recomputation, sequence parallelism, LNC) are the planner's rows'."""
    given = explicit(scenario)
    given = frozenset(TIMING_KEYS) if given is None else given
    values = defaults_for(stack, 2 if pipelined else 1, scenario.model.mlp, scenario.training.seq_len)
    update: dict[str, Any] = {"stack": stack} if scenario.stack != stack else {}
    sections: dict[str, dict] = {}
    for key in TIMING_KEYS:
        if key in given:
            continue
        section, name = key.split(".")
        spec = getattr(scenario, section)
        value = values[key] if key in values else type(spec).model_fields[name].default
        if getattr(spec, name) != value:
            sections.setdefault(section, {})[name] = value
    if not update and not sections:
        return scenario
    for section, changed in sections.items():
        update[section] = getattr(scenario, section).model_copy(update=changed)
    return scenario.model_copy(update=update)


def sequence_parallel(stack: str, scenario) -> bool | None:
    """Whether `stack` runs tensor-parallel layouts with sequence parallelism: the scenario's own setting where it
    gives one, else the stack's default; None for `custom` (the planner's rule: on whenever tp > 1)."""
    if stack == "custom":
        return None
    given = explicit(scenario)
    if given is None or "parallelism.sequence_parallel" in given:
        return bool(scenario.parallelism.sequence_parallel)
    return bool(STACKS[stack].defaults.get("parallelism.sequence_parallel", True))


def runs(stack: str, chip, pp, zero, schedule, cp, ep, lnc) -> np.ndarray:
    """Which layouts `stack` runs, over arrays of layouts (the vectorized `unsupported`: a layout runs when
    `unsupported` finds nothing; tests/scenario/test_stacks.py holds them equal). `chip`: trn1, trn2 or trn3."""
    sup = STACKS[stack].support
    chip = np.asarray(chip, dtype=object)
    pp, cp, ep, lnc = (np.asarray(x) for x in (pp, cp, ep, lnc))
    zero, schedule = np.asarray(zero), np.asarray(schedule, dtype=object)
    piped = pp > 1
    ok = np.isin(chip, np.array(sup.chips[0], dtype=object))
    ok = ok & (~piped | sup.pp[0])
    ok &= np.where(piped, np.isin(zero, sup.zero_with_pp[0]), np.isin(zero, sup.zero[0]))
    ok &= ~piped | np.isin(schedule, np.array(sup.schedules[0], dtype=object))
    ok &= (cp <= 1) | sup.cp[0]
    ok &= (ep <= 1) | sup.ep[0]
    ok &= ~np.isin(chip, np.array(("trn2", "trn3"), dtype=object)) | np.isin(lnc, sup.lnc[0])
    return ok


def chip_of(instance: str) -> str | None:
    """trn1, trn2 or trn3: the chip generation of an instance type, as the stacks' support names it."""
    return _chip(instance)


def _chip(instance: Any) -> str | None:
    from ultracluster.cluster.catalog import INSTANCES

    spec = INSTANCES.get(instance) if isinstance(instance, str) else None
    return CHIPS.get(spec.chip.name) if spec else None


def unsupported(stack: str, chip: str | None, pp: int, zero: int, schedule: str, cp: int, ep: int,
                lnc: int, instance: str | None = None) -> list[tuple[str, Any, str]]:
    """What a stack does not run of a layout: (key, given, what the stack runs and where it says so)."""
    st = STACKS[stack]
    sup = st.support
    out = []

    def say(key: str, given: Any, allowed: str, source: str) -> None:
        out.append((key, given, f"{stack} runs {allowed}" + (f" ({source})" if source else "")))

    if chip is not None and chip not in sup.chips[0]:
        say("cluster.instance", instance or chip, "on " + ", ".join(f"{c}*" for c in sup.chips[0]) + " instances",
            sup.chips[1])
    if pp > 1 and not sup.pp[0]:
        say("parallelism.pp", pp, "no pipeline: pp 1", sup.pp[1])
    if pp > 1 and sup.pp[0] and zero not in sup.zero_with_pp[0]:
        say("training.zero", zero, "ZeRO " + ", ".join(map(str, sup.zero_with_pp[0])) + f" with a pipeline (pp={pp})",
            sup.zero_with_pp[1])
    elif pp <= 1 and zero not in sup.zero[0]:
        say("training.zero", zero, "ZeRO " + ", ".join(map(str, sup.zero[0])), sup.zero[1])
    if pp > 1 and sup.pp[0] and schedule not in sup.schedules[0]:
        say("parallelism.pp_schedule", schedule, "the schedules " + ", ".join(sup.schedules[0]), sup.schedules[1])
    if cp > 1 and not sup.cp[0]:
        say("parallelism.cp", cp, "no context parallelism: cp 1", sup.cp[1])
    if ep > 1 and not sup.ep[0]:
        say("parallelism.ep", ep, "no expert parallelism: ep 1", sup.ep[1])
    if chip in ("trn2", "trn3") and chip in sup.chips[0] and lnc not in sup.lnc[0]:
        say("cluster.lnc", lnc, "LNC " + ", ".join(map(str, sup.lnc[0])), sup.lnc[1])
    return out


def check(scenario) -> list[Problem]:
    """Problems of a validated scenario whose stack does not run its layout (one per combination)."""
    t, par, cl = scenario.training, scenario.parallelism, scenario.cluster
    found = unsupported(scenario.stack, _chip(cl.instance), par.pp, t.zero, par.pp_schedule, par.cp, par.ep, cl.lnc,
                        cl.instance)
    return [Problem(key, given, allowed) for key, given, allowed in found]


def end_of_support_notes(names) -> list[str]:
    """One line per stack among `names` that has reached end of support, with its source."""
    return [f"{n}: {STACKS[n].end_of_support}" for n in dict.fromkeys(names) if n in STACKS
            and STACKS[n].end_of_support]


def graphs_per_microbatch(stack: str, pp: int) -> tuple[float, float]:
    """Graph executions of one microbatch's forward and backward on a stage: (forward, backward)."""
    e = STACKS[stack].engine
    return (e.graphs_pp1, 0.0) if pp <= 1 else (e.graphs_fwd, e.graphs_bwd)


def graph_seconds(stack: str, pp: int, calibration) -> tuple[float, float]:
    """Seconds the stack's engine adds to one microbatch's forward and backward on each stage (its graph
    executions at the engine's fitted cost per graph)."""
    e = STACKS[stack].engine
    if e.graph_factor is None:
        return 0.0, 0.0
    g = float(getattr(calibration, e.graph_factor))
    f, b = graphs_per_microbatch(stack, pp)
    return f * g, b * g
