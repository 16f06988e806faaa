"""`faults.degraded`: instances with fewer EFA NICs or slower NeuronLink slow the collectives and sends that
touch them, the slowest member setting the pace; without the key nothing changes."""
import numpy as np
import pytest

from ultracluster import chip, load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.errors import ScenarioError
from ultracluster.network import collective_cost, group_of
from ultracluster.runner import predict
from ultracluster.replay.degraded import degraded_groups
from ultracluster.replay.engine import step_comm as plan_comm


def step_comm(sc, cl):
    """The step's comm with the chip model's hiding matmuls (in a run: what the shards report)."""
    return plan_comm(sc, cl, chip.tp_hide_seconds(sc, cl))


def small(*overrides):
    """trn1, 2 instances, tp 32 (one instance per replica), dp 2: each DP group is one rank on each instance."""
    return load_scenario({"name": "degraded", "model": {"preset": "llama2-7b"},
                          "training": {"seq_len": 4096, "global_batch": 8, "steps": 1},
                          "parallelism": {"tp": 32, "pp": 1},
                          "cluster": {"instance": "trn1.32xlarge", "instances": 2}}, list(overrides))


def test_half_the_nics_doubles_the_efa_part_of_the_dp_reduction():
    sc, deg = small(), small("faults.degraded=[{instances: [1], efa_nics: 4}]")
    c, cd = build_cluster(sc, 1), build_cluster(deg, 1)
    assert cd.degraded[0].instances == (1,) and cd.degraded[0].efa_scale == 0.5
    healthy, slowed = step_comm(sc, c), step_comm(deg, cd)
    # closed form: the reduction is bound by the NICs, so half of them double its transfer time, and its
    # latency, step and launch costs stay
    op = "reduce_scatter" if sc.training.zero >= 1 else "all_reduce"
    nbytes = healthy.records[[r.group for r in healthy.records].index("dp")].bytes
    busy, other, _ = collective_cost(c, op, nbytes, group_of(c, 2, 32))
    assert healthy.dp_bucket_s[0] == pytest.approx(busy + other, rel=1e-6)
    assert slowed.dp_bucket_s[0] == pytest.approx(2 * busy + other, rel=1e-6)
    assert slowed.dp_after_s[0] > healthy.dp_after_s[0]
    # tensor parallelism stays inside an instance (NeuronLink): untouched
    np.testing.assert_array_equal(slowed.replica_tp_fwd, np.broadcast_to(healthy.tp_fwd, (2, 1)))
    a, b = predict(sc), predict(deg)
    assert b["dp_comm_s"] > a["dp_comm_s"] and b["step_time_s"] > a["step_time_s"]
    assert b["tp_comm_s"] == a["tp_comm_s"]


def test_slower_neuronlink_slows_only_the_replicas_on_it(scenarios_dir):
    from ultracluster.shards.local import local_shards
    from ultracluster.runner import run

    sets = ["training.steps=1", "faults.jitter=0"]
    base = run(load_scenario(scenarios_dir / "smoke.yaml", sets), shards_factory=local_shards)
    rep = run(load_scenario(scenarios_dir / "smoke.yaml", sets + ["faults.degraded=[{instances: [0], "
                                                                  "neuronlink_scale: 0.5}]"]),
              shards_factory=local_shards)
    # smoke: tp 8, pp 2, dp 4 on 2 trn1 instances; replicas 0 and 1 sit on instance 0
    r, r0 = rep.ranks.set_index(["replica", "stage"]), base.ranks.set_index(["replica", "stage"])
    slow = r["tp_comm_s"] > r0["tp_comm_s"] * 1.01
    assert sorted({d for d, _ in slow[slow].index}) == [0, 1]
    np.testing.assert_allclose(r["tp_comm_s"][~slow], r0["tp_comm_s"][~slow])
    assert rep.summary["step_time_s"] > base.summary["step_time_s"]
    assert rep.summary["tp_comm_s"] > base.summary["tp_comm_s"]
    s = rep.summary
    fixed = s["data_stall_s"] + s["checkpoint_s"] + s["other_s"]
    assert (rep.ranks["compute_s"] + rep.ranks["exposed_comm_s"] + rep.ranks["idle_s"] + fixed).to_numpy() \
        == pytest.approx(s["step_time_s"], rel=1e-12)
    assert (rep.ranks["idle_s"] >= -1e-12).all()
    last = rep.steps.iloc[-1]
    crit = rep.ranks[(rep.ranks["replica"] == last["critical_replica"]) &
                     (rep.ranks["stage"] == last["critical_stage"])].iloc[0]
    assert crit["exposed_comm_s"] == pytest.approx(s["tp_comm_s"] + s["dp_comm_s"], rel=1e-9)
    parts = sum(s[k] for k in ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s", "data_stall_s",
                               "checkpoint_s", "other_s"))
    assert parts == pytest.approx(s["step_time_s"], rel=1e-9)


