"""The chip model: golden roofline values with hand arithmetic, shape effects, LNC, and vectorization."""
import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.chip import RankRates, chunk_times, op_seconds, rank_rates, sbuf_rereads, tensor_utilization
from ultracluster.cluster import build_cluster
from ultracluster.calibration.factors import Calibration

RATES = RankRates(tensor_flop_per_s=100e12, vector_elem_per_s=2e12, scalar_elem_per_s=1e12, gpsimd_elem_per_s=1e11,
                  hbm_bytes_per_s=400e9, sbuf_bytes=24 << 20, kernel_launch_s=0.0)


def work(**kw):
    base = {k: np.zeros(1) for k in ("tensor", "vector", "scalar", "gpsimd", "bytes", "m", "k", "n")}
    base.update({k: np.array([float(v)]) for k, v in kw.items()})
    return base


def test_golden_roofline():
    # 4096x4096x4096 matmul: 2*4096^3 = 137.4 GFLOP at 100 TFLOP/s = 1.374 ms; bytes 3 x 32 MiB at 400 GB/s
    # = 0.25 ms -> compute bound. Stationary 4096x4096x2 B = 32 MiB > 12 MiB (half the SBUF): 3 blocks,
    # the moving operand is re-read twice: +64 MiB, still compute bound.
    w = work(tensor=2 * 4096**3, bytes=3 * 4096 * 4096 * 2, m=4096, k=4096, n=4096)
    assert op_seconds(w, RATES)[0] == pytest.approx(2 * 4096**3 / 100e12, rel=1e-12)
    # an elementwise op on 1 GB: memory bound, 1e9 / 400e9 = 2.5 ms; its 1e8 vector FLOPs take 50 us
    assert op_seconds(work(vector=1e8, bytes=1e9), RATES)[0] == pytest.approx(2.5e-3, rel=1e-12)
    # scalar-bound softmax exp: 5e9 / 1e12 = 5 ms
    assert op_seconds(work(scalar=5e9, vector=1e9, bytes=1e6), RATES)[0] == pytest.approx(5e-3, rel=1e-12)
    # the kernel launch is added to kernels that do work, not to empty ones
    slow = RankRates(**{**RATES.__dict__, "kernel_launch_s": 1e-5})
    assert op_seconds(work(bytes=4e5), slow)[0] == pytest.approx(1e-6 + 1e-5, rel=1e-12)
    assert op_seconds(work(), slow)[0] == 0.0


def test_small_and_ragged_matmuls_run_below_peak():
    assert tensor_utilization(np.array([4096.0]), np.array([4096.0]), np.array([4096.0]))[0] == 1.0
    # contraction 64 fills half of the 128 rows
    assert tensor_utilization(np.array([4096.0]), np.array([64.0]), np.array([4096.0]))[0] == pytest.approx(0.5)
    # vocabulary 50257 / 8 = 6282.125 columns: 50 tiles of 128 hold it, the last mostly empty
    n = 50257 / 8
    assert tensor_utilization(np.array([2048.0]), np.array([4096.0]), np.array([n]))[0] == pytest.approx(
        n / (128 * 50))
    # a 64-column moving tile costs the 64-cycle initiation interval (H4): full rate; 32 columns cost 64
    small = work(tensor=2 * 64 * 64 * 64, m=64, k=64, n=64)
    assert op_seconds(small, RATES)[0] == pytest.approx(2 * 64**3 / (100e12 * 0.5 * 0.5))
    assert tensor_utilization(np.array([32.0]), np.array([128.0]), np.array([128.0]))[0] == pytest.approx(0.5)
    # 600 columns: one full 512 tile and a last tile of 88 columns at 88 cycles
    assert tensor_utilization(np.array([600.0]), np.array([128.0]), np.array([128.0]))[0] == pytest.approx(1.0)
    assert tensor_utilization(np.array([540.0]), np.array([128.0]), np.array([128.0]))[0] == pytest.approx(540 / 576)


def test_sbuf_rereads():
    # stationary 1024 x 1024 x 2 B = 2 MiB fits in 12 MiB: no re-read; 8192 x 8192 x 2 = 128 MiB: 11 blocks
    assert sbuf_rereads(np.array([512.0]), np.array([1024.0]), np.array([1024.0]), 2, 2, 24 << 20)[0] == 0
    extra = sbuf_rereads(np.array([512.0]), np.array([8192.0]), np.array([8192.0]), 2, 2, 24 << 20)[0]
    assert extra == 10 * 512 * 8192 * 2


