"""Scenario stage: scenario YAML (+ ``--set`` overrides) -> validated, resolved, frozen ``Scenario``."""

from .load import load_scenario
from .presets import PRESETS, preset_names
from .schema import (
    CheckpointSpec,
    ClusterSpec,
    EmulationSpec,
    FaultsSpec,
    ModelSpec,
    MoESpec,
    NetworkSpec,
    ParallelismSpec,
    Scenario,
    StorageSpec,
    StragglersSpec,
    SweepSpec,
    TrainingSpec,
)

__all__ = [
    "PRESETS",
    "CheckpointSpec",
    "ClusterSpec",
    "EmulationSpec",
    "FaultsSpec",
    "ModelSpec",
    "MoESpec",
    "NetworkSpec",
    "ParallelismSpec",
    "Scenario",
    "StorageSpec",
    "StragglersSpec",
    "SweepSpec",
    "TrainingSpec",
    "load_scenario",
    "preset_names",
]
