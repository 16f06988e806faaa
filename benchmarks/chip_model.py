#!/usr/bin/env python3
"""Cost of the vectorized chip model for one step of a shard: 64 cores against 65,536 cores.

The chip model times each distinct pipeline chunk once (`chunk_times`); per step the shard draws the
jitter of the (replica, stage) groups it holds (`ShardWorker.profile`), so its cost should not grow with
the cores it stands for, only, slightly, with the groups.
Prints a table: cores, instances, median milliseconds per call over repeats, ratio to the smallest.

Usage: python benchmarks/chip_model.py [--repeats N]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

from ultracluster import load_scenario
from ultracluster.shards.worker import ShardWorker
from ultracluster.cluster import build_cluster


def scenario(instances: int):
    return load_scenario({
        "name": "bench-chip", "model": {"preset": "llama3.1-70b"},
        "training": {"seq_len": 8192, "global_batch": 4 * instances},
        "parallelism": {"tp": 32, "pp": 1},
        "cluster": {"instance": "trn1.32xlarge", "instances": instances},
        "faults": {"stragglers": {"fraction": 0.01, "slowdown": 1.2}},
    })


def cost_ms(instances: int, repeats: int) -> float:
    sc = scenario(instances)
    cl = build_cluster(sc, instances)          # one shard holding every core
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ShardWorker(sc, cl, cl.shards[0]).shard_step(0)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    cost_ms(2, 3)  # warm imports and caches
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    print(f"{'cores':>8} {'instances':>9} {'ms/call':>9} {'ratio':>6}")
    base = None
    for instances in (2, 64, 2048):
        ms = cost_ms(instances, args.repeats)
        base = base or ms
        print(f"{instances * 32:>8} {instances:>9} {ms:>9.2f} {ms / base:>6.2f}")


if __name__ == "__main__":
    main()
