"""The output rule (`report.output_rule`), command by command: each writing command is pointed at what a user
already has (an earlier output, their own files, a device, a FIFO, a symlink, the command's own input) and must
exit 2 with one line naming the path, leaving every file as it was (sha256 before and after). The refusals come
before anything is timed, so each case takes the CLI's start-up and no Ray (run dirs for `compare` and `report`
are written once, in this process, with local shards). A closed stdout stops the printing, never the command."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ultracluster import load_scenario
from ultracluster.cli import main
from ultracluster.errors import EXIT_BAD_INPUT, EXIT_OK
from ultracluster.runner import run
from ultracluster.shards.local import local_shards

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scenarios" / "smoke.yaml"
FAST = 10.0                   # seconds a refusal may take (issue 47's bound), in this process


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root`: a file's sha256, a symlink's target, a directory, a FIFO or a device as such."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            mode = p.lstat().st_mode
            key = str(p.relative_to(root))
            if stat.S_ISLNK(mode):
                out[key] = "-> " + os.readlink(p)
            elif stat.S_ISREG(mode):
                out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[key] = "dir" if stat.S_ISDIR(mode) else f"mode {stat.S_IFMT(mode):o}"
    return out


def refused(capsys, argv: list[str], names: str, root: Path) -> str:
    """Run `argv` in this process; it must exit 2 with one `error:` line naming `names`, fast, and leave every
    file under `root` as it was. Returns the line."""
    before = tree(root)
    capsys.readouterr()
    t0 = time.perf_counter()
    rc = main(argv)
    took = time.perf_counter() - t0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == EXIT_BAD_INPUT, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], err
    assert "Traceback" not in err and took < FAST
    assert tree(root) == before
    return lines[0]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A user's directory, the current one: the smoke scenario, measurements, notes, an earlier profile."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(SMOKE, tmp_path / "smoke.yaml")
    (tmp_path / "in.csv").write_text("scenario,step_time_s\nsmoke.yaml,0.45\n")
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "profile.json").write_text('{"mine": true}\n')
    (tmp_path / "calibrate.html").write_text("<p>my page</p>\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "notes.txt")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[Path]:
    """Two finished run directories of the smoke scenario (local shards: no Ray)."""
    root = tmp_path_factory.mktemp("runs")
    out = []
    for seed in (1, 2):
        run(load_scenario(SMOKE, [f"seed={seed}"]), out=root / f"s{seed}", shards_factory=local_shards)
        out.append(root / f"s{seed}")
    return out


def test_calibrate_never_writes_over_its_input_a_profile_a_page_or_a_device(home, capsys):
    refused(capsys, ["calibrate", "in.csv", "--out", "in.csv"], "--out in.csv: it is this command's own input", home)
    refused(capsys, ["calibrate", "in.csv", "--out", "in.csv", "--force"], "own input", home)
    refused(capsys, ["calibrate", "in.csv", "--out", "profile.json"], "--out profile.json: a file already exists", home)
    (home / "p2.json").unlink(missing_ok=True)
    refused(capsys, ["calibrate", "in.csv", "--out", "p2.json"], "calibrate.html", home)   # the page beside it
    refused(capsys, ["calibrate", "in.csv", "--out", "/dev/null"], "/dev/null: it is a device", home)
    refused(capsys, ["calibrate", "in.csv", "--out", "/dev/null", "--force"], "a device", home)
    refused(capsys, ["calibrate", "in.csv", "--out", "fifo", "--force"], "a FIFO", home)
    refused(capsys, ["calibrate", "in.csv", "--out", "link.csv", "--force"], "a symlink", home)
    refused(capsys, ["calibrate", "in.csv", "--out", "calibrate.html", "--force"], "the page", home)
    refused(capsys, ["calibrate", "in.csv", "--out", "notes.txt/p.json"], "(Not a directory)", home)


def test_collectives_csv_is_never_an_existing_file_a_device_or_a_symlink(home, capsys):
    base = ["collectives", "--sizes", "1K"]
    refused(capsys, base + ["--csv", "notes.txt"], "--csv notes.txt: a file already exists", home)
    refused(capsys, base + ["--csv", "/dev/null", "--force"], "a device", home)
    refused(capsys, base + ["--csv", "link.csv", "--force"], "a symlink", home)
    (home / "d").mkdir()
    refused(capsys, base + ["--csv", "d"], "d: it is a directory", home)
    refused(capsys, base + ["--csv", "."], "not a file name", home)
    assert main(base + ["--csv", "notes.txt", "--force"]) == EXIT_OK       # --force replaces a plain file
    assert (home / "notes.txt").read_text().startswith("op,ranks,instances,bytes")


def test_sensitivity_out_at_a_file_a_device_or_an_earlier_table(home, capsys):
    refused(capsys, ["sensitivity", "smoke.yaml", "--out", "notes.txt"], "notes.txt: it is a file, not a directory",
            home)
    refused(capsys, ["sensitivity", "smoke.yaml", "--out", "/dev/null"], "a device", home)
    refused(capsys, ["sensitivity", "smoke.yaml", "--out", "."], "own input (smoke.yaml)", home)
    (home / "sens").mkdir()
    (home / "sens" / "sensitivity.csv").write_text("factor\nmine\n")
    refused(capsys, ["sensitivity", "smoke.yaml", "--out", "sens"], "already holds sensitivity.csv", home)
    (home / "sens" / "sensitivity.html").mkdir()            # its name, but a directory: not what it writes
    refused(capsys, ["sensitivity", "smoke.yaml", "--out", "sens", "--force"], "(sensitivity.html/)", home)
    (home / "sens" / "notes.txt").write_text("mine\n")
    refused(capsys, ["sensitivity", "smoke.yaml", "--out", "sens", "--force"], "entries sensitivity does not write",
            home)


def test_plan_never_writes_among_or_deletes_a_users_files(home, capsys):
    for d in ("runs/top-1", "runs/top-7"):                # issue 47: `plan --out .` deleted these
        (home / d).mkdir(parents=True)
        (home / d / "summary.json").write_text('{"scenario": "mine"}\n')
    refused(capsys, ["plan", "smoke.yaml", "--top", "1", "--out", "."], "plan directory .", home)
    refused(capsys, ["plan", "smoke.yaml", "--top", "1", "--out", ".", "--force"], "own input", home)
    plans = home / "plans" / "p"                          # an earlier plan with a replay's run directory
    (plans / "runs" / "top-7").mkdir(parents=True)
    (plans / "runs" / "top-7" / "summary.json").write_text("{}\n")
    (plans / "plan.json").write_text("{}\n")
    refused(capsys, ["plan", "smoke.yaml", "--top", "1", "--out", str(plans)], "already holds a plan", home)
    (plans / "runs" / "mine.txt").write_text("mine\n")    # runs/ holding what no plan writes: never, --force or not
    refused(capsys, ["plan", "smoke.yaml", "--top", "1", "--out", str(plans), "--force"], "runs/", home)
    refused(capsys, ["plan", "smoke.yaml", "--out", "/dev/null"], "a device", home)
    (plans / "runs" / "mine.txt").unlink()
    shutil.copy(home / "smoke.yaml", plans / "top-1.yaml")  # re-planning from a plan's own top-1.yaml, into it
    refused(capsys, ["plan", str(plans / "top-1.yaml"), "--out", str(plans), "--force"], "own input", home)


@pytest.mark.parametrize("name", ["..", ".", "a/b", "", ".hidden", "-x"])
def test_a_name_that_becomes_a_path_is_a_plain_name(home, capsys, name):
    for cmd in (["plan", "smoke.yaml", "--top", "1"], ["run", "smoke.yaml"], ["sensitivity", "smoke.yaml"]):
        before = tree(home)
        assert main([*cmd, "--set", f"name={name!r}"]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert "  - name: given " in err and "Traceback" not in err
        assert tree(home) == before


def test_run_refuses_a_users_directory_a_device_and_an_earlier_run(home, capsys):
    refused(capsys, ["run", "smoke.yaml", "--out", "/dev/null"], "/dev/null: it is a device", home)
    refused(capsys, ["run", "smoke.yaml", "--out", "notes.txt"], "it is a file", home)
    refused(capsys, ["run", "smoke.yaml", "--out", "."], "the current directory", home)
    for cmd in (["run", "smoke.yaml"], ["plan", "smoke.yaml"], ["sensitivity", "smoke.yaml"],
                ["calibrate", "in.csv"], ["sweep", "smoke.yaml"]):
        refused(capsys, [*cmd, "--out", ""], "--out: given ''", home)       # never the default, silently
    (home / "runs" / "smoke").mkdir(parents=True)
    (home / "runs" / "smoke" / "summary.json").write_text('{"scenario": "smoke", "feasible": true}\n')
    (home / "runs" / "smoke" / "steps.csv").write_text("step\n0\n")
    refused(capsys, ["run", "smoke.yaml"], "already holds a run", home)
    (home / "runs" / "smoke" / "notes.txt").write_text("mine\n")
    refused(capsys, ["run", "smoke.yaml", "--force"], "a run does not write (notes.txt)", home)
    shutil.copy(home / "smoke.yaml", home / "runs" / "own.json")
    refused(capsys, ["run", "runs/own.json", "--out", "runs", "--force"], "own input", home)


def test_sweep_refuses_a_users_directory_a_device_and_its_input(home, capsys):
    vary = ["sweep", "smoke.yaml", "--vary", "training.micro_batch=1,2"]
    refused(capsys, vary + ["--out", "/dev/null"], "a device", home)
    refused(capsys, vary + ["--out", "."], "own input", home)
    (home / "sw").mkdir()
    (home / "sw" / "notes.txt").write_text("mine\n")
    refused(capsys, vary + ["--out", "sw", "--force"], "a sweep does not write (notes.txt)", home)
    assert not (home / ".sw.lock").exists()                 # refused before the lock is taken


def test_compare_and_report_write_only_their_own_files(two_runs, home, capsys):
    a, b = map(str, two_runs)
    (home / "cmp").mkdir()
    (home / "cmp" / "compare.csv").write_text("mine\n")
    refused(capsys, ["compare", a, b, "--out", "cmp"], "already holds a comparison", home)
    (home / "cmp" / "notes.txt").write_text("mine\n")
    refused(capsys, ["compare", a, b, "--out", "cmp", "--force"], "a comparison does not write", home)
    refused(capsys, ["compare", a, b, "--out", "notes.txt"], "not a directory", home)
    refused(capsys, ["compare", a, b, "--out", "/dev/null"], "a device", home)
    refused(capsys, ["compare", a, b, "--out", "calibrate.html"], "a file already exists", home)
    (home / "link.html").symlink_to(home / "notes.txt")
    refused(capsys, ["compare", a, b, "--out", "link.html", "--force"], "a symlink", home)
    refused(capsys, ["compare", a, b, "--out", str(Path(a) / "sub")], "inside one", Path(a).parent)
    page = Path(a) / "report.html"                          # `report` re-renders its pages: never through a FIFO
    page.unlink()
    os.mkfifo(page)
    try:
        refused(capsys, ["report", a, "--quiet"], "report.html: it is a FIFO", Path(a).parent)
    finally:
        page.unlink()


def test_a_closed_stdout_stops_the_printing_not_the_command(tmp_path):
    """`ultracluster ... | head -1`: the reader gone, the command still writes its output and exits 0."""
    csv = tmp_path / "c.csv"
    p = subprocess.Popen([sys.executable, "-m", "ultracluster", "collectives", "--sizes", "1K,1M,1G", "--csv",
                          str(csv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    p.stdout.close()                                        # every write to stdout now fails with EPIPE
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == EXIT_OK, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err
    assert len(csv.read_text().splitlines()) == 1 + 3
    closed = subprocess.run([sys.executable, "-m", "ultracluster", "collectives", "--sizes", "1K", "--csv",
                             str(tmp_path / "d.csv")], preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE,
                            cwd=tmp_path, timeout=60)             # `>&-`: no stdout at all
    assert closed.returncode == EXIT_OK and b"Traceback" not in closed.stderr, closed.stderr
    assert (tmp_path / "d.csv").is_file()


class _ClosedPipe:
    """A stdout whose reader went away: every write and flush fails as a closed pipe does."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    flush = write

    def isatty(self):
        return False


