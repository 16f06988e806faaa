"""Scenario schema: resolved scenario dict -> frozen, strictly typed ``Scenario`` (docs/scenarios.md).

Every model forbids unknown keys, is frozen and strict: an integer must be a YAML integer (not ``"8"``, not
``true``, not ``8.0``); a number may be an integer or a float, never a string, infinity or NaN. Derived
values (model shape from a preset, ``parallelism.dp``, ``parallelism.sequence_parallel``, ``cluster.lnc``,
``cluster.ultraserver``, ``model.kv_heads``) are filled by ``load.py`` before validation, so a validated
``Scenario`` holds concrete values only. Cross-field rules live in ``checks.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, PrivateAttr, field_validator
from pydantic_core import PydanticCustomError

from ultracluster.cluster.catalog import INSTANCES, LINK_GBPS_RANGE, LINK_GBPS_WHY, ranks_per_instance

from .presets import PRESETS

InstanceType = Literal["trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge", "trn3.48xlarge",
                       "trn3gen2.16xlarge"]
Precision = Literal["bf16", "fp8", "fp32", "mxfp8", "mxfp4"]


def _auto_or_count(value: object) -> object:
    if value == "auto" or (type(value) is int and value >= 1):
        return value
    raise PydanticCustomError("uc_auto_or_count", "'auto' or an integer >= 1")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


BOUNDS_KEY = "x-bounds"   # the JSON Schema keyword (an extension) that says why a key's range is what it is


def why(reason: str) -> dict[str, str]:
    """A field's `json_schema_extra`: the physical reason for its bounds, shown in the schema and with the bound
    when validation refuses a value (`load._problem`). Every numeric key has bounds, so that what `validate`
    accepts, `run` can time: nothing overflows float64 or vanishes below its smallest normal number."""
    return {BOUNDS_KEY: reason}


# the physical ranges shared by several keys (each reason in words: docs/scenarios.md, "Bounds")
GBPS_MOST = LINK_GBPS_RANGE[1]    # Gbit/s (cluster.catalog: the links' what-if range and its reason)
LINK_GBPS = why(LINK_GBPS_WHY)
LATENCY_US = why("microseconds; 0.001: 1 ns, light through 20 cm of fibre; 1,000,000: 1 s, five times around the "
                 "Earth in fibre")
PRICE_RANGE = (0.01, 100_000.0)   # US dollars per instance-hour (also `--price-per-hour`, layouts.space)
PRICE_WHY = ("US dollars per instance-hour; 0.01: a cent, below any EC2 price; 100,000: 4,650 x trn1.32xlarge's "
             "21.50")
MINUTES_MOST = 525_600.0  # a year of minutes
YEAR_OF_MINUTES = why("minutes; 525,600: a year")


class MoESpec(_Spec):
    """Mixture of experts: each token is routed to ``top_k`` of ``experts`` expert MLPs."""

    experts: int = Field(ge=1, description="Expert MLPs per MoE layer (count).")
    top_k: int = Field(ge=1, description="Experts each token is routed to (count); at most `experts`.")
    imbalance: float = Field(
        1.0,
        ge=1.0,
        le=65_536.0,
        description="Load imbalance of the router: tokens of the busiest expert / mean tokens per expert "
        "(ratio, 1.0 = perfectly balanced; at most experts / top_k, every token at the busiest expert). The "
        "busiest expert sets the pace of an expert-parallel step.",
        json_schema_extra=why("ratio; at most experts / top_k, every token at the busiest expert; 65,536: the "
                              "most experts"),
    )


class ModelSpec(_Spec):
    """The transformer's shape. With ``preset``, fields not given come from the preset."""

    preset: str | None = Field(None, description="Model preset whose shape fills the fields not given here.")
    layers: int = Field(ge=1, description="Transformer layers (count).")
    hidden: int = Field(ge=1, description="Hidden size (elements per token).")
    heads: int = Field(ge=1, description="Attention (query) heads (count).")
    kv_heads: int = Field(ge=1, description="Key/value heads (count) [heads]; fewer means grouped-query attention.")
    ffn: int = Field(ge=1, description="MLP inner size (elements per token).")
    mlp: Literal["swiglu", "gelu"] = Field(description="MLP kind: swiglu (3 matrices) or gelu (2 matrices).")
    vocab: int = Field(ge=1, description="Vocabulary size (tokens).")
    tied_embeddings: bool = Field(False, description="Input embedding shared with the output layer [false].")
    norm: Literal["rmsnorm", "layernorm"] = Field(
        "rmsnorm", description="Normalization: rmsnorm (Llama) or layernorm with bias (GPT) [rmsnorm, or the preset's].")
    position: Literal["rotary", "learned"] = Field(
        "rotary", description="Positions: rotary (Llama) or a learned absolute embedding (GPT) [rotary, or the "
        "preset's].")
    moe: MoESpec | None = Field(None, description="Mixture of experts; absent = dense model.")
    dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="Dropout probability on hidden states and attention probabilities "
        "(Megatron's hidden_dropout and attention_dropout; GPT-3 recipes use 0.1) [0]; any value above 0 pays the "
        "random masks.")

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        if value is not None and value not in PRESETS:
            raise PydanticCustomError("uc_unknown_preset", "one of: {names}", {"names": ", ".join(PRESETS)})
        return value


