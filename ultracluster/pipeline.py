"""The composition root: scenario → cluster → actors → step replay → report → run directory.

One function per stage, called in order; nothing else here decides anything.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from . import chip
from . import operators as opslib
from .actors.launch import attached, launch_actors, resolve_instances_per_actor
from .actors.metrics import RunMetrics
from .actors.shard import PAYLOAD_MAX_BYTES, payload_elements
from .actors.storage_actor import storage_service
from .cluster import build_cluster
from .cluster.calibration import DEFAULT as DEFAULT_CALIBRATION, Calibration
from .errors import Problem, ScenarioError
from .memory import infeasible_reason, stage_memory
from .replay.engine import microbatches, plan_comm, replay_steps
from .replay.events import RunResult, StepRecord
from .replay.schedule import stage_programs
from .report import Report, build_report, write_run_dir
from .report.ranks import RankTally, comm_records
from .report.rundir import RunDirectory
from .scenario import Scenario, load_scenario
from .storage import StorageCosts, summary_keys


def run(scenario: Scenario | str | Path, out: str | Path | RunDirectory | None = None, address: str | None = None,
        shards_factory: Callable | None = None, on_step: Callable[[StepRecord], None] | None = None,
        calibration: Calibration | None = None, progress=None) -> Report:
    """Emulate a scenario and return its Report; write the run directory when `out` is given.

    Args:
        scenario: a loaded Scenario, or the path of a scenario YAML.
        out: run directory to write (summary.json, steps.csv, ...), locked for the run, written beside it
            and moved into place whole when the run ends (`ultracluster.report.rundir`); an interrupted run
            leaves steps.csv with its finished steps and no summary.json. An open `RunDirectory` is written
            and left to its owner to close (the CLI adds goodput files to it).
        address: Ray cluster address (None: RAY_ADDRESS, a running Ray, or an embedded local Ray).
        shards_factory: `(scenario, cluster) -> context manager of a shard set`; defaults to Ray actors
            (`ultracluster.actors.local.local_shards` runs them in this process).
        on_step: called with each finished step (progress display).
        calibration: named calibration factors (default: the fitted ones in cluster/calibration.json).
        progress: told when actors start and each step ends (`ultracluster.report.Progress`).

    Returns:
        The Report. An infeasible layout gives a Report whose summary has feasible False and a reason.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if out is not None and not isinstance(out, RunDirectory):
        with RunDirectory(out) as run_dir:
            return run(scenario, run_dir, address, shards_factory, on_step, calibration, progress)
    writer = out.steps if out is not None else None

    def step_done(rec: StepRecord) -> None:
        if writer:
            writer.append(rec)
        if on_step:
            on_step(rec)

    if shards_factory is not None:
        result = replay(scenario, shards_factory, step_done, calibration, progress)
    else:
        opslib.library_for(scenario)      # read the library before Ray may move this process into a job's
        with attached(address) as cpus:   # working dir; size `auto` folding for the cluster that runs the actors
            result = replay(scenario, lambda sc, cl: launch_actors(sc, cl, address), step_done, calibration,
                            progress, cpus)
    report = build_report(result)
    report.summary.update(summary_keys(scenario))   # storage: checkpoint size, write and restore times
    report.summary.update(interval_keys(scenario, report.summary, calibration))
    if out is not None:
        write_run_dir(report, out.path)
    return report


def interval_keys(scenario: Scenario, summary: dict, calibration: Calibration | None = None) -> dict:
    """The 80 % interval of a summary's step time and tokens/s (`ultracluster.uncertainty`); NaN when the run
    is infeasible."""
    from .uncertainty import interval, nan_keys

    step = summary.get("step_time_s")
    if not summary.get("feasible") or not isinstance(step, float) or not step > 0:
        return nan_keys()
    return interval(scenario, step, calibration).summary_keys(summary["tokens_per_step"])