def scenario(instance="trn2.48xlarge", lnc=2, **training):
    return load_scenario({
        "name": "chip", "model": {"preset": "llama3.1-8b"},
        "training": {"seq_len": 4096, "global_batch": 64, **training},
        "parallelism": {"tp": 8}, "cluster": {"instance": instance, "instances": 1, "lnc": lnc},
    })


def test_lnc2_rank_owns_two_cores_and_a_share_of_hbm():
    c2 = build_cluster(scenario(lnc=2), 1)
    c1 = build_cluster(scenario(lnc=1), 1)
    r2, r1 = rank_rates(c2, "bf16"), rank_rates(c1, "bf16")
    assert r2.tensor_flop_per_s == pytest.approx(2 * r1.tensor_flop_per_s)
    assert r2.hbm_bytes_per_s == pytest.approx(2 * r1.hbm_bytes_per_s)
    # trn2: 8 physical cores per chip; at LNC=2 a rank gets 1/4 of the chip's 2.9 TB/s
    assert r2.hbm_bytes_per_s == pytest.approx(2.9e12 / 4 * c2.calibration.hbm_efficiency)
    assert r2.sbuf_bytes == 2 * 28 * (1 << 20)


def test_fp8_is_faster_than_bf16_on_trn2_but_not_on_trn1():
    def fwd(instance, precision, lnc):
        sc = scenario(instance, lnc, precision=precision)
        return chunk_times(sc, build_cluster(sc, 1)).forward_s.sum()

    assert fwd("trn2.48xlarge", "fp8", 2) < 0.9 * fwd("trn2.48xlarge", "bf16", 2)
    # a TensorE-bound matmul runs at the fp8 rate: 1299 / 667 TFLOPS per chip faster
    sc = scenario("trn2.48xlarge", 2)
    cl = build_cluster(sc, 1)
    big = {k: np.array([v]) for k, v in dict(tensor=2 * 8192**3, vector=0, scalar=0, gpsimd=0, bytes=3 * 8192**2,
                                               m=8192, k=8192, n=8192).items()}
    r16, r8 = rank_rates(cl, "bf16"), rank_rates(cl, "fp8")
    t16 = op_seconds(big, r16, 2, 2)[0] - r16.kernel_launch_s
    t8 = op_seconds(big, r8, 2, 1)[0] - r8.kernel_launch_s
    assert t16 / t8 == pytest.approx(1299 / 667, rel=1e-9)
    sc1 = load_scenario({"name": "c", "model": {"preset": "llama3.1-8b"}, "training": {"seq_len": 4096,
                        "global_batch": 32}, "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge",
                        "instances": 1}})
    t_bf16 = chunk_times(sc1, build_cluster(sc1, 1)).forward_s.sum()
    sc8 = load_scenario({**sc1.to_dict(), "training": {**sc1.to_dict()["training"], "precision": "fp8"},
                         "operators": []})
    assert chunk_times(sc8, build_cluster(sc8, 1)).forward_s.sum() <= t_bf16   # cFP8 runs at the bf16 rate


def test_backward_is_about_twice_forward_and_recompute_adds():
    base = {"calibration": Calibration(tensor_efficiency=0.5, kernel_launch_s=0.0)}
    t = {}
    for mode in ("none", "selective", "full"):
        sc = scenario(recompute=mode)
        cl = build_cluster(sc, 1, **base)
        t[mode] = chunk_times(sc, cl)
    ratio = t["none"].backward_s.sum() / t["none"].forward_s.sum()
    assert 1.8 < ratio < 2.8
    # flash attention's backward recomputes the scores anyway: selective recomputation adds nothing
    assert t["none"].backward_s.sum() == pytest.approx(t["selective"].backward_s.sum(), rel=1e-12)
    assert t["selective"].backward_s.sum() < t["full"].backward_s.sum()
    # materialized attention: selective recomputation reruns the attention forward
    m = {mode: chunk_times(sc, build_cluster(sc, 1, **base)) for mode in ("none", "selective")
         for sc in [scenario(recompute=mode, attention="materialized")]}
    assert m["none"].backward_s.sum() < m["selective"].backward_s.sum()
    # full recomputation repeats every layer's forward (not the embedding's or the LM head's)
    again = t["full"].backward_s.sum() - t["none"].backward_s.sum()
    assert 0.8 * t["none"].forward_s.sum() < again < t["none"].forward_s.sum()


