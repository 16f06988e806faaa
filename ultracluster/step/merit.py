"""A step time → the figures of merit: tokens/s, MFU, the cluster's price per hour, cost per step and US dollars
per million tokens (`figures`); and what a long run makes of it: the goodput (Daly's closed form, or a long run's
emulated goodput when there is one), the wall-clock step and tokens/s at that goodput, and the days and dollars
to a training budget (`budget_figures`). The one formula of `run`'s summary (`report.summary`), the planner's rows
(`layouts.steps.evaluate`, `layouts.ranking.assemble`, `plan.budget`), the sweep's rows (which are summaries) and
goodput.json's days and dollars (`cli`, from the summary); the busy step (the step less its storage stalls, the
unit of work of a long run) is `busy_step_s`, written here once."""
from __future__ import annotations

import math

import numpy as np

SECONDS_PER_DAY = 86400.0
#: `goodput_method` of summary.json, a sweep row and a plan's budget: which goodput `budget_figures` took
CLOSED_FORM, EMULATED = "closed form", "emulated"


def busy_step_s(step_time_s, data_stall_s, checkpoint_s):
    """The seconds a step computes and communicates: its step time less its data stall and checkpoint stall (the
    unit of work of a long run, `goodput.long_run`, and of the days to train, `time_and_cost`)."""
    return step_time_s - data_stall_s - checkpoint_s


def peak_flop_per_s(chips, chip, precision: str) -> float:
    """A cluster's dense peak at the training precision: chips x the chip's (`ChipSpec.dense_flop_per_s`), the
    denominator of every MFU."""
    return chips * chip.dense_flop_per_s[precision]


def mfu(model_flops_per_step, peak_flop_per_s, step_time_s):
    """Model FLOPs utilization: the model's FLOPs per step over what the peak does in the step (arrays or
    scalars)."""
    return model_flops_per_step / (peak_flop_per_s * step_time_s)


