#!/usr/bin/env python3
"""How fast `ultracluster sweep` times variants (docs/sweeps.md): prints a table.

1. The FSx example: 12 variants (3 tiers x 2 capacities x 2 checkpoint modes) of
   scenarios/faults-llama3-70b-trn2-sync.yaml with --hours 720, as the command runs them (this process, or an
   embedded Ray when that pays): wall seconds, target < 30 s on 2 cores.
2. Variants per second per core on scenarios/llama3.1-70b-trn2-ultraserver.yaml without --hours, timed one after
   another in one process (one core), by what they vary: target >= 5.

usage: python benchmarks/sweep.py [--skip-fsx]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

L70 = str(REPO / "scenarios" / "llama3.1-70b-trn2-ultraserver.yaml")
FSX = str(REPO / "scenarios" / "faults-llama3-70b-trn2-sync.yaml")
SWEEPS = {     # what the Llama-3.1-70B Trn2 variants vary
    "cluster.network.efa_gbps (8)": ["cluster.network.efa_gbps=100,200,400,800,1600,2400,3200,6400"],
    "instances x micro_batch (3 x 2)": ["cluster.instances=32,64,128", "training.micro_batch=1,2"],
    "training.global_batch (6)": ["training.global_batch=256,512,768,1024,1536,2048"],
    "faults.instance_mtbf_hours (8)": ["faults.instance_mtbf_hours=250,500,1000,2000,4000,8000,16000,32000"],
    "storage.capacity_tib (8)": ["storage={kind: fsx-lustre, deployment: PERSISTENT_2, capacity_tib: 24, "
                                 "throughput_mbps_per_tib: 250}", "checkpoint={every_steps: 200, mode: sync}"],
}


def per_core(label: str, vary: list[str]) -> tuple[str, int, float]:
    """Variants timed one after another in this process (one core): (label, variants, variants/s)."""
    from ultracluster.sweep import build
    from ultracluster.sweep.evaluate import evaluate_variant

    sets, flags = [], vary
    if label.startswith("storage"):
        sets, flags = vary, ["storage.capacity_tib=2.4,4.8,9.6,12,24,48,96,192"]
    plan = build(L70, sets, flags, None, None)
    t0 = time.perf_counter()
    rows = [evaluate_variant(v.scenario) for v in plan.variants]
    wall = time.perf_counter() - t0
    assert all(r["status"] in ("ok", "infeasible") for r in rows), [r["reason"] for r in rows]
    return label, len(rows), len(rows) / wall


def fsx() -> tuple[float, str]:
    from ultracluster.sweep import build, run_sweep

    out = Path(tempfile.mkdtemp(prefix="uc-sweep-bench-")) / "fsx"
    try:
        t0 = time.perf_counter()
        plan = build(FSX, ["training.budget_tokens=1.5e12"], ["storage.throughput_mbps_per_tib=125,250,1000",
                                                              "storage.capacity_tib=4.8,48", "checkpoint.mode=sync,async"],
                     None, 720.0)
        res = run_sweep(plan, out)
        return time.perf_counter() - t0, res.summary["evaluated_by"]
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-fsx", action="store_true")
    args = ap.parse_args()
    from ultracluster.runner import predict

    predict(L70, intervals=True)             # warm the process (imports, calibration files) once
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; load before: "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'sweep':<44} {'variants':>8} {'variants/s/core':>16}")
    for label, vary in SWEEPS.items():
        name, n, rate = per_core(label, vary)
        print(f"{name:<44} {n:>8} {rate:>16.1f}")
    if not args.skip_fsx:
        wall, by = fsx()
        print(f"FSx example, 12 variants, --hours 720: {wall:.1f} s ({by})")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