@pytest.mark.parametrize("seq,qk,rest", [(2048, 0.625, 1.0), (4096, 0.5625, 0.75), (8192, 0.53125, 0.625)])
def test_flash_forward_works_over_whole_kv_tiles(seq, qk, rest):
    """NKI flash_fwd skips QK^T per 512-key block above the diagonal, but its mask (affine_select on GpSimd), max,
    exp, transposes and PV cover whole K/V tiles of 2048 keys; the backward skips per 128 x 512 block."""
    from ultracluster import operators as opslib
    from ultracluster.cluster import Layout

    sc = scenario(seq_len=seq)
    v = opslib.shape_variables(sc, Layout(tp=sc.parallelism.tp, pp=1, dp=1, cp=1))
    assert (v["causal"], v["causal_f"]) == (qk, rest)
    ops = opslib.applicable(opslib.library_for(sc), sc)
    fwd = opslib.evaluate(ops, "layer", "forward", v)
    bwd = opslib.evaluate(ops, "layer", "backward", v)
    i = list(fwd["names"]).index("attention_core")
    scores = v["T"] * v["S"] * v["hq"]
    d = v["d"]
    assert fwd["tensor"][i] == pytest.approx(scores * (2 * d * qk + (2 * d + 256) * rest))
    assert fwd["scalar"][i] == pytest.approx(scores * rest) and fwd["gpsimd"][i] == pytest.approx(scores * rest)
    assert bwd["scalar"][i] == pytest.approx(scores * qk)


def test_distinct_work_groups_entries_as_their_values_and_evaluates_each_once():
    """`chip._distinct_work`: the optimizer's work at each distinct entry of its variables (one byte key per entry),
    in the order entries first appear, and each entry's distinct one: what evaluating every entry gives."""
    from ultracluster import operators as opslib
    from ultracluster.chip import _distinct_work, layer_work

    sc = scenario()
    cl = build_cluster(sc, 1)
    v = opslib.shape_variables(sc, cl.layout, cl.calibration)
    ops = opslib.applicable(opslib.library_for(sc), sc, cl.calibration)
    pick = np.array([0, 1, 0, 2, 1, 1])         # entries from three distinct settings of P, some repeated
    V = {n: np.repeat(np.asarray(a, dtype=float).reshape(-1)[:1], pick.size) for n, a in v.items()}
    V["P"] = np.array([1e9, 2e9, 3e9])[pick]
    work, at = _distinct_work(ops, V, (("optimizer", "forward"),))
    assert at.tolist() == [0, 1, 0, 2, 1, 1]
    every = layer_work(ops, V, (("optimizer", "forward"),))[("optimizer", "forward")]
    for name in ("tensor", "vector", "bytes"):
        assert np.array_equal(work[("optimizer", "forward")][name][:, at], every[name])


def test_layer_costs_kernels_in_one_roofline_are_each_op_seconds_and_kept_only_with_kept_work():
    """`chip.layer_costs` times its six kernels' works joined in one roofline: each kernel's seconds as `op_seconds`
    gives them alone (bit for bit), fresh work or kept (`kept_layer_work`, several rates per shape: `at`); the joined
    work kept beside its parts only where they are kept (read-only), and found again by a second call."""
    from ultracluster import chip, operators as opslib

    sc = scenario()
    cl = build_cluster(sc, 1)
    cal = cl.calibration
    ops = opslib.applicable(opslib.library_for(sc), sc, cal)
    v1 = {n: np.array([x], dtype=float) for n, x in opslib.shape_variables(sc, cl.layout, cal).items()}
    rates = [rank_rates(cl, sc.training.precision), rank_rates(build_cluster(sc, 1, cal.with_(tensor_efficiency=0.3)),
                                                               sc.training.precision)]
    at = np.array([0, 0])
    v2 = {n: a[at] for n, a in v1.items()}
    R = chip.stack_rates(rates)
    chip._KERNEL_WORK.clear()
    fresh = chip.layer_costs(ops, v1, chip.stack_rates(rates[:1]), np.array(["none"]), np.array([1e-5]), True)
    assert not any(k[0] == "joined" for k in chip._KERNEL_WORK)          # not kept: not joined-and-kept either
    kept = chip.kept_layer_work(ops, v1)
    got = [chip.layer_costs(ops, v2, R, np.array(["none"] * 2), np.array([1e-5] * 2), True, kept, at) for _ in (0, 1)]
    assert sum(k[0] == "joined" for k in chip._KERNEL_WORK) == 1          # kept once, found by the second call
    lf = chip.op_seconds(kept[("layer", "forward")], R, v2["e"], v2["w"], "forward", at)
    hb = chip.op_seconds(kept[("head", "backward")], R, v2["e"], v2["w"], "backward", at)
    assert np.array_equal(got[0].layer_fwd, chip._sum0(lf) + 1e-5) and np.array_equal(got[0].head_bwd, chip._sum0(hb))
    assert np.array_equal(got[1].layer_bwd, got[0].layer_bwd)
    assert got[0].layer_fwd[0] == fresh.layer_fwd[0] and got[0].layer_fwd[1] > got[0].layer_fwd[0]
