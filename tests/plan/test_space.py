"""The search space: every generated layout is a scenario `load_scenario` accepts (the cross-field rules hold by
construction), the scenario's own layout comes first, the options name their flag when bad."""
import pytest

from ultracluster import load_scenario, stacks
from ultracluster.errors import ScenarioError
from ultracluster.plan import parse_instance_types, parse_instances
from ultracluster.plan.output import scenario_dict
from ultracluster.layouts.space import SearchSpace, enumerate_layouts


@pytest.mark.parametrize("name", ["dense", "dense_trn2", "moe"])
def test_every_layout_is_a_valid_scenario(name, request):
    base = request.getfixturevalue(name)
    table = enumerate_layouts(base, SearchSpace(instance_counts=(base.cluster.instances, 2 * base.cluster.instances),
                                                stacks=stacks.NAMES))
    assert len(table) > 100
    assert table[["stack", "instance", "instances", "lnc", "tp", "pp", "cp", "ep", "micro_batch", "recompute",
                  "pp_schedule", "virtual_stages", "zero"]].duplicated().sum() == 0
    step = max(1, len(table) // 150)
    for i in range(0, len(table), step):
        row = table.iloc[i]
        sc = load_scenario(scenario_dict(base, row, f"{base.name}-{i}"))
        assert (sc.parallelism.tp, sc.parallelism.pp, sc.parallelism.cp, sc.parallelism.dp) == \
            (row["tp"], row["pp"], row["cp"], row["dp"])
        assert sc.training.global_batch // (sc.parallelism.dp * sc.training.micro_batch) == row["microbatches"]


def test_the_scenarios_own_layout_comes_first_and_kinds_are_covered(dense, moe, dense_trn2):
    table = enumerate_layouts(dense, SearchSpace(stacks=("custom",)))       # every kind: no stack's limits
    first = table.iloc[0]
    assert (first["tp"], first["pp"], first["pp_schedule"], first["recompute"]) == (8, 2, "1f1b", "selective")
    assert set(table["pp_schedule"]) == {"gpipe", "1f1b", "interleaved"}
    assert table["cp"].max() > 1 and set(table["zero"]) >= {0, 1}
    inter = table[table["pp_schedule"] == "interleaved"]
    assert (inter["microbatches"] % inter["pp"] == 0).all()       # Megatron-LM's rule for interleaving
    assert enumerate_layouts(moe)["ep"].max() > 1                        # NxD runs expert parallelism
    assert set(enumerate_layouts(dense_trn2)["lnc"]) == {1, 2}


def test_bad_options_name_their_flag():
    with pytest.raises(ScenarioError) as err:
        parse_instances("16,zero")
    assert err.value.problems[0].path == "--instances"
    with pytest.raises(ScenarioError) as err:
        parse_instances("0")
    assert err.value.problems[0].path == "--instances"
    with pytest.raises(ScenarioError) as err:
        parse_instance_types("trn1.32xlarge,p5.48xlarge")
    assert err.value.problems[0].path == "--instance-types" and "p5.48xlarge" in str(err.value.problems[0])
    assert parse_instances("32,16,32") == (32, 16)
