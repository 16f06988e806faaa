"""Factors that no published measurement pins down, with the plausible range of each.

A prediction's interval (docs/uncertainty.md) combines the fit's cross-validated residuals, the spread
between Neuron releases, and, for hardware without measured training runs, these factors moved over their
ranges. Every factor is a field of `Calibration` or of its `network` part: its central value is the one the
calibration carries (fitted, or set from a source), `low` and `high` bound what the evidence allows, and
`why` says where the range comes from. `generations` names the chips it applies to (`ChipSpec.name`).

The ranges follow from the fitted files, so they are built with them, on first use, by
`cluster.calibration.load_fitted` (which owns the entries and their sources); nothing is registered at import
and nothing here changes after it is read. `FACTORS` is `factors()`, looked up on first access.
"""
from __future__ import annotations

from typing import Any

from .calibration import UncertainFactor, load_fitted

__all__ = ["UncertainFactor", "factors", "for_generation"]


def factors() -> tuple[UncertainFactor, ...]:
    """Every uncertain factor, in registration order (read with the fitted files, once per process)."""
    return load_fitted().factors


def for_generation(generation: str) -> list[UncertainFactor]:
    """The uncertain factors that apply to a chip generation, in registration order."""
    return [f for f in factors() if generation in f.generations]


def __getattr__(name: str) -> Any:
    if name == "FACTORS":
        return factors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
