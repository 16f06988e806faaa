"""A plan's layouts with what a run says of its own prediction: the axes off the calibrated domain, an MFU above
the best published, and the 80 % interval, each from `ultracluster.uncertainty`, the code `run` uses.

`extrapolated` and `mfu_implausible` are cheap (a comparison per axis) and go on every layout. The interval
times the uncertain factors with the fast path (`uncertainty.hardware` over the layout rows: each factor's grid,
then the draws beside each layout's band ends, as `uncertainty.interval` does for one), so it is timed for the
layouts that can rank (`time_for_ranking`) and the ones a plan shows; the others keep NaN. Pure: no Ray, no
files.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import uncertainty as unc
from ..cluster import build_cluster
from ..calibration.factors import Calibration
from ..cluster.catalog import INSTANCES
from ..calibration.profile import calibration_for
from ..scenario import Scenario
from . import ranking
from .steps import LAYOUT_COLUMNS
from .setting_times import layout_step_times, one_step, setting_step_times
from .evaluator import layout_scenario

INTERVAL_COLUMNS = ("step_time_low_s", "step_time_high_s", "tokens_per_s_low", "tokens_per_s_high")
BATCH = 512          # layouts of one place (the top, an instance type's best, a stack's best) whose interval is
                     # timed at most per round of `time_for_ranking` (the first round times the two best bounds of
                     # each place, each round twice as many; the rounds stop when no untimed layout can still rank)


class LayoutEvidence:
    """Where a scenario's layouts stand against the evidence, and their intervals: the calibration, the evidence
    (the scenario's profile's, else the shipped fit's) and the Evaluators kept across calls."""

    def __init__(self, base: Scenario, calibration: Calibration | None = None):
        self.base = base
        self.cal = calibration_for(base, calibration)
        self.profile = unc.profile_evidence(base)
        self.ev = self.profile or unc.evidence()
        self.one = one_step(base)
        self.params_b = unc.model_params_b(base)
        self._factors: dict[str, list] = {}
        self._evaluators: dict[tuple, object] = {}

    def flags(self, t: pd.DataFrame) -> None:
        """`extrapolated` (the axes off the calibrated domain, comma-separated; "" inside it) and `mfu_implausible`
        of every row, in place (`uncertainty.extrapolated_columns`, `uncertainty.mfu_implausible`)."""
        axes = np.full(len(t), "", dtype=object)
        count = np.zeros(len(t), dtype=float)
        growth = np.zeros(len(t), dtype=float)
        implausible = np.zeros(len(t), dtype=bool)
        threshold = np.full(len(t), np.nan)
        for kind, idx in t.groupby("instance", sort=False).indices.items():
            sub = t.iloc[idx]
            gen = INSTANCES[kind].chip.name
            value = {"tp": sub["tp"].to_numpy(), "pp": sub["pp"].to_numpy(), "cp": sub["cp"].to_numpy(),
                     "seq_len": self.base.training.seq_len, "params_b": self.params_b,
                     "zero": sub["zero"].to_numpy(), "recompute": sub["recompute"].to_numpy(),
                     "cell": unc.cell(sub["stack"].to_numpy() if "stack" in sub.columns else self.base.stack,
                                      sub["pp"].to_numpy()),
                     "tokens_per_core": unc.tokens_per_core(sub["micro_batch"].to_numpy(), self.base.training.seq_len,
                                                            sub["tp"].to_numpy(), sub["cp"].to_numpy()),
                     "mfu": sub["mfu"].to_numpy(float)}
            axes[idx], count[idx] = unc.extrapolated_columns(value, gen, self.ev.domain)
            growth[idx] = unc.growth_log(value, gen, self.ev.domain)
            best = unc.mfu_best(gen, self.ev.domain)
            implausible[idx] = unc.mfu_implausible(sub["mfu"].to_numpy(float), best)
            threshold[idx] = np.nan if best is None else best
        t["extrapolated"] = axes
        t["mfu_implausible"] = implausible
        t["mfu_best_published"] = threshold
        t["_axes"] = count
        t["_growth"] = growth

    def thresholds(self, t: pd.DataFrame) -> dict[str, float | None]:
        """The best published MFU of each chip generation searched (`mfu_implausible`'s threshold), by instance
        type."""
        return {kind: unc.mfu_best(INSTANCES[kind].chip.name, self.ev.domain) for kind in pd.unique(t["instance"])}

    def _factors_of(self, row) -> list:
        kind = str(row["instance"])
        if kind not in self._factors:
            cluster = build_cluster(layout_scenario(self.base, row), int(row["instances"]), self.cal)
            self._factors[kind] = tuple(unc.factors_for(cluster, pinned=False, ranges=self.ev.ranges))
        return self._factors[kind]

    def time_rows(self, t: pd.DataFrame, rows: np.ndarray, tokens_per_step: float) -> None:
        """The 80 % interval of the rows at positions `rows` (a run's, `uncertainty.interval`, around each row's
        fast-path step time), in place in INTERVAL_COLUMNS; needs `flags` first."""
        rows = np.asarray(rows, dtype=np.int64)
        for kind in pd.unique(t["instance"].iloc[rows]):
            pos = rows[(t["instance"].iloc[rows] == kind).to_numpy()]
            sub = t.iloc[pos]
            layout = sub[list(LAYOUT_COLUMNS) + ["microbatches"]]
            factors = self._factors_of(sub.iloc[0])
            slow = fast = np.zeros(len(pos))
            if factors:
                hw = unc.hardware(lambda cals, which: layout_step_times(
                    self.one, layout, cals, which, self._evaluators, shared_last_sends=False), self.cal, factors, len(pos),
                    lambda: unc.weights_for(factors, self.cal, self.profile, INSTANCES[kind].chip.name,
                                            times=setting_step_times))
                slow, fast = hw.slow_log, hw.fast_log
            h = unc.half_width(self.ev, sub["_axes"].to_numpy(), sub["_growth"].to_numpy())
            low, high = unc.widen(sub["step_time_s"].to_numpy(float), h, fast, slow)
            col = t.columns.get_loc
            t.iloc[pos, col("step_time_low_s")] = low
            t.iloc[pos, col("step_time_high_s")] = high
            t.iloc[pos, col("tokens_per_s_low")] = tokens_per_step / high
            t.iloc[pos, col("tokens_per_s_high")] = tokens_per_step / low


def time_for_ranking(t: pd.DataFrame, lev: LayoutEvidence, objective: str, rank_by: str, top: int,
                      max_usd_per_hour: float | None, shown: np.ndarray, tokens_per_step: float,
                      scope_columns: tuple[str, ...] = ("instance",)) -> int:
    """Time the intervals of every row that can rank among the `top` or be the best of its instance type (and of
    each value of the other `scope_columns`: its stack) by `rank_by`, and of the rows `shown` (a boolean mask: the
    Pareto front, the scenario's own layout); returns how many rows were timed.

    `low` ranks by the pessimistic end, which is at least the half-width h slower than the point (the fit's and
    the releases', widened by the row's extrapolated axes; the hardware part only adds to it in quadrature): the
    rows are timed best bound first, in rounds, until no untimed row's bound (the point h slower: its best
    possible pessimistic end) can still reach the top or its type's best. That is exact: the rows left untimed
    could not have ranked. `high` (the optimistic end, which can pass a better point) times every eligible row
    (slow: tens of milliseconds a layout); `point` only those shown and the best by point.
    """
    for c in INTERVAL_COLUMNS:
        t[c] = np.nan
    col, smaller = ranking.OBJECTIVES[objective]
    elig = ranking.eligible(t, objective, max_usd_per_hour).to_numpy()
    feasible = t["feasible"].to_numpy(dtype=bool)
    timed = np.zeros(len(t), dtype=bool)      # the rows timed for the ranking (and, last, the ones shown)
    computed = np.zeros(len(t), dtype=bool)    # the rows whose interval is in `t`: the shown ones go with the first
                                               # rows timed (one evaluation less; every row's numbers its own)

    def run(mask: np.ndarray) -> None:
        todo = mask & ~timed & feasible
        if todo.any():
            fresh = np.flatnonzero((todo | (shown & feasible)) & ~computed)
            if fresh.size:
                lev.time_rows(t, fresh, tokens_per_step)
                computed[fresh] = True
            timed[todo] = True

    if rank_by == "high":
        run(elig)
    elif rank_by == "point":
        best = ranking.ranked(t, objective, max_usd_per_hour, "point")
        keep = np.zeros(len(t), dtype=bool)
        keep[t.index.get_indexer(best.head(top).index)] = True
        for by in scope_columns:
            keep[t.index.get_indexer(best.drop_duplicates(by).index)] = True
        run(keep)
    else:
        # the pessimistic end is at least the half-width h (known before timing) slower than the point
        h = unc.half_width(lev.ev, t["_axes"].to_numpy(), t["_growth"].to_numpy())
        bound = t[col].to_numpy(float) * (np.exp(h) if smaller else np.exp(-h))
        good = -bound if smaller else bound
        order = np.argsort(-good, kind="stable")
        order = order[elig[order]]
        scopes = [(np.ones(len(t), dtype=bool), top)] + [(t[by].to_numpy() == k, 1) for by in scope_columns
                                                          for k in pd.unique(t[by].to_numpy()[elig])]
        quota = 2              # rows of each scope timed in a round, best bound first; doubles each round
        while True:
            pess = ranking.at_end(t, objective, "low")
            gp = -pess if smaller else pess
            done = elig & timed & np.isfinite(pess)
            need = elig & ~timed
            mask = np.zeros(len(t), dtype=bool)
            for scope, k in scopes:         # the top K over all, and the best of each type (and stack)
                members = np.flatnonzero(done & scope)
                could = need & scope
                if members.size >= k:
                    kth = members[np.argsort(-gp[members], kind="stable")][k - 1]
                    # an untimed row's pessimistic end is at best its bound: it can rank only if its bound can
                    could &= good >= gp[kth]
                mask[order[could[order]][:max(quota, k - members.size)]] = True
            if not mask.any():
                break
            run(mask)
            quota = min(2 * quota, BATCH)
    run(shown)
    return int(timed.sum())