class TrainingSpec(_Spec):
    """What one optimizer step processes and how."""

    seq_len: int = Field(ge=1, description="Sequence length (tokens per sequence).")
    global_batch: int = Field(ge=1, description="Sequences per optimizer step.")
    micro_batch: int = Field(1, ge=1, description="Sequences per microbatch per data-parallel replica [1].")
    precision: Precision = Field(
        "bf16", description="Compute precision of the matmuls [bf16]; mxfp8 and mxfp4 (OCP microscaling) only on "
        "chips with MX matmul (Trainium3).")
    master_weights: Literal["fp32", "none"] = Field(
        "fp32",
        description="fp32: mixed precision with fp32 master weights and optimizer state; "
        "none: bf16 weights with stochastic rounding [fp32].",
    )
    grad_precision: Literal["fp32", "bf16"] | None = Field(
        None, description="Precision of the gradients: their accumulation buffers and their data-parallel "
        "reduction [fp32 with fp32 master weights or fp32 training, else bf16]. NxD's examples kept them in bf16 "
        "until SDK 2.19 (XLA_DOWNCAST_BF16 stores the fp32 .grad in bf16, and ZeRO-1 reduce-scatters it as it is); "
        "from 2.20 use_gpu_compatible_precision (on by default) accumulates and reduce-scatters them in fp32.")
    zero1: bool = Field(
        True, description="Optimizer state sharded over data-parallel ranks [true; with training.zero: true for "
        "zero 1 to 3, false for zero 0]. The older spelling of training.zero: 1 (true) or 0 (false).")
    zero: Literal[0, 1, 2, 3] = Field(
        1, description="ZeRO stage: 0 nothing sharded; 1 optimizer state sharded over data-parallel ranks "
        "(ZeRO-1); 2 gradients sharded too, reduce-scattered as ZeRO-1's are (ZeRO-2); 3 parameters, gradients and "
        "optimizer state sharded, parameters all-gathered layer by layer before forward and backward, gradients "
        "reduce-scattered (ZeRO-3, FSDP) [1, or 0 with zero1: false].")
    @field_validator("zero", mode="before")
    @classmethod
    def _zero_stage(cls, value: object) -> object:
        if type(value) is not int:   # true is not ZeRO-1, false is not ZeRO-0: a stage is a number
            raise PydanticCustomError("uc_zero_stage", "one of: 0, 1, 2, 3 (the ZeRO stage, an integer; true or false "
                                      "is training.zero1's older spelling)")
        return value

    recompute: Literal["none", "selective", "full"] = Field(
        "selective", description="Activation recomputation in the backward pass [selective]."
    )
    checkpoint_mlp: bool = Field(
        False, description="Under selective recomputation, also recompute the MLP block in backward, its kernels "
        "and its tensor-parallel gather and reduce-scatter (NxD's tp_pp example checkpoints (CoreAttention, "
        "LlamaMLP) at seq_len 8192; its stack fills this) [false].")
    attention: Literal["flash", "materialized"] = Field(
        "flash", description="Attention kernel: flash (a fused kernel that never stores the S x S scores and skips "
        "causally masked tiles; NxD with the NKI kernels) or materialized (scores, softmax and dropout through HBM "
        "over the full S x S; the Megatron-LM and NeMo Neuron stacks) [flash].")
    steps: int = Field(3, ge=1, description="Optimizer steps replayed and reported (count) [3].")
    warmup_steps: int = Field(1, ge=0, description="Steps replayed before those reported (count) [1].")
    budget_tokens: float | None = Field(
        None, ge=1, le=1e18, json_schema_extra=why(
            "tokens; 1e18: 64,000 x Llama 3's 15.6e12, the largest published budget"),
        description="The training budget in tokens (e.g. 1.5e12): `run` and `sweep` give the days and "
        "US dollars to train it, with the goodput of the scenario's failures and checkpoints (time_to_train_days, "
        "total_cost_usd) [none: no days or dollars]; or budget_steps, not both.")
    budget_steps: int | None = Field(
        None, ge=1, description="The training budget in optimizer steps, instead of budget_tokens [none].")


