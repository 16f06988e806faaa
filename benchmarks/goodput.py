#!/usr/bin/env python3
"""Long runs: wall seconds to emulate 30 days of training with failures, checkpoints and storage.

For each scenario: the step is replayed once in process (`ultracluster.runner.predict`, not timed), then
`goodput.simulate` emulates the horizon (timed) with the scenario's failures, checkpoints and FSx model.
Prints the emulated steps, how many of them were simulated one by one (the rest were fast-forwarded), the
failures, the goodput and the wall seconds; and, for scale, the seconds the same run would take stepping
through every step at the measured cost of a simulated step.

Usage: python benchmarks/goodput.py [SCENARIO.yaml ...] [--days D] [--set key=value ...]
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.goodput import simulate
from ultracluster.runner import predict

REPO = Path(__file__).resolve().parents[1]
DEFAULT = {
    "goodput-llama3-405b-16k.yaml": [],
    "faults-llama3-70b-trn2-sync.yaml": [],
    "storage-data-stall-scratch.yaml": ["faults.instance_mtbf_hours=500", "checkpoint.every_steps=500",
                                        "checkpoint.mode=async"],
    "rainier-131k.yaml": ["storage.kind=fsx-lustre", "storage.deployment=PERSISTENT_2", "storage.capacity_tib=480",
                          "storage.throughput_mbps_per_tib=1000", "checkpoint.every_steps=50",
                          "checkpoint.mode=async", "faults.instance_mtbf_hours=5000"],
}


def bench(path: Path, sets: list[str], days: float) -> dict:
    sc = load_scenario(path, sets + ["training.steps=1", "training.warmup_steps=0"])
    s = predict(sc)
    busy = s["step_time_s"] - s["data_stall_s"] - s["checkpoint_s"]
    cluster = build_cluster(sc, 1)
    t0 = time.perf_counter()
    r = simulate(sc, cluster, busy, days * 24)
    wall = time.perf_counter() - t0
    g = r.summary()
    per_step = wall / max(1, r.explicit_steps)
    return {"scenario": sc.name, "chips": cluster.chips, "instances": cluster.instances, "step_s": g["step_s"],
            "steps": r.steps_run, "explicit": r.explicit_steps, "failures": len(r.failures),
            "goodput": g["goodput"], "closed": g["closed_form_goodput"], "wall": wall,
            "stepwise": per_step * r.steps_run}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", help="scenario YAMLs (default: the storage and fault scenarios)")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--set", action="append", default=[], help="override for every scenario")
    args = ap.parse_args()
    todo = [(Path(p), args.set) for p in args.scenarios] or \
        [(REPO / "scenarios" / name, sets + args.set) for name, sets in DEFAULT.items()
         if (REPO / "scenarios" / name).exists()]
    print(f"{args.days:g} days of training; {platform.machine()}, Python {platform.python_version()}")
    head = ("scenario", "chips", "step s", "steps", "simulated", "failures", "goodput", "closed form",
            "wall s", "step by step s")
    rows = []
    for path, sets in todo:
        b = bench(path, sets, args.days)
        rows.append((b["scenario"], f"{b['chips']:,}", f"{b['step_s']:.3f}", f"{b['steps']:,}", f"{b['explicit']:,}",
                     f"{b['failures']}", f"{100 * b['goodput']:.2f} %", f"{100 * b['closed']:.2f} %",
                     f"{b['wall']:.2f}", f"{b['stepwise']:,.0f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
