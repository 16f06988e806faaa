"""`ultracluster sweep` on a real 2-node Ray cluster (tests/cluster_ray/two_node_cluster.py, in a subprocess): as a
driver with --address, and through `ray job submit`; each gives the table a sweep in one process gives, row for
row, and the driver's variants ran as Ray tasks on both nodes."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

HELPER = Path(__file__).with_name("two_node_cluster.py")
VARY = ["--vary", "cluster.network.efa_gbps=100,200,400,800", "--vary", "training.micro_batch=1,2"]


def test_sweep_on_two_nodes_and_through_ray_job_submit_matches_one_process(scenarios_dir, tmp_path):
    scenario = scenarios_dir / "smoke.yaml"
    local = subprocess.run([sys.executable, "-m", "ultracluster", "sweep", str(scenario), *VARY, "--out",
                            str(tmp_path / "local"), "--quiet"], capture_output=True, text=True, timeout=600,
                           env={**__import__("os").environ, "RAY_ADDRESS": ""})
    assert local.returncode == 0, local.stderr[-3000:]
    done = subprocess.run([sys.executable, str(HELPER), str(tmp_path), str(scenario), "--command", "sweep",
                           "--job", "scenarios/smoke.yaml", *[f"--arg={a}" for a in VARY], "--arg=--quiet"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    assert result["cli"]["rc"] == 0, result["cli"]["stderr"]
    assert result["job"]["rc"] == 0, result["job"]["stdout"][-3000:] + result["job"]["stderr"]
    here = pd.read_csv(tmp_path / "local" / "sweep.csv").drop(columns="wall_s")
    assert len(here) == 8 and here["status"].eq("ok").all()
    for where in ("cluster", "job"):
        there = pd.read_csv(tmp_path / where / "sweep.csv").drop(columns="wall_s")
        pd.testing.assert_frame_equal(there, here, check_exact=True)
        meta = json.loads((tmp_path / where / "sweep.json").read_text())
        assert meta["finished"] and meta["evaluated_by"] == "Ray tasks"
    assert json.loads((tmp_path / "cluster" / "sweep.json").read_text())["ray_nodes"] == 2