def test_run_force_into_a_closed_pipe_finishes_and_replaces_the_run_only_when_done(ray_session, two_runs, tmp_path,
                                                                                   monkeypatch):
    """`ultracluster run --force 2>&1 | head -3` (issue 45): the run finishes and writes its directory, exit 0."""
    out = tmp_path / "smoke"
    shutil.copytree(two_runs[0], out)
    earlier = tree(out)
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    monkeypatch.setattr(sys, "stderr", _ClosedPipe())
    rc = main(["run", str(SMOKE), "--out", str(out), "--force"])
    monkeypatch.undo()
    assert rc == EXIT_OK
    record = (out / "run.json").read_text()
    assert '"finished": false' not in record and (out / "summary.json").is_file()
    assert len((out / "steps.csv").read_text().splitlines()) == 1 + 4
    assert tree(out) != earlier and sorted(p.name for p in tmp_path.iterdir()) == ["smoke"]


def test_a_planted_symlink_is_never_written_through(home, capsys):
    """A lock beside the output, or an output's own name, as a symlink to a user's file: refused, the file kept."""
    (home / "runs").mkdir()
    (home / "runs" / ".smoke.lock").symlink_to(home / "notes.txt")         # truncated by a lock taken through it
    refused(capsys, ["run", "smoke.yaml"], "(it is a symlink)", home)
    (home / "sw").mkdir()
    (home / "sw" / "sweep-rows.jsonl").symlink_to(home / "notes.txt")      # opened "w" by a sweep
    refused(capsys, ["sweep", "smoke.yaml", "--vary", "training.micro_batch=1,2", "--out", "sw", "--force"],
            "(sweep-rows.jsonl (a symlink))", home)
    (home / "sens").mkdir()
    (home / "sens" / "sensitivity.csv").symlink_to(home / "notes.txt")
    refused(capsys, ["sensitivity", "smoke.yaml", "--out", "sens", "--force"], "(sensitivity.csv (a symlink))", home)


