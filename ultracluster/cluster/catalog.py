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

from ..units import GIB as GiB, MIB as MiB   # the catalog writes sizes as n * GiB

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
    "H23": "aws-neuron-sdk nki/deep-dives/nki-dma-bandwidth-guide.rst (DMA engines per NeuronCore and their bandwidth)",
    "H24": "aws-neuron-sdk nki/deep-dives/nki_perf_guide.rst (TensorE instruction initiation intervals)",
    # Trainium3 (docs/sources.md §6): T ids are AWS documents, TS ids secondary (press) sources
    "T1": "aws-neuron-sdk about-neuron/arch/neuron-hardware/trainium3.rst",
    "T2": "aws-neuron-sdk about-neuron/arch/neuron-hardware/neuron-core-v4.rst",
    "T3": "aws-neuron-sdk nki/guides/architecture/trainium3_arch.rst",
    "T4": "aws-neuron-sdk about-neuron/arch/neuron-hardware/trn3-arch.rst (UltraServer table; PCIe section of "
    "SDK 2.29, commit 539a73c5)",
    "T5": "aws-neuron-sdk images/architecture/trn3/trn3-ultraserver-gen1.png, trn3-ultraserver-gen2.png",
    "T6": "aws-neuron-sdk about-neuron/arch/neuron-features/logical-neuroncore-config.rst",
    "T7": "aws-neuron-sdk libraries/nxd-inference/tutorials/trn3-gpt-oss-120b-tutorial.rst",
    "T8": "aws-neuron-sdk release-notes/components/runtime.rst (SDK 2.27-2.32)",
    "T9": "aws-neuron-sdk tools/neuron-explorer/profile-schema-reference.rst",
    "T10": "aws-neuron-sdk nki/api/nki/isa/__init__.py (nc_matmul double_row mode)",
    "T13": "github.com/aws-neuron/connected-device-maps-over-efa-for-neuron lookup/neuron/trn3.json",
    "T15": "TorchNeuron platform code (GetPlatformConfig: trn3, trn3u at 2 logical cores)",
    "TS2": "Tom's Hardware, Trainium3 launch (dual-chiplet, four NeuronCore-v4 per chiplet)",
    "TS3": "Classmethod launch summary (NeuronSwitch-v1 latency under 10 us)",
    "TS9": "third-party note quoting aws.amazon.com/ec2/instance-types/trn3 (no sizes, no prices listed)",
}


def _src(ids: str, note: str) -> str:
    """Formats a source entry: ``"H1, H5: <note> [H1 = <document>; H5 = <document>]"``."""
    docs = "; ".join(f"{i} = {_DOCS[i]}" for i in ids.split(", "))
    return f"{ids}: {note} [{docs}]"


