"""Command line → pipeline → exit code. Thin: parse, call, print, exit.

Exit codes: 0 ok; 2 bad input (every problem printed with its path); 3 the layout is infeasible
(summary.json still written, with the reason); 4 a runtime failure (Ray, a dead actor); 130 interrupted
(steps.csv keeps the finished steps).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, ScenarioError, \
    UltraclusterError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ultracluster", description="Emulate AWS Trainium training clusters on Ray.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check a scenario file; print every problem")
    v.add_argument("scenario", help="scenario YAML")
    v.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a field")
    r = sub.add_parser("run", help="emulate a scenario and write its run directory")
    r.add_argument("scenario", help="scenario YAML")
    r.add_argument("--out", help="run directory (default runs/<scenario name>)")
    r.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else an embedded local Ray)")
    r.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a field")
    r.add_argument("--quiet", action="store_true", help="print nothing but errors")
    r.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    return p


def _print_problems(err: ScenarioError) -> None:
    src = f" {err.source}" if getattr(err, "source", None) else ""
    print(f"error: scenario{src} has {len(err.problems)} problem(s):", file=sys.stderr)
    for prob in err.problems:
        print(f"  - {prob}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .scenario import load_scenario  # after parsing, so --help stays fast
    try:
        scenario = load_scenario(args.scenario, args.set)
        if args.command == "validate":
            print(f"ok: {args.scenario} ({scenario.name}: {scenario.ranks} ranks, tp {scenario.parallelism.tp} "
                  f"pp {scenario.parallelism.pp} dp {scenario.parallelism.dp})")
            return EXIT_OK
        from .pipeline import run
        from .report import format_summary
        out = Path(args.out) if args.out else Path("runs") / scenario.name
        finished: list[int] = []

        def progress(rec) -> None:
            finished.append(rec.step)
            if not args.quiet:
                tag = "warm-up" if rec.warmup else "step"
                print(f"  {tag} {rec.step}: {rec.step_time_s:.4g} s emulated ({rec.wall_s:.2f} s wall)",
                      file=sys.stderr, flush=True)

        try:
            report = run(scenario, out=out, address=args.address, on_step=progress)
        except KeyboardInterrupt:
            print(f"interrupted after {len(finished)} step(s); {out / 'steps.csv'} keeps them", file=sys.stderr)
            return EXIT_INTERRUPTED
        if not args.quiet:
            print(json.dumps(report.summary, indent=2, default=str) if args.json else format_summary({**report.summary, **report.emulation}))
            print(f"run directory: {out}")
        if not report.summary["feasible"]:
            if args.quiet:
                print(f"infeasible: {report.summary['reason']}", file=sys.stderr)
            return EXIT_INFEASIBLE
        return EXIT_OK
    except ScenarioError as err:
        _print_problems(err)
        return EXIT_BAD_INPUT
    except UltraclusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())
