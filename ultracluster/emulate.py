"""Scenario → RunResult: the stages of a run up to its replayed steps, without the report or files.

scenario → cluster → memory (an infeasible layout stops here) → shards → step replay on the virtual clock.
The shards time the chip (each the stages it runs in replica 0, reported once in its `ShardState`); the step is
composed from what they return, never from a timing of the driver's own (docs/design.md, "Who times what").
The RunResult is complete: the report reads its fields and never calls back into the replay (per-rank
compute tallied from the merged shard steps, per-chunk and per-stage communication, per-stage exposure, the
storage figures from the cluster built here).
`runner.run` adds the report and the run directory; `runner.predict`, the sweeps and the interval's settings of a
scenario whose degraded instances touch replicas unlike (`layouts.setting_times.replayed_step_time`) call it with in-process shards. Below the Ray adapter: whatever runs on Ray (the
shard actors, the file system's actor, the Grafana metrics) is given to it by its caller, so importing it loads
no Ray (tests/test_architecture.py).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

from . import operators as opslib
from .shards.local import local_shards, local_storage
from .shards.worker import PAYLOAD_MAX_BYTES, actor_bytes, payload_elements
from .cluster import Capacity, build_cluster, fold
from .calibration.factors import Calibration
from .step import merit
from .step.price import instance_price as price_per_hour
from .calibration.profile import calibration_for
from .errors import Problem, ScenarioError
from .memory import infeasible_reason, stage_memory
from .replay.degraded import replica_tp_records
from .replay.engine import microbatches, step_comm, replay_steps
from .replay.result import RunLayout, RunResult, StepRecord
from .replay.shard_steps import merge_states
from .replay.records import ComputeTally, comm_records, measured_steps, stage_dp_exposure
from .replay.schedule import stage_programs
from .scenario import Scenario, load_scenario
from .storage import StorageCosts, figures

log = logging.getLogger(__name__)


def emulate(scenario: Scenario | str | Path, shards_factory: Callable, on_step: Callable | None = None,
            calibration: Calibration | None = None, progress=None, capacity: Capacity | None = None,
            storage_factory: Callable = local_storage, metrics_factory: Callable | None = None) -> RunResult:
    """The stages up to the replayed steps: scenario → cluster → memory → shards → replay → RunResult.

    `shards_factory`, `storage_factory`: `(scenario, cluster) -> context manager` of the shard set and of the
    file system (None without storage; default: in this process, `shards.local.local_storage`).
    `capacity`: what the Ray cluster the shard actors run on offers (`cluster.fold`: `auto`, and no more actors
    than it takes, each `shards.worker.actor_bytes`; an explicit setting raised to fit logs one note); None:
    in-process shards, no bound.
    `metrics_factory`: `(scenario name, steps) -> recorder` of the run's metrics (`actors_alive`, `step_done`;
    `actors.metrics.RunMetrics.create` exports them through Ray for Grafana); None: none recorded.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    folding = fold(scenario, capacity, actor_bytes(scenario) if capacity is not None else None)
    if folding.note:
        log.warning(folding.note)
    cluster = build_cluster(scenario, folding.instances_per_actor,
                            calibration_for(scenario, calibration))   # the scenario's profile, else the fit
    library = opslib.library_for(scenario)
    layout, t = cluster.layout, scenario.training
    programs = stage_programs(scenario.parallelism.pp_schedule, layout.pp, microbatches(scenario),
                              layout.virtual_stages)
    memory = stage_memory(scenario, cluster, library, programs)
    reason = infeasible_reason(memory)
    par = scenario.parallelism
    run_layout = RunLayout(tp=layout.tp, cp=layout.cp, pp=layout.pp, dp=layout.dp,
                           virtual_stages=layout.virtual_stages, ep=par.ep, pp_schedule=par.pp_schedule,
                           microbatches=microbatches(scenario))
    storage = figures(scenario, cluster)
    if reason is None and storage is not None and storage.capacity_reason:    # the file system cannot hold them
        reason = storage.capacity_reason
    replayed = {"ray_nodes": 0} if reason is not None else _replayed(
        scenario, cluster, programs, run_layout, shards_factory, on_step, progress, storage_factory, metrics_factory)
    return RunResult(
        scenario=scenario.to_dict(), scenario_name=scenario.name, chips=cluster.chips,
        neuron_cores=cluster.neuron_cores, ranks=cluster.ranks, instances=cluster.instances,
        instance_type=cluster.instance.name, actors=len(cluster.shards),
        model_flops_per_step=opslib.model_flops_per_step(scenario),
        peak_flop_per_s=merit.peak_flop_per_s(cluster.chips, cluster.chip, t.precision),
        tokens_per_step=scenario.tokens_per_step, feasible=reason is None, reason=reason, layout=run_layout,
        memory=memory, shard_instances=[(s.first_instance, s.first_instance + s.instances - 1) for s in cluster.shards],
        price_per_hour_usd=price_per_hour(cluster.instance.name, scenario.cluster.price_per_hour_usd),
        storage=storage, **replayed)


