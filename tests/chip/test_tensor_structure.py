"""TensorE timed from NeuronCore's structure (`calibration.tensor_structure`) and NxD's MLP checkpoint at seq 8192."""
import numpy as np

from ultracluster import chip, stacks
from ultracluster import operators as opslib
from ultracluster.cluster import build_cluster
from ultracluster.cluster.catalog import TRAINIUM, TRAINIUM2
from ultracluster.calibration.fitted_files import DEFAULT
from ultracluster.scenario import load_scenario


def _scenario(**over):
    raw = {"name": "t", "stack": "neuronx-distributed", "model": {"preset": "llama3.1-70b"},
           "training": {"seq_len": 8192, "global_batch": 256, "micro_batch": 1, "steps": 1, "warmup_steps": 0},
           "parallelism": {"tp": 32, "pp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 8},
           "emulation": {"instances_per_actor": 8}}
    for k, v in over.items():
        raw[k] = {**raw[k], **v}
    return load_scenario(raw)


def test_pe_array_rate_and_dma_engines():
    sc = _scenario()
    cl = build_cluster(sc, 8, DEFAULT.with_(tensor_efficiency=1.0))
    r = chip.rank_rates(cl, "bf16")
    # 128 x 128 PEs x 2 FLOPs x 2.8 GHz = 91.75 TFLOPS (H4's "92"), not the chip figure / 2 cores (95)
    assert abs(r.tensor_flop_per_s - 2 * 128 * 128 * 2.8e9) < 1e6
    assert TRAINIUM.tensor_hz == 2.8e9 and TRAINIUM2.tensor_hz == 2.4e9
    # HBM <-> SBUF through 16 DMA engines x 27 GiB/s = 464 GB/s per NeuronCore-v2 (H4; the chip's 1 TB/s of DMA,
    # H1): above a core's 820 GiB/s / 2 x 0.8 share of HBM, which is what a Trn1 rank streams at
    assert TRAINIUM.dma_core_bytes_per_s == 16 * 27 * 2**30
    assert r.hbm_bytes_per_s == 820 * 2**30 / 2 * 0.8
    off = chip.rank_rates(build_cluster(sc, 8, DEFAULT.with_(tensor_efficiency=1.0, tensor_structure=False)), "bf16")
    assert abs(off.tensor_flop_per_s - 95e12) < 1e6
    assert off.hbm_bytes_per_s == r.hbm_bytes_per_s
    # where a core's HBM share is above its DMA engines' (Trainium3 at full HBM efficiency: 4.9 TB/s / 8 against
    # 16 x 33 B/ns = 528 GB/s, H23), the engines cap it; without the structure the HBM share alone
    trn3 = _scenario(cluster={"instance": "trn3gen2.16xlarge", "instances": 36}, parallelism={"tp": 8, "pp": 1},
                     training={"global_batch": 288})
    full = DEFAULT.with_(tensor_efficiency=1.0, hbm_efficiency=1.0)
    capped = chip.rank_rates(build_cluster(trn3, 8, full), "bf16")
    assert capped.hbm_bytes_per_s == 16 * 33e9 * 2            # a rank of LNC=2: two cores' engines
    loose = chip.rank_rates(build_cluster(trn3, 8, full.with_(tensor_structure=False)), "bf16")
    assert loose.hbm_bytes_per_s > capped.hbm_bytes_per_s


def test_psum_evictions_count_each_output_once():
    m, k, n = 1024.0, 128.0, 4096.0
    fwd = {"tensor": np.array([2 * m * k * n]), "m": np.array([m]), "k": np.array([k]), "n": np.array([n])}
    assert chip.psum_evictions(fwd, "forward")[0] == m * n
    bwd = dict(fwd, tensor=np.array([4 * m * k * n]))
    assert chip.psum_evictions(bwd, "backward")[0] == m * k + k * n
    off = dict(fwd, evicts=np.array([False]))
    assert chip.psum_evictions(off, "forward")[0] == 0.0
    # a K = 128 matmul is VectorE-bound on its evictions: 512 output columns take 512 VectorE cycles at 1.12 GHz
    # against 512 TensorE cycles at 2.8 GHz
    rates = chip.rank_rates(build_cluster(_scenario(), 8, DEFAULT), "bf16")
    work = {**fwd, "vector": np.zeros(1), "scalar": np.zeros(1), "gpsimd": np.zeros(1), "bytes": np.zeros(1)}
    t = chip.op_seconds(work, rates)[0] - rates.kernel_launch_s
    assert abs(t - m * n / rates.vector_elem_per_s) < 1e-12


def test_nxd_checkpoints_the_mlp_at_seq_8192_with_a_pipeline():
    assert _scenario().training.checkpoint_mlp is True
    assert _scenario(training={"seq_len": 4096}).training.checkpoint_mlp is False
    assert _scenario(parallelism={"tp": 32, "pp": 1}).training.checkpoint_mlp is False
    assert _scenario(training={"checkpoint_mlp": False}).training.checkpoint_mlp is False
    assert stacks.filled(_scenario())["training.checkpoint_mlp"] is True
    on, off = _scenario(), _scenario(training={"checkpoint_mlp": False})
    assert opslib.recompute_mode(on.training) == "selective_mlp"
    cl = build_cluster(on, 8, DEFAULT)
    t_on, t_off = chip.chunk_times(on, cl), chip.chunk_times(off, build_cluster(off, 8, DEFAULT))
    # the backward reruns the MLP block's forward: more backward time and HFU, the same forward
    assert np.allclose(t_on.forward_s, t_off.forward_s)
    assert np.all(t_on.backward_s > t_off.backward_s * 1.05)
    assert np.all(t_on.flops_per_microbatch > t_off.flops_per_microbatch)
