"""A resolved job: one layout of one scenario, fully derived, and `evaluate`, the one boundary every command's
evaluation goes through.

A `Job` is built once, from a scenario (`Job.of`: a Scenario, a YAML path, its dict or the `scenario.json` a run
wrote, with `--set` overrides: a sweep variant is the base scenario with its varied keys) or from a plan row
(`Job.of_row`: `layouts.evaluator.layout_scenario`, the one rule from a row to its scenario), with the same result
for the same layout (tests/plan/test_job.py). It carries which stack-filled keys the user gave (`explicit`), so the job
reloaded from its own document (`Job.of(job.document())`) is the same job, timed the same, and it reads off the
scenario what a layout derives, each from the one module that owns the rule: its degrees (`layout`,
`cluster.placement.Layout`) and where each stage's ranks sit (`placement`, `cluster.placement`), microbatches per replica (`step.counts`), ranks per instance (`cluster.catalog`), the
stack's filled defaults (`stacks.filled`), the plan-table row (`row`) and its validity (`problems`,
`scenario.checks`, the rules `load_scenario` applies).

`evaluate(jobs, calibration, fidelity)` times jobs by one of two implementations, tested equal
(tests/plan/test_job.py, tests/plan/test_steps_vs_run.py): "replay", the replay `run` runs (`emulate.in_process`, one job
at a time, `runner.predict`'s numbers), and "fast", the planner's fast path over many jobs at once
(`layouts.steps.evaluate`, one table per base scenario). Both give the same keys (`FIGURES`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import stacks
from .cluster import Layout
from .calibration.factors import Calibration
from .cluster.catalog import INSTANCES, ranks_per_instance
from .cluster.placement import group_first_rank, group_ranks, instance_of
from .errors import Problem
from .layouts.evaluator import LAYOUT_COLUMNS, layout_scenario
from .scenario import Scenario, load_scenario
from .scenario.checks import check
from .step.counts import scenario_microbatches

FIDELITIES = ("replay", "fast")
#: What `evaluate` gives for every job, whichever implementation times it
FIGURES = ("feasible", "reason", "step_time_s", "tokens_per_s", "seq_per_s", "mfu", "hbm_peak_gib")


@dataclass(frozen=True)
class Job:
    """One layout of one scenario, resolved: the stack's defaults filled where the user gave no value."""

    scenario: Scenario

    @classmethod
    def of(cls, source: Scenario | str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> "Job":
        """The job of a scenario (validated by `load_scenario`; a Scenario without overrides as it is)."""
        if isinstance(source, Scenario):
            if not overrides:
                return cls(source)
            source = source.to_dict()       # (with its explicit keys: reloaded, the same scenario)
        return cls(load_scenario(source, overrides))

    @classmethod
    def of_row(cls, base: Scenario, row: Any, name: str | None = None) -> "Job":
        """The job of a plan row (`LAYOUT_COLUMNS`, a dict or a table row) of `base`: the row's stack running it."""
        return cls(layout_scenario(base, row, name))

    @property
    def layout(self) -> Layout:
        p = self.scenario.parallelism
        return Layout(tp=p.tp, cp=p.cp, pp=p.pp, dp=p.dp, virtual_stages=p.virtual_stages)

    @property
    def microbatches(self) -> int:
        """Microbatches each data-parallel replica runs per step."""
        return scenario_microbatches(self.scenario)

    @property
    def ranks_per_instance(self) -> int:
        c = self.scenario.cluster
        return ranks_per_instance(INSTANCES[c.instance], c.lnc)

    @property
    def explicit(self) -> frozenset[str]:
        """The stack-filled keys the user gave (`stacks.explicit_keys`); empty when unknown."""
        return stacks.explicit(self.scenario) or frozenset()

    @property
    def filled(self) -> dict[str, Any]:
        """The keys the stack filled, with their values (what `validate` prints)."""
        return stacks.filled(self.scenario)

    def placement(self, replica: int = 0) -> list[tuple[int, int]]:
        """(first, last) instance of each pipeline stage of a data-parallel replica: where its tp x cp ranks sit
        (`cluster.placement`: tp, then cp, then pp inside a replica, replicas one after another)."""
        lay, rpi = self.layout, self.ranks_per_instance
        first = group_first_rank(lay.tp, lay.cp, lay.pp, replica, np.arange(lay.pp))
        last = first + group_ranks(lay.tp, lay.cp) - 1
        return list(zip(instance_of(first, rpi).tolist(), instance_of(last, rpi).tolist()))

    def row(self) -> dict[str, Any]:
        """The job as a plan-table row (`LAYOUT_COLUMNS` and `microbatches`): `Job.of_row(base, job.row())` is
        this job again for a base of the same model and training."""
        sc = self.scenario
        p, t, c = sc.parallelism, sc.training, sc.cluster
        return {"stack": sc.stack, "instance": c.instance, "instances": c.instances, "lnc": c.lnc, "tp": p.tp,
                "pp": p.pp, "cp": p.cp, "ep": p.ep, "dp": p.dp, "micro_batch": t.micro_batch,
                "recompute": t.recompute, "pp_schedule": p.pp_schedule, "virtual_stages": p.virtual_stages,
                "zero": t.zero, "sequence_parallel": p.sequence_parallel, "microbatches": self.microbatches}

    def problems(self) -> list[Problem]:
        """Every cross-field rule the job breaks ([] for a valid job: one `load_scenario` accepts)."""
        sc = self.scenario
        return check(sc.model, sc.training, sc.parallelism, sc.cluster, faults=sc.faults)

    def document(self) -> dict[str, Any]:
        """The job's `scenario.json`: `Job.of(document)` gives it back."""
        return self.scenario.to_dict()


def _base_key(job: Job) -> str:
    """What a job shares with the others of its plan table: its document less the layout's keys, the name and the
    keys its stack filled (a row's stack fills them again, `layout_scenario`)."""
    doc = job.document()
    doc.pop("name", None)
    doc.pop("stack", None)
    for key in (*job.filled, *(f"{s}.{k}" for s in ("parallelism", "training", "cluster") for k in LAYOUT_COLUMNS),
                "training.zero1"):
        section, name = key.split(".")
        if isinstance(doc.get(section), dict):
            doc[section].pop(name, None)
    return json.dumps(doc, sort_keys=True, default=str)


def evaluate(jobs: Sequence[Job], calibration: Calibration | None = None, fidelity: str = "replay") -> list[dict]:
    """Each job's `FIGURES`, in order, timed by the replay (`runner.predict`) or the fast path (`layouts.steps`).

    Raises:
        ValueError: an unknown fidelity; "fast" for a job with degraded instances (the planner's search times
            healthy clusters: `faults.degraded` is the replay's).
    """
    if fidelity not in FIDELITIES:
        raise ValueError(f"fidelity: given {fidelity!r}; allowed: {', '.join(FIDELITIES)}")
    hurt = [j.scenario.name for j in jobs if fidelity == "fast" and j.scenario.faults and j.scenario.faults.degraded]
    if hurt:
        raise ValueError(f"fidelity: given 'fast' for {', '.join(hurt)} with faults.degraded; allowed: 'replay' "
                         "(the fast path times healthy clusters)")
    if fidelity == "replay":
        from .runner import predict

        return [{k: s.get(k) for k in FIGURES} for s in (predict(j.scenario, calibration) for j in jobs)]
    import pandas as pd

    from .layouts import steps

    out: list[dict | None] = [None] * len(jobs)
    groups: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(_base_key(job), []).append(i)
    for members in groups.values():
        base = jobs[members[0]].scenario
        table = pd.DataFrame([jobs[i].row() for i in members])
        res = steps.evaluate(steps.Evaluator(base, calibration), table)
        for i, rec in zip(members, res.to_dict("records")):
            ok, seq = bool(rec["feasible"]), jobs[i].scenario.training.seq_len
            got = {**rec, "feasible": ok, "reason": None if ok else rec["reason"],
                   "seq_per_s": float(rec["tokens_per_s"]) / seq}
            out[i] = {k: got[k] if k in ("feasible", "reason") else float(got[k]) for k in FIGURES}
    return out  # type: ignore[return-value]
