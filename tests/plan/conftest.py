"""Fixtures of the planner tests: the small scenarios of plan_scenarios.py, loaded."""
import pytest

from plan_scenarios import DENSE, variant
from ultracluster import load_scenario


@pytest.fixture(scope="session")
def dense():
    return load_scenario(DENSE)


@pytest.fixture(scope="session")
def dense_trn2():
    return load_scenario(variant(name="plan-small-trn2", cluster={"instance": "trn2.48xlarge", "instances": 1}))


@pytest.fixture(scope="session")
def moe():
    return load_scenario(variant(name="plan-moe", model={"moe": {"experts": 4, "top_k": 2}}))
