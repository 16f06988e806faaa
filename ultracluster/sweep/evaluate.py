"""One variant → one row of the sweep table: its summary as `run` gives it, timed in this process.

`evaluate_variant` is what a Ray task (or this process) runs for each variant: the variant's scenario emulated with
in-process shards (`emulate`, the stages `run` runs, with the same numbers: `runner.predict`), its 80 % interval,
with `hours` the long run of `run --hours` (`runner.evaluate`, the replayed step as its unit of work), and the
training budget's days and dollars with that goodput: the summary's own (`step.merit.budget_figures`). With `actors` the variant is
replayed by `runner.run` on Ray actors instead (`sweep --actors`). Any error becomes a failed row naming it, so
one variant cannot stop the others.
"""
from __future__ import annotations

import time
import traceback

from ..step.merit import budget_bands
from ..step.price import NO_PRICE_HINT
from ..scenario import Scenario
from .assumptions import assumptions

NAN = float("nan")
WARNING_JOIN = " | "      # between a row's warnings in sweep.csv (a warning's own text may hold "; ")
#: The figures of each row, after the variant's index and its varied keys (sweep.csv, docs/sweeps.md)
FIGURES = ("status", "feasible", "reason", "step_time_s", "step_time_low_s", "step_time_high_s", "tokens_per_s",
           "tokens_per_s_low", "tokens_per_s_high", "mfu", "hbm_peak_gib", "hbm_capacity_gib", "data_stall_s",
           "checkpoint_s", "goodput", "goodput_method", "goodput_source", "wall_step_time_s", "wall_tokens_per_s",
           "train_tokens", "time_to_train_days",
           "time_to_train_low_days", "time_to_train_high_days", "total_cost_usd", "total_cost_low_usd",
           "total_cost_high_usd", "compute_cost_usd", "storage_cost_usd",
           "price_per_hour_usd",
           "price_source", "usd_per_million_tokens", "failures", "extrapolated", "mfu_implausible", "warnings",
           "assumptions", "wall_s")


def _summary(scenario: Scenario, hours: float | None, actors: bool, address: str | None) -> tuple[dict, object]:
    """The variant's summary.json (with its interval, and with `hours` its long run's goodput) and its long run
    (`goodput.GoodputResult`, or None): `runner.run` on Ray actors, else `runner.evaluate` here."""
    from ..report.summary import summarize
    from ..runner import evaluate, run

    if actors:
        rep = run(scenario, address=address, hours=hours)
        return rep.summary, rep.long_run
    result = evaluate(scenario, intervals=True, hours=hours)
    return summarize(result), result.long_run


def evaluate_variant(scenario: Scenario, hours: float | None = None, assumptions_on: bool = True,
                  actors: bool = False, address: str | None = None) -> dict:
    """The row of one variant (FIGURES), as the summary and goodput.json of `run [--hours H]` give them.

    Args:
        scenario: the variant, validated.
        hours: then emulate this many hours with failures and checkpoints (the row's goodput is that run's);
            None: the expected goodput in closed form (summary.json's `goodput`).
        assumptions_on: False when the variant was built with its assumptions at their conservative ends
            (`--assumptions off`; the row says so).
        actors: replay it on Ray actors (`runner.run`) rather than in this process.
        address: the Ray cluster of those actors.
    """
    t0 = time.perf_counter()
    try:
        row = _row(scenario, hours, actors, address)
    except Exception as err:          # noqa: BLE001  (a failed variant is a row; the sweep goes on)
        last = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno})" if last else ""
        row = {"status": "failed", "feasible": False,
               "reason": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}{where}"[:500]}
    said = [a.warning for a in assumptions(scenario)]
    if not assumptions_on:
        said = [w.replace("; --assumptions off prices 0 (never burst)", "") for w in said]
        said.insert(0, "--assumptions off: every assumption with an argued range at its conservative end")
    row["warnings"] = WARNING_JOIN.join([*row.get("warnings", []), *said])
    row["assumptions"] = "on" if assumptions_on else "off"
    row["wall_s"] = time.perf_counter() - t0
    return {k: row.get(k, NAN if k not in ("reason", "goodput_method", "goodput_source", "price_source",
                                           "extrapolated") else None)
            for k in FIGURES}


def _row(scenario: Scenario, hours: float | None, actors: bool, address: str | None) -> dict:
    s, long_run = _summary(scenario, hours, actors, address)
    row = {k: s.get(k) for k in FIGURES if k in s}      # goodput, days and dollars: the summary's, as `run` writes
    row["status"] = "ok" if s["feasible"] else "infeasible"
    row["extrapolated"] = ",".join(s.get("extrapolated") or [])
    row["mfu_implausible"] = bool(s.get("mfu_implausible", False))
    row["warnings"] = list(s.get("warnings") or [])
    row["failures"] = float(len(long_run.failures)) if long_run is not None else NAN
    if not s["feasible"]:
        return row
    row.update(budget_bands(row.get("time_to_train_days"), row.get("total_cost_usd"), s["step_time_s"],
                            s.get("step_time_low_s"), s.get("step_time_high_s")))
    for k in ("time_to_train_days", "total_cost_usd", "compute_cost_usd", "storage_cost_usd", "price_per_hour_usd",
              "usd_per_million_tokens"):
        if row.get(k) is None:
            row[k] = NAN
    if row.get("price_source") == NO_PRICE_HINT:
        row["price_per_hour_usd"] = NAN
    return row
