"""Collective volumes from first principles: every collective a training step issues, its bytes per occurrence
and its count per layer and per step, computed by hand here from the model's shape and the layout.

What is checked is the step's comm as the model issues it (`replay.comm.step_comm`, which `run`
and `plan` share): the records the report's collectives table shows (bytes, count per step, group size) and
the per-chunk seconds the replay schedules, which must be that many collectives of that size. Seconds come
from the network model (`collective_time`, not under test here) at the bytes computed below, so a wrong
volume, a wrong count or a collective priced over the wrong group fails here, by name.

The model: 7 layers (3 on stage 0 and 4 on stage 1 with two stages: NxD takes the odd layer from the
embedding's stage), hidden 1536, 12 heads of 128, 2 key/value heads (fewer than tp = 4: each rank keeps a
copy of one), SwiGLU MLP of 4096, vocabulary 32,000, untied embeddings, RMSNorm. Training: sequences of 2048, 2 per microbatch, bf16 with fp32 master weights
(bf16 activations and weights on the wire, fp32 gradients).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from ultracluster import chip, load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.network import Group, collective_time, group_of
from ultracluster.replay.comm import step_comm as plan_comm


def step_comm(sc, cl):
    """The step's comm with the chip model's hiding matmuls (in a run: what the shards report)."""
    return plan_comm(sc, cl, chip.tp_hide_seconds(sc, cl))


MIB = 1 << 20
BUCKET = 25 * MIB        # PyTorch DDP's bucket_cap_mb default, 25 MiB (the ZeRO-1 reduce-scatter buckets)
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 7, 1536, 12, 2, 4096, 32000
HEAD_DIM = HIDDEN // HEADS                    # 128
SEQ, MICRO = 2048, 2
ACT_BYTES = 2                                 # bf16 activations
WEIGHT_BYTES = 2                              # bf16 weights gathered (ZeRO-1 after the step, FSDP per layer)
GRAD_BYTES = 4                                # fp32 gradients reduced (fp32 master weights)
RANKS_PER_TRN1 = 32                           # trn1.32xlarge: 16 chips x 2 NeuronCores


def scenario(tp=4, pp=2, cp=1, instances=2, microbatches=3, sp=None, recompute="selective", zero=1, moe=None,
             ep=1, fsdp_schedule=None, instance="trn1.32xlarge", virtual_stages=1, layers=LAYERS):
    """`recompute` "selective_mlp": selective with the MLP block checkpointed (`training.checkpoint_mlp`)."""
    mlp = recompute == "selective_mlp"
    recompute = "selective" if mlp else recompute
    ranks = instances * RANKS_PER_TRN1
    dp = ranks // (tp * pp * cp)
    model = {"layers": layers, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS, "ffn": FFN, "mlp": "swiglu",
             "vocab": VOCAB, "norm": "rmsnorm"}
    if moe:
        model["moe"] = moe
    par = {"tp": tp, "pp": pp, "cp": cp, "ep": ep}
    if sp is not None:
        par["sequence_parallel"] = sp
    if fsdp_schedule:
        par["fsdp_schedule"] = fsdp_schedule
    if virtual_stages > 1:
        par.update(pp_schedule="interleaved", virtual_stages=virtual_stages)
    sc = load_scenario({
        "name": "volumes", "model": model,
        "training": {"seq_len": SEQ, "global_batch": dp * MICRO * microbatches, "micro_batch": MICRO,
                     "recompute": recompute, "checkpoint_mlp": mlp, "zero": zero, "steps": 1, "warmup_steps": 0},
        "parallelism": par, "cluster": {"instance": instance, "instances": instances}, "faults": {"jitter": 0.0}})
    assert sc.parallelism.dp == dp
    return sc, build_cluster(sc, instances)


def seconds(cl, op, nbytes, ranks, stride):
    """One collective as a training step issues it: `ranks` ranks spaced `stride` apart, every such group at once."""
    return collective_time(cl, op, nbytes, group_of(cl, ranks, stride), in_graph=True)[0]


def records(comm, group, op):
    return [r for r in comm.records if r.group == group and r.op == op]


def one(comm, group, op):
    (r,) = records(comm, group, op)
    return r


# --- shapes by hand ------------------------------------------------------------------------------------------

def tokens(cp=1):
    """Tokens of one microbatch on one context-parallel rank."""
    return MICRO * SEQ // cp


def activation(cp=1):
    """One microbatch's activation tensor [tokens, hidden] on a rank, bytes (what TP collectives move whole)."""
    return tokens(cp) * HIDDEN * ACT_BYTES


