"""The composition root: scenario → cluster → actors → step replay → RunResult → report → run directory.

One function per stage, called in order; nothing else here decides anything. The stages up to the replayed
steps are `ultracluster.emulate.emulate`; its RunResult is complete and frozen (the interval added here, as a copy)
before `build_report` reads it, and `report.write` writes the run directory.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from . import operators as opslib
from .actors.launch import attached, launch_actors
from .actors.metrics import RunMetrics
from .actors.storage_actor import storage_service
from .calibration.factors import Calibration
from .emulate import emulate, in_process
from .replay.result import StepRecord
from .report import Report, build_report, write_run_dir
from .report.rundir import RunDirectory, signals_held
from .report.summary import summarize
from .scenario import Scenario, load_scenario


def run(scenario: Scenario | str | Path, out: str | Path | RunDirectory | None = None, address: str | None = None,
        shards_factory: Callable | None = None, on_step: Callable[[StepRecord], None] | None = None,
        calibration: Calibration | None = None, progress=None, hours: float | None = None,
        price_source: str | None = None) -> Report:
    """Emulate a scenario and return its Report; write the run directory when `out` is given.

    Args:
        scenario: a loaded Scenario, or the path of a scenario YAML.
        out: run directory to write (summary.json, steps.csv, ...), locked for the run, written beside it
            and moved into place whole when the run ends (`ultracluster.report.rundir`); an interrupted run
            leaves steps.csv with its finished steps and no summary.json. An open `RunDirectory` is written
            and left to its owner to close (the CLI adds goodput files to it).
        address: Ray cluster address (None: RAY_ADDRESS, a running Ray, or an embedded local Ray).
        shards_factory: `(scenario, cluster) -> context manager of a shard set`; defaults to Ray actors
            (`ultracluster.shards.local.local_shards` runs them in this process).
        on_step: called with each finished step (progress display).
        calibration: named calibration factors (default: the fitted ones in calibration/calibration.json).
        progress: told when actors start and each step ends (`ultracluster.report.Progress`).
        hours: `run --hours H`: then emulate H hours of training with failures and checkpoints (`with_long_run`),
            whose goodput is the summary's (and goodput.json's, which the caller writes from `Report.long_run`).
        price_source: where the caller took the scenario's `cluster.price_per_hour_usd` from when it set it
            (`step.price.FLAG_PRICE` for `run --price-per-hour`): summary.json's `price_source` then says so.

    Returns:
        The Report. An infeasible layout gives a Report whose summary has feasible False and a reason.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if out is not None and not isinstance(out, RunDirectory):
        with RunDirectory(out) as run_dir:
            return run(scenario, run_dir, address, shards_factory, on_step, calibration, progress, hours,
                       price_source)
    writer = out.steps if out is not None else None

    def step_done(rec: StepRecord) -> None:
        with signals_held():            # the row on disk and the caller's count move together
            if writer:
                writer.append(rec)
            if on_step:
                on_step(rec)

    on_ray = {"storage_factory": storage_service, "metrics_factory": RunMetrics.create}  # when Ray is running
    if shards_factory is not None:
        result = emulate(scenario, shards_factory, step_done, calibration, progress, **on_ray)
    else:
        opslib.library_for(scenario)      # read the library before Ray may move this process into a job's
        with attached(address) as capacity:   # working dir; fold the actors for the cluster that runs them
            result = emulate(scenario, lambda sc, cl: launch_actors(sc, cl, address), step_done, calibration,
                             progress, capacity, **on_ray)
    if price_source is not None:
        result = replace(result, price_source=price_source)
    report = build_report(finish(scenario, result, calibration, hours, intervals=True))
    if out is not None:
        write_run_dir(report, out.path)
    return report


def interval_keys(scenario: Scenario, summary: dict, calibration: Calibration | None = None) -> dict:
    """The 80 % interval of a summary's step time and tokens/s (`ultracluster.uncertainty`, its settings timed on
    this driver by `layouts.setting_times.setting_step_times`: docs/design.md, "Data flow"); NaN when the run is
    infeasible."""
    from .uncertainty import interval, mfu_implausible, nan_keys

    step = summary.get("step_time_s")
    if not summary.get("feasible") or not isinstance(step, float) or not step > 0:
        return nan_keys()
    from .layouts.setting_times import setting_step_times      # the model's fast path (pandas): a feasible run's

    iv = interval(scenario, step, calibration, times=setting_step_times)
    mfu = summary.get("mfu")
    # a predicted MFU above the best any published run of this chip generation reached is not evidence-backed
    implausible = isinstance(mfu, float) and mfu_implausible(mfu, iv.mfu_best)
    return {**iv.summary_keys(summary["tokens_per_step"]), "mfu_implausible": implausible}


def finish(scenario: Scenario, result, calibration: Calibration | None = None, hours: float | None = None,
           intervals: bool = True):
    """An emulated RunResult → the RunResult every command summarizes (a copy: it is frozen): with `intervals` its
    80 % interval (`interval_keys`), with `hours` its long run (`goodput.long_run` over H hours, its unit of work
    the replayed step less its storage stalls, `step.merit.busy_step_s`), whose goodput is then the summary's."""
    if not (intervals or hours is not None):
        return result
    first = summarize(result)
    extra = {}
    if intervals:
        extra["interval"] = interval_keys(scenario, first, calibration)
    if hours is not None and first["feasible"]:
        from .goodput import long_run
        from .step.merit import busy_step_s

        busy = busy_step_s(first["step_time_s"], first["data_stall_s"], first["checkpoint_s"])
        extra["long_run"] = long_run(scenario, busy, hours, storage=result.storage)
    return replace(result, **extra)


def evaluate(scenario: Scenario | str | Path, calibration: Calibration | None = None, intervals: bool = False,
             hours: float | None = None):
    """A scenario emulated in this process, without Ray, files or pandas: its finished RunResult (`finish`), the
    same numbers as `run` gives (the sweep's variants, `predict`: `emulate.in_process`, then `finish`)."""
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    return finish(scenario, in_process(scenario, calibration), calibration, hours, intervals)


def predict(scenario: Scenario | str | Path, calibration: Calibration | None = None,
            intervals: bool = False, hours: float | None = None) -> dict:
    """The summary of a scenario computed in this process, without Ray, files or pandas (for sweeps and
    calibration fits). Same numbers as `run`; with `intervals`, also its 80 % interval keys; with `hours`, its
    goodput the long run's (as `run --hours`)."""
    return summarize(evaluate(scenario, calibration, intervals, hours))
