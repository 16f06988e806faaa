"""A real 2-node Ray cluster on this machine (started in a subprocess by two_node_cluster.py, so the shared
test Ray is never disturbed): the scenario spreads over both nodes and gives the same summary.json as the
embedded run, with ray_nodes = 2; `ray job submit --working-dir . -- ultracluster run ...` writes the run
directory it names and prints the summary to the job log."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ultracluster import load_scenario, run

HELPER = Path(__file__).with_name("two_node_cluster.py")


def without_ray_nodes(summary: dict) -> str:
    return json.dumps({k: v for k, v in summary.items() if k != "ray_nodes"}, sort_keys=True)


def steps(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "steps.csv").drop(columns=["wall_s"])


def test_two_node_cluster_matches_embedded_run_and_ray_job_submit_works(ray_session, scenarios_dir, tmp_path):
    scenario = scenarios_dir / "smoke.yaml"
    run(load_scenario(scenario), out=tmp_path / "embedded")
    done = subprocess.run([sys.executable, str(HELPER), str(tmp_path), str(scenario), "--job", "scenarios/smoke.yaml"],
                          capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    assert result["cli"]["rc"] == 0, result["cli"]["stderr"]

    embedded = json.loads((tmp_path / "embedded" / "summary.json").read_text())
    cluster = json.loads((tmp_path / "cluster" / "summary.json").read_text())
    assert embedded["ray_nodes"] == 1 and cluster["ray_nodes"] == 2
    assert json.loads((tmp_path / "cluster" / "run.json").read_text())["actors"] >= 2
    assert without_ray_nodes(cluster) == without_ray_nodes(embedded)
    pd.testing.assert_frame_equal(steps(tmp_path / "cluster"), steps(tmp_path / "embedded"))

    job = result["job"]
    assert job["rc"] == 0, job["stdout"][-3000:] + job["stderr"]
    assert "succeeded" in job["stdout"] + job["stderr"]
    assert "step time" in job["stdout"] and "emulated by" in job["stdout"]   # the summary, in the job log
    submitted = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert submitted["ray_nodes"] == 2
    assert without_ray_nodes(submitted) == without_ray_nodes(embedded)
