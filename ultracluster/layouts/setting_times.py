"""Time these settings: one step of a scenario, or of a plan's layout rows, under many calibrations at once.

The 80 % interval (`ultracluster.uncertainty`, pure arithmetic) asks for the step time at settings of the
uncertain factors: each factor's grid, the draws beside the band's ends, the published Trainium2 run it weights
the draws by. It is given these functions (`interval(..., times=setting_step_times)`), so the model is entered
here, not from the interval: every setting is a row of one table timed by the fast path (`steps.evaluate`, the
replay's model over a row axis, each row with its own calibration: `Evaluator(calibrations=...)`, column `cal`), in
this process, no Ray, no files. It runs on the driver, after the replay: the settings are a few tens of
whole-model evaluations that the shard actors, which hold one calibration's chip model of their own stages,
could not give without a replay per setting; the fast path times them all in one evaluation (docs/design.md,
"Data flow"). A scenario with degraded instances is timed so too, its comm the slowest replica's
(`replay.degraded.slowest_replica_comm`, the replay's rule); only where the degraded instances touch replicas
unlike (`touched_alike`) is each setting replayed in process instead (`replayed_step_time`).
"""
from __future__ import annotations

import numpy as np

from ..calibration.factors import Calibration
from .columns import Columns, objects
from .steps import evaluate
from .evaluator import Evaluator
from .space import own_row


def one_step(scenario):
    """The scenario the interval times: one step, storage off (its stalls are not a hardware uncertainty of the
    step); copied, not re-loaded, so nothing is read again from files (a job's directory may be gone)."""
    return scenario.model_copy(update={"training": scenario.training.model_copy(update={"steps": 1, "warmup_steps": 0}),
                                       "storage": None, "checkpoint": None})


def setting_step_times(scenario, calibrations: list[Calibration]) -> np.ndarray:
    """Step time of one step of `scenario` under each calibration, in one vectorized evaluation.

    The settings are rows of one table timed by the planner's fast path (`layout_step_times`: each distinct
    per-rank shape and collective timed once, the pipelines of all rows run at once). Without jitter and
    stragglers it gives the replay's step exactly (tests/chip/test_uncertainty.py); with them, the stages' mean
    speeds, which the interval only uses as ratios. A scenario with degraded instances is timed so too, its comm
    the slowest replica's (`degraded_parts_of`), and replayed once per setting only where its degraded replicas
    are touched unlike. Kept by content for the last 32 one-step scenarios.
    """
    one = one_step(scenario)
    key = (one.model_copy(update={"name": "-", "faults": one.faults and one.faults.model_copy(update=dict(   # not read
        instance_mtbf_hours=None, detect_minutes=0.0, restart_minutes=0.0))}).model_dump_json(), tuple(calibrations))
    if key not in _STEP_TIMES:    # (a sweep's variants that differ in storage or faults time their interval once)
        _STEP_TIMES.pop(next(iter(_STEP_TIMES))) if len(_STEP_TIMES) >= 32 else None
        kept = _EVALUATORS.pop(key[0], None)       # (only a scenario the fast path times has one)
        parts = degraded_parts_of(one) if kept is None else kept[0].degraded
        if parts is None:       # degraded replicas touched unlike: each setting replayed
            _STEP_TIMES[key] = np.array([replayed_step_time(one, cal) for cal in calibrations])
        else:           # one Evaluator per scenario, its settings added call by call (an interval makes two)
            pr, row = kept or (Evaluator(one, calibrations=tuple(calibrations), shared_last_sends=True,
                                         degraded=parts), own_row(one))
            _EVALUATORS[key[0]] = pr, row
            if len(_EVALUATORS) > 8:
                _EVALUATORS.pop(next(iter(_EVALUATORS)))
            out = evaluate(pr, _settings_table(row, pr.add_calibrations(calibrations)), reasons=False)   # (no reason read)
            _STEP_TIMES[key] = np.where(out["feasible"].to_numpy(), out["step_time_s"].to_numpy(dtype=float), np.nan)
    return _STEP_TIMES[key].copy()


_STEP_TIMES: dict[tuple, np.ndarray] = {}     # `setting_step_times` of the process's last 32 one-step scenarios
_EVALUATORS: dict[str, tuple[Evaluator, dict]] = {}   # and the Evaluators of its last 8 with their layout row
                                                      # (`space.own_row`), by content (their memo kept)


def _settings_table(row: dict, which: np.ndarray) -> Columns:
    """The table the fast path times: the layout `row` (`space.own_row`) once per setting, column `cal` (`which`)
    picking each row's. Its columns' arrays (`columns.Columns`), not a pandas DataFrame: building one and reading
    its columns cost more than much of the evaluation of an interval's few tens of settings (the same values
    either way: text as Python strings, numbers as `np.full` makes them). Every column but `cal` holds the row's one
    value (`Columns.one_value`; a missing value is not one)."""
    n = which.size
    one = frozenset(k for k, v in row.items() if v is not None and not (isinstance(v, float) and v != v))
    return Columns({**{k: objects(v, n) if isinstance(v, str) else np.full(n, v) for k, v in row.items()},
                    "cal": which}, one_value=one - {"cal"})


def degraded_parts_of(one) -> tuple | None:
    """The degraded parts of a one-step scenario (`Cluster.degraded`; () without them) when the fast path times it
    as the replay does (every degraded replica touched alike: `replay.degraded.touched_alike`), else None."""
    if one.faults is None or not one.faults.degraded:
        return ()
    from ..cluster import build_cluster
    from ..replay.degraded import degraded_groups, touched_alike

    cl = build_cluster(one, 1)
    return cl.degraded if touched_alike([degraded_groups(cl, p.instances) for p in cl.degraded]) else None


def layout_step_times(one, rows, calibrations: list[Calibration], which: np.ndarray, evaluators: dict | None = None,
                      shared_last_sends: bool = True, degraded: tuple = ()) -> np.ndarray:
    """Step times [n, k] of one step of each layout row of `one` (a `one_step` scenario; `rows` a table of n
    layouts) under the calibrations `which[i, j]` indexes, in one evaluation of the fast path (NaN: does not fit).
    `evaluators`: Evaluators kept across calls, by calibrations. `shared_last_sends`: the last gradient sends share
    links as in the replay (exact); a plan's many layouts time them alone, as its search does (docs/plan.md)."""
    n, k = which.shape
    evaluators = {} if evaluators is None else evaluators
    key = (tuple(calibrations), shared_last_sends, tuple(degraded))
    pr = evaluators.get(key) or evaluators.setdefault(key, Evaluator(one, calibrations=key[0], shared_last_sends=key[1],
                                                                     degraded=key[2]))
    table = rows.reset_index(drop=True).iloc[np.repeat(np.arange(n), k)].reset_index(drop=True)
    table["cal"] = which.reshape(-1)
    out = evaluate(pr, table)
    return np.where(out["feasible"].to_numpy(), out["step_time_s"].to_numpy(dtype=float), np.nan).reshape(n, k)


def replayed_step_time(one, cal: Calibration) -> float:
    """One replayed step of `one` (a `one_step` scenario; `emulate` with in-process shards): no Ray, no files."""
    from ..emulate import in_process

    res = in_process(one, cal)
    return float(res.steps[-1].step_time_s) if res.feasible and res.steps else float("nan")