@dataclass(frozen=True)
class ChipSpec:
    """One Trainium chip.

    Attributes:
        name: ``"trainium"`` | ``"trainium2"`` | ``"trainium3"``.
        core_version: ``"NeuronCore-v2"`` | ``"NeuronCore-v3"`` | ``"NeuronCore-v4"``.
        physical_cores: physical NeuronCores per chip.
        dense_flop_per_s: dense TensorE peak per chip, flop/s, keyed by precision ``bf16``/``fp8``/``fp32``
            (and ``mxfp8``/``mxfp4`` on chips with MX matmul: a precision missing here is refused).
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
        vector_hz, scalar_hz: VectorE and ScalarE clocks, Hz (128 lanes each, one element per lane and cycle).
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
    # VectorE and ScalarE stream 128 lanes x 1 element per cycle (H4: "128 input/output" elements/cycle; an
    # instruction over N elements per partition takes about N cycles, 2N with two input tensors). The chip
    # model times their work in element passes at 128 x clock, not at the FP32 TFLOPS of the product pages.
    vector_hz: float = 0.0
    scalar_hz: float = 0.0
    # Trainium3 (NeuronCore-v4) additions; the defaults describe the older chips.
    tensor_hz: float = 0.0           # TensorE clock: a 128 x 128 PE array, 2 FLOPs per PE and cycle at BF16
    dma_core_bytes_per_s: float = 0.0   # the 16 DMA engines of one physical NeuronCore together (H23)
    dies: int = 1                    # compute dies per chip (Trainium3: 2, inferred from T8 and TS2)
    fast_exp_speedup: float = 1.0    # VectorE exponential over ScalarE's exp throughput (Trainium3: 4, T3)


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
        ultraserver_capable: whether instances of this type join into an UltraServer (`ULTRASERVERS`).
        price_per_hour_usd: on-demand price, USD per instance-hour, or None where no public figure was found.
        sources: field name -> source id and document.
        ultraserver_default: `cluster.ultraserver` when the scenario does not say (trn2u and the Trn3 Gen2
            server: true; a trn3.48xlarge joins a Gen1 UltraServer only when asked).
        switch_level_shares: None for a NeuronLink torus; for a NeuronSwitch fabric (Trainium3) the shares
            of `neuronlink_bytes_per_s_per_chip` that the three link levels carry: intra-server (through
            the switch), inter-server in the same switch domain, and direct links to the partner chip of
            the other half of the UltraServer (T4: 256, 320 and 128 GB/s of 704 per chip).
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
    ultraserver_default: bool = False
    switch_level_shares: tuple[float, float, float] | None = None

    @property
    def switched(self) -> bool:
        """Chips reach each other through NeuronSwitch-v1 (Trainium3), not a NeuronLink torus."""
        return self.switch_level_shares is not None


@dataclass(frozen=True, kw_only=True)
class UltraServerSpec:
    """An UltraServer: instances joined by NeuronLink beyond EFA.

    Trn2: 4 trn2u.48xlarge joined by NeuronLink Z-rings (4x4x4 torus). Trn3 (``switched``): servers in
    two halves (Gen1: two server pairs, each pair on one NeuronSwitch-v1; Gen2: two racks of 18 servers);
    a chip reaches the servers of its own half through the switches and chip i of server s has a direct
    link to chip i of server s + instances/2 (T4, T5 diagrams).

    Attributes:
        name: ``"trn2-ultraserver"``, ``"trn3-gen1-ultraserver"``, ``"trn3-gen2-ultraserver"``.
        instance: the member instance type.
        instances: instances per UltraServer.
        z_link_bytes_per_s_per_chip: inter-instance (Z) NeuronLink bandwidth per chip, bytes/s (Trn3: the
            direct links' share of the instance's per-chip figure).
        z_hop_latency_s: latency per Z hop (Trn3: per direct link), seconds.
        sources: field name -> source id and document.
        switched: a NeuronSwitch fabric in two halves (Trn3) rather than Z-rings.
    """

    name: str = "trn2-ultraserver"
    instance: InstanceSpec
    instances: int = 4
    z_link_bytes_per_s_per_chip: float = 256e9
    z_hop_latency_s: float
    sources: Mapping[str, str] = field(hash=False, compare=False, repr=False)
    switched: bool = False


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
    tensor_hz=2.8e9,
    dma_core_bytes_per_s=16 * 27 * GiB,
    vector_hz=1.12e9,
    scalar_hz=1.4e9,
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
        "tensor_hz": _src("H4", "TensorE 2.8 GHz, 2x128 input / 1x128 output elements per cycle (128 x 128 PEs)"),
        "dma_core_bytes_per_s": _src(
            "H4, H1", "16 DMA engines per NeuronCore-v2 x 27 GiB/s = 464 GB/s (H4), as the chip's 1 TB/s of DMA for "
            "its 2 cores (H1); the DMA bandwidth guide's table (H23) lists 17 B/ns x 16 = 272 GB/s for TRN1, 544 GB/s "
            "a chip, against both"),
        "vector_hz": _src("H4", "VectorE 1.12 GHz, 128 elements/cycle"),
        "scalar_hz": _src("H4", "ScalarE 1.4 GHz, 128 elements/cycle"),
        "hbm_bytes": _src("H1", "32 GiB HBM per chip"),
        "hbm_bytes_per_s": _src("H1", '820 GiB/s ("0.8 TB/s" in the Trn2 comparison table)'),
        "dma_bytes_per_s": _src("H1", "1 TB/s DMA per chip"),
        "sbuf_bytes_per_core": _src("H4", "SBUF 24 MiB (128 partitions x 192 KiB)"),
        "psum_bytes_per_core": _src("H4", "PSUM 2 MiB (128 partitions x 16 KiB)"),
        "cc_cores": _src("H4", "6 collective-communication cores per chip"),
        "dies": _src("H1", "no die split published: 1 (ranks per die are a Trainium3 runtime notion)"),
        "fast_exp_speedup": _src("H4", "exp runs on ScalarE only (no VectorE exponential): 1"),
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
    tensor_hz=2.4e9,
    dma_core_bytes_per_s=16 * 23e9,
    vector_hz=0.96e9,
    scalar_hz=1.2e9,
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
        "tensor_hz": _src("H8", "TensorE 2.4 GHz (79 BF16 TFLOPS per core = 2.4 GHz x 128 x 128 x 2)"),
        "dma_core_bytes_per_s": _src("H23", "16 DMA engines per NeuronCore x 23 B/ns = 368 GB/s (TRN2)"),
        "vector_hz": _src("H8", "VectorE 0.96 GHz, 128 elements/cycle"),
        "scalar_hz": _src("H8", "ScalarE 1.2 GHz, 128 elements/cycle"),
        "hbm_bytes": _src("H5, H8", "96 GiB HBM per chip (4 stacks, each shared by 2 physical cores)"),
        "hbm_bytes_per_s": _src("H5, H8", '2.9 TB/s (NKI guide rounds to "3TB/s")'),
        "dma_bytes_per_s": _src("H5", "3.5 TB/s DMA per chip"),
        "sbuf_bytes_per_core": _src("H7, H8", "SBUF 28 MiB (128 partitions x 224 KiB)"),
        "psum_bytes_per_core": _src("H8", "PSUM 2 MiB"),
        "cc_cores": _src("H5, H8", "16 collective-communication cores (trainium2 page; the NKI guide says 20)"),
        "dies": _src("H5", "no die split published: 1 (ranks per die are a Trainium3 runtime notion)"),
        "fast_exp_speedup": _src("H8", "exp runs on ScalarE only (the VectorE exponential is new in NeuronCore-v4): 1"),
    },
)

# Trainium3 (docs/trainium3.md). Per-core TensorE peaks follow the same rule as Trainium2 (chip figure / 8),
# so that Trn3 and Trn2 are timed alike: the neuron-core-v4 page lists 79 BF16 and 20 FP32 per core (8 x 79
# = 632, 6 % under the 671 chip figure, the same gap as Trainium2's 8 x 79 against 667) and 315 MXFP8, which
# equals 2,517 / 8. Plain (non-MX) FP8 has no published rate on Trainium3: 2 x BF16 is inferred from the
# double_row FP8 matmul mode documented for NeuronCore-v3 and v4 (T10) and Neuron Explorer's 0.5x FP8
# weighting on Trn2 and Trn3 (T9); the calibration's `fp8_peak_scale_trn3` spans 1x to 2x BF16.
TRAINIUM3 = ChipSpec(
    name="trainium3",
    core_version="NeuronCore-v4",
    physical_cores=8,
    dense_flop_per_s={"bf16": 671e12, "fp8": 2 * 671e12, "fp32": 183e12, "mxfp8": 2517e12, "mxfp4": 2517e12},
    tensor_flop_per_s_per_core={"bf16": 671e12 / 8, "fp8": 2 * 671e12 / 8, "fp32": 183e12 / 8,
                                "mxfp8": 2517e12 / 8, "mxfp4": 2517e12 / 8},
    vector_flop_per_s_per_core=1.2e12,
    scalar_flop_per_s_per_core=1.2e12,
    gpsimd_hz=1.2e9,
    tensor_hz=2.4e9,
    dma_core_bytes_per_s=16 * 33e9,
    vector_hz=1.2e9,
    scalar_hz=1.2e9,
    hbm_bytes=144 * GiB,
    hbm_bytes_per_s=4.9e12,
    dma_bytes_per_s=4.9e12,
    sbuf_bytes_per_core=32 * MiB,
    psum_bytes_per_core=2 * MiB,
    cc_cores=16,
    dies=2,
    fast_exp_speedup=4.0,
    sources={
        "core_version": _src("T1, T2", "8 x NeuronCore-v4 per chip"),
        "physical_cores": _src("T1, T3, T6", "8 physical NeuronCores per chip (4 logical at LNC=2)"),
        "dense_flop_per_s": _src(
            "T1, T9, T10",
            "2,517 MXFP8/MXFP4, 671 BF16/FP16/TF32, 183 FP32 TFLOPS dense (T1); plain FP8 not published: "
            "2 x BF16 inferred (double_row mode T10, 0.5x FP8 weighting T9), range in the calibration",
        ),
        "tensor_flop_per_s_per_core": _src(
            "T1, T2, T3",
            "chip figure / 8 cores (neuron-core-v4 page: 315 MXFP8/MXFP4, 79 BF16, 20 FP32 per core; MX matmul "
            "at 4x the BF16 matmul throughput, T3)",
        ),
        "vector_flop_per_s_per_core": _src("T2, T3", "VectorE 1.2 TFLOPS FP32"),
        "scalar_flop_per_s_per_core": _src("T3", "ScalarE 1.2 TFLOPS FP32"),
        "gpsimd_hz": _src("T3", "GpSimd 1.2 GHz, 128 elements/cycle"),
        "tensor_hz": _src("T3", "TensorE 2.4 GHz (79 BF16 TFLOPS per core)"),
        "dma_core_bytes_per_s": _src("H23", "16 DMA engines per NeuronCore x 33 B/ns = 528 GB/s (TRN3)"),
        "vector_hz": _src("T3", "VectorE 1.2 GHz (data path 512 BF16/FP16/FP8 or 256 other elements/cycle)"),
        "scalar_hz": _src("T3", "ScalarE 1.2 GHz (data path 256 BF16/FP16/FP8 or 128 other elements/cycle)"),
        "hbm_bytes": _src("T1, T3", "144 GiB HBM per chip (4 stacks)"),
        "hbm_bytes_per_s": _src(
            "T1, T3, T4",
            "4.9 TB/s (chip page; UltraServer tables 313.6 TB/64 = 705.6 TB/144 = 4.9) picked over the NKI guide's "
            "4.7 TB/s; the calibration's hbm_peak_scale_trn3 spans both",
        ),
        "dma_bytes_per_s": _src("T1", "4.9 TB/s DMA per chip, with inline computation; 128 DMA engines (T3)"),
        "sbuf_bytes_per_core": _src("T2, T3", "SBUF 32 MiB (up from 28 MiB)"),
        "psum_bytes_per_core": _src("T3", "PSUM 2 MiB (unchanged)"),
        "cc_cores": _src("T1, T3", "16 collective-communication cores (trainium3 page; the NKI guide says 20)"),
        "dies": _src("T8, TS2", "inferred: the runtime speaks of one rank per die, two per MLA; press: dual-chiplet, "
                                "four NeuronCore-v4 per chiplet"),
        "fast_exp_speedup": _src("T3", "VectorE fast exponential (nisa.exponential) at 4x the throughput of "
                                       "ScalarE's exp activation, with the softmax's subtraction and row sum"),
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
        "ultraserver_default": _src("H6", "trn2u.48xlarge is the UltraServer member type: in one by default"),
        "switch_level_shares": _src(arch, "a NeuronLink torus, no switch: None"),
    }


NO_PRICE = "no public price: set cluster.price_per_hour_usd"
"""What the catalog says of an instance type without a public On-Demand price (its `price_per_hour_usd` is None):
a scenario sets one with `cluster.price_per_hour_usd`, `run` and `plan` with `--price-per-hour`."""
_NO_PRICE = f"not found in the public sources read (docs/sources.md §5.2), None: {NO_PRICE}"


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
            _src("H14", "On-Demand $21.50/h (Neuron's price list of 2022-10-10)") if price else _NO_PRICE,
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
        ultraserver_default=ultraserver,
        sources=_instance_sources(
            "1,024 GB/s NeuronLink-v3 per chip inside the instance (of 1.28 TB/s total; 256 GB/s Z links)",
            "3,200 Gbps EFAv3 per instance (16 x 200 Gbps, one NIC per chip)",
            "16 EFAv3 NICs, one per chip",
            _NO_PRICE,
            trn2=True,
        ),
    )


# NeuronSwitch-v1 per-chip link levels (T4, PCIe section, written for the 4-chip sleds of Gen2): 4 PCIe Gen6
# x8 links to the intra-server switch (256 GB/s), 5 to the inter-server switches (320 GB/s), 2 direct links
# to the same-position chip of the other rack (128 GB/s); 704 GB/s in all. Each figure is called
# "bidirectional", yet 4 x8 Gen6 links carry about 256 GB/s in each direction: we read them per direction.
NEURONSWITCH_LEVELS_GB_S = (256.0, 320.0, 128.0)
# The per-chip total is published three ways (T1: 2.56 TB/s; T4 UltraServer table: 2,048 GiB/s; T4 PCIe
# section: 704 GB/s summed). The catalog takes the UltraServer table's figure (the one AWS gives for the
# UltraServers modelled here, inside the range); the calibration's `neuronswitch_scale_trn3` moves it over
# the whole published range and `cluster.network.neuronlink_gbps_per_chip` sets it. The levels keep their
# published proportions.
NEURONSWITCH_BYTES_PER_S_PER_CHIP = 2048.0 * GiB
NEURONSWITCH_RANGE_BYTES_PER_S = (704e9, 2560e9)


def _trn3(name: str, chips: int, gen2: bool) -> InstanceSpec:
    """A Trainium3 server: trn3.48xlarge (Gen1, 16 chips, x86 host) or the Gen2 4-chip server.

    AWS documents Trn3 only as UltraServers (T4): per-server figures are the UltraServer totals divided by
    its servers (Gen1: 4, Gen2: 36). No AWS page names the Gen2 server's instance type; code names exist
    (trn3pd98, trn3pds, trn3u: T11, T13, T15) without saying which is the Gen2 server, so we call it
    trn3gen2.16xlarge: 2,304 vCPUs / 36 servers = 64 vCPUs, a 16xlarge in EC2's size names.
    """
    us = "Gen2 UltraServer (36 servers x 4 chips)" if gen2 else "Gen1 UltraServer (4 servers x 16 chips)"
    efa_gbit = 200 * chips
    return InstanceSpec(
        name=name,
        chip=TRAINIUM3,
        chips=chips,
        neuron_cores=8 * chips,
        default_lnc=2,
        allowed_lnc=(1, 2),
        torus=(chips, 1),
        neuronlink_bytes_per_s_per_chip=NEURONSWITCH_BYTES_PER_S_PER_CHIP,
        neuronlink_hop_latency_s=2e-6,
        efa_bytes_per_s=efa_gbit * 1e9 / 8,
        efa_nics=chips,
        efa_latency_s=15e-6,
        ultraserver_capable=True,
        price_per_hour_usd=None,
        ultraserver_default=gen2,
        switch_level_shares=tuple(g / sum(NEURONSWITCH_LEVELS_GB_S) for g in NEURONSWITCH_LEVELS_GB_S),
        sources={
            "chips": _src("T4", f"{chips} chips per server: {us}"),
            "neuron_cores": _src("T1", "8 physical NeuronCore-v4 per chip"),
            "default_lnc": _src("T6, T7, T15", "inferred LNC=2: TorchNeuron sets 2 logical cores for trn3 and "
                                               "trn3u; the Trn3 tutorial runs LNC=2"),
            "allowed_lnc": _src("T6", '"LNC can only be set to 1 or 2 ... applies only to Trn2 and Trn3"'),
            "torus": _src("T4", "no torus: chips reach each other through NeuronSwitch-v1 (\"all-to-all "
                                "connectivity ... replacing the previous 2D-torus\"); (chips, 1) = a row"),
            "neuronlink_bytes_per_s_per_chip": _src(
                "T1, T4", "2,048 GiB/s per chip (UltraServer table) picked inside the published range: 2.56 TB/s "
                          "(chip page) to 704 GB/s (256 + 320 + 128, PCIe section); see neuronswitch_scale_trn3"),
            "switch_level_shares": _src("T4", "256 : 320 : 128 GB/s per chip (intra-server, inter-server, "
                                              "inter-rack direct), read per direction"),
            "neuronlink_hop_latency_s": _src(
                "TS3", "not published by AWS (press: under 10 us across NeuronSwitch-v1): 2 us per switch "
                       "traversal assumed, the Trn2 Z hop assumption (top of H11's 1-2 us)"),
            "efa_bytes_per_s": _src("T4", f"{'28,800' if gen2 else '12,800'} Gbps EFA per UltraServer / "
                                          f"{36 if gen2 else 4} servers = {efa_gbit:,} Gbps (200 per chip); "
                                          "EFA generation not published"),
            "efa_nics": _src("T13", "one EFA device per Neuron device (device map of the trn3 and trn3pds "
                                    "families): inferred one NIC per chip"),
            "efa_latency_s": _src("H10, H12", "not published for Trn3: the Trn1/Trn2 ~15 us per hop"),
            "ultraserver_capable": _src("T4", f"joins a {us}"),
            "ultraserver_default": _src("T4", "the Gen2 server exists only in its UltraServer: true" if gen2 else
                                        "a Gen1 UltraServer is 4 servers joined by NeuronSwitch: opt in with "
                                        "cluster.ultraserver"),
            "price_per_hour_usd": _src("TS9", "no Trn3 price published (On-Demand, Capacity Block or Savings "
                                              f"Plan): unknown, None: {NO_PRICE}"),
        },
    )


INSTANCES: Mapping[str, InstanceSpec] = {
    spec.name: spec
    for spec in (
        # On-Demand $21.50 per instance-hour: Neuron's trn1 price list (H14, commit 7060a1c6, 2022-10-10), the
        # same figure in a June 2026 cost comparison (H15). No public On-Demand price was found for trn1n, trn2,
        # trn2u or Trn3 (docs/sources.md §5.2, §6): None, and `cluster.price_per_hour_usd` sets one.
        _trn1("trn1.32xlarge", neuronlink_gib=384, efa_gbit=800, nics=8, price=21.50),
        _trn1("trn1n.32xlarge", neuronlink_gib=768, efa_gbit=1600, nics=16, price=None),
        _trn2("trn2.48xlarge", ultraserver=False),
        _trn2("trn2u.48xlarge", ultraserver=True),
        _trn3("trn3.48xlarge", chips=16, gen2=False),
        _trn3("trn3gen2.16xlarge", chips=4, gen2=True),
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
        "switched": _src("H6", "Z-rings of a 4x4x4 torus, no switch"),
    },
)


def _trn3_ultraserver(name: str, member: str, servers: int, layout: str) -> UltraServerSpec:
    spec = INSTANCES[member]
    assert spec.switch_level_shares is not None
    return UltraServerSpec(
        name=name,
        instance=spec,
        instances=servers,
        z_link_bytes_per_s_per_chip=spec.neuronlink_bytes_per_s_per_chip * spec.switch_level_shares[2],
        z_hop_latency_s=2e-6,
        switched=True,
        sources={
            "instances": _src("T4, T5", layout),
            "z_link_bytes_per_s_per_chip": _src("T4", "direct links: 128 of the 704 GB/s per chip, the same share "
                                                      "of the catalog's per-chip figure"),
            "z_hop_latency_s": _src("TS3", "not published: 2 us assumed, as a switch traversal"),
            "switched": _src("T4", "NeuronSwitch-v1 all-to-all design replacing the 2D torus"),
        },
    )


ULTRASERVERS: Mapping[str, UltraServerSpec] = {
    "trn2u.48xlarge": ULTRASERVER,
    "trn3.48xlarge": _trn3_ultraserver(
        "trn3-gen1-ultraserver", "trn3.48xlarge", 4,
        "Gen1: 4 servers x 16 chips = 64; servers 0 and 1 share one NeuronSwitch-v1, servers 2 and 3 another; "
        "chip i of server 0 (1) has a direct link to chip i of server 2 (3)"),
    "trn3gen2.16xlarge": _trn3_ultraserver(
        "trn3-gen2-ultraserver", "trn3gen2.16xlarge", 36,
        "Gen2: 36 servers x 4 chips = 144 in two racks of 18 (inferred from the diagram's numbering 0-17, "
        "18-35); a first-level switch per server, two second-level switches per rack; chip i of server k has a "
        "direct link to chip i of server k + 18"),
}
"""UltraServer of each instance type that joins one (`InstanceSpec.ultraserver_capable`)."""


# The largest cluster of each chip AWS describes, in chips: how many instances a layout search may ask for.
ULTRACLUSTER_CHIPS: Mapping[str, int] = {
    "trainium": 30_000,       # H2: Trn1/Trn1n in an EC2 UltraCluster "to over 30,000 Trainium devices"
    "trainium2": 500_000,     # H22: Project Rainier, an EC2 UltraCluster of "nearly half a million Trainium2 chips"
    "trainium3": 1_000_000,   # TS10 (press; no AWS page says): UltraClusters of "up to 1 million Trainium3 chips"
}


# The what-if range of a link's rate (cluster.network's keys, `collectives --efa-gbps`, Gbit/s): from one 1 GbE
# link to 12.5 TB/s, above any Trainium chip's own HBM (Trn3: 4.9 TB/s, above) and 31 x the fastest instance's EFA
# (trn2: 3,200 Gbit/s): no link carries more than its ends can feed
LINK_GBPS_RANGE = (1.0, 100_000.0)
LINK_GBPS_WHY = ("Gbit/s; 1: one 1 GbE link; 100,000: 12.5 TB/s, more than any Trainium chip's own HBM feeds "
                 "(4.9 TB/s on Trn3) and 31 x trn2's 3,200 Gbit/s EFA")


def largest_cluster(spec: InstanceSpec) -> int:
    """The most instances of a type in the catalog's largest cluster of its chip (`ULTRACLUSTER_CHIPS`)."""
    return ULTRACLUSTER_CHIPS[spec.chip.name] // spec.chips


def largest_cluster_text(spec: InstanceSpec) -> str:
    """The bound `largest_cluster` in words, as `run`, `validate` and `plan` all say it."""
    return (f"instance counts up to {largest_cluster(spec):,} for {spec.name} (the catalog's largest "
            f"{spec.chip.name} cluster: {ULTRACLUSTER_CHIPS[spec.chip.name]:,} chips, {spec.chips} per instance)")


def ultraserver_of(spec: InstanceSpec) -> UltraServerSpec | None:
    """The UltraServer an instance type joins, or None."""
    return ULTRASERVERS.get(spec.name) if spec.ultraserver_capable else None


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