def layer_params(tp, experts=0, ep=1):
    """(dense, expert) parameters of one transformer layer held by one rank."""
    q_heads, kv_heads = HEADS // tp, max(KV_HEADS // tp, 1)          # a rank keeps at least one K/V head
    attention = HIDDEN * q_heads * HEAD_DIM + 2 * HIDDEN * kv_heads * HEAD_DIM + q_heads * HEAD_DIM * HIDDEN
    norms = 2 * HIDDEN                                                # two RMSNorm gains, replicated over tp
    mlp = 3 * HIDDEN * FFN // tp                                      # gate, up, down
    if not experts:
        return attention + norms + mlp, 0
    return attention + norms + HIDDEN * experts, mlp * experts // ep  # the router beside attention


def chunk_params(tp, layers, experts=0, ep=1):
    """[(dense, expert)] parameters per rank of each pipeline chunk: the embedding on the first, the LM head
    and the final norm on the last."""
    dense_l, expert_l = layer_params(tp, experts, ep)
    out = [[n * dense_l, n * expert_l] for n in layers]
    out[0][0] += VOCAB * HIDDEN // tp
    out[-1][0] += VOCAB * HIDDEN // tp + HIDDEN
    return out


def test_the_stage_split():
    """The one layout fact the counts below build on: 7 layers over 2 stages are 3 + 4."""
    assert scenario()[1].stage_layers(LAYERS) == [3, 4]


# --- tensor parallel -----------------------------------------------------------------------------------------

AGAIN = {"selective": 0, "full": 1, "selective_mlp": 0.5}


@pytest.mark.parametrize("recompute", ["selective", "full", "selective_mlp"])
def test_tensor_parallel_with_sequence_parallelism(recompute):
    """Per layer and microbatch, forward: an all-gather before each block's column-parallel matmul and a
    reduce-scatter after its row-parallel one (attention and MLP: 2 + 2); backward: the output gradient's
    all-gather, the input gradient's reduce-scatter and the input's re-gather (4 gathers, 2 scatters); full
    recomputation repeats the forward's 2 + 2, a checkpointed MLP block its own 1 + 1 (NxD's seq-8192 pipeline
    scripts checkpoint LlamaMLP, whose parallel linears gather and scatter). Each moves the whole [tokens, hidden]
    activation."""
    sc, cl = scenario(tp=4, recompute=recompute)
    comm = step_comm(sc, cl)
    again = AGAIN[recompute]
    m, stage0 = 3, 3                                   # microbatches; layers on stage 0
    ag, rs = one(comm, "tp", "all_gather"), one(comm, "tp", "reduce_scatter")
    assert not records(comm, "tp", "all_reduce")
    assert ag.bytes == rs.bytes == activation() == 12_582_912
    assert ag.count_per_step == stage0 * m * (2 + 4 + 2 * again)
    assert rs.count_per_step == stage0 * m * (2 + 2 + 2 * again)
    assert (ag.ranks, ag.instances) == (4, 1)
    t_ag, t_rs = seconds(cl, "all_gather", activation(), 4, 1), seconds(cl, "reduce_scatter", activation(), 4, 1)
    layers = np.array([3, 4])
    fwd = 2 * t_ag + 2 * t_rs
    assert comm.tp_fwd == pytest.approx(layers * fwd, rel=1e-12)
    assert comm.tp_bwd == pytest.approx(layers * (4 * t_ag + 2 * t_rs + again * fwd), rel=1e-12)


@pytest.mark.parametrize("recompute", ["selective", "full", "selective_mlp"])
def test_tensor_parallel_without_sequence_parallelism(recompute):
    """Megatron-LM without SP: per layer and microbatch two all-reduces forward (attention's and the MLP's
    row-parallel outputs) and two backward (their column-parallel input gradients), each of the whole
    activation; full recomputation repeats the forward's two, a checkpointed MLP block its one."""
    sc, cl = scenario(tp=4, sp=False, recompute=recompute)
    comm = step_comm(sc, cl)
    again = AGAIN[recompute]
    ar = one(comm, "tp", "all_reduce")
    assert not records(comm, "tp", "all_gather") and not records(comm, "tp", "reduce_scatter")
    assert ar.bytes == activation()
    assert ar.count_per_step == 3 * 3 * (2 + 2 + 2 * again)
    t_ar = seconds(cl, "all_reduce", activation(), 4, 1)
    assert comm.tp_fwd == pytest.approx(np.array([3, 4]) * 2 * t_ar, rel=1e-12)
    assert comm.tp_bwd == pytest.approx(np.array([3, 4]) * (2 + 2 * again) * t_ar, rel=1e-12)


