"""A real 2-node Ray cluster on this machine with token authentication on (started in a subprocess by
two_node_cluster.py, so the shared test Ray is never disturbed): the scenario spreads over both nodes and gives the
same summary.json as the embedded run, with ray_nodes = 2; `ray job submit --working-dir . -- ultracluster run ...`
with the token writes the run directory it names and prints the summary to the job log; without the token Ray
refuses `ray job list`, and `ultracluster run --address` exits 4 with one line saying what to set."""
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
    done = subprocess.run([sys.executable, str(HELPER), str(tmp_path), str(scenario), "--job", "scenarios/smoke.yaml",
                           "--unauthenticated"], capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    assert result["auth"]["mode"] == "token" and result["auth"]["token_chars"] >= 32, result["auth"]
    assert result["cli"]["rc"] == 0, result["cli"]["stderr"]

    # without the token: Ray refuses the job API, and ultracluster says in one line what to set, within seconds
    refused = result["unauthenticated"]
    assert refused["job_rc"] != 0 and "Unauthorized" in refused["job"], refused["job"]
    assert refused["cli_rc"] == 4, refused["cli_stderr"]
    lines = [ln for ln in refused["cli_stderr"].splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: the Ray cluster at {result['address']} requires its authentication token: "
                               "set RAY_AUTH_MODE=token (it is unset) and the cluster's token in "
                               "RAY_AUTH_TOKEN_PATH=FILE or RAY_AUTH_TOKEN"), lines[0]
    assert refused["cli_s"] < 30, refused["cli_s"]
    assert not (tmp_path / "noauth").exists()

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
