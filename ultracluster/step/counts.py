"""Counts every stage of the composition reads, each derived here once: microbatches per replica, the data-parallel
degree a layout leaves (`data_parallel`), the `parallelism.sequence_parallel` default, the UltraServer default.
(Tokens per step and ranks: `Scenario.tokens_per_step`, `Scenario.ranks`; ranks per instance, the hardware's:
`cluster.catalog.ranks_per_instance`.)"""
from __future__ import annotations

from ..cluster.catalog import INSTANCES
from ..cluster.placement import replica_ranks


def data_parallel(ranks, tp, cp, pp):
    """The data-parallel degree a layout leaves: ranks // (tp x cp x pp) (ints or arrays; the scenario's checks
    report a model-parallel product that does not divide the ranks): `parallelism.dp` when not given, a planner
    row's dp."""
    return ranks // replica_ranks(tp, cp, pp)


def sequence_parallel_default(tp):
    """`parallelism.sequence_parallel` when neither the scenario nor its stack says: on whenever tp > 1 (ints or
    arrays; NxD's `sequence_parallel_enabled`, docs/scenarios.md "parallelism")."""
    return tp > 1


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
