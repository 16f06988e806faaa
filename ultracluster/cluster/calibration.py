"""Named calibration factors: achieved fractions of peak and fixed costs that the public hardware numbers do
not give, for the chip model and for the collective model, in one `Calibration` that travels in the Cluster.

Every factor is a physical, named quantity, fitted only to the published rows of `data/calibration/`
(`scripts/calibrate.py` for the chip, `scripts/fit_collectives.py` for the collectives; see
`docs/calibration.md` and `docs/collectives.md`), or, where the data say nothing about it, an explicit
documented assumption. A scenario never silently changes them. The fitted files are part of the package: a
missing or damaged one is an error naming it, never a silent fall-back to defaults.

Nothing is read at import: `load_fitted()` reads both files on first use, once per process, and builds
everything that comes from them (the fitted `Calibration`, the collective profiles, the uncertain factors and
their ranges), frozen. `DEFAULT`, `NETWORK_DEFAULT` and `NETWORK_PROFILES` are its values, looked up on first
access (PEP 562), so `import ultracluster.chip` works even where a file is broken.
"""
from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import UltraclusterError

TRN1, TRN2 = "trainium", "trainium2"
TRN3 = "trainium3"

FITTED = Path(__file__).with_name("calibration.json")                                  # scripts/calibrate.py
NETWORK_FITTED = Path(__file__).parents[1] / "network" / "collectives_fit.json"       # scripts/fit_collectives.py


class CalibrationMissing(UltraclusterError, RuntimeError):
    """A fitted calibration file of the package is missing, unreadable or damaged; the message names it."""


@dataclass(frozen=True)
class UncertainFactor:
    """One calibration field whose value the published data do not fix (`ultracluster.cluster.factor_ranges`).

    Attributes:
        name: a field of `Calibration` or of `NetworkCalibration`.
        low, high: the plausible range (low <= central <= high; "low" is the smaller number, which may be
            the faster or the slower end).
        generations: chip generations it applies to ("trainium", "trainium2", "trainium3").
        why: the source or physical argument for the range (one sentence).
    """

    name: str
    low: float
    high: float
    generations: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class NetworkCalibration:
    """Achieved fractions of link peaks and fixed costs of the collective model.

    The default is fitted to the Trn1 rows of collectives.csv; its Trn2 factors are the Trn1 ones (the four
    Trn2 rows are dated examples: they fit only the `trn2-nccom-examples` profile, `NETWORK_PROFILES`).
    See docs/collectives.md "Calibration".

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
        return replace(self, **changes)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


REGENERATE = "regenerate it with the fitting script named in docs/calibration.md"


def _read(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CalibrationMissing(f"{path}: the fitted calibration cannot be read ({exc}); {REGENERATE}") from exc
    if not isinstance(doc, dict):
        raise CalibrationMissing(f"{path}: the fitted calibration is damaged (a JSON {type(doc).__name__}, not an "
                                 f"object); {REGENERATE}")
    return doc


@contextmanager
def _damaged(path: Path) -> Iterator[None]:
    """A file whose content does not have the shape the model reads is damaged: an error naming it."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CalibrationMissing(f"{path}: the fitted calibration is damaged ({type(exc).__name__}: {exc}); "
                                 f"{REGENERATE}") from exc


def _number(value: Any, name: str, kind: type = float) -> Any:
    """A fitted value of the field's type (a bool switch, or a finite number), else the file is damaged."""
    ok = isinstance(value, bool) if kind is bool else \
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        raise ValueError(f"{name} is {value!r}, not a {'true/false switch' if kind is bool else 'finite number'}")
    return value


# Trn3 has no measured collective: its factors take the Trn1 fit's values (measured on a current Neuron
# release; Trn2's default is the Trn1 value too) unless the fitted file gives its own.
BORROWED_TRN3 = {"neuronlink_efficiency_trn3": "neuronlink_efficiency_trn1", "launch_s_trn3": "launch_s_trn1"}


def _fitted_network(doc: dict) -> NetworkCalibration:
    """The factors of `network/collectives_fit.json`."""
    values = dict(doc["factors"])
    for trn3, source in BORROWED_TRN3.items():
        if source in values:
            values.setdefault(trn3, values[source])
    return NetworkCalibration(**{f.name: float(_number(values[f.name], f.name)) for f in fields(NetworkCalibration)
                                 if f.name in values})


def fitted_network() -> NetworkCalibration:
    """The factors of `network/collectives_fit.json` (an error naming it where it is missing or damaged)."""
    return load_fitted().network


