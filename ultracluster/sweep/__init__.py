"""`ultracluster sweep`: many variants of a scenario timed over the Ray cluster → one table, one page.

The composition root, one call per stage: `spec.build` (the variants, every one validated before any runs) →
each variant timed by `evaluate.evaluate_variant` (the numbers of `run`, in process), as Ray tasks over the attached
cluster (`actors.plan_tasks.map_on_ray`, the planner's task machinery), in this process when that is faster, or
replayed on Ray actors with `actors` → `output` (sweep.csv, sweep.parquet, sweep.json, the terminal table) and
`html` (sweep.html). Every row depends on its variant alone, so the table is the same wherever it ran.

A sweep directory is locked while a sweep writes it. Each finished row is appended to sweep-rows.jsonl at once,
so an interrupted sweep keeps its rows, and a sweep of the same scenario and options into the same directory
times only the variants it has no row for; any other reuse of a directory needs `force`, and then the new sweep
is written beside the earlier one and moved into place whole once complete (`report.rundir.move_into_place`): an
interrupted or failed one leaves the earlier sweep as it was. docs/sweeps.md.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from ..errors import OutDirError, RunInterrupted, shorten_text
from ..report.atomic import atomic_write_text
from ..yaml_input import InputError, load_json, read_bounded
from ..step.price import NO_PRICE_HINT
from .output import ROWS_FILE, SWEEP_FILES, format_sweep, read_rows, table, write_sweep_dir
from .evaluate import evaluate_variant
from .spec import MAX_VARIANTS, SweepPlan, Variant, build

__all__ = ["MAX_VARIANTS", "SweepPlan", "SweepResult", "build", "check_sweep_dir", "format_sweep", "run_sweep"]
EMBEDDED_RAY_START_S = 12.0    # as the planner (plan.command.EMBEDDED_RAY_START_S): what an embedded Ray must
                               # save to pay off


@dataclass
class SweepResult:
    """A finished (or interrupted) sweep: the table, sweep.json's content, and the failures by cause."""

    table: pd.DataFrame
    summary: dict
    failures: list[str] = field(default_factory=list)


def _task(shared: dict, scenario) -> dict:
    """A Ray task (or this process): one variant's row."""
    return evaluate_variant(scenario, shared["hours"], shared["assumptions_on"])


def identity(plan: SweepPlan, options: dict) -> str:
    """What a sweep directory's rows belong to: the resolved scenario (less its name and sweep section) and the
    options; a sweep with the same identity may reuse its rows (the varied values may differ)."""
    base = plan.base.to_dict()
    base.pop("name", None)
    base.pop("sweep", None)
    text = json.dumps({"scenario": base, "options": options}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def earlier_sweep(out: Path) -> str:
    """A few words on the sweep a directory holds: its scenario, how many rows of how many variants, when it was
    written (from sweep.json and sweep-rows.jsonl; '?' for what cannot be read)."""
    meta = out / "sweep.json"
    try:
        held = load_json(read_bounded(meta, 1 << 24, "sweep.json"), str(meta)) if meta.is_file() else None
    except (ValueError, OSError, InputError):
        held = None
    held = held if isinstance(held, dict) else {}
    stamp = next((f.stat().st_mtime for f in (meta, out / ROWS_FILE, out / "sweep.csv") if f.is_file()), None)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(stamp)) if stamp is not None else "?"
    variants = held.get("variants")
    state = "finished" if held.get("finished") is True else "unfinished"
    size = f"{variants} variants, " if isinstance(variants, int) and not isinstance(variants, bool) else ""
    return (f"a sweep of {shorten_text(str(held.get('scenario', '?')), 80)} ({size}{state}, written {when})")


