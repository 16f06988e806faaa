"""The resolved job (`ultracluster.job`): built from a scenario, a plan row or a sweep variant, the same job for the
same layout; its own document reloads to the same job, timed the same; `evaluate`'s two implementations agree."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from ultracluster.job import FIGURES, Job, evaluate
from ultracluster.layouts.space import SearchSpace, enumerate_layouts
from ultracluster import stacks

from plan_scenarios import variant

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SMALL = variant(name="job-small")
# one row per kind of job: each stack that runs on trn1, with and without a pipeline, ZeRO-1, interleaving
ROWS = [
    {"stack": "neuronx-distributed", "tp": 8, "pp": 2, "pp_schedule": "1f1b", "zero": 1},
    {"stack": "neuronx-distributed", "tp": 8, "pp": 1, "pp_schedule": "1f1b", "zero": 1},
    {"stack": "neuronx-nemo-megatron", "tp": 8, "pp": 2, "pp_schedule": "interleaved", "zero": 0},
    {"stack": "neuronx-nemo-megatron", "tp": 4, "pp": 1, "pp_schedule": "1f1b", "zero": 0},
    {"stack": "megatron-lm-neuron", "tp": 8, "pp": 1, "pp_schedule": "1f1b", "zero": 0},
    {"stack": "custom", "tp": 16, "pp": 2, "pp_schedule": "1f1b", "zero": 1},
]


@pytest.fixture(scope="module")
def table():
    base = Job.of(SMALL).scenario
    return base, enumerate_layouts(base, SearchSpace(stacks=stacks.NAMES))


def pick(table, want: dict) -> dict:
    t = table
    hit = np.ones(len(t), dtype=bool)
    for k, v in want.items():
        hit &= (t[k] == v).to_numpy()
    hit &= (t["micro_batch"] == 1).to_numpy() & (t["cp"] == 1).to_numpy() & (t["recompute"] == "selective").to_numpy()
    rows = np.flatnonzero(hit)
    assert rows.size, want
    return t.iloc[int(rows[0])].to_dict()


def as_sets(row: dict) -> list[str]:
    """The row as a sweep variant's `--set` keys."""
    return [f"stack={row['stack']}", f"parallelism.tp={row['tp']}", f"parallelism.pp={row['pp']}",
            f"parallelism.cp={row['cp']}", f"parallelism.pp_schedule={row['pp_schedule']}",
            f"parallelism.virtual_stages={row['virtual_stages']}", f"training.zero={row['zero']}",
            f"training.micro_batch={row['micro_batch']}", f"training.recompute={row['recompute']}",
            f"parallelism.sequence_parallel={str(bool(row['sequence_parallel'])).lower()}"]


@pytest.mark.parametrize("want", ROWS, ids=lambda w: f"{w['stack']}-tp{w['tp']}-pp{w['pp']}-{w['pp_schedule']}")
def test_a_row_a_variant_and_a_reload_are_one_job(table, want):
    base, t = table
    row = pick(t, want)
    from_row = Job.of_row(base, row)
    doc = copy.deepcopy(SMALL)
    doc.pop("parallelism")
    variant = Job.of(doc, as_sets(row))                 # how `sweep` builds it (without the base's own layout)
    assert from_row.scenario.parallelism == variant.scenario.parallelism
    assert from_row.scenario.training == variant.scenario.training
    assert from_row.scenario.cluster == variant.scenario.cluster
    assert from_row.scenario.model == variant.scenario.model
    for job in (from_row, variant):
        assert not job.problems()
        assert job.row() == {**{k: row[k] for k in job.row()}, "microbatches": int(row["microbatches"])}
        assert job.microbatches == int(row["microbatches"]) and job.layout.dp == int(row["dp"])
        assert job.ranks_per_instance == 32
        back = Job.of(job.document())                      # scenario.json, reloaded
        assert back == job and back.explicit == job.explicit and back.filled == job.filled
    # built either way, the job is timed the same
    assert evaluate([from_row]) == evaluate([variant])