def figures(step_time_s, tokens_per_step, model_flops_per_step, peak_flop_per_s, instances,
            price_per_hour_usd) -> dict:
    """Figures of merit of a step, elementwise over arrays (a plan's rows) or of scalars (a run).

    Args:
        step_time_s: seconds per step.
        tokens_per_step: tokens one step trains (global batch x sequence length).
        model_flops_per_step: the model's FLOPs per step (`operators.model_flops_per_step`).
        peak_flop_per_s: the cluster's dense peak at the training precision.
        instances: instances in the cluster.
        price_per_hour_usd: US dollars per instance-hour (`price.instance_price`); NaN where unknown.

    Returns:
        {"tokens_per_s", "mfu", "cluster_usd_per_hour", "cost_per_step_usd", "usd_per_million_tokens"}: the
        cluster's price per hour is instances x the instance's; dollars are NaN where the price is.
    """
    step, tokens = np.asarray(step_time_s, dtype=float), np.asarray(tokens_per_step, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        cluster_usd = np.asarray(instances, dtype=float) * np.asarray(price_per_hour_usd, dtype=float)
        cost = cluster_usd * step / 3600
        return {"tokens_per_s": tokens / step, "mfu": mfu(model_flops_per_step, peak_flop_per_s, step),
                "cluster_usd_per_hour": cluster_usd, "cost_per_step_usd": cost,
                "usd_per_million_tokens": np.where(tokens != 0, cost / tokens * 1e6, np.nan)}


def daly_goodput(tau_s: float, delta_s: float, recovery_s: float, mtbf_s: float) -> float:
    """Expected useful fraction of wall time: tau / (M e^(R/M) (e^((tau+delta)/M) - 1)) (Daly 2006, failures
    exponential with mean M, also during checkpoints and recovery; each costs R plus the work since the last
    checkpoint)."""
    if not math.isfinite(mtbf_s):
        return tau_s / (tau_s + delta_s)
    try:
        return tau_s / (mtbf_s * math.exp(recovery_s / mtbf_s) * math.expm1((tau_s + delta_s) / mtbf_s))
    except OverflowError:
        # failures far more often than a restart takes (R/M or (tau+delta)/M beyond 709, e^x past float64): the
        # same expression in logarithms, which tends to 0 (no work survives); log(e^x - 1) = x + log1p(-e^-x)
        x = (tau_s + delta_s) / mtbf_s
        log_expm1 = math.log(math.expm1(x)) if x < 700 else x + math.log1p(-math.exp(-x))
        log_den = math.log(mtbf_s) + recovery_s / mtbf_s + log_expm1
        return math.exp(math.log(tau_s) - log_den) if tau_s > 0 else 0.0


SECONDS_PER_DAY = 86400.0


def time_and_cost(step_time_s, tokens_per_step, instances, price_per_hour_usd, goodput, tokens=None,
                  steps=None) -> dict:
    """Days and dollars to train a budget of `tokens` (or `steps`), with goodput: vectorized over any inputs
    that broadcast (a plan's rows, a sweep's variants), scalars in, floats out.

    Wall time = steps x `step_time_s` / `goodput`: `step_time_s` is what one step computes and communicates (the
    replayed step less its data and checkpoint stalls, or a plan row's step time), and `goodput` the useful share
    of wall time once data stalls, checkpoints, failures and recovery are paid (`expected_goodput`, or a long
    run's `GoodputResult.goodput`). Cost = wall hours x `instances` x `price_per_hour_usd` (USD per
    instance-hour; None or NaN: unknown, and the cost is NaN: say `NO_PRICE_HINT`).

    Args:
        step_time_s: seconds per step (busy: without storage stalls).
        tokens_per_step: tokens one step trains (global batch x sequence length).
        instances: instances in the cluster.
        price_per_hour_usd: USD per instance-hour, None or NaN where unknown.
        goodput: useful fraction of wall time, in (0, 1]; 0 or NaN gives NaN days.
        tokens: the training budget in tokens (steps = tokens / tokens_per_step, a fraction allowed).
        steps: the training budget in optimizer steps (instead of `tokens`).

    Returns:
        {"train_steps", "time_to_train_days", "total_cost_usd"}: arrays shaped like the broadcast inputs, or
        floats when every input is a scalar; NaN where the budget, goodput or price is missing.
    """
    if (tokens is None) == (steps is None):
        raise ValueError("time_and_cost: give the budget as tokens or as steps (one of them)")

    def arr(x):
        return np.asarray(np.nan if x is None else x, dtype=float)

    with np.errstate(divide="ignore", invalid="ignore"):
        n = arr(tokens) / arr(tokens_per_step) if tokens is not None else arr(steps)
        g = arr(goodput)
        days = np.where(g > 0, n * arr(step_time_s) / np.where(g > 0, g, 1.0) / SECONDS_PER_DAY, np.nan)
        price = arr(price_per_hour_usd)
        cost = days * 24.0 * arr(instances) * price
        n = n + np.zeros_like(days)
    out = {"train_steps": n, "time_to_train_days": days, "total_cost_usd": cost}
    if all(np.ndim(x) == 0 for x in (step_time_s, tokens_per_step, instances, goodput, tokens, steps)) \
            and np.ndim(price) == 0:
        return {k: float(v) for k, v in out.items()}
    return out




def budget_bands(time_to_train_days, total_cost_usd, step_time_s, step_time_low_s, step_time_high_s) -> dict:
    """The days and dollars at the two ends of the step's 80 % interval: each scales with the step, the goodput
    held (the one rule of the plan's rows and decision view and the sweep's rows).

    Returns:
        {"time_to_train_low_days", "time_to_train_high_days", "total_cost_low_usd", "total_cost_high_usd"}: arrays
        shaped like the broadcast inputs, or floats when every input is a scalar; NaN where the budget, the price
        or the interval is missing."""
    def arr(x):
        return np.asarray(np.nan if x is None else x, dtype=float)

    days, cost, step = arr(time_to_train_days), arr(total_cost_usd), arr(step_time_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_s = np.where(step > 0, 1.0 / np.where(step > 0, step, 1.0), np.nan)
        low, high = arr(step_time_low_s) * per_s, arr(step_time_high_s) * per_s
    out = {"time_to_train_low_days": days * low, "time_to_train_high_days": days * high,
           "total_cost_low_usd": cost * low, "total_cost_high_usd": cost * high}
    if all(np.ndim(v) == 0 for v in out.values()):
        return {k: float(v) for k, v in out.items()}
    return out


def expected_goodput(busy_s: float, data_stall_s: float, every_steps: int, block_s: float, recovery_s: float,
                     mtbf_system_s: float, async_write_s: float = 0.0) -> float:
    """The expected useful share of wall time of a long run, in closed form (goodput.json's
    `closed_form_goodput`): busy / (busy + data stall) x Daly's goodput of a checkpoint period of `every_steps`
    steps (with their data stalls) that blocks `block_s` per checkpoint, under failures with system MTBF
    `mtbf_system_s` (inf: none), each costing `recovery_s` (detection + restart + restore) and the work since the
    last checkpoint. No checkpoints: the stall-free share without failures, 0 with them (every failure restarts
    the job from its first step). `async_write_s`: an async checkpoint's background write; where it outlasts the
    period (every_steps x step), each checkpoint also waits for the previous write (back-pressure), so the block
    is the copy plus that wait."""
    step = busy_s + data_stall_s
    if not (step > 0 and math.isfinite(step)):
        return float("nan")
    share = busy_s / step
    if not every_steps:
        return share if not math.isfinite(mtbf_system_s) else 0.0
    block_s = block_s + max(0.0, async_write_s - every_steps * step)
    return share * daly_goodput(every_steps * step, block_s, recovery_s, mtbf_system_s)


def _closed_goodput(busy_s, data_stall_s, every_steps, block_s, recovery_s, mtbf_system_s, async_write_s=0.0):
    """`expected_goodput` elementwise over arrays that broadcast (a plan's rows), a float for scalars."""
    args = [np.asarray(x, dtype=float) for x in (busy_s, data_stall_s, every_steps, block_s, recovery_s,
                                                 mtbf_system_s, async_write_s)]
    if all(a.ndim == 0 for a in args):
        return expected_goodput(*(float(a) for a in args[:2]), int(args[2]), *(float(a) for a in args[3:]))
    one = np.frompyfunc(lambda b, d, e, k, r, m, w: expected_goodput(b, d, int(e), k, r, m, w), 7, 1)
    return one(*np.broadcast_arrays(*args)).astype(float)


def budget_figures(busy_s, data_stall_s, tokens_per_step, instances, price_per_hour_usd, every_steps=0,
                   block_s=0.0, recovery_s=0.0, mtbf_system_s=math.inf, tokens=None, steps=None,
                   emulated_goodput=None, storage_usd_per_hour=0.0, async_write_s=0.0) -> dict:
    """The one path from an evaluated step to its goodput, wall-clock step and tokens/s, days and dollars: `run`'s
    summary.json (`report.summary.days_and_dollars`, whose goodput goodput.json then repeats), a sweep's rows (its
    variants' summaries), a plan's rows (`plan.budget`), elementwise over arrays or of scalars.

    The goodput is the long run's when there is one (`emulated_goodput`, a `goodput.GoodputResult.goodput` from
    `run --hours`), else the closed form (`expected_goodput`): one choice, said by `goodput_method`.

    Args:
        busy_s: seconds a step computes and communicates (`busy_step_s`).
        data_stall_s: the step's data stall (0 where it is not modelled: the planner's fast path).
        tokens_per_step: tokens one step trains.
        instances: instances in the cluster.
        price_per_hour_usd: US dollars per instance-hour; None or NaN where unknown.
        every_steps, block_s, recovery_s, mtbf_system_s: a checkpoint every N steps (0: none) blocking `block_s`,
            a recovery's seconds (detection + restart + restore), the system's MTBF in seconds (inf: no failures).
        tokens, steps: the training budget (one of them), or neither: days and dollars NaN.
        emulated_goodput: the long run's goodput, or None.
        async_write_s: an async checkpoint's background write (0: sync or none): the closed form counts the
            wait for the previous write where it outlasts the period (`expected_goodput`).
        storage_usd_per_hour: what the file system costs per wall hour (`storage.fsx.storage_usd_per_hour`; 0:
            none), paid over the same days as the instances.

    Returns:
        {"goodput", "goodput_method", "wall_step_time_s" (busy / goodput: wall seconds per step kept once stalls,
        checkpoints, failures and recovery are paid), "wall_tokens_per_s" (tokens per step / that),
        "train_steps", "time_to_train_days" (steps x wall step), "compute_cost_usd" (the instances),
        "storage_cost_usd" (the file system over the same days), "total_cost_usd" (their sum)}.
    """
    if emulated_goodput is not None:
        good, method = np.asarray(emulated_goodput, dtype=float), EMULATED
    else:
        good, method = _closed_goodput(busy_s, data_stall_s, every_steps, block_s, recovery_s, mtbf_system_s,
                                       async_write_s), CLOSED_FORM
    good = good + np.zeros(np.broadcast(np.asarray(busy_s), np.asarray(instances)).shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        wall = np.where(good > 0, np.asarray(busy_s, dtype=float) / np.where(good > 0, good, 1.0), np.inf)
        wall = np.where(np.isnan(good), np.nan, wall)
        out = {"goodput": good, "goodput_method": method, "wall_step_time_s": wall,
               "wall_tokens_per_s": np.asarray(tokens_per_step, dtype=float) / wall}
    if tokens is None and steps is None:
        n = np.full(good.shape, np.nan)
        out.update(train_steps=n, time_to_train_days=n, total_cost_usd=n, compute_cost_usd=n, storage_cost_usd=n)
    else:
        out.update(time_and_cost(busy_s, tokens_per_step, instances, price_per_hour_usd, good, tokens=tokens,
                                 steps=steps))
        out["compute_cost_usd"] = out["total_cost_usd"]
        out["storage_cost_usd"] = np.asarray(out["time_to_train_days"]) * 24.0 * np.asarray(storage_usd_per_hour,
                                                                                             dtype=float)
        out["total_cost_usd"] = out["compute_cost_usd"] + out["storage_cost_usd"]
    if np.ndim(good) == 0:
        return {k: v if isinstance(v, str) else float(v) for k, v in out.items()}
    return out