class ParallelismSpec(_Spec):
    """Parallel degrees; a rank is one logical NeuronCore. ``dp`` and ``sequence_parallel`` are derived."""

    tp: int = Field(1, ge=1, description="Tensor-parallel degree (ranks) [1].")
    pp: int = Field(1, ge=1, description="Pipeline-parallel degree (stages) [1].")
    dp: int = Field(ge=1, description="Data-parallel degree (replicas) [ranks / (tp*pp*cp)].")
    cp: int = Field(1, ge=1, description="Context-parallel degree (ranks) [1].")
    ep: int = Field(1, ge=1, description="Expert-parallel degree (ranks, MoE only, divides dp) [1].")
    sequence_parallel: bool = Field(description="Sequence parallelism inside the TP group [true when tp > 1].")
    tp_comm_overlap: bool = Field(
        True, description="The training stack issues the backward tensor-parallel collectives beside the matmuls "
        "that do not wait for them (Megatron's async tensor-parallel all-reduce) [true]. Hidden only where the "
        "calibration's tp_overlap is on; it is off by default, as Neuron says TP collectives cannot be effectively "
        "overlapped with computation (docs/calibration.md).")
    pp_schedule: Literal["gpipe", "1f1b", "interleaved"] = Field("1f1b", description="Pipeline schedule [1f1b].")
    fsdp_schedule: Literal["compiler", "layerwise"] = Field(
        "compiler", description="ZeRO-3 (training.zero: 3) only: when gradients are reduce-scattered. compiler: "
        "once per step after the last backward, in buckets, as the Neuron compiler schedules FSDP by default "
        "(XLA stacks: AXLearn, NxD); layerwise: each layer's gradients right after its backward, overlapping the "
        "next layer's (PyTorch FSDP; Neuron's token threading, NEURON_FSDP=1) [compiler]. Weights are "
        "all-gathered per layer, one layer ahead, either way. The default was chosen with the one published Trn2 "
        "run (t1) in view: under layerwise the model gives that run about half its measured step (docs/trn2.md).")
    virtual_stages: int = Field(1, ge=1, description="Model chunks per pipeline stage, interleaved only [1].")


