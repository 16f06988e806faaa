"""How a run ends when it is told to stop: `ultracluster run` in its own process (its own embedded Ray) gets a
plain `kill` (SIGTERM) or a SIGHUP after its third step: one clean line, exit 128 + the signal, the finished
steps kept at --out with run.json saying what stopped it, no summary.json, and no process of its left."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = set(), [pid]
    while todo:
        pid = todo.pop()
        kids = [child for child, parent in parents.items() if parent == pid]
        found.update(kids)
        todo += kids
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the run's processes through /proc")
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_ends_a_run_cleanly_and_keeps_its_steps(tmp_path, sig, code):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "ultracluster", "run", str(REPO / "scenarios" / "smoke.yaml"),
                             "--set", "training.steps=2000", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        lines = []
        for line in proc.stderr:                       # plain progress lines: not a terminal
            lines.append(line)
            if ": step 3/" in line:            # printed as step 3 ends, before steps.csv has it
                break
        assert any(": step 3/" in line for line in lines), "".join(lines)
        ray_processes = descendants(proc.pid)
        assert ray_processes                           # the embedded Ray it started
        start = time.monotonic()
        proc.send_signal(sig)
        rest_out, rest_err = proc.communicate(timeout=60)
        stop_s = time.monotonic() - start
    finally:
        if proc.poll() is None:           # a failed check above: stop it the clean way, so its Ray goes too
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    err = "".join(lines) + rest_err
    assert proc.returncode == code, err[-3000:]
    last = err.strip().splitlines()[-1]
    steps = len((out / "steps.csv").read_text().splitlines()) - 1
    assert steps >= 2
    assert last == f"interrupted after {steps} step(s) ({sig.name}); {out / 'steps.csv'} keeps them"
    assert "SIGTERM received" not in err and "Traceback" not in err and "***" not in err
    ended = json.loads((out / "run.json").read_text())
    assert (ended["finished"], ended["interrupted"], ended["signal"], ended["steps_finished"]) == \
        (False, True, sig.name, steps)
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "steps.csv"]      # no summary.json
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]                   # no lock, no staging left
    assert stop_s < 30
    deadline = time.monotonic() + 20
    while any(alive(p) for p in ray_processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in ray_processes if alive(p)]                             # embedded Ray shut down


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_a_signal_that_reaches_another_thread_still_waits_for_the_held_block():
    """Ray's threads do not mask the signals: the kernel may hand SIGTERM to one of them, and Python then runs
    the handler in the main thread at its next instruction. A held block (a step written and counted) must
    still finish first."""
    from ultracluster.report.rundir import signals_held

    seen: list = []

    def handler(signum, frame):
        seen.append("handler")
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, args=(30,))
    other.start()                     # started before the block: it does not mask SIGTERM
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                signal.pthread_kill(other.ident, signal.SIGTERM)
                for _ in range(50):   # many instructions and returns from sleep: room for the handler to run
                    time.sleep(0.002)
                    seen.append("body")
                seen.append("end of block")
        assert seen == ["body"] * 50 + ["end of block", "handler"]
        assert signal.getsignal(signal.SIGTERM) is handler          # the caller's handler is back
    finally:
        stop.set()
        other.join()
        signal.signal(signal.SIGTERM, previous)


def processes_naming(text: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read() and alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the run's processes through /proc")
def test_a_signal_while_ray_starts_leaves_nothing_behind(tmp_path):
    """SIGTERM while the embedded Ray starts: Ray is let finish starting, then stopped whole (a signal in
    the middle of ray.init would orphan its agents); nothing written, nothing left running."""
    ray_tmp = tempfile.mkdtemp(prefix="ucsig", dir="/tmp")       # short: Ray's socket paths are limited
    out = tmp_path / "run"
    try:
        proc = subprocess.Popen([sys.executable, "-m", "ultracluster", "run", str(REPO / "scenarios" / "smoke.yaml"),
                                 "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path, env={**os.environ, "RAY_TMPDIR": ray_tmp})
        first = proc.stderr.readline()                 # "smoke: starting 2 actors ...": Ray is starting now
        assert "starting" in first, first
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 143, err[-3000:]
        assert err.strip().splitlines()[-1] == f"interrupted after 0 step(s) (SIGTERM); {out} is left as it was"
        assert "Traceback" not in err and "SIGTERM received" not in err
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
        deadline = time.monotonic() + 20
        while processes_naming(ray_tmp) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_naming(ray_tmp) == []
    finally:
        for pid in processes_naming(ray_tmp):          # only if the check above failed: ours, by their temp dir
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