def in_process(scenario: Scenario, calibration: Calibration | None = None) -> RunResult:
    """`emulate` with in-process shards (`shards.local`): no Ray, no files, no callbacks. The one way a scenario is
    replayed in this process: `runner.evaluate` (`predict`, the sweep's variants), the calibration fit's replays
    (`calibrate.command.replay_rows`) and the interval's settings a layout row cannot time
    (`layouts.setting_times.replayed_step_time`)."""
    return emulate(scenario, local_shards, None, calibration)


def _replayed(scenario: Scenario, cluster, programs: list, run_layout: RunLayout, shards_factory: Callable,
              on_step: Callable | None, progress, storage_factory: Callable, metrics_factory: Callable | None) -> dict:
    """The replay of a feasible layout → the `RunResult` fields it fills (`ray_nodes`, the hardware FLOPs and the
    residual's share, the communication records, the steps and slices, the per-rank and per-stage tallies)."""
    layout, t, m = cluster.layout, scenario.training, run_layout.microbatches
    _check_payload(scenario, cluster)
    tally = ComputeTally(layout, m, t.warmup_steps)   # per-rank compute
    if progress:
        progress.starting(len(cluster.shards), t.warmup_steps + t.steps, t.warmup_steps)
    with shards_factory(scenario, cluster) as shards, storage_factory(scenario, cluster) as fs:
        # what the shards say once (their instances, the times of the stages they run, their slow ranks),
        # merged once (the driver times no chunk): the collectives are timed on the degraded parts and the
        # hiding matmuls they report
        state = merge_states(shards.states(), layout.pp, layout.pp * layout.virtual_stages, cluster.instances)
        cluster = replace(cluster, degraded=state.degraded)
        chunks = state.times
        comm = step_comm(scenario, cluster, chunks.tp_hide_bwd_s)
        chunk_comm, stage_comm = comm_records(comm, layout.pp, m, cluster.stage_layers(scenario.model.layers))
        out = {"ray_nodes": shards.nodes,
               # chunk c runs on the tp x cp x dp = ranks / pp ranks of its stage, once per microbatch
               "hardware_flops_per_step": float(chunks.flops_per_microbatch.sum() * m * cluster.ranks / layout.pp),
               "residual_fraction": chunks.residual_fraction(), "collectives": comm.records,
               "chunk_comm": chunk_comm, "stage_comm": stage_comm,
               "replica_tp_comm_s": replica_tp_records(comm, layout.pp, m)}
        metrics = metrics_factory(scenario.name, t.warmup_steps + t.steps) if metrics_factory else None
        if metrics:
            metrics.actors_alive(len(cluster.shards))
        if progress:
            progress.started(shards.nodes)
        try:
            steps, slices = replay_steps(scenario, cluster, shards, state, comm, programs,
                                         _each(metrics and metrics.step_done, progress and progress.step_done,
                                               on_step),
                                         step_costs=StorageCosts(scenario, cluster, fs) if fs else None, tally=tally)
        finally:
            if metrics:
                metrics.actors_alive(0)
    out["stage_compute_s"], out["slow_rank_compute_s"] = tally.result()
    out["steps"], out["slices"] = steps, slices
    if steps:
        out["stage_dp_exposed_s"] = stage_dp_exposure(slices, stage_comm, [s.step for s in measured_steps(steps)],
                                                      layout.pp)
    return out


def _each(*callbacks: Callable | None) -> Callable[[StepRecord], None]:
    """One step callback that calls every given one in order."""
    todo = [c for c in callbacks if c]

    def call(rec: StepRecord) -> None:
        for c in todo:
            c(rec)
    return call


def _check_payload(scenario: Scenario, cluster) -> None:
    """A payload this machine cannot carry is bad input, named by its field."""
    n = payload_elements(scenario, cluster)
    if n * 8 > PAYLOAD_MAX_BYTES:
        raise ScenarioError([Problem("emulation.payload_scale", scenario.emulation.payload_scale,
                                     f"a scale that keeps the payload per actor under 1 GiB "
                                     f"(this one moves {n * 8 / 2**30:.1f} GiB per actor)")])
