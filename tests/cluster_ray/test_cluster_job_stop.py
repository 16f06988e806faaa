"""`ray job stop` on a running `ultracluster run` (a real one-node Ray cluster with its job server, started by
two_node_cluster.py in a subprocess so that the shared test Ray is never disturbed): Ray sends the
entrypoint SIGTERM and kills it 3 s later; the run must end cleanly within that time, with one line in the
job log, the finished steps at --out and run.json saying SIGTERM."""
import json
import subprocess
import sys
from pathlib import Path

HELPER = Path(__file__).with_name("two_node_cluster.py")


def test_ray_job_stop_ends_a_run_cleanly_and_keeps_its_steps(tmp_path, scenarios_dir):
    done = subprocess.run([sys.executable, str(HELPER), str(tmp_path), str(scenarios_dir / "smoke.yaml"),
                           "--nodes", "1", "--no-cli", "--stop-job", "scenarios/smoke.yaml",
                           "--set", "training.steps=2000"], capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    stop = result["stop"]
    assert stop["submit_rc"] == 0 and stop["steps_seen"], stop
    assert stop["stop_rc"] == 0 and "stopped" in stop["status"].lower(), stop
    out = tmp_path / "stopped"
    steps = len((out / "steps.csv").read_text().splitlines()) - 1
    assert steps >= 2
    log = stop["log"]
    assert f"interrupted after {steps} step(s) (SIGTERM); {out / 'steps.csv'} keeps them" in log, log[-3000:]
    assert "SIGTERM received" not in log and "Traceback" not in log
    ended = json.loads((out / "run.json").read_text())
    assert (ended["interrupted"], ended["signal"], ended["steps_finished"]) == (True, "SIGTERM", steps)
    # ended by itself, not by the SIGKILL 3 s later: its directory was moved into place, nothing left beside
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "steps.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stopped"]
