"""The README's plain install (`pip install -e .`, no extras) runs every command of its "Every command, once" block
without a traceback (issue 45). The plain install is made here as CI can make it without a network: a venv
(`python -m venv --without-pip`, under a second) whose one .pth file adds this environment's site-packages, the
package included, and makes every module of the extras (`test`, `parquet`: pyarrow, fastparquet, pytest,
hypothesis) missing, a ModuleNotFoundError on import, as on an install without them. Nothing is skipped: `sweep`
runs through the console entry (`python -m ultracluster`) in a process of its own; the rest of the block runs in
one process of that venv through the console entry's function (`ultracluster.cli:main`, as pyproject's
[project.scripts] names it), one Ray started for them all, so the block takes seconds, not a Ray start each."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTRAS = ("pyarrow", "fastparquet", "pytest", "hypothesis")    # pyproject's `test` and `parquet` extras (and
                                                                # pandas' other Parquet engine)
BLOCK = ("import sys, importlib.abc; sys.meta_path.insert(0, type('PlainInstall', (importlib.abc.MetaPathFinder,), "
         "{'find_spec': staticmethod(lambda name, path=None, target=None: (_ for _ in ()).throw("
         "ModuleNotFoundError(f'No module named {name!r}', name=name)) if name.partition('.')[0] in %r else None)})())"
         % (EXTRAS,))


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """The plain install's python, and a directory laid out as the README's (scenarios/, data/ beside it)."""
    root = tmp_path_factory.mktemp("plain")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=60)
    python = root / "venv" / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    ours = [p for p in dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()]) if Path(p).is_dir()]
    (purelib / "zz_plain_install.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours) + BLOCK + "\n")
    home = root / "home"
    home.mkdir()
    for d in ("scenarios", "data"):
        (home / d).symlink_to(REPO / d)
    return python


def test_the_plain_install_has_the_package_and_none_of_the_extras(plain):
    probe = ("import importlib, ultracluster, pandas, ray\nfor m in %r:\n    try:\n        importlib.import_module(m)\n"
             "    except ModuleNotFoundError:\n        continue\n    raise SystemExit(m + ' imported')\n"
             "print(ultracluster.__file__)\n" % (EXTRAS,))
    done = subprocess.run([str(plain), "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent.name == "ultracluster"


def test_sweep_on_the_plain_install_writes_csv_and_says_parquet_is_not_written(plain):
    """Issue 45's target: `ultracluster sweep` on the install without extras: exit 0, sweep.csv, one note."""
    home = plain.parents[2] / "home"
    t0 = time.monotonic()
    done = subprocess.run([str(plain), "-m", "ultracluster", "sweep", "scenarios/smoke.yaml", "--vary", "seed=0,1",
                           "--out", "sw"], capture_output=True, text=True, timeout=120, cwd=home,
                          env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and time.monotonic() - t0 < 60
    notes = [line for line in done.stderr.splitlines() if "sweep.parquet not written" in line]
    assert len(notes) == 1 and "pip install 'ultracluster[parquet]'" in notes[0], done.stderr
    assert sorted(p.name for p in (home / "sw").iterdir()) == ["sweep-rows.jsonl", "sweep.csv", "sweep.html",
                                                              "sweep.json"]
    import pandas as pd
    table = pd.read_csv(home / "sw" / "sweep.csv")
    assert table["seed"].tolist() == [0, 1] and (table["status"] == "ok").all()
    assert "(sweep.csv, sweep.html)" in done.stdout


# The README's "Every command, once" block, in its order, with the arguments made small where the README's take
# minutes (`plan --top 1`; `compare` of two runs the block wrote). The last entry of the block, `ray job submit`,
# needs a Ray cluster with its dashboard: its command, `run`, is here.
BLOCK_COMMANDS = [
    ["validate", "scenarios/smoke.yaml"],
    ["run", "scenarios/smoke.yaml", "--force"],
    ["plan", "scenarios/smoke.yaml", "--top", "1"],
    ["run", "scenarios/faults-llama3-70b-trn2-sync.yaml", "--hours", "720"],
    ["report", "runs/smoke"],
    ["compare", "runs/smoke", "runs/faults-llama3-70b-trn2-sync", "--force"],
    ["check", "runs/smoke"],
    ["sensitivity", "scenarios/llama2-70b-tp32pp4-trn2-64.yaml"],
    ["sweep", "scenarios/faults-llama3-70b-trn2-sync.yaml", "--vary", "storage.capacity_tib=4.8,48", "--vary",
     "checkpoint.mode=sync,async", "--hours", "720"],
    ["collectives", "--instance", "trn2.48xlarge", "--op", "all_reduce", "--sizes", "1M,64M"],
    ["schema"],
    ["calibrate", "data/calibration/measurements.csv", "--out", "my-cluster.json"],
    ["run", "scenarios/smoke.yaml", "--calibration", "my-cluster.json", "--out", "runs/smoke-mine"],
]
DRIVER = r"""
import contextlib, io, json, sys, time, traceback
import ray
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
from ultracluster.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err, printed = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(printed):
            rc = main(argv)
    except BaseException:
        rc = None
        err.write(traceback.format_exc())
    out.append({"argv": argv, "rc": rc, "s": time.monotonic() - t0, "err": err.getvalue(), "out": printed.getvalue()})
ray.shutdown()
print("RESULTS " + json.dumps(out))
"""


def test_every_command_of_the_readme_block_runs_on_the_plain_install(plain):
    home = plain.parents[2] / "home"
    t0 = time.monotonic()
    done = subprocess.run([str(plain), "-c", DRIVER, json.dumps(BLOCK_COMMANDS)], capture_output=True, text=True,
                          timeout=300, cwd=home, env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")})
    took = time.monotonic() - t0
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert done.returncode == 0 and line, done.stderr[-3000:]
    results = json.loads(line[len("RESULTS "):])
    assert [r["argv"] for r in results] == BLOCK_COMMANDS
    for r in results:
        assert r["rc"] == 0 and "Traceback" not in r["err"], (r["argv"], r["rc"], r["err"][-3000:])
    by = {" ".join(r["argv"][:2]): r for r in results}
    assert json.loads(by["schema"]["out"])["title"]                  # `schema > scenario.schema.json`
    notes = [x for x in by["sweep scenarios/faults-llama3-70b-trn2-sync.yaml"]["err"].splitlines()
             if "sweep.parquet not written" in x]
    assert len(notes) == 1
    for path in ("runs/smoke/summary.json", "plans/smoke/plan.json", "runs/faults-llama3-70b-trn2-sync/goodput.json",
                 "runs/compare/compare.html", "runs/llama2-70b-tp32pp4-trn2-64-sensitivity/sensitivity.csv",
                 "sweeps/faults-llama3-70b-trn2-sync/sweep.csv", "my-cluster.json", "calibrate.html",
                 "runs/smoke-mine/summary.json"):
        assert (home / path).is_file(), path
    assert not list(home.rglob("*.parquet"))                         # no engine: no Parquet file anywhere
    print("plain install, README block:", ", ".join(f"{' '.join(r['argv'][:2])} {r['s']:.1f} s" for r in results),
          f"(total {took:.1f} s)")