class NetworkSpec(_Spec):
    """What-if overrides of the catalog's network numbers; absent = the catalog's value."""

    efa_gbps: float | None = Field(None, ge=1, le=GBPS_MOST, json_schema_extra=LINK_GBPS,
                                   description="EFA bandwidth per instance, Gbit/s.")
    efa_latency_us: float | None = Field(None, ge=0.001, le=1e6, json_schema_extra=LATENCY_US,
                                         description="EFA latency per hop, microseconds.")
    neuronlink_gbps_per_chip: float | None = Field(
        None, ge=1, le=GBPS_MOST, json_schema_extra=LINK_GBPS,
        description="NeuronLink bandwidth per chip inside an instance, Gbit/s.")
    neuronlink_latency_us: float | None = Field(None, ge=0.001, le=1e6, json_schema_extra=LATENCY_US,
                                                description="NeuronLink latency per hop, microseconds.")
    calibration: Literal["default", "trn2-nccom-examples"] = Field(
        "default",
        description="Collective calibration: default (Trn2 links at the Trn1-fitted efficiencies) or "
        "trn2-nccom-examples (Trn2 NeuronLink efficiency and launch cost fitted to the dated Trn2 nccom-test "
        "examples; trn2 instances only); see docs/collectives.md [default].",
    )


class ClusterSpec(_Spec):
    """Which instances, how many, and how their NeuronCores form ranks."""

    instance: InstanceType = Field(description="EC2 instance type.")
    instances: int = Field(ge=1, description="Instances in the cluster (count).")
    lnc: int = Field(ge=1, description="Logical NeuronCore: physical NeuronCores per rank [2 on trn2, 1 on trn1].")
    ultraserver: bool = Field(
        description="Instances joined into UltraServers: 4 trn2u by NeuronLink Z-rings, 4 trn3.48xlarge (Gen1) or "
        "36 trn3gen2.16xlarge (Gen2) by NeuronSwitch [true for trn2u and trn3gen2]."
    )
    network: NetworkSpec = Field(default_factory=NetworkSpec, description="Overrides of the catalog's links.")
    price_per_hour_usd: float | None = Field(
        None, ge=PRICE_RANGE[0], le=PRICE_RANGE[1], json_schema_extra=why(PRICE_WHY),
        description="On-demand price of one instance, US dollars per instance-hour, in place of the "
        "catalog's (the catalog has a public price for trn1.32xlarge only; docs/sources.md) [the catalog's].")


