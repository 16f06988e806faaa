"""A rank's HBM per pipeline stage → its total, the worst stage and feasibility: the one rule `run`
(`memory.stage_memory`, `memory.infeasible_reason`), the planner (`layouts.batched_parts.batched_memory`,
`layouts.steps.evaluate`) and the planner's headroom (`layouts.ranking.apply_headroom`) all apply."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the parts of a rank's HBM, in the order they are summed (the same bits wherever they are added)
HBM_PARTS = ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "reserve_gib")


@dataclass(frozen=True)
class HbmTotals:
    """`hbm_totals` of [..., stages] parts: arrays over the leading axes (layouts), or 0-d for one layout."""

    total: np.ndarray        # [..., stages] GiB of one rank of each stage
    worst: np.ndarray        # [...] the stage whose total is furthest over (or least under) its capacity
    worst_total: np.ndarray  # [...] that stage's total
    fits: np.ndarray         # [...] True where the worst stage's total is within the capacity


def hbm_totals(weights, gradients, optimizer, activations, reserve, capacity) -> HbmTotals:
    """A rank's HBM per stage (GiB, arrays [..., stages] that broadcast; `reserve` and `capacity` per layout
    broadcast too, e.g. [..., 1]) → totals (summed in HBM_PARTS order), the worst stage (the first of equal
    ones) and whether the layout fits (worst total <= capacity)."""
    total = np.asarray(weights + gradients + optimizer + activations + reserve, dtype=float)
    cap = np.broadcast_to(np.asarray(capacity, dtype=float), total.shape)
    worst = np.argmax(total - cap, axis=-1)
    worst_total = np.take_along_axis(total, worst[..., None], axis=-1)[..., 0]
    worst_cap = np.take_along_axis(cap, worst[..., None], axis=-1)[..., 0]
    return HbmTotals(total=total, worst=worst, worst_total=worst_total, fits=worst_total <= worst_cap)
