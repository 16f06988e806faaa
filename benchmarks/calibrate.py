#!/usr/bin/env python3
"""`ultracluster calibrate` on the public data: the learning curve, and how long a 10-row calibration takes.

Learning curve: calibrate on k = 1, 2, 3 of the six fitted Trn1 layouts of data/calibration/measurements.csv,
small runs first as a user would (fewest instances, then the smallest model), each layout with its published rows
(their median, as the shipped fit takes it), and predict the layouts left out: the median and worst |error| of
their step time against their published median, beside the shipped calibration's on the same layouts. The shipped
fit saw every layout (it is the prior the profile is regularised toward), so its in-sample errors are a floor;
its leave-one-layout-out errors (calibration.json) are the fair baseline.

Timing: `ultracluster calibrate` of 10 public rows (up to two rows of each layout, small first) end to end, as a command
(a fresh process: imports, reading and validating the scenarios, the fit, the files), median of the repeats.

Prints two tables and the machine. Usage: python benchmarks/calibrate.py [--repeats N]
"""
from __future__ import annotations

import argparse
import csv
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
from ultracluster.cluster.calibration import FITTED, fitted, load_fitted  # noqa: E402
from ultracluster.cluster.profile import calibration_of  # noqa: E402
from ultracluster.scenario import load_scenario  # noqa: E402

DATA = REPO / "data" / "calibration" / "measurements.csv"
TRN1_FITTED = ("gpt3-6.7b-tp8", "llama2-7b-tp8", "llama2-7b-tp8-nemo-full", "llama31-8b-tp32", "gpt3-23b-tp8pp4",
               "gpt3-175b-tp32pp8")


def public_rows() -> list[dict]:
    with open(DATA, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["scenario"] = str((DATA.parent / r["scenario"]).resolve())
        r["layout"] = Path(r["scenario"]).stem.removeprefix("calib-")
    return rows


def small_first(layouts) -> list[str]:
    """Fewest instances first, then the fewest model parameters (weights of one replica: layers x hidden^2)."""
    def size(name: str):
        sc = load_scenario(REPO / "scenarios" / f"calib-{name}.yaml")
        return sc.cluster.instances, sc.model.layers * sc.model.hidden ** 2, name
    return sorted(layouts, key=size)


def write(rows: list[dict], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["scenario", "seq_per_s", "note", "pair"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def published_step(rows: list[dict], layout: str) -> tuple[float, object]:
    mine = [r for r in rows if r["layout"] == layout and not r["pair"]]
    sc = load_scenario(mine[0]["scenario"])
    return sc.training.global_batch / statistics.median(float(r["seq_per_s"]) for r in mine), sc


def step_error(sc, cal, target_s: float) -> float:
    from ultracluster.uncertainty import _one_step, _replayed

    return 100 * (_replayed(_one_step(sc), cal) / target_s - 1)


def learning_curve(tmp: Path) -> list[dict]:
    rows = public_rows()
    order = small_first(TRN1_FITTED)
    doc = load_fitted().documents[FITTED.name]
    out = []
    for k in (1, 2, 3):
        chosen, held = order[:k], order[k:]
        done = calibrate(write([r for r in rows if r["layout"] in chosen and not r["pair"]], tmp / f"k{k}.csv"))
        cal = calibration_of(done.profile)
        errs, shipped, cv = [], [], []
        for name in held:
            target, sc = published_step(rows, name)
            errs.append(abs(step_error(sc, cal, target)))
            shipped.append(abs(step_error(sc, fitted(), target)))
            cv.append(abs(100 * (1 / (1 + doc["layouts"][name]["cv_error_pct"] / 100) - 1)))
        out.append({"k": k, "calibrated on": ", ".join(chosen), "fitted": ", ".join(done.profile["fitted"]) or "none",
                    "predicted": len(held), "median %": statistics.median(errs), "worst %": max(errs),
                    "shipped median %": statistics.median(shipped), "shipped worst %": max(shipped),
                    "shipped LOO median %": statistics.median(cv), "shipped LOO worst %": max(cv),
                    "wall s": done.wall_s})
    return out


def timing(tmp: Path, repeats: int) -> dict:
    rows = public_rows()
    ten = []
    for name in small_first(TRN1_FITTED):
        ten += [r for r in rows if r["layout"] == name and not r["pair"]][:2]
    ten = ten[:10]
    path = write(ten, tmp / "ten.csv")
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
            "settings priced": in_process.settings_priced, "replays": in_process.replays}


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
        curve = learning_curve(Path(tmp))
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
