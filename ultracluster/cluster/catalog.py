"""Hardware catalog: instance type name -> chip, instance and UltraServer specs, each number with its source.

Every constant is a public figure; ``sources`` on each spec maps a field name to the source id (H1 ... H20
as listed in ``docs/sources.md``) and the document it comes from. Where sources disagree, one value
is picked here, the other is named in its source entry, and a scenario can override the network numbers
(``cluster.network``: EFA bandwidth and latency, NeuronLink bandwidth and latency) for what-if studies.

Units are SI: bytes, bytes/s, flop/s, seconds, hertz. ``GiB`` = 2**30 bytes; ``GB`` = 1e9 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

GiB = 2**30
MiB = 2**20

_DOCS = {
    "H1": "aws-neuron-sdk about-neuron/arch/neuron-hardware/trainium.rst",
    "H2": "aws-neuron-sdk about-neuron/arch/neuron-hardware/trn1-arch.rst "
    '(commit db2caca2, 2023-05-26, "NeuronLink-v2 device-to-device (GiB/sec/device)")',
    "H3": "aws-neuron-sdk about-neuron/arch/neuron-hardware/neuron-core-v2.rst",
    "H4": "aws-neuron-sdk nki/guides/architecture/trainium_inferentia2_arch.rst",
    "H5": "aws-neuron-sdk about-neuron/arch/neuron-hardware/trainium2.rst",
    "H6": "aws-neuron-sdk about-neuron/arch/neuron-hardware/trn2-arch.rst",
    "H7": "aws-neuron-sdk about-neuron/arch/neuron-hardware/neuron-core-v3.rst",
    "H8": "aws-neuron-sdk nki/guides/architecture/trainium2_arch.rst",
    "H9": "aws-neuron-sdk about-neuron/arch/neuron-features/logical-neuroncore-config.rst",
    "H10": "aws-neuron-sdk neuron-runtime/about/collectives.rst",
    "H11": "aws-neuron-sdk neuron-runtime/explore/intranode-collective-comm.rst",
    "H12": "aws-neuron-sdk neuron-runtime/explore/internode-collective-comm.rst",
    "H13": "aws-neuron-sdk frameworks/torch/torch-neuronx/setup-trn1-multi-node-execution.rst",
    "H14": "aws-neuron-sdk general/benchmarks/trn1/trn1_instance_prices.csv at 7060a1c6 (2022-10-10)",
}


def _src(ids: str, note: str) -> str:
    """Formats a source entry: ``"H1, H5: <note> [H1 = <document>; H5 = <document>]"``."""
    docs = "; ".join(f"{i} = {_DOCS[i]}" for i in ids.split(", "))
    return f"{ids}: {note} [{docs}]"


@dataclass(frozen=True)
class ChipSpec:
    """One Trainium chip.

    Attributes:
        name: ``"trainium"`` | ``"trainium2"``.
        core_version: ``"NeuronCore-v2"`` | ``"NeuronCore-v3"``.
        physical_cores: physical NeuronCores per chip.
        dense_flop_per_s: dense TensorE peak per chip, flop/s, keyed by precision ``bf16``/``fp8``/``fp32``.
        tensor_flop_per_s_per_core: TensorE peak per physical core, flop/s, by precision.
        vector_flop_per_s_per_core: VectorE fp32 peak per physical core, flop/s.
        scalar_flop_per_s_per_core: ScalarE fp32 peak per physical core, flop/s.
        gpsimd_hz: GpSimd engine clock, Hz.
        hbm_bytes: HBM capacity per chip, bytes.
        hbm_bytes_per_s: HBM bandwidth per chip, bytes/s.
        dma_bytes_per_s: DMA bandwidth per chip, bytes/s.
        sbuf_bytes_per_core: SBUF (state buffer) per physical core, bytes.
        psum_bytes_per_core: PSUM (partial-sum buffer) per physical core, bytes.
        cc_cores: collective-communication cores per chip.
        sources: field name -> source id and document.
    """

    name: str
    core_version: str
    physical_cores: int
    dense_flop_per_s: Mapping[str, float] = field(hash=False)
    tensor_flop_per_s_per_core: Mapping[str, float] = field(hash=False)
    vector_flop_per_s_per_core: float
    scalar_flop_per_s_per_core: float
    gpsimd_hz: float
    hbm_bytes: int
    hbm_bytes_per_s: float
    dma_bytes_per_s: float
    sbuf_bytes_per_core: int
    psum_bytes_per_core: int
    cc_cores: int
    sources: Mapping[str, str] = field(hash=False, compare=False, repr=False)


@dataclass(frozen=True)
class InstanceSpec:
    """One EC2 instance type.

    Attributes:
        name: instance type, e.g. ``"trn1.32xlarge"``.
        chip: the chip it carries.
        chips: chips per instance.
        neuron_cores: physical NeuronCores per instance.
        default_lnc: default logical NeuronCore size (physical cores per rank).
        allowed_lnc: logical NeuronCore sizes the instance supports.
        torus: intra-instance NeuronLink torus shape, chips per dimension.
        neuronlink_bytes_per_s_per_chip: NeuronLink bandwidth per chip inside the instance, bytes/s.
        neuronlink_hop_latency_s: NeuronLink latency per hop, seconds.
        efa_bytes_per_s: EFA bandwidth per instance, bytes/s.
        efa_nics: EFA devices per instance.
        efa_latency_s: EFA point-to-point latency per hop, seconds.
        ultraserver_capable: whether 4 instances join into a Trn2 UltraServer.
        price_per_hour_usd: on-demand price, USD per instance-hour, or None where no public figure was found.
        sources: field name -> source id and document.
    """

    name: str
    chip: ChipSpec
    chips: int
    neuron_cores: int
    default_lnc: int
    allowed_lnc: tuple[int, ...]
    torus: tuple[int, int]
    neuronlink_bytes_per_s_per_chip: float
    neuronlink_hop_latency_s: float
    efa_bytes_per_s: float
    efa_nics: int
    efa_latency_s: float
    ultraserver_capable: bool
    price_per_hour_usd: float | None
    sources: Mapping[str, str] = field(hash=False, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class UltraServerSpec:
    """A Trn2 UltraServer: 4 trn2u.48xlarge instances joined by NeuronLink Z-rings (4x4x4 torus).

    Attributes:
        name: ``"trn2-ultraserver"``.
        instance: the member instance type (trn2u.48xlarge).
        instances: instances per UltraServer.
        z_link_bytes_per_s_per_chip: inter-instance (Z) NeuronLink bandwidth per chip, bytes/s.
        z_hop_latency_s: latency per Z hop, seconds.
        sources: field name -> source id and document.
    """

    name: str = "trn2-ultraserver"
    instance: InstanceSpec
    instances: int = 4
    z_link_bytes_per_s_per_chip: float = 256e9
    z_hop_latency_s: float
    sources: Mapping[str, str] = field(hash=False, compare=False, repr=False)


TRAINIUM = ChipSpec(
    name="trainium",
    core_version="NeuronCore-v2",
    physical_cores=2,
    dense_flop_per_s={"bf16": 190e12, "fp8": 190e12, "fp32": 47.5e12},
    # Per core = chip figure / 2, so that a saturated TensorE on every core gives exactly the chip peak
    # that MFU divides by. The NKI guide's clock-derived per-core figures (92 BF16, 23 FP32; 2.8 GHz x
    # 128x128) are ~3 % lower; calibration factors absorb the difference.
    tensor_flop_per_s_per_core={"bf16": 95e12, "fp8": 95e12, "fp32": 23.75e12},
    vector_flop_per_s_per_core=2.3e12,
    scalar_flop_per_s_per_core=2.9e12,
    gpsimd_hz=1.4e9,
    hbm_bytes=32 * GiB,
    hbm_bytes_per_s=820.0 * GiB,
    dma_bytes_per_s=1e12,
    sbuf_bytes_per_core=24 * MiB,
    psum_bytes_per_core=2 * MiB,
    cc_cores=6,
    sources={
        "core_version": _src("H1", "2 x NeuronCore-v2 per chip"),
        "physical_cores": _src("H1", "2 NeuronCores per chip"),
        "dense_flop_per_s": _src(
            "H1, H5",
            "190 TFLOPS BF16/FP16/TF32 and cFP8, 47.5 TFLOPS FP32 (Trn2 comparison table rounds to 191 and 48; "
            "an early Trn1 doc listed 210)",
        ),
        "tensor_flop_per_s_per_core": _src(
            "H1, H4", "chip figure / 2 cores = 95 TFLOPS BF16/cFP8, 23.75 FP32 (NKI guide: 92 BF16, 23 FP32)"
        ),
        "vector_flop_per_s_per_core": _src("H3", "VectorE 2.3 TFLOPS FP32"),
        "scalar_flop_per_s_per_core": _src("H3", "ScalarE 2.9 TFLOPS FP32"),
        "gpsimd_hz": _src("H4", "GpSimd 1.4 GHz"),
        "hbm_bytes": _src("H1", "32 GiB HBM per chip"),
        "hbm_bytes_per_s": _src("H1", '820 GiB/s ("0.8 TB/s" in the Trn2 comparison table)'),
        "dma_bytes_per_s": _src("H1", "1 TB/s DMA per chip"),
        "sbuf_bytes_per_core": _src("H4", "SBUF 24 MiB (128 partitions x 192 KiB)"),
        "psum_bytes_per_core": _src("H4", "PSUM 2 MiB (128 partitions x 16 KiB)"),
        "cc_cores": _src("H4", "6 collective-communication cores per chip"),
    },
)

TRAINIUM2 = ChipSpec(
    name="trainium2",
    core_version="NeuronCore-v3",
    physical_cores=8,
    dense_flop_per_s={"bf16": 667e12, "fp8": 1299e12, "fp32": 181e12},
    # Per core = chip figure / 8 (83.4 BF16, 162.4 FP8, 22.6 FP32), as for Trainium: the per-core sum equals
    # the chip peak MFU divides by. The neuron-core-v3 page lists 79 / 158 / 20 (2.4 GHz x 128x128, i.e.
    # 632 TFLOPS BF16 for 8 cores, 5 % below the 667 chip figure); calibration absorbs the difference.
    tensor_flop_per_s_per_core={"bf16": 667e12 / 8, "fp8": 1299e12 / 8, "fp32": 181e12 / 8},
    vector_flop_per_s_per_core=1.0e12,
    scalar_flop_per_s_per_core=1.2e12,
    gpsimd_hz=1.2e9,
    hbm_bytes=96 * GiB,
    hbm_bytes_per_s=2.9e12,
    dma_bytes_per_s=3.5e12,
    sbuf_bytes_per_core=28 * MiB,
    psum_bytes_per_core=2 * MiB,
    cc_cores=16,
    sources={
        "core_version": _src("H5", "8 x NeuronCore-v3 per chip"),
        "physical_cores": _src("H5, H9", "8 physical NeuronCores per chip (4 logical at LNC=2)"),
        "dense_flop_per_s": _src("H5", "667 TFLOPS BF16/FP16/TF32, 1,299 FP8, 181 FP32 dense"),
        "tensor_flop_per_s_per_core": _src(
            "H5, H7", "chip figure / 8 cores (neuron-core-v3 page: 79 BF16, 158 FP8, 20 FP32 per core)"
        ),
        "vector_flop_per_s_per_core": _src("H7", "VectorE 1.0 TFLOPS FP32"),
        "scalar_flop_per_s_per_core": _src("H7", "ScalarE 1.2 TFLOPS FP32"),
        "gpsimd_hz": _src("H8", "GpSimd 1.2 GHz"),
        "hbm_bytes": _src("H5, H8", "96 GiB HBM per chip (4 stacks, each shared by 2 physical cores)"),
        "hbm_bytes_per_s": _src("H5, H8", '2.9 TB/s (NKI guide rounds to "3TB/s")'),
        "dma_bytes_per_s": _src("H5", "3.5 TB/s DMA per chip"),
        "sbuf_bytes_per_core": _src("H7, H8", "SBUF 28 MiB (128 partitions x 224 KiB)"),
        "psum_bytes_per_core": _src("H8", "PSUM 2 MiB"),
        "cc_cores": _src("H5, H8", "16 collective-communication cores (trainium2 page; the NKI guide says 20)"),
    },
)


def _instance_sources(neuronlink: str, efa: str, nics: str, price: str, trn2: bool) -> dict[str, str]:
    arch = "H6" if trn2 else "H2"
    return {
        "chips": _src(arch, "16 chips per instance"),
        "neuron_cores": _src(arch, "128 physical NeuronCores" if trn2 else "32 NeuronCores"),
        "default_lnc": _src("H9", "LNC=2 is the Trn2 default" if trn2 else "Trn1 has no LNC setting: 1 core/rank"),
        "allowed_lnc": _src("H9", "LNC=1 or LNC=2 on Trainium2" if trn2 else "LNC exists only on Trainium2"),
        "torus": _src(arch, "4x4 2D torus of chips, 4 neighbours each"),
        "neuronlink_bytes_per_s_per_chip": _src(arch, neuronlink),
        "neuronlink_hop_latency_s": _src(
            "H11", 'per-hop latency of Ring/KangaRing "about 1-2 us (HBM load dependent)": 1.5 us picked'
        ),
        "efa_bytes_per_s": _src(arch if trn2 else "H2, H13", efa),
        "efa_nics": _src("H6" if trn2 else "H13", nics),
        "efa_latency_s": _src("H10, H12", "~15 us per hop (inter-node algorithm docs, ib_write_lat HBM to HBM)"),
        "ultraserver_capable": _src("H6", "only trn2u.48xlarge joins a Trn2 UltraServer"),
        "price_per_hour_usd": price,
    }


_NO_PRICE = "not found in the public sources read (docs/sources.md §5.2): None"


def _trn1(name: str, neuronlink_gib: int, efa_gbit: int, nics: int, price: float | None) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        chip=TRAINIUM,
        chips=16,
        neuron_cores=32,
        default_lnc=1,
        allowed_lnc=(1,),
        torus=(4, 4),
        neuronlink_bytes_per_s_per_chip=float(neuronlink_gib * GiB),
        neuronlink_hop_latency_s=1.5e-6,
        efa_bytes_per_s=efa_gbit * 1e9 / 8,
        efa_nics=nics,
        efa_latency_s=15e-6,
        ultraserver_capable=False,
        price_per_hour_usd=price,
        sources=_instance_sources(
            f"{neuronlink_gib} GiB/s NeuronLink-v2 per chip (corrected 2023-05-26 from twice that)",
            f"{efa_gbit} Gbps EFA per instance ({nics} EFA devices x 100 Gb)",
            f"{nics} EFA devices",
            _src("H14", "On-Demand $21.50/h (2022 price list)") if price else _NO_PRICE,
            trn2=False,
        ),
    )


def _trn2(name: str, ultraserver: bool) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        chip=TRAINIUM2,
        chips=16,
        neuron_cores=128,
        default_lnc=2,
        allowed_lnc=(1, 2),
        torus=(4, 4),
        neuronlink_bytes_per_s_per_chip=1024e9,
        neuronlink_hop_latency_s=1.5e-6,
        efa_bytes_per_s=3200e9 / 8,
        efa_nics=16,
        efa_latency_s=15e-6,
        ultraserver_capable=ultraserver,
        price_per_hour_usd=None,
        sources=_instance_sources(
            "1,024 GB/s NeuronLink-v3 per chip inside the instance (of 1.28 TB/s total; 256 GB/s Z links)",
            "3,200 Gbps EFAv3 per instance (16 x 200 Gbps, one NIC per chip)",
            "16 EFAv3 NICs, one per chip",
            _NO_PRICE,
            trn2=True,
        ),
    )


INSTANCES: Mapping[str, InstanceSpec] = {
    spec.name: spec
    for spec in (
        _trn1("trn1.32xlarge", neuronlink_gib=384, efa_gbit=800, nics=8, price=21.50),
        _trn1("trn1n.32xlarge", neuronlink_gib=768, efa_gbit=1600, nics=16, price=None),
        _trn2("trn2.48xlarge", ultraserver=False),
        _trn2("trn2u.48xlarge", ultraserver=True),
    )
}

ULTRASERVER = UltraServerSpec(
    instance=INSTANCES["trn2u.48xlarge"],
    z_hop_latency_s=2e-6,
    sources={
        "instances": _src("H6", "4 x trn2u.48xlarge per UltraServer (64 chips, 4x4x4 torus)"),
        "z_link_bytes_per_s_per_chip": _src("H5, H6", "256 GB/s inter-instance NeuronLink per chip"),
        "z_hop_latency_s": "not published (no latency figure found in H5, H6, H10, H11): 2 us assumed, "
        "the top of the intra-node 1-2 us per-hop range of H11; override with cluster.network",
    },
)


def instance(name: str) -> InstanceSpec:
    """Looks up an instance type.

    Args:
        name: instance type, e.g. ``"trn2.48xlarge"``.

    Returns:
        The instance's spec.

    Raises:
        ValueError: the name is not in the catalog; the message lists the known names.
    """
    try:
        return INSTANCES[name]
    except KeyError:
        raise ValueError(f"unknown instance type {name!r}; known: {', '.join(INSTANCES)}") from None


def ranks_per_instance(spec: InstanceSpec, lnc: int) -> int:
    """Ranks (logical NeuronCores) per instance: physical NeuronCores // lnc.

    Args:
        spec: the instance type.
        lnc: physical NeuronCores per logical NeuronCore (rank).

    Returns:
        32 on trn1*, 64 on trn2* at lnc 2, 128 on trn2* at lnc 1.

    Raises:
        ValueError: ``lnc`` is not one of ``spec.allowed_lnc``.
    """
    if lnc not in spec.allowed_lnc:
        raise ValueError(f"lnc {lnc} not supported on {spec.name}; allowed: {spec.allowed_lnc}")
    return spec.neuron_cores // lnc