def _network_profiles(doc: dict) -> Mapping[str, Mapping[str, float]]:
    profiles = doc.get("profiles", {})
    return MappingProxyType({"default": MappingProxyType({}), **{
        name: MappingProxyType({k: float(_number(v, f"profiles.{name}.{k}")) for k, v in changes.items()})
        for name, changes in profiles.items()}})


def network_profiles() -> Mapping[str, Mapping[str, float]]:
    """Named collective calibrations: name -> the factors it changes from the default ("default": none).

    `trn2-nccom-examples` fits the Trn2 NeuronLink efficiency and launch cost to the four dated Trn2
    nccom-test examples of collectives.csv (the reading before issue 13; the pessimistic end of Trn2).
    A scenario picks one with `cluster.network.calibration`, `ultracluster collectives` with `--calibration`.
    """
    return load_fitted().profiles


def with_network_profile(calibration: "Calibration", name: str) -> "Calibration":
    """`calibration` with the collective factors of a named profile (`NETWORK_PROFILES`) applied on top.

    Raises:
        ValueError: an unknown profile name (the message lists the known ones).
    """
    profiles = network_profiles()
    if name not in profiles:
        raise ValueError(f"unknown network calibration {name!r}; known: {', '.join(profiles)}")
    return calibration.with_(**profiles[name]) if profiles[name] else calibration


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
        graph_s_nxd: one graph execution of NeuronX Distributed's engine (fitted: no source gives it): what a
            microbatch's every `xm.mark_step()` costs on its stage beyond the kernels it runs (the runtime
            switching compiled graphs, binding their inputs and draining the engines). NxD's pipeline runs six
            graphs per microbatch and stage (receive, forward, send; receive, backward, send), one without a
            pipeline (`ultracluster/stacks.py`).
        graph_s_nemo: the same for NeMo's (and the Megatron-LM fork's) engine: four graphs per microbatch and
            stage with a pipeline (forward, the fused send-receive exchange; backward, the exchange), one without.
        step_overhead_s: fixed per-step host/runtime cost (launch, sync) on the critical path.
        fusion: elementwise operators run fused into the kernel their library entry names (`fuse:`).
        engine_clock_rates: VectorE/ScalarE work is priced at 128 elements per cycle (H4) rather than at
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
        dp_overlap: the data-parallel gradient reduction overlaps the last backward in buckets (as PyTorch
            DDP on GPUs); off, it starts after the last backward, in the optimizer's graph, as the
            XLA-based Neuron stacks run it.
        step_costs: gradient-norm and clipping (a read of all local gradients and an all-reduce of one
            number over every rank) before the optimizer.
        compute_jitter: sigma of the log-normal per-rank, per-step compute-time noise (assumption: not
            published; 1 %; a scenario sets its own with faults.jitter).
        runtime_reserve_gib: HBM per rank kept by the Neuron runtime and compiler scratch (assumption: not
            published; 1 GiB per rank).
        network: the collective model's factors.
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
    fusion: bool = True
    engine_clock_rates: bool = True
    flash_attention: bool = True
    attention_serial: bool = False
    stage_ends: bool = True
    tp_overlap: bool = False
    dp_overlap: bool = False
    step_costs: bool = True
    runtime_reserve_gib: float = 1.0
    compute_jitter: float = 0.01
    network: NetworkCalibration = field(default_factory=lambda: load_fitted().network)
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
        net = {k: changes.pop(k) for k in list(changes) if k in _NETWORK_FIELDS}
        if net:
            changes["network"] = changes.get("network", self.network).with_(**net)
        return replace(self, **changes)


_NETWORK_FIELDS = {f.name for f in fields(NetworkCalibration)}


def _fitted_calibration(doc: dict, network: NetworkCalibration) -> Calibration:
    """The chip fit's factors on the collective fit's; a collective factor fitted to the training rows
    (`in_graph_sync_s`) comes with the chip fit and goes into its network part."""
    network = network.with_(**{k: float(_number(doc[k], k)) for k in _NETWORK_FIELDS if k in doc})
    return Calibration(**{f.name: _number(doc[f.name], f.name, bool if f.type in ("bool", bool) else float)
                          for f in fields(Calibration) if f.name in doc and f.name != "network"}, network=network)


def fitted() -> Calibration:
    """The documented defaults with the factors fitted by scripts/calibrate.py and fit_collectives.py."""
    return load_fitted().calibration