def test_a_reloaded_nemo_job_keeps_its_attention_and_its_time():
    """The issue's case: a reloaded scenario compared equal and ran `materialized` where NeMo's gave `flash`."""
    job = Job.of(SMALL, ["stack=neuronx-nemo-megatron", "training.attention=flash", "parallelism.pp=1"])
    back = Job.of(job.document())
    assert back.scenario.training.attention == "flash" and "training.attention" in back.explicit
    assert evaluate([job])[0] == evaluate([back])[0]


def test_the_replay_and_the_fast_path_agree(table):
    base, t = table
    jobs = [Job.of_row(base, pick(t, w)) for w in ROWS]
    jobs.append(Job.of(SCENARIOS / "llama3.1-70b-trn1-32.yaml"))       # another base: its own table
    replay, fast = evaluate(jobs, fidelity="replay"), evaluate(jobs, fidelity="fast")
    for r, f in zip(replay, fast):
        assert set(r) == set(f) == set(FIGURES)
        assert r["feasible"] == f["feasible"] and r["hbm_peak_gib"] == pytest.approx(f["hbm_peak_gib"], rel=1e-9)
        # the default 1 % jitter: the fast path runs each stage at its slowest replica's mean speed
        for k in ("step_time_s", "tokens_per_s", "seq_per_s", "mfu"):
            assert r[k] == pytest.approx(f[k], rel=0.01), k


def test_a_job_says_where_its_stages_sit():
    seventy = Job.of(SCENARIOS / "llama3.1-70b-trn1-32.yaml")             # tp 32 fills a trn1.32xlarge
    assert seventy.placement() == [(s, s) for s in range(8)]
    assert seventy.placement(replica=3) == [(24 + s, 24 + s) for s in range(8)]
    small = Job.of(SMALL, ["parallelism.tp=8", "parallelism.pp=2"])        # 32 ranks per instance: 2 replicas each
    assert small.placement() == [(0, 0), (0, 0)] and small.placement(replica=2) == [(1, 1), (1, 1)]
    wide = Job.of(SMALL, ["parallelism.tp=64", "parallelism.pp=1", "model.heads=64"])   # a stage over two instances
    assert wide.placement() == [(0, 1)]


def test_an_unknown_fidelity_is_refused():
    with pytest.raises(ValueError, match="fidelity: given 'exact'; allowed: replay, fast"):
        evaluate([Job.of(SMALL)], fidelity="exact")
    hurt = Job.of(SMALL, ["faults.degraded=[{instances: [1], efa_nics: 4}]"])
    with pytest.raises(ValueError, match="given 'fast' for job-small with faults.degraded; allowed: 'replay'"):
        evaluate([hurt], fidelity="fast")
    assert evaluate([hurt])[0]["step_time_s"] > evaluate([Job.of(SMALL)])[0]["step_time_s"]


def test_jobs_apart_only_in_their_ultraserver_are_timed_apart():
    base = Job.of(SCENARIOS / "llama3.1-70b-trn2-ultraserver.yaml")
    other = Job.of(base.document(), [f"cluster.ultraserver={str(not base.scenario.cluster.ultraserver).lower()}"])
    fast, replay = evaluate([base, other], fidelity="fast"), evaluate([base, other])
    assert fast[0]["step_time_s"] != fast[1]["step_time_s"]
    for f, r in zip(fast, replay):
        assert f["step_time_s"] == pytest.approx(r["step_time_s"], rel=0.01)


def test_a_row_job_reports_what_it_breaks(table):
    base, t = table
    row = {**pick(t, ROWS[0]), "tp": 3}                  # 16 heads over 3 ranks: no layout a search gives
    problems = Job.of_row(base, row).problems()
    assert problems and any("parallelism" in p.path for p in problems)


def test_the_shipped_scenarios_reload_as_the_same_jobs():
    for path in sorted(SCENARIOS.glob("*.yaml"))[:8]:
        job = Job.of(path)
        back = Job.of(yaml.safe_load(yaml.safe_dump(job.document())))
        assert back == job and back.filled == job.filled, path.name
