"""Hostile input to every command, end to end (issues 45 and 47, the input half): the README's plain install (no
pyarrow), values a user can type at the edge of a bound, sizes a flag can raise, files handed back with deep
nesting or huge tables, calibration rows and Ray without a token. Each ends with a clear line and exit 2 (4 for a
cluster that refuses), bounded in time and memory; never a traceback. Bounded and fast: each case is seconds."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scenarios" / "smoke.yaml"

# `import pyarrow` fails in the child as on the README's `pip install -e .` (a None in sys.modules is an
# ImportError on import; pandas then has no Parquet engine either)
NO_PYARROW = "import sys; sys.modules['pyarrow'] = None\n"


def uc(*args: str, prelude: str = "", timeout: float = 60, env: dict | None = None,
       cwd: Path = REPO) -> tuple[subprocess.CompletedProcess, float]:
    """`ultracluster ARGS` in a child process (after `prelude`): the finished process and its seconds."""
    code = prelude + "from ultracluster.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "import sys\n" + code, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)
    return done, time.monotonic() - start


def test_sweep_on_the_plain_install_writes_csv_and_says_parquet_is_not_written(tmp_path):
    out = tmp_path / "sw"
    done, _ = uc("sweep", str(SMOKE), "--vary", "seed=0,1", "--out", str(out), prelude=NO_PYARROW)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    notes = [line for line in done.stderr.splitlines() if "sweep.parquet not written" in line]
    assert len(notes) == 1 and "pip install 'ultracluster[parquet]'" in notes[0]
    assert sorted(p.name for p in out.iterdir()) == ["sweep-rows.jsonl", "sweep.csv", "sweep.html", "sweep.json"]
    import pandas as pd
    table = pd.read_csv(out / "sweep.csv")
    assert table["seed"].tolist() == [0, 1] and (table["status"] == "ok").all()
    assert "(sweep.csv, sweep.html)" in done.stdout


def test_sweep_with_pyarrow_writes_parquet_and_a_plain_rerun_removes_the_stale_one(tmp_path):
    import pandas as pd
    out = tmp_path / "sw"
    done, _ = uc("sweep", str(SMOKE), "--vary", "seed=0,1", "--out", str(out), "--quiet")
    assert done.returncode == 0 and "not written" not in done.stderr, done.stderr
    assert pd.read_parquet(out / "sweep.parquet")["seed"].tolist() == [0, 1]
    done, _ = uc("sweep", str(SMOKE), "--vary", "seed=0,1,2", "--out", str(out), "--quiet", prelude=NO_PYARROW)
    assert done.returncode == 0, done.stderr
    assert not (out / "sweep.parquet").exists()            # never a table that disagrees with sweep.csv
    assert pd.read_csv(out / "sweep.csv")["seed"].tolist() == [0, 1, 2]
