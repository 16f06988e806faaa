#!/usr/bin/env python3
"""What one shard actor costs this machine: memory per actor (at rest and with a large gradient payload) and
the CPU seconds it takes to start, with real Ray actors on an embedded local Ray.

For each case: launch the actors (`actors.launch.launch_actors`), bring them to their steady state (their
state, three steps' profiles and payload all-reduces), then read each actor process's memory from /proc:
RSS, USS (its private pages: what it adds to the node's used memory, which Ray's memory monitor watches)
and the peak RSS (VmHWM); and the CPU seconds each spent before it answered (start-up: the worker process,
its imports, the chip model). The last lines fit the per-actor footprint as base + copies x payload bytes,
the figures `ultracluster/actors/launch.py` cites (ACTOR_BASE_BYTES, PAYLOAD_COPIES, ACTOR_START_CPU_S).

Usage: python benchmarks/actor_footprint.py [--actors N]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import ray

from ultracluster import load_scenario
from ultracluster.actors.launch import SHARD_RESOURCE, launch_actors
from ultracluster.shards.worker import payload_elements
from ultracluster.cluster import build_cluster

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


def proc_memory(pid: int) -> dict[str, float]:
    """RSS, USS (private clean + dirty) and peak RSS of a process, MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Rss", "Private_Clean", "Private_Dirty"):
            out[key] = int(rest.split()[0]) / 1024
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out["hwm"] = int(line.split()[1]) / 1024
    return {"rss": out["Rss"], "uss": out["Private_Clean"] + out["Private_Dirty"], "hwm": out["hwm"]}


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CASES = [  # (label, scenario file, overrides given the actor count n)
    ("smoke, 1 instance per actor", "smoke.yaml",
     lambda n: [f"cluster.instances={n}", "emulation.instances_per_actor=1"]),
    ("smoke, 64 MiB payload", "smoke.yaml",
     lambda n: [f"cluster.instances={n}", "emulation.instances_per_actor=1", "emulation.payload_scale=0.0334"]),
    ("405B on 1,024 trn2", "llama3.1-405b-trn2-16k.yaml",
     lambda n: [f"emulation.instances_per_actor={1024 // n}"]),
    ("rainier-131k (8,192 trn2u)", "rainier-131k.yaml",
     lambda n: [f"emulation.instances_per_actor={8192 // n}"]),
]


def measure(label: str, path: Path, sets: list[str]) -> dict:
    sc = load_scenario(path, ["training.steps=3", "training.warmup_steps=0", *sets])
    cluster = build_cluster(sc, int(sc.emulation.instances_per_actor))
    payload_mib = payload_elements(sc, cluster) * 8 / MIB
    t0 = time.perf_counter()
    with launch_actors(sc, cluster) as shards:     # returns once every actor answered
        start_s = time.perf_counter() - t0
        pids = ray.get([a.__ray_call__.remote(lambda self: os.getpid()) for a in shards.actors])
        start_cpu = [proc_cpu_s(p) for p in pids]
        shards.states()
        for step in range(3):
            shards.shard_steps(step)
            shards.reduce_payload(step)
        mem = [proc_memory(p) for p in pids]
    return {"label": label, "actors": len(pids), "payload_mib": payload_mib, "start_s": start_s,
            "start_cpu_s": statistics.median(start_cpu),
            "rss": statistics.median(m["rss"] for m in mem), "uss": statistics.median(m["uss"] for m in mem),
            "hwm": max(m["hwm"] for m in mem)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, default=16, help="actors per case (default 16)")
    args = ap.parse_args()
    n = args.actors
    ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             resources={SHARD_RESOURCE: n})
    load = os.getloadavg()[0]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
          f"ray {ray.__version__}; load average {load:.2f}; {time.strftime('%Y-%m-%d')}")
    print()
    print("| case | actors | payload MiB per actor | RSS MiB per actor (median) | USS MiB per actor (median) "
          "| peak RSS MiB (largest) | start-up CPU s per actor (median) | wall s to start them all |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for label, name, sets in CASES:
        r = measure(label, REPO / "scenarios" / name, sets(n))
        rows.append(r)
        print(f"| {r['label']} | {r['actors']} | {r['payload_mib']:.1f} | {r['rss']:.0f} | {r['uss']:.0f} "
              f"| {r['hwm']:.0f} | {r['start_cpu_s']:.2f} | {r['start_s']:.1f} |", flush=True)
    ray.shutdown()
    small, big = rows[0], rows[1]
    copies = (big["hwm"] - small["hwm"]) / (big["payload_mib"] - small["payload_mib"])
    base = max(r["hwm"] - copies * r["payload_mib"] for r in rows)
    print()
    print(f"per-actor footprint (peak RSS): {base:.0f} MiB + {copies:.2f} x the payload; "
          f"start-up {max(r['start_cpu_s'] for r in rows):.2f} CPU s per actor at most")


if __name__ == "__main__":
    main()