def test_no_degraded_key_changes_nothing(scenarios_dir):
    sc = load_scenario(scenarios_dir / "smoke.yaml")
    same = load_scenario(scenarios_dir / "smoke.yaml", ["faults.degraded=[]"])
    assert predict(sc) == predict(same)
    comm = step_comm(sc, build_cluster(sc, 1))
    assert comm.replica_tp_fwd is None and comm.replica_send_fwd is None


def test_a_count_draws_the_same_distinct_instances_from_the_seed():
    def parts(seed):
        sc = load_scenario({"name": "d", "seed": seed, "model": {"preset": "llama2-7b"},
                            "training": {"seq_len": 4096, "global_batch": 64},
                            "parallelism": {"tp": 32},
                            "cluster": {"instance": "trn1.32xlarge", "instances": 16},
                            "faults": {"degraded": [{"instances": 5, "efa_nics": 2}]}})
        return build_cluster(sc, 1).degraded[0].instances

    assert parts(3) == parts(3) and len(set(parts(3))) == 5 and all(0 <= i < 16 for i in parts(3))
    assert parts(3) != parts(4)


def test_degraded_groups_are_the_groups_with_a_rank_there():
    sc = load_scenario({"name": "d", "model": {"preset": "llama2-7b"},
                        "training": {"seq_len": 4096, "global_batch": 64},
                        "parallelism": {"tp": 8, "pp": 2}, "cluster": {"instance": "trn1.32xlarge", "instances": 4}})
    hit = degraded_groups(build_cluster(sc, 1), [2])
    # 32 ranks per instance, 16 per replica: instance 2 holds replicas 4 and 5, both stages
    assert hit.shape == (8, 2) and np.argwhere(hit).tolist() == [[4, 0], [4, 1], [5, 0], [5, 1]]


@pytest.mark.parametrize("entry, path, words", [
    ("{instances: [0, 7], efa_nics: 2}", "faults.degraded[0].instances", "instance ids 0 .. 1"),
    ("{instances: 3, efa_nics: 2}", "faults.degraded[0].instances", "at most cluster.instances (2)"),
    ("{instances: [1], efa_nics: 9}", "faults.degraded[0].efa_nics", "1 .. 8"),
    ("{instances: [1], efa_nics: 0}", "faults.degraded[0].efa_nics", ">= 1"),
    ("{instances: [1], neuronlink_scale: 0}", "faults.degraded[0].neuronlink_scale", ">= 0.001 and <= 1"),
    ("{instances: [1], neuronlink_scale: 1.5}", "faults.degraded[0].neuronlink_scale", ">= 0.001 and <= 1"),
    ("{instances: [1, 1], efa_nics: 1}", "faults.degraded[0].instances", "distinct instance ids"),
    ("{instances: 0, efa_nics: 1}", "faults.degraded[0].instances", "a count of instances"),
    ("{instances: [1]}", "faults.degraded[0]", "efa_nics, neuronlink_scale or both"),
])
def test_bad_degraded_entries_name_the_field(scenarios_dir, entry, path, words):
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenarios_dir / "smoke.yaml", [f"faults.degraded=[{entry}]"])
    assert [p.path for p in err.value.problems] == [path] and words in err.value.problems[0].allowed


def test_the_documented_example_loads():
    import re
    from pathlib import Path

    import yaml

    doc = (Path(__file__).resolve().parents[2] / "docs" / "scenarios.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", doc, re.S)]
    full = next(b for b in blocks if isinstance(b, dict) and "name" in b)
    extra = next(b for b in blocks if isinstance(b, dict) and "degraded" in (b.get("faults") or {}))
    sc = load_scenario({**full, "faults": {**full["faults"], **extra["faults"]}})
    parts = build_cluster(sc, 1).degraded
    assert parts[0].instances == (3, 17) and parts[0].efa_scale == 0.5
    assert len(parts[1].instances) == 4 and parts[1].neuronlink_scale == 0.8
