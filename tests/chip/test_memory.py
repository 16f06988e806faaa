"""HBM per rank: activations follow the executed schedule; ZeRO-1 shards optimizer state."""
import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.memory import in_flight_peak, stage_memory
from ultracluster.operators import library_for
from ultracluster.replay.schedule import stage_programs


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16), (4, 2)])
def test_1f1b_holds_up_to_p_microbatches_on_the_first_stage(p, m):
    progs = stage_programs("1f1b", p, m)
    act = np.ones(p)
    assert [in_flight_peak(progs[s], act) for s in range(p)] == [min(p - s, m) for s in range(p)]
    assert in_flight_peak(stage_programs("gpipe", p, m)[0], act) == m
    inter = stage_programs("interleaved", p, m if m % p == 0 else p, 2)
    assert in_flight_peak(inter[0], np.ones(2 * p) / 2) >= min(p, m)


def scenario(**over):
    doc = {"name": "mem", "model": {"preset": "llama3.1-70b"},
           "training": {"seq_len": 8192, "global_batch": 1024},
           "parallelism": {"tp": 32, "pp": 8, "dp": 4}, "cluster": {"instance": "trn1.32xlarge", "instances": 32}}
    for k, v in over.items():
        doc[k] = {**doc[k], **v}
    return load_scenario(doc)


def memory(sc):
    cl = build_cluster(sc, 32)
    m = sc.training.global_batch // (sc.parallelism.dp * sc.training.micro_batch)
    progs = stage_programs(sc.parallelism.pp_schedule, cl.layout.pp, m, cl.layout.virtual_stages)
    return stage_memory(sc, cl, library_for(sc), progs)


def test_first_stage_holds_most_activations_and_zero1_shards_optimizer():
    mem = memory(scenario())
    acts = [s.activations_gib for s in mem]
    assert acts[0] == max(acts) and acts[0] > 4 * acts[-1] * 0.9
    # per TP rank and layer: q 8192 x 2 heads x 128 + k, v 1 replicated KV head each (8 KV heads over
    # TP32, as NxD replicates them) 2 x 8192 x 128 + o 2 x 128 x 8192 + MLP 3 x 8192 x 28672 / 32 + 2 norms
    layer = 8192 * 256 + 2 * 8192 * 128 + 256 * 8192 + 3 * 8192 * 28672 / 32 + 2 * 8192
    rank_params = 80 * layer + 2 * 128256 * 8192 / 32 + 8192      # + embedding, LM head, final norm
    opt = sum(s.optimizer_gib for s in mem) / len(mem)             # mean over the 8 stages
    assert opt == pytest.approx(rank_params / 8 * 12 / 4 / 2**30, rel=1e-9)   # 12 B/param over dp = 4
    no_zero = memory(scenario(training={"zero1": False}))
    assert no_zero[1].optimizer_gib == pytest.approx(4 * mem[1].optimizer_gib, rel=1e-9)
    assert mem[0].capacity_gib == 16.0


def test_full_recompute_saves_activation_memory():
    sel = memory(scenario())
    full = memory(scenario(training={"recompute": "full"}))
    assert full[0].activations_gib < 0.5 * sel[0].activations_gib


@pytest.mark.parametrize("schedule,p,m,v", [("1f1b", 4, 9, 1), ("gpipe", 3, 5, 1), ("interleaved", 4, 8, 2),
                                            ("interleaved", 3, 9, 3)])
def test_every_stages_held_vectors_at_once_are_the_walk_of_its_program(schedule, p, m, v):
    """`stages_held` (all stages at once, as the planner reads them) gives each stage the vectors of microbatches
    held per local chunk that a walk of its program meets, each once, in the order met; a stage's peak
    (`stage_peaks`) is the largest of their byte totals summed chunk by chunk."""
    from ultracluster.memory import stage_peaks, stacked_held, stages_held

    progs = stage_programs(schedule, p, m, v)
    forward = np.array([[kind == "F" for kind, _, _ in prog] for prog in progs])
    local = np.array([[c // p for _, _, c in prog] for prog in progs])
    held = stages_held(forward, local, v)
    act = np.random.default_rng(5).uniform(1.0, 3.0, (2, v, p))
    peaks = stage_peaks(stacked_held(held), act)
    for s, prog in enumerate(progs):
        now, met = [0] * v, [(0,) * v]
        for kind, _, c in prog:
            now[c // p] += 1 if kind == "F" else -1
            if tuple(now) not in met:
                met.append(tuple(now))
        assert held[s].tolist() == [list(map(float, x)) for x in met]
        for n in range(2):
            totals = []
            for x in met:
                t = x[0] * act[n, 0, s]
                for j in range(1, v):
                    t += x[j] * act[n, j, s]
                totals.append(t)
            assert peaks[n, s] == max(totals)


@pytest.mark.parametrize("v", [1, 2, 3])
def test_peaks_from_fewer_held_vectors_are_every_vectors_maximum_bit_for_bit(v):
    """`stage_peaks` leaves out held vectors no larger than another in any chunk (one chunk: all but the largest)
    where the bytes are finite and >= 0 (not -0.0): the same bits as the maximum over every vector of its ordered
    sum; other bytes (inf, -0.0, NaN) take every vector as before. Twice: the second from the kept vectors."""
    from ultracluster.memory import stage_peaks

    rng = np.random.default_rng(3 + v)
    held = rng.integers(0, 6, (5, 40, v)).astype(float)
    held[:, 0] = 0.0                                      # the empty vector, as `stacked_held` pads
    held[:, 7] = held[:, 3]                               # equal vectors
    for act in (rng.uniform(0.0, 1e9, (7, v, 5)), rng.uniform(0.0, 1.0, (7, v, 5)) * 10.0 ** rng.integers(
            -300, 300, (7, v, 5)), np.where(rng.uniform(size=(7, v, 5)) < 0.3, np.inf, 2.5),
                np.where(rng.uniform(size=(7, v, 5)) < 0.3, -0.0, 1.5), np.full((7, v, 5), np.nan)):
        with np.errstate(invalid="ignore"):
            total = held[None, :, :, 0] * act.transpose(0, 2, 1)[:, :, None, 0]
            for j in range(1, v):
                total = total + held[None, :, :, j] * act.transpose(0, 2, 1)[:, :, None, j]
            want = total.max(axis=2)
            for _ in range(2):
                got = stage_peaks(held, act)
                assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
