"""Each shard answers for what it owns: once, its stage times and its slow ranks; per step, its groups' jitter,
drawn in the shard from a keyed stream; the driver's merges give the same profile and the same summary for any
folding."""
import numpy as np
import pytest

from ultracluster import chip, load_scenario, speed_draws
from ultracluster.shards.local import LocalShards
from ultracluster.cluster import build_cluster
from ultracluster.runner import predict
from ultracluster.replay.shard_steps import ShardStep, merge_degraded, merge_shard_steps, merge_states


def merged_state(shards, cl):
    lay = cl.layout
    return merge_states(shards.states(), lay.pp, lay.pp * lay.virtual_stages, cl.instances)


def scenario(instances_per_actor, tp=32, cp=2, instances=8, pp=1):
    return load_scenario({
        "name": "profile-test", "model": {"preset": "llama2-7b", "layers": 4},
        "training": {"seq_len": 4096, "global_batch": 64, "steps": 2, "warmup_steps": 1},
        "parallelism": {"tp": tp, "cp": cp, "pp": pp},
        "cluster": {"instance": "trn1.32xlarge", "instances": instances},
        "faults": {"jitter": 0.02, "stragglers": {"fraction": 0.02, "slowdown": 1.5}},
        "emulation": {"instances_per_actor": instances_per_actor},
    })


def test_a_shard_answers_for_its_own_groups_and_a_group_two_shards_hold_gets_one_value():
    sc = scenario(1)                          # tp 32 x cp 2 = 64 ranks: each group spans two trn1 instances
    cl = build_cluster(sc, 1)
    shards = LocalShards(sc, cl)
    state = merged_state(shards, cl)
    profs = shards.shard_steps(3)
    assert len(profs) == 8 and all(p.group_speed.size == 1 for p in profs)   # one group each, not 32 ranks
    assert [p.first_group for p in profs] == [0, 0, 1, 1, 2, 2, 3, 3]
    for a, b in zip(profs[::2], profs[1::2]):
        assert a.group_speed[0] == b.group_speed[0]
    lay = cl.layout
    want = speed_draws.group_jitter(sc.seed, 3, (lay.dp, lay.pp), lay.tp * lay.cp, 0.02).ravel()
    np.testing.assert_array_equal(merge_shard_steps(profs, state, lay.dp * lay.pp).group_speed, want)
    assert not np.array_equal(want, merge_shard_steps(shards.shard_steps(4), state, lay.dp * lay.pp).group_speed)
    with pytest.raises(ValueError, match="do not cover"):
        merge_shard_steps(profs[:3], state, lay.dp * lay.pp)


def test_a_step_carries_only_the_jitter_and_the_once_per_run_answers_are_merged_once(monkeypatch):
    """What is the same in every step (stage times, slow ranks) is sent once, in the shards' states, and merged
    once per run; a step's answer is the jitter of the shard's groups, and its merged profile shares the run's
    arrays (no copy per step)."""
    import ultracluster.emulate as em
    from ultracluster.shards.local import local_shards

    assert [f for f in ShardStep.__dataclass_fields__] == ["shard", "first_group", "group_speed"]
    sc = scenario(1, tp=32, cp=1, instances=8, pp=4)
    calls = []
    real = em.merge_states

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(em, "merge_states", counted)
    result = em.emulate(sc, local_shards)
    assert len(calls) == 1 and len(result.steps) == 3       # one warm-up and two measured steps, one merge
    cl = build_cluster(sc, 1)
    shards = LocalShards(sc, cl)
    state = merged_state(shards, cl)
    a, b = (merge_shard_steps(shards.shard_steps(s), state, cl.layout.dp * cl.layout.pp) for s in (0, 1))
    assert a.forward_s is b.forward_s is state.times.forward_s and a.slow_ranks is state.slow_ranks


def test_each_stage_is_timed_by_one_shard_that_runs_it_and_the_merge_puts_the_parts_together():
    sc = scenario(1, tp=32, cp=1, instances=8, pp=4)     # one stage per instance, two replicas
    cl = build_cluster(sc, 1)
    lay = cl.layout
    assert (lay.pp, lay.dp, len(cl.shards)) == (4, 2, 8)
    shards = LocalShards(sc, cl)
    states, profs = shards.states(), shards.shard_steps(0)
    # shard i runs stage i % 4; the replica-0 shards 0-3 time one stage each, the replica-1 shards none
    assert [s.stage_times.stages.tolist() for s in states] == [[0], [1], [2], [3], [], [], [], []]
    assert [s.stage_times.chunks.tolist() for s in states][:4] == [[0], [1], [2], [3]]
    for s, p, sh in zip(states, profs, cl.shards):
        held = np.unique(np.arange(p.first_group, p.first_group + p.group_speed.size) % lay.pp)
        st = s.stage_times
        assert set(st.stages.tolist()) <= set(held.tolist())
        assert st.forward_s.size == st.chunks.size and st.optimizer_s.size == st.stages.size
        assert ((s.slow_ranks >= sh.first_rank) & (s.slow_ranks < sh.first_rank + sh.ranks)).all()
    state = merge_states(states, lay.pp, lay.pp, cl.instances)
    merged = merge_shard_steps(profs, state, lay.dp * lay.pp)
    full = chip.chunk_times(sc, cl)
    for field in ("forward_s", "backward_s", "optimizer_s"):
        np.testing.assert_array_equal(getattr(merged, field), getattr(full, field))
    assert merged.attention_fwd_s == full.attention_fwd_s
    slow, _ = speed_draws.stragglers(sc, cl.ranks)
    assert slow.size and np.array_equal(merged.slow_ranks, slow)
    # a stage nobody timed is an error that names it, and so is a stage timed twice
    with pytest.raises(ValueError, match=r"do not cover every pipeline stage.*\[2\]"):
        merge_states(states[:2] + states[3:], lay.pp, lay.pp, cl.instances)
    with pytest.raises(ValueError, match=r"overlap: pipeline stage \[1\]"):
        merge_states(states + [states[1]], lay.pp, lay.pp, cl.instances)


