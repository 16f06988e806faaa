"""Trainium3 in the hardware catalog: every number against the published figure it comes from (ids as in
docs/sources.md §6), the UltraServer totals AWS publishes, and the uncertain factors where sources disagree."""
from __future__ import annotations

import dataclasses

import pytest

from ultracluster.calibration.factors import Calibration, NetworkCalibration
from ultracluster.calibration.fitted_files import DEFAULT
from ultracluster.cluster.catalog import (INSTANCES, NEURONSWITCH_BYTES_PER_S_PER_CHIP, NEURONSWITCH_LEVELS_GB_S,
                                          NEURONSWITCH_RANGE_BYTES_PER_S, TRAINIUM2, TRAINIUM3, ULTRASERVERS,
                                          ranks_per_instance, ultraserver_of)
from ultracluster.uncertain_factors import for_generation

GiB, MiB, T = 2**30, 2**20, 1e12

# The published figures, typed from the sources (not from the catalog).
CHIP_TFLOPS = {"mxfp8": 2517, "mxfp4": 2517, "bf16": 671, "fp32": 183}          # T1
CORE_TFLOPS = {"mxfp8": 315, "bf16": 79, "fp32": 20}                              # T2, T3
GEN1 = {"chips": 64, "mxfp8_tflops": 161_088, "bf16_tflops": 42_944, "fp32_tflops": 11_712, "hbm_gib": 9_216,
        "hbm_tb_s": 313.6, "efa_gbps": 12_800, "servers": 4}                      # T4
GEN2 = {"chips": 144, "mxfp8_tflops": 362_448, "bf16_tflops": 96_624, "fp32_tflops": 26_352, "hbm_gib": 20_736,
        "hbm_tb_s": 705.6, "efa_gbps": 28_800, "servers": 36}                     # T4


def test_chip_matches_the_trainium3_pages():
    c = TRAINIUM3
    assert (c.name, c.core_version, c.physical_cores) == ("trainium3", "NeuronCore-v4", 8)          # T1
    for precision, tflops in CHIP_TFLOPS.items():
        assert c.dense_flop_per_s[precision] == tflops * T, precision
    assert c.dense_flop_per_s["fp8"] == 2 * 671 * T           # inferred (T9, T10): the range is a calibration factor
    assert (c.hbm_bytes, c.hbm_bytes_per_s, c.dma_bytes_per_s) == (144 * GiB, 4.9e12, 4.9e12)      # T1
    assert (c.sbuf_bytes_per_core, c.psum_bytes_per_core) == (32 * MiB, 2 * MiB)                   # T2, T3
    assert (c.vector_flop_per_s_per_core, c.scalar_flop_per_s_per_core) == (1.2e12, 1.2e12)        # T2, T3
    assert (c.vector_hz, c.scalar_hz, c.gpsimd_hz) == (1.2e9, 1.2e9, 1.2e9)                       # T3
    assert (c.cc_cores, c.dies, c.fast_exp_speedup) == (16, 2, 4.0)                                # T1, T8, T3


def test_per_core_peaks_add_up_to_the_chip_and_sit_by_the_core_page():
    c = TRAINIUM3
    for precision, peak in c.dense_flop_per_s.items():
        assert c.tensor_flop_per_s_per_core[precision] * 8 == pytest.approx(peak)
    assert c.tensor_flop_per_s_per_core["mxfp8"] == pytest.approx(CORE_TFLOPS["mxfp8"] * T, rel=0.002)
    # BF16 and FP32: the core page is 6 % and 13 % under chip / 8, as on Trainium2 (8 x 79 against 667)
    assert 0.93 < CORE_TFLOPS["bf16"] * T / c.tensor_flop_per_s_per_core["bf16"] < 0.95
    assert CORE_TFLOPS["bf16"] * T / TRAINIUM2.tensor_flop_per_s_per_core["bf16"] == pytest.approx(
        CORE_TFLOPS["bf16"] * T / c.tensor_flop_per_s_per_core["bf16"], rel=0.01)
    assert 0.85 < CORE_TFLOPS["fp32"] * T / c.tensor_flop_per_s_per_core["fp32"] < 0.9
    # MX over BF16: 3.75x from the chip figures (what the catalog prices), 4x per core (T3's "4x")
    assert c.dense_flop_per_s["mxfp8"] / c.dense_flop_per_s["bf16"] == pytest.approx(3.751, abs=1e-3)
    assert CORE_TFLOPS["mxfp8"] / CORE_TFLOPS["bf16"] == pytest.approx(3.99, abs=0.01)


@pytest.mark.parametrize(("name", "totals"), [("trn3.48xlarge", GEN1), ("trn3gen2.16xlarge", GEN2)])
def test_ultraserver_totals_are_the_published_ones(name, totals):
    spec = INSTANCES[name]
    us = ultraserver_of(spec)
    assert us is not None and us.switched and us.instances == totals["servers"]
    chips = us.instances * spec.chips
    assert chips == totals["chips"]
    assert chips * spec.chip.dense_flop_per_s["mxfp8"] == totals["mxfp8_tflops"] * T
    assert chips * spec.chip.dense_flop_per_s["bf16"] == totals["bf16_tflops"] * T
    assert chips * spec.chip.dense_flop_per_s["fp32"] == pytest.approx(totals["fp32_tflops"] * T)
    assert chips * spec.chip.hbm_bytes == totals["hbm_gib"] * GiB
    assert chips * spec.chip.hbm_bytes_per_s == pytest.approx(totals["hbm_tb_s"] * T)
    assert us.instances * spec.efa_bytes_per_s * 8 == pytest.approx(totals["efa_gbps"] * 1e9)
    assert spec.efa_nics == spec.chips                        # one NIC per chip (T13 device map)
    assert spec.efa_bytes_per_s * 8 / spec.efa_nics == 200e9