class StorageSpec(_Spec):
    """FSx for Lustre file system shared by all instances: training data and checkpoints."""

    kind: Literal["fsx-lustre"] = Field(description="Storage service.")
    deployment: Literal["SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"] = Field(description="FSx deployment type.")
    capacity_tib: float = Field(ge=1.2, le=100_000.0, json_schema_extra=why(
        "TiB; 1.2: FSx for Lustre's smallest SSD file system, 1,200 GiB (AWS FSx CreateFileSystem StorageCapacity); "
        "100,000: about 1,000 x FSx's default quota of 100,800 GiB per file system"),
        description="Storage capacity, TiB.")
    throughput_mbps_per_tib: float = Field(gt=0, le=1000.0, json_schema_extra=why(
        "MB/s per TiB; one of the published FSx for Lustre tiers, 12 to 1,000 (storage/fsx.py)"),
        description="Throughput per unit of capacity, MB/s per TiB.")
    bytes_per_token: float = Field(4.0, ge=0, le=1_048_576.0, json_schema_extra=why(
        "bytes; 1,048,576 (1 MiB): a text token is a few bytes, a 16 x 16 RGB image patch 768"),
        description="Training data read per token, bytes [4].")
    prefetch_steps: int = Field(1, ge=0, description="Steps the data loader runs ahead of compute (count) [1].")
    burst_bucket_s: float = Field(
        600.0, ge=0, le=31_536_000.0, json_schema_extra=why("seconds; 31,536,000: a year of full burst"),
        description="Burst credits of a full bucket, in seconds of full burst (AWS does not publish "
        "the bucket size: an assumption, see docs/storage.md) [600]; 0 = never burst.")
    burst_refill: float = Field(
        1.0, ge=0, le=1000.0, json_schema_extra=why(
            "ratio; 1,000: a bucket refilled 1,000 x faster than it drains is a file system always at burst"),
        description="Credits earned per second of unused baseline throughput (ratio; AWS does not "
        "publish the refill rate) [1.0].")
    client_gbps: float | None = Field(
        None, ge=0.1, le=GBPS_MOST, json_schema_extra=why(
            "Gbit/s; 0.1: a tenth of a 1 GbE link; 100,000: 31 x the fastest instance's EFA (3,200 Gbit/s): no "
            "client reads faster than its NICs"),
        description="Throughput limit of one client instance, Gbit/s [min(NIC, 100, 5 x file servers)].")
    metadata_iops: float | None = Field(
        None, ge=1, le=1e9, json_schema_extra=why(
            "operations/s; 1e9: FSx's automatic mode gives 12,000 per 24,000 GiB, 51 million at the largest "
            "capacity, 100,000 TiB (storage/fsx.py)"),
        description="Metadata IOPS of the file system [the automatic-mode figure for the capacity].")
    price_per_tib_month_usd: float | None = Field(
        None, gt=0, le=1_000_000.0, json_schema_extra=why(
            "US dollars per TiB-month; 1,000,000: about 1,500 x the dearest published FSx for Lustre tier"),
        description="US dollars per TiB-month of provisioned capacity, in place of the published "
        "us-east-1 price of the deployment type and throughput tier (docs/storage.md, Price) [the published price].")

    @field_validator("throughput_mbps_per_tib")
    @classmethod
    def _published_tier(cls, value: float, info: Any) -> float:
        from ultracluster.storage import tier_allowed  # the storage model owns the FSx tables

        allowed = tier_allowed(info.data.get("deployment"), value)
        if allowed:
            raise PydanticCustomError("uc_fsx_tier", allowed)
        return value


class CheckpointSpec(_Spec):
    """Periodic checkpoints written to storage."""

    every_steps: int = Field(ge=1, description="Steps between checkpoints (count).")
    mode: Literal["sync", "async"] = Field(description="sync: training waits for the write; async: it overlaps.")
    d2h_gbps_per_chip: float = Field(
        128.0, ge=0.1, le=GBPS_MOST, json_schema_extra=why(
            "Gbit/s per chip; 0.1: a tenth of a 1 GbE link; 100,000: more than the chip's own HBM feeds (4.9 TB/s "
            "on Trn3; PCIe Gen5 x16 carries 512 Gbit/s)"),
        description="Device-to-host copy rate per chip, Gbit/s (an assumption: no public figure) [128].")
    keep: int | None = Field(
        None, ge=1, le=100_000, description="Checkpoints kept on the file system (count; TorchTitan's keep_latest_k, NxD's "
        "num_kept_ckpts): with the data set they must fit in storage.capacity_tib, else the run is infeasible "
        "[none: 2 assumed, the last durable one and the one being written; a file system too small for them is a "
        "warning, too small for one is infeasible].")


class StragglersSpec(_Spec):
    """Slow ranks."""

    fraction: float = Field(
        ge=0, le=1, description="Fraction of ranks (logical NeuronCores) that straggle, drawn from the seed: "
        "round(fraction x ranks) of them (0..1).")
    slowdown: float = Field(ge=1, le=1000.0, json_schema_extra=why(
        "ratio; 1,000: a rank 1,000 x slower than its peers is down, a failure (faults.instance_mtbf_hours)"),
        description="Compute-time multiplier of a straggler (ratio >= 1).")


def _ids_or_count(value: object) -> object:
    if type(value) is int and value >= 1:
        return value
    if type(value) is list and value and all(type(i) is int and i >= 0 for i in value) \
            and len(set(value)) == len(value):
        return value
    raise PydanticCustomError("uc_ids_or_count", "a list of distinct instance ids (integers >= 0) or a count of "
                              "instances (integer >= 1)")


