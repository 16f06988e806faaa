"""Shared fixtures: one local Ray session for the whole test run, paths to the calibration data and scenarios/."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]

# One Hypothesis behaviour on every machine. Left alone, Hypothesis derandomizes only where CI is set (its "ci"
# profile) and elsewhere draws new examples each run and replays every failure it ever found from .hypothesis/,
# so a property could pass in CI, fail one local run in ten, then fail every local run in that checkout. Here
# every run, local or CI, draws the same examples (derived from each test: a fixed seed) with no example
# database: a test passes or fails the same way everywhere, and a failing example found locally is a failing
# test in CI too. `--hypothesis-profile=explore` searches at random with more examples; a failure it finds
# prints its reproduction and goes into the test as an @example, where every run then sees it.
# No deadline and no too-slow health check either: both depend on how loaded the machine is.
settings.register_profile("ultracluster", parent=settings.get_profile("default"), derandomize=True, database=None,
                          print_blob=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", parent=settings.get_profile("ultracluster"), derandomize=False, max_examples=500)
settings.load_profile("ultracluster")
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