def test_no_tensor_parallel_collectives_at_tp1():
    sc, cl = scenario(tp=1, pp=2, instances=1)
    comm = step_comm(sc, cl)
    assert not records(comm, "tp", "all_gather") and not records(comm, "tp", "all_reduce")
    assert not comm.tp_fwd.any() and not comm.tp_bwd.any()


# --- pipeline ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sp", [True, False])
def test_pipeline_sends_carry_the_sequence_parallel_share(sp):
    """Each microbatch sends its activation forward and its gradient back over every stage boundary. With
    sequence parallelism each tensor-parallel rank holds, and sends, 1/tp of the sequence (Megatron's
    scatter-gather of the pipeline tensors); without it, every rank sends the whole activation."""
    sc, cl = scenario(tp=4, sp=sp)
    comm = step_comm(sc, cl)
    sent = activation() // 4 if sp else activation()
    pp = one(comm, "pp", "send_recv")
    assert pp.bytes == sent == (3_145_728 if sp else 12_582_912)
    assert pp.count_per_step == 2 * 3                 # forward and backward, 3 microbatches
    # stage 0's first rank (0) to stage 1's (tp x cp = 4), on one instance
    t = collective_time(cl, "send_recv", sent, Group(per_instance=2, instances=1, stride=4), in_graph=True)[0]
    assert comm.send_fwd == pytest.approx([t, 0.0], rel=1e-12)
    assert comm.send_bwd == pytest.approx([0.0, t], rel=1e-12)


def test_interleaved_chunks_send_over_every_boundary():
    """Two stages x two virtual stages: chunks 0 -> 1 -> 2 -> 3 alternate stages, so every one of the three
    boundaries is a send of the same size (the SP share), the last chunk sends nothing forward."""
    sc, cl = scenario(tp=4, virtual_stages=2, layers=8, microbatches=4)
    comm = step_comm(sc, cl)
    sent = activation() // 4
    t = collective_time(cl, "send_recv", sent, Group(per_instance=2, instances=1, stride=4), in_graph=True)[0]
    assert comm.send_fwd == pytest.approx([t, t, t, 0.0], rel=1e-12)
    rec = one(comm, "pp", "send_recv")
    assert rec.bytes == sent and rec.count_per_step == 2 * 4      # chunk 0's boundary, 4 microbatches


def test_context_parallel_scales_the_send_down():
    """With context parallelism a rank holds tokens / cp; the send is its SP share of that."""
    sc, cl = scenario(tp=4, cp=2)
    sent = activation(cp=2) // 4
    assert one(step_comm(sc, cl), "pp", "send_recv").bytes == sent == 1_572_864


# --- data parallel: ZeRO-1 buckets and gathers, plain all-reduce ---------------------------------------------

