"""One variant → one row of the sweep table: its summary as `run` gives it, timed in this process.

`evaluate_variant` is what a Ray task (or this process) runs for each variant: the variant's scenario emulated with
in-process shards (`emulate`, the stages `run` runs, with the same numbers: `runner.predict`), its 80 % interval,
with `hours` the long run of `run --hours` (`goodput.long_run`, the replayed step as its unit of work), and the
training budget's days and dollars with that goodput (`goodput.time_and_cost`). With `actors` the variant is
replayed by `runner.run` on Ray actors instead (`sweep --actors`). Any error becomes a failed row naming it, so
one variant cannot stop the others.
"""
from __future__ import annotations

import math
import time
import traceback

from ..goodput import long_run, time_and_cost
from ..step.price import NO_PRICE_HINT
from ..scenario import Scenario
from ..storage.fsx import storage_cost_usd
from .assumptions import assumptions

NAN = float("nan")
WARNING_JOIN = " | "      # between a row's warnings in sweep.csv (a warning's own text may hold "; ")
#: The figures of each row, after the variant's index and its varied keys (sweep.csv, docs/sweeps.md)
FIGURES = ("status", "feasible", "reason", "step_time_s", "step_time_low_s", "step_time_high_s", "tokens_per_s",
           "tokens_per_s_low", "tokens_per_s_high", "mfu", "hbm_peak_gib", "hbm_capacity_gib", "data_stall_s",
           "checkpoint_s", "goodput", "goodput_source", "train_tokens", "time_to_train_days",
           "time_to_train_low_days", "time_to_train_high_days", "total_cost_usd", "compute_cost_usd",
           "storage_cost_usd", "price_per_hour_usd",
           "price_source", "usd_per_million_tokens", "failures", "extrapolated", "mfu_implausible", "warnings",
           "assumptions", "wall_s")


def _summary(scenario: Scenario, actors: bool, address: str | None) -> tuple[dict, object]:
    """The variant's summary.json (with its interval) and its storage figures."""
    if actors:
        from ..runner import run

        rep = run(scenario, address=address)
        return rep.summary, rep.storage
    import dataclasses

    from ..shards.local import local_shards
    from ..emulate import emulate
    from ..report.summary import summarize
    from ..runner import interval_keys

    result = emulate(scenario, local_shards, None)
    result = dataclasses.replace(result, interval=interval_keys(scenario, summarize(result)))
    return summarize(result), result.storage


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
    return {k: row.get(k, NAN if k not in ("reason", "goodput_source", "price_source", "extrapolated") else None)
            for k in FIGURES}


def _row(scenario: Scenario, hours: float | None, actors: bool, address: str | None) -> dict:
    s, storage = _summary(scenario, actors, address)
    row = {k: s.get(k) for k in FIGURES if k in s}
    row["status"] = "ok" if s["feasible"] else "infeasible"
    row["extrapolated"] = ",".join(s.get("extrapolated") or [])
    row["mfu_implausible"] = bool(s.get("mfu_implausible", False))
    row["warnings"] = list(s.get("warnings") or [])
    row["failures"] = NAN
    if not s["feasible"]:
        return row
    busy = s["step_time_s"] - s["data_stall_s"] - s["checkpoint_s"]
    if hours is not None:
        g = long_run(scenario, busy, hours, storage=storage).summary()
        row["goodput"] = g["goodput"]
        row["goodput_source"] = f"emulated over {hours:g} h ({g['failures']} failures; seed {scenario.seed})"
        row["failures"] = float(g["failures"])
        t = scenario.training
        if t.budget_tokens is not None or t.budget_steps is not None:
            tc = time_and_cost(busy, s["tokens_per_step"], s["instances"], s["price_per_hour_usd"], g["goodput"],
                               tokens=t.budget_tokens, steps=t.budget_steps)
            row["time_to_train_days"], row["total_cost_usd"] = tc["time_to_train_days"], tc["total_cost_usd"]
            if scenario.storage is not None:      # the file system over the same wall time, as `run --hours`
                row["compute_cost_usd"] = tc["total_cost_usd"]
                row["storage_cost_usd"] = float(storage_cost_usd(scenario.storage, tc["time_to_train_days"]))
                row["total_cost_usd"] = row["compute_cost_usd"] + row["storage_cost_usd"]
    days = row.get("time_to_train_days")
    if days is not None and math.isfinite(days):
        step, low, high = s["step_time_s"], s.get("step_time_low_s"), s.get("step_time_high_s")
        if all(isinstance(v, float) and math.isfinite(v) for v in (low, high)):
            row["time_to_train_low_days"], row["time_to_train_high_days"] = days * low / step, days * high / step
    for k in ("time_to_train_days", "total_cost_usd", "compute_cost_usd", "storage_cost_usd", "price_per_hour_usd",
              "usd_per_million_tokens"):
        if row.get(k) is None:
            row[k] = NAN
    if row.get("price_source") == NO_PRICE_HINT:
        row["price_per_hour_usd"] = NAN
    return row
