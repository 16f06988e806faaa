"""Many shard actors dying of one cause: `ultracluster run`, in its own process with its own embedded Ray, has
most of its real actors' worker processes killed with SIGKILL (what the kernel's OOM killer does) after two
steps. The run ends with exit 4 and one line that names the cause and how many died, with the first shard's
detail once; its finished steps are kept; everything it prints stays under 4 KiB."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ultracluster.actors import launch
from ultracluster.errors import EXIT_RUNTIME

REPO = Path(__file__).resolve().parents[2]

ACTORS, KILLED = 24, 20
DRIVER = """
import os, signal, sys
from contextlib import contextmanager
import ray
from ultracluster import runner
from ultracluster.actors import launch
from ultracluster.cli import main

@contextmanager
def launch_then_kill(scenario, cluster, address=None):
    with launch.launch_actors(scenario, cluster, address) as shards:
        shard_steps = shards.shard_steps
        pids = ray.get([a.__ray_call__.remote(lambda self: os.getpid()) for a in shards.actors])

        def shard_steps_killing_on_third_step(step):
            if step == 2:
                for pid in pids[:KILLED]:
                    os.kill(pid, signal.SIGKILL)
            return shard_steps(step)

        shards.shard_steps = shard_steps_killing_on_third_step
        yield shards

runner.launch_actors = launch_then_kill
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="kills the actors' worker processes by pid")
def test_many_actors_killed_at_once_end_the_run_in_one_line_under_4_kib(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER.replace("KILLED", str(KILLED)), "run", str(REPO / "scenarios" / "smoke.yaml"),
         "--out", str(out), "--set", f"cluster.instances={ACTORS}", "--set", "training.global_batch=48",
         "--set", "emulation.instances_per_actor=1", "--set", "training.steps=4"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    printed = done.stdout + done.stderr
    assert done.returncode == EXIT_RUNTIME, printed[-3000:]
    assert len(printed.encode()) < 4096, printed
    died = [line for line in printed.splitlines() if "actors died" in line]
    assert len(died) == 1, printed
    line = died[0]
    assert line.startswith(f"error: {KILLED} of {ACTORS} actors died: {KILLED} whose worker process exited "), line
    assert line.count("the first, shard 0 (instances 0-0): ") == 1 and line.count("shard ") == 1, line
    assert "Traceback" not in printed and "Unhandled error" not in printed and "(raylet)" not in printed
    steps = pd.read_csv(out / "steps.csv")
    assert steps["step"].tolist() == [0, 1]
    assert not (out / "summary.json").exists()


def test_causes_group_and_the_line_stays_short_whatever_the_number_of_shards():
    oom = ("1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.0.0.{i}, "
           "ID: 9a{i:06x}) was 22.90GB used / 23.59GB limit (0.97)\nOOM kill reason: ...\n" + "x" * 2000)
    killed = "The actor died unexpectedly.\n\tpid: {i}\nThe actor is dead because it was killed by `ray.kill`."
    dead = [(f"shard {i} (instances {i}-{i})", (oom if i % 10 else killed).format(i=i)) for i in range(10_000)]
    msg = launch.dead_actor_message(dead, 10_000)
    assert "\n" not in msg and len(msg) < 2048
    assert msg.startswith("10,000 of 10,000 actors died: 9,000 killed by Ray's memory monitor (the node ran out of "
                          "memory) (the first, shard 1 (instances 1-1): 1 worker(s) were killed due to the node "
                          "running low on memory. Memory on the node (IP: 10.0.0.1, ")
    assert "; 1,000 killed with ray.kill (the first, shard 0 (instances 0-0): The actor is dead because it was " \
           "killed by `ray.kill`.)" in msg
    # many different causes: the first CAUSES_SHOWN by count, the rest counted
    odd = [(f"shard {i} (instances {i}-{i})", f"worker crashed with {chr(65 + i % 26)}{'!' * (i % 26)}")
           for i in range(260)]
    msg = launch.dead_actor_message(odd, 260)
    assert len(msg) < 2048 and msg.count("(the first, ") == launch.CAUSES_SHOWN
    assert f"and {260 - 10 * launch.CAUSES_SHOWN} more of {26 - launch.CAUSES_SHOWN} other cause(s)" in msg
