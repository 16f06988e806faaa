"""A step time → the figures of merit: tokens/s, MFU, the cluster's price per hour, cost per step and US dollars
per million tokens. The one formula of `run`'s summary (`report.summary`) and the planner's rows
(`layouts.steps.evaluate`, `layouts.ranking.assemble` with the plan's prices)."""
from __future__ import annotations

import numpy as np


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