def test_instances():
    t3, g2 = INSTANCES["trn3.48xlarge"], INSTANCES["trn3gen2.16xlarge"]
    assert (t3.chips, t3.neuron_cores, g2.chips, g2.neuron_cores) == (16, 128, 4, 32)
    for spec in (t3, g2):
        assert (spec.default_lnc, spec.allowed_lnc) == (2, (1, 2))                                # T6, T15
        assert spec.price_per_hour_usd is None and "unknown" in spec.sources["price_per_hour_usd"]
        assert spec.switched and spec.ultraserver_capable
    assert (t3.ultraserver_default, g2.ultraserver_default) == (False, True)
    assert (ranks_per_instance(t3, 2), ranks_per_instance(t3, 1), ranks_per_instance(g2, 2)) == (64, 128, 16)
    assert ULTRASERVERS["trn3.48xlarge"].name == "trn3-gen1-ultraserver"
    assert ULTRASERVERS["trn3gen2.16xlarge"].name == "trn3-gen2-ultraserver"


def test_neuronswitch_figures_and_their_range():
    assert NEURONSWITCH_BYTES_PER_S_PER_CHIP == 2048 * GiB                                       # T4 table
    assert NEURONSWITCH_LEVELS_GB_S == (256, 320, 128) and sum(NEURONSWITCH_LEVELS_GB_S) == 704   # T4 PCIe
    assert NEURONSWITCH_RANGE_BYTES_PER_S == (704e9, 2560e9)                                      # T4, T1
    spec = INSTANCES["trn3.48xlarge"]
    assert spec.neuronlink_bytes_per_s_per_chip == NEURONSWITCH_BYTES_PER_S_PER_CHIP
    assert sum(spec.switch_level_shares) == pytest.approx(1.0)
    assert spec.switch_level_shares[0] == pytest.approx(256 / 704)
    factor = {f.name: f for f in for_generation("trainium3")}["neuronswitch_scale_trn3"]
    covered = (factor.low * NEURONSWITCH_BYTES_PER_S_PER_CHIP, factor.high * NEURONSWITCH_BYTES_PER_S_PER_CHIP)
    assert covered == pytest.approx(NEURONSWITCH_RANGE_BYTES_PER_S)


def test_uncertain_factors_of_trainium3():
    factors = {f.name: f for f in for_generation("trainium3")}
    assert {"neuronswitch_scale_trn3", "neuronlink_efficiency_trn3", "launch_s_trn3", "fp8_peak_scale_trn3",
            "mx_peak_scale_trn3", "hbm_peak_scale_trn3"} <= factors.keys()
    fields = {f.name for f in dataclasses.fields(Calibration)} | {f.name for f in dataclasses.fields(NetworkCalibration)}
    for f in factors.values():
        central = getattr(DEFAULT.network, f.name) if hasattr(DEFAULT.network, f.name) else getattr(DEFAULT, f.name)
        assert f.name in fields and f.low <= central <= f.high and f.low < f.high and len(f.why) > 20, f.name
    assert factors["hbm_peak_scale_trn3"].low * 4.9 == pytest.approx(4.7)                        # T3
    assert factors["fp8_peak_scale_trn3"].low == 0.5                                            # BF16 rate
    # MX over BF16 from 3.75x (chip figures) up to MX over the core page's BF16 (2,517 / (8 x 79) = 3.98x)
    assert factors["mx_peak_scale_trn3"].high * 2517 / 671 == pytest.approx(2517 / (8 * CORE_TFLOPS["bf16"]))
    # borrowed central values: the Trn1 fit's (no Trn3 collective is published)
    assert DEFAULT.network.neuronlink_efficiency_trn3 == DEFAULT.network.neuronlink_efficiency_trn1
    assert DEFAULT.network.launch_s_trn3 == DEFAULT.network.launch_s_trn1
    assert DEFAULT.network.neuronlink_efficiency("trainium3") == DEFAULT.network.neuronlink_efficiency_trn3


def test_calibration_scales_touch_trainium3_only():
    cal = DEFAULT.with_(fp8_peak_scale_trn3=0.5, mx_peak_scale_trn3=1.06, hbm_peak_scale_trn3=0.96)
    assert cal.tensor_peak_scale("trainium3", "fp8") == 0.5 and cal.tensor_peak_scale("trainium3", "mxfp8") == 1.06
    assert cal.tensor_peak_scale("trainium3", "bf16") == 1.0 and cal.hbm_peak_scale("trainium3") == 0.96
    assert cal.tensor_peak_scale("trainium2", "fp8") == 1.0 and cal.hbm_peak_scale("trainium2") == 1.0
