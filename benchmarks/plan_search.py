#!/usr/bin/env python3
"""`ultracluster plan` speed and fidelity on this machine: layouts timed per second, and the best layout's
replay against its prediction and against the scenario's own layout.

1. The search (enumerate and time every layout; no replays) in a fresh process each
   time, so every cache starts cold: layouts, feasible, search wall seconds, layouts/s (median of --repeat).
2. One full plan with the top layouts replayed by `run` (real Ray actors on an embedded Ray): the largest
   difference between a replayed step time and its fast-path prediction.
3. The scenario's own layout and the best layout, both as `run` predicts them (`predict`, the same numbers).

Usage: python benchmarks/plan_search.py [SCENARIO.yaml] [--repeat N] [--top K]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "scenarios" / "llama3.1-70b-trn1-32.yaml"
CALCULON_LAYOUTS_PER_S = 232      # Calculon's layout search on this machine (issue 14)
SEARCH = """
import json, sys, time
from ultracluster.plan import plan
cpu = time.process_time()
r = plan(sys.argv[1], replay=False)
s = r.summary
print(json.dumps({**{k: s[k] for k in ("layouts_evaluated", "feasible", "wall_s", "layouts_per_s", "fast_path")},
                  "cpu_s": time.process_time() - cpu}))
"""


def search_once(scenario: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", SEARCH, str(scenario)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    scenario = Path(args.scenario)
    load0 = os.getloadavg()
    runs = [search_once(scenario) for _ in range(args.repeat)]
    load1 = os.getloadavg()

    from ultracluster import load_scenario
    from ultracluster.runner import predict
    from ultracluster.plan import plan

    with tempfile.TemporaryDirectory() as tmp:
        full = plan(scenario, top=args.top, out=Path(tmp) / "plan")
    s = full.summary
    worst = max((abs(r["difference"]) for r in s["replayed"] if r["difference"] is not None), default=float("nan"))
    base = load_scenario(scenario)
    own = predict(base)
    best = s["best_tokens_per_s"]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}; "
          f"load average {load0[0]:.2f} before the searches, {load1[0]:.2f} after")
    print(f"scenario: {base.name}")
    print()
    print("| layouts | feasible | search wall s, median of %d (min-max) | layouts/s (at the median) | best run "
          "| CPU s of the plan call, median | layouts per CPU-second | vs Calculon (%d/s) |"
          % (args.repeat, CALCULON_LAYOUTS_PER_S))
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    wall = statistics.median(r["wall_s"] for r in runs)
    cpu = statistics.median(r["cpu_s"] for r in runs)
    n = runs[0]["layouts_evaluated"]
    rate = n / wall
    print(f"| {n:,} | {runs[0]['feasible']:,} | {wall:.3f} ({min(r['wall_s'] for r in runs):.3f}-"
          f"{max(r['wall_s'] for r in runs):.3f}) | {rate:,.0f} | {n / min(r['wall_s'] for r in runs):,.0f} | "
          f"{cpu:.3f} | {n / cpu:,.0f} | {rate / CALCULON_LAYOUTS_PER_S:.0f}x |")
    print()
    print(f"fast path parts: {runs[0]['fast_path']['parts']}")
    print(f"replayed top {len(s['replayed'])} with `run`: largest difference from the fast path {100 * worst:.3f} %")
    print()
    print("| layout | step s (run) | tokens/s | MFU |")
    print("| --- | --- | --- | --- |")
    print(f"| scenario's own: {own['layout']} | {own['step_time_s']:.2f} | {own['tokens_per_s']:,.0f} | "
          f"{100 * own['mfu']:.1f} % |")
    rep = s["replayed"][0]
    print(f"| plan's best: {best['label']} | {rep['replay_step_time_s']:.2f} | {rep['replay_tokens_per_s']:,.0f} | "
          f"{100 * rep['replay_mfu']:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
