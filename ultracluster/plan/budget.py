"""A plan's days and dollars: the training budget (`--tokens`, else the scenario's `training.budget_tokens` or
`budget_steps`) at each layout's step time, with the goodput the scenario's failures and checkpoints leave, computed
by `step.merit.budget_figures` (the one path of `run`'s summary.json and the sweep's rows).

The fast path has no storage model (docs/plan.md, "Where it is exact"): a checkpoint's block and a restore are the
scenario's own layout's on its own cluster (`storage.estimates`), and a layout's step is its fast-path step; a
replayed layout's run gives its own days and dollars in plan.json's `replayed`. Goodput is computed per layout that
can rank (it depends on the step: a checkpoint every N steps, failures per instance), the others keep NaN.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..step.merit import CLOSED_FORM, budget_bands, budget_figures
from ..step.price import NO_PRICE_HINT
from ..scenario import Scenario
from ..storage.fsx import storage_usd_per_hour


def budget_of(base: Scenario, tokens: float | None) -> tuple[float | None, int | None, str | None]:
    """(tokens, steps, where the budget comes from): `--tokens`, else the scenario's `training.budget_tokens`,
    else its `training.budget_steps`; (None, None, None) without one."""
    t = base.training
    if tokens is not None:
        return float(tokens), None, "--tokens"
    if getattr(t, "budget_tokens", None) is not None:
        return float(t.budget_tokens), None, "training.budget_tokens"
    if getattr(t, "budget_steps", None) is not None:
        return None, int(t.budget_steps), "training.budget_steps"
    return None, None, None


def _failures(base: Scenario, calibration) -> tuple[int, float, float, float | None, str]:
    """(checkpoint every N steps, seconds a checkpoint blocks, seconds a recovery takes, instance MTBF in hours or
    None, the words for them) of the scenario, its storage figures from its own layout on its own cluster."""
    from ..cluster import build_cluster
    from ..storage.estimates import figures

    ck, f = base.checkpoint, base.faults
    every = int(ck.every_steps) if ck is not None else 0
    fig = figures(base, build_cluster(base, base.cluster.instances, calibration)) if base.storage is not None else None
    block = float(fig.checkpoint_block_s or 0.0) if fig is not None and every else 0.0
    restore = float(fig.restore_s or 0.0) if fig is not None else 0.0
    mtbf = f.instance_mtbf_hours if f is not None else None
    recovery = (60.0 * (f.detect_minutes + f.restart_minutes) if f is not None else 0.0) + restore
    words = ("closed form (Daly 2006): " + (f"checkpoints every {every} steps blocking {block:.3g} s (the scenario's "
                                             f"own layout's)" if every else "no checkpoints")
             + (f", instance MTBF {mtbf:g} h, {recovery:.0f} s per recovery" if mtbf else ", no failures")
             + "; no data stalls (not in the fast path)")
    return every, block, recovery, mtbf, words


def _async_write(base: Scenario, calibration) -> tuple[float, float]:
    """The scenario's own layout's async checkpoint write, alone on an idle file system and back to back at the
    baseline write rate (seconds; 0 for sync or without storage): a row whose checkpoint period is shorter waits for
    it (back-pressure, `goodput.expected_goodput`; `storage.estimates.back_to_back_write_s`, as `run` prices it)."""
    if base.storage is None or base.checkpoint is None or base.checkpoint.mode != "async":
        return 0.0, 0.0
    from ..cluster import build_cluster
    from ..storage.estimates import back_to_back_write_s, figures

    fig = figures(base, build_cluster(base, base.cluster.instances, calibration))
    # alone on an idle file system, and back to back (any period shorter than the write)
    return float(fig.checkpoint_write_s or 0.0), back_to_back_write_s(fig, 0.0)


def budget_columns(full: pd.DataFrame, base: Scenario, tokens: float | None, calibration=None) -> dict:
    """`goodput`, `time_to_train_days` and `total_cost_usd` of every row that can rank (in place; NaN elsewhere, and
    the cost NaN where the instance type has no price), and plan.json's `budget`: the tokens and steps, where the
    budget comes from, how the goodput is computed; None without a budget."""
    n = len(full)
    step = full["step_time_s"].to_numpy(float)
    instances = full["instances"].to_numpy(float)
    ok = full["feasible"].to_numpy(dtype=bool) & np.isfinite(step) & (step > 0)
    if "same_as" in full.columns:
        ok &= full["same_as"].to_numpy() == ""
    every, block, recovery, mtbf, words = _failures(base, calibration)
    write = _async_write(base, calibration) if every else (0.0, 0.0)
    if write[0] > 0:
        words += (f"; an async write takes {write[0]:.3g} s ({write[1]:.3g} s back to back): a row whose checkpoint "
                  f"period is shorter waits for it (back-pressure)")
    tok, steps, source = budget_of(base, tokens)
    # each row's own: its step sets the checkpoint period, its instances the failure rate (`budget_figures`, the
    # one path of run's summary and the sweep's rows; no data stall in the fast path)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_instance = full["cluster_usd_per_hour"].to_numpy(float) / instances
        system_mtbf = mtbf * 3600.0 / instances if mtbf else np.full(n, math.inf)
    fig = budget_figures(step[ok], 0.0, base.tokens_per_step, instances[ok], per_instance[ok], every, block, recovery,
                         system_mtbf[ok], tokens=tok, steps=steps,
                         storage_usd_per_hour=storage_usd_per_hour(base.storage),
                         # a row whose period is shorter than the write: written back to back
                         async_write_s=np.where(write[0] <= every * step[ok], write[0], write[1])) \
        if ok.any() else None
    for k in (("goodput", "time_to_train_days", "compute_cost_usd", "storage_cost_usd", "total_cost_usd")
              if source is not None else ("goodput",)):
        col = np.full(n, np.nan)
        if fig is not None:
            col[ok] = fig[k]
        full[k] = col
    if source is None:
        return {"budget": None, "goodput_source": words, "goodput_method": CLOSED_FORM}
    return {"budget": {"tokens": tok if tok is not None else steps * base.tokens_per_step,
                       "steps": steps if steps is not None else tok / base.tokens_per_step, "source": source,
                       "no_price": NO_PRICE_HINT},
            "goodput_source": words, "goodput_method": CLOSED_FORM}


BAND_COLUMNS = ("time_to_train_low_days", "time_to_train_high_days", "total_cost_low_usd", "total_cost_high_usd")


def budget_band_columns(full: pd.DataFrame) -> None:
    """With a budget, the days and dollars at the ends of each row's 80 % step interval (in place: `BAND_COLUMNS`,
    `step.merit.budget_bands`; NaN where the row has no interval, no budget figure or no price)."""
    if "time_to_train_days" not in full.columns:
        return
    bands = budget_bands(*(full[c].to_numpy(float) for c in ("time_to_train_days", "total_cost_usd", "step_time_s",
                                                             "step_time_low_s", "step_time_high_s")))
    for k in BAND_COLUMNS:
        full[k] = np.asarray(bands[k], dtype=float)
