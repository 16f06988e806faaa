"""Step replay → flat records: what one emulated run produced, ready for pandas.

The replay engine fills these plain dataclasses, frozen; `ultracluster.report` turns them into DataFrames and
files. No numpy arrays cross this boundary, and nothing here imports Ray or pandas.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..cluster.placement import Layout

if TYPE_CHECKING:
    from ..goodput import GoodputResult
    from ..storage.estimates import StorageFigures

# The breakdown of one step on its critical path, in seconds; the parts add up to the step time.
BREAKDOWN_KEYS: tuple[str, ...] = (
    "compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s", "data_stall_s", "checkpoint_s", "other_s",
)


@dataclass(frozen=True)
class StepRecord:
    """One replayed step. `warmup` steps are replayed but left out of the summary means."""

    step: int
    warmup: bool
    step_time_s: float
    compute_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    bubble_s: float
    data_stall_s: float
    checkpoint_s: float
    other_s: float
    critical_replica: int          # data-parallel replica whose pipeline finished last
    critical_stage: int            # pipeline stage on the critical path (its ranks finish the step last)
    slowest_rank: int              # global rank with the largest compute time this step
    payload_bytes: int             # real bytes moved between actors for the gradient reduction this step
    payload_checked: bool          # every participant's reduced payload equalled the exact sum
    wall_s: float                  # wall-clock seconds the emulator spent on this step
    dp_comm_hidden_s: float = 0.0  # gradient reduction that ran behind backward compute (not in the breakdown)
    straggler_cost_s: float = 0.0  # how much longer the step took because of the stragglers

    def breakdown(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in BREAKDOWN_KEYS}


@dataclass(frozen=True)
class Slice:
    """One timeline slice on the virtual clock of the critical replica (for trace.json)."""

    stage: int
    stream: str          # "compute" | "tp" | "pp" | "dp" | "storage" | "optimizer"
    name: str            # e.g. "F mb3 c0", "B mb3 c0", "reduce_scatter grads", "optimizer"
    start_s: float
    end_s: float
    step: int
    shard: int           # actor shard holding the first rank of this stage in the critical replica
    kind: str = ""       # a forward/backward on the compute stream: "F" or "B"; "" for every other slice
    microbatch: int = -1  # its microbatch (-1: not a forward/backward)
    chunk: int = -1      # its pipeline chunk id = virtual stage x pp + stage (-1: not a forward/backward)


@dataclass(frozen=True)
class CollectiveRecord:
    """One kind of collective as the replay costed it (per occurrence)."""

    group: str           # "tp" | "pp" | "dp"
    op: str              # all_reduce | reduce_scatter | all_gather | send_recv
    ranks: int           # group size
    instances: int       # instances the group spans
    bytes: int           # bytes per rank buffer (nccom-test convention)
    algorithm: str
    time_s: float
    count_per_step: int  # occurrences on the critical rank per step


@dataclass(frozen=True)
class StageMemory:
    """HBM footprint of one rank of a pipeline stage, in GiB."""

    stage: int
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    reserve_gib: float
    total_gib: float
    capacity_gib: float


@dataclass(frozen=True)
class ChunkComm:
    """Communication of one pipeline chunk per microbatch, as the replay costed it (seconds).

    The report draws it on the timeline's tp and pp tracks: the in-layer collectives at the end of each
    forward/backward slice (they are part of its duration), the sends after it; with `serial` exchanges (NxD,
    NeMo: both stages wait in each, `replay.engine.serial_sends`) the receive at the start of the slice and the
    send at its end, inside it.
    """

    chunk: int           # chunk id = virtual stage x pp + stage
    stage: int
    tp_fwd_s: float      # in-layer tensor/context-parallel collectives of one forward
    tp_bwd_s: float      # the same for one backward (including recomputed forwards)
    send_fwd_s: float    # activation send to the next chunk's stage (0 for the last chunk)
    send_bwd_s: float    # input-gradient send to the previous chunk's stage (0 for chunk 0)
    serial: bool = False  # the exchanges are part of the forward's and backward's durations


@dataclass(frozen=True)
class StageComm:
    """Communication every rank of a pipeline stage does in one step (seconds per step)."""

    stage: int
    layers: int
    tp_comm_s: float     # in-layer tensor/context-parallel collectives, all microbatches
    pp_send_s: float     # pipeline sends the stage issues (what they delay shows as idle time)
    dp_comm_s: float     # data-parallel gradient reduction (exposed: not overlapped with backward)


@dataclass(frozen=True)
class RunLayout(Layout):
    """The run's parallel layout, typed, as the report reads it: the degrees and virtual stages
    (`cluster.Layout`), the expert-parallel degree, the pipeline schedule and the microbatches per replica per
    step."""

    ep: int = 1
    pp_schedule: str = "1f1b"
    microbatches: int = 0

    def label(self) -> str:
        """Short parallelism label, e.g. "tp=8 pp=2 dp=2 1f1b" (cp and ep only when above 1)."""
        parts = [f"{k}={getattr(self, k)}" for k in ("tp", "pp", "dp", "cp", "ep")
                 if k in ("tp", "pp", "dp") or getattr(self, k) > 1]
        return " ".join(parts + ([self.pp_schedule] if self.pp_schedule else []))


@dataclass(frozen=True)
class RunResult:
    """Everything the report needs, complete and frozen once built: built in one place by the replay
    (`ultracluster.emulate`; `runner` adds the interval with `dataclasses.replace`), read field by field by
    `ultracluster.report`, which never calls back into the replay."""

    scenario: dict                       # the resolved scenario (Scenario.to_dict()): scenario.json, never parsed
    scenario_name: str
    chips: int
    neuron_cores: int                    # physical NeuronCores
    ranks: int
    instances: int
    instance_type: str
    actors: int
    ray_nodes: int
    model_flops_per_step: float          # docs/design.md formula, recompute not counted
    peak_flop_per_s: float               # chips x chip dense peak at the scenario's precision
    tokens_per_step: int
    feasible: bool
    reason: str | None
    layout: RunLayout | None             # the parallel layout (None: a result of no scenario, the blank report)
    memory: list[StageMemory] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    slices: list[Slice] = field(default_factory=list)
    collectives: list[CollectiveRecord] = field(default_factory=list)
    shard_instances: list[tuple[int, int]] = field(default_factory=list)  # per shard: [first, last] instance
    price_per_hour_usd: float | None = None                               # per instance, when the catalog has it
    residual_fraction: float = 0.0        # share of compute that is the unnamed per-layer residual (summary residual_s)
    hardware_flops_per_step: float = 0.0   # TensorE FLOPs every rank executes in a step: recompute, the flash
                                           # backward's recomputed scores and its transposes included (HFU)
    # per-rank and per-stage detail for the report (empty/None when the run was not replayed)
    chunk_comm: list[ChunkComm] = field(default_factory=list)
    stage_comm: list[StageComm] = field(default_factory=list)
    # a rank's own compute seconds per step (forward + backward of every microbatch + optimizer), mean over
    # the measured steps, sparse so that it never grows with the number of ranks: every rank of stage s
    # takes stage_compute_s[s], except the ranks listed in slow_rank_compute_s (global rank -> seconds)
    stage_compute_s: list[float] = field(default_factory=list)
    slow_rank_compute_s: dict[int, float] = field(default_factory=dict)
    # `faults.degraded`: the replicas whose in-layer collectives are slower than their stage's
    # (`stage_comm[s].tp_comm_s`): replica -> seconds per step of each stage (sparse: only those replicas)
    replica_tp_comm_s: dict[int, list[float]] = field(default_factory=dict)
    # exposed data-parallel seconds per step of each stage, off the critical replica's timeline (mean over
    # the measured steps; `replay.records.stage_dp_exposure`); empty when nothing was replayed
    stage_dp_exposed_s: list[float] = field(default_factory=list)
    # one checkpoint and one restore alone on the file system (`storage.estimates`); None without storage
    storage: StorageFigures | None = None
    # further summary.json keys timed beside the replay (the 80 % interval, `ultracluster.uncertainty`)
    interval: dict[str, float] = field(default_factory=dict)
    @property
    def ranks_per_instance(self) -> int:
        """Ranks per instance of the run (its ranks over its instances, which `cluster.catalog.ranks_per_instance`
        made; 0 without instances)."""
        return self.ranks // self.instances if self.instances > 0 else 0

    # `run --hours H`: the long run over H hours with the replayed step as its unit of work
    # (`goodput.GoodputResult`, added by `runner` as a copy); summary.json's goodput is then its goodput
    long_run: GoodputResult | None = None
    # where the caller took the scenario's `cluster.price_per_hour_usd` from when it set it (`run --price-per-hour`:
    # "--price-per-hour", `step.price.FLAG_PRICE`); None: the scenario's own (summary.json's `price_source`)
    price_source: str | None = None