def test_a_shard_prices_only_its_stages_with_interleaved_chunks():
    sc = load_scenario({**scenario(1, tp=8, cp=1, instances=2).to_dict(),
                        "model": {"preset": "llama2-7b", "layers": 8},
                        "parallelism": {"tp": 32, "pp": 2, "virtual_stages": 2,
                                        "pp_schedule": "interleaved"}})
    cl = build_cluster(sc, 1)
    states = LocalShards(sc, cl).states()
    assert [s.stage_times.stages.tolist() for s in states] == [[0], [1]]
    assert [s.stage_times.chunks.tolist() for s in states] == [[0, 2], [1, 3]]   # chunk c lives on stage c % pp
    state = merge_states(states, 2, 4, cl.instances)
    np.testing.assert_array_equal(state.times.forward_s, chip.chunk_times(sc, cl).forward_s)


@pytest.mark.parametrize("tp, cp, pp", [(32, 2, 1), (8, 1, 1), (32, 1, 4), (32, 2, 2)])
def test_folding_one_or_eight_instances_per_actor_gives_the_same_profiles_and_summary(tp, cp, pp):
    # pp > 1: with one instance per actor the shards hold different stages and time one each (or none)
    one, eight = scenario(1, tp, cp, pp=pp), scenario(8, tp, cp, pp=pp)
    c1, c8 = build_cluster(one, 1), build_cluster(eight, 8)
    assert (len(c1.shards), len(c8.shards)) == (8, 1)
    s1, s8 = LocalShards(one, c1), LocalShards(eight, c8)
    m1, m8 = merged_state(s1, c1), merged_state(s8, c8)
    groups = c1.layout.dp * c1.layout.pp
    for step in range(3):
        a, b = merge_shard_steps(s1.shard_steps(step), m1, groups), merge_shard_steps(s8.shard_steps(step), m8, groups)
        for field in ("forward_s", "backward_s", "optimizer_s", "group_speed", "slow_ranks", "slow_factors"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    p1, p8, p_auto = predict(one), predict(eight), predict(load_scenario(
        {**one.to_dict(), "emulation": {"instances_per_actor": "auto"}}))
    assert p1["straggler_cost_s"] > 0 and p1 == p8 == p_auto


def test_stragglers_each_shard_draws_its_own_and_together_they_are_the_global_draw():
    from types import SimpleNamespace as NS
    sc = NS(seed=5, faults=NS(stragglers=NS(fraction=0.01, slowdown=1.3)))
    ranks = 1_000_003                                   # not a power of two: uneven halves
    slow, factor = speed_draws.stragglers(sc, ranks)
    assert slow.size == np.unique(slow).size == round(0.01 * ranks) and (factor == 1.3).all()
    for width in (64, 37_000, 262_144):
        parts = [speed_draws.stragglers(sc, ranks, a, width)[0] for a in range(0, ranks, width)]
        np.testing.assert_array_equal(np.concatenate(parts), slow)
    # uniform over the ranks: each tenth of them holds a tenth of the stragglers, over many seeds
    counts = np.zeros(10)
    for seed in range(200):
        s, _ = speed_draws.stragglers(NS(seed=seed, faults=sc.faults), 100_000)
        counts += np.bincount(s // 10_000, minlength=10)
    assert counts.sum() == 200 * 1000 and np.abs(counts - 20_000).max() < 5 * np.sqrt(20_000 * 0.9)


def degraded_scenario(instances_per_actor):
    return load_scenario({
        "name": "degraded-own", "model": {"preset": "llama2-7b", "layers": 4},
        "training": {"seq_len": 4096, "global_batch": 64, "steps": 2, "warmup_steps": 1},
        "parallelism": {"tp": 32, "pp": 2}, "cluster": {"instance": "trn1.32xlarge", "instances": 8},
        "faults": {"degraded": [{"instances": [1, 2, 5], "efa_nics": 4},
                                {"instances": [6], "neuronlink_scale": 0.5}]},
        "emulation": {"instances_per_actor": instances_per_actor},
    })


def test_each_shard_reports_its_own_degraded_instances_and_the_driver_puts_them_back_together():
    sc = degraded_scenario(2)
    cl = build_cluster(sc, 2)
    states = LocalShards(sc, cl).states()
    assert [(s.first_instance, s.instances) for s in states] == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert [[(e, p.instances) for e, p in s.degraded] for s in states] == [[(0, (1,))], [(0, (2,))], [(0, (5,))],
                                                                          [(1, (6,))]]
    assert merge_degraded(states, cl.instances) == cl.degraded
    with pytest.raises(ValueError, match=r"instances \[2, 3\] are owned by \[0\] shards"):
        merge_degraded([states[0], states[2], states[3]], cl.instances)


def test_degraded_instances_give_the_same_steps_for_any_folding():
    one, four = (predict(degraded_scenario(n)) for n in (1, 4))
    healthy = predict(load_scenario({**degraded_scenario(1).to_dict(), "faults": {}}))
    assert one["step_time_s"] == pytest.approx(four["step_time_s"], rel=1e-12)
    assert one["dp_comm_s"] > healthy["dp_comm_s"]
