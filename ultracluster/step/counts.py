"""Counts every stage of the composition reads: microbatches per replica, the UltraServer default. (Tokens per
step and ranks: `Scenario.tokens_per_step`, `Scenario.ranks`, `cluster.catalog.ranks_per_instance`.)"""
from __future__ import annotations

from ..cluster.catalog import INSTANCES


def microbatches(global_batch, dp, micro_batch):
    """Microbatches each data-parallel replica runs per step: global_batch // (dp x micro_batch) (ints or arrays)."""
    return global_batch // (dp * micro_batch)


def scenario_microbatches(scenario) -> int:
    """`microbatches` of a scenario's training and parallelism."""
    t, p = scenario.training, scenario.parallelism
    return microbatches(t.global_batch, p.dp, t.micro_batch)


def ultraserver_default(instance_type: str) -> bool:
    """`cluster.ultraserver` when the scenario does not say: the catalog's `ultraserver_default` of the type
    (trn2u and the Trn3 Gen2 types run in their UltraServer)."""
    return bool(INSTANCES[instance_type].ultraserver_default)
