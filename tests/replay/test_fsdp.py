"""ZeRO-3 (FSDP): parameters sharded over the data-parallel ranks, gathered layer by layer with one-ahead
prefetch, gradients reduce-scattered; memory, exposed time, checkpoints and the scenario contract."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ultracluster import chip, load_scenario
from ultracluster import operators as opslib
from ultracluster.cluster import build_cluster
from ultracluster.errors import ScenarioError
from ultracluster.memory import infeasible_reason, stage_memory
from ultracluster.runner import predict
from ultracluster.replay.engine import StepComm, microbatches, step_comm as plan_comm, fsdp_exposed
from ultracluster.replay.schedule import stage_programs
from ultracluster.storage import checkpoint_bytes_per_rank


def step_comm(sc, cl):
    """The step's comm with the chip model's hiding matmuls (in a run: what the shards report)."""
    return plan_comm(sc, cl, chip.tp_hide_seconds(sc, cl))


GIB = float(1 << 30)
BREAKDOWN = ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s", "data_stall_s", "checkpoint_s",
             "other_s")
LLAMA70_TRN2 = {"name": "fsdp", "model": {"preset": "llama2-70b"},
                "training": {"seq_len": 4096, "global_batch": 1024, "recompute": "full", "steps": 1,
                             "warmup_steps": 0},
                "parallelism": {"tp": 4}, "cluster": {"instance": "trn2.48xlarge", "instances": 64},
                "faults": {"jitter": 0.0}}


def _with(base: dict, **training) -> dict:
    return {**base, "training": {**base["training"], **training}}


def _memory(sc):
    cl = build_cluster(sc, 16)
    progs = stage_programs(sc.parallelism.pp_schedule, cl.layout.pp, microbatches(sc), cl.layout.virtual_stages)
    return cl, stage_memory(sc, cl, opslib.library_for(sc), progs)


# --- scenario ------------------------------------------------------------------------------------------------

def test_zero_and_the_older_zero1_resolve_to_one_stage():
    assert load_scenario(LLAMA70_TRN2).training.zero == 1
    off = load_scenario(_with(LLAMA70_TRN2, zero1=False)).training
    assert (off.zero, off.zero1) == (0, False)
    three = load_scenario(_with(LLAMA70_TRN2, zero=3)).training
    assert (three.zero, three.zero1) == (3, True)
    assert load_scenario(load_scenario(_with(LLAMA70_TRN2, zero=3)).to_dict()).training == three


@pytest.mark.parametrize(("training", "path"), [({"zero": 3, "zero1": False}, "training.zero1"),
                                                ({"zero": 0, "zero1": True}, "training.zero1"),
                                                ({"zero": 4}, "training.zero"),
                                                ({"zero": True}, "training.zero")])
def test_contradicting_or_unknown_stages_are_bad_input(training, path):
    with pytest.raises(ScenarioError) as err:
        load_scenario(_with(LLAMA70_TRN2, **training))
    assert [p.path for p in err.value.problems] == [path]


# --- memory --------------------------------------------------------------------------------------------------

def test_a_layout_that_fits_only_with_fsdp():
    cl, zero1 = _memory(load_scenario(LLAMA70_TRN2))
    _, zero3 = _memory(load_scenario(_with(LLAMA70_TRN2, zero=3)))
    assert infeasible_reason(zero1) is not None and infeasible_reason(zero3) is None
    sc = load_scenario(LLAMA70_TRN2)
    layers = np.asarray(cl.stage_layers(sc.model.layers), dtype=float)
    params = opslib.chunk_params(sc.model, 4, layers, 1).sum()
    dp, w, g = cl.layout.dp, opslib.weight_bytes(sc.training), opslib.grad_bytes(sc.training)
    # ZeRO-1 holds every weight and gradient of the rank's tensor-parallel part; ZeRO-3 the 1/dp share plus
    # two whole layers (the one in use and the one prefetched, or being reduce-scattered)
    assert zero1[0].weights_gib == pytest.approx(params * w / GIB)
    held = params / dp + 2 * params / layers[0]
    assert zero3[0].weights_gib == pytest.approx(held * w / GIB)
    assert zero3[0].gradients_gib == pytest.approx(held * g / GIB)
    assert zero3[0].optimizer_gib == pytest.approx(zero1[0].optimizer_gib)      # sharded under both
    assert zero3[0].activations_gib == pytest.approx(zero1[0].activations_gib)


def test_checkpoint_shards_move_to_every_replica_and_keep_their_total():
    sc1, sc3 = load_scenario(LLAMA70_TRN2), load_scenario(_with(LLAMA70_TRN2, zero=3))
    w1, o1 = checkpoint_bytes_per_rank(sc1, build_cluster(sc1, 16))
    w3, o3 = checkpoint_bytes_per_rank(sc3, build_cluster(sc3, 16))
    assert w3.sum() == pytest.approx(w1.sum()) and o3.sum() == pytest.approx(o1.sum())
    assert np.count_nonzero(w1) == 4 and np.count_nonzero(w3) == w3.size     # dp rank 0 only vs every rank


# --- exposed time --------------------------------------------------------------------------------------------

def _plan(gather: float, scatter: float, chunks: int = 1) -> StepComm:
    z = np.zeros(chunks)
    return StepComm(tp_fwd=z, tp_bwd=z, send_fwd=z, send_bwd=z, dp=z, records=[],
                    fsdp_gather_s=np.full(chunks, gather), fsdp_scatter_s=np.full(chunks, scatter))


@pytest.mark.parametrize(("layers", "cf", "cb", "fwd", "bwd"), [
    # 4 layers, g = 2 s, r = 1 s. Forward: the first gather, then 3 x (2 - 1) beyond each layer's 1 s.
    # Backward (2 s a layer): the first gather 2 and the last scatter 1; after the first layer the queue
    # gathers (2 <= 2), before the last it scatters (1 <= 2), the 2 between do both: 2 x (3 - 2).
    (4, 1.0, 2.0, 2 + 3 * 1.0, 2 + 1 + 0 + 0 + 2 * 1.0),
    # long compute hides all but the first gather and the last scatter
    (4, 10.0, 10.0, 2.0, 3.0),
    # one layer: nothing to prefetch behind
    (1, 5.0, 5.0, 2.0, 3.0),
    # no compute: every collective in series
    (3, 0.0, 0.0, 3 * 2.0, 3 * (2.0 + 1.0)),
])
def test_exposed_gather_is_the_closed_form(layers, cf, cb, fwd, bwd):
    f, b = fsdp_exposed(_plan(2.0, 1.0), np.array([[cf * layers]]), np.array([[cb * layers]]), np.array([layers]))
    assert f[0, 0] == pytest.approx(fwd) and b[0, 0] == pytest.approx(bwd)


def test_without_zero3_nothing_is_exposed():
    z = np.zeros(1)
    plan = StepComm(tp_fwd=z, tp_bwd=z, send_fwd=z, send_bwd=z, dp=z, records=[])
    f, b = fsdp_exposed(plan, np.ones((2, 1)), np.ones((2, 1)), np.array([3]))
    assert not f.any() and not b.any()


def test_a_replayed_step_exposes_the_closed_form_and_hides_the_rest():
    from ultracluster.shards.local import local_shards
    from ultracluster.emulate import emulate

    sc = load_scenario({**_with(LLAMA70_TRN2, zero=3, global_batch=2048),         # 2 microbatches per replica
                        "parallelism": {"tp": 4, "fsdp_schedule": "layerwise"}})
    cl = build_cluster(sc, 16)
    comm, times = step_comm(sc, cl), chip.chunk_times(sc, cl)
    layers = np.asarray(cl.stage_layers(sc.model.layers), dtype=float)
    f, b = fsdp_exposed(comm, times.forward_s[None, :], times.backward_s[None, :], layers)
    m = microbatches(sc)
    exposed = m * float(f.sum() + b.sum())
    total = m * float((layers * (2 * comm.fsdp_gather_s + comm.fsdp_scatter_s)).sum())
    assert comm.dp[0] == pytest.approx(total) and 0 < exposed < total
    assert not comm.dp_buckets.size and not comm.dp_after_s.any()      # no ZeRO-1 reduction, no gather after
    rec = emulate(sc, local_shards).steps[-1]
    assert rec.dp_comm_hidden_s == pytest.approx(total - exposed, rel=1e-9)
    assert rec.dp_comm_s >= exposed - 1e-12
    gathers = [r for r in comm.records if r.group == "dp" and r.op == "all_gather"]
    assert gathers and gathers[0].count_per_step == 2 * m * sc.model.layers


def test_the_compiler_schedule_reduce_scatters_once_after_the_last_backward():
    """Neuron's default FSDP schedule (H21): per-layer gathers as before, the gradients reduce-scattered in
    the ZeRO-1 buckets once per step after the pipeline, exposed; layerwise hides most of that instead."""
    from ultracluster.shards.local import local_shards
    from ultracluster.emulate import emulate

    base = _with(LLAMA70_TRN2, zero=3, global_batch=2048)
    sc = load_scenario(base)
    assert sc.parallelism.fsdp_schedule == "compiler"
    cl = build_cluster(sc, 16)
    comm, times = step_comm(sc, cl), chip.chunk_times(sc, cl)
    layers = np.asarray(cl.stage_layers(sc.model.layers), dtype=float)
    assert comm.dp_buckets.size and comm.dp_buckets[0] >= 1 and not comm.fsdp_scatter_s.any()
    reduce_s = float((comm.dp_bucket_s * comm.dp_buckets).sum())
    m = microbatches(sc)
    f, b = fsdp_exposed(comm, times.forward_s[None, :], times.backward_s[None, :], layers)
    gathers_exposed = m * float(f.sum() + b.sum())
    rec = emulate(sc, local_shards).steps[-1]
    # the whole reduction exposed, and the gradient norm's all-reduce after it
    assert rec.dp_comm_s == pytest.approx(gathers_exposed + reduce_s + comm.norm_s, rel=1e-9)
    scatters = [r for r in comm.records if r.group == "dp" and r.op == "reduce_scatter"]
    assert scatters and scatters[0].count_per_step == comm.dp_buckets[0]           # per step, not per layer
    layerwise = load_scenario({**base, "parallelism": {"tp": 4, "fsdp_schedule": "layerwise"}})
    assert emulate(layerwise, local_shards).steps[-1].dp_comm_s < rec.dp_comm_s


# --- the shipped scenario ------------------------------------------------------------------------------------

def test_the_axlearn_scenario_runs_and_adds_up(scenarios_dir):
    s = predict(load_scenario(scenarios_dir / "axlearn-llama2-70b-trn2-64.yaml"))
    assert s["feasible"] and 0 < s["mfu"] < 1
    assert sum(s[k] for k in BREAKDOWN) == pytest.approx(s["step_time_s"], rel=1e-9)
    assert s["dp_comm_s"] > 0 and s["dp_comm_hidden_s"] > 0       # gathers hidden, the reduction after backward
    sc = load_scenario(scenarios_dir / "axlearn-llama2-70b-trn2-64.yaml")
    assert (sc.parallelism.tp, sc.parallelism.dp, sc.training.zero, sc.cluster.lnc) == (4, 1024, 3, 2)
    assert sc.tokens_per_step == 4 * 2**20


# --- property ------------------------------------------------------------------------------------------------

layouts = st.fixed_dictionaries({
    "instance": st.sampled_from(["trn1.32xlarge", "trn2.48xlarge"]),
    "tp": st.sampled_from([2, 4, 8]),
    "pp": st.sampled_from([1, 2, 4]),
    "microbatches": st.sampled_from([1, 2, 4]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "schedule": st.sampled_from(["gpipe", "1f1b"]),
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts)
def test_fsdp_never_reports_less_compute_than_zero1_and_adds_up(layout):
    inst = layout["instance"]
    ranks = 2 * (32 if inst.startswith("trn1") else 64)
    dp = ranks // (layout["tp"] * layout["pp"])
    base = {"name": "prop", "model": {"preset": "llama2-7b", "layers": 8},
            "training": {"seq_len": 2048, "global_batch": dp * layout["microbatches"], "recompute": layout["recompute"],
                         "steps": 1, "warmup_steps": 0},
            "parallelism": {"tp": layout["tp"], "pp": layout["pp"], "pp_schedule": layout["schedule"]},
            "cluster": {"instance": inst, "instances": 2}, "faults": {"jitter": 0.0}}
    one, three = predict(load_scenario(base)), predict(load_scenario(_with(base, zero=3)))
    assert one["feasible"] and three["feasible"]           # the model is small enough for every layout drawn
    assert three["compute_s"] >= one["compute_s"] * (1 - 1e-12)
    for s in (one, three):
        assert sum(s[k] for k in BREAKDOWN) == pytest.approx(s["step_time_s"], rel=1e-9)
        assert min(s[k] for k in BREAKDOWN) >= -1e-12
