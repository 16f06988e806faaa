"""Pipeline exchanges as the XLA stacks run them: NxD's receive and send tasks and NeMo's p2p exchanges are each a
collective over the stage pair in a graph of their own, so both stages wait in them and none hides behind compute
(`Calibration.serial_exchanges`, `stacks.Engine.serial_exchanges`, `replay.engine.serial_sends`)."""
from dataclasses import replace

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.calibration.fitted_files import fitted
from ultracluster.replay.engine import serial_sends
from ultracluster.runner import predict


def llama2_70b(pp: int, stack: str = "neuronx-distributed") -> dict:
    """Llama-2-70B TP32 on 32 trn1.32xlarge, GBS 1024 at seq 4096: the NxD tp_pp example's job."""
    sc = {"name": f"l70-pp{pp}", "stack": stack, "model": {"preset": "llama2-70b"},
          "training": {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "precision": "bf16", "steps": 1,
                       "warmup_steps": 0},
          "parallelism": {"tp": 32, "pp": pp}, "cluster": {"instance": "trn1.32xlarge", "instances": 32}}
    if stack == "custom":
        sc["parallelism"]["sequence_parallel"] = True
    return sc


def test_serial_sends_put_each_exchange_on_both_stages():
    fwd, bwd = np.array([[10.0, 20.0, 30.0]]), np.array([[1.0, 2.0, 3.0]])
    send_f, send_b = np.array([0.5, 0.25, 0.0]), np.array([0.0, 0.5, 0.25])   # send_b: gradient_sends(send_f)
    f, b, sf, sb, xf, xb = serial_sends(fwd, bwd, send_f, send_b, True)
    # forward of chunk c: the send to c + 1 and the receive from c - 1; backward: the receive from c + 1, the send
    # to c - 1
    assert xf.tolist() == [0.5, 0.75, 0.25] and xb.tolist() == [0.5, 0.75, 0.25]
    assert f.tolist() == [[10.5, 20.75, 30.25]] and b.tolist() == [[1.5, 2.75, 3.25]]
    assert not sf.any() and not sb.any()
    # off: the same arrays, bit for bit
    f0, b0, sf0, sb0, xf0, _ = serial_sends(fwd, bwd, send_f, send_b, False)
    assert f0 is fwd and b0 is bwd and sf0 is send_f and sb0 is send_b and not xf0.any()
    # a row axis (the planner): each row its own stack's rule
    rows = serial_sends(np.vstack([fwd, fwd]), np.vstack([bwd, bwd]), np.vstack([send_f, send_f]),
                        np.vstack([send_b, send_b]), np.array([True, False]))
    assert rows[0][0].tolist() == [10.5, 20.75, 30.25] and rows[0][1].tolist() == fwd[0].tolist()
    assert rows[2][1].tolist() == send_f.tolist() and not rows[2][0].any()


@pytest.fixture(scope="module")
def seventy():
    cal = fitted()
    off = replace(cal, serial_exchanges=False)
    return {(pp, on): predict(load_scenario(llama2_70b(pp)), cal if on else off) for pp in (4, 8) for on in (True, False)}


def test_pp8_costs_more_than_pp4_by_its_exchanges(seventy):
    """Every published NxD pair says PP8 is slower than PP4 for this job; PP8 has twice the microbatches per stage
    (256 against 128), each with its four exchanges on the stage's timeline."""
    assert seventy[(8, True)]["step_time_s"] > seventy[(4, True)]["step_time_s"]
    # what orders them is the exchanges: overlapped as on GPUs, PP8 would come out the faster
    assert seventy[(8, False)]["step_time_s"] < seventy[(4, False)]["step_time_s"]
    # and the exchanges are exposed in full, twice as many of them on PP8
    assert seventy[(8, True)]["comm_pp_hidden_s"] == 0 and seventy[(4, True)]["comm_pp_hidden_s"] == 0
    assert seventy[(8, True)]["pp_comm_s"] > 2 * seventy[(4, True)]["pp_comm_s"] * 0.9
    assert seventy[(4, False)]["comm_pp_hidden_s"] > 0


def test_a_stack_without_graph_exchanges_keeps_sends_overlapped():
    custom = predict(load_scenario(llama2_70b(4, "custom")))
    nxd = predict(load_scenario(llama2_70b(4)))
    assert custom["comm_pp_hidden_s"] > 0
    assert nxd["comm_pp_hidden_s"] == 0 and nxd["pp_comm_s"] > custom["pp_comm_s"]
