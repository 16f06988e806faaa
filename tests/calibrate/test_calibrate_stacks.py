"""`ultracluster calibrate` knows stacks: a user's rows of one stack move that stack's engine and the shared hardware
factors, never another stack's engine."""
from __future__ import annotations

import csv

import pytest

from ultracluster.calibrate.command import calibrate
from ultracluster.calibrate.fit import CANDIDATES
from ultracluster.calibration.fitted_files import fitted
from ultracluster.calibration.profile import calibration_of
from ultracluster.scenario import load_scenario
from ultracluster.layouts.setting_times import one_step, replayed_step_time


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["scenario", "seq_per_s", "note"])
        w.writeheader()
        w.writerows(rows)
    return str(path)


def _seq_per_s(path, cal=None) -> float:
    sc = load_scenario(path)
    return sc.training.global_batch / replayed_step_time(one_step(sc), cal or fitted())


def test_nxd_pipeline_rows_move_nxds_engine_not_nemos(tmp_path, calibration_dir):
    scen = calibration_dir.parents[1] / "scenarios"
    pp = scen / "calib-llama2-13b-tp8pp4.yaml"
    flat = scen / "calib-llama2-7b-tp8.yaml"
    nemo = scen / "calib-gpt3-23b-tp8pp4.yaml"
    # our NxD pipeline runs 8 % slower than the shipped fit says, the no-pipeline run as it says
    rows = [{"scenario": str(pp), "seq_per_s": 0.92 * _seq_per_s(pp), "note": "NxD pipeline"},
            {"scenario": str(flat), "seq_per_s": _seq_per_s(flat), "note": "NxD"}]
    done = calibrate(_write(tmp_path / "m.csv", rows))
    p = done.profile
    assert p["fitted"][0] == "graph_s_nxd"
    assert p["factors"]["graph_s_nxd"] > fitted().graph_s_nxd * 10        # the engine took the slowdown
    assert "graph_s_nemo" not in p["fitted"] and "NeMo" in p["kept"]["graph_s_nemo"]["why"]
    # kept at the shipped value, or at its search floor where the shipped fit holds it at 0
    assert p["factors"]["graph_s_nemo"] == pytest.approx(max(fitted().graph_s_nemo, CANDIDATES["graph_s_nemo"][0]))
    # the NxD pipeline row is met, and a NeMo job of another stack barely moves
    cal = calibration_of(p)
    assert _seq_per_s(pp, cal) == pytest.approx(rows[0]["seq_per_s"], rel=0.02)
    assert _seq_per_s(nemo, cal) == pytest.approx(_seq_per_s(nemo), rel=0.02)
