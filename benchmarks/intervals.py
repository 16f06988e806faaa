#!/usr/bin/env python3
"""Cost of a prediction interval: one vectorized evaluation over the factor settings against one replayed
step per setting.

`uncertainty.interval` times (with `layouts.setting_times.setting_step_times`) the central setting and five
points of every uncertain factor's range as rows of one table (the planner's fast path with a calibration per row), then the settings beside the band's ends
(docs/uncertainty.md). The comparison replays one step per grid setting in process (`layouts.setting_times.replayed_step_time`,
1 + 4 x factors replays; the settings beside the ends are not replayed). Prints a table: scenario,
chips, factors, median seconds of the interval over repeats, the same settings replayed one by one, and the
largest relative difference between the two ways' step times over the settings.

Then the degraded rows: each Trn2 scenario of DEGRADED with one degraded instance (`faults.degraded`, a quarter
of its EFA NICs): the run's own time in this process (`runner.predict`), what its interval adds on the fast path
(`layouts.setting_times`, the slowest replica's comm: `replay.degraded.slowest_replica_comm`), what it added when
every setting was replayed (the way before, 53 in-process replays), and the largest step difference between the
two over the grid's settings. Of what the fast path adds, the seconds inside the network model (`network.
collective_time(s)` and `concurrent_time(s)`, as the Evaluator calls them, timed in one more cold interval): the rest
is the fast path's own work per setting (shapes, the comm's pieces, pipelines, tables) and the interval's.

Usage: python benchmarks/intervals.py [--repeats N] [--degraded-only] [SCENARIO ...]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.runner import predict
from ultracluster.layouts.setting_times import one_step, replayed_step_time, setting_step_times
from ultracluster.uncertainty import _grid, factor_value, factors_for, interval

HERE = Path(__file__).resolve().parents[1] / "scenarios"
DEFAULT = ("smoke.yaml", "llama2-70b-tp32pp4-trn2-64.yaml", "llama3.1-70b-trn3-gen1.yaml",
           "llama3.1-405b-trn2-16k.yaml", "rainier-131k.yaml")


def measure(path: Path, repeats: int) -> dict:
    sc = load_scenario(path)
    point = predict(sc)["step_time_s"]
    cluster = build_cluster(sc, 1)
    factors = factors_for(cluster, pinned=False)
    cal = cluster.calibration
    settings = [cal] + [cal.with_(**{f.name: float(x)}) for f in factors for x in _grid(f, factor_value(cal, f.name))]
    vec, rep = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        interval(sc, point, times=setting_step_times)
        vec.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    one = one_step(sc)
    replayed = np.array([replayed_step_time(one, c) for c in settings])
    rep.append(time.perf_counter() - t0)
    fast = setting_step_times(sc, settings)
    return {"scenario": path.stem, "chips": cluster.chips, "factors": len(factors),
            "interval_s": statistics.median(vec), "replayed_s": statistics.median(rep),
            "max_diff_pct": float(np.max(np.abs(fast / replayed - 1))) * 100}


DEGRADED = ("llama2-70b-tp32pp4-trn2-64.yaml", "mixtral-8x7b-trn2.yaml", "llama3.1-8b-128k-cp16-trn2.yaml")
ONE_DEGRADED = "faults.degraded=[{instances: [1], efa_nics: 4}]"      # one instance at 4 of its 16 EFA NICs


@contextlib.contextmanager
def network_seconds():
    """Yields a list whose one number, on exit, is the seconds spent in the network model's `collective_time` and
    `concurrent_time`, and their settings-axis forms `collective_times` and `concurrent_times`, as the fast path's
    Evaluator calls them (`layouts.evaluator`'s names, wrapped meanwhile)."""
    from ultracluster.layouts import evaluator

    out, kept = [0.0], {n: getattr(evaluator, n) for n in ("collective_time", "concurrent_time", "collective_times",
                                                             "concurrent_times")}

    def timed(f):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                out[0] += time.perf_counter() - t0
        return call

    for n, f in kept.items():
        setattr(evaluator, n, timed(f))
    try:
        yield out
    finally:
        for n, f in kept.items():
            setattr(evaluator, n, f)


def measure_degraded(path: Path, repeats: int) -> dict:
    """The run's own time, what its interval adds (fast path; every setting replayed), the largest difference."""
    from ultracluster.layouts import setting_times as st
    from ultracluster.runner import interval_keys

    sc = load_scenario(path, [ONE_DEGRADED])
    healthy = load_scenario(path)
    run_s, fast_s, replay_s, healthy_s = [], [], [], []
    for _ in range(repeats):
        h = predict(healthy)
        st._STEP_TIMES.clear()
        st._EVALUATORS.clear()          # cold: what a run pays for its interval
        t0 = time.perf_counter()
        interval_keys(healthy, h)
        healthy_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        s = predict(sc)
        run_s.append(time.perf_counter() - t0)
        st._STEP_TIMES.clear()
        st._EVALUATORS.clear()          # cold: what a run pays for its interval
        t0 = time.perf_counter()
        interval_keys(sc, s)
        fast_s.append(time.perf_counter() - t0)
    st._STEP_TIMES.clear()
    st._EVALUATORS.clear()
    with network_seconds() as network_s:        # one more cold interval, its network model's share
        interval_keys(sc, s)
    cluster = build_cluster(sc, 1)
    cal = cluster.calibration
    settings = [cal] + [cal.with_(**{f.name: float(x)}) for f in factors_for(cluster, pinned=False)
                        for x in _grid(f, factor_value(cal, f.name))]
    fast = st.setting_step_times(sc, settings)
    keep = st.degraded_parts_of
    st.degraded_parts_of = lambda one: None          # the way before: every setting replayed in process
    try:
        st._STEP_TIMES.clear()
        st._EVALUATORS.clear()          # cold: what a run pays for its interval
        t0 = time.perf_counter()
        interval_keys(sc, s)
        replay_s.append(time.perf_counter() - t0)
        replayed = st.setting_step_times(sc, settings)
    finally:
        st.degraded_parts_of = keep
    return {"scenario": path.stem, "chips": cluster.chips, "run_s": statistics.median(run_s),
            "fast_s": statistics.median(fast_s), "replay_s": statistics.median(replay_s),
            "healthy_s": statistics.median(healthy_s), "network_s": network_s[0],
            "max_diff_pct": float(np.max(np.abs(fast / replayed - 1))) * 100}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--degraded-only", action="store_true", help="only the degraded rows")
    ap.add_argument("scenarios", nargs="*", default=[str(HERE / n) for n in DEFAULT])
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("\n| scenario | chips | factors | interval s (vectorized, median) | the settings replayed one by one, s "
          "| speed-up | largest step difference (jitter averaged) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for p in [] if args.degraded_only else args.scenarios:
        r = measure(Path(p), args.repeats)
        print(f"| {r['scenario']} | {r['chips']:,} | {r['factors']} | {r['interval_s']:.3f} | {r['replayed_s']:.3f} "
              f"| {r['replayed_s'] / r['interval_s']:.1f}x | {r['max_diff_pct']:.3f} % |")
    print("\n| one degraded instance | chips | run ms (in process, median) | interval adds, fast path ms | "
          "x the run | of which the network model ms | interval adds, every setting replayed ms | x the run "
          "| the healthy run's interval ms | largest step difference |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in DEGRADED:
        r = measure_degraded(HERE / name, args.repeats)
        print(f"| {r['scenario']} | {r['chips']:,} | {r['run_s'] * 1e3:.1f} | {r['fast_s'] * 1e3:.1f} | "
              f"{r['fast_s'] / r['run_s']:.2f}x | {r['network_s'] * 1e3:.1f} | {r['replay_s'] * 1e3:.0f} | "
              f"{r['replay_s'] / r['run_s']:.1f}x | "
              f"{r['healthy_s'] * 1e3:.1f} | {r['max_diff_pct']:.3f} % |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
