"""End to end on a real local Ray: folding, determinism, shipped scenarios, infeasible layouts, interruption."""
import json
import math
import subprocess
import sys

import pytest

from ultracluster import load_scenario, run
from ultracluster.errors import EXIT_INFEASIBLE
from ultracluster.runner import predict
from ultracluster.report.check import check_run_dir

PREDICTIONS = ("step_time_s", "tokens_per_s", "mfu", "hbm_peak_gib", "compute_s", "tp_comm_s", "pp_comm_s",
               "dp_comm_s", "bubble_s", "data_stall_s", "checkpoint_s", "other_s", "seq_per_s")


def numbers(summary):
    return {k: v for k, v in summary.items() if isinstance(v, (int, float)) and k != "ray_nodes"}


def test_folding_never_changes_a_prediction(ray_session, scenarios_dir, tmp_path):
    runs = {}
    for ipa in (1, 8):
        sc = load_scenario(scenarios_dir / "calib-gpt3-23b-tp8pp4.yaml",
                           [f"emulation.instances_per_actor={ipa}", "training.steps=1",
                            "faults.stragglers.fraction=0.01", "faults.stragglers.slowdown=1.4"])
        runs[ipa] = run(sc, out=tmp_path / f"ipa{ipa}")
    assert runs[1].emulation["actors"] == 32 and runs[8].emulation["actors"] == 4
    a, b = (json.loads((tmp_path / f"ipa{i}" / "summary.json").read_text()) for i in (1, 8))
    assert numbers(a) == numbers(b)
    assert a["payload_checked"] and b["payload_checked"]


def test_same_seed_same_report_and_stragglers_cost_time(ray_session, scenarios_dir):
    sets = ["faults.stragglers.fraction=0.02", "faults.stragglers.slowdown=1.5", "training.steps=1"]
    r1 = run(load_scenario(scenarios_dir / "smoke.yaml", sets))
    r2 = run(load_scenario(scenarios_dir / "smoke.yaml", sets))
    drop = ["wall_s"]
    assert r1.steps.drop(columns=drop).equals(r2.steps.drop(columns=drop))
    assert r1.summary == r2.summary
    base = run(load_scenario(scenarios_dir / "smoke.yaml", ["training.steps=1"]))
    assert base.summary["step_time_s"] * 1.01 < r1.summary["step_time_s"] < base.summary["step_time_s"] * 1.5
    # the same seed draws the same jitter: the whole difference is what the summary says stragglers cost
    assert r1.summary["straggler_cost_s"] == pytest.approx(r1.summary["step_time_s"] - base.summary["step_time_s"],
                                                           rel=1e-9)
    # the slowest rank of a step with stragglers is one of them; without any, no straggler costs anything
    stragglers = set(r1.ranks.loc[r1.ranks["slowdown"] > 1, "rank"])
    assert stragglers and int(r1.steps["slowest_rank"].iloc[-1]) in stragglers
    assert r1.summary["slowest_ranks"] and set(r1.summary["slowest_ranks"]) <= stragglers
    assert not (base.ranks["slowdown"] > 1).any() and base.summary["slowest_ranks"] == []
    assert (base.steps["straggler_cost_s"] == 0).all()


def test_every_shipped_scenario_runs(ray_session, scenarios_dir, tmp_path):
    files = sorted(scenarios_dir.glob("*.yaml"))
    assert len(files) >= 5
    for f in files:
        out = tmp_path / f.stem
        sc = load_scenario(f, ["training.steps=1", "training.warmup_steps=0"])
        rep = run(sc, out=out)
        assert rep.summary["feasible"], (f.name, rep.summary["reason"])
        same = predict(sc)          # the actors on Ray give the in-process numbers, to the last bit that matters
        for k in PREDICTIONS:
            assert rep.summary[k] == pytest.approx(same[k], rel=1e-9, abs=1e-12), (f.name, k)
        assert 0 < rep.summary["mfu"] <= 1
        assert rep.summary["step_time_s"] * rep.summary["tokens_per_s"] == pytest.approx(
            rep.summary["tokens_per_step"], rel=1e-9)
        assert check_run_dir(out) == [], f.name


