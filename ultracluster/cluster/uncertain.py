"""Factors that no published measurement pins down, with the plausible range of each.

A prediction's interval (docs/uncertainty.md) combines the fit's cross-validated residuals, the spread
between Neuron releases, and, for hardware without measured training runs, these factors moved over their
ranges. Every factor is a field of `Calibration` or of its `network` part: its central value is the one the
calibration carries (fitted, or set from a source), `low` and `high` bound what the evidence allows, and
`why` says where the range comes from. `generations` names the chips it applies to (`ChipSpec.name`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UncertainFactor:
    """One calibration field whose value the published data do not fix.

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


# Registered by the modules that own the assumption; read by `for_generation`.
FACTORS: list[UncertainFactor] = []


def for_generation(generation: str) -> list[UncertainFactor]:
    """The uncertain factors that apply to a chip generation, in registration order."""
    return [f for f in FACTORS if generation in f.generations]
