"""Shared fixtures: one local Ray session for the whole test run, paths to the calibration data and scenarios/."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CALIBRATION_DATA = REPO / "data" / "calibration"
SCENARIOS = REPO / "scenarios"


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray (2 CPUs, no dashboard) started once and shared by every test that needs Ray."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def calibration_dir() -> Path:
    """The published measurements the fits use (the repository's own copy, with sources)."""
    return CALIBRATION_DATA


@pytest.fixture(scope="session")
def scenarios_dir() -> Path:
    return SCENARIOS


@pytest.fixture(scope="session")
def load_script():
    """A function loading one of the repository's scripts/ (calibrate, golden, doc_tables) as a module."""
    import importlib.util

    loaded = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            loaded[name] = mod
        return loaded[name]
    return load
