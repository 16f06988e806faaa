#!/usr/bin/env python3
"""`ultracluster plan` at real size and under hostile input, each command in a fresh process with its own
embedded Ray, as a user runs it: wall seconds, exit code, bytes printed (stdout + stderr), the phases' seconds
from its progress lines, its peak RSS, and how many workers Ray's memory monitor killed (from the raylet logs
of the Ray sessions the command started).

The default commands are the ones issue 26 measures: a real-size search (Llama 3.1 405B on trn2 at 64 to 8,192
instances) and three hostile ones (400 instance counts, 100 million instances, --top 100000).

Then (`--only pieces`, or by default) the CPU seconds of evaluating the real-size search's layouts on two workers,
each with its own Evaluator as a Ray worker has: the table cut in its order into blocks of 2,048 dealt in turn
(how the search cut it before), against `ranking.blocks` (the blocks follow the clusters), each block going to
the worker with the fewer CPU seconds so far, as Ray's next free worker takes the next task.

Usage: python benchmarks/plan_limits.py [--only real|hostile|pieces]
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAY_TMP = Path("/tmp/ray")
REAL = ("real", ["scenarios/llama3.1-405b-trn2-16k.yaml", "--instances", "64,256,1024,4096,8192"])
HOSTILE = [
    ("hostile", ["scenarios/smoke.yaml", "--instances", ",".join(str(n) for n in range(1, 401))]),
    ("hostile", ["scenarios/smoke.yaml", "--instances", "100000000"]),
    ("hostile", ["scenarios/smoke.yaml", "--top", "100000"]),
]
PHASE = re.compile(r": (enumerating|evaluating|replaying): ([\d,]+) \w+ in ([\d.]+) s$")
KILLED = re.compile(r"Selected to kill:")      # one line per worker the memory monitor kills (raylet.out)


def sessions() -> set[Path]:
    return set(RAY_TMP.glob("session_2*")) if RAY_TMP.is_dir() else set()


def oom_kills(new_sessions: set[Path]) -> int:
    """Workers Ray's memory monitor killed, counted in the raylet logs of these Ray sessions."""
    kills = 0
    for s in new_sessions:
        for log in (s / "logs").glob("raylet*.out"):
            kills += sum(1 for line in log.read_text(errors="replace").splitlines() if KILLED.search(line))
    return kills


def measure(args: list[str]) -> dict:
    before = sessions()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "ultracluster", "plan", *[str(REPO / a) if a.startswith("scenarios/") else a
                                                               for a in args], "--out", str(Path(tmp) / "plan")]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=1800)
        wall = time.perf_counter() - t0
    printed = done.stdout + done.stderr
    phases = {m.group(1): float(m.group(3)) for m in map(PHASE.search, done.stderr.splitlines()) if m}
    layouts = next((m.group(2) for m in map(PHASE.search, done.stderr.splitlines()) if m and m.group(1) == "evaluating"),
                   "-")
    last = (done.stderr.strip().splitlines() or [""])[-1] if done.returncode else \
        next((ln for ln in done.stdout.splitlines() if ln.startswith("plan ")), "")
    return {"rc": done.returncode, "wall_s": wall, "bytes": len(printed.encode()), "lines": len(printed.splitlines()),
            "layouts": layouts, "phases": phases, "oom": oom_kills(sessions() - before), "last": last,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def pieces_cpu() -> None:
    """CPU seconds of two workers evaluating the real-size search: blocks in table order against blocks by cluster."""
    from ultracluster import load_scenario
    from ultracluster.layouts import ranking
    from ultracluster.layouts.steps import Evaluator
    from ultracluster.layouts.space import SearchSpace, enumerate_layouts

    base = load_scenario(REPO / REAL[1][0])
    table = enumerate_layouts(base, SearchSpace(instance_counts=tuple(int(n) for n in REAL[1][2].split(","))))
    sources = dict(Evaluator(base).sources)
    ordered = [table.iloc[lo:lo + 2048] for lo in range(0, len(table), 2048)]
    print()
    print(f"| {len(table):,} layouts of `{shown(REAL[1])}` on two workers | worker CPU s | all CPU s "
          "| layouts per CPU-second |")
    print("| --- | --- | --- | --- |")
    for label, pieces, dealt in [("table order, 2,048 per block, dealt in turn", ordered, "turn"),
                                 ("`ranking.blocks(table, 4)`: by cluster, largest first", ranking.blocks(table, 4),
                                  "free")]:
        workers = [Evaluator(base, None, sources), Evaluator(base, None, sources)]
        spent = [0.0, 0.0]
        for i, piece in enumerate(pieces):
            w = i % 2 if dealt == "turn" else spent.index(min(spent))
            t0 = time.process_time()
            ranking.evaluate_block(base, None, sources, piece, workers[w])
            spent[w] += time.process_time() - t0
        print(f"| {label} | {spent[0]:.1f}, {spent[1]:.1f} | {sum(spent):.1f} | {len(table) / sum(spent):,.0f} |",
              flush=True)


def shown(args: list[str]) -> str:
    text = " ".join(args)
    return text if len(text) <= 70 else text[:40] + " ... " + text[-25:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["real", "hostile", "pieces"])
    args = ap.parse_args()
    todo = [c for c in [REAL, *HOSTILE] if args.only in (None, c[0])]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.2f} at the start; {time.strftime('%Y-%m-%d')}")
    if todo:
        print()
        print("| plan command | exit | wall s | enumerate s | evaluate s | replay s | layouts | printed bytes (lines) "
              "| peak RSS MiB (largest so far) | memory-monitor kills | outcome |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for _, cmd in todo:
        r = measure(cmd)
        ph = r["phases"]
        print(f"| `{shown(cmd)}` | {r['rc']} | {r['wall_s']:.1f} | {ph.get('enumerating', 0):.1f} "
              f"| {ph.get('evaluating', 0):.1f} | {ph.get('replaying', 0):.1f} | {r['layouts']} "
              f"| {r['bytes']:,} ({r['lines']}) | {r['peak_rss_mib']:.0f} | {r['oom']} | {r['last'][:110]} |",
              flush=True)
    if args.only in (None, "pieces"):
        pieces_cpu()
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