@dataclass(frozen=True)
class Fitted:
    """Everything the package's fitted files give, frozen (`load_fitted`).

    Attributes:
        calibration: the fitted `Calibration` (`DEFAULT`).
        network: its collective factors (`NETWORK_DEFAULT`).
        profiles: the named collective calibrations (`NETWORK_PROFILES`, `network_profiles`).
        factors: the factors no published measurement pins, with their ranges, in registration order
            (`ultracluster.cluster.factor_ranges.factors`).
        documents: each file's parsed content by file name ("calibration.json", "collectives_fit.json"):
            the fit's own evidence (`ultracluster.uncertainty.evidence`); read it, never change it.
    """

    calibration: Calibration
    network: NetworkCalibration
    profiles: Mapping[str, Mapping[str, float]]
    factors: tuple[UncertainFactor, ...]
    documents: Mapping[str, dict]


@lru_cache(maxsize=1)
def load_fitted() -> Fitted:
    """Read the fitted files (`network/collectives_fit.json`, `cluster/calibration.json`) on first use, once per
    process: the one place the package reads them.

    Raises:
        CalibrationMissing: a file is missing, unreadable, not JSON, or lacks or mistypes a value the model
            reads; the message names the file and how to regenerate it.
    """
    net_doc, chip_doc = _read(NETWORK_FITTED), _read(FITTED)
    with _damaged(NETWORK_FITTED):
        network, profiles = _fitted_network(net_doc), _network_profiles(net_doc)
    with _damaged(FITTED):
        calibration = _fitted_calibration(chip_doc, network)
    network = calibration.network        # with the collective factor the training rows fit (in_graph_sync_s)
    with _damaged(NETWORK_FITTED):
        factors = (_network_factors(net_doc, network, profiles, calibration)
                   + _trainium3_factors(network, profiles, calibration))
    return Fitted(calibration=calibration, network=network, profiles=profiles, factors=tuple(factors),
                  documents=MappingProxyType({FITTED.name: chip_doc, NETWORK_FITTED.name: net_doc}))


def fitted_document() -> dict:
    """The committed chip fit, calibration.json, as read by `load_fitted` (its layouts, cross-validation, the
    Trainium2 row, the calibrated domain): a deep copy, the caller's own (about 0.6 ms; a run asks a few times),
    so that changing it changes nothing the process shares."""
    return copy.deepcopy(load_fitted().documents[FITTED.name])


_LAZY = {"DEFAULT": "calibration", "NETWORK_DEFAULT": "network", "NETWORK_PROFILES": "profiles"}