def test_plan_force_keeps_the_earlier_plan_until_the_new_one_is_complete(home, monkeypatch):
    """The new plan is written beside the earlier one and moved into place whole: a plan that fails at the last
    moment (the swap: a full disk, say) leaves the earlier plan as it was and nothing of its own."""
    from ultracluster.plan import command, plan, search_space

    plans = home / "plans" / "p"
    (plans / "runs" / "top-1").mkdir(parents=True)
    (plans / "runs" / "top-1" / "summary.json").write_text("{}\n")
    (plans / "plan.json").write_text("{}\n")
    (plans / "top-1.yaml").write_text("name: mine\n")
    before = tree(home)
    seen = []

    def full_disk(staging, target):
        seen.append(sorted(p.name for p in staging.iterdir()))
        raise OSError(28, "No space left on device", str(target))
    monkeypatch.setattr(command, "move_into_place", full_disk)
    space = search_space(None, None, "8", "2", "1", "1", "1", "none", "1f1b", None, None, None)
    with pytest.raises(OSError):
        plan(load_scenario(SMOKE), space, top=1, out=plans, replay=False, force=True)
    assert "plan.json" in seen[0] and "top-1.yaml" in seen[0]       # the new plan was complete beside it
    assert tree(home) == before


def _sweep_in_process(monkeypatch) -> None:
    """The variants timed in this process, one after the other (never on a Ray another test attached)."""
    monkeypatch.setattr("ultracluster.actors.plan_tasks.wanted", lambda address: False)