@pytest.mark.parametrize("zero", [0, 1])
def test_data_parallel_buckets_and_the_zero1_gather(zero):
    """Gradients (fp32) are reduced in buckets of at most 25 MiB, as backward produces them: a reduce-scatter
    under ZeRO-1 (the optimizer state is sharded), an all-reduce without; ZeRO-1 then all-gathers the updated
    bf16 weights of the whole stage once per step. The data-parallel group: dp = 64 / (tp 4 x pp 2) = 8 ranks
    spaced tp x pp = 8 apart, 4 on each instance."""
    sc, cl = scenario(tp=4, zero=zero)
    comm = step_comm(sc, cl)
    (d0, _), (d1, _) = chunk_params(4, [3, 4])
    assert (d0, d1) == (3 * 6_294_528 + 12_288_000, 4 * 6_294_528 + 12_288_000 + 1536)
    grads = np.array([d0, d1], dtype=float) * GRAD_BYTES
    buckets = np.ceil(grads / BUCKET)
    assert buckets.tolist() == [5, 6]                  # 119.2 MiB and 142.9 MiB of gradients
    assert comm.dp_buckets.tolist() == buckets.tolist()
    op = "reduce_scatter" if zero else "all_reduce"
    rec = one(comm, "dp", op)
    assert abs(rec.bytes - grads[0] / buckets[0]) <= 1 and rec.count_per_step == 5
    assert (rec.ranks, rec.instances) == (8, 2)
    per_bucket = [seconds(cl, op, g / b, 8, 8) for g, b in zip(grads, buckets)]
    assert comm.dp_bucket_s == pytest.approx(per_bucket, rel=1e-12)
    gathers = records(comm, "dp", "all_gather")
    if zero:
        (g,) = gathers
        assert g.bytes == d0 * WEIGHT_BYTES and g.count_per_step == 1
        assert comm.dp_after_s == pytest.approx([seconds(cl, "all_gather", d * WEIGHT_BYTES, 8, 8) for d in (d0, d1)],
                                                rel=1e-12)
    else:
        assert not gathers and not comm.dp_after_s.any()
    # the stage's data-parallel seconds if nothing overlapped them: every bucket, then the gather
    assert comm.dp == pytest.approx(buckets * np.array(per_bucket) + comm.dp_after_s, rel=1e-12)
    assert not comm.fsdp_gather_s.any() and not comm.fsdp_scatter_s.any()


def test_the_gradient_norm_is_one_fp32_all_reduce_over_every_rank():
    sc, cl = scenario()
    rec = one(step_comm(sc, cl), "norm", "all_reduce")
    assert (rec.bytes, rec.ranks, rec.count_per_step) == (4, 64, 1)


# --- FSDP (ZeRO-3) -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["compiler", "layerwise"])
def test_fsdp_gathers_each_layer_twice_and_reduce_scatters_its_gradients(schedule):
    """ZeRO-3 with one pipeline stage, tp 4, dp 16: per layer and microbatch the layer's bf16 weights are
    all-gathered before its forward and again before its backward (the chunk's embedding and head spread
    evenly over its layers). Layerwise, each layer's fp32 gradients are reduce-scattered after its backward;
    with the compiler's schedule they are reduce-scattered once per step in the 25 MiB buckets instead."""
    sc, cl = scenario(tp=4, pp=1, zero=3, fsdp_schedule=schedule)
    comm = step_comm(sc, cl)
    ((dense, _),) = chunk_params(4, [LAYERS])
    unit = dense / LAYERS
    m = 3
    gather = one(comm, "dp", "all_gather")
    assert abs(gather.bytes - unit * WEIGHT_BYTES) <= 1
    assert gather.count_per_step == 2 * LAYERS * m and (gather.ranks, gather.instances) == (16, 2)
    assert comm.fsdp_gather_s == pytest.approx([seconds(cl, "all_gather", unit * WEIGHT_BYTES, 16, 4)], rel=1e-12)
    scatter = one(comm, "dp", "reduce_scatter")
    assert not comm.dp_after_s.any()                   # nothing gathered after the optimizer
    if schedule == "layerwise":
        assert abs(scatter.bytes - unit * GRAD_BYTES) <= 1 and scatter.count_per_step == LAYERS * m
        t_rs = seconds(cl, "reduce_scatter", unit * GRAD_BYTES, 16, 4)
        assert comm.fsdp_scatter_s == pytest.approx([t_rs], rel=1e-12) and not comm.dp_buckets.size
        assert comm.dp == pytest.approx([m * LAYERS * (2 * comm.fsdp_gather_s[0] + t_rs)], rel=1e-12)
    else:
        buckets = math.ceil(dense * GRAD_BYTES / BUCKET)
        assert abs(scatter.bytes - dense * GRAD_BYTES / buckets) <= 1 and scatter.count_per_step == buckets
        assert comm.dp_buckets.tolist() == [buckets] and not comm.fsdp_scatter_s.any()
        t_rs = seconds(cl, "reduce_scatter", dense * GRAD_BYTES / buckets, 16, 4)
        assert comm.dp_bucket_s == pytest.approx([t_rs], rel=1e-12)
        assert comm.dp == pytest.approx([buckets * t_rs + m * LAYERS * 2 * comm.fsdp_gather_s[0]], rel=1e-12)