def test_the_shipped_smoke_run_gives_its_golden_numbers(ray_session, scenarios_dir, tmp_path):
    """The run a user starts with, on real actors, against the pinned summary (tests/golden/smoke.json)."""
    golden = json.loads((scenarios_dir.parent / "tests" / "golden" / "smoke.json").read_text())
    rep = run(load_scenario(scenarios_dir / "smoke.yaml"), out=tmp_path / "smoke")
    for k in PREDICTIONS + ("step_time_low_s", "step_time_high_s", "hfu"):
        assert rep.summary[k] == pytest.approx(golden[k], rel=1e-9, abs=1e-12), k
    assert rep.summary["step_time_s"] == pytest.approx(golden["compute_s"] + golden["tp_comm_s"] + golden["pp_comm_s"]
                                                       + golden["dp_comm_s"] + golden["bubble_s"], rel=1e-9)


LLAMA70B_TRN1 = {
    "name": "llama70b-fit", "model": {"preset": "llama3.1-70b"},
    "training": {"seq_len": 8192, "global_batch": 1024, "steps": 1, "warmup_steps": 0},
    "cluster": {"instance": "trn1.32xlarge", "instances": 32},
}


def test_llama70b_tp32_pp8_fits_and_tp8_pp1_does_not(ray_session, tmp_path):
    fits = run(load_scenario({**LLAMA70B_TRN1, "parallelism": {"tp": 32, "pp": 8, "dp": 4}}))
    assert fits.summary["feasible"]
    assert fits.summary["hbm_peak_gib"] <= 16.0
    out = tmp_path / "nofit"
    nofit = run(load_scenario({**LLAMA70B_TRN1, "parallelism": {"tp": 8, "pp": 1}}), out=out)
    assert nofit.summary["feasible"] is False
    assert "does not fit in HBM" in nofit.summary["reason"] and "weights" in nofit.summary["reason"]
    assert nofit.summary["hbm_peak_gib"] > 16.0
    assert math.isnan(nofit.summary["step_time_s"])
    assert check_run_dir(out) == []


def test_interrupted_run_keeps_finished_steps(ray_session, scenarios_dir, tmp_path):
    seen = []

    def stop_after_two(rec):
        seen.append(rec.step)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(load_scenario(scenarios_dir / "smoke.yaml", ["training.steps=5"]), out=tmp_path, on_step=stop_after_two)
    lines = (tmp_path / "steps.csv").read_text().strip().splitlines()
    assert len(lines) == 1 + 2
    assert not (tmp_path / "summary.json").exists()
    assert not list(tmp_path.glob("*.tmp*"))


def test_cli_run_infeasible_exit_code_and_smoke(tmp_path, scenarios_dir):
    """The CLI in its own process (its own embedded Ray): smoke runs, an infeasible layout exits 3."""
    smoke = subprocess.run([sys.executable, "-m", "ultracluster", "run", str(scenarios_dir / "smoke.yaml"),
                            "--out", str(tmp_path / "smoke")], capture_output=True, text=True, timeout=300)
    assert smoke.returncode == 0, smoke.stderr
    assert "step time" in smoke.stdout and "Traceback" not in smoke.stderr
    check = subprocess.run([sys.executable, "-m", "ultracluster", "check", str(tmp_path / "smoke")],
                           capture_output=True, text=True, timeout=120)
    assert (check.returncode, check.stdout.split(":")[0]) == (0, "ok"), check.stdout + check.stderr
    bad = subprocess.run([sys.executable, "-m", "ultracluster", "run", str(scenarios_dir / "smoke.yaml"),
                          "--set", "model.hidden=65536", "--set", "model.ffn=262144", "--quiet",
                          "--out", str(tmp_path / "bad")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == EXIT_INFEASIBLE, bad.stderr
    assert "does not fit in HBM" in bad.stderr
    assert json.loads((tmp_path / "bad" / "summary.json").read_text())["feasible"] is False


def test_auto_folding_sizes_for_the_attached_cluster(ray_session, scenarios_dir):
    """With Ray attached (the session's 2-CPU Ray), `auto` is sized from the cluster's CPUs: 2 per CPU."""
    from ultracluster.actors.launch import attached
    from ultracluster.cluster import Capacity, resolve_instances_per_actor

    sc = load_scenario(scenarios_dir / "calib-gpt3-23b-tp8pp4.yaml", ["training.steps=1"])
    with attached(None) as capacity:
        assert capacity.cpus == int(ray_session.cluster_resources()["CPU"]) == 2
        assert capacity.memory_bytes == ray_session.available_resources()["memory"] > 0
        assert resolve_instances_per_actor(sc, capacity) == 8              # 32 instances over 4 actors
    assert resolve_instances_per_actor(sc, Capacity(64, 2.0**40)) == 2     # a big cluster: 16 actors at most
    assert ray_session.is_initialized()                                    # attaching never stops a Ray it found
    rep = run(sc)
    assert rep.emulation["actors"] == 4
