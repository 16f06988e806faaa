"""Run events → Prometheus metrics through `ray.util.metrics`, exported while the emulator runs.

Ray exports each metric with a `ray_` prefix (a Counter also gets `_total`) from the metrics agent of
every node; `dashboards/ultracluster.json` is the Grafana dashboard over them (docs/sources.md §4.6). Every
metric carries the tag `scenario` (the scenario's name); the breakdown gauge also `part`.

| metric (as exported)                             | kind    | meaning                                         |
| ------------------------------------------------ | ------- | ----------------------------------------------- |
| `ray_ultracluster_steps_done_total`              | counter | steps replayed (warm-up included)               |
| `ray_ultracluster_steps_planned`                 | gauge   | steps the run will replay                       |
| `ray_ultracluster_step_time_seconds`             | gauge   | emulated time of the last step                  |
| `ray_ultracluster_step_breakdown_seconds{part}`  | gauge   | its critical-path parts (compute, tp_comm, ...) |
| `ray_ultracluster_data_stall_seconds`            | gauge   | its data-loading stall                          |
| `ray_ultracluster_checkpoint_seconds`            | gauge   | its checkpoint stall                            |
| `ray_ultracluster_step_wall_seconds`             | gauge   | wall-clock seconds the emulator spent on it     |
| `ray_ultracluster_actors_alive`                  | gauge   | shard actors running                            |

Metrics are recorded in the driver, where the replay loop runs; with no Ray initialized (in-process
runs) `RunMetrics.create` returns a recorder that does nothing.
"""
from __future__ import annotations

import re

import ray

from ..replay.result import BREAKDOWN_KEYS

NAME_RULE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")   # Ray drops a metric whose name breaks it (sources §4.6)
PREFIX = "ray_"                                          # what Ray puts before every exported name
TAGS = ("scenario",)


class _Instruments:
    """The metric objects, made once per Ray session of this process."""

    def __init__(self):
        from ray.util.metrics import Counter, Gauge

        self.steps_done = Counter("ultracluster_steps_done", description="Steps replayed (warm-up included).",
                                  tag_keys=TAGS)
        self.steps_planned = Gauge("ultracluster_steps_planned", description="Steps the run will replay.",
                                   tag_keys=TAGS)
        self.step_time = Gauge("ultracluster_step_time_seconds",
                               description="Emulated time of the last replayed step, in seconds.", tag_keys=TAGS)
        self.breakdown = Gauge("ultracluster_step_breakdown_seconds",
                               description="Critical-path parts of the last step, in seconds (they add up to "
                                           "the step time).", tag_keys=TAGS + ("part",))
        self.data_stall = Gauge("ultracluster_data_stall_seconds",
                                description="Data-loading stall of the last step, in seconds.", tag_keys=TAGS)
        self.checkpoint = Gauge("ultracluster_checkpoint_seconds",
                                description="Checkpoint stall of the last step, in seconds.", tag_keys=TAGS)
        self.step_wall = Gauge("ultracluster_step_wall_seconds",
                               description="Wall-clock seconds the emulator spent on the last step.", tag_keys=TAGS)
        self.actors = Gauge("ultracluster_actors_alive", description="Shard actors running.", tag_keys=TAGS)


_INSTRUMENTS: tuple[str, _Instruments] | None = None   # (Ray job id, its metric objects)


class RunMetrics:
    """The emulator's Ray metrics for one run, tagged with its scenario name.

    Use `RunMetrics.create(scenario_name, steps)`; call `actors_alive` when actors start and stop and
    `step_done` after every step.
    """

    def __init__(self, scenario_name: str, steps: int):
        global _INSTRUMENTS
        job = ray.get_runtime_context().get_job_id()
        if _INSTRUMENTS is None or _INSTRUMENTS[0] != job:   # made again for a new Ray session
            _INSTRUMENTS = (job, _Instruments())
        self.m, self.tags = _INSTRUMENTS[1], {"scenario": str(scenario_name)}
        self.m.steps_planned.set(float(steps), tags=self.tags)

    @classmethod
    def create(cls, scenario_name: str, steps: int, enabled: bool = True) -> RunMetrics | _NoMetrics:
        """A recorder for this run: real metrics when Ray is initialized in this process (and `enabled`), else a
        no-op."""
        return cls(scenario_name, steps) if enabled and ray.is_initialized() else _NoMetrics()

    def actors_alive(self, n: int) -> None:
        self.m.actors.set(float(n), tags=self.tags)

    def step_done(self, rec) -> None:
        """Record one finished StepRecord."""
        m = self.m
        m.steps_done.inc(1.0, tags=self.tags)
        m.step_time.set(float(rec.step_time_s), tags=self.tags)
        for key in BREAKDOWN_KEYS:
            m.breakdown.set(float(getattr(rec, key)), tags={**self.tags, "part": key.removesuffix("_s")})
        m.data_stall.set(float(rec.data_stall_s), tags=self.tags)
        m.checkpoint.set(float(rec.checkpoint_s), tags=self.tags)
        m.step_wall.set(float(rec.wall_s), tags=self.tags)


class _NoMetrics:
    """Stands in for RunMetrics when Ray is not running in this process."""

    def actors_alive(self, n: int) -> None:
        pass

    def step_done(self, rec) -> None:
        pass

