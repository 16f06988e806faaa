#!/usr/bin/env python3
"""`ultracluster calibrate` on the public data: the learning curve, and how long a 10-row calibration takes.

Learning curve (`ultracluster.calibrate.curve`; docs/performance.md quotes it through scripts/doc_tables.py):
calibrate on k = 1, 2, 3 of the six fitted Trn1 layouts of data/calibration/measurements.csv, small runs first as
a user would (fewest instances, then the smallest model), each layout with its published rows (their median, as
the shipped fit takes it), and predict the layouts left out: the median and worst |error| of their step time
against their published median, beside the shipped calibration's on the same layouts. The shipped fit saw every
layout (it is the prior the profile is regularised toward), so its in-sample errors are a floor; its
leave-one-layout-out errors (calibration.json) are the fair baseline.

Timing: `ultracluster calibrate` of 10 public rows (up to two rows of each layout, small first) end to end, as a command
(a fresh process: imports, reading and validating the scenarios, the fit, the files), median of the repeats.

Prints two tables and the machine. Usage: python benchmarks/calibrate.py [--repeats N]
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ultracluster.calibrate.command import calibrate  # noqa: E402
from ultracluster.calibrate.curve import learning_curve, public_rows, small_first, write_rows  # noqa: E402


def timing(tmp: Path, repeats: int) -> dict:
    rows = public_rows()
    ten = []
    for name in small_first():
        ten += [r for r in rows if r["layout"] == name and not r["pair"]][:2]
    ten = ten[:10]
    path = write_rows(ten, tmp / "ten.csv")
    walls = []
    for i in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "ultracluster", "calibrate", str(path), "--out",
                               str(tmp / f"ten-{i}.json"), "--quiet"], capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr
    in_process = calibrate(path)
    return {"rows": len(ten), "scenarios": len({r["layout"] for r in ten}), "command median s": statistics.median(walls),
            "command max s": max(walls), "fit in process s": in_process.wall_s,
            "settings timed": in_process.settings_timed, "replays": in_process.replays}


def table(rows: list[dict]) -> str:
    keys = list(rows[0])
    cells = [[f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k]) for k in keys] for r in rows]
    w = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w[i]) for i, k in enumerate(keys))]
    lines += ["  ".join(c[i].ljust(w[i]) for i in range(len(keys))) for c in cells]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        curve = [{"k": c["k"], "calibrated on": ", ".join(c["calibrated_on"]), "fitted": ", ".join(c["fitted"]),
                  "predicted": len(c["predicted"]), "median %": c["median_pct"], "worst %": c["worst_pct"],
                  "shipped median %": c["shipped_median_pct"], "shipped worst %": c["shipped_worst_pct"],
                  "shipped LOO median %": c["shipped_loo_median_pct"], "shipped LOO worst %": c["shipped_loo_worst_pct"],
                  "wall s": c["wall_s"]} for c in learning_curve()]
        speed = timing(Path(tmp), args.repeats)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f}, Python "
          f"{platform.python_version()}")
    print("\nlearning curve (|step time error| of the layouts left out, %):")
    print(table(curve))
    print("\ncalibrate on 10 rows:")
    print(table([speed]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