def _prior(out: Path, ident: str, force: bool, keys: set[str]) -> tuple[dict[str, dict], str | None]:
    """The rows a sweep of the same identity left in `out` (key → row; none for a new or empty directory), and
    None; or, for a directory holding another sweep, with `force`, no rows and that sweep's description (it is
    replaced once the new sweep is complete). Without `force` another sweep is refused (OutDirError), and so is a
    sweep of the same identity whose rows this grid (`keys`, its variants' keys) does not all hold: a rerun never
    drops a computed row silently (with `force` it replaces that sweep, keeping the rows the grids share), and so
    is a directory holding files no sweep writes, whatever the flags."""
    if not out.exists():
        return {}, None
    if not out.is_dir():
        raise OutDirError(f"sweep directory {out}: a file, not a directory")
    names = {p.name for p in out.iterdir()}
    foreign = sorted(n for n in names if n not in SWEEP_FILES and not re.match(r"^\..+\.tmp$", n))
    meta = out / "sweep.json"
    same = False
    if meta.is_file():
        try:
            held = load_json(read_bounded(meta, 1 << 24, "sweep.json"), str(meta))
            same = isinstance(held, dict) and held.get("identity") == ident
        except (ValueError, OSError, InputError):
            same = False
    if foreign:
        raise OutDirError(f"sweep directory {out} holds files no sweep writes ({', '.join(foreign[:5])}): choose "
                          f"another --out")
    if not names:
        return {}, None
    if same:
        rows = {r["key"]: r for r in read_rows(out / ROWS_FILE)}
        dropped = [k for k in rows if k not in keys]
        if not dropped:
            return rows, None
        if not force:
            raise OutDirError(f"sweep directory {out} holds {len(dropped)} row(s) of an earlier sweep of this scenario "
                              f"that this grid does not have (the first: {shorten_text(dropped[0], 80)}); a sweep "
                              f"never drops them silently: add --force to replace that sweep (the rows both grids "
                              f"share are kept), or choose another --out")
        return {k: r for k, r in rows.items() if k in keys}, earlier_sweep(out)
    if not force:
        raise OutDirError(f"sweep directory {out} holds another sweep (another scenario or other options): "
                          f"add --force to replace it, or choose another --out")
    return {}, earlier_sweep(out)


def check_sweep_dir(out: str | Path, inputs=()) -> None:
    """The output rule for a sweep directory (`report.rundir.check_out_dir`), before its lock is taken: no file,
    device or FIFO, nothing of the sweep's input, no file a sweep does not write. Whether its rows are reused or
    (another sweep's, with --force) replaced is `run_sweep`'s to decide."""
    from ..report.output_rule import check_out_dir, owns_files

    check_out_dir(out, True, owns_files(SWEEP_FILES), lambda d: None, "sweep directory", "a sweep", inputs=inputs)


def run_sweep(plan: SweepPlan, out: str | Path, address: str | None = None, actors: bool = False,
              assumptions_on: bool = True, force: bool = False, progress=None,
              log: Callable[[str], None] | None = None) -> SweepResult:
    """Time every variant of `plan` and write the sweep directory.

    Args:
        plan: the variants (`spec.build`, every one validated).
        out: the sweep directory (sweep.csv, sweep.parquet, sweep.json, sweep.html, sweep-rows.jsonl).
        address: the Ray cluster to run the variants on (None: RAY_ADDRESS, a Ray running in this process, or this
            process, with an embedded Ray where that is faster).
        actors: replay each variant on Ray actors (`runner.run`) instead of timing it in a task.
        assumptions_on: False when the variants were built with `--assumptions off` (the rows say so).
        force: replace another sweep's rows in `out`.
        progress: a `report.WorkProgress` (told the variants done), or None.
        log: message lines.

    Returns:
        The SweepResult. An interruption (KeyboardInterrupt) keeps every finished row in `out` and propagates.

    Raises:
        OutDirError: `out` holds another sweep (without `force`), files no sweep writes, or a sweep another
            process is writing.
    """
    from ..report.rundir import RunDirLock, clean_after, move_into_place, signals_held, staging_beside

    log = log or (lambda _: None)
    out = Path(out)
    check_sweep_dir(out)                                # the output rule (the CLI has checked it with its inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    options = {"hours": plan.hours, "assumptions": assumptions_on, "actors": actors}
    ident = identity(plan, options)
    t0 = time.perf_counter()
    staging = staging_beside(out)
    target = Path(os.path.realpath(out))
    with RunDirLock(out, staging.name, "sweep directory") as lock:
        if lock.stale:                                 # a sweep that died (SIGKILL) while replacing another
            clean_after(target, lock.stale)
            log(f"sweep: took over the lock of {out} from pid {lock.stale.get('pid', '?')}, which is no longer "
                f"running; removed what it left")
        prior, replacing = _prior(out, ident, force, {v.key for v in plan.variants})
        if replacing:
            # another sweep (--force): the new one is written beside it and moved into place whole once complete;
            # until then, and for good if it is interrupted or fails, the earlier sweep stays as it was
            log(f"sweep: replacing {replacing} in {out} (--force), once this sweep is complete")
            work = staging
            work.mkdir()
        else:
            work = out                                 # new, empty, or this sweep's own rows: resumed in place
            out.mkdir(exist_ok=True)
        try:
            result = _sweep_into(plan, work, out, prior, ident, assumptions_on, actors, address, progress, log, t0)
            if replacing:
                with signals_held():                   # a signal waits until the directory is in place
                    move_into_place(work, target)
        except BaseException as stop:
            if replacing:
                shutil.rmtree(work, ignore_errors=True)
                with contextlib.suppress(AttributeError, TypeError):
                    stop.kept_earlier = replacing      # what the CLI says is left: the earlier sweep, as it was
            raise
    return result