def test_sweep_force_keeps_the_earlier_sweep_until_the_new_one_is_complete(home, capsys, monkeypatch):
    """`sweep --force` over another sweep writes the new one beside it and moves it into place whole: a real SIGTERM
    after its first row, a variant the cluster loses, a failed swap (a full disk) each leave the earlier sweep
    byte for byte (sha256) and nothing of the new one; that sweep, run again without --force, still resumes from
    its own rows; a complete --force sweep replaces it."""
    import signal

    from ultracluster import sweep
    from ultracluster.errors import ActorError

    _sweep_in_process(monkeypatch)
    earlier = ["sweep", "smoke.yaml", "--vary", "seed=0,1", "--out", "sw", "--quiet"]
    assert main(earlier) == EXIT_OK
    before = tree(home)
    other = ["sweep", "smoke.yaml", "--vary", "training.micro_batch=1,2,4", "--hours", "1", "--out", "sw", "--force",
             "--quiet"]
    from ultracluster.report.rundir import move_into_place as real_move
    real_task, calls = sweep._task, []

    def signalled(shared, scenario):
        calls.append(scenario)
        if len(calls) == 2:               # the first row is on disk, beside the earlier sweep
            staged = [p for p in home.iterdir() if p.name.startswith(".sw.partial-")]
            assert len(staged) == 1 and len((staged[0] / "sweep-rows.jsonl").read_text().splitlines()) == 1
            os.kill(os.getpid(), signal.SIGTERM)
        return real_task(shared, scenario)
    monkeypatch.setattr(sweep, "_task", signalled)
    capsys.readouterr()
    t0 = time.perf_counter()
    assert main(other) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "sweep interrupted (SIGTERM); sw keeps a sweep of smoke (2 variants, finished" in err, err
    assert "Traceback" not in err and time.perf_counter() - t0 < FAST
    assert tree(home) == before                            # no .sw.partial-*, no .sw.lock, the earlier files

    calls.clear()

    def lost(shared, scenario):
        calls.append(scenario)
        if len(calls) == 2:
            raise ActorError("the Ray cluster lost the variant's task")
        return real_task(shared, scenario)
    monkeypatch.setattr(sweep, "_task", lost)
    assert main(other) == 4
    err = capsys.readouterr().err
    assert "lost the variant's task (sw keeps a sweep of smoke" in err and "Traceback" not in err, err
    assert tree(home) == before

    seen = []

    def full_disk(staging, target):
        seen.append(sorted(p.name for p in staging.iterdir()))
        raise OSError(28, "No space left on device", str(target))
    from ultracluster.report import rundir
    monkeypatch.setattr(sweep, "_task", real_task)
    monkeypatch.setattr(rundir, "move_into_place", full_disk)
    assert main(other) == EXIT_BAD_INPUT
    assert "error: cannot write" in capsys.readouterr().err
    assert "sweep.csv" in seen[0] and "sweep.json" in seen[0]      # the new sweep was complete beside it
    assert tree(home) == before
    monkeypatch.setattr(rundir, "move_into_place", real_move)

    assert main(earlier[:-1]) == EXIT_OK                     # the earlier sweep, again: its own rows, all reused
    assert "2 of 2 variants already evaluated in sw: skipped" in capsys.readouterr().err
    assert main(other) == EXIT_OK
    done = json.loads((home / "sw" / "sweep.json").read_text())
    assert done["finished"] and done["variants"] == 3 and done["keys"] == ["training.micro_batch"]
    assert sorted(p.name for p in home.iterdir() if p.name.startswith(".")) == []


