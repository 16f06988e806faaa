"""Hardware catalog -> the published numbers of docs/sources.md, each with a source."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from ultracluster.cluster.catalog import (
    INSTANCES,
    TRAINIUM,
    TRAINIUM2,
    TRAINIUM3,
    ULTRASERVER,
    ULTRASERVERS,
    ChipSpec,
    InstanceSpec,
    UltraServerSpec,
    instance,
    ranks_per_instance,
)

GiB = 2**30
MiB = 2**20


def test_trainium_chip() -> None:
    assert (TRAINIUM.name, TRAINIUM.core_version, TRAINIUM.physical_cores) == ("trainium", "NeuronCore-v2", 2)
    assert TRAINIUM.dense_flop_per_s == {"bf16": 190e12, "fp8": 190e12, "fp32": 47.5e12}
    assert TRAINIUM.tensor_flop_per_s_per_core == {"bf16": 95e12, "fp8": 95e12, "fp32": 23.75e12}
    assert (TRAINIUM.vector_flop_per_s_per_core, TRAINIUM.scalar_flop_per_s_per_core) == (2.3e12, 2.9e12)
    assert TRAINIUM.gpsimd_hz == 1.4e9
    assert (TRAINIUM.hbm_bytes, TRAINIUM.hbm_bytes_per_s, TRAINIUM.dma_bytes_per_s) == (32 * GiB, 820 * GiB, 1e12)
    assert (TRAINIUM.sbuf_bytes_per_core, TRAINIUM.psum_bytes_per_core, TRAINIUM.cc_cores) == (24 * MiB, 2 * MiB, 6)


def test_trainium2_chip() -> None:
    assert (TRAINIUM2.name, TRAINIUM2.core_version, TRAINIUM2.physical_cores) == ("trainium2", "NeuronCore-v3", 8)
    assert TRAINIUM2.dense_flop_per_s == {"bf16": 667e12, "fp8": 1299e12, "fp32": 181e12}
    assert TRAINIUM2.tensor_flop_per_s_per_core["bf16"] == pytest.approx(83.375e12)
    assert (TRAINIUM2.vector_flop_per_s_per_core, TRAINIUM2.scalar_flop_per_s_per_core) == (1.0e12, 1.2e12)
    assert TRAINIUM2.gpsimd_hz == 1.2e9
    assert (TRAINIUM2.hbm_bytes, TRAINIUM2.hbm_bytes_per_s, TRAINIUM2.dma_bytes_per_s) == (96 * GiB, 2.9e12, 3.5e12)
    assert (TRAINIUM2.sbuf_bytes_per_core, TRAINIUM2.psum_bytes_per_core, TRAINIUM2.cc_cores) == (28 * MiB, 2 * MiB, 16)


@pytest.mark.parametrize("chip", [TRAINIUM, TRAINIUM2])
def test_per_core_tensor_peaks_add_up_to_the_chip(chip: ChipSpec) -> None:
    for precision, peak in chip.dense_flop_per_s.items():
        assert chip.tensor_flop_per_s_per_core[precision] * chip.physical_cores == pytest.approx(peak)


@pytest.mark.parametrize(
    ("name", "chip", "cores", "lnc", "allowed", "neuronlink", "efa_gbit", "nics", "ultraserver", "price"),
    [
        ("trn1.32xlarge", TRAINIUM, 32, 1, (1,), 384 * GiB, 800, 8, False, 21.50),
        ("trn1n.32xlarge", TRAINIUM, 32, 1, (1,), 768 * GiB, 1600, 16, False, None),
        ("trn2.48xlarge", TRAINIUM2, 128, 2, (1, 2), 1024e9, 3200, 16, False, None),
        ("trn2u.48xlarge", TRAINIUM2, 128, 2, (1, 2), 1024e9, 3200, 16, True, None),
    ],
)
def test_instances(name, chip, cores, lnc, allowed, neuronlink, efa_gbit, nics, ultraserver, price) -> None:
    spec = INSTANCES[name]
    assert spec is instance(name)
    assert (spec.name, spec.chip, spec.chips, spec.neuron_cores, spec.torus) == (name, chip, 16, cores, (4, 4))
    assert (spec.default_lnc, spec.allowed_lnc) == (lnc, allowed)
    assert spec.neuronlink_bytes_per_s_per_chip == neuronlink and spec.neuronlink_hop_latency_s == 1.5e-6
    assert (spec.efa_bytes_per_s * 8, spec.efa_nics, spec.efa_latency_s) == (efa_gbit * 1e9, nics, 15e-6)
    assert (spec.ultraserver_capable, spec.price_per_hour_usd) == (ultraserver, price)


def test_instance_level_totals_match_the_reference() -> None:
    trn1, trn2 = INSTANCES["trn1.32xlarge"], INSTANCES["trn2.48xlarge"]
    assert trn1.chips * trn1.chip.dense_flop_per_s["bf16"] == 3040e12
    assert trn1.chips * trn1.chip.hbm_bytes == 512 * GiB
    assert trn2.chips * trn2.chip.dense_flop_per_s["bf16"] == pytest.approx(10.7e15, rel=0.01)
    assert trn2.chips * trn2.chip.hbm_bytes == 1536 * GiB


def test_ultraserver() -> None:
    assert ULTRASERVER.name == "trn2-ultraserver" and ULTRASERVER.instance is INSTANCES["trn2u.48xlarge"]
    assert (ULTRASERVER.instances, ULTRASERVER.z_link_bytes_per_s_per_chip, ULTRASERVER.z_hop_latency_s) == (
        4, 256e9, 2e-6,
    )
    assert "not published" in ULTRASERVER.sources["z_hop_latency_s"]


@pytest.mark.parametrize(("name", "lnc", "ranks"), [
    ("trn1.32xlarge", 1, 32), ("trn1n.32xlarge", 1, 32), ("trn2.48xlarge", 2, 64), ("trn2.48xlarge", 1, 128),
    ("trn2u.48xlarge", 2, 64), ("trn2u.48xlarge", 1, 128),
])
def test_ranks_per_instance(name: str, lnc: int, ranks: int) -> None:
    assert ranks_per_instance(INSTANCES[name], lnc) == ranks


def test_lookup_errors_list_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge, trn2u.48xlarge"):
        instance("p5.48xlarge")
    with pytest.raises(ValueError, match=r"allowed: \(1,\)"):
        ranks_per_instance(INSTANCES["trn1.32xlarge"], 2)


UNSOURCED = {"name", "chip", "instance", "sources"}


@pytest.mark.parametrize("spec", [TRAINIUM, TRAINIUM2, TRAINIUM3, *INSTANCES.values(), *ULTRASERVERS.values()],
                         ids=lambda spec: spec.name)
def test_every_field_has_a_source(spec: ChipSpec | InstanceSpec | UltraServerSpec) -> None:
    """Every field but the name, the nested spec and the sources themselves: numbers, shapes, flags, price."""
    fields = {f.name for f in dataclasses.fields(spec)} - UNSOURCED
    assert fields <= spec.sources.keys(), fields - spec.sources.keys()
    for key, text in spec.sources.items():
        assert key in fields and len(text) > 20, key
        assert text.startswith(("H", "T")) or "not published" in text or "not found" in text, text


def test_specs_are_frozen_hashable_and_picklable() -> None:
    spec = INSTANCES["trn2u.48xlarge"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.chips = 8
    assert hash(spec) == hash(pickle.loads(pickle.dumps(spec)))
    assert pickle.loads(pickle.dumps(ULTRASERVER)) == ULTRASERVER
