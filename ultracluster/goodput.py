"""Failures and goodput over a long run: H hours of wall-clock training with checkpoints, failures, restarts.

Pure (numpy, no Ray). Instance failures form a Poisson process drawn from the scenario's seed: the cluster
fails at rate instances / `faults.instance_mtbf_hours`, also while it recovers. A failure costs detection
(`faults.detect_minutes`), the restart (`faults.restart_minutes`), the restore of the last durable checkpoint
from storage (`storage.StorageCosts.restore`), and the work done since that checkpoint. Checkpoints and data
loading run through the same storage model as the step replay (`storage.StorageCosts`), whose
fast-forwarding jumps over runs of identical steps and checkpoint periods, so a 30-day run takes seconds.

Wall time is split into parts that add up to it exactly:

    useful (compute of steps kept) + checkpoint (blocking) + data stall (of steps kept) + lost work (every
    second of steps rolled back, and of steps cut by a failure) + detection + restart + restore

Steps completed but not yet covered by a durable checkpoint when the window ends count as kept (the run goes
on); the step under way at the end counts as useful.

Closed forms (docs/sources.md §2.4): Young's optimal interval sqrt(2 delta M) and Daly's
refinement; Daly's expected wall time per checkpoint period for exponential failures,
M e^(R/M) (e^((tau+delta)/M) - 1), gives the goodput tau / that (`daly_goodput`). goodput.json's
`closed_form_goodput` takes tau = every_steps x the mean step (with its data stall), delta = the mean blocking
time of a checkpoint, R = detection + restart + restore, and multiplies by busy / step (the stall-free share);
it ignores the durability lag of async writes and the variation of restores with the burst credits.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .step.merit import (SECONDS_PER_DAY, busy_step_s, daly_goodput, expected_goodput,  # noqa: F401
                          time_and_cost)  # the closed forms and the budget's arithmetic, re-exported
from .step.price import NO_PRICE_HINT
from .storage import StepSpan, StorageCosts, StorageFigures, StorageServer, figures, fsx_spec

CAUSES = ("checkpoint_s", "data_stall_s", "lost_work_s", "detection_s", "restart_s", "restore_s")


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young (1974): compute time between checkpoints that minimizes the expected loss, sqrt(2 delta M)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006) higher-order optimum: sqrt(2dM)[1 + sqrt(d/2M)/3 + (d/2M)/9] - d for d < 2M, else M."""
    if delta_s >= 2 * mtbf_s:
        return mtbf_s
    x = delta_s / (2 * mtbf_s)
    return math.sqrt(2 * delta_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - delta_s


@dataclass
class Failure:
    """One instance failure (a row of failures.csv); the recovery times are those spent after it (until the
    run resumed, the next failure struck or the window ended)."""

    index: int
    time_h: float            # when it struck, hours from the start
    instance: int            # which instance failed
    during: str              # training | detection | restart | restore
    steps_done: int          # steps completed when it struck
    restart_step: int        # the last durable checkpoint: training resumes there
    steps_lost: int          # completed steps rolled back
    lost_work_s: float       # seconds of rolled-back work (including the step under way)
    detection_s: float = 0.0
    restart_s: float = 0.0
    restore_s: float = 0.0


@dataclass
class GoodputResult:
    """A long run's outcome. Times in seconds unless named otherwise."""

    scenario: str
    hours: float
    wall_s: float
    useful_s: float
    lost: dict[str, float]
    failures: list[Failure]
    steps_kept: int
    steps_run: int
    checkpoints: int
    busy_s: float
    step_s: float
    every_steps: int
    mtbf_system_s: float
    checkpoint_block_s: float
    checkpoint_write_s: float
    restore_s: float
    recovery_s: float
    explicit_steps: int
    emulation_wall_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def goodput(self) -> float:
        return self.useful_s / self.wall_s if self.wall_s > 0 else float("nan")

    def summary(self) -> dict:
        """goodput.json: goodput, failures, time lost by cause, the optimal interval beside the configured one."""
        m = self.mtbf_system_s
        finite = math.isfinite(m)
        d = self.checkpoint_block_s
        tau = self.every_steps * self.step_s if self.every_steps else float("nan")
        young = young_interval(d, m) if finite and d > 0 else float("nan")
        daly = daly_interval(d, m) if finite and d > 0 else float("nan")
        # Daly over the wall time of a period, times the share of a step that is not data stall
        wait = max(0.0, self.checkpoint_write_s - tau) if self.extra.get("checkpoint_mode") == "async" else 0.0
        closed = self.busy_s / self.step_s * daly_goodput(tau, d + wait, self.recovery_s, m) if self.every_steps \
            else float("nan")     # an async write longer than the period: each checkpoint waits for the last
        during = {}
        for f in self.failures:
            during[f.during] = during.get(f.during, 0) + 1
        return {
            "scenario": self.scenario,
            "hours": self.hours,
            "wall_s": self.wall_s,
            "useful_s": self.useful_s,
            "goodput": self.goodput,
            "failures": len(self.failures),
            "failures_by_phase": during,
            "expected_failures": self.wall_s / m if finite else 0.0,
            "mtbf_system_hours": m / 3600 if finite else None,
            "lost_s": dict(self.lost),
            "lost_fraction": {k: v / self.wall_s for k, v in self.lost.items()},
            "steps_kept": self.steps_kept,
            "steps_run": self.steps_run,
            "checkpoints": self.checkpoints,
            "step_busy_s": self.busy_s,
            "step_s": self.step_s,
            "checkpoint_every_steps": self.every_steps,
            "checkpoint_interval_s": tau,
            "checkpoint_block_s": d,
            "checkpoint_write_s": self.checkpoint_write_s,
            "restore_s": self.restore_s,
            "recovery_s": self.recovery_s,
            "optimal_interval_s": young,
            "optimal_interval_steps": young / self.step_s if young == young else None,
            "optimal_interval_daly_s": daly,
            "closed_form_goodput": closed,
            "explicit_steps": self.explicit_steps,
            "emulation_wall_s": self.emulation_wall_s,
            **self.extra,
        }

    def failure_rows(self) -> list[dict]:
        return [asdict(f) for f in self.failures]


class _Failures:
    """Failure times (a Poisson process at `rate` per second) and failing instances, from the seed."""

    def __init__(self, seed: int, rate: float, instances: int):
        self.rng = np.random.default_rng([seed, 0x6F0D])
        self.rate, self.instances = rate, instances
        self.t = 0.0

    def next(self) -> tuple[float, int]:
        if self.rate <= 0:
            return math.inf, -1
        self.t += float(self.rng.exponential(1.0 / self.rate))
        return self.t, int(self.rng.integers(self.instances))


def storage_costs(scenario, cluster, server=None) -> StorageCosts:
    """A StorageCosts on `server`, or on a fresh in-process file system (None when there is no storage)."""
    if server is None and scenario.storage is not None:
        server = StorageServer(fsx_spec(scenario.storage, cluster.links.efa_bytes_per_s), cluster.instances)
    return StorageCosts(scenario, cluster, server)


def simulate(scenario, cluster, busy_s: float, hours: float, costs: StorageCosts | None = None,
             storage: StorageFigures | None = None) -> GoodputResult:
    """Emulate `hours` of wall-clock training.

    Args:
        scenario: the resolved scenario (`faults`, `checkpoint`, `storage`, `seed`).
        cluster: its cluster.
        busy_s: seconds one step computes and communicates (the replayed step time without storage).
        hours: wall-clock hours to emulate.
        costs: the storage costs to use (default: a fresh in-process file system, see `storage_costs`).
        storage: the run's storage figures (`RunResult.storage`); None: computed here from the cluster.

    Returns:
        The GoodputResult.
    """
    import time

    wall0 = time.perf_counter()
    H = float(hours) * 3600.0
    f = scenario.faults
    mtbf = f.instance_mtbf_hours * 3600.0 if f and f.instance_mtbf_hours else math.inf
    detect = f.detect_minutes * 60.0 if f else 0.0
    restart = f.restart_minutes * 60.0 if f else 0.0
    costs = costs or storage_costs(scenario, cluster)
    every = costs.every
    draws = _Failures(scenario.seed, cluster.instances / mtbf, cluster.instances)
    lost = dict.fromkeys(CAUSES, 0.0)
    useful = 0.0
    pending: list[StepSpan] = []
    kept = 0
    failures: list[Failure] = []
    explicit = 0
    run_spans: list[StepSpan] = []

    def commit(upto: int) -> None:
        nonlocal useful, kept
        while pending and pending[0].first < upto:
            c = pending[0]
            n = min(c.n, upto - c.first)
            useful += n * c.busy_s
            lost["checkpoint_s"] += n * c.checkpoint_s
            lost["data_stall_s"] += n * c.data_stall_s
            kept = c.first + n
            if n == c.n:
                pending.pop(0)
            else:
                pending[0] = StepSpan(c.first + n, c.n - n, c.busy_s, c.data_stall_s, c.checkpoint_s)

    t_fail, who = draws.next()
    t = 0.0
    while t < H:
        limit = min(t_fail, H)
        t_before = costs.now()
        prog = costs.run(busy_s, 1 << 60, t_limit=limit)
        explicit += prog.explicit_steps
        pending += prog.spans
        run_spans += prog.spans
        for covered, _ in prog.durable:
            commit(covered)
        done_s = sum(c.n * c.step_s for c in prog.spans)
        partial = max(0.0, limit - t_before - done_s)
        if limit >= H:                          # the window ends: completed steps are kept, the last in progress
            commit(1 << 60)
            useful += partial
            t = H
            break
        # a failure at t_fail
        steps_done = costs.step
        costs.fail(t_fail)
        for covered, _ in costs.durable:
            commit(covered)
        costs.durable = []
        rolled = sum(c.n * c.step_s for c in pending)
        lost["lost_work_s"] += rolled + partial
        restart_step = costs.durable_step
        failures.append(Failure(len(failures), t_fail / 3600, who, "training", steps_done, restart_step,
                                steps_done - restart_step, rolled + partial))
        pending = []
        t = t_fail
        t_fail, who = draws.next()
        # recovery: detection, restart, restore; a failure meanwhile starts it over
        while t < H:
            struck = None
            for phase, cause, length in (("detection", "detection_s", detect), ("restart", "restart_s", restart)):
                end = t + length
                stop = min(end, t_fail, H)
                costs.idle(stop)
                lost[cause] += stop - t
                setattr(failures[-1], cause, getattr(failures[-1], cause) + stop - t)
                t = stop
                if stop < end:
                    struck = phase
                    break
            if struck is None and t < H:
                t0 = t
                done = costs.restore(limit=min(t_fail, H))
                t = done if done is not None else min(t_fail, H)
                lost["restore_s"] += t - t0
                failures[-1].restore_s += t - t0
                if done is None:
                    struck = "restore"
            if t >= H:
                break
            if struck is None:
                break
            failures.append(Failure(len(failures), t_fail / 3600, who, struck, restart_step, restart_step, 0, 0.0))
            costs.fail(t_fail)
            t = t_fail
            t_fail, who = draws.next()
        if t >= H:
            break
        costs.resume(restart_step)
    steps_run = sum(c.n for c in run_spans)
    n_ckpt = sum((c.first + c.n) // every - c.first // every for c in run_spans) if every else 0
    ck_total = sum(c.n * c.checkpoint_s for c in run_spans)
    stall_total = sum(c.n * c.data_stall_s for c in run_spans)
    fig = storage if storage is not None else figures(scenario, cluster)
    restore_s = float(fig.restore_s or 0.0) if fig else 0.0
    block = ck_total / n_ckpt if n_ckpt else (fig.checkpoint_block_s or 0.0 if fig else 0.0)
    return GoodputResult(
        scenario=scenario.name, hours=float(hours), wall_s=H, useful_s=useful, lost=lost, failures=failures,
        steps_kept=kept, steps_run=steps_run, checkpoints=n_ckpt, busy_s=float(busy_s),
        step_s=float(busy_s + (stall_total / steps_run if steps_run else 0.0)), every_steps=every,
        mtbf_system_s=mtbf / cluster.instances, checkpoint_block_s=float(block),
        checkpoint_write_s=float(fig.checkpoint_write_s or 0.0) if fig else 0.0, restore_s=float(restore_s),
        recovery_s=detect + restart + restore_s, explicit_steps=explicit,
        emulation_wall_s=time.perf_counter() - wall0, extra={"checkpoint_mode": costs.mode if every else None})


# `run --hours` draws and replays every failure (about 0.1 ms each on one core: 460,164 failures in 50 s, measured
# on faults-llama3-70b-trn2-sync.yaml over 720 h with a 0.1 h MTBF), so the failures a long run expects are bounded;
# and the hours themselves, to ten years.
MAX_EXPECTED_FAILURES = 100_000
MAX_HOURS = 87_600.0


def check_hours(scenario, hours: float) -> list:
    """The problems of `run --hours H` with this scenario, found before anything runs: H a number of hours > 0 and at
    most MAX_HOURS, and at most MAX_EXPECTED_FAILURES failures expected (H x instances / instance_mtbf_hours)."""
    from .errors import Problem

    if not (isinstance(hours, (int, float)) and not isinstance(hours, bool) and math.isfinite(hours) and hours > 0):
        return [Problem("--hours", hours, "a number of hours > 0")]
    if hours > MAX_HOURS:
        return [Problem("--hours", hours, f"at most {MAX_HOURS:,.0f} hours (ten years)")]
    f = scenario.faults
    if f is None or not f.instance_mtbf_hours:
        return []
    n = scenario.cluster.instances
    expected = hours * n / f.instance_mtbf_hours
    if expected <= MAX_EXPECTED_FAILURES:
        return []
    least = hours * n / MAX_EXPECTED_FAILURES
    return [Problem("faults.instance_mtbf_hours", f.instance_mtbf_hours, (
        f"with --hours {hours:g} on {n:,} instances, at least {least:.4g} hours: --hours x cluster.instances / "
        f"instance_mtbf_hours = {expected:,.0f} expected failures, more than the {MAX_EXPECTED_FAILURES:,} a long run "
        f"replays; or fewer --hours (at most {MAX_EXPECTED_FAILURES * f.instance_mtbf_hours / n:.4g})"))]


def long_run(scenario, busy_s: float, hours: float, storage: StorageFigures | None = None,
             cluster=None) -> GoodputResult:
    """`ultracluster run --hours H`: emulate H hours with the replayed step as the unit of work.

    Args:
        scenario: the resolved scenario.
        busy_s: seconds a replayed step computes and communicates (its mean step time less its data stall
            and checkpoint stall).
        hours: wall-clock hours to emulate.
        storage: the run's storage figures (`Report.storage`); None: computed from the cluster.
        cluster: the run's cluster; None: built from the scenario. Data loading, checkpoints and restores
            run through a fresh in-process copy of the file system model on it.
    """
    from .cluster import build_cluster
    from .errors import ScenarioError

    problems = check_hours(scenario, hours)
    if problems:
        raise ScenarioError(problems)
    return simulate(scenario, cluster if cluster is not None else build_cluster(scenario, 1), float(busy_s), hours,
                    storage=storage)


def format_goodput(g: dict) -> str:
    """goodput.json (see GoodputResult.summary) as the table `ultracluster run --hours` prints."""
    def h(seconds: float) -> str:
        return f"{seconds / 3600:10.2f} h"

    wall = g["wall_s"]
    mtbf = g["mtbf_system_hours"]
    rows = [
        ("goodput", f"{100 * g['goodput']:.2f} %  (useful training time / wall time; closed form "
                    f"{100 * g['closed_form_goodput']:.2f} %)" if g["closed_form_goodput"] == g["closed_form_goodput"]
         else f"{100 * g['goodput']:.2f} %"),
        ("wall time", f"{g['hours']:,.1f} h emulated in {g['emulation_wall_s']:.2f} s"),
        ("failures", f"{g['failures']} (expected {g['expected_failures']:.1f}; system MTBF "
                     + (f"{mtbf:.2f} h)" if mtbf else "none)")),
        ("steps", f"{g['steps_kept']:,} kept of {g['steps_run']:,} run; {g['checkpoints']:,} checkpoints"),
        ("time", ""),
        ("  useful", f"{h(g['useful_s'])}  {100 * g['useful_s'] / wall:5.1f} %"),
    ] + [(f"  {k.removesuffix('_s').replace('_', ' ')}", f"{h(v)}  {100 * v / wall:5.1f} %")
         for k, v in g["lost_s"].items()]
    every = g["checkpoint_every_steps"]
    if every:
        rows.append(("checkpoint", f"every {every} steps = {g['checkpoint_interval_s']:,.0f} s; blocks "
                                   f"{g['checkpoint_block_s']:.2f} s, writes {g['checkpoint_write_s']:.1f} s"))
    if g["optimal_interval_s"] == g["optimal_interval_s"]:
        rows.append(("optimal interval", f"{g['optimal_interval_s']:,.0f} s = {g['optimal_interval_steps']:,.0f} "
                                         f"steps (Young, sqrt(2 x block x MTBF)); Daly "
                                         f"{g['optimal_interval_daly_s']:,.0f} s"))
        if g.get("checkpoint_mode") == "async" and g["optimal_interval_s"] < g["checkpoint_write_s"]:
            rows.append(("", f"(async: a write takes {g['checkpoint_write_s']:,.0f} s, so checkpoints cannot "
                             f"come faster than that)"))
    rows.append(("recovery", f"{g['recovery_s']:.0f} s per failure (detection + restart + restore "
                             f"{g['restore_s']:.1f} s)"))
    if "time_to_train_days" in g:
        rows.append(("to train", budget_text(g.get("time_to_train_days"), g.get("total_cost_usd"),
                                             g.get("price_source"), "at this goodput")))
    rows += [("warning", w) for w in g.get("warnings") or []]   # figures that are 0 because their model is off
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}".rstrip() for label, value in rows)


def budget_text(days, usd, source: str | None, how: str = "") -> str:
    """The days and dollars of a training budget in words: "12.4 days, $1,234,567 (catalog ...)", the hint where the
    price is unknown, or how to name a budget."""
    if days is None or not isinstance(days, (int, float)):
        return "set training.budget_tokens (or budget_steps) for the days and dollars to train"
    if not math.isfinite(days):
        return "never: every failure restarts the job from its first step (set checkpoint and storage)"
    cost = f"${usd:,.0f} ({source})" if isinstance(usd, (int, float)) and math.isfinite(usd) else \
        (source if source == NO_PRICE_HINT else NO_PRICE_HINT)
    return f"{days:,.2f} days{' ' + how if how else ''}, {cost}"
