"""Factors that no published measurement pins down, with the plausible range of each and where it comes from.

A prediction's interval (docs/uncertainty.md) combines the fit's cross-validated residuals, the spread
between Neuron releases, and, for hardware without measured training runs, these factors moved over their
ranges. Every factor is a field of `Calibration` or of its `network` part: its central value is the one the
fitted calibration carries (fitted, or set from a source), `low` and `high` bound what the evidence allows, and
`why` says where the range comes from. `generations` names the chips it applies to (`ChipSpec.name`).

The ranges follow from the fitted files (`calibration.fitted_files`), so they are built from them on first use, once
per process (`factors()`; `FACTORS` is its value, looked up on first access); nothing is registered at import and
nothing here changes after it is built. A fitted file missing or damaged is an error naming it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .calibration.factors import NETWORK_FIELDS, TRN1, TRN2, TRN3, Calibration, NetworkCalibration
from .calibration.fitted_files import NETWORK_FITTED, damaged, load_fitted

__all__ = ["UncertainFactor", "factors", "for_generation"]


@dataclass(frozen=True)
class UncertainFactor:
    """One calibration field whose value the published data do not fix, with its plausible range.

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


@lru_cache(maxsize=1)
def factors() -> tuple[UncertainFactor, ...]:
    """Every uncertain factor, in registration order (the collective ones, then Trainium3's), built from the fitted
    files once per process.

    Raises:
        CalibrationMissing: a fitted file is missing or damaged (the message names it).
    """
    fit = load_fitted()
    with damaged(NETWORK_FITTED):
        return tuple(_network_factors(fit.documents[NETWORK_FITTED.name], fit.network, fit.network_calibrations, fit.calibration)
                     + _trainium3_factors(fit.network, fit.network_calibrations, fit.calibration))


def for_generation(generation: str) -> list[UncertainFactor]:
    """The uncertain factors that apply to a chip generation, in registration order."""
    return [f for f in factors() if generation in f.generations]


def __getattr__(name: str) -> Any:
    """`FACTORS`: `factors()`, built on first access."""
    if name == "FACTORS":
        return factors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------
# Collective factors the published rows do not pin, with their plausible ranges (docs/collectives.md
# "Trn2 from evidence"). Central values are the fitted calibration's; the ranges follow from the fit's own output
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
        low, high = span(getattr(net, name) if name in NETWORK_FIELDS else getattr(default, name), low, high)
        out.append(UncertainFactor(name, low, high, generations, why))
    return out


# ---------------------------------------------------------------------------------------------------------
# Trainium3: no measured training run or collective is published (docs/trainium3.md). Every factor the
# evidence leaves open is registered with the widest range the sources give; central values are the fitted
# calibration's (the Trn1 fit's values where borrowed).

def _trainium3_factors(net: NetworkCalibration, profiles: Mapping[str, Mapping[str, float]],
                       default: Calibration) -> list[UncertainFactor]:
    from .cluster.catalog import NEURONSWITCH_BYTES_PER_S_PER_CHIP as SWITCH, NEURONSWITCH_RANGE_BYTES_PER_S as SPAN

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
        central = getattr(net, name) if name in NETWORK_FIELDS else getattr(default, name)
        out.append(UncertainFactor(name, min(low, central), max(high, central), (TRN3,), why))
    return out