def __getattr__(name: str) -> Any:
    """`DEFAULT`, `NETWORK_DEFAULT`, `NETWORK_PROFILES`: `load_fitted()`'s values, read on first access."""
    if name in _LAZY:
        return getattr(load_fitted(), _LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------
# Collective factors the published rows do not pin, with their plausible ranges (docs/collectives.md
# "Trn2 from evidence"). Central values are the defaults above; the ranges follow from the fit's own output
# (collectives_fit.json) or from the argument given in `why`.

def _network_factors(fit: dict, net: NetworkCalibration, profiles: Mapping[str, Mapping[str, float]],
                     default: Calibration) -> list[UncertainFactor]:
    dated = profiles.get("trn2-nccom-examples", {})
    floor = float(fit.get("neuronlink_efficiency_trn1_floor", net.neuronlink_efficiency_trn1))

    def span(central: float, low: float, high: float) -> tuple[float, float]:
        return min(low, central), max(high, central)

    entries = [
        ("neuronlink_efficiency_trn1", (floor, 1.0), (TRN1,),
         "the Trn1 rows keep every row in its band from this floor up to the full port rate and pin nothing "
         "inside; the default is an assumption near the middle"),
        ("neuronlink_efficiency_trn2", (dated.get("neuronlink_efficiency_trn2", net.neuronlink_efficiency_trn2), 1.0),
         (TRN2,), "default: the Trn1 value; low: the four dated Trn2 nccom-test examples read as one torus row at "
         "LNC=2 (profile trn2-nccom-examples); high: the full NeuronLink-v3 port rate"),
        ("chip_efficiency", (net.chip_efficiency / 2, min(1.0, 2 * net.chip_efficiency)), (TRN2,),
         "default: the Trn1 fit (same 16 DMA engines per physical core of about 27 GB/s each, H4, H8); no Trn2 row "
         "isolates traffic inside a chip: a factor of two either way (assumption)"),
        ("efa_efficiency", (net.efa_efficiency / 2, min(1.0, 2 * net.efa_efficiency)), (TRN2,),
         "default: the Trn1 fit on 100 Gbit/s NICs; low: the same absolute rate per NIC on Trn2's 200 Gbit/s "
         "EFAv3 NICs (H6); high: twice the Trn1 fraction (assumption)"),
        ("launch_s_trn2", (1e-6, 10e-6), (TRN2,),
         "default: the Trn1 fit; H11 gives the intra-node latency term on Trn2 as 10^0 to 10^1 us (the dated "
         "examples' 0.46 ms floor is a standalone invocation of an older runtime)"),
        ("reduce_step_s", (net.reduce_step_s / 2, 2 * net.reduce_step_s), (TRN2,),
         "default: the Trn1 fit; Trn2 has 16 to 20 collective cores per chip against Trn1's 6 (H4, H5, H8) and no "
         "Trn2 row isolates the step cost: a factor of two either way (assumption)"),
        ("efa_step_s", (net.efa_step_s / 2, 2 * net.efa_step_s), (TRN2,),
         "default: the Trn1 fit (two-instance rows); no multi-instance Trn2 row: a factor of two either way "
         "(assumption)"),
        ("fp8_peak_scale_trn2", (0.5, 1.0), (TRN2,),
         "default: the published double-FP8 peak (H5, H8) on every matmul; low: the BF16 rate, as when the casts "
         "and scales of FP8 training (not in the operator library) and the matmuls kept in BF16 eat the gain"),
    ]
    out = []
    for name, (low, high), generations, why in entries:
        low, high = span(getattr(net, name) if name in _NETWORK_FIELDS else getattr(default, name), low, high)
        out.append(UncertainFactor(name, low, high, generations, why))
    return out


# ---------------------------------------------------------------------------------------------------------
# Trainium3: no measured training run or collective is published (docs/trainium3.md). Every factor the
# evidence leaves open is registered with the widest range the sources give; central values are the
# defaults above (the Trn1 fit's values where borrowed).

def _trainium3_factors(net: NetworkCalibration, profiles: Mapping[str, Mapping[str, float]],
                       default: Calibration) -> list[UncertainFactor]:
    from .catalog import NEURONSWITCH_BYTES_PER_S_PER_CHIP as SWITCH, NEURONSWITCH_RANGE_BYTES_PER_S as SPAN

    dated = profiles.get("trn2-nccom-examples", {})
    lowest_link = min(net.neuronlink_efficiency_trn1, net.neuronlink_efficiency_trn2,
                      dated.get("neuronlink_efficiency_trn2", 1.0))
    entries = [
        ("neuronswitch_scale_trn3", SPAN[0] / SWITCH, SPAN[1] / SWITCH,
         "NeuronSwitch per-chip bandwidth: 704 GB/s (256 + 320 + 128 per level, T4 PCIe section) to 2.56 TB/s "
         "(T1), around the UltraServer table's 2,048 GiB/s (T4)"),
        ("neuronlink_efficiency_trn3", lowest_link, 1.0,
         "no Trn3 collective measured: the Trn1 fit's value; low: the lowest NeuronLink efficiency any published "
         "row gives (dated Trn2 examples); high: the full link rate"),
        ("launch_s_trn3", 1e-6, 10e-6,
         "no Trn3 collective measured: the Trn1 fit's value; the 1-10 us latency term Neuron gives for Trn2 (H11)"),
        ("chip_efficiency", net.chip_efficiency / 2, min(1.0, 2 * net.chip_efficiency),
         "the Trn1 fit, borrowed: Trn3's DMA adds read-add-write at full rate (T3); a factor of two either way"),
        ("efa_efficiency", net.efa_efficiency / 2, min(1.0, 2 * net.efa_efficiency),
         "the Trn1 fit, borrowed: Trn3's EFA generation is not published (200 Gbit/s per chip, T4)"),
        ("reduce_step_s", net.reduce_step_s / 2, 2 * net.reduce_step_s,
         "the Trn1 fit, borrowed: 16 or 20 collective cores per Trn3 chip (T1, T3); a factor of two either way"),
        ("efa_step_s", net.efa_step_s / 2, 2 * net.efa_step_s,
         "the Trn1 fit, borrowed: EFA collectives on Trn3 arrived in SDK 2.29 (T8); a factor of two either way"),
        ("fp8_peak_scale_trn3", 0.5, 1.0,
         "plain FP8 is unpublished on Trn3: from the BF16 rate (no double_row mode) to 2 x BF16 (T9, T10)"),
        ("mx_peak_scale_trn3", 1.0, 671 / 632,
         "MX at 2,517/671 = 3.75x BF16 (chip figures, T1) to 4x (T3; 315 against 79 per core, T2)"),
        ("hbm_peak_scale_trn3", 4.7 / 4.9, 1.0, "HBM 4.7 TB/s (T3) to 4.9 TB/s (T1, T4)"),
    ]
    out = []
    for name, low, high, why in entries:
        central = getattr(net, name) if name in _NETWORK_FIELDS else getattr(default, name)
        out.append(UncertainFactor(name, min(low, central), max(high, central), (TRN3,), why))
    return out
