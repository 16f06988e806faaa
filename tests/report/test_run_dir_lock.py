"""One run per run directory (no Ray: shards in-process, real processes and signals for the lock holders): the
lock, a stale lock taken over, the staging directory moved into place whole, directories that are refused."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ultracluster import load_scenario
from ultracluster.shards.local import local_shards
from ultracluster.cli import main
from ultracluster.errors import EXIT_BAD_INPUT, OutDirError
from ultracluster.runner import run
from ultracluster.report.rundir import RunDirectory, RunDirLock

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scenarios" / "smoke.yaml"
HOLD = """
import sys, time
from ultracluster.report.rundir import RunDirectory
with RunDirectory(sys.argv[1]) as d:
    d.steps.path.write_text("step\\n0\\n")          # a step written into its staging directory
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""
RUN = """
import sys, time
from ultracluster import load_scenario
from ultracluster.shards.local import local_shards
from ultracluster.errors import OutDirError
from ultracluster.runner import run
try:
    run(load_scenario(sys.argv[1], ["training.steps=" + sys.argv[3]]), out=sys.argv[2], shards_factory=local_shards,
        on_step=lambda rec: time.sleep(float(sys.argv[4])))      # seconds per step: a run that lasts
except OutDirError as err:
    print(err, file=sys.stderr)
    sys.exit(2)
"""


def scenario(steps: int = 2):
    return load_scenario(SMOKE, [f"training.steps={steps}"])


def beside(out: Path) -> list[str]:
    """What lies beside a run directory in its parent, other than itself."""
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name)


