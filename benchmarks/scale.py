#!/usr/bin/env python3
"""UltraCluster scale on this machine: wall seconds per emulated step with real Ray actors.

For each scenario: start a local Ray (not timed), launch the shard actors, replay the steps, and print
wall seconds per step (Ray start and actor start excluded), peak RSS of the driver and of all actors
(VmHWM from /proc), actors, Ray calls per step (actor method invocations the driver makes), bytes
moved between actors per step (the gradient payload ring), and what the shards' answers cost per step: the
bytes of their answers (`ShardStep` arrays: the step's jitter; their stage times and slow ranks come once, in
their `ShardState`s) and the driver's seconds to collect and merge them (`merge_shard_steps`).

Usage: python benchmarks/scale.py [SCENARIO.yaml ...] [--steps N] [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time
from pathlib import Path

import ray

from ultracluster import load_scenario
from ultracluster.actors.launch import launch_actors
from ultracluster.cluster import build_cluster, resolve_instances_per_actor
from ultracluster.memory import infeasible_reason, stage_memory
from ultracluster.operators import library_for
from ultracluster.replay.engine import microbatches, step_comm, replay_steps
from ultracluster.replay.shard_steps import merge_shard_steps, merge_states
from ultracluster.replay.schedule import stage_programs

REPO = Path(__file__).resolve().parents[1]
DEFAULT = ["smoke.yaml", "llama3.1-405b-trn2-16k.yaml", "rainier-131k.yaml"]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Counted:
    """Counts `.remote` calls made on an actor handle's methods."""

    def __init__(self, handle, counter: list):
        self._h, self._c = handle, counter

    def __getattr__(self, name):
        method = getattr(self._h, name)

        class _M:
            def remote(_self, *a, **k):  # noqa: N805
                self._c[0] += 1
                return method.remote(*a, **k)
        return _M()


def shard_step_bytes(answers) -> int:
    """Bytes of the arrays in the shards' answers for one step."""
    return sum(getattr(p, f.name).nbytes for p in answers for f in dataclasses.fields(p)
               if hasattr(getattr(p, f.name), "nbytes"))


def bench(path: Path, steps: int, overrides: list[str] | None = None) -> dict:
    sc = load_scenario(path, [f"training.steps={steps}", "training.warmup_steps=0", *(overrides or [])])
    cluster = build_cluster(sc, resolve_instances_per_actor(sc))
    layout = cluster.layout
    programs = stage_programs(sc.parallelism.pp_schedule, layout.pp, microbatches(sc), layout.virtual_stages)
    assert infeasible_reason(stage_memory(sc, cluster, library_for(sc), programs)) is None
    with launch_actors(sc, cluster) as shards:
        state = merge_states(shards.states(), layout.pp, layout.pp * layout.virtual_stages, cluster.instances)
        comm = step_comm(sc, dataclasses.replace(cluster, degraded=state.degraded), state.times.tp_hide_bwd_s)
        calls = [0]
        shards.actors = [Counted(a, calls) for a in shards.actors]
        moved = []
        orig = shards.reduce_payload

        def counting(step):
            out = orig(step)
            moved.append(out[0])
            return out
        shards.reduce_payload = counting
        answers, answer_s = [], []
        ask = shards.shard_steps

        def timed_shard_steps(step):
            t = time.perf_counter()
            out = ask(step)
            merge_shard_steps(out, state, layout.dp * layout.pp)
            answer_s.append(time.perf_counter() - t)
            answers.append(shard_step_bytes(out))
            return out
        shards.shard_steps = timed_shard_steps
        t0 = time.perf_counter()
        recs, _ = replay_steps(sc, cluster, shards, state, comm, programs)
        wall = (time.perf_counter() - t0) / len(recs)
        pids = ray.get([a._h.__ray_call__.remote(lambda self: os.getpid()) for a in shards.actors])
        actor_rss = sum(peak_rss_mib(p) for p in pids)
    return {"scenario": sc.name, "chips": cluster.chips, "ranks": cluster.ranks, "actors": len(cluster.shards),
            "wall_s_per_step": wall, "driver_rss_mib": peak_rss_mib(os.getpid()), "actors_rss_mib": actor_rss,
            "calls_per_step": calls[0] / len(recs), "bytes_per_step": sum(moved) / len(moved),
            "shard_step_bytes_per_step": sum(answers) / len(answers),
            "shard_step_s_per_step": sum(answer_s) / len(answer_s), "step_time_s": recs[-1].step_time_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", default=[str(REPO / "scenarios" / s) for s in DEFAULT])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="scenario override for every scenario, e.g. emulation.instances_per_actor=64")
    args = ap.parse_args()
    ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
          f"ray {ray.__version__}")
    cols = ["scenario", "chips", "ranks", "actors", "wall_s_per_step", "driver_rss_mib", "actors_rss_mib",
            "calls_per_step", "bytes_per_step", "shard_step_bytes_per_step", "shard_step_s_per_step", "step_time_s"]
    print(" | ".join(cols))
    for s in args.scenarios:
        r = bench(Path(s), args.steps, args.set)
        print(" | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