class DegradedSpec(_Spec):
    """Instances running with fewer EFA NICs or slower NeuronLink (a what-if)."""

    instances: Annotated[list[int] | int, PlainValidator(_ids_or_count, json_schema_input_type=list[int] | int)] = \
        Field(description="Which instances: a list of instance ids (0 .. cluster.instances - 1), or a count of "
              "instances drawn from the seed.")
    efa_nics: int | None = Field(
        None, ge=1, description="EFA NICs that still work on each of these instances (1 .. the instance's NICs); "
        "absent = all.")
    neuronlink_scale: float | None = Field(
        None, ge=0.001, le=1, json_schema_extra=why(
            "fraction; 0.001: a link at less than a thousandth of its rate is down, a failure"),
        description="NeuronLink (and UltraServer link) bandwidth of these instances, as a fraction "
        "of the catalog's (0 < x <= 1); absent = 1.")


class FaultsSpec(_Spec):
    """Stragglers, instance failures and degraded instances."""

    stragglers: StragglersSpec | None = Field(None, description="Slow ranks; absent = none.")
    instance_mtbf_hours: float | None = Field(
        None, gt=0, le=1e9, json_schema_extra=why(
            "hours; 1e9: 114,000 years, above any hardware MTBF quoted (1e5 to 1e6 hours); run --hours bounds the "
            "failures it replays"),
        description="Mean time between failures of one instance, hours; absent = no failures.")
    restart_minutes: float = Field(10.0, ge=0, le=MINUTES_MOST, json_schema_extra=YEAR_OF_MINUTES,
                                   description="Time to restart the job after a failure, minutes [10].")
    jitter: float | None = Field(
        None, ge=0, le=0.5, description="Sigma of the log-normal per-rank, per-step compute-time noise "
        "[the calibration's compute_jitter, 0.01].")
    detect_minutes: float = Field(
        5.0, ge=0, le=MINUTES_MOST, json_schema_extra=YEAR_OF_MINUTES,
        description="Time from a failure to its detection, minutes (an assumption) [5].")
    degraded: list[DegradedSpec] = Field(
        default_factory=list, description="Instances running with fewer EFA NICs or slower NeuronLink: a "
        "collective or send that touches one runs at its reduced rates (docs/collectives.md) [none].")


class EmulationSpec(_Spec):
    """How the emulator runs; never changes a predicted number."""

    instances_per_actor: Annotated[Literal["auto"] | int, PlainValidator(_auto_or_count)] = Field(
        "auto", description="Instances folded into one Ray actor: auto or a count [auto]."
    )
    payload_scale: float = Field(
        1e-6, gt=0, le=1, description="Fraction of real gradient bytes moved between actors (0..1] [1e-6]."
    )


class CalibrationSpec(_Spec):
    """The calibration a run uses instead of the shipped fit: a profile written by `ultracluster calibrate`."""

    profile: str = Field(min_length=1, max_length=4096,
                         description="A calibration profile (JSON) written by `ultracluster calibrate`, relative to "
                                     "the scenario file: its fitted factors replace the shipped fit's and its "
                                     "leave-one-out residuals set the 80 % interval (docs/calibration.md).")
    document: dict[str, Any] | None = Field(
        None, description="Filled when the scenario is read: the profile's content, checked against its checksum "
                          "(so a run carries it into scenario.json and to every node); not written by hand.")


class SweepSpec(_Spec):
    """Variants of this scenario for `ultracluster sweep` (docs/sweeps.md); `run`, `plan` and the others ignore it."""

    vary: dict[str, list[Any]] = Field(
        description="Scenario keys (dotted paths, as `--set` takes them) and the values each takes, e.g. "
        "{storage.capacity_tib: [4.8, 48], checkpoint.mode: [sync, async]}: the grid of every combination, or "
        "the lists paired with zip. `sweep --vary` replaces it.")
    zip: bool = Field(False, description="Pair the lists (all of one length) instead of taking their grid [false].")
    hours: float | None = Field(
        None, gt=0, le=87_600.0, json_schema_extra=why("hours; 87,600: ten years, as run --hours (goodput.MAX_HOURS)"),
        description="Then emulate this many hours of each variant with failures and checkpoints (as "
        "`run --hours`); `sweep --hours` replaces it [none: the expected goodput, in closed form].")