@pytest.fixture()
def holder(tmp_path):
    """A real process that holds the lock of tmp_path/run (killed at the end if still alive)."""
    procs = []

    def start(seconds: float = 60) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run"), str(seconds)],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "holding"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_second_run_into_a_held_directory_exits_2_naming_the_holder(tmp_path, holder, capsys):
    proc = holder()
    start = time.monotonic()
    rc = main(["run", str(SMOKE), "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == EXIT_BAD_INPUT and time.monotonic() - start < 5         # refused before Ray starts
    assert f"run directory {tmp_path / 'run'} is in use by pid {proc.pid} on host {socket.gethostname()}" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    with pytest.raises(OutDirError, match=f"pid {proc.pid}"):             # the API, and `report`, too
        run(scenario(), out=tmp_path / "run" / ".." / "run", shards_factory=local_shards)
    assert not (tmp_path / "run").exists()
    proc.send_signal(signal.SIGTERM)
    proc.wait()


def test_a_dead_holders_lock_is_taken_over_and_its_leftovers_removed(tmp_path, holder):
    proc = holder()
    proc.kill()                                       # SIGKILL: no chance to clean up
    proc.wait()
    assert beside(tmp_path / "run") == [".run.lock", next(n for n in beside(tmp_path / "run") if ".partial-" in n)]
    held = json.loads((tmp_path / ".run.lock").read_text())
    assert held["pid"] == proc.pid and held["host"] == socket.gethostname()
    with RunDirectory(tmp_path / "run") as d:
        assert d.stale["pid"] == proc.pid
        assert beside(tmp_path / "run") == [".run.lock", d.path.name]      # the dead run's staging is gone
    assert beside(tmp_path / "run") == []


def test_a_lock_left_by_a_dead_pid_without_flock_is_stale_too(tmp_path, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".run.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))

    def no_flock(fd, op):
        raise OSError(38, "Function not implemented")  # ENOSYS: a file system without flock
    monkeypatch.setattr("ultracluster.report.rundir.fcntl.flock", no_flock)
    with RunDirectory(tmp_path / "run") as d:
        assert d.stale["pid"] == dead.pid
    (tmp_path / ".run.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    with pytest.raises(OutDirError, match=f"in use by pid {os.getpid()}"):
        RunDirectory(tmp_path / "run").__enter__()
    (tmp_path / ".run.lock").unlink()


def test_two_concurrent_runs_into_one_directory_never_mix(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-c", RUN, str(SMOKE), str(out), "60", "0.1"],
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / ".run.lock").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-c", RUN, str(SMOKE), str(out), "3", "0"], capture_output=True,
                            text=True, timeout=120)
    assert first.poll() is None                       # the first run was still going
    assert first.wait(timeout=300) == 0, first.stderr.read()
    first.stderr.close()
    assert second.returncode == 2 and f"is in use by pid {first.pid}" in second.stderr
    assert json.loads((out / "scenario.json").read_text())["training"]["steps"] == 60     # the first run's files,
    assert len((out / "steps.csv").read_text().splitlines()) == 1 + 61                   # every one of them
    assert json.loads((out / "summary.json").read_text())["scenario"] == "smoke" and beside(out) == []


def test_a_rerun_replaces_the_directory_whole_and_an_interrupted_one_keeps_only_its_steps(tmp_path):
    out = tmp_path / "run"
    run(scenario(2), out=out, shards_factory=local_shards)
    (out / "goodput.json").write_text("{}")           # as `run --hours` writes: the next run must not keep it
    first = (out / "summary.json").read_bytes()
    run(scenario(3), out=out, shards_factory=local_shards)
    assert not (out / "goodput.json").exists() and (out / "summary.json").read_bytes() != first
    assert len((out / "steps.csv").read_text().splitlines()) == 1 + 4

    seen = []

    def stop_after_two(rec):
        seen.append(rec.step)
        if len(seen) == 2:
            raise KeyboardInterrupt
    finished = {p.name: p.read_bytes() for p in out.iterdir()}
    run_dir = RunDirectory(out)
    with pytest.raises(KeyboardInterrupt), run_dir:  # a finished run is replaced only by a finished one
        run(scenario(5), out=run_dir, shards_factory=local_shards, on_step=stop_after_two)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == finished and beside(out) == []
    assert run_dir.kept_earlier.startswith("scenario ") and "feasible" in run_dir.kept_earlier
    seen.clear()
    out = tmp_path / "other" / "unfinished"
    with pytest.raises(KeyboardInterrupt):
        run(scenario(5), out=out, shards_factory=local_shards, on_step=stop_after_two)
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "steps.csv"]     # no summary.json
    ended = json.loads((out / "run.json").read_text())
    assert ended["finished"] is False and ended["interrupted"] is True and ended["signal"] == "SIGINT"
    assert ended["steps_finished"] == 2 and len((out / "steps.csv").read_text().splitlines()) == 3
    assert beside(out) == []

    def stop_at_once(rec):
        raise KeyboardInterrupt
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(KeyboardInterrupt):
        run(load_scenario(SMOKE, ["training.warmup_steps=0"]), out=out, shards_factory=local_shards,
            on_step=stop_at_once)                    # one step written: it replaces the directory
    assert json.loads((out / "run.json").read_text())["steps_finished"] == 1
    with pytest.raises(OutDirError):                 # bad --out: nothing written, nothing replaced
        run(scenario(), out=out / "steps.csv", shards_factory=local_shards)
    assert {p.name for p in out.iterdir()} == set(before)


def test_directories_that_hold_other_things_are_never_replaced(tmp_path, monkeypatch):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "notes.txt").write_text("mine")
    (mixed / "summary.json").write_text("{}")
    with pytest.raises(OutDirError, match=r"holds 1 entry a run does not write \(notes.txt\)"):
        run(scenario(), out=mixed, shards_factory=local_shards)
    (mixed / "notes.txt").unlink()
    (mixed / "sub").mkdir()
    with pytest.raises(OutDirError, match=r"\(sub/\)"):
        run(scenario(), out=mixed, shards_factory=local_shards)
    monkeypatch.chdir(mixed / "sub")
    for here in (".", ".."):
        with pytest.raises(OutDirError, match="the current directory or holds it"):
            RunDirectory(here).__enter__()
    assert (mixed / "sub").is_dir() and beside(mixed) == []


def test_report_waits_for_no_run_but_refuses_a_held_directory(tmp_path, holder, capsys):
    out = tmp_path / "run"
    run(scenario(2), out=out, shards_factory=local_shards)
    proc = holder()
    assert main(["report", str(out), "--quiet"]) == EXIT_BAD_INPUT
    assert f"in use by pid {proc.pid}" in capsys.readouterr().err
    proc.kill()
    proc.wait()
    with RunDirLock(out):                             # the lock alone: taken over from the dead holder
        pass


def test_run_refuses_to_replace_an_earlier_run_without_force(tmp_path, capsys):
    out = tmp_path / "runs" / "smoke"
    report = run(load_scenario(SMOKE, ["training.steps=1", "training.warmup_steps=0"]), out=out,
                 shards_factory=local_shards)
    kept = (out / "summary.json").read_bytes()
    assert report.summary["feasible"]
    # the CLI refuses before it starts anything (no Ray), naming the earlier run and --force
    assert main(["run", str(SMOKE), "--out", str(out), "--quiet", "--set", "parallelism.tp=4"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "already holds a run (scenario smoke, feasible, written" in err and "--force" in err
    assert "Traceback" not in err and (out / "summary.json").read_bytes() == kept
    assert sorted(p.name for p in out.parent.iterdir()) == ["smoke"]   # no lock, no staging left behind
    with pytest.raises(OutDirError, match="already holds a run"):
        RunDirectory(out, force=False).__enter__()
    (out / "summary.json").unlink()                 # an unfinished run (steps.csv, run.json) is a run too
    with pytest.raises(OutDirError, match="already holds a run \\(an unfinished run"):
        RunDirectory(out, force=False).__enter__()
    for p in out.iterdir():
        p.unlink()
    with RunDirectory(out, force=False) as d:       # an empty directory is no earlier run
        (d.path / "summary.json").write_text("{}")
    with RunDirectory(out, force=True) as d:        # --force replaces it
        (d.path / "summary.json").write_text('{"scenario": "x"}')
    assert json.loads((out / "summary.json").read_text()) == {"scenario": "x"}
