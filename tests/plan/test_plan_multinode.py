"""`ultracluster plan --address` on a real 2-node Ray cluster (started in a subprocess by
tests/cluster_ray/two_node_cluster.py, like the multi-node run test): the layout chunks run as Ray tasks on both
nodes (ray_nodes = 2) and the plan is the same as on one machine: the same layouts, feasible count, numbers and
best layouts."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ultracluster.plan.output import read_full_table


HELPER = Path(__file__).parents[1] / "cluster_ray" / "two_node_cluster.py"
MACHINE_KEYS = {"wall_s", "layouts_per_s", "ray_nodes", "evaluated_by", "replayed"}


def test_plan_on_two_nodes_matches_one_machine(scenarios_dir, tmp_path):
    scenario = scenarios_dir / "smoke.yaml"
    # one machine: a fresh process without Ray (this process may hold the tests' shared Ray)
    local_rc = subprocess.run([sys.executable, "-m", "ultracluster", "plan", str(scenario), "--top", "1", "--out",
                               str(tmp_path / "local"), "--quiet"], capture_output=True, text=True, timeout=600)
    assert local_rc.returncode == 0, local_rc.stderr[-3000:]
    done = subprocess.run([sys.executable, str(HELPER), str(tmp_path), str(scenario), "--command", "plan",
                           "--arg=--top", "--arg=1", "--arg=--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    assert result["cli"]["rc"] == 0, result["cli"]["stderr"]
    local = json.loads((tmp_path / "local" / "plan.json").read_text())
    cluster = json.loads((tmp_path / "cluster" / "plan.json").read_text())
    assert local["ray_nodes"] == 0 and cluster["ray_nodes"] == 2
    assert {k: v for k, v in cluster.items() if k not in MACHINE_KEYS} == \
        {k: v for k, v in local.items() if k not in MACHINE_KEYS}
    assert cluster["replayed"][0]["label"] == local["replayed"][0]["label"]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "cluster" / "plan.csv"),
                                  pd.read_csv(tmp_path / "local" / "plan.csv"), check_exact=True)
    pd.testing.assert_frame_equal(read_full_table(tmp_path / "cluster"), read_full_table(tmp_path / "local"),
                                  check_exact=True)