def predict(scenario: Scenario | str | Path, calibration: Calibration | None = None,
            intervals: bool = False) -> dict:
    """The summary of a scenario computed in this process, without Ray, files or pandas (for sweeps and
    calibration fits). Same numbers as `run`; with `intervals`, also its 80 % interval keys."""
    from .actors.local import local_shards
    from .report.summary import summarize

    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    out = {**summarize(replay(scenario, local_shards, None, calibration)), **summary_keys(scenario)}
    if intervals:
        out.update(interval_keys(scenario, out, calibration))
    return out


def replay(scenario: Scenario | str | Path, shards_factory: Callable, on_step: Callable | None = None,
           calibration: Calibration | None = None, progress=None, cpus: int | None = None) -> RunResult:
    """The stages up to the replayed steps: scenario → cluster → memory → shards → replay → RunResult.

    `cpus`: CPUs of the Ray cluster the shards run on, for `instances_per_actor: auto` (None: this machine).
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    cluster = build_cluster(scenario, resolve_instances_per_actor(scenario, cpus),
                            calibration or DEFAULT_CALIBRATION)
    library = opslib.library_for(scenario)
    layout, t = cluster.layout, scenario.training
    programs = stage_programs(scenario.parallelism.pp_schedule, layout.pp, microbatches(scenario),
                              layout.virtual_stages)
    memory = stage_memory(scenario, cluster, library, programs)
    reason = infeasible_reason(memory)
    result = RunResult(
        scenario=scenario.to_dict(), scenario_name=scenario.name, chips=cluster.chips,
        neuron_cores=cluster.neuron_cores, ranks=cluster.ranks, instances=cluster.instances,
        instance_type=cluster.instance.name, actors=len(cluster.shards), ray_nodes=0,
        model_flops_per_step=opslib.model_flops_per_step(scenario),
        peak_flop_per_s=cluster.chips * cluster.chip.dense_flop_per_s[t.precision],
        tokens_per_step=t.global_batch * t.seq_len, feasible=reason is None, reason=reason, memory=memory,
        shard_instances=[(s.first_instance, s.first_instance + s.instances - 1) for s in cluster.shards],
        price_per_hour_usd=cluster.instance.price_per_hour_usd)
    if reason is None:
        _check_payload(scenario, cluster)
        per_rank = chip.chunk_times(scenario, cluster, library).flops_per_microbatch
        # chunk c runs on the tp x cp x dp = ranks / pp ranks of its stage, once per microbatch
        result.hardware_flops_per_step = float(per_rank.sum() * microbatches(scenario) * cluster.ranks / layout.pp)
        comm = plan_comm(scenario, cluster)
        result.collectives = comm.records
        result.microbatches = microbatches(scenario)
        result.chunk_comm, result.stage_comm = comm_records(comm, layout.pp, result.microbatches,
                                                            cluster.stage_layers(scenario.model.layers))
        tally = RankTally(layout, result.microbatches, t.warmup_steps)   # per-rank compute, for the report
        if progress:
            progress.starting(len(cluster.shards), t.warmup_steps + t.steps, t.warmup_steps)
        with shards_factory(scenario, cluster) as shards, storage_service(scenario, cluster) as fs:
            result.ray_nodes = shards.nodes
            metrics = RunMetrics.create(scenario.name, t.warmup_steps + t.steps)   # Ray metrics for Grafana
            metrics.actors_alive(len(cluster.shards))
            if progress:
                progress.started(shards.nodes)
            try:
                result.steps, result.slices = replay_steps(scenario, cluster, tally.watch(shards), comm, programs,
                                                           _each(metrics.step_done, progress and progress.step_done,
                                                                 on_step),
                                                           step_costs=StorageCosts(scenario, cluster, fs) if fs else None)
            finally:
                metrics.actors_alive(0)
        result.stage_compute_s, result.slow_rank_compute_s = tally.result()
    return result


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
