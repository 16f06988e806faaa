"""A step's in-layer time split between the tensor-, context- and expert-parallel collectives, exposed and
hidden: the overlap rule the report reads (`report.summary.comm_by_kind`), kept beside the model that makes it.

The replay's in-layer time of a step (`StepRecord.tp_comm_s`) is the step comm's tensor- and expert-parallel
collectives of the critical (replica, stage) (`planned_s`: `StageComm.tp_comm_s`, or the replica's own with
degraded instances) plus the context-parallel ring's exposed blocks, so cp is the difference; the expert
all-to-alls are never overlapped (all their seconds are exposed, up to what is left); tp is the rest. With no
tensor parallelism but experts, the rest is rounding and counts as ep. Hidden: each kind's seconds on the
critical stage (`totals`, from the collectives' records) less its exposed ones, at least 0 (the records time
healthy links: on a degraded replica a kind can expose more than they hold).
"""
from __future__ import annotations

INLAYER_KINDS = ("tp", "cp", "ep")


def inlayer_split(in_layer_s: float, planned_s: float, totals: dict[str, float],
                  degree: dict[str, int]) -> dict[str, tuple[float, float]]:
    """{"tp", "cp", "ep"} → (exposed, hidden) seconds of one step's in-layer time `in_layer_s`.

    Args:
        in_layer_s: the step's in-layer seconds on its critical (replica, stage).
        planned_s: the step's comm's tensor- and expert-parallel seconds of that (replica, stage).
        totals: each kind's seconds per step on that stage (the collectives' records, scaled to its layers).
        degree: the layout's "tp", "cp" and "ep" degrees.
    """
    cp = max(in_layer_s - planned_s, 0.0) if degree["cp"] > 1 else 0.0
    ep = min(totals["ep"], in_layer_s - cp) if degree["ep"] > 1 else 0.0
    tp = in_layer_s - cp - ep
    if degree["tp"] == 1 and degree["ep"] > 1:   # no tensor-parallel collective: the rest is rounding
        ep, tp = ep + tp, 0.0
    return {k: (x, max(totals[k] - x, 0.0)) for k, x in (("tp", tp), ("cp", cp), ("ep", ep))}