def test_a_force_sweep_killed_outright_leaves_the_earlier_sweep_and_the_next_cleans_up(home, capsys, monkeypatch):
    """SIGKILL (no cleanup at all) in the middle of a --force sweep: the earlier sweep is as it was; the next sweep
    takes over the dead one's lock, removes its staging directory and says so."""
    import signal

    _sweep_in_process(monkeypatch)
    assert main(["sweep", "smoke.yaml", "--vary", "seed=0,1", "--out", "sw", "--quiet"]) == EXIT_OK
    before = tree(home)
    # the child's second variant waits (for the kill) once the first row is on disk
    slow = ("import sys, time\nfrom ultracluster import sweep\nfrom ultracluster.cli import main\ntask, n = sweep._task, []\n"
            "def wait(shared, scenario):\n    n.append(1)\n    if len(n) == 2:\n        time.sleep(60)\n"
            "    return task(shared, scenario)\nsweep._task = wait\nsys.exit(main(sys.argv[1:]))\n")
    child = subprocess.Popen([sys.executable, "-c", slow, "sweep", "smoke.yaml", "--vary",
                              "training.micro_batch=1,2,4", "--hours", "1", "--out", "sw", "--force", "--quiet"], cwd=home,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    rows = []
    while time.monotonic() < deadline and not rows and child.poll() is None:
        rows = [p for p in home.glob(".sw.partial-*/sweep-rows.jsonl") if p.read_text().count("\n") >= 1]
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert rows, (sorted(os.listdir(home)), child.stderr.read().decode())                # killed with its first row beside the earlier sweep
    left = sorted(p.name for p in home.iterdir() if p.name.startswith(".sw."))
    assert len(left) == 2 and left[0] == ".sw.lock" and left[1].startswith(".sw.partial-")
    assert {k: v for k, v in tree(home).items() if not k.startswith(".sw.")} == before
    capsys.readouterr()
    assert main(["sweep", "smoke.yaml", "--vary", "seed=0,1", "--out", "sw"]) == EXIT_OK
    err = capsys.readouterr().err
    assert "took over the lock of sw from pid" in err and "2 of 2 variants already evaluated in sw: skipped" in err, err
    after = tree(home)                                     # its rows as they were (sweep.json: this run's time)
    assert sorted(after) == sorted(before) and all(after[f] == before[f] for f in ("sw/sweep.csv",
                                                                                  "sw/sweep-rows.jsonl"))


def test_sweep_never_replaces_a_fifo_or_a_device_named_as_its_files(home, capsys):
    """A FIFO at sweep.json, a device at sweep.csv, a symlink or a directory at sweep-rows.jsonl inside a sweep
    directory are not a sweep's files: refused with --force too (they were replaced), each named with its kind.
    A run directory holding a FIFO named steps.csv, a plan directory a FIFO named plan.json: the same."""
    vary = ["sweep", "smoke.yaml", "--vary", "seed=0,1", "--force", "--out"]
    (home / "f").mkdir()
    os.mkfifo(home / "f" / "sweep.json")
    refused(capsys, vary + ["f"], "(sweep.json (a FIFO (named pipe)))", home)
    (home / "d").mkdir()
    (home / "d" / "sweep-rows.jsonl").mkdir()
    refused(capsys, vary + ["d"], "(sweep-rows.jsonl/)", home)
    (home / "l").mkdir()
    (home / "l" / "sweep.csv").symlink_to(home / "notes.txt")
    refused(capsys, vary + ["l"], "(sweep.csv (a symlink))", home)
    try:
        (home / "c").mkdir()
        os.mknod(home / "c" / "sweep.csv", stat.S_IFCHR | 0o600, os.makedev(1, 3))      # /dev/null's numbers
    except PermissionError:                 # no CAP_MKNOD: the FIFO above is the same case
        shutil.rmtree(home / "c")
    else:
        refused(capsys, vary + ["c"], "(sweep.csv (a device))", home)
    (home / "runs" / "smoke").mkdir(parents=True)
    os.mkfifo(home / "runs" / "smoke" / "steps.csv")
    refused(capsys, ["run", "smoke.yaml", "--force"], "(steps.csv (a FIFO (named pipe)))", home)
    (home / "plans" / "p").mkdir(parents=True)                # and plan: plan.json as a FIFO
    os.mkfifo(home / "plans" / "p" / "plan.json")
    refused(capsys, ["plan", "smoke.yaml", "--top", "1", "--out", "plans/p", "--force"],
            "(plan.json (a FIFO (named pipe)))", home)


def test_a_sweeps_rows_file_beyond_what_a_sweep_writes_is_refused_in_bounded_time(home, capsys, monkeypatch):
    """sweep-rows.jsonl with more rows than a sweep holds (a 300 MB one took 27 s and 1.6 GiB) or a line longer
    than any row: refused, naming it, before a row is parsed; the directory as it was."""
    from ultracluster.sweep import output

    _sweep_in_process(monkeypatch)
    assert main(["sweep", "smoke.yaml", "--vary", "seed=0,1", "--out", "sw", "--quiet"]) == EXIT_OK
    rows = home / "sw" / "sweep-rows.jsonl"
    line = rows.read_text().splitlines()[0] + "\n"
    monkeypatch.setattr(output, "MAX_ROWS", 50)            # the bound is MAX_SWEEP_VARIANTS: the same code, smaller
    with open(rows, "a") as f:
        f.write(line * 60)
    again = ["sweep", "smoke.yaml", "--vary", "seed=0,1", "--out", "sw", "--quiet"]
    refused(capsys, again, "its sweep-rows.jsonl holds more than 50 rows", home)
    rows.write_text(line + "{" + " " * (output.MAX_ROW_BYTES + 10) + "}\n")
    refused(capsys, again, "a line (line 2) longer than 256 KiB", home)
    assert sorted(p.name for p in home.iterdir() if p.name.startswith(".")) == []