#: The key of a scenario's dict (scenario.json) that lists the stack-filled keys the scenario gave itself
#: (`Scenario.to_dict`, read back by `load_scenario`); a file written by hand need not name it
EXPLICIT_KEY = "explicit_keys"


class Scenario(_Spec):
    """A resolved, validated scenario: every default filled, every derived value computed."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=200,
                      description="Scenario name; names the output folder, so a plain name: lower-case letters, "
                                  "digits, '.', '_' and '-', starting with a letter or digit (never '.', '..' or a "
                                  "path), at most 200 characters.")
    seed: int = Field(0, ge=0, description="Seed of every random draw (jitter, stragglers, faults) [0].")
    stack: Literal["neuronx-distributed", "neuronx-nemo-megatron", "megatron-lm-neuron", "axlearn", "torchneuron",
                   "custom"] = Field(
        "custom", description="Training stack: fills the keys not given with its defaults (attention kernel, "
        "dropout, sequence parallelism, TP overlap, ZeRO, recomputation, LNC), prices its pipeline engine's graph "
        "executions, and refuses layouts it does not run (docs/scenarios.md, Training stacks); custom: the "
        "explicit keys and the schema's defaults only [custom].")
    model: ModelSpec = Field(description="The transformer.")
    training: TrainingSpec = Field(description="Batch, precision and steps.")
    parallelism: ParallelismSpec = Field(description="Parallel layout over ranks.")
    cluster: ClusterSpec = Field(description="Instances and links.")
    storage: StorageSpec | None = Field(None, description="Shared storage; absent = data and checkpoints are free.")
    checkpoint: CheckpointSpec | None = Field(None, description="Periodic checkpoints; absent = none.")
    faults: FaultsSpec | None = Field(None, description="Stragglers and failures; absent = none.")
    emulation: EmulationSpec = Field(default_factory=EmulationSpec, description="How the emulator runs.")
    calibration: CalibrationSpec | None = Field(
        None, description="A calibration profile fitted to your own measured runs; absent = the shipped fit.")
    sweep: SweepSpec | None = Field(
        None, description="Variants of this scenario for `ultracluster sweep`; ignored by the other commands.")
    operators: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Extra operator libraries (files, paths relative to the scenario file) whose operators add "
                    "to or replace the built-in library by name; loaded and inlined when the scenario is read [].")
    # the stack-filled keys the scenario gave itself (`stacks.explicit_keys`, set by `load_scenario`; None: unknown),
    # so the planner can apply another stack's defaults to the others; its dict (scenario.json) carries them as
    # EXPLICIT_KEY, which `load_scenario` reads back, so a reloaded scenario is timed as the original
    _explicit: frozenset[str] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """Equal when every field is (the same scenario however it was written: `_explicit` is not compared)."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = _Spec.__hash__

    @property
    def ranks(self) -> int:
        """Ranks (logical NeuronCores): instances x physical NeuronCores per instance / lnc."""
        return self.cluster.instances * ranks_per_instance(INSTANCES[self.cluster.instance], self.cluster.lnc)

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step: global_batch x seq_len."""
        return self.training.global_batch * self.training.seq_len

    def to_dict(self) -> dict[str, Any]:
        """The resolved scenario as a plain JSON-able dict (the YAML's keys, every default filled), with
        EXPLICIT_KEY: the stack-filled keys the scenario gave itself, sorted (when known), so that
        `load_scenario(scenario.to_dict())` gives the scenario back, timed the same."""
        out = self.model_dump(mode="json")
        if self._explicit is not None:
            out[EXPLICIT_KEY] = sorted(self._explicit)
        return out
