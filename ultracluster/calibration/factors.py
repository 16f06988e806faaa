"""The named calibration factors: achieved fractions of peak and fixed costs that the public hardware numbers do
not give, for the chip model (`Calibration`) and for the collective model (`NetworkCalibration`, its `network`
part), in one `Calibration` that travels in the Cluster.

Every factor is a physical, named quantity, documented here where it is defined, and fitted only to the
published rows of `data/calibration/` (`scripts/calibrate.py` for the chip, `scripts/fit_collectives.py` for the
collectives; see `docs/calibration.md` and `docs/collectives.md`), or, where the data say nothing about it, an
explicit documented assumption. A scenario never silently changes them.

This module holds the types only and reads no file: their field defaults are the documented starting values,
not the fit. The fitted values come from the package's fitted files, read by `calibration.fitted_files`
(`fitted()`, `DEFAULT`); the factors no measurement pins, with their ranges, are `uncertain_factors`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from ..frozen import replaced

TRN1, TRN2 = "trainium", "trainium2"
TRN3 = "trainium3"


def _kept_hash(cls):
    """`cls` (a frozen dataclass) with its generated `__hash__` kept in the instance once computed: an interval's
    fast path looks a calibration up by value some fifteen hundred times (memo keys, the settings' indices), each a
    hash of every field (about 0.5 us). The same value `dataclass` gives. A pickled or copied instance leaves it
    behind (`__getstate__`: a hash is only good in the process that computed it), and `_replaced` drops it from a
    copy."""
    made = cls.__hash__

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = made(self)     # (frozen: written into the dict, as `_replaced` does)
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    cls.__hash__, cls.__getstate__ = __hash__, __getstate__
    return cls


@_kept_hash
@dataclass(frozen=True)
class NetworkCalibration:
    """Achieved fractions of link peaks and fixed costs of the collective model.

    The fitted default (`fitted_files.NETWORK_DEFAULT`) is fitted to the Trn1 rows of collectives.csv; its Trn2
    factors are the Trn1 ones (the four Trn2 rows are dated examples: they fit only the `trn2-nccom-examples`
    profile, `fitted_files.NETWORK_CALIBRATIONS`). See docs/collectives.md "Calibration".

    Attributes:
        neuronlink_efficiency_trn1: achieved fraction of a NeuronLink-v2 port's bandwidth (Trn1; an
            assumption inside the range the Trn1 rows allow).
        neuronlink_efficiency_trn2: achieved fraction of a NeuronLink-v3 port's (and Z port's) bandwidth
            (Trn2; default: the Trn1 value).
        chip_efficiency: achieved fraction of a chip's DMA bandwidth for data moved between the NeuronCores
            of that chip (the reduction's extra HBM passes included).
        efa_efficiency: achieved fraction of an EFA NIC's bandwidth.
        launch_s_trn1: fixed cost of one collective on Trn1 (runtime launch, final synchronisation).
        launch_s_trn2: the same on Trn2 (default: the Trn1 value).
        reduce_step_s: fixed cost of one reducing step of a collective inside one instance (the received
            chunk is summed by the collective engine before the next step may start); gather steps cost
            their wire latency only.
        efa_step_s: fixed cost of every step of a collective that spans instances over EFA (its steps,
            the intra-instance ones included, are sequenced through the runtime's network proxy).
        neuronlink_efficiency_trn3: achieved fraction of a NeuronSwitch-v1 link level's bandwidth (Trn3).
            No Trn3 collective is measured: borrowed from Trn1 (`BORROWED_TRN3`), range registered as
            uncertain (docs/trainium3.md).
        launch_s_trn3: fixed cost of one collective on Trn3 (borrowed from Trn1 likewise).
        neuronswitch_scale_trn3: the NeuronSwitch per-chip bandwidth as a multiple of the catalog's figure
            (2,048 GiB/s per chip, T4); the published figures span 704 GB/s to 2.56 TB/s (T1, T4), which
            the uncertain-factor range covers. 1 = the catalog's (or the scenario's) figure.
        in_graph_sync_s: fixed cost of every collective issued from a training step's compiled graph, beyond
            its data movement and launch: the computation engines trigger the collective cores through a
            pseudo-instruction and the consumer waits for their completion signal (Neuron runtime,
            "Compute-Communication Overlap", H21), so the engines' queues drain before it and refill after,
            and the group starts when its last rank arrives. nccom-test times standalone invocations in a
            loop and never sees it; no source gives its size: fitted to the training rows
            (scripts/calibrate.py, docs/calibration.md), 0 for a standalone collective.
        in_graph_sync_scale_trn2: `in_graph_sync_s` on Trainium2 (and Trainium3, which borrows it) as a multiple of
            the Trn1 fit: Trn2 has 16 collective cores per chip against Trn1's 6 and a newer runtime. Fitted to
            the one published Trn2 training run (`t1`, scripts/calibrate.py); its range comes from what that row
            cannot separate (docs/trn2.md). 1 = the Trn1 value.
        algorithm_envelope: 1: a size below one of Neuron's algorithm switches pays the price of the
            algorithm above it when that is cheaper (the runtime picks by measured sweet spots, H11, so the
            model's cheaper algorithm is the one to take); 0: the chosen algorithm's price, floored at the price
            just below the previous switch (what the dated Trn2 nccom-test rows show: their runtime kept RDH at
            32 MiB although a 56 MiB KangaRing was faster). Either keeps time monotone in size.
    """

    neuronlink_efficiency_trn1: float = 0.75
    neuronlink_efficiency_trn2: float = 0.75
    chip_efficiency: float = 0.12
    efa_efficiency: float = 0.45
    launch_s_trn1: float = 7e-6
    launch_s_trn2: float = 7e-6
    reduce_step_s: float = 42e-6
    efa_step_s: float = 99e-6
    neuronlink_efficiency_trn3: float = 0.75
    launch_s_trn3: float = 7e-6
    neuronswitch_scale_trn3: float = 1.0
    algorithm_envelope: float = 1.0
    in_graph_sync_s: float = 0.0
    in_graph_sync_scale_trn2: float = 1.0

    def neuronlink_efficiency(self, generation: str) -> float:
        """The NeuronLink efficiency of a chip generation ("trainium", "trainium2" or "trainium3")."""
        if generation == TRN3:
            return self.neuronlink_efficiency_trn3
        return self.neuronlink_efficiency_trn2 if generation == TRN2 else self.neuronlink_efficiency_trn1

    def sync_s(self, generation: str) -> float:
        """The in-graph synchronisation cost of one collective on a chip generation."""
        return self.in_graph_sync_s * (1.0 if generation == TRN1 else self.in_graph_sync_scale_trn2)

    def launch_s(self, generation: str) -> float:
        """The launch cost of one collective on a chip generation."""
        if generation == TRN3:
            return self.launch_s_trn3
        return self.launch_s_trn2 if generation == TRN2 else self.launch_s_trn1

    def with_(self, **changes: float) -> "NetworkCalibration":
        return _replaced(self, changes)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@_kept_hash
@dataclass(frozen=True)
class Calibration:
    """Achieved fractions of peak and fixed costs of the chip model, and the collective model's factors.

    Attributes:
        tensor_efficiency: achieved fraction of TensorE peak on large, well-tiled matmuls (fitted).
        vector_efficiency: achieved fraction of the VectorE/ScalarE/GpSimd element rate (128 lanes x clock)
            on elementwise and reduction work (assumption, see docs/calibration.md).
        hbm_efficiency: achieved fraction of HBM bandwidth on streaming operators (assumption).
        kernel_launch_s: fixed cost of one kernel (an operator after fusion) on a NeuronCore: engine
            pipelines drain and refill, semaphores hand the data on, the first tile's DMA is waited for.
        layer_overhead_s: the unnamed residual: a fixed time per transformer-layer pass on a rank (a forward
            counts one pass, a backward two, a recomputed forward one) that no modelled mechanism explains.
            Not fitted and 0 in the shipped calibration: refitted beside the named mechanisms it comes out at
            its lower bound (docs/calibration.md); every run reports its share of compute as `residual_s`.
        microbatch_launch_s: host cost of launching one microbatch's compiled graph (forward and backward
            are separate graph executions in the XLA-based Neuron stacks), on every stage's critical path.
        graph_s_nxd: one graph execution of NeuronX Distributed's engine (0 in the shipped fit, which the rows
            cannot tell from a cost: docs/calibration.md; a profile may fit it): what a
            microbatch's every `xm.mark_step()` costs on its stage beyond the kernels it runs (the runtime
            switching compiled graphs, binding their inputs and draining the engines). NxD's pipeline runs six
            graphs per microbatch and stage (receive, forward, send; receive, backward, send), one without a
            pipeline (`ultracluster/stacks.py`).
        graph_s_nemo: the same for NeMo's (and the Megatron-LM fork's) engine: four graphs per microbatch and
            stage with a pipeline (forward, the fused send-receive exchange; backward, the exchange), one without.
        step_overhead_s: fixed per-step host/runtime cost (launch, sync) on the critical path.
        tensor_structure: TensorE timed from NeuronCore's structure (`ultracluster.chip`): its peak the 128 x 128
            PE array at the engine clock (H4, H8, T3: 92 and 79 TFLOPS BF16 per core, not the chip figure / cores),
            every matmul output evicted from PSUM to SBUF on VectorE (H4), HBM <-> SBUF through the core's 16 DMA
            engines (H4, H23: 464, 368, 528 GB/s per core on Trn1, 2, 3), a MultiplyMoving waiting for its stationary
            tile's load (H24). Off: the catalog's per-core peak and the chip's HBM share only.
        fusion: elementwise operators run fused into the kernel their library entry names (`fuse:`).
        engine_clock_rates: VectorE/ScalarE work is timed at 128 elements per cycle (H4) rather than at
            the FP32 TFLOPS of the product pages.
        flash_attention: the attention kernel computes causal blocks only (diagonal blocks in full), and
            selective recomputation repeats nothing the flash backward does not recompute already.
        attention_serial: inside the attention kernel each tile's engines wait for each other (QK^T on
            TensorE, then the row max on VectorE, exp on ScalarE, the transpose and PV on TensorE), so the
            kernel takes the sum of its engines' times, not their maximum (library `serial: true`).
        stage_ends: the first pipeline stage carries the embedding and the last the final norm, the LM head
            and the loss, on top of their equal share of layers (as NxD and NeMo place them); off, that work
            is spread evenly over the stages.
        tp_overlap: tensor-parallel collectives of the backward pass run on the collective cores alongside
            the weight- and input-gradient matmuls they do not depend on; forward ones stay exposed. Off by
            default: Neuron says TP collectives "cannot be effectively overlapped with computation due to
            strict data dependencies" (H21), NeMo's Neuron fork turns the async TP all-reduce off whenever
            sequence parallelism is on, and the Megatron-LM fork's script passes
            --no-async-tensor-model-parallel-allreduce (docs/calibration.md). On, it hides them where the
            scenario allows (`parallelism.tp_comm_overlap`).
        serial_exchanges: a pipeline stage's activation and gradient exchanges run on its own timeline where the
            stack issues each as a graph of its own (`stacks.Engine.serial_exchanges`: NxD's receive and send
            tasks, NeMo's p2p exchanges, each a collective over the stage pair between two `xm.mark_step()`): both
            stages wait in it, so no exchange hides behind the stage's compute. Off: a send overlaps the sender's
            next work and delays only its receiver (as NCCL's asynchronous p2p on GPUs).
        dp_overlap: the data-parallel gradient reduction overlaps the last backward in buckets (as PyTorch
            DDP on GPUs); off, it starts after the last backward, in the optimizer's graph, as the
            XLA-based Neuron stacks run it.
        step_costs: gradient-norm and clipping (a read of all local gradients and an all-reduce of one
            number over every rank) before the optimizer.
        compute_jitter: sigma of the log-normal per-rank, per-step compute-time noise (assumption: not
            published; 1 %; a scenario sets its own with faults.jitter).
        runtime_reserve_gib: HBM per rank kept by the Neuron runtime and compiler scratch (assumption: not
            published; 1 GiB per rank).
        network: the collective model's factors (default: `NetworkCalibration()`'s documented values; the fitted
            ones come with `fitted_files.fitted()`).
        fp8_peak_scale_trn3: Trainium3 plain-FP8 TensorE peak as a multiple of the catalog's (2 x BF16,
            inferred: unpublished; 0.5 = the BF16 rate). See docs/trainium3.md.
        mx_peak_scale_trn3: Trainium3 MX TensorE rate as a multiple of the catalog's at the same fitted
            tensor_efficiency. The catalog prices BF16 at the chip figure / 8 (83.9 TFLOPS per core), 6 %
            above the 79 the core page gives, while its MX figure (2,517 / 8) is the core page's 315: if the
            fit absorbs that BF16 excess, MX runs up to 671/632 faster (the NKI guide's "4x" BF16).
        hbm_peak_scale_trn3: Trainium3 HBM bandwidth as a multiple of the catalog's 4.9 TB/s (the NKI guide
            says 4.7).
        fp8_peak_scale_trn2: Trainium2 FP8 TensorE peak as a multiple of the catalog's (1,299 TFLOPS per chip,
            2 x BF16 in double-FP8 mode, H5, H8): 1 = every matmul at the published FP8 rate; 0.5 = the BF16
            rate. See docs/trn2.md.
    """

    tensor_efficiency: float = 0.75
    vector_efficiency: float = 0.9
    hbm_efficiency: float = 0.8
    kernel_launch_s: float = 10e-6
    layer_overhead_s: float = 0.0
    microbatch_launch_s: float = 0.0
    graph_s_nxd: float = 0.0
    graph_s_nemo: float = 0.0
    step_overhead_s: float = 0.0
    tensor_structure: bool = True
    fusion: bool = True
    engine_clock_rates: bool = True
    flash_attention: bool = True
    attention_serial: bool = False
    stage_ends: bool = True
    tp_overlap: bool = False
    dp_overlap: bool = False
    serial_exchanges: bool = True
    step_costs: bool = True
    runtime_reserve_gib: float = 1.0
    compute_jitter: float = 0.01
    network: NetworkCalibration = field(default_factory=NetworkCalibration)
    fp8_peak_scale_trn3: float = 1.0
    mx_peak_scale_trn3: float = 1.0
    hbm_peak_scale_trn3: float = 1.0
    fp8_peak_scale_trn2: float = 1.0

    def tensor_peak_scale(self, generation: str, precision: str) -> float:
        """Multiplier of the catalog's TensorE peak for a chip generation and precision (1 but on Trainium3
        FP8 and MX, whose rates the sources leave open, and Trainium2 FP8, whose training rate they do not give)."""
        if generation == TRN2:
            return self.fp8_peak_scale_trn2 if precision == "fp8" else 1.0
        if generation != TRN3:
            return 1.0
        return {"fp8": self.fp8_peak_scale_trn3, "mxfp8": self.mx_peak_scale_trn3,
                "mxfp4": self.mx_peak_scale_trn3}.get(precision, 1.0)

    def hbm_peak_scale(self, generation: str) -> float:
        """Multiplier of the catalog's HBM bandwidth for a chip generation (1 but on Trainium3)."""
        return self.hbm_peak_scale_trn3 if generation == TRN3 else 1.0

    def with_(self, **changes) -> "Calibration":
        """A copy with chip factors changed; network factors are given as `network=...` or by their names."""
        net = {k: changes.pop(k) for k in list(changes) if k in NETWORK_FIELDS}
        if net:
            changes["network"] = changes.get("network", self.network).with_(**net)
        return _replaced(self, changes)


def _replaced(obj, changes: dict):
    """`dataclasses.replace(obj, **changes)` of a NetworkCalibration or Calibration (`frozen.replaced`: the same
    instance at a fifteenth of the cost; an interval makes about fifty settings, two copies each), an unknown name a
    TypeError as `replace` raises, the kept hash (`_kept_hash`) left behind: the copy's own, computed when asked."""
    names = _FIELD_NAMES[type(obj)]
    if not names.issuperset(changes):
        raise TypeError(f"{type(obj).__name__} has no field {', '.join(sorted(set(changes) - names))}")
    return replaced(obj, changes, drop=("_hash",))


NETWORK_FIELDS = frozenset(f.name for f in fields(NetworkCalibration))   # the collective factors' names
_FIELD_NAMES = {NetworkCalibration: NETWORK_FIELDS, Calibration: frozenset(f.name for f in fields(Calibration))}
