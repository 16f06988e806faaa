"""The fast path against the replay (`predict`: the numbers `run` gives, in this process) on random layouts of
the search space, drawn so that pipelined, interleaved, context-parallel and ZeRO-3 layouts all come up, and each
training stack's (its engine's graphs and its defaults: the replay prices the scenario's `stack`, the fast path each
row's).

With the default 1 % compute jitter the fast path runs one pipeline with each stage at its slowest replica's
speed where the replay runs every replica: within 1 %. Without jitter, and with the last microbatch's sends
priced as the replay prices them, it is the same model: equal to 1e-9."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ultracluster import load_scenario, stacks
from ultracluster.runner import predict
from ultracluster.layouts import steps
from ultracluster.layouts.space import SearchSpace, enumerate_layouts

from plan_scenarios import variant

KINDS = {
    "pipelined": lambda t: (t["pp"] > 1) & (t["pp_schedule"] == "1f1b"),
    "interleaved": lambda t: t["pp_schedule"] == "interleaved",
    "context-parallel": lambda t: t["cp"] > 1,
    "zero-3": lambda t: t["zero"] == 3,
    "nxd-pipeline": lambda t: (t["stack"] == "neuronx-distributed") & (t["pp"] > 1),
    "nemo-pipeline": lambda t: (t["stack"] == "neuronx-nemo-megatron") & (t["pp"] > 1),
    "megatron": lambda t: t["stack"] == "megatron-lm-neuron",
    "any": lambda t: t["pp"] > 0,
}


def priced(base, evaluator):
    table = enumerate_layouts(base, SearchSpace(stacks=stacks.NAMES))      # every stack that runs on trn1
    return table, steps.evaluate(evaluator, table)


@pytest.fixture(scope="module")
def jittered(dense):
    return (dense, *priced(dense, steps.Evaluator(dense)))


@pytest.fixture(scope="module")
def exact():
    base = load_scenario(variant(name="plan-small-exact", faults={"jitter": 0.0}))
    return (base, *priced(base, steps.Evaluator(base, shared_last_sends=True)))


def pick(table, res, kind, u):
    rows = np.flatnonzero(KINDS[kind](table).to_numpy() & res["feasible"].to_numpy())
    assert rows.size, kind
    return int(rows[int(u * rows.size) % rows.size])


def replayed(base, table, i):
    return predict(steps.layout_scenario(base, table.iloc[i].to_dict()))


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(KINDS)), u=st.floats(0, 1, exclude_max=True))
def test_fast_path_within_one_percent_of_run(jittered, kind, u):
    base, table, res = jittered
    i = pick(table, res, kind, u)
    s = replayed(base, table, i)
    assert s["feasible"]
    assert res["hbm_peak_gib"][i] == pytest.approx(s["hbm_peak_gib"], rel=1e-9)
    assert res["step_time_s"][i] == pytest.approx(s["step_time_s"], rel=0.01), table.iloc[i].to_dict()


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(KINDS)), u=st.floats(0, 1, exclude_max=True))
def test_fast_path_equals_run_without_jitter(exact, kind, u):
    base, table, res = exact
    i = pick(table, res, kind, u)
    s = replayed(base, table, i)
    assert res["step_time_s"][i] == pytest.approx(s["step_time_s"], rel=1e-9), table.iloc[i].to_dict()
    assert res["tokens_per_s"][i] == pytest.approx(s["tokens_per_s"], rel=1e-9)
    assert res["mfu"][i] == pytest.approx(s["mfu"], rel=1e-9)


def test_infeasible_layouts_agree_with_run():
    """A 7B model on two trn1.32xlarge: small tp x pp do not fit; the fast path gives run's reason, word for word."""
    base = load_scenario({"name": "plan-7b", "model": {"preset": "llama2-7b"},
                          "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
                          "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2}})
    table = enumerate_layouts(base)
    res = steps.evaluate(steps.Evaluator(base), table)
    bad, good = np.flatnonzero(~res["feasible"].to_numpy()), np.flatnonzero(res["feasible"].to_numpy())
    assert bad.size > 100 and good.size > 100
    for i in list(bad[:: bad.size // 4][:4]) + list(good[:: good.size // 2][:2]):
        s = replayed(base, table, int(i))
        assert s["feasible"] == res["feasible"][i]
        reason = res["reason"][i]
        assert s["reason"] == (reason if isinstance(reason, str) else None)
        assert s["hbm_peak_gib"] == pytest.approx(res["hbm_peak_gib"][i], rel=1e-9)


def test_torchneuron_and_axlearn_rows_of_one_table_each_equal_their_run():
    """FSDP x TP on trn2 searched for AXLearn (gradients reduce-scattered once per step, the compiler's schedule) and
    TorchNeuron (FSDP2: per layer, `parallelism.fsdp_schedule: layerwise`) in one table: each row is timed as its own
    stack runs it, never with the other's memoized gradient reduction."""
    base = load_scenario(variant(name="plan-small-fsdp", faults={"jitter": 0.0},
                                 cluster={"instance": "trn2.48xlarge", "instances": 2}))
    table = enumerate_layouts(base, SearchSpace(stacks=("axlearn", "torchneuron"), tp=(4,), micro_batches=(1,),
                                                recompute=("selective",), lnc=(2,)))
    res = steps.evaluate(steps.Evaluator(base, shared_last_sends=True), table)
    zero3 = table[(table["zero"] == 3).to_numpy() & res["feasible"].to_numpy()]
    assert set(zero3["stack"]) == {"axlearn", "torchneuron"}
    times = {}
    for i in zero3.index:
        s = replayed(base, table, int(i))
        assert res["step_time_s"][i] == pytest.approx(s["step_time_s"], rel=1e-9), table.iloc[i].to_dict()
        times[table.iloc[i]["stack"]] = s["step_time_s"]
    assert times["axlearn"] != times["torchneuron"]