def _sweep_into(plan: SweepPlan, work: Path, out: Path, prior: dict, ident: str, assumptions_on: bool,
                actors: bool, address, progress, log, t0: float) -> SweepResult:
    """`run_sweep` under the lock: time the variants without a row into `work` (`out` itself, or the staging
    directory beside it when another sweep is replaced), writing each row as it ends and the tables at the end."""
    # a kept row takes this sweep's variant number (another grid that shares it numbered it otherwise)
    rows = {v.key: {**prior[v.key], "variant": v.index + 1} for v in plan.variants if v.key in prior}
    todo = [v for v in plan.variants if v.key not in rows]
    meta = {"scenario": plan.base.name, "identity": ident, "keys": plan.keys, "zip": plan.zipped,
            "hours": plan.hours, "assumptions": "on" if assumptions_on else "off", "actors": actors,
            "variants": len(plan.variants), "reused": len(rows), "notes": plan.notes}
    rows_file = work / ROWS_FILE
    # the kept rows (a new file renamed over the old: never written through a link), then each new one as it ends
    atomic_write_text(rows_file, "".join(json.dumps(rows[v.key]) + "\n" for v in plan.variants if v.key in rows))
    if rows:
        log(f"sweep: {len(rows)} of {len(plan.variants)} variants already evaluated in {out}: skipped")
    write_sweep_dir(work, _frame(plan, rows), {**meta, "finished": False}, plan, html=False)
    by, nodes = "in-process", 0
    if progress is not None:
        progress.phase("evaluating", len(plan.variants), unit="variants")
        progress.advance(len(rows))

    def done(v: Variant, row: dict) -> None:
        if v.price_source and row.get("price_source") not in (None, NO_PRICE_HINT):
            row = {**row, "price_source": v.price_source}       # where the sweep took the variant's price
        rec = {"variant": v.index + 1, "key": v.key, **{k: v.values[k] for k in plan.keys}, **row}
        rows[v.key] = rec
        with open(rows_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if progress is not None:
            progress.advance(len(rows))
    try:
        by, nodes = _evaluate_all(plan, todo, done, address, actors, assumptions_on, log)
    except KeyboardInterrupt as stop:
        frame = _frame(plan, rows)
        write_sweep_dir(work, frame, {**meta, "finished": False, "interrupted": getattr(stop, "signal_name",
                                                                                       "SIGINT")}, plan)
        raise
    frame = _frame(plan, rows)
    failures = failure_lines(frame)
    summary = {**meta, "finished": True, "evaluated_by": by, "ray_nodes": nodes,
               "wall_s": time.perf_counter() - t0, "failures": failures,
               "variants_per_s": len(todo) / max(time.perf_counter() - t0, 1e-9)}
    write_sweep_dir(work, frame, summary, plan)
    return SweepResult(table=frame, summary=summary, failures=failures)


def _frame(plan: SweepPlan, rows: dict[str, dict]) -> pd.DataFrame:
    return table([rows[v.key] for v in plan.variants if v.key in rows], plan.keys)


def _evaluate_all(plan: SweepPlan, todo: list[Variant], done, address, actors: bool, assumptions_on: bool,
               log) -> tuple[str, int]:
    """Time the variants not yet timed: on Ray actors, as Ray tasks, or here; returns (by what, Ray nodes)."""
    from ..actors import plan_tasks

    shared = {"hours": plan.hours, "assumptions_on": assumptions_on}
    if not todo:
        return "nothing left to price", 0
    with ExitStack() as session:
        if actors:
            session.enter_context(plan_tasks.planning_ray(address, _actor_slots(todo)))
            for v in todo:
                done(v, evaluate_variant(v.scenario, plan.hours, assumptions_on, actors=True, address=address))
            return "Ray actors (--actors)", plan_tasks.alive_nodes()
        if plan_tasks.wanted(address):
            session.enter_context(plan_tasks.planning_ray(address, 0))
            return "Ray tasks", _map(todo, shared, done)
        # the first variant pays this process's warm-up (imports, the model's caches), as each Ray worker would:
        # the second's time is the estimate
        t0 = time.perf_counter()
        done(todo[0], _task(shared, todo[0].scenario))
        first = each = time.perf_counter() - t0
        if len(todo) > 1:
            t0 = time.perf_counter()
            done(todo[1], _task(shared, todo[1].scenario))
            each = time.perf_counter() - t0
        rest = todo[2:]
        cpus = os.cpu_count() or 1
        if rest and cpus > 1 and len(rest) * each * (1 - 1 / cpus) > EMBEDDED_RAY_START_S + first:
            log(f"sweep: {len(rest)} more variants at about {each:.1f} s each: evaluating them on an embedded Ray "
                f"({cpus} CPUs)")
            session.enter_context(plan_tasks.planning_ray(None, 0))
            return "Ray tasks (embedded)", _map(rest, shared, done)
        if len(rest) * each > 10:
            from ..report.progress import duration
            log(f"sweep: {len(rest)} more variants at about {each:.1f} s each: about {duration(len(rest) * each)} "
                f"in this process")
        for v in rest:
            done(v, _task(shared, v.scenario))
        return "in-process", 0


def _map(todo: list[Variant], shared: dict, done) -> int:
    from ..actors.plan_tasks import TaskFailed, map_on_ray

    def back(i: int, result) -> None:
        if isinstance(result, TaskFailed):
            result = {"status": "failed", "feasible": False, "reason": result.cause}
        done(todo[i], result)
    _, nodes = map_on_ray(_task, shared, [v.scenario for v in todo], back)
    return nodes


def _actor_slots(todo: list[Variant]) -> int:
    from ..actors.launch import machine_capacity
    from ..shards.worker import actor_bytes
    from ..cluster import fold

    capacity = machine_capacity()
    return max(fold(v.scenario, capacity, actor_bytes(v.scenario)).actors for v in todo)


def failure_lines(frame: pd.DataFrame) -> list[str]:
    """One line per cause of the failed variants: how many, the cause, the first variant it struck."""
    if frame.empty or "status" not in frame:
        return []
    failed = frame[frame["status"] == "failed"]
    groups: dict[str, list] = {}
    for _, r in failed.iterrows():
        cause = re.sub(r"\b[0-9a-f]{8,}\b|\d+(\.\d+)?", "N", str(r["reason"]))
        groups.setdefault(cause, []).append(r)
    lines = []
    for cause, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        first = members[0]
        lines.append(f"{len(members)} variant{'s' * (len(members) != 1)} failed: {first['reason']} (the first: "
                     f"variant {int(first['variant'])})")
    return lines


def interrupted_exit(stop: KeyboardInterrupt) -> RunInterrupted:
    import signal
    return stop if isinstance(stop, RunInterrupted) else RunInterrupted(signal.SIGINT)
