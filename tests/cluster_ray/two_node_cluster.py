"""A real 2-node Ray cluster on this machine's loopback → ultracluster runs against it → cluster shut down.

Run by test_cluster_multinode.py in a subprocess, never in the pytest process (whose shared Ray must not
be disturbed). It starts a head and a second node with `ray.cluster_utils.Cluster`, each advertising
`ultracluster_shard`, in a private temp dir with private ports, with token authentication on as
docs/ray-clusters.md says (RAY_AUTH_MODE=token, a token from `ray get-auth-token --generate` in a private HOME,
RAY_AUTH_TOKEN_PATH naming it: every node, driver and `ray job` command below has it; --no-auth: off); with
--unauthenticated also tries the cluster without the token (`ultracluster run --address` and `ray job list`,
RAY_AUTH_* removed from their environment); runs `python -m ultracluster run --address
<cluster>` as a driver process; with --job also submits `ultracluster run` through `ray job submit`
(dashboard on the head); with --stop-job submits one with --no-wait, waits for its second finished step in
the job log and stops it with `ray job stop` (SIGTERM to the entrypoint, SIGKILL 3 s later); then shuts down
exactly the nodes it started (never `ray stop`). Prints one JSON object with the exit codes and outputs.

usage: python two_node_cluster.py OUT_DIR SCENARIO [--job JOB_SCENARIO] [--stop-job JOB_SCENARIO] [--nodes N]
                                  [--no-cli] [--command run|plan|sweep] [--arg=ARG ...] [--set key=value ...]
                                  [--no-auth] [--unauthenticated]
(--job submits the --command with its --arg values; `run` alone as before)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARD_SLOTS_PER_NODE = 8
STEP_TIMEOUT_S = 150
# what a job leaves out of its upload (docs/ray-clusters.md: Ray's `excludes`, beside .gitignore and .rayignore)
EXCLUDES = json.dumps({"excludes": ["runs/", "plans/", "compare/"]})


def enable_token_auth(temp_dir: str) -> dict:
    """Token authentication on for this process and every process it starts, the documented way: a token made by
    `ray get-auth-token --generate` (in a private HOME, so that no ~/.ray/auth_token of this machine is touched or
    used), named by RAY_AUTH_TOKEN_PATH, and RAY_AUTH_MODE=token. Returns what was set."""
    home = Path(temp_dir) / "home"
    home.mkdir()
    ray_cli = str(Path(sys.executable).parent / "ray")
    made = subprocess.run([ray_cli, "get-auth-token", "--generate"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": str(home)})
    token = home / ".ray" / "auth_token"
    if made.returncode != 0 or not token.is_file() or made.stdout.strip() != token.read_text().strip():
        raise RuntimeError(f"ray get-auth-token --generate failed: {made.stderr[-500:]}")
    for k in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        os.environ.pop(k, None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    _refresh_auth()
    return {"mode": "token", "token_chars": len(made.stdout.strip())}


def _refresh_auth() -> None:
    """This process's Ray sees the RAY_AUTH_* just set (Ray read them when it was imported), as Ray's own
    `_enable_token_auth` refreshes them."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def without_auth() -> dict:
    """This process's environment without RAY_AUTH_* and with a HOME holding no token: a client of another
    machine that was never given the cluster's token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = tempfile.mkdtemp(prefix="ucnoauth-", dir="/tmp")
    return env


def unauthenticated(address: str, dashboard: str | None, scenario: str, out: Path) -> dict:
    """The cluster tried without its token: `ultracluster run --address` (must exit 4 with one line saying what to
    set) and, with a dashboard, `ray job list` (Ray refuses it: Unauthorized)."""
    env = without_auth()
    started = time.monotonic()
    cli = subprocess.run([sys.executable, "-m", "ultracluster", "run", scenario, "--out", str(out / "noauth"),
                          "--address", address], capture_output=True, text=True, timeout=STEP_TIMEOUT_S, cwd=REPO,
                         env=env)
    done = {"cli_rc": cli.returncode, "cli_stderr": cli.stderr[-2000:], "cli_s": round(time.monotonic() - started, 2)}
    if dashboard:
        job = subprocess.run([str(Path(sys.executable).parent / "ray"), "job", "list", "--address", dashboard],
                             capture_output=True, text=True, timeout=STEP_TIMEOUT_S, cwd=REPO, env=env)
        done.update(job_rc=job.returncode, job=(job.stdout + job.stderr)[-1500:])
    shutil.rmtree(env["HOME"], ignore_errors=True)
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def submit_then_stop(dashboard: str, scenario: str, out: Path, sets: list[str]) -> dict:
    """`ray job submit --no-wait` a run, wait for its second finished step in the job log, `ray job stop` it;
    returns the job's log, status and how long the stop took."""
    ray_cli = str(Path(sys.executable).parent / "ray")
    job_id = f"uc-stop-{os.getpid()}"

    def ray_job(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run([ray_cli, "job", *words], capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                              cwd=REPO)

    deadline = time.monotonic() + STEP_TIMEOUT_S
    while ray_job("list", "--address", dashboard).returncode != 0 and time.monotonic() < deadline:
        time.sleep(1)                                   # the dashboard's job API comes up after the node
    submit = subprocess.run([ray_cli, "job", "submit", "--address", dashboard, "--submission-id", job_id,
                             "--no-wait", "--working-dir", str(REPO), "--runtime-env-json", EXCLUDES, "--",
                             "ultracluster", "run", scenario,
                             "--out", str(out), *sets], capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                            cwd=REPO)
    done = {"submit_rc": submit.returncode, "submit": (submit.stdout + submit.stderr)[-2000:]}
    deadline, log = time.monotonic() + STEP_TIMEOUT_S, ""
    while submit.returncode == 0 and time.monotonic() < deadline:
        log = ray_job("logs", "--address", dashboard, job_id).stdout
        if re.search(r": step ([2-9]|\d\d+)/", log):      # a plain progress line: the second step finished
            break
        time.sleep(0.5)
    started = time.monotonic()
    stop = ray_job("stop", "--address", dashboard, job_id)
    done.update(stop_rc=stop.returncode, stop=(stop.stdout + stop.stderr)[-2000:],
                stop_s=round(time.monotonic() - started, 2), steps_seen=bool(log))
    done["status"] = ray_job("status", "--address", dashboard, job_id).stdout[-1000:]
    done["log"] = ray_job("logs", "--address", dashboard, job_id).stdout[-8000:]
    return done


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("scenario")
    ap.add_argument("--job", help="scenario (path relative to the repo) to submit with `ray job submit`")
    ap.add_argument("--stop-job", help="scenario (path relative to the repo) to submit, then stop mid-run")
    ap.add_argument("--nodes", type=int, default=2, help="nodes of the cluster (default 2)")
    ap.add_argument("--no-cli", action="store_true", help="skip the `ultracluster run --address` driver run")
    ap.add_argument("--command", default="run", help="the driver's (and the job's) subcommand: run (default), "
                                                     "plan or sweep")
    ap.add_argument("--arg", action="append", default=[], help="a further argument of the driver's command")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--no-auth", action="store_true", help="start the cluster without token authentication")
    ap.add_argument("--unauthenticated", action="store_true",
                    help="also try the cluster without its token (ultracluster run --address, ray job list)")
    args = ap.parse_args()

    import ray._common.utils
    import ray._private.utils
    from ray.cluster_utils import Cluster

    # Cluster() writes /tmp/ray/ray_current_cluster, which would make a bare `ray.init()` anywhere on this
    # machine attach to this test cluster (and removes it on shutdown, whoever wrote it): keep it private.
    write_ray_address = ray._private.utils.write_ray_address
    ray._private.utils.write_ray_address = lambda *a, **k: None
    ray._common.utils.reset_ray_address = lambda *a, **k: None
    os.environ.pop("RAY_ADDRESS", None)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

    temp_dir = tempfile.mkdtemp(prefix="ucray-", dir="/tmp")   # short: Unix socket paths are limited
    temp_dirs = [temp_dir]
    out = Path(args.out)
    result: dict = {}
    dashboard_port = free_port()
    # both nodes on this machine's own address (Ray maps 127.0.0.1 in a driver's address to it anyway)
    node = dict(num_cpus=1, resources={"ultracluster_shard": SHARD_SLOTS_PER_NODE}, object_store_memory=200 * 1024**2)
    cluster = None
    try:
        result["auth"] = {"mode": "disabled"} if args.no_auth else enable_token_auth(temp_dir)
        if args.no_auth:
            os.environ["RAY_AUTH_MODE"] = "disabled"
            _refresh_auth()
        cluster = Cluster(initialize_head=True, head_node_args=dict(
            node, temp_dir=temp_dir, include_dashboard=bool(args.job or args.stop_job or args.unauthenticated),
            dashboard_host="127.0.0.1",
            dashboard_port=dashboard_port, dashboard_agent_listen_port=free_port(),
            ray_client_server_port=free_port()))
        # as `ray start --temp-dir` does: a job's driver finds its cluster by this file in the head's temp
        # dir (without it Ray guesses among every Ray running on the machine)
        write_ray_address(cluster.address, temp_dir)
        for _ in range(args.nodes - 1):
            # each node its own temp dir, as on separate machines: two raylets sharing one would share its
            # runtime_resources, and Ray unpacks a job's working_dir afresh on each node (removing what is
            # there), so a node setting up the job's actors would pull the files from under the job's driver
            extra = tempfile.mkdtemp(prefix="ucray-", dir="/tmp")
            temp_dirs.append(extra)
            cluster.add_node(**node, temp_dir=extra)
        cluster.wait_for_nodes()
        result["address"] = cluster.address
        sets = [x for s in args.set for x in ("--set", s)]
        if not args.no_cli:
            cli = subprocess.run([sys.executable, "-m", "ultracluster", args.command, args.scenario, "--out",
                                  str(out / "cluster"), "--address", cluster.address, *sets, *args.arg],
                                 capture_output=True, text=True, timeout=STEP_TIMEOUT_S, cwd=REPO)
            result["cli"] = {"rc": cli.returncode, "stdout": cli.stdout, "stderr": cli.stderr[-4000:]}
        if args.unauthenticated:
            result["unauthenticated"] = unauthenticated(cluster.address, f"http://127.0.0.1:{dashboard_port}",
                                                        args.scenario, out)
        if args.stop_job:
            result["stop"] = submit_then_stop(f"http://127.0.0.1:{dashboard_port}", args.stop_job, out / "stopped",
                                              sets)
        if args.job:
            ray_cli = Path(sys.executable).parent / "ray"
            # the job runs the driver's command (`run` unless --command says otherwise) with its arguments
            job_args = args.arg if args.command != "run" else []
            job = subprocess.run([str(ray_cli), "job", "submit", "--address", f"http://127.0.0.1:{dashboard_port}",
                                  "--working-dir", str(REPO), "--runtime-env-json", EXCLUDES, "--", "ultracluster",
                                  args.command, args.job, "--out", str(out / "job"), *job_args],
                                 capture_output=True, text=True, timeout=STEP_TIMEOUT_S, cwd=REPO)
            result["job"] = {"rc": job.returncode, "stdout": job.stdout, "stderr": job.stderr[-4000:]}
    except Exception as err:   # reported to the test, which fails with it
        result["error"] = f"{type(err).__name__}: {err}"
    finally:
        if cluster is not None:
            cluster.shutdown()
        for d in temp_dirs:
            shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