# --- context parallel ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cp", "recompute"), [(2, "selective"), (4, "selective"), (2, "full")])
def test_context_parallel_passes_kv_blocks_round_the_ring(cp, recompute):
    """Ring attention: per layer and microbatch each rank passes its K and V block (its tokens x its K/V heads
    x head size, bf16) to the next context-parallel rank cp - 1 times forward (again when full recomputation
    repeats the forward), and K, V and their gradients (twice the bytes) cp - 1 times backward. The pair is
    two ranks tp apart. The tensor-parallel activations shrink to the rank's tokens / cp."""
    sc, cl = scenario(tp=4, cp=cp, instances=2 if cp == 2 else 4, recompute=recompute)
    comm = step_comm(sc, cl)
    again = 1 if recompute == "full" else 0
    m, stage0 = 3, 3
    kv = 2 * tokens(cp) * max(KV_HEADS // 4, 1) * HEAD_DIM * ACT_BYTES
    assert kv == (1_048_576 if cp == 2 else 524_288)
    fwd, bwd = sorted(records(comm, "cp", "send_recv"), key=lambda r: r.bytes)
    assert (fwd.bytes, bwd.bytes) == (kv, 2 * kv)
    assert fwd.count_per_step == stage0 * m * (cp - 1) * (1 + again)
    assert bwd.count_per_step == stage0 * m * (cp - 1)
    pair = Group(per_instance=2, instances=1, stride=4)
    assert comm.cp_block_fwd_s == pytest.approx(collective_time(cl, "send_recv", kv, pair, in_graph=True)[0], rel=1e-12)
    assert comm.cp_block_bwd_s == pytest.approx(collective_time(cl, "send_recv", 2 * kv, pair, in_graph=True)[0],
                                                rel=1e-12)
    assert one(comm, "tp", "all_gather").bytes == activation(cp)


def test_a_ring_across_instances_steps_at_the_pace_of_its_efa_hops():
    """tp 4 x cp 16 on two trn1.32xlarge: the ring's members are ranks 0, 4, ..., 60, so the hops 28 -> 32 and
    60 -> 0 cross between the instances (EFA) and the other 14 stay on NeuronLink. Every member passes its
    block at once and waits for its predecessor's, so each of the cp - 1 steps takes the slowest hop's time."""
    sc, cl = scenario(tp=4, cp=16, pp=1, instances=2)
    comm = step_comm(sc, cl)
    kv = 2 * tokens(16) * 1 * HEAD_DIM * ACT_BYTES
    hops = (Group(per_instance=2, instances=1, stride=4),                        # 0 -> 4, 4 -> 8, ...
            Group(per_instance=1, instances=2, instance_step=4, first_rank=28),   # 28 -> 32
            Group(per_instance=1, instances=2, instance_step=60, first_rank=0))   # 60 -> 0
    for nbytes, got in ((kv, comm.cp_block_fwd_s), (2 * kv, comm.cp_block_bwd_s)):
        each = [collective_time(cl, "send_recv", nbytes, g, in_graph=True)[0] for g in hops]
        assert max(each[1:]) > each[0]                      # EFA is the slow hop here
        assert got == pytest.approx(max(each), rel=1e-12)
    fwd, bwd = sorted(records(comm, "cp", "send_recv"), key=lambda r: r.bytes)
    assert (fwd.bytes, fwd.instances, fwd.count_per_step) == (kv, 2, LAYERS * 3 * 15)


def test_no_kv_passing_without_context_parallelism():
    sc, cl = scenario(tp=4, cp=1)
    comm = step_comm(sc, cl)
    assert not records(comm, "cp", "send_recv") and comm.cp_block_fwd_s == comm.cp_block_bwd_s == 0.0


# --- mixture of experts --------------------------------------------------------------------------------------

MOE = {"experts": 4, "top_k": 2, "imbalance": 1.3}


@pytest.mark.parametrize(("sp", "recompute"), [(True, "selective"), (False, "selective"), (True, "full")])
def test_expert_all_to_all_carries_top_k_copies_at_the_busiest_ranks_load(sp, recompute):
    """Per MoE layer and microbatch an all-to-all dispatches each token's hidden state to its top_k experts'
    ranks and another combines the results, forward, and both again (transposed) backward: 4, plus 2 when full
    recomputation repeats the forward. The busiest rank (imbalance x the mean) sets the size: its tokens x
    top_k x imbalance x hidden x bf16, the tokens a rank holds being 1/tp of them with sequence parallelism.
    The group: ep = 2 ranks, one data-parallel replica (tp x pp = 8 ranks) apart."""
    sc, cl = scenario(tp=4, moe=MOE, ep=2, sp=sp, recompute=recompute)
    comm = step_comm(sc, cl)
    again = 1 if recompute == "full" else 0
    held = tokens() // 4 if sp else tokens()
    a2a_bytes = held * 2 * 1.3 * HIDDEN * ACT_BYTES
    rec = one(comm, "ep", "all_to_all")
    assert abs(rec.bytes - a2a_bytes) <= 1 and rec.count_per_step == 3 * 3 * (4 + 2 * again)
    assert (rec.ranks, rec.instances) == (2, 1)
    t_a2a = seconds(cl, "all_to_all", a2a_bytes, 2, 8)
    if sp:
        block = 2 * seconds(cl, "all_gather", activation(), 4, 1) + 2 * seconds(cl, "reduce_scatter", activation(), 4, 1)
    else:
        block = 2 * seconds(cl, "all_reduce", activation(), 4, 1)
    assert comm.tp_fwd == pytest.approx(np.array([3, 4]) * (block + 2 * t_a2a), rel=1e-12)


def test_imbalance_scales_the_all_to_all_and_only_it():
    even = step_comm(*scenario(tp=4, moe={**MOE, "imbalance": 1.0}, ep=2))
    skew = step_comm(*scenario(tp=4, moe={**MOE, "imbalance": 1.5}, ep=2))
    assert abs(one(skew, "ep", "all_to_all").bytes - 1.5 * one(even, "ep", "all_to_all").bytes) <= 1
    assert one(even, "ep", "all_to_all").bytes == tokens() // 4 * 2 * HIDDEN * ACT_BYTES
    for group, op in (("tp", "all_gather"), ("dp", "reduce_scatter"), ("pp", "send_recv")):
        assert one(skew, group, op).bytes == one(even, group, op).bytes


def test_expert_gradients_reduce_over_the_expert_data_parallel_group():
    """A rank holds experts / ep of each layer's experts; their gradients are reduced among the dp / ep = 4
    ranks holding the same experts (spaced ep replicas apart), the dense ones among all dp = 8, bucket by bucket
    in the chunk's proportion; ZeRO-1 gathers each part over its own group."""
    sc, cl = scenario(tp=4, moe=MOE, ep=2)
    comm = step_comm(sc, cl)
    (d0, x0), (d1, x1) = chunk_params(4, [3, 4], experts=4, ep=2)
    assert x0 == 3 * 3 * HIDDEN * FFN // 4 * 2
    buckets = np.ceil(np.array([d0 + x0, d1 + x1], dtype=float) * GRAD_BYTES / BUCKET)
    assert comm.dp_buckets.tolist() == buckets.tolist()
    dense, expert = one(comm, "dp", "reduce_scatter"), one(comm, "dp-expert", "reduce_scatter")
    assert abs(dense.bytes - d0 * GRAD_BYTES / buckets[0]) <= 1 and dense.ranks == 8
    assert abs(expert.bytes - x0 * GRAD_BYTES / buckets[0]) <= 1 and expert.ranks == 4
    assert dense.count_per_step == expert.count_per_step == buckets[0]
    per_bucket = [seconds(cl, "reduce_scatter", d * GRAD_BYTES / b, 8, 8)
                  + seconds(cl, "reduce_scatter", x * GRAD_BYTES / b, 4, 16)
                  for (d, x), b in zip(((d0, x0), (d1, x1)), buckets)]
    assert comm.dp_bucket_s == pytest.approx(per_bucket, rel=1e-12)
    assert one(comm, "dp", "all_gather").bytes == d0 * WEIGHT_BYTES
    assert one(comm, "dp-expert", "all_gather").bytes == x0 * WEIGHT_BYTES
    assert comm.dp_after_s == pytest.approx([seconds(cl, "all_gather", d * WEIGHT_BYTES, 8, 8)
                                             + seconds(cl, "all_gather", x * WEIGHT_BYTES, 4, 16)
                                             for d, x in ((d0, x0), (d1, x1))], rel=1e-12)
